"""rl.vmap (relayish/backend/batching.py): the per-example reference on the interpreter, one
jax.vmap of one trace on jax, and the errors naming the parameter."""
import jax
import numpy as np
import pytest

import relayish as rl
from relayish.errors import CompileError, EvaluationError, GradientError, TypeCheckError

F64 = "float64"
RNG = np.random.default_rng(0)


def c64(v):
    return rl.const(np.float64(v))


def per_example(f, args, in_axes):
    """What vmap means, written out: f on each example, each result stacked on axis 0."""
    axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
    size = next(np.shape(jax.tree_util.tree_leaves(a)[0])[ax] for a, ax in zip(args, axes)
                if ax is not None)
    outs = []
    for i in range(size):
        example = [a if ax is None else jax.tree_util.tree_map(
            lambda v, ax=ax: np.take(v, i, axis=ax), a) for a, ax in zip(args, axes)]
        outs.append(rl.evaluate(f, *example))
    return jax.tree_util.tree_map(lambda *xs: np.stack(xs), *outs)


def agree(f, args, in_axes=0, rtol=1e-10):
    """rl.evaluate and rl.compile of rl.vmap(f) both equal the per-example loop."""
    vf = rl.vmap(f, in_axes=in_axes)
    expected = per_example(f, args, in_axes)
    for got in (rl.evaluate(vf, *args), rl.compile(vf)(*args)):
        assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(expected)
        for g, e in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(expected)):
            assert np.shape(g) == np.shape(e) and np.asarray(g).dtype == np.asarray(e).dtype
            np.testing.assert_allclose(np.asarray(g), e, rtol=rtol, atol=1e-12)
    return vf


def mlp():
    """A 4-8-1 tanh network: (x, params) -> scalar loss."""
    x, y = rl.var("x", shape=(4,), dtype=F64), rl.var("y", shape=(), dtype=F64)
    w1, w2 = rl.var("w1", shape=(4, 8), dtype=F64), rl.var("w2", shape=(8,), dtype=F64)
    h = rl.tanh(rl.matmul(rl.reshape(x, (1, 4)), w1))
    out = rl.sum(rl.reshape(h, (8,)) * w2)
    return rl.Function([w1, w2, x, y], (out - y) * (out - y))


def mlp_jax(w1, w2, x, y):
    out = jax.numpy.sum(jax.numpy.tanh(x @ w1) * w2)
    return (out - y) ** 2


# ---- values ----------------------------------------------------------------------------------

def test_unbatched_and_batched_arguments():
    x, w = rl.var("x", shape=(3,), dtype=F64), rl.var("w", shape=(3,), dtype=F64)
    f = rl.Function([x, w], rl.sum(rl.tanh(x) * w))
    vf = agree(f, [RNG.normal(size=(5, 3)), RNG.normal(size=3)], in_axes=(0, None))
    assert rl.evaluate(vf, np.ones((5, 3)), np.ones(3)).shape == (5,)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_batch_axis_anywhere(axis):
    x = rl.var("x", shape=(2, 3), dtype=F64)
    f = rl.Function([x], rl.Tuple([rl.sum(x * x), rl.exp(x)]))
    shape = [2, 3]
    shape.insert(axis if axis >= 0 else axis + 3, 4)
    agree(f, [RNG.normal(size=shape)], in_axes=axis)


def test_tuple_arguments_and_results_stack_per_leaf():
    a, b = rl.var("a", shape=(2,), dtype=F64), rl.var("b", shape=(), dtype=F64)
    p = rl.var("p", type=rl.TupleType([rl.TensorType((2,), F64),
                                       rl.TupleType([rl.TensorType((), F64)])]))
    first, second = rl.TupleGetItem(p, 0), rl.TupleGetItem(rl.TupleGetItem(p, 1), 0)
    f = rl.Function([p, b], rl.Tuple([first * second + b, rl.Tuple([rl.sum(first), b])]))
    vf = agree(f, [(RNG.normal(size=(6, 2)), (RNG.normal(size=6),)), RNG.normal(size=6)])
    out = rl.compile(vf)((np.ones((6, 2)), (np.ones(6),)), np.zeros(6))
    assert out[0].shape == (6, 2) and out[1][0].shape == (6,) and out[1][1].shape == (6,)


