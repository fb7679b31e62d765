"""backend="auto" (the default): interpreted until the interpreter has spent the modelled
compile cost, then compiled with jax (problem.AutoProblem)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import relayish as rl
from relayish.backend import registry
from relayish.optim import backends, cache

from optim_problems import (EXAMPLES, refuse_recursion_early, rosenbrock, rosenbrock_module,
                            rosenbrock_start)


@pytest.fixture
def fresh_cache(monkeypatch):
    monkeypatch.setattr(cache, "PROBLEMS", cache.ProblemCache())


@pytest.fixture
def no_budget(monkeypatch, fresh_cache):
    """Compiling is modelled as free: auto switches after its first interpreted evaluation."""
    monkeypatch.setattr(backends, "compile_cost", lambda method, calls, backend: 0.0)


def test_the_main_job_runs_on_the_interpreter_without_importing_jax():
    """README's main job: a 2-variable Rosenbrock takes milliseconds interpreted, against
    seconds of XLA compilation; auto must not even import jax for it."""
    code = ("import sys, relayish as rl\n"
            f"mod = rl.parse(open({os.path.join(EXAMPLES, 'rosenbrock.rly')!r}).read())\n"
            "res = rl.optim.minimize(mod, [-1.2, 1.0])\n"
            "assert res.converged and res.backend == 'interpreter', res\n"
            "assert 'jax' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_auto_is_the_default_and_reports_the_interpreter(fresh_cache):
    res = rl.optim.minimize(rosenbrock_module(), [-1.2, 1.0])
    assert res.backend == "interpreter" and res.converged and res.n_iter == 25


@pytest.mark.parametrize("method", ["newton", "newton-cg", "bfgs"])
def test_switching_mid_run_keeps_the_iterates(method, no_budget):
    """Compiled after the first evaluation, the run takes the interpreter's steps; the next
    call on the same objective is compiled from the start (Newton: the XLA loop)."""
    f, x0 = rosenbrock(2), rosenbrock_start(2)
    reference = rl.optim.minimize(f, x0, method=method, backend="interpreter", max_iter=300,
                                  tol=1e-6)
    res = rl.optim.minimize(f, x0, method=method, max_iter=300, tol=1e-6)
    assert res.backend == "interpreter+jax" and res.converged and reference.converged
    # the same steps; compiled and interpreted programs round differently, which the long
    # Rosenbrock valley amplifies over tens of iterations: compare the first ten closely
    np.testing.assert_allclose([h["fun"] for h in res.history[:10]],
                               [h["fun"] for h in reference.history[:10]], rtol=1e-8)
    np.testing.assert_allclose(res.x, [1.0, 1.0], atol=1e-5)
    again = rl.optim.minimize(f, x0, method=method, max_iter=300, tol=1e-6)
    assert again.backend == "jax" and again.converged
    np.testing.assert_allclose(again.x, res.x, atol=1e-5)


class TickingClock:
    """A stand-in for the time module whose process_time advances 1 ms per reading: every
    interpreted evaluation then costs exactly 1 ms, whatever the machine's load."""

    def __init__(self):
        self.now = 0.0

    def process_time(self):
        self.now += 1e-3
        return self.now


def test_the_budget_adds_up_across_calls(monkeypatch, fresh_cache):
    """Multi-start: each call's interpreted time counts, so repeated calls end up compiled."""
    # a first run takes about 42 evaluations (42 ms on this clock): under the 50 ms budget, so
    # it stays interpreted, and the second crosses the budget mid-run
    monkeypatch.setattr(backends, "time", TickingClock())
    monkeypatch.setattr(backends, "compile_cost", lambda method, calls, backend: 0.05)
    f = rosenbrock(2)
    used = [rl.optim.minimize(f, rosenbrock_start(2) + 0.01 * k).backend for k in range(40)]
    assert used[0] == "interpreter" and used[-1] == "jax"
    assert used.count("interpreter+jax") == 1


def test_a_program_jax_refuses_stays_on_the_interpreter(no_budget, monkeypatch):
    # the recursion depth depends on the variable's value, and the recursive call is not a
    # tail call: no XLA program for it (a tail recursion is one while loop, its gradient too:
    # tests/backend/test_jax_dynamic_tail.py)
    refuse_recursion_early(monkeypatch)
    mod = rl.parse("""
    def @shrink(%x: Tensor[(2), float64], %n: Tensor[(), float64]) -> Tensor[(), float64] {
      if (%n > 0f64) { @shrink(%x * 0.9f64, %n - 1f64) * 0.99f64 } else { sum(%x * %x) }
    }
    def @main(%x: Tensor[(2), float64]) -> Tensor[(), float64] {
      @shrink(%x, sum(%x))
    }
    """)
    res = rl.optim.minimize(mod, np.array([1.0, 2.0]), method="bfgs")
    assert res.converged and res.backend == "interpreter"
    assert cache.PROBLEMS.entries[0][2].compile_error is not None


def test_compile_cost_model_grows_with_the_program():
    jax = registry.get("jax")
    small = backends.compile_cost("newton", 30, jax)
    assert backends.compile_cost("newton", 3000, jax) > small + 3.0
    assert backends.compile_cost("bfgs", 30, jax) < small
    assert backends.op_calls(rosenbrock(2)) > 5


def test_a_gpu_device_means_jax_from_the_start(fresh_cache):
    """device="gpu" is only jax's: auto compiles at once rather than interpreting on the cpu
    (and where jax has no GPU says so, as backend="jax" does)."""
    import jax
    if any(d.platform == "gpu" for d in jax.devices()):
        res = rl.optim.minimize(rosenbrock(2), rosenbrock_start(2), device="gpu")
        assert res.backend == "jax" and res.converged
        return
    with pytest.raises(rl.RelayishError, match="gpu"):
        rl.optim.minimize(rosenbrock(2), rosenbrock_start(2), device="gpu")
