"""The backend registry (relayish/backend/registry.py): one record per backend, read by
rl.compile, rl.optim.minimize (its "auto" policy included) and the command line."""
import subprocess
import sys

import numpy as np
import pytest

import relayish as rl
from relayish.backend import registry
from relayish.optim import backends, cache


def square_sum():
    x = rl.var("x", shape=(2,), dtype="float64")
    return rl.Function([x], rl.sum((x - rl.const(np.array([1.0, -2.0]))) ** 2.0))


@pytest.fixture
def extra_backend(monkeypatch):
    """A third backend, "traced-interp": the interpreter behind a compile step with a
    modelled setup cost of zero, registered for the test only."""
    monkeypatch.setattr(registry, "_BACKENDS", dict(registry._BACKENDS))
    monkeypatch.setattr(cache, "PROBLEMS", cache.ProblemCache())
    compiled = []

    def load():
        interpret = registry.get("interpreter").load()

        def compile_fn(f_or_mod, device="cpu", limits=None):
            compiled.append(f_or_mod)
            return interpret(f_or_mod, device, limits)
        return compile_fn
    registry.register(registry.Backend(
        name="traced-interp", load=load, devices=("cpu",), takes_limits=False,
        array_namespace=lambda: np, summary="the interpreter, as a compiling backend",
        setup_cost=lambda method, calls: 0.0))
    return compiled


def test_the_registered_backends():
    assert registry.names()[:2] == ("jax", "interpreter")
    assert registry.all_devices() == ("cpu", "gpu")
    jax, interp = registry.get("jax"), registry.get("interpreter")
    assert jax.compiles and jax.takes_limits and jax.jax_traceable
    assert not interp.compiles and not interp.takes_limits and interp.devices == ("cpu",)
    assert interp.array_namespace() is np
    assert jax.device_name("CUDA") == "gpu" and interp.device_name("gpu") is None


def test_listing_the_backends_imports_no_jax():
    code = ("import sys\nfrom relayish.backend import registry\n"
            "assert registry.names() and registry.get('jax').compiles\n"
            "assert 'jax' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("kwargs, words", [
    (dict(backend="tpu"), "unknown backend 'tpu'; expected one of jax, interpreter"),
    (dict(backend=None), "backend must be one of jax, interpreter, got NoneType None"),
    (dict(device="abacus"), "unknown device 'abacus'; expected one of cpu, gpu"),
    (dict(backend="interpreter", device="gpu"),
     "the interpreter runs on the cpu only, got device='gpu'"),
    (dict(backend="interpreter", limits={"max_ops": 3}), "the interpreter takes none"),
])
def test_compile_errors_name_what_is_registered(kwargs, words):
    with pytest.raises(rl.RelayishError) as info:
        rl.compile(square_sum(), **kwargs)
    assert words in str(info.value)


def test_minimize_errors_name_what_is_registered():
    with pytest.raises(rl.RelayishError, match="choose one of auto, jax, interpreter"):
        rl.optim.minimize(square_sum(), [0.0, 0.0], backend="tpu")
    with pytest.raises(rl.RelayishError, match="interpreter runs on the cpu only"):
        rl.optim.minimize(square_sum(), [0.0, 0.0], backend="interpreter", device="gpu")
    with pytest.raises(rl.RelayishError, match="unknown device 'abacus'; choose one of cpu"):
        rl.optim.minimize(square_sum(), [0.0, 0.0], device="abacus")


def test_a_registered_backend_is_usable_everywhere(extra_backend):
    """One register call: rl.compile, minimize (named, and as auto's compiling choice when it
    is the cheapest) and the command line's choices all see it."""
    f = square_sum()
    assert float(rl.compile(f, backend="traced-interp")(np.zeros(2))) == 5.0
    res = rl.optim.minimize(f, [0.0, 0.0], backend="traced-interp", method="bfgs")
    assert res.converged and res.backend == "traced-interp"
    np.testing.assert_allclose(res.x, [1.0, -2.0], atol=1e-6)
    # auto: the interpreter first, then the cheapest compiling backend (cost 0 beats jax)
    res = rl.optim.minimize(f, [3.0, 3.0], method="bfgs")
    assert res.backend == "interpreter+traced-interp" and res.converged
    assert "traced-interp" in backends.backend_choices()
    from relayish.cli import _parser
    args = _parser().parse_args(["run", "f.rly", "--backend", "traced-interp"])
    assert args.backend == "traced-interp"
    assert len(extra_backend) >= 3


def test_auto_does_not_hide_a_failure_inside_relayish(monkeypatch):
    """A program the compiling backend refuses keeps auto interpreted; a bug while building
    the compiled evaluation (hessian.InternalCompileError) surfaces instead."""
    from relayish.optim.newton_xla import DeviceNewton
    monkeypatch.setattr(cache, "PROBLEMS", cache.ProblemCache())
    monkeypatch.setattr(backends, "compile_cost", lambda method, calls, backend: 0.0)

    def check(self):
        raise ValueError("boom")
    monkeypatch.setattr(DeviceNewton, "check", check)
    with pytest.raises(rl.CompileError, match=r"(?s)ValueError: boom.*bug in relayish"):
        rl.optim.minimize(square_sum(), [0.0, 0.0], method="newton")
