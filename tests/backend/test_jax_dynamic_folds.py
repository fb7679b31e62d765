"""Fold shapes users write, each ONE compiled loop for every input on the jax backend (issue 17,
brief B): a fold whose base case writes no backpropagator (the row keeps the family's pointer,
dynamic_rows._kept), folds over lists of float vectors under reverse AD (the lifted list),
and left folds (tail recursion with an accumulator). Values and gradients equal the
interpreter's and jax's on a Python twin; trace_count == 1 over inputs of several sizes.
(tests/backend/test_jax_dynamic_rnn.py has the RNN versions of the same shapes.)"""
import jax
import numpy as np
import pytest

import relayish as rl
from relayish.errors import CompileError
from relayish.backend.jax.dynamic_rule import dynamic_params, find_folds


def _close(got, expected, rtol=1e-9):
    got, expected = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(expected)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert np.shape(g) == np.shape(e)
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=rtol, atol=1e-12)


# ---- 1. base cases that write no backpropagator ---------------------------------------------

# three constructors: Leaf writes no backpropagator, One and Two each write one, so the
# family's content after an iteration is a union of the previous row and two closures (the
# fields are word indices: a tree of tensors is lifted by reverse AD, section 2)
TREE = """
type T { Leaf, One(int32, T), Two(int32, T, T) }
def @f(%E: Tensor[(5, 3), float64], %W: Tensor[(3, 3), float64], %t: T) -> Tensor[(3), float64] {
  match (%t) {
    Leaf => zeros(shape=[3], dtype="float64"),
    One(%w, %c) => { let %a = @f(%E, %W, %c); let %x = take(%E, %w, axis=0); sin(%a) * %x + %x },
    Two(%w, %l, %r) => {
      let %a = @f(%E, %W, %l);
      let %b = @f(%E, %W, %r);
      tanh(matmul(%W, %a + %b * 0.5f64) + take(%E, %w, axis=0))
    }
  }
}
def @main(%E: Tensor[(5, 3), float64], %W: Tensor[(3, 3), float64], %t: T) -> float64 {
  let %h = @f(%E, %W, %t); sum(%h * %h)
}
"""


def _random_tree(rng, n):
    """A nested tuple tree of n inner nodes: ("one", x, c) / ("two", x, l, r) / None (Leaf)."""
    if n == 0:
        return None
    x = int(rng.integers(5))
    if n == 1 or rng.random() < 0.3:
        return ("one", x, _random_tree(rng, n - 1))
    k = int(rng.integers(0, n))
    return ("two", x, _random_tree(rng, k), _random_tree(rng, n - 1 - k))


def _tree_value(mod, tree):
    leaf, one, two = (mod.get_constructor(c) for c in ("Leaf", "One", "Two"))
    if tree is None:
        return rl.ConstructorValue(leaf, [])
    if tree[0] == "one":
        return rl.ConstructorValue(one, [np.int32(tree[1]), _tree_value(mod, tree[2])])
    return rl.ConstructorValue(two, [np.int32(tree[1]), _tree_value(mod, tree[2]),
                                     _tree_value(mod, tree[3])])


def _tree_jax(E, W, tree):
    import jax.numpy as jnp

    def f(t):
        if t is None:
            return jnp.zeros(3)
        if t[0] == "one":
            return jnp.sin(f(t[2])) * E[t[1]] + E[t[1]]
        return jnp.tanh(W @ (f(t[2]) + f(t[3]) * 0.5) + E[t[1]])
    h = f(tree)
    return jnp.sum(h * h)


def test_leaves_that_write_no_backpropagator_are_skipped_by_the_backward_loop():
    # Leaf rows sit between the rows of One/Two nodes: their kept pointer is an earlier row,
    # not -1, and the union of two closures is stored with its index renumbered
    mod = rl.infer_type(rl.parse(TREE))
    rng = np.random.default_rng(11)
    E, W = rng.normal(size=(5, 3)), rng.normal(size=(3, 3)) * 0.5
    vg = rl.value_and_grad(mod, argnums=(0, 1))
    run = rl.compile(vg, backend="jax", capacity={"nodes": 64})
    for n in (0, 1, 4, 12, 25):
        tree = _random_tree(rng, n)
        t = _tree_value(mod, tree)
        got = run(E, W, t)
        _close(got, rl.evaluate(vg, E, W, t))
        with jax.enable_x64(True):
            _close(got, jax.value_and_grad(_tree_jax, argnums=(0, 1))(E, W, tree))
    assert run.trace_count == 1


