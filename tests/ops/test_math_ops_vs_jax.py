"""Issue 29's operators through the whole pipeline against jax: values, rl.grad on the
interpreter and the jax backend, rl.jvp, and second order (the gradient of <grad f(x), v>).

One case per op family: a scalar function of one float64 tensor x that uses every op of the
family, so each family costs one jitted jax reference (gradient and second order) and one jax
compilation of relayish's gradient. The per-op rules are checked to second order against finite
differences in tests/ad/test_op_gradients.py; their rules in isolation in test_math_ops.py.
"""
import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import pytest

import relayish as rl
from relayish import eager as re

RNG = np.random.default_rng(29)


def _c(a):
    return rl.const(np.asarray(a))


def _elementwise(x, y):
    """log1p expm1 softplus logaddexp sign floor ceil round: x of shape (4, 3) in (-2, 2)."""
    return (rl.log1p(x * x) + rl.expm1(x) * rl.softplus(x * 3.0) + rl.logaddexp(x, _c(y))
            + rl.sign(x) * x + (rl.floor(x * 2.0) + rl.ceil(x) - rl.round(x * 3.0)) * x)


def _elementwise_jax(x, y):
    return (jnp.log1p(x * x) + jnp.expm1(x) * jax.nn.softplus(x * 3.0) + jnp.logaddexp(x, y)
            + jnp.sign(x) * x + (jnp.floor(x * 2.0) + jnp.ceil(x) - jnp.round(x * 3.0)) * x)


def _special(x):
    """lgamma digamma polygamma multigammaln: x of shape (4, 3) in (0.5, 4)."""
    return (rl.lgamma(x) * rl.digamma(x + 0.5) + rl.polygamma(1, x) - rl.polygamma(3, x)
            + rl.multigammaln(x + 1.0, 3))


def _special_jax(x):
    return (jsp.gammaln(x) * jsp.digamma(x + 0.5) + jsp.polygamma(1, x) - jsp.polygamma(3, x)
            + jsp.multigammaln(x + 1.0, 3))


def _reductions_scans(x):
    """logsumexp cumsum cumprod roll strided_slice(strides): x of shape (4, 3); x has a zero
    (cumprod's gradient is exact there)."""
    return (rl.logsumexp(x, axis=1, keepdims=True) * rl.logsumexp(x)
            + rl.cumprod(x, axis=0) + rl.cumprod(x, axis=1, exclusive=True)
            + rl.roll(x, (1, -1), axis=(0, 1)) * rl.cumsum(x, axis=1)
            + rl.reshape(rl.roll(x, 5), (4, 3))
            + rl.sum(rl.strided_slice(x, (0, 0), (4, 3), (3, 2)) ** 2.0) * x)


def _reductions_scans_jax(x):
    exclusive = jnp.concatenate([jnp.ones((4, 1)), jnp.cumprod(x, axis=1)[:, :-1]], axis=1)
    return (jsp.logsumexp(x, axis=1, keepdims=True) * jsp.logsumexp(x)
            + jnp.cumprod(x, axis=0) + exclusive
            + jnp.roll(x, (1, -1), axis=(0, 1)) * jnp.cumsum(x, axis=1)
            + jnp.roll(x, 5)
            + jnp.sum(x[0:4:3, 0:3:2] ** 2.0) * x)


def _einsum_scatter(x, a, idx):
    """einsum index_update index_add: x of shape (4, 3); idx repeats an index."""
    y = rl.index_update(x, rl.const(idx), rl.take(x, rl.const(idx), axis=0) * 2.0, axis=0)
    z = rl.index_add(x * x, rl.const(idx), rl.einsum("ij,jk->ik", rl.take(x, rl.const(idx),
                                                                            axis=0), _c(a)))
    return rl.einsum("ij,ij,kl->il", y, z, x) + rl.index_update(x, 1, 0.5, axis=1)


def _einsum_scatter_jax(x, a, idx):
    y = x.at[idx].set(x[idx] * 2.0)
    z = (x * x).at[idx].add(jnp.einsum("ij,jk->ik", x[idx], a))
    return jnp.einsum("ij,ij,kl->il", y, z, x) + x.at[:, 1].set(0.5)


def _families():
    """family: (x, relayish body of x, jax body of x); the constants closed over."""
    rng = np.random.default_rng(5)
    y = rng.uniform(-1, 1, (3,))
    a = rng.uniform(-1, 1, (3, 3))
    idx = np.array([2, 0, 2], "int32")
    return {
        "elementwise": (rng.uniform(-2, 2, (4, 3)), lambda x: _elementwise(x, y),
                        lambda x: _elementwise_jax(x, y)),
        "special": (rng.uniform(0.5, 4.0, (4, 3)), _special, _special_jax),
        "reductions_scans": (_with_zero(rng.uniform(-1, 1, (4, 3))), _reductions_scans,
                             _reductions_scans_jax),
        "einsum_scatter": (rng.uniform(-1, 1, (4, 3)), lambda x: _einsum_scatter(x, a, idx),
                           lambda x: _einsum_scatter_jax(x, a, idx)),
    }


def _with_zero(x):
    x[1, 1] = 0.0
    return x


FAMILIES = _families()


def _programs(name):
    x0, body, jbody = FAMILIES[name]
    x = rl.var("x", shape=x0.shape, dtype="float64")
    out_shape = rl.typeof(rl.infer_type(rl.Function([x], body(x))).body).shape
    w = RNG.uniform(0.5, 1.5, out_shape)        # weights making the output a scalar
    f = rl.Function([x], rl.sum(body(x) * rl.const(w)))
    return f, (lambda v: jnp.sum(jbody(v) * w)), x0


