"""The debug modes (issue 14): debug_nans stops at the first binding with a NaN or an Inf
(forward or backward pass, interpreter or jax backend); debug_alloc turns buffer sharing off
and poisons released buffers, and catches a planted ownership bug."""
import numpy as np
import pytest

import relayish as rl
from relayish.backend.interp import steps

from test_debugger import raw_grad

MODEL = """\
type Tree {
  Leaf(float64),
  Node(Tree, Tree),
}

def @model(%w: float64, %t: Tree) -> float64 {
  match (%t) {
    Leaf(%v) => {
      let %h = sqrt(%v * %w);
      %h
    },
    Node(%a, %b) => {
      let %ha = @model(%w, %a);
      let %hb = @model(%w, %b);
      tanh(%ha + %hb)
    },
  }
}

def @main(%w: float64, %t: Tree) -> float64 { @model(%w, %t) }
"""


@pytest.fixture
def model():
    mod = rl.parse(MODEL, filename="model.rly")
    leaf, node = mod.constructors["Leaf"], mod.constructors["Node"]

    def tree(*values):
        t = rl.ConstructorValue(leaf, [np.array(values[0])])
        for v in values[1:]:
            t = rl.ConstructorValue(node, [t, rl.ConstructorValue(leaf, [np.array(v)])])
        return t
    return mod, tree


def test_debug_nans_names_the_binding_its_op_position_and_inputs():
    mod = rl.parse("def @main(%x: Tensor[(3), float64]) -> float64 {\n"
                   "  let %y = log(%x);\n  let %z = %y * 2f64;\n  sum(%z)\n}", filename="m.rly")
    x = np.array([1.0, -2.0, 3.0])
    assert np.isnan(rl.evaluate(mod, x))                     # off: IEEE, no error
    with pytest.raises(rl.EvaluationError) as err:
        rl.evaluate(mod, x, debug_nans=True)
    msg = str(err.value)
    assert "NaN in %y = log(%x) (op 'log') in @main at line 2, column 12 of m.rly" in msg
    assert "input %x: float64[3] min -2 max 3 nan 0 inf 0" in msg
    with pytest.raises(rl.EvaluationError, match=r"Inf in %y = log\(%x\)"):
        rl.evaluate(mod, np.array([1.0, 0.0, 3.0]), debug_nans=True)
    assert rl.evaluate(mod, np.ones(3), debug_nans=True) == 0.0


def test_debug_nans_finds_a_nan_in_the_backward_pass_of_a_recursive_model(model):
    mod, tree = model
    t = tree(1.0, 0.0, 4.0)                 # sqrt(0 * w) is fine; its derivative is not
    assert np.isfinite(rl.evaluate(mod, 2.0, t, debug_nans=True))   # the forward pass is clean
    g = raw_grad(mod)
    assert np.isnan(rl.evaluate(g, 2.0, t))
    with pytest.raises(rl.EvaluationError) as err:
        rl.evaluate(g, 2.0, t, debug_nans=True)
    msg = str(err.value)
    # d sqrt(u) = g / (2 sqrt(u)) at u = 0: the backward step of the leaf's line
    assert msg.startswith("debug_nans: Inf in %g = ") and "(op 'divide')" in msg
    assert "(a backward step AD generated for the expression at line 9, column 16 of " \
           "model.rly)" in msg
    assert "input %g: float64[]" in msg and "min 0 max 0 nan 0 inf 0" in msg


def test_debug_nans_on_the_jax_backend_reruns_in_the_interpreter():
    x = rl.var("x", shape=(3,), dtype="float32")
    f = rl.Function([x], rl.sum(rl.log(x) * x))
    run = rl.compile(f, debug_nans=True)
    assert run(np.ones(3, "float32")) == 0.0
    with pytest.raises(rl.EvaluationError, match=r"NaN in log\(%x\) \(op 'log'\) in fn"):
        run(np.array([1, -1, 2], "float32"))
    run = rl.compile(f, backend="interpreter", debug_nans=True)
    with pytest.raises(rl.EvaluationError, match="debug_nans: NaN"):
        run(np.array([1, -1, 2], "float32"))


def test_debug_modes_off_compile_nothing_of_them():
    x = rl.var("x", shape=(3,), dtype="float64")
    f = rl.Function([x], rl.sum(rl.log(x)))
    from relayish.backend.interp.api import _compile_closed
    code = _compile_closed(f)
    assert all(info.fn is step for b in code.blocks for info, step in zip(b.info, b.steps))
    checked = _compile_closed(f, options={"wrap_step": lambda info: info.fn})
    assert checked is not code                 # a debug mode compiles afresh, uncached


# 2^16 elements: the interpreter adds in place only from steps.IN_PLACE_MIN_SIZE up
STALE = """\
def @main(%x: Tensor[(65536), float64], %g: Tensor[(65536), float64]) -> Tensor[(65536), float64] {
  let %r = ref(%x * 1f64);
  let %u = %r := !%r + %g;
  let %a = !%r;
  let %u2 = %r := !%r + %g;
  %a * 2f64
}
"""