# ---- 2. maps: a fold producing a node table of the same shape -----------------------------------

MAPS = """
type L { Nil, Cons(Tensor[(3), float64], L) }
def @double(%l: L) -> L {
  match (%l) {
    Nil => Nil,
    Cons(%x, %rest) => { let %d = @double(%rest); Cons(%x * 2f64, %d) }
  }
}
def @fold(%w: Tensor[(3), float64], %l: L) -> Tensor[(3), float64] {
  match (%l) {
    Nil => zeros_like(%w),
    Cons(%x, %rest) => { let %s = @fold(%w, %rest); tanh(%s * %w + %x) }
  }
}
"""


def test_reverse_ads_lifting_of_a_list_is_a_map_and_the_list_is_dynamic():
    mod = rl.infer_type(rl.parse(MAPS + """
def @main(%w: Tensor[(3), float64], %l: L) -> float64 { sum(@fold(%w, %l)) }
"""))
    vg = rl.value_and_grad(mod, argnums=(0, 1))
    folds = {f.name: f for f in find_folds(vg).values()}
    lift, read = folds["ad_lift_L"], folds["ad_grad_L"]
    assert lift.map[1] == {0: 0, 1: 1} and lift.map[2] == {0: [], 1: [1]}
    assert read.map is not None and folds["fold_ad"].map is None
    assert list(dynamic_params(vg, vg["main"], find_folds(vg))) == [1]


def test_a_map_folded_or_returned_is_one_loop_in_the_forward_program():
    mod = rl.infer_type(rl.parse(MAPS + """
def @main(%w: Tensor[(3), float64], %l: L) -> (Tensor[(3), float64], L) {
  (@fold(%w, @double(%l)), @double(%l))
}
"""))
    assert list(dynamic_params(mod, mod["main"], find_folds(mod))) == [1]
    run = rl.compile(mod, backend="jax", capacity={"nodes": 32})
    rng = np.random.default_rng(12)
    w = rng.normal(size=3)
    for n in (0, 1, 5, 31):
        xs = list(rng.normal(size=(n, 3)))
        got, doubled = run(w, rl.list_value(mod, xs))
        expected, e_doubled = rl.evaluate(mod, w, rl.list_value(mod, xs))
        _close((got, rl.from_list_value(doubled)), (expected, rl.from_list_value(e_doubled)))
        assert len(rl.from_list_value(doubled)) == n
    assert run.trace_count == 1


def test_a_map_result_used_otherwise_keeps_the_list_static():
    mod = rl.infer_type(rl.parse(MAPS + """
def @main(%w: Tensor[(3), float64], %l: L) -> Tensor[(3), float64] {
  let %d = @double(%l);
  match (%d) { Nil => %w, Cons(%x, %rest) => @fold(%w, %d) + %x }
}
"""))
    assert dynamic_params(mod, mod["main"], find_folds(mod)) == {}
    run = rl.compile(mod, backend="jax")
    rng = np.random.default_rng(13)
    w = rng.normal(size=3)
    for n in (1, 2):
        xs = list(rng.normal(size=(n, 3)))
        np.testing.assert_allclose(run(w, rl.list_value(mod, xs)), rl.evaluate(mod, w, rl.list_value(mod, xs)),
                                   rtol=1e-12)
    assert run.trace_count == 2                  # unrolled, one trace per length, as before


def test_a_long_list_of_vectors_gradient_is_a_loop_not_an_unrolled_trace():
    mod = rl.infer_type(rl.parse(MAPS + """
def @main(%w: Tensor[(3), float64], %l: L) -> float64 { sum(@fold(%w, %l)) }
"""))
    vg = rl.value_and_grad(mod, argnums=(0, 1))
    rng = np.random.default_rng(14)
    w, xs = rng.normal(size=3) * 0.5, list(rng.normal(size=(10_000, 3)))
    value, (dw, dxs) = rl.compile(vg, backend="jax")(w, rl.list_value(mod, xs))
    grads = rl.from_list_value(dxs)
    assert len(grads) == 10_000
    # the ends of the list: the first element enters the last step, the last one the first
    e_value, (e_dw, e_dxs) = rl.evaluate(vg, w, rl.list_value(mod, xs))
    _close((value, dw, grads[0], grads[-1]), (e_value, e_dw, rl.from_list_value(e_dxs)[0],
                                              rl.from_list_value(e_dxs)[-1]))


