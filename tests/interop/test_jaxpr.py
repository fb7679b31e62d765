"""rl.from_jax: a corpus of jax functions read into relayish, their values and gradients equal
to jax's (float64, 1e-9), their text printing and parsing back; drawn programs over the
supported primitives; unsupported primitives named with their source line.

The relayish side runs on the interpreter (no compilation); the jax references are jitted once
each. One test compiles a loop's gradient with the jax backend."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relayish as rl

jax = pytest.importorskip("jax")
jnp = jax.numpy

TOL = dict(rtol=1e-9, atol=1e-9)


def _rng(seed=0):
    return np.random.default_rng(seed)


def mlp(params, x):
    (w1, b1), (w2, b2) = params
    h = jax.nn.relu(x @ w1 + b1)
    return jnp.mean(jax.nn.log_softmax(h @ w2 + b2) ** 2)


def attention(wq, wk, wv, x):
    q, k, v = x @ wq, x @ wk, x @ wv
    scores = jnp.einsum("td,sd->ts", q, k) / jnp.sqrt(q.shape[-1])
    out = jax.nn.softmax(scores, axis=-1) @ v
    mu = out.mean(-1, keepdims=True)
    var = ((out - mu) ** 2).mean(-1, keepdims=True)
    return jnp.sum(jnp.tanh((out - mu) / jnp.sqrt(var + 1e-5)))


def scan_rnn(w, u, xs):
    def cell(h, x):
        h = jnp.tanh(w @ h + u @ x)
        return h, h.sum()
    h, ys = jax.lax.scan(cell, jnp.zeros(w.shape[0]), xs)
    return h.sum() + (ys ** 2).sum()


def branches(x, k):
    a = jax.lax.cond(x.sum() > 0, lambda v: jnp.sin(v) * 2, lambda v: jnp.cos(v), x)
    b = jax.lax.switch(k, [lambda v: v, lambda v: v * v, lambda v: jnp.exp(-v)], x)
    return (a * b).sum()


def scatter(x, i):
    y = x.at[i].set(x[0] * 3.0)
    z = y.at[jnp.array([0, 2])].add(1.5)
    return jnp.sum(z * z) + y[i]


def int_bool(x, n):
    m = (n > 1) & (x > 0)
    big = jnp.where(m | (x < -1.0), x * 3.0, -x)
    count = jnp.sum((x > 0.5).astype(jnp.int32)) + n
    return big.sum() * count.astype(x.dtype) + jnp.argmax(x).astype(x.dtype)


def shapes(x, y):
    z = x.reshape(2, 3).T[None, :, :] + y[:, None, None]
    w = jnp.concatenate([z, z[:, 1:, :] * 2.0], axis=1)
    return jnp.sum(jnp.squeeze(jnp.expand_dims(w.sum(axis=(0, 2)), 0)) ** 2) + jnp.max(w)


def cnn(x, w, w2):
    """NHWC convolutions (flax's layout), max and sum pooling with padding."""
    dims = ("NHWC", "HWIO", "NHWC")
    h = jax.nn.relu(jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dims))
    h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h2 = jax.lax.conv_general_dilated(h, w2, (2, 2), ((1, 0), (0, 1)), dimension_numbers=dims)
    a = jax.lax.reduce_window(h2, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 1, 1, 1),
                              ((0, 0), (1, 1), (0, 1), (0, 0)))
    return jnp.sum(jnp.tanh(a)) + jnp.mean(h ** 2)


def _corpus():
    r = _rng()
    n = lambda *s: r.normal(size=s)
    return [
        ("mlp", mlp, (((n(4, 5), n(5)), (n(5, 3), n(3))), n(2, 4)), (0, 1)),
        ("attention", attention, (n(4, 4), n(4, 4), n(4, 4), n(3, 4)), (0, 1, 2, 3)),
        ("scan_rnn", scan_rnn, (n(3, 3) * 0.5, n(3, 2), n(4, 2)), (0, 1, 2)),
        ("cond_switch", branches, (n(3), np.int32(1)), (0,)),
        ("int_bool", int_bool, (n(4), np.int32(2)), (0,)),
        ("shapes", shapes, (n(6), n(2)), (0, 1)),
        ("scatter", scatter, (n(4), np.int32(2)), (0,)),
        ("cnn", cnn, (n(2, 8, 8, 2), n(3, 3, 2, 4), n(2, 2, 4, 3)), (0, 1, 2)),
    ]


CORPUS = _corpus()


def _flat(tree):
    return [np.asarray(v) for v in jax.tree_util.tree_leaves(tree)]


def _assert_trees_close(ours, theirs):
    a, b = _flat(ours), _flat(theirs)
    assert len(a) == len(b)
    for u, v in zip(a, b):
        np.testing.assert_allclose(u, v, **TOL)


