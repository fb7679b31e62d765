"""Recursion over runtime data in ONE compiled program (issue 17, section 1): folds over tree and
list arguments run as one XLA loop over a node table (relayish/backend/jax/dynamic_*.py), for
every shape, with the same values as the interpreter; reverse AD's backpropagator chain runs
as a second loop."""
import os
import sys

import numpy as np
import pytest

import relayish as rl
from relayish.errors import CompileError, EvaluationError, RelayishError
from relayish.backend.jax.dynamic_rule import dynamic_params, find_folds
from relayish.backend.jax.dynamic_tables import TableSpec, bucket

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples"))
from treelstm import init_params, random_tree, to_value, treelstm_module  # noqa: E402

DIMS = dict(vocab=20, embed=6, hidden=4, classes=3)


@pytest.fixture(scope="module")
def model():
    mod = treelstm_module(**DIMS)
    params = init_params(np.random.default_rng(0), **DIMS)
    return mod, params


@pytest.fixture(scope="module")
def gradient(model):
    """The TreeLSTM's value_and_grad and its one compiled program (64 rows)."""
    mod, _ = model
    vg = rl.value_and_grad(mod, argnums=tuple(range(7)))
    return vg, rl.compile(vg, backend="jax", capacity={"nodes": 64})


def _trees(mod, seed, n, most=30):
    rng = np.random.default_rng(seed)
    return [(to_value(mod, random_tree(rng, int(rng.integers(1, most + 1)), DIMS["vocab"])),
             np.int32(rng.integers(DIMS["classes"]))) for _ in range(n)]


