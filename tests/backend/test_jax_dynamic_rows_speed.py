"""What makes a loop step over dynamic structure cheap (issue 17; notes/jax-backend.md, "Per
step, in XLA operations"), pinned by its values: the slots an iteration makes are passed through
its switch and stored as ("own", k) in a family row, and the backward loop leaves a row's own
slots unwritten (dead after its step) -- unless the program reads the pool after the loop, where
the trace restarts and writes them (dynamic_rows.flush). Checked against the interpreter, and
which of the two traces ran."""
import os
import sys

import numpy as np
import pytest

import relayish as rl
import relayish.backend.jax.function as jax_function

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples"))
from treelstm import init_params, treelstm_module  # noqa: E402
from test_jax_settle import same_as_the_interpreter  # noqa: E402

# A hand-written backpropagator chain over a list: row i's closure adds to its child's slot and
# halves its own slot %a; @main runs the chain `passes` times and reads the root's own slot.
CHAIN = """
type L {{ Nil, Cons(Tensor[(3), float64], L) }}

def @fold(%bp: ref(fn () -> ()), %w: Tensor[(3), float64], %l: L)
    -> (Tensor[(3), float64], ref(Tensor[(3), float64])) {{
  match (%l) {{
    Nil => (zeros_like(%w), ref(zeros_like(%w))),
    Cons(%x, %rest) => {{
      let %p = @fold(%bp, %w, %rest);
      let %a = ref(zeros_like(%w) + %x);
      let %prev = !%bp;
      let %u = %bp := fn () {{
        let %q = %p.1;
        let %z = %q := !%q + !%a * %w;
        let %h = %a := !%a * 0.5f64;
        %prev()
      }};
      (tanh(%p.0 * %w + %x), %a)
    }}
  }}
}}

def @main(%w: Tensor[(3), float64], %l: L) -> Tensor[(3), float64] {{
  let %bp = ref(fn () {{ () }});
  let %r = @fold(%bp, %w, %l);
  let %s = %r.1;
  let %u = %s := %w + 1f64;
  {calls}
  {result}
}}
"""


@pytest.fixture()
def evaluations(monkeypatch):
    """The batching flag of every evaluation of @main a trace runs (a restart adds False)."""
    seen = []
    original = jax_function.JaxFunction._evaluate

    def counted(self, entry, leaves, batching):
        seen.append(batching)
        return original(self, entry, leaves, batching)
    monkeypatch.setattr(jax_function.JaxFunction, "_evaluate", counted)
    return seen


def _list(mod, xs):
    nil, cons = mod.get_constructor("Nil"), mod.get_constructor("Cons")
    v = rl.ConstructorValue(nil, [])
    for x in reversed(xs):
        v = rl.ConstructorValue(cons, [x, v])
    return v


@pytest.mark.parametrize("passes, result", [
    (2, "!%s + %r.0"),          # a second backward pass reads the own slots again
    (1, "!%s + %r.0"),          # the root's own slot read after the loop
    (2, "%r.0"),                # only the second pass reads them
])
def test_own_slots_read_after_the_backward_loop_restart_the_trace(evaluations, passes,
                                                                  result):
    calls = " ".join(f"let %v{k} = (!%bp)();" for k in range(passes))
    mod = rl.infer_type(rl.parse(CHAIN.format(calls=calls, result=result)))
    run = rl.compile(mod, backend="jax", capacity={"nodes": 16})
    rng = np.random.default_rng(0)
    w = rng.normal(size=3)
    for n in (0, 1, 2, 7, 15):
        value = _list(mod, list(rng.normal(size=(n, 3))))
        np.testing.assert_allclose(run(w, value), rl.evaluate(mod, w, value), rtol=1e-12,
                                   atol=1e-12)
    assert run.trace_count == 1
    assert evaluations == [True, False]       # the own slots' reads restarted the trace once


def test_the_treelstm_gradient_leaves_its_own_slots_unwritten(evaluations):
    dims = dict(vocab=20, embed=6, hidden=4, classes=3)
    mod = treelstm_module(**dims)
    params = init_params(np.random.default_rng(0), **dims)
    vg = rl.value_and_grad(mod, argnums=tuple(range(7)))
    run = rl.compile(vg, backend="jax", capacity={"nodes": 32})
    same_as_the_interpreter(run, vg, mod, params, np.random.default_rng(1), (1, 2, 9, 16),
                            dims["vocab"], label=1)
    assert run.trace_count == 1
    assert evaluations == [True]              # nothing reads the pools after the loop