TENSOR_TREE = """
type T { Leaf(Tensor[(2), float64]), Node(T, T) }
def @f(%W: Tensor[(2, 2), float64], %t: T) -> Tensor[(2), float64] {
  match (%t) {
    Leaf(%x) => tanh(%x),
    Node(%l, %r) => {
      let %a = @f(%W, %l);
      let %b = @f(%W, %r);
      let %h = %a + %b;
      BODY
    }
  }
}
def @main(%W: Tensor[(2, 2), float64], %t: T) -> float64 { sum(@f(%W, %t)) }
"""


def _tensor_tree(rng, depth):
    if depth == 0 or rng.random() < 0.25:
        return rng.normal(size=2)
    return (_tensor_tree(rng, depth - 1), _tensor_tree(rng, depth - 1))


def _tensor_tree_value(mod, tree):
    leaf, node = mod.get_constructor("Leaf"), mod.get_constructor("Node")
    if isinstance(tree, tuple):
        return rl.ConstructorValue(node, [_tensor_tree_value(mod, t) for t in tree])
    return rl.ConstructorValue(leaf, [tree])


def _tensor_tree_jax(W, tree, traced_if):
    import jax.numpy as jnp

    def f(t):
        if not isinstance(t, tuple):
            return jnp.tanh(t)
        h = f(t[0]) + f(t[1])
        if not traced_if:
            return jnp.tanh(W @ h)
        return jnp.where(jnp.sum(h) > 0, jnp.tanh(W @ h), h * 0.5)
    return jnp.sum(f(tree))


def _tree_leaves(v):
    """The leaf tensors of a T value, left to right (a loop)."""
    out, stack = [], [v]
    while stack:
        x = stack.pop()
        if x.constructor.name_hint == "Leaf":
            out.append(x.fields[0])
        else:
            stack.extend(reversed(x.fields))
    return out


@pytest.mark.parametrize("traced_if", [False, True])
def test_a_tree_of_vectors_gradient_is_one_loop(traced_if):
    # the lifted tree (@ad_lift_T) is a map's table: its element references are a second
    # pool, read by the backward loop beside the fold's own pool (one slot tensor can index
    # both: joins.py shares a union's slots). With a traced if, a node's backpropagator calls
    # a second closure of its own row before the previous row (dynamic_rows._until_row)
    body = ("if (sum(%h) > 0f64) { tanh(matmul(%W, %h)) } else { %h * 0.5f64 }" if traced_if
            else "tanh(matmul(%W, %h))")
    mod = rl.infer_type(rl.parse(TENSOR_TREE.replace("BODY", body)))
    vg = rl.value_and_grad(mod, argnums=(0, 1))
    run = rl.compile(vg, backend="jax", capacity={"nodes": 64})
    rng = np.random.default_rng(15)
    for depth in (0, 1, 3, 5):
        tree = _tensor_tree(rng, depth)
        W = rng.normal(size=(2, 2))
        value = _tensor_tree_value(mod, tree)
        loss, (dW, dt) = run(W, value)
        e_loss, (e_dW, e_dt) = rl.evaluate(vg, W, value)
        _close((loss, dW, _tree_leaves(dt)), (e_loss, e_dW, _tree_leaves(e_dt)))
        with jax.enable_x64(True):
            j_loss, (j_dW, j_dt) = jax.value_and_grad(_tensor_tree_jax, argnums=(0, 1))(
                W, tree, traced_if)
        _close((loss, dW, _tree_leaves(dt)), (j_loss, j_dW, jax.tree_util.tree_leaves(j_dt)))
    assert run.trace_count == 1


# ---- 3. left folds: tail recursion with an accumulator ------------------------------------------

