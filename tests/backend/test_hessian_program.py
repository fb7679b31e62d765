"""The XLA program of a compiled rl.hessian (issue 16, section 2): values against jax.hessian,
and the structure that made it 1.5x jax's time: zero adjoints multiplied into the chain rule
(relayish/backend/jax/zeros.py). Values and program structure only; never time."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import relayish as rl

F64 = "float64"


def c64(v):
    return rl.const(v, F64)


def rosenbrock(n):
    x = rl.var("x", shape=(n,), dtype=F64)
    head = rl.op.strided_slice(x, (0,), (n - 1,))
    tail = rl.op.strided_slice(x, (1,), (n,))
    d = tail - head * head
    e = c64(1.0) - head
    return rl.Function([x], rl.sum(c64(100.0) * d * d + e * e))


def rosenbrock_jax(x):
    head, tail = x[:-1], x[1:]
    return jnp.sum(100.0 * (tail - head * head) ** 2 + (1.0 - head) ** 2)


def coupled(n):
    """sum(exp(x[:-1]) * sin(x[1:])) + sum(x^3) / 6 + sum(x)^2 * 0.25: a dense Hessian with a
    scalar (sum) feeding back into every element."""
    x = rl.var("x", shape=(n,), dtype=F64)
    head = rl.op.strided_slice(x, (0,), (n - 1,))
    tail = rl.op.strided_slice(x, (1,), (n,))
    s = rl.sum(x)
    return rl.Function([x], rl.sum(rl.exp(head) * rl.sin(tail)) + rl.sum(x * x * x) / c64(6.0)
                       + s * s * c64(0.25))


def coupled_jax(x):
    return (jnp.sum(jnp.exp(x[:-1]) * jnp.sin(x[1:])) + jnp.sum(x ** 3) / 6.0
            + jnp.sum(x) ** 2 * 0.25)


CASES = {"rosenbrock-32": (rosenbrock, rosenbrock_jax, 32),
         "coupled-7": (coupled, coupled_jax, 7)}


@pytest.mark.parametrize("name", [n if n.startswith("rosenbrock") else
                                  pytest.param(n, marks=pytest.mark.slow) for n in sorted(CASES)])
def test_compiled_hessian_equals_jax_hessian(name):
    make, reference, n = CASES[name]
    run = rl.compile(rl.hessian(make(n)))
    # jitted: one compilation of the reference, not one per jax primitive run eagerly
    reference_hessian = jax.jit(jax.hessian(reference))
    for x in (np.linspace(-1.0, 1.5, n), np.linspace(0.7, -0.4, n)):
        with jax.enable_x64(True):
            expected = np.asarray(reference_hessian(x))
        np.testing.assert_allclose(np.asarray(run(x)), expected, rtol=1e-12, atol=1e-12)
        with jax.enable_x64(True):
            resident = run(jax.device_put(x))
        np.testing.assert_allclose(np.asarray(resident), expected, rtol=1e-12, atol=1e-12)


def _zero_products(closed):
    """Multiplications in a jaxpr with an operand known to be all zeros (a literal or constant
    0, or built from such by broadcasts, converts, adds and products): work XLA cannot fold."""
    from jax.extend.core import Literal

    zero = set()
    found = []

    def is_zero(v):
        if isinstance(v, Literal):
            return not np.any(np.asarray(v.val))
        return v in zero

    def walk(jaxpr, consts):
        for var, value in zip(jaxpr.constvars, consts):
            if value is not None and not np.any(np.asarray(value)):
                zero.add(var)
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name == "mul" and any(is_zero(v) for v in eqn.invars):
                found.append(eqn)
            if name == "mul" and any(is_zero(v) for v in eqn.invars) or \
                    name in ("broadcast_in_dim", "convert_element_type", "reshape", "neg",
                             "add", "add_any", "sub") and all(is_zero(v) for v in eqn.invars):
                zero.update(eqn.outvars)
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                walk(sub, [None] * len(sub.constvars))
    walk(closed.jaxpr, closed.consts)
    return found


@pytest.mark.parametrize("optimize", [False, True])
@pytest.mark.parametrize("name", sorted(CASES))
def test_hessian_program_multiplies_nothing_by_zero(name, optimize):
    # Reverse AD reads adjoints nothing was added to (zero adjoints) and multiplies them into
    # the chain rule; XLA keeps each `x * 0` (inf * 0 is nan), recomputed per element of the
    # fused loop. Raw, the jax backend folds them (zeros.py); optimized, simplify has already
    # (the zero adjoints stay `zero_adjoint(..)` calls through the pipeline)
    make, _, n = CASES[name]
    run = rl.compile(rl.hessian(make(n), optimize=optimize))
    with jax.enable_x64(True):
        closed = run.jax_function().trace(np.zeros(n)).jaxpr
    assert _zero_products(closed) == []


def _zero_adjoint(shape):
    return rl.get_op("zero_adjoint")(shape=shape, dtype=F64)


def test_zero_adjoints_fold_only_where_marked():
    # zeros a program makes itself (a literal, zeros_like, zeros kept in a reference) compute
    # as written (nan at inf) on both backends and through the passes; a zero adjoint (what
    # reverse AD starts an adjoint as) folds in products, compiled and optimized, as jax's
    # symbolic zeros: not IEEE at inf, and only there
    x = rl.var("x", shape=(3,), dtype=F64)
    r = rl.var("r", type=rl.RefType(rl.TensorType((3,), F64)))
    literal = rl.Function([x], x * rl.const(np.zeros(3)))
    made = rl.Function([x], x * rl.zeros_like(x) + x)
    stored = rl.Function([x], rl.Let(r, rl.RefCreate(rl.zeros_like(x)), x * rl.RefRead(r) + x))
    adjoint = rl.Function([x], rl.Let(r, rl.RefCreate(_zero_adjoint((3,))),
                                      x * rl.RefRead(r) + x))
    direct = rl.Function([x], rl.sum(x * _zero_adjoint((3,))) * x + x)
    point = np.array([1.0, np.inf, -2.0])
    for f in (literal, made, stored):
        interpreted = np.asarray(rl.evaluate(f, point))
        assert np.isnan(interpreted[1])
        np.testing.assert_array_equal(np.asarray(rl.compile(f)(point)), interpreted)
        np.testing.assert_array_equal(np.asarray(rl.evaluate(rl.optimize(f), point)),
                                      interpreted)
    for f in (adjoint, direct):
        # the interpreter computes the raw program exactly; folded, it is x
        assert np.isnan(np.asarray(rl.evaluate(f, point))[1])
        np.testing.assert_array_equal(np.asarray(rl.compile(f)(point)), point)
        optimized = rl.optimize(f)
        assert str(optimized) == str(rl.Function(optimized.params, optimized.params[0]))
        np.testing.assert_array_equal(np.asarray(rl.evaluate(optimized, point)), point)
        with jax.enable_x64(True):
            closed = rl.compile(f).jax_function().trace(np.zeros(3)).jaxpr
        assert [e.primitive.name for e in closed.jaxpr.eqns] == []   # x * 0 + x is x itself