def _close(a, b, rtol):
    for x, y in zip(_flat(a), _flat(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=1e-6)


def _flat(v):
    if isinstance(v, (tuple, list)):
        return [z for x in v for z in _flat(x)]
    return [v]


def test_the_rule_recognizes_the_treelstm_folds(model):
    mod, _ = model
    folds = find_folds(mod)
    assert {f.name for f in folds.values()} == {"cell"}
    (adt, orders), = dynamic_params(mod, mod["main"], folds).values()
    assert orders == {0: [], 1: [0, 1]}          # WLeaf: no child; WNode: left, then right
    vg = rl.value_and_grad(mod, argnums=tuple(range(7)))
    assert {f.name for f in find_folds(vg).values()} == {"cell", "cell_ad"}
    assert list(dynamic_params(vg, vg["main"], find_folds(vg))) == [7]


def test_the_node_table_is_post_order_in_call_order(model):
    mod, _ = model
    spec = TableSpec(mod, *next(iter(dynamic_params(mod, mod["main"],
                                                    find_folds(mod)).values())))
    table = spec.encode(to_value(mod, ((1, 2), 3)))
    tag, words, left, right, count = table.leaves
    assert int(count) == 5 and table.capacity == 16
    assert tag[:6].tolist() == [0, 0, 1, 0, 1, -1]
    assert words[:5].tolist() == [1, 2, 0, 3, 0]
    assert left[:5].tolist() == [-1, -1, 0, -1, 2] and right[:5].tolist() == [-1, -1, 1, -1, 3]
    assert [bucket(n) for n in (1, 16, 17, 100)] == [16, 16, 32, 128]


# each tree costs an interpreter run as the oracle: 6 by default, 25 under -m slow
@pytest.mark.parametrize("trees", [6, pytest.param(25, marks=pytest.mark.slow)])
def test_forward_one_compilation_for_every_tree_shape(model, trees):
    mod, params = model
    run = rl.compile(mod, backend="jax", capacity={"nodes": 64})
    for tree, y in _trees(mod, 1, trees):
        _close(run(*params, tree, y), rl.evaluate(mod, *params, tree, y), 1e-5)
    assert run.trace_count == 1


@pytest.mark.parametrize("trees", [6, pytest.param(20, marks=pytest.mark.slow)])
def test_value_and_grad_one_compilation_same_gradients(model, gradient, trees):
    mod, params = model
    vg, run = gradient
    for tree, y in _trees(mod, 2, trees):
        _close(run(*params, tree, y), rl.evaluate(vg, *params, tree, y), 1e-4)
    assert run.trace_count == 1


def test_default_capacity_buckets_node_counts(model):
    mod, params = model
    run = rl.compile(mod, backend="jax")
    for leaves in (1, 3, 8, 2, 5):           # 1-15 nodes: one bucket of 16 rows
        tree = to_value(mod, random_tree(np.random.default_rng(leaves), leaves, 20))
        _close(run(*params, tree, np.int32(0)), rl.evaluate(mod, *params, tree, np.int32(0)),
               1e-5)
    assert run.trace_count == 1
    tree = to_value(mod, random_tree(np.random.default_rng(9), 12, 20))    # 23 nodes: 32 rows
    run(*params, tree, np.int32(0))
    assert run.trace_count == 2


def test_an_argument_over_capacity_is_an_evaluation_error(model):
    mod, params = model
    run = rl.compile(mod, backend="jax", capacity={"nodes": 16})
    tree = to_value(mod, random_tree(np.random.default_rng(0), 9, 20))     # 17 nodes
    with pytest.raises(EvaluationError, match=r"parameter %t of @main has 17 nodes, more than "
                                              r"the capacity of 16"):
        run(*params, tree, np.int32(0))


def test_capacity_option_is_checked():
    x = rl.var("x", shape=(2,))
    f = rl.Function([x], x * 2.0)
    with pytest.raises(RelayishError, match="unknown capacity 'rows'"):
        rl.compile(f, backend="jax", capacity={"rows": 3})
    with pytest.raises(RelayishError, match="must be a positive int"):
        rl.compile(f, backend="jax", capacity={"nodes": 0})
    with pytest.raises(RelayishError, match="interpreter takes none"):
        rl.compile(f, backend="interpreter", capacity={"nodes": 8})


LIST = """
type L { Nil, Cons(Tensor[(3), float64], L) }

def @fold(%w: Tensor[(3), float64], %l: L) -> Tensor[(3), float64] {
  match (%l) {
    Nil => zeros_like(%w),
    Cons(%x, %rest) => {
      let %s = @fold(%w, %rest);
      tanh(%s * %w + %x)
    }
  }
}
"""


def _list(mod, xs):
    nil, cons = mod.get_constructor("Nil"), mod.get_constructor("Cons")
    v = rl.ConstructorValue(nil, [])
    for x in reversed(xs):
        v = rl.ConstructorValue(cons, [x, v])
    return v


def _list_reference(w, xs):
    s = np.zeros(3)
    for x in reversed(xs):
        s = np.tanh(s * w + x)
    return s


def test_a_list_fold_forward_and_gradient_one_compilation():
    mod = rl.infer_type(rl.parse(LIST + """
def @main(%w: Tensor[(3), float64], %l: L) -> float64 { sum(@fold(%w, %l)) }
"""))
    run = rl.compile(mod, backend="jax", capacity={"nodes": 64})
    grad = rl.value_and_grad(mod, argnums=0)
    run_grad = rl.compile(grad, backend="jax", capacity={"nodes": 64})
    rng = np.random.default_rng(3)
    w = rng.normal(size=3)
    for n in (0, 1, 7, 30, 63):
        xs = list(rng.normal(size=(n, 3)))
        value = _list(mod, xs)
        np.testing.assert_allclose(run(w, value), _list_reference(w, xs).sum(), rtol=1e-12)
        _close(run_grad(w, value), rl.evaluate(grad, w, value), 1e-10)
    assert run.trace_count == 1
    # reverse AD lifts a list of tensors to L_ad (a reference per element, @ad_lift_L): a map
    # (dynamic_rule.py), so the gradient is one loop too
    assert run_grad.trace_count == 1


def test_a_long_list_is_one_loop_not_an_unrolled_trace():
    mod = rl.infer_type(rl.parse(LIST + """
def @main(%w: Tensor[(3), float64], %l: L) -> Tensor[(3), float64] { @fold(%w, %l) }
"""))
    rng = np.random.default_rng(4)
    w, xs = rng.normal(size=3) * 0.5, list(rng.normal(size=(20_000, 3)))
    run = rl.compile(mod, backend="jax")
    np.testing.assert_allclose(run(w, _list(mod, xs)), _list_reference(w, xs), rtol=1e-10)


def test_an_argument_used_otherwise_stays_static():
    mod = rl.infer_type(rl.parse(LIST + """
def @main(%w: Tensor[(3), float64], %l: L) -> Tensor[(3), float64] {
  match (%l) { Nil => %w, Cons(%x, %rest) => @fold(%w, %l) + %x }
}
"""))
    assert dynamic_params(mod, mod["main"], find_folds(mod)) == {}
    run = rl.compile(mod, backend="jax")
    rng = np.random.default_rng(5)
    w = rng.normal(size=3)
    for n in (1, 2, 3):
        xs = list(rng.normal(size=(n, 3)))
        np.testing.assert_allclose(run(w, _list(mod, xs)),
                                   _list_reference(w, xs) + xs[0], rtol=1e-12)
    assert run.trace_count == 3                  # unrolled: one trace per shape, as before


def test_a_fold_under_a_traced_if_is_a_compile_error():
    mod = rl.infer_type(rl.parse(LIST + """
def @main(%w: Tensor[(3), float64], %l: L) -> Tensor[(3), float64] {
  if (sum(%w) > 0f64) { @fold(%w, %l) } else { %w }
}
"""))
    run = rl.compile(mod, backend="jax")
    with pytest.raises(CompileError, match=r"@fold folds a node table under a traced if"):
        run(np.ones(3), _list(mod, [np.ones(3)]))


def test_functions_that_break_the_rule_are_not_folds():
    mod = rl.infer_type(rl.parse("""
type L { Nil, Cons(Tensor[(3), float64], L) }

def @twice(%l: L) -> Tensor[(3), float64] {
  match (%l) {
    Nil => zeros(shape=[3], dtype="float64"),
    Cons(%x, %rest) => @twice(%rest) + @twice(%rest)
  }
}

def @effect_first(%r: ref(Tensor[(3), float64]), %l: L) -> Tensor[(3), float64] {
  match (%l) {
    Nil => zeros(shape=[3], dtype="float64"),
    Cons(%x, %rest) => {
      let %u = %r := %x;
      let %s = @effect_first(%r, %rest);
      %s + %x
    }
  }
}
"""))
    assert find_folds(mod) == {}


HALVE = """
def @loop(%x: Tensor[(3), float32], %eps: float32) -> Tensor[(3), float32] {
  if (sum(%x * %x) > %eps) { @loop(%x * 0.5f, %eps) } else { %x }
}
def @main(%x: Tensor[(3), float32]) -> Tensor[(3), float32] { @loop(%x, 0.01f) }
"""


def test_a_traced_condition_loop_is_one_while_loop():
    mod = rl.infer_type(rl.parse(HALVE))
    run = rl.compile(mod, backend="jax")
    for scale in (0.001, 1.0, 10.0, 1e6):       # 0 to 27 iterations
        x = np.full(3, scale, np.float32)
        np.testing.assert_allclose(run(x), rl.evaluate(mod, x), rtol=1e-6)
    assert run.trace_count == 1


def test_a_loop_past_its_step_capacity_is_an_evaluation_error():
    mod = rl.infer_type(rl.parse(HALVE))
    run = rl.compile(mod, backend="jax", capacity={"steps": 5})
    np.testing.assert_allclose(run(np.full(3, 0.1, np.float32)), [0.05] * 3, rtol=1e-6)
    with pytest.raises(EvaluationError, match=r"@loop ran more than 5 iterations, the loop's "
                                              r"step capacity"):
        run(np.full(3, 1e6, np.float32))


def test_a_tail_loop_on_constants_unrolls_as_before():
    mod = rl.infer_type(rl.parse(HALVE.replace(
        "@main(%x: Tensor[(3), float32])", "@main(%y: Tensor[(3), float32])").replace(
        "@loop(%x, 0.01f) }", "@loop(ones_like(%y), 0.01f) + %y }")))
    run = rl.compile(mod, backend="jax")
    np.testing.assert_allclose(run(np.zeros(3, np.float32)), [0.03125] * 3, rtol=1e-6)


def test_rows_hold_what_an_iteration_makes_not_the_weights(model, gradient):
    # a backpropagator closure captures the embedding E and the matrix U: tensors of the
    # enclosing trace are kept as they are, never stored per row (they were, through the
    # switch that joins the constructors' closures: a [rows, 20, 6] table of E)
    mod, params = model
    _, run = gradient
    tree, y = _trees(mod, 3, 1, most=15)[0]
    run(*params, tree, y)
    (entry,) = run._cache.values()
    leaves = run._flatten_args((*params, tree, y))[0]
    text = str(entry.jitted.trace(*leaves).jaxpr)
    import re
    assert not re.search(r"f32\[64,(\d+,)?(20,6|20,8)\]", text)   # E: (20, 6), U: (20, 8)


def test_weight_gradients_are_deferred_sums(model):
    from relayish.backend.jax.dynamic_defer import accumulations
    mod, _ = model
    vg = rl.value_and_grad(mod, argnums=tuple(range(7)))
    kinds = sorted(a.kind for a in accumulations(vg).values() if hasattr(a, "kind"))
    # Wl, U (and Wo); E's rows, which are matmul(g, Wl) of the leaf's gate gradient g: stored
    # as g, one product with Wl after the loop
    assert kinds.count("outer") >= 2 and "scatter_mm" in kinds


def test_two_folds_of_one_tree_chain_their_backward_loops(model):
    # the second loop's %bp starts as the first loop's last row: its backward loop ends by
    # calling that row, which runs the first backward loop
    from treelstm import treelstm_text
    _, params = model
    text = treelstm_text(**DIMS).replace(
        "let %h = @cell(%E, %Wl, %bl, %U, %bn, %t).0;",
        "let %h = @cell(%E, %Wl, %bl, %U, %bn, %t).0 * @cell(%E, %Wl, %bl, %U * 0.5f, %bn, %t).1;")
    mod = rl.infer_type(rl.parse(text))
    vg = rl.value_and_grad(mod, argnums=tuple(range(7)))
    run = rl.compile(vg, backend="jax", capacity={"nodes": 32})
    for tree, y in _trees(mod, 4, 3, most=15):
        _close(run(*params, tree, y), rl.evaluate(vg, *params, tree, y), 1e-4)
    assert run.trace_count == 1


PADDED = """
type T { Leaf(int32), Node(T, T) }

def @fold(%E: Tensor[(5, 3), float64], %w: Tensor[(3), float64], %t: T) -> Tensor[(3), float64] {
  match (%t) {
    Leaf(%i) => log(take(%E, %i, axis=0)) * %w,
    Node(%l, %r) => {
      let %a = @fold(%E, %w, %l);
      let %b = @fold(%E, %w, %r);
      tanh(%a * %w + %b) / sqrt(sum(%a * %a))
    }
  }
}

def @main(%E: Tensor[(5, 3), float64], %w: Tensor[(3), float64], %t: T) -> float64 {
  sum(@fold(%E, %w, %t))
}
"""


def test_batched_loops_run_the_capacity_and_padding_rows_leave_no_nan():
    """Under rl.vmap the loops run `capacity` iterations for every example (a trip count jax
    sees unbatched) and drop the writes of rows past each tree's count. Those rows run the
    clauses on zero fields: the leaf's log(E[0]) is log(0) = -inf here and its backward step
    divides by zero, so a padding value kept anywhere would show as inf/NaN in the gradient."""
    mod = rl.infer_type(rl.parse(PADDED))
    leaf, node = mod.get_constructor("Leaf"), mod.get_constructor("Node")

    def tree(rng, n):
        if n == 1:
            return rl.ConstructorValue(leaf, [np.int32(rng.integers(1, 5))])
        k = int(rng.integers(1, n))
        return rl.ConstructorValue(node, [tree(rng, k), tree(rng, n - k)])
    rng = np.random.default_rng(0)
    trees = [tree(rng, n) for n in (1, 3, 6, 2, 8)]
    E, w = rng.uniform(0.5, 2.0, size=(5, 3)), rng.normal(size=3)
    E[0] = 0.0                                  # what a padding row's index 0 reads
    vg = rl.vmap(rl.value_and_grad(mod, argnums=(0, 1)), in_axes=(None, None, 0))
    got = rl.compile(vg, capacity={"nodes": 16})(E, w, trees)
    assert all(np.isfinite(np.asarray(x)).all() for x in _flat(got))
    _close(got, rl.evaluate(vg, E, w, trees), 1e-10)