def _as_relayish(arg):
    return tuple(_as_relayish(a) for a in arg) if isinstance(arg, (tuple, list)) else arg


@pytest.mark.parametrize("name,fn,args,argnums", CORPUS, ids=[c[0] for c in CORPUS])
def test_value_and_gradient_equal_jax(name, fn, args, argnums):
    mod = rl.from_jax(fn, *args)
    value = rl.evaluate(mod, *map(_as_relayish, args))
    np.testing.assert_allclose(value, jax.jit(fn)(*args), **TOL)
    ours = rl.evaluate(rl.grad(mod, argnums=argnums), *map(_as_relayish, args))
    theirs = jax.jit(jax.grad(fn, argnums=argnums))(*args)
    _assert_trees_close(ours, theirs)


@pytest.mark.parametrize("name,fn,args,argnums", CORPUS, ids=[c[0] for c in CORPUS])
def test_the_module_prints_and_parses_back(name, fn, args, argnums):
    mod = rl.from_jax(fn, *args)
    text = rl.astext(mod)
    rl.assert_structural_equal(rl.parse(text), mod)
    # readable: @main's parameters carry the jax function's names
    first = fn.__code__.co_varnames[0]
    assert f"def @main(%{first}" in text


def test_control_flow_becomes_relayish_control_flow():
    text = rl.astext(rl.from_jax(branches, np.ones(3), np.int32(0)))
    assert text.count("if (") >= 3 and "cond(" not in text
    loop = rl.astext(rl.from_jax(scan_rnn, *CORPUS[2][2]))
    assert "def @scan_0(" in loop and "@scan_0(" in loop.split("def @main")[1]


def newton_sqrt(a):
    """Newton's iteration for sqrt(a) until converged: a while loop with a traced trip count."""
    def step(c):
        x, _ = c
        return 0.5 * (x + a / x), x
    x, _ = jax.lax.while_loop(lambda c: jnp.max(jnp.abs(c[0] - c[1])) > 1e-12, step,
                              (a, jnp.zeros_like(a)))
    return jnp.sum(x)


def test_a_while_loop_jax_cannot_reverse_has_relayish_gradient_compiled():
    a = np.array([2.0, 9.0, 0.25])
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work"):
        jax.grad(newton_sqrt)(a)
    mod = rl.from_jax(newton_sqrt, a)
    assert "def @while_0(" in rl.astext(mod)
    np.testing.assert_allclose(rl.evaluate(mod, a), np.sqrt(a).sum(), **TOL)
    grad = rl.compile(rl.grad(mod), backend="jax")
    assert "a while loop" in grad.explain()
    # d/da sum(sqrt(a)) = 1 / (2 sqrt(a)): the iteration converged, its derivative did too
    np.testing.assert_allclose(np.asarray(grad(a)), 0.5 / np.sqrt(a), rtol=1e-8)
    np.testing.assert_allclose(np.asarray(grad(a)), rl.evaluate(rl.grad(mod), a), **TOL)


def test_fori_loop_with_traced_bounds_and_pjit_and_custom_rules_inline():
    def f(x, n):
        y = jax.lax.fori_loop(0, n, lambda k, v: jnp.sin(v) + k * 0.1, x)
        return jnp.sum(jax.nn.gelu(y, approximate=False) + jax.nn.relu(y)
                       + jax.jit(jnp.tanh)(y) + jax.checkpoint(jnp.exp)(y))
    x = np.array([0.3, -0.7])
    mod = rl.from_jax(f, x, np.int32(3))
    jf = jax.jit(f)
    np.testing.assert_allclose(rl.evaluate(mod, x, np.int32(3)), jf(x, 3), **TOL)
    np.testing.assert_allclose(rl.evaluate(mod, x, np.int32(5)), jf(x, 5), **TOL)
    # jax cannot reverse a fori_loop with a traced bound; check against its forward mode
    fwd = jax.jit(jax.jacfwd(f))(x, 3)
    np.testing.assert_allclose(rl.evaluate(rl.grad(mod), x, np.int32(3)), fwd, **TOL)


def test_unsupported_primitive_names_it_and_the_source_line():
    def f(x):
        return jnp.sort(x)[0]
    with pytest.raises(rl.CompileError, match=r"'sort'.*test_jaxpr\.py:\d+") as info:
        rl.from_jax(f, np.ones(3))
    assert "sort" in str(info.value).splitlines()[-1]


def test_arguments_that_are_not_arrays_or_tuples_are_a_compile_error():
    with pytest.raises(rl.CompileError, match="dict"):
        rl.from_jax(lambda d: d["a"].sum(), {"a": np.ones(2)})


