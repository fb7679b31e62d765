"""rl.passes.merge_matmul (relayish/ir/passes/merge_matmul.py): matmuls sharing their right
operand become one; stacked parameter weights are stacked once by the caller. Same values (and
gradients) before and after, on random inputs; deep let-chains walked by loops."""
import os
import sys

import numpy as np
import pytest

import relayish as rl
from relayish.ir.passes.merge_matmul import merge_matmul

from strategies import deep

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir,
                                "examples"))
import treelstm  # noqa: E402

F64 = "float64"


def ops_called(prog):
    """How many calls of each op the program's text shows."""
    text = rl.astext(prog)
    return {name: text.count(name + "(") for name in ("matmul", "concatenate", "strided_slice")}


def random_args(func, rng):
    return [rng.normal(size=p.type_annotation.shape).astype(p.type_annotation.dtype)
            for p in func.params]


def test_gates_sharing_an_input_become_one_matmul():
    f = rl.parse_expr("""
    fn (%a: Tensor[(2, 3), float64], %b: Tensor[(4, 3), float64], %c: Tensor[(4, 3), float64],
        %x: Tensor[(3), float64], %y: Tensor[(3), float64]) {
      let %p = sigmoid(matmul(%a, %x));
      let %q = matmul(%b, %x) + matmul(%c, %y);
      (%p, %q, matmul(%c, %x))
    }""")
    g = rl.optimize(f, passes=[merge_matmul], check=True)
    # a, b, c against x: one matmul; c against y stays alone
    assert ops_called(g) == {"matmul": 2, "concatenate": 1, "strided_slice": 3}
    args = random_args(f, np.random.default_rng(0))
    for want, got in zip(rl.evaluate(f, *args), rl.evaluate(g, *args)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_matrix_right_operands_and_what_is_left_alone():
    f = rl.parse_expr("""
    fn (%a: Tensor[(2, 3), float64], %b: Tensor[(4, 3), float64], %x: Tensor[(3, 5), float64],
        %v: Tensor[(3), float64], %k: Tensor[(3), float32], %m: Tensor[(4, 3), float32]) {
      let %s = matmul(%a, %x) ;
      let %t = if (sum(%v) > 0f64) { matmul(%b, %x) } else { matmul(%b, %x) * 2f64 };
      let %w = matmul(%a, %v * 2f64);
      (%s, %t, %w, matmul(%m, %k))
    }""")
    g = merge_matmul(f)
    # matmul(%b, %x) runs only in a branch: not moved before the If; the one in each branch
    # has no partner in its scope; %v * 2 is not an atom; float32 %m has no float64 partner
    assert rl.structural_equal(g, f)
    h = rl.parse_expr("""
    fn (%a: Tensor[(2, 3), float64], %b: Tensor[(4, 3), float64], %x: Tensor[(3, 5), float64]) {
      (matmul(%a, %x), matmul(%b, %x))
    }""")
    merged = merge_matmul(h)
    assert ops_called(merged)["matmul"] == 1
    args = random_args(h, np.random.default_rng(1))
    for want, got in zip(rl.evaluate(h, *args), rl.evaluate(merged, *args)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_weight_bound_after_the_first_gate_is_not_merged_early():
    f = rl.parse_expr("""
    fn (%a: Tensor[(2, 3), float64], %x: Tensor[(3), float64]) {
      let %p = matmul(%a, %x);
      let %b = %a * 2f64;
      let %q = matmul(%b, %x);
      (%p, %q)
    }""")
    assert rl.structural_equal(merge_matmul(f), f)


def treelstm_case(dtype=F64):
    dims = dict(vocab=20, embed=6, hidden=4, classes=3, dtype=dtype)
    rng = np.random.default_rng(3)
    params = treelstm.to_gate_params(treelstm.init_params(rng, **dims))
    trees = [treelstm.random_tree(rng, n, vocab=20) for n in (1, 2, 7)]
    return treelstm.treelstm_gates_module(**dims), params, trees


def test_the_per_gate_treelstm_gets_stacked_weights_once_per_tree():
    mod, params, trees = treelstm_case()
    merged = rl.optimize(mod, passes=[merge_matmul], check=True)
    cell = rl.astext(merged["cell"])
    # @cell: one matmul per leaf and one per child at a node, no concatenation left inside
    assert cell.count("matmul(") == 3 and "concatenate(" not in cell
    assert len(merged["cell"].params) == len(mod["cell"].params) - 10
    assert rl.astext(merged["main"]).count("concatenate(") == 3
    for tree in trees:
        args = (*params, treelstm.to_value(mod, tree), np.int32(1))
        np.testing.assert_allclose(rl.evaluate(merged, *args), rl.evaluate(mod, *args),
                                   rtol=1e-12)


def test_gradients_agree_after_merging():
    mod, params, trees = treelstm_case()
    merged = rl.passes.merge_matmul(mod)
    argnums = tuple(range(len(params)))
    want, got = rl.grad(mod, argnums=argnums), rl.grad(merged, argnums=argnums)
    for tree in trees:
        args = (*params, treelstm.to_value(mod, tree), np.int32(2))
        for a, b in zip(rl.evaluate(want, *args), rl.evaluate(got, *args)):
            np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)


def test_a_caller_passing_computed_weights_keeps_the_stacking_inside():
    """Step 2 moves a stacking to the callers only when they pass atoms."""
    mod = rl.parse("""
    def @g(%a: Tensor[(2, 3), float64], %b: Tensor[(2, 3), float64], %x: Tensor[(3), float64])
        -> Tensor[(2), float64] {
      matmul(%a, %x) + matmul(%b, %x)
    }
    def @main(%a: Tensor[(2, 3), float64], %x: Tensor[(3), float64]) -> Tensor[(2), float64] {
      @g(%a * 2f64, %a, %x)
    }""")
    merged = rl.optimize(mod, passes=[merge_matmul], check=True)
    assert len(merged["g"].params) == 3 and "concatenate(" in rl.astext(merged["g"])
    args = random_args(mod["main"], np.random.default_rng(4))
    np.testing.assert_allclose(rl.evaluate(merged, *args), rl.evaluate(mod, *args), rtol=1e-12)


@pytest.mark.parametrize("n", deep(5_000, 100_000))
def test_a_long_let_chain(n):
    """A let-chain past Python's recursion limit (10^5 under -m slow) with two gates at its
    end: merged, with the chain walked by loops."""
    x = rl.var("x", shape=(3,), dtype=F64)
    a = rl.var("a", shape=(2, 3), dtype=F64)
    b = rl.var("b", shape=(2, 3), dtype=F64)
    sb = rl.ScopeBuilder()
    v = x
    for _ in range(n):
        v = sb.let("v", v + rl.const(1.0, dtype=F64))
    p = sb.let("p", rl.matmul(a, v))
    q = sb.let("q", rl.matmul(b, v))
    sb.ret(rl.Tuple([p, q]))
    f = rl.Function([a, b, x], sb.get())
    g = merge_matmul(f)
    assert ops_called(g)["matmul"] == 1
    args = random_args(f, np.random.default_rng(5))
    for want, got in zip(rl.evaluate(f, *args), rl.evaluate(g, *args)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_it_is_a_listed_pass():
    assert "merge_matmul" in rl.passes.__all__
    assert rl.passes.merge_matmul.requires == frozenset({"typed"})
    with pytest.raises(rl.RelayishError):
        rl.passes.merge_matmul(rl.const(1.0))


def test_the_slice_gradient_fast_path_agrees_with_the_impl():
    """slice_scatter (the gradient of the slices the pass makes) has a numpy fast path: zeros
    and one assignment instead of np.pad."""
    from relayish.ir.op import get_op
    op = get_op("slice_scatter")
    fast = op.numpy_fast({"begin": (1, 0), "end": (3, 2), "strides": None}, None)
    g, like = np.arange(4.0).reshape(2, 2), np.zeros((4, 3))
    np.testing.assert_array_equal(fast(g, like), op.impl(np, g, like, (1, 0), (3, 2), None))