def test_closures_and_traced_ifs_inside():
    """Closures chosen by an if on a traced value: under vmap the switch becomes a select."""
    y, a, v, w = (rl.var(n, shape=(), dtype=F64) for n in "yavw")
    sb = rl.ScopeBuilder()
    h = sb.let("h", rl.If(y > c64(0.0), rl.Function([v], v * y), rl.Function([w], w + a)))
    sb.ret(rl.If(h(y) > c64(1.0), h(a) * c64(3.0), rl.sin(h(y))))
    f = rl.Function([y, a], sb.get())
    ys = np.array([2.0, -2.0, 0.5, -0.1, 3.0, 0.0])
    vf = agree(f, [ys, np.float64(0.7)], in_axes=(0, None))
    run = rl.compile(vf)
    run(ys, np.float64(0.7))
    assert run.trace_count == 1


def test_one_trace_for_every_batch_size():
    run = rl.compile(rl.vmap(mlp(), in_axes=(None, None, 0, 0)))
    w1, w2 = RNG.normal(size=(4, 8)), RNG.normal(size=8)
    for size in (1, 5, 32, 5):
        out = run(w1, w2, RNG.normal(size=(size, 4)), RNG.normal(size=size))
        assert out.shape == (size,)
    assert run.trace_count == 1


def test_arrays_seen_before_skip_the_checks_but_new_ones_are_checked():
    x = rl.var("x", shape=(3,), dtype=F64)
    run = rl.compile(rl.vmap(rl.Function([x], rl.sum(x))))
    np.testing.assert_allclose(run(np.ones((4, 3))), [3.0] * 4)
    np.testing.assert_allclose(run(np.ones((4, 3))), [3.0] * 4)       # the fast path
    with pytest.raises(EvaluationError, match=r"expected Tensor\[\(4, 3\), float64\], got "
                                              r"Tensor\[\(4, 3\), float32\]"):
        run(np.ones((4, 3), "float32"))
    with pytest.raises(EvaluationError, match="needs the batch axis"):
        run(np.ones(4))


def test_a_module_with_globals():
    mod = rl.Module()
    u = rl.var("u", shape=(3,), dtype=F64)
    sq = rl.GlobalVar("sq")
    mod[sq] = rl.Function([u], u * u)
    x = rl.var("x", shape=(3,), dtype=F64)
    mod["main"] = rl.Function([x], rl.sum(sq(x)) + rl.sum(sq(sq(x))))
    vf = agree(mod, [RNG.normal(size=(4, 3))])
    assert rl.astext(vf).startswith("// rl.vmap(in_axes=(0,)): @main over a batch (%x on axis 0)")


def test_float32_results_keep_their_dtype_and_jax_arrays_stay_on_device():
    x = rl.var("x", shape=(3,))
    vf = rl.vmap(rl.Function([x], x * rl.const(np.float32(2.0))))
    run = rl.compile(vf)
    xs = jax.numpy.ones((2, 3), "float32")
    out = run(xs)
    assert out.dtype == np.float32 and out.shape == (2, 3)
    assert rl.evaluate(vf, [[1, 2, 3], [4, 5, 6]]).dtype == np.float32   # nested lists convert


def test_an_empty_batch_on_the_interpreter():
    x = rl.var("x", shape=(3,), dtype=F64)
    out = rl.evaluate(rl.vmap(rl.Function([x], rl.Tuple([rl.sum(x), x]))), np.zeros((0, 3)))
    assert out[0].shape == (0,) and out[1].shape == (0, 3) and out[0].dtype == np.float64


def test_adt_arguments_batch_as_lists_on_the_interpreter():
    mod = rl.Module()
    p = rl.Prelude(mod)
    item, acc = rl.var("item", shape=(2,), dtype=F64), rl.var("acc", shape=(), dtype=F64)
    l = rl.var("l", type=rl.TypeCall(p.List, [rl.TensorType((2,), F64)]))
    k = rl.var("k", shape=(2,), dtype=F64)
    mod["main"] = rl.Function([l, k], p.foldl(
        rl.Function([acc, item], acc + rl.sum(rl.tanh(item * k))), c64(0.0), l))
    lists = [[RNG.normal(size=2) for _ in range(n)] for n in (0, 1, 3, 2)]
    ks = RNG.normal(size=(4, 2))
    vf = rl.vmap(mod)
    got = rl.evaluate(vf, [rl.list_value(mod, xs) for xs in lists], ks)
    expected = [rl.evaluate(mod, rl.list_value(mod, xs), kk) for xs, kk in zip(lists, ks)]
    np.testing.assert_allclose(got, expected)
    run = rl.compile(vf, backend="interpreter")
    np.testing.assert_allclose(run([rl.list_value(mod, xs) for xs in lists], ks), expected)
    # foldl carries an accumulator: not a fold the node-table path runs as a loop
    with pytest.raises(CompileError, match="batching ADT arguments needs the node-table path, "
                                           "and parameter %l: List.*is not a node-table"):
        rl.compile(vf)