def test_float32_stays_float32_and_tuple_results_are_tuples():
    def f(x):
        return x * 2, (jnp.sum(x), x.astype(jnp.int32))
    x = np.ones(3, np.float32)
    mod = rl.from_jax(f, x)
    assert rl.typeof(mod["main"]).ret_type == rl.TupleType(
        [rl.TensorType((3,), "float32"),
         rl.TupleType([rl.TensorType((), "float32"), rl.TensorType((3,), "int32")])])
    out = rl.evaluate(mod, x)
    assert out[1][1].dtype == np.int32 and out[0].dtype == np.float32


# ---- drawn programs ---------------------------------------------------------------------------

UNARY = [jnp.sin, jnp.cos, jnp.tanh, jnp.exp, jax.nn.sigmoid, lambda v: v * v,
         lambda v: jnp.sqrt(v * v + 1.0), lambda v: jnp.log1p(v * v), jnp.abs, jax.nn.relu,
         lambda v: jnp.expm1(v) + jnp.sign(v) * jnp.floor(v) + jnp.round(v),
         lambda v: jax.lax.cond(v.sum() > 0, jnp.sin, lambda u: u * u, v),
         lambda v: jax.lax.scan(lambda c, r: (jnp.tanh(c + r), c * r), jnp.zeros(v.shape[1]),
                                v)[1],
         lambda v: v ** 3, lambda v: jax.lax.rsqrt(v * v + 2.0), jax.nn.softplus]
BINARY = [jnp.add, jnp.subtract, jnp.multiply, jnp.maximum, jnp.minimum,
          lambda a, b: a / (b * b + 1.0), lambda a, b: jnp.where(a > b, a, b * 2.0),
          lambda a, b: a * b.sum(axis=0, keepdims=True), lambda a, b: a @ b.T @ b]
REDUCE = [jnp.sum, jnp.mean, jnp.max, lambda v: jax.nn.logsumexp(v),
          lambda v: jnp.sum(jnp.cumsum(v) * 0.5), lambda v: jnp.sum(v[1:, ::2] * 2.0)]


@st.composite
def _programs(draw):
    steps = draw(st.lists(st.tuples(st.integers(0, len(UNARY) - 1),
                                    st.integers(0, len(BINARY) - 1),
                                    st.integers(0, 3)), min_size=1, max_size=4))
    reduce = draw(st.integers(0, len(REDUCE) - 1))

    def program(x, y):
        values = [x, y]
        for u, b, pick in steps:
            a = values[pick % len(values)]
            values.append(BINARY[b](UNARY[u](a), values[-1]))
        return REDUCE[reduce](values[-1])
    return program


@settings(max_examples=10)       # 5 by default (tests/conftest.py), 10 under -m slow
@given(_programs(), st.integers(0, 2 ** 16))
def test_drawn_jax_programs_agree_in_value_and_gradient(program, seed):
    r = _rng(seed)
    x, y = r.normal(size=(2, 3)), r.normal(size=(2, 3))
    mod = rl.from_jax(program, x, y)
    np.testing.assert_allclose(rl.evaluate(mod, x, y), program(x, y), **TOL)
    _assert_trees_close(rl.evaluate(rl.grad(mod, argnums=(0, 1)), x, y),
                        jax.grad(program, argnums=(0, 1))(x, y))


def test_closed_over_arrays_and_library_functions_built_on_custom_jvp_and_pjit():
    """What users write: weights closed over (constants in the jaxpr: jax and numpy arrays),
    jax.nn functions defined with custom_jvp (relu, softplus, silu, logsumexp) or jitted
    inside the library (gelu approximate, jnp.linalg.norm, standardize), the whole under jit."""
    r = np.random.default_rng(5)
    w, b = jnp.asarray(r.normal(size=(3, 4))), r.normal(size=4)

    @jax.jit
    def f(x):
        h = x @ w + b
        return (jnp.sum(jax.nn.relu(h)) + jnp.sum(jax.nn.softplus(h) * jax.nn.silu(h))
                + jnp.sum(jax.nn.logsumexp(h, axis=-1))
                + jnp.sum(jax.nn.gelu(h, approximate=True) ** 2)
                + jnp.sum(jnp.linalg.norm(h, axis=-1))
                + jnp.sum(jax.nn.standardize(h, axis=-1) * h))
    x = r.normal(size=(5, 3))
    mod = rl.from_jax(f, x)
    np.testing.assert_allclose(rl.evaluate(mod, x), f(x), **TOL)
    np.testing.assert_allclose(rl.evaluate(rl.grad(mod), x), jax.jit(jax.grad(f))(x), **TOL)
    # ... and back to jax, under jax.grad (relayish's gradient program)
    jf = rl.to_jax(mod)
    np.testing.assert_allclose(jax.jit(jax.grad(jf))(x), jax.jit(jax.grad(f))(x), **TOL)