LEFT = """
type L { Nil, Cons(Tensor[(3), float64], L) }
def @walk(%W: Tensor[(3, 3), float64], %h: Tensor[(3), float64], %xs: L) -> Tensor[(3), float64] {
  match (%xs) {
    Nil => %h,
    Cons(%x, %rest) => @walk(%W, tanh(matmul(%W, %h) + %x), %rest)
  }
}
"""
LEFT_MAIN = """
def @main(%W: Tensor[(3, 3), float64], %xs: L) -> float64 {
  sum(@walk(%W, zeros(shape=[3], dtype="float64"), %xs))
}
"""


def _walk_jax(W, xs):
    import jax.numpy as jnp
    h = jnp.zeros(3)
    for x in xs:                       # first element first: a left fold
        h = jnp.tanh(W @ h + x)
    return jnp.sum(h)


def test_the_rule_recognizes_a_left_fold_and_its_ad_output():
    mod = rl.infer_type(rl.parse(LEFT + LEFT_MAIN))
    (fold,) = find_folds(mod).values()
    assert fold.name == "walk" and fold.left and not fold.rows and fold.k == 2
    assert list(dynamic_params(mod, mod["main"], find_folds(mod))) == [1]
    # reverse AD's @walk_ad carries (h, %rh) and writes a backpropagator: a left fold that
    # dynamic_tail.py's loop with rows runs. The constant initial state of LEFT_MAIN goes in
    # as a pair (no specialized first step: AD keeps a parameter the fold changes general),
    # so @main's lifted list is folded by @walk_ad directly: dynamic
    vg = rl.value_and_grad(mod, argnums=(0, 1))
    left = {f.name: f for f in find_folds(vg).values() if f.left}
    assert set(left) == {"walk", "walk_ad"} and left["walk_ad"].rows
    assert not any(g.name_hint.startswith("walk_ad_const") for g in vg.functions)
    assert list(dynamic_params(vg, vg["main"], find_folds(vg))) == [1]


def test_a_left_fold_is_one_loop_for_every_length():
    mod = rl.infer_type(rl.parse(LEFT + LEFT_MAIN))
    run = rl.compile(mod, backend="jax", capacity={"nodes": 64})
    rng = np.random.default_rng(16)
    W = rng.normal(size=(3, 3)) * 0.5
    for n in (0, 1, 2, 9, 63):
        xs = list(rng.normal(size=(n, 3)))
        got = run(W, rl.list_value(mod, xs))
        np.testing.assert_allclose(got, rl.evaluate(mod, W, rl.list_value(mod, xs)), rtol=1e-12)
        with jax.enable_x64(True):
            np.testing.assert_allclose(got, _walk_jax(W, xs), rtol=1e-12)
    assert run.trace_count == 1


def test_a_left_fold_and_a_right_fold_of_one_list_and_rl_vmap():
    mod = rl.infer_type(rl.parse(LEFT + """
def @right(%w: Tensor[(3), float64], %l: L) -> Tensor[(3), float64] {
  match (%l) {
    Nil => zeros_like(%w),
    Cons(%x, %rest) => { let %s = @right(%w, %rest); tanh(%s * %w + %x) }
  }
}
def @main(%W: Tensor[(3, 3), float64], %xs: L) -> float64 {
  sum(@walk(%W, zeros(shape=[3], dtype="float64"), %xs) * @right(sum(%W, axis=0), %xs))
}
"""))
    batched = rl.vmap(mod, in_axes=(None, 0))
    run = rl.compile(batched, backend="jax", capacity={"nodes": 32})
    rng = np.random.default_rng(17)
    W = rng.normal(size=(3, 3)) * 0.5
    for lengths in ((0, 5, 1, 30), (7, 2)):
        lists = [rl.list_value(mod, list(rng.normal(size=(n, 3)))) for n in lengths]
        got = run(W, lists)
        for k, value in enumerate(lists):
            np.testing.assert_allclose(got[k], rl.evaluate(mod, W, value), rtol=1e-12)
    assert run.trace_count == 1