# ---- gradients ---------------------------------------------------------------------------------

def test_per_example_gradients_match_jax_vmap_of_grad():
    w1, w2 = RNG.normal(size=(4, 8)), RNG.normal(size=8)
    xs, ys = RNG.normal(size=(16, 4)), RNG.normal(size=16)
    axes = (None, None, 0, 0)
    vg = rl.vmap(rl.grad(mlp(), argnums=(0, 1)), in_axes=axes)
    with jax.enable_x64(True):
        # jitted: one compilation, not one per eagerly run primitive
        per_example = jax.vmap(jax.grad(mlp_jax, argnums=(0, 1)), in_axes=axes)
        expected = jax.jit(per_example)(w1, w2, xs, ys)
    for got in (rl.evaluate(vg, w1, w2, xs, ys), rl.compile(vg)(w1, w2, xs, ys)):
        assert got[0].shape == (16, 4, 8) and got[1].shape == (16, 8)
        np.testing.assert_allclose(got[0], expected[0], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(got[1], expected[1], rtol=1e-10, atol=1e-12)


def test_value_and_grad_batched_over_the_parameters():
    """Batching the weights instead (an ensemble): in_axes on the first two parameters."""
    vf = agree(rl.value_and_grad(mlp(), argnums=(0, 1)),
               [RNG.normal(size=(3, 4, 8)), RNG.normal(size=(3, 8)), RNG.normal(size=4),
                np.float64(0.5)], in_axes=(0, 0, None, None))
    assert isinstance(vf, rl.backend.batching.Batched)


def test_debug_nans_runs_the_batch_in_the_interpreter():
    x = rl.var("x", shape=(), dtype=F64)
    vf = rl.vmap(rl.Function([x], rl.log(x)))
    run = rl.compile(vf, debug_nans=True)
    np.testing.assert_allclose(run(np.array([1.0, 2.0])), np.log([1.0, 2.0]))
    with pytest.raises(EvaluationError, match="log"):
        run(np.array([1.0, -1.0]))


# ---- text -----------------------------------------------------------------------------------------

def test_astext_prints_a_header_then_the_program_which_parses_back():
    x, w = rl.var("x", shape=(3,), dtype=F64), rl.var("w", shape=(3,), dtype=F64)
    f = rl.Function([x, w], rl.sum(x * w))
    text = rl.astext(rl.vmap(f, in_axes=(1, None)))
    header, body = text.split("\n", 1)
    assert header == ("// rl.vmap(in_axes=(1, None)): fn over a batch (%x on axis 1, %w "
                      "unbatched); results stacked on axis 0")
    assert body == rl.astext(f)
    rl.assert_structural_equal(rl.parse_expr(text), f)


# ---- errors ---------------------------------------------------------------------------------------

def two_params():
    x, w = rl.var("x", shape=(3,), dtype=F64), rl.var("w", shape=(2, 3), dtype=F64)
    return rl.Function([x, w], rl.sum(w * x))


@pytest.mark.parametrize("in_axes, message", [
    ((0,), r"in_axes has 1 entries but fn takes 2 parameter\(s\) \(%x, %w\)"),
    ((0, 0, 0), "in_axes has 3 entries"),
    ((2, None), r"in_axes 2 for %x: Tensor\[\(3\), float64\]: the batch axis of a rank-1 "
                r"tensor is between -2 and 1"),
    ((None, None), "batches none of fn's parameters"),
    (("0", None), "an entry of in_axes is an int or None"),
    ((True, None), "an entry of in_axes is an int or None"),
])
def test_bad_in_axes(in_axes, message):
    with pytest.raises(TypeCheckError, match=message):
        rl.vmap(two_params(), in_axes=in_axes)


def test_unbatchable_parameters_and_results():
    x = rl.var("x", shape=(), dtype=F64)
    g = rl.var("g", type=rl.FuncType([rl.TensorType((), F64)], rl.TensorType((), F64)))
    with pytest.raises(TypeCheckError, match="%g: fn.*functions and references cannot be "
                                             r"batched; pass it unbatched \(in_axes None\)"):
        rl.vmap(rl.Function([g, x], g(x)))
    vf = rl.vmap(rl.Function([g, x], g(x)), in_axes=(None, 0))      # unbatched: fine
    np.testing.assert_allclose(rl.evaluate(vf, lambda v: v * 2.0, np.arange(3.0)),
                               [0.0, 2.0, 4.0])
    with pytest.raises(CompileError, match=r"takes no function or reference arguments \(%g\)"):
        rl.compile(vf)
    r = rl.var("r", type=rl.RefType(rl.TensorType((), F64)))
    with pytest.raises(TypeCheckError, match="%r: ref"):
        rl.vmap(rl.Function([r, x], x), in_axes=(0, 0))
    mod = rl.Module()
    p = rl.Prelude(mod)
    with pytest.raises(TypeCheckError, match=r"returns List\[.*a batched program returns "
                                             "tensors and tuples"):
        rl.vmap(rl.Function([x], p.Cons(x, p.Nil())))
    l = rl.var("l", type=rl.TypeCall(p.List, [rl.TensorType((), F64)]))
    mod["main"] = rl.Function([l], c64(1.0))
    with pytest.raises(TypeCheckError, match="%l: List.*a Python list of values, one per "
                                             "example: in_axes 0 or None"):
        rl.vmap(mod, in_axes=1)


@pytest.mark.parametrize("run", ["evaluate", "jax"])
def test_bad_arguments_name_the_parameter(run):
    vf = rl.vmap(two_params(), in_axes=(0, None))
    call = (lambda *a: rl.evaluate(vf, *a)) if run == "evaluate" else rl.compile(vf)
    w = np.ones((2, 3))
    with pytest.raises(EvaluationError, match=r"parameter %x of rl.vmap\(fn\) \(batched on "
                       r"axis 0\): expected a batch of Tensor\[\(3\), float64\] with the batch "
                       r"axis at 0 \(shape \('B', 3\)\), got shape \(3,\): a batched argument "
                       "needs the batch axis"):
        call(np.ones(3), w)
    with pytest.raises(EvaluationError, match=r"parameter %x .*expected Tensor\[\(4, 3\), "
                                              r"float64\], got Tensor\[\(4, 2\), float64\]"):
        call(np.ones((4, 2)), w)
    with pytest.raises(EvaluationError, match=r"takes 2 argument\(s\) \(%x, %w\), got 1"):
        call(np.ones((4, 3)))
    with pytest.raises(EvaluationError, match=r"parameter %w"):
        call(np.ones((4, 3)), np.ones(3))
    both = rl.vmap(two_params(), in_axes=(0, 1))
    call = (lambda *a: rl.evaluate(both, *a)) if run == "evaluate" else rl.compile(both)
    with pytest.raises(EvaluationError, match=r"different batch sizes \(%x: 4, %w: 5\)"):
        call(np.ones((4, 3)), np.ones((2, 5, 3)))


def test_what_takes_no_batched_program():
    vf = rl.vmap(two_params(), in_axes=(0, None))
    with pytest.raises(TypeCheckError, match=r"\(rl.vmap\(rl.vmap\(f\)\)\) is not supported"):
        rl.vmap(vf)
    with pytest.raises(TypeCheckError, match="takes a relayish Function or Module, got int"):
        rl.vmap(3)
    with pytest.raises(GradientError, match="got Batched"):
        rl.grad(vf)
    with pytest.raises(rl.RelayishError, match="compile a batched program"):
        rl.compile(two_params(), devices=["cpu"])
    with pytest.raises(rl.RelayishError, match="the interpreter runs on one device"):
        rl.compile(vf, backend="interpreter", devices=["cpu"])
    with pytest.raises(rl.RelayishError, match="device= or devices="):
        rl.compile(vf, device="cpu", devices=["cpu"])
    with pytest.raises(rl.RelayishError, match="no device 'cpu:99'"):
        rl.compile(vf, devices=["cpu:99"])
    with pytest.raises(rl.RelayishError, match="jax devices or strings"):
        rl.compile(vf, devices=[3])
    with pytest.raises(rl.RelayishError, match="names a device twice"):
        rl.compile(vf, devices=["cpu:0", "cpu:0"])