def test_debug_alloc_catches_a_planted_ownership_bug(monkeypatch):
    mod = rl.parse(STALE, filename="stale.rly")
    x, g = np.ones(65536), np.full(65536, 0.5)
    right = rl.evaluate(mod, x, g)
    assert np.allclose(right, 3.0)
    assert np.allclose(rl.evaluate(mod, x, g, debug_alloc=True), 3.0)
    # the planted bug: the in-place paths' ownership check ignores the other holders of the
    # array (here %a, read before the second accumulation)
    monkeypatch.setattr(steps, "_ref_owns", lambda cur, shape, dtype: (
        cur.__class__ is np.ndarray and cur.flags.writeable and cur.shape == shape))
    wrong = rl.evaluate(mod, x, g)
    assert np.allclose(wrong, 4.0)               # a plausible wrong number, silently
    assert np.isnan(rl.evaluate(mod, x, g, debug_alloc=True)).all()    # NaN instead
    with pytest.raises(rl.EvaluationError,
                       match=r"NaN in %a \* 2f64 \(op 'multiply'\) in @main at line 6"):
        rl.evaluate(mod, x, g, debug_alloc=True, debug_nans=True)


def test_debug_alloc_turns_the_shared_zeros_off():
    x = rl.var("x", shape=(3,), dtype="float64")
    g = raw_grad(rl.Function([x], rl.sum(x * x)))
    from relayish.backend.interp.api import _compile_closed
    from relayish.backend.interp.steps import _SHARED_ZEROS
    plain = _compile_closed(g)
    alloc = _compile_closed(g, options={"poison": True})
    shared = {id(z) for z in _SHARED_ZEROS.values()}
    assert any(id(v) in shared for c in [plain] for v in c.rest)
    assert not any(id(v) in shared for v in alloc.rest)
    assert np.allclose(rl.evaluate(g, np.arange(3.0), debug_alloc=True), 2 * np.arange(3.0))


def test_the_modes_compile_through_rl_compile():
    x = rl.var("x", shape=(3,), dtype="float64")
    g = raw_grad(rl.Function([x], rl.sum(x * x)))
    run = rl.compile(g, debug_alloc=True)
    assert np.allclose(run(np.arange(3.0)), 2 * np.arange(3.0))


def _zero_adjoint_meets_inf():
    # (2x, sqrt(x)): rl.gradient seeds the first field, so sqrt's adjoint is a zero adjoint,
    # and its rule divides it by 2 sqrt(x) = 0 at x = 0: nan as written, 0 folded
    x = rl.var("x", dtype="float64")
    return rl.parse(rl.astext(rl.Module.from_expr(
        rl.Function([x], rl.Tuple([x * 2.0, rl.sqrt(x)])))))["main"]


def test_finding11_debug_nans_reports_what_zero_adjoints_fold_away():
    # issue 25, finding 11: the optimized and the compiled gradient give 0 where the raw
    # transform gives nan (README, notes/ad.md), and debug_nans on them said nothing. The
    # difference stays (it is jax's), and asking for debug_nans reports it
    f, at = _zero_adjoint_meets_inf(), np.float64(0.0)
    raw, optimized = rl.gradient(f, optimize=False), rl.gradient(f)
    assert np.isnan(rl.evaluate(raw, at)[1][0])
    assert rl.evaluate(optimized, at)[1][0] == 2.0
    assert float(rl.compile(raw)(at)[1][0]) == 2.0
    rl.evaluate(optimized, at, debug_nans=True)         # folded already: nothing to see
    # the AD entry points' debug_nans keeps the zeros ordinary: nan on every backend, and
    # the run's debug_nans names the backward step that makes it
    checked = rl.gradient(f, debug_nans=True)
    assert np.isnan(rl.evaluate(checked, at)[1][0])
    assert np.isnan(float(rl.compile(checked)(at)[1][0]))
    for run in (lambda: rl.evaluate(checked, at, debug_nans=True),
                lambda: rl.compile(checked, debug_nans=True)(at),
                lambda: rl.compile(raw, debug_nans=True)(at)):    # compiled raw: not folded
        with pytest.raises(rl.EvaluationError, match=r"debug_nans: NaN in .*/ \(%sqrt \+ "
                                                     r"%sqrt\).*\(a backward step AD "
                                                     r"generated for the expression at line 2"):
            run()
    # grad, value_and_grad and vjp take it too; finite points are unchanged
    x = rl.var("x", dtype="float64")
    h = rl.Function([x], rl.sqrt(x) * x)
    assert float(rl.evaluate(rl.grad(h, debug_nans=True), np.float64(4.0))) == pytest.approx(3.0)
    value, grad = rl.evaluate(rl.value_and_grad(h, debug_nans=True), np.float64(4.0))
    assert (float(value), float(grad)) == pytest.approx((8.0, 3.0))
    _, back = rl.evaluate(rl.vjp(h, debug_nans=True), np.float64(4.0))
    assert float(back(np.float64(2.0))[0]) == pytest.approx(6.0)
    with pytest.raises(rl.GradientError, match="debug_nans= must be True or False"):
        rl.gradient(f, debug_nans="on")