def test_a_left_fold_that_exits_early_and_picks_its_child_by_a_traced_if():
    # the tail call (and so the next row) and the exit are chosen by traced conditions
    mod = rl.infer_type(rl.parse("""
type T { Leaf(Tensor[(2), float64]), Node(Tensor[(2), float64], T, T) }
def @path(%h: Tensor[(2), float64], %t: T) -> Tensor[(2), float64] {
  match (%t) {
    Leaf(%x) => %h + %x,
    Node(%x, %l, %r) => {
      if (sum(%h * %h) > 50f64) { %h }
      else if (sum(%h) > 0f64) { @path(%h * 1.5f64 + %x, %l) }
      else { @path(%h - %x, %r) }
    }
  }
}
def @main(%h: Tensor[(2), float64], %t: T) -> Tensor[(2), float64] { @path(%h, %t) }
"""))
    leaf, node = mod.get_constructor("Leaf"), mod.get_constructor("Node")
    rng = np.random.default_rng(18)

    def tree(depth):
        if depth == 0 or rng.random() < 0.2:
            return rl.ConstructorValue(leaf, [rng.normal(size=2)])
        return rl.ConstructorValue(node, [rng.normal(size=2) * 3, tree(depth - 1),
                                          tree(depth - 1)])
    run = rl.compile(mod, backend="jax", capacity={"nodes": 128})
    for _ in range(8):
        h, t = rng.normal(size=2), tree(5)
        np.testing.assert_allclose(run(h, t), rl.evaluate(mod, h, t), rtol=1e-12)
    assert run.trace_count == 1


def test_a_left_folds_gradient_is_one_loop_for_every_length():
    # @walk_ad((W, %rW), (h, %rh), xs_ad, %bp) is dynamic_tail.py's loop with rows, carrying
    # the lifted list (a map's table) as a cursor (dynamic_tables.JCursor) from its root
    mod = rl.infer_type(rl.parse(LEFT + """
def @main(%W: Tensor[(3, 3), float64], %h0: Tensor[(3), float64], %xs: L) -> float64 {
  sum(@walk(%W, %h0, %xs))
}
"""))
    vg = rl.value_and_grad(mod, argnums=(0, 1, 2))
    assert list(dynamic_params(vg, vg["main"], find_folds(vg))) == [2]
    run = rl.compile(vg, backend="jax", capacity={"nodes": 64})
    rng = np.random.default_rng(19)
    W = rng.normal(size=(3, 3)) * 0.5

    def walk_jax(W, h, xs):
        import jax.numpy as jnp
        for x in xs:
            h = jnp.tanh(W @ h + x)
        return jnp.sum(h)
    for n in (0, 1, 2, 9, 40):
        xs, h0 = list(rng.normal(size=(n, 3))), rng.normal(size=3)
        loss, (dW, dh0, dxs) = run(W, h0, rl.list_value(mod, xs))
        e_loss, (e_dW, e_dh0, e_dxs) = rl.evaluate(vg, W, h0, rl.list_value(mod, xs))
        _close((loss, dW, dh0, rl.from_list_value(dxs)), (e_loss, e_dW, e_dh0, rl.from_list_value(e_dxs)))
        with jax.enable_x64(True):
            j_loss, (j_dW, j_dh0, j_dxs) = jax.value_and_grad(walk_jax, argnums=(0, 1, 2))(
                W, h0, xs)
        _close((loss, dW, dh0, rl.from_list_value(dxs)), (j_loss, j_dW, j_dh0, list(j_dxs)))
    assert run.trace_count == 1


def test_a_left_folds_gradient_from_a_constant_state_is_one_loop():
    # the constant initial state is a pair for @walk_ad (AD does not peel a first step off
    # for it), so one loop serves every length, the empty list included
    mod = rl.infer_type(rl.parse(LEFT + LEFT_MAIN))
    vg = rl.value_and_grad(mod, argnums=(0, 1))
    run = rl.compile(vg, backend="jax", capacity={"nodes": 16})
    rng = np.random.default_rng(20)
    W = rng.normal(size=(3, 3)) * 0.5
    for n in (0, 1, 2, 5, 15):
        xs = list(rng.normal(size=(n, 3)))
        loss, (dW, dxs) = run(W, rl.list_value(mod, xs))
        with jax.enable_x64(True):
            j_loss, (j_dW, j_dxs) = jax.value_and_grad(_walk_jax, argnums=(0, 1))(W, xs)
        _close((loss, dW, rl.from_list_value(dxs)), (j_loss, j_dW, list(j_dxs)))
    assert run.trace_count == 1