def _jax_reference(jf, v):
    """x -> (jf(x), grad jf(x), grad <grad jf(x), v>): one jax compilation for all three."""
    return jax.jit(lambda u: (jf(u), jax.grad(jf)(u),
                              jax.grad(lambda w: jnp.sum(jax.grad(jf)(w) * v))(u)))


def _second(f, v):
    u = rl.var("u", shape=v.shape, dtype="float64")
    return rl.grad(rl.Function([u], rl.sum(rl.Call(rl.grad(f), [u]) * rl.const(v))))


@pytest.mark.parametrize("name", list(FAMILIES))
def test_values_gradients_and_second_order_match_jax(name):
    f, jf, x = _programs(name)
    v = RNG.uniform(-1, 1, x.shape)
    with jax.enable_x64(True):
        value, want, want2 = (np.asarray(a) for a in _jax_reference(jf, v)(x))
    np.testing.assert_allclose(rl.evaluate(f, x), value, rtol=1e-12)
    df = rl.grad(f)
    np.testing.assert_allclose(rl.evaluate(df, x), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(rl.compile(df, backend="jax")(x)), want, rtol=1e-10,
                               atol=1e-12)
    # forward mode: the jvp's tangent is <grad f, v>
    _, tangent = rl.evaluate(rl.jvp(f), x, v)
    np.testing.assert_allclose(tangent, np.sum(want * v), rtol=1e-10)
    np.testing.assert_allclose(rl.evaluate(_second(f, v), x), want2, rtol=1e-9, atol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FAMILIES))
def test_second_order_on_jax_backend(name):
    f, jf, x = _programs(name)
    v = RNG.uniform(-1, 1, x.shape)
    with jax.enable_x64(True):
        want2 = np.asarray(_jax_reference(jf, v)(x)[2])
    np.testing.assert_allclose(np.asarray(rl.compile(_second(f, v), backend="jax")(x)), want2,
                               rtol=1e-9, atol=1e-10)


def test_ops_parse_print_and_record_eagerly():
    text = ("fn (%x: Tensor[(3), float64]) { softplus(%x) + polygamma(%x, n=2) "
            "+ multigammaln(%x, d=2) + logaddexp(%x, %x) }")
    f = rl.parse_expr(text)
    rl.assert_structural_equal(rl.parse_expr(rl.astext(f)), f)
    x = np.array([0.5, 1.5, 3.0])
    with jax.enable_x64(True):
        want = np.asarray(jax.jit(lambda v: jax.nn.softplus(v) + jsp.polygamma(2, v)
                                  + jsp.multigammaln(v, 2) + jnp.logaddexp(v, v))(x))
    np.testing.assert_allclose(rl.evaluate(f, x), want, rtol=1e-12)
    text2 = ("fn (%x: Tensor[(2, 3), float64], %i: Tensor[(2), int32]) { "
             "einsum(%x, %x, subscripts=\"ij,kj->ik\") + logsumexp(%x, axis=1, keepdims=True) "
             "+ sum(index_update(roll(%x, shift=[1, -1], axis=[0, 1]), %i, %x, axis=1)) "
             "+ sum(index_add(cumprod(%x, axis=1), %i, %x, axis=1)) "
             "+ sum(strided_slice(%x, begin=[0, 0], end=[2, 3], strides=[1, 2])) }")
    g = rl.parse_expr(text2)
    rl.assert_structural_equal(rl.parse_expr(rl.astext(g)), g)
    assert 'subscripts="ij,kj->ik"' in rl.astext(g)
    assert rl.astext(rl.parse_expr(text2.replace('"ij,kj->ik"', '"ij,kj"'))) == rl.astext(g)
    t = re.tensor(x, requires_grad=True)
    (g,) = re.grad(re.softplus(t).sum(), wrt=[t])
    np.testing.assert_allclose(np.asarray(g), 1 / (1 + np.exp(-x)), rtol=1e-12)


def test_type_errors_name_the_problem():
    i = rl.var("i", shape=(3,), dtype="int32")
    x = rl.var("x", shape=(3,), dtype="float64")
    for bad, match in [(rl.lgamma(i), "lgamma: expects floating-point"),
                       (rl.floor(i), "floor: expects floating-point"),
                       (rl.polygamma(0, x), "polygamma: n must be at least 1"),
                       (rl.multigammaln(x, 0), "multigammaln: d must be at least 1"),
                       (rl.logaddexp(x, i), "logaddexp: operands must have the same dtype")]:
        with pytest.raises(rl.TypeCheckError, match=match):
            rl.infer_type(rl.Function([i, x], bad))
    assert rl.typeof(rl.infer_type(rl.Function([i], rl.sign(i))).body).dtype == "int32"
    m = rl.var("m", shape=(2, 3), dtype="float64")
    for bad, match in [(lambda: rl.einsum("i...,i", x, x), "'...' in the subscripts"),
                       (lambda: rl.einsum("ii->i", m), "repeat a letter"),
                       (lambda: rl.einsum("ij->k", m), "appears in no operand")]:
        with pytest.raises(rl.RelayishError, match=match):
            bad()
    for bad, match in [(rl.einsum("ij,j->i", m, m), "name 1 axes, the operand"),
                       (rl.einsum("ij,i->j", m, x), "axis 'i' has size 2"),
                       (rl.index_update(m, rl.const(np.array([0], "int32")), x, axis=1),
                        "do not broadcast"),
                       (rl.roll(m, (1, 2), axis=0), "one shift per axis")]:
        with pytest.raises(rl.TypeCheckError, match=match):
            rl.infer_type(rl.Function([m, x], bad))