def test_a_left_folds_weight_gradient_from_a_constant_state_under_vmap_is_one_trace():
    # lists of 0-12 elements in one batch, the weight's gradient per example
    mod = rl.infer_type(rl.parse(LEFT + LEFT_MAIN))
    vg = rl.value_and_grad(mod, argnums=(0,))
    run = rl.compile(rl.vmap(vg, in_axes=(None, 0)), backend="jax", capacity={"nodes": 16})
    rng = np.random.default_rng(3)
    W = rng.normal(size=(3, 3)) * 0.5
    lists = [rl.list_value(mod, list(rng.normal(size=(n, 3)))) for n in (0, 3, 7, 12)]
    values, grads = run(W, lists)
    for k, xs in enumerate(lists):
        value, (grad,) = rl.evaluate(vg, W, xs)
        _close((np.asarray(values)[k], np.asarray(grads[0])[k]), (value, grad))
    assert run.trace_count == 1


def test_a_reference_made_in_a_left_folds_iteration_is_a_compile_error():
    mod = rl.infer_type(rl.parse("""
type L { Nil, Cons(Tensor[(3), float64], L) }
def @walk(%h: Tensor[(3), float64], %xs: L) -> Tensor[(3), float64] {
  match (%xs) {
    Nil => %h,
    Cons(%x, %rest) => { let %r = ref(%h + %x); @walk(!%r, %rest) }
  }
}
def @main(%xs: L) -> Tensor[(3), float64] { @walk(zeros(shape=[3], dtype="float64"), %xs) }
"""))
    run = rl.compile(mod, backend="jax")
    with pytest.raises(CompileError, match=r"@walk: ref\(\.\.\.\) in an iteration of a left fold"):
        run(rl.list_value(mod, [np.ones(3)]))


def test_a_left_fold_taking_a_closure_is_one_loop():
    # a parameter holding a function makes it a left fold with rows: dynamic_tail.py's loop
    # passes the closure on unchanged and carries the list as a cursor
    mod = rl.infer_type(rl.parse("""
type L { Nil, Cons(Tensor[(3), float64], L) }
def @foldl(%f: fn (Tensor[(3), float64], Tensor[(3), float64]) -> Tensor[(3), float64],
           %acc: Tensor[(3), float64], %xs: L) -> Tensor[(3), float64] {
  match (%xs) { Nil => %acc, Cons(%x, %rest) => @foldl(%f, %f(%acc, %x), %rest) }
}
def @main(%w: Tensor[(3), float64], %xs: L) -> float64 {
  let %f = fn (%a: Tensor[(3), float64], %b: Tensor[(3), float64]) { tanh(%a * %w + %b) };
  sum(@foldl(%f, zeros(shape=[3], dtype="float64"), %xs))
}
"""))
    (fold,) = find_folds(mod).values()
    assert fold.left and fold.rows
    run = rl.compile(mod, backend="jax", capacity={"nodes": 32})
    rng = np.random.default_rng(21)
    w = rng.normal(size=3)
    for n in (0, 1, 5, 31):
        xs = list(rng.normal(size=(n, 3)))
        np.testing.assert_allclose(run(w, rl.list_value(mod, xs)), rl.evaluate(mod, w, rl.list_value(mod, xs)),
                                   rtol=1e-12)
    assert run.trace_count == 1


def test_a_list_of_vectors_weight_gradient_under_vmap_is_one_trace():
    # the lifting map runs with fixed trips under rl.vmap (its padding rows' lifted slots are
    # never reached: children pointers stay within each list's count)
    mod = rl.infer_type(rl.parse(MAPS + """
def @main(%w: Tensor[(3), float64], %l: L) -> float64 { sum(@fold(%w, %l)) }
"""))
    vg = rl.value_and_grad(mod, argnums=0)
    batched = rl.vmap(vg, in_axes=(None, 0))
    run = rl.compile(batched, backend="jax", capacity={"nodes": 32})
    rng = np.random.default_rng(22)
    w = rng.normal(size=3)
    for lengths in ((3, 0, 17), (1, 30)):
        lists = [rl.list_value(mod, list(rng.normal(size=(n, 3)))) for n in lengths]
        got = run(w, lists)
        for k, value in enumerate(lists):
            one = jax.tree_util.tree_map(lambda a, k=k: np.asarray(a)[k], got)
            _close(one, rl.evaluate(vg, w, value))
    assert run.trace_count == 1
