"""Test helpers for the operator rules, independent of the type checker and interpreter.

A tiny typer and evaluator for op-only expressions (Var, Constant, Tuple, TupleGetItem, op
Calls), numerical checks of gradient and tangent rules (central differences in float64 along
random directions, inner-product identity), and a symbolic reverse mode over such expressions
built only from the registered gradient rules, so second derivatives check that gradient rules
are differentiable again.
"""
from __future__ import annotations

import numpy as np

import relayish as rl
from relayish.ir.expr import Call, Constant, Tuple, TupleGetItem, Var
from relayish.ir.fields import children
from relayish.ir.op import Op, get_op, make_call
from relayish.ir.types import TensorType, TupleType


def _operands(e):
    """The child expressions of `e` that have values (a call's op is its rules, not a value)."""
    return [c for c in children(e) if not isinstance(c, Op)]


def topo(roots):
    """Nodes reachable from roots, children before parents (an explicit stack)."""
    order, seen, stack = [], set(), [(r, False) for r in reversed(roots)]
    while stack:
        e, done = stack.pop()
        if done:
            order.append(e)
            continue
        if id(e) in seen:
            continue
        seen.add(id(e))
        stack.append((e, True))
        stack.extend((c, False) for c in reversed(_operands(e)))
    return order


def infer(*roots):
    """Fill `_checked_type` with the op type rules; returns the roots' types."""
    for e in topo(list(roots)):
        if isinstance(e, Var):
            e._checked_type = e.type_annotation
        elif isinstance(e, Constant):
            e._checked_type = TensorType(e.data.shape, e.data.dtype.name)
        elif isinstance(e, Tuple):
            e._checked_type = TupleType([f._checked_type for f in e.fields])
        elif isinstance(e, TupleGetItem):
            e._checked_type = e.tuple_value._checked_type.fields[e.index]
        elif isinstance(e, Call) and isinstance(e.op, Op):
            e._checked_type = e.op.type_rule([a._checked_type for a in e.args], e.attrs)
        else:
            raise TypeError(f"opcheck cannot type {e!r}")
    return [r._checked_type for r in roots]


def run(roots, env, xp=np):
    """Evaluate op-only expressions; env maps Vars to values."""
    vals = {}
    for e in topo(list(roots)):
        if isinstance(e, Var):
            v = env[e]
        elif isinstance(e, Constant):
            v = xp.asarray(e.data)
        elif isinstance(e, Tuple):
            v = tuple(vals[id(f)] for f in e.fields)
        elif isinstance(e, TupleGetItem):
            v = vals[id(e.tuple_value)][e.index]
        else:
            v = e.op.impl(xp, *[vals[id(a)] for a in e.args], **e.attrs)
        vals[id(e)] = v
    return [vals[id(r)] for r in roots]


# ---- values of a type -----------------------------------------------------------------------

def random_value(t, rng, low=-1.0, high=1.0):
    if isinstance(t, TupleType):
        return tuple(random_value(f, rng, low, high) for f in t.fields)
    if t.dtype == "bool":
        return np.asarray(rng.random(t.shape) < 0.5)
    if t.dtype.startswith(("int", "uint")):
        return np.asarray(rng.integers(0, 3, t.shape), dtype=t.dtype)
    return np.asarray(rng.uniform(low, high, t.shape), dtype=t.dtype)


def is_float(t):
    if isinstance(t, TupleType):
        return all(is_float(f) for f in t.fields)
    return t.is_float


def flat(v):
    if isinstance(v, tuple):
        return np.concatenate([flat(f) for f in v]) if v else np.zeros(0)
    return np.ravel(np.asarray(v, dtype=np.float64))


def axpy(a, x, y):
    if isinstance(x, tuple):
        return tuple(axpy(a, xi, yi) for xi, yi in zip(x, y))
    return np.asarray(y + a * x, dtype=y.dtype)


# ---- rule checks ----------------------------------------------------------------------------

def setup(name, arg_types, attrs=None):
    """Vars of the given types and the call op(vars, **attrs), typed."""
    xs = [Var(f"x{i}", t) for i, t in enumerate(arg_types)]
    call = make_call(name, xs, attrs or {})
    infer(call)
    return xs, call


def check_grad(name, values, attrs=None, rng=None, eps=1e-6, rtol=1e-6, atol=1e-8):
    """The gradient rule of `name` at `values` (float64) against central differences."""
    rng = rng or np.random.default_rng(0)
    types = [_type_of(v) for v in values]
    xs, call = setup(name, types, attrs)
    out_t = call.checked_type
    g = Var("g", out_t)
    grads = get_op(name).grad(call, g)
    assert len(grads) == len(xs)
    got_types = infer(*grads)
    for x, gt in zip(xs, got_types):
        assert gt == x.type_annotation, f"{name}: gradient type {gt} != input type {x.type_annotation}"
    gval = random_value(out_t, rng)
    env = dict(zip(xs, values))
    env[g] = gval
    grad_vals = run(grads, env)
    dirs = [random_value(t, rng) if is_float(t) else None for t in types]

    def f(step):
        shifted = [axpy(step, d, v) if d is not None else v for d, v in zip(dirs, values)]
        return flat(run([call], dict(zip(xs, shifted)))[0])
    fd = (f(eps) - f(-eps)) / (2 * eps)
    lhs = float(np.dot(flat(gval), fd))
    rhs = sum(float(np.dot(flat(gv), flat(d))) for gv, d in zip(grad_vals, dirs) if d is not None)
    np.testing.assert_allclose(rhs, lhs, rtol=rtol * 100, atol=max(atol, 1e-6 * abs(lhs)) + 1e-7)
    return grads


def check_tangent(name, values, attrs=None, rng=None, eps=1e-6):
    """The tangent rule of `name` at `values` against central differences."""
    rng = rng or np.random.default_rng(1)
    types = [_type_of(v) for v in values]
    xs, call = setup(name, types, attrs)
    ts = [Var(f"t{i}", t) for i, t in enumerate(types)]
    tangent = get_op(name).tangent(call, ts)
    (tt,) = infer(tangent)
    assert tt == call.checked_type
    dirs = [random_value(t, rng) if is_float(t) else _zeros(v) for t, v in zip(types, values)]
    env = dict(zip(xs, values))
    env.update(zip(ts, dirs))
    (got,) = run([tangent], env)

    def f(step):
        shifted = [axpy(step, d, v) if is_float(t) else v for d, v, t in zip(dirs, values, types)]
        return flat(run([call], dict(zip(xs, shifted)))[0])
    fd = (f(eps) - f(-eps)) / (2 * eps)
    np.testing.assert_allclose(flat(got), fd, rtol=1e-5, atol=1e-6)


def _zeros(v):
    if isinstance(v, tuple):
        return tuple(_zeros(f) for f in v)
    return np.zeros_like(v)


def _type_of(v):
    if isinstance(v, tuple):
        return TupleType([_type_of(f) for f in v])
    v = np.asarray(v)
    return TensorType(v.shape, v.dtype.name)


# ---- symbolic reverse mode over op-only expressions (tensors only) -------------------------

def vjp_expr(out, wrt, seed):
    """Expressions for the cotangents of `wrt` (Vars), given `seed` for `out`, using only the
    registered gradient rules: vjp_expr applied to its own output gives second derivatives."""
    infer(out)
    adj = {id(out): seed}
    for e in reversed(topo([out])):
        a = adj.get(id(e))
        if a is None or not isinstance(e, Call):
            continue
        if not e.op.differentiable:
            continue
        for arg, ga in zip(e.args, e.op.grad(e, a)):
            if not isinstance(arg._checked_type, TensorType) or not arg._checked_type.is_float:
                continue
            adj[id(arg)] = ga if id(arg) not in adj else rl.op.add(adj[id(arg)], ga)
    return [adj.get(id(v), rl.op.zeros_like(v)) for v in wrt]


def check_second_order(name, values, attrs=None, rng=None, eps=1e-5):
    """Differentiate <g, grad-rule output> again with the rules themselves: checks that every
    gradient rule of `name` is built from differentiable ops with correct rules."""
    rng = rng or np.random.default_rng(2)
    types = [_type_of(v) for v in values]
    xs, call = setup(name, types, attrs)
    g = Var("g", call.checked_type)
    grads = get_op(name).grad(call, g)
    gval = random_value(call.checked_type, rng)
    for k, (x, gk) in enumerate(zip(xs, grads)):
        if not is_float(types[k]) or isinstance(types[k], TupleType):
            continue
        w = random_value(types[k], rng)
        # scalar s(x) = <w, grad_k(x)>; its gradient w.r.t. every float input via the rules
        s = rl.op.sum(rl.op.multiply(gk, Constant(w)))
        seconds = vjp_expr(s, xs, rl.op.ones_like(s))
        infer(*seconds)
        env = dict(zip(xs, values))
        env[g] = gval
        second_vals = run(seconds, env)
        dirs = [random_value(t, rng) if is_float(t) and not isinstance(t, TupleType) else None
                for t in types]

        def f(step):
            shifted = [axpy(step, d, v) if d is not None else v for d, v in zip(dirs, values)]
            e2 = dict(zip(xs, shifted))
            e2[g] = gval
            return float(run([s], e2)[0])
        fd = (f(eps) - f(-eps)) / (2 * eps)
        got = sum(float(np.dot(flat(sv), flat(d))) for sv, d in zip(second_vals, dirs)
                  if d is not None)
        np.testing.assert_allclose(got, fd, rtol=1e-4, atol=1e-6)


# ---- implementations ------------------------------------------------------------------------

def check_impl(name, values, attrs=None, expected=None):
    """impl(numpy) and impl(jax.numpy) agree with `expected` (a plain-numpy result), with the
    shape and dtype the type rule declares; numpy results are arrays, never numpy scalars."""
    import jax
    import jax.numpy as jnp
    xs, call = setup(name, [_type_of(v) for v in values], attrs)
    out_t = call.checked_type
    (got,) = run([call], dict(zip(xs, values)))
    assert isinstance(got, np.ndarray), f"{name} returned {type(got).__name__}, not an ndarray"
    assert got.shape == out_t.shape and got.dtype.name == out_t.dtype, (got.shape, got.dtype, out_t)
    with jax.enable_x64(True):
        jvals = [_to_jax(jnp, v) for v in values]
        # traced, as the jax backend runs impls: one compilation, not one per primitive
        jgot = jax.jit(lambda *vals: run([call], dict(zip(xs, vals)), xp=jnp)[0])(*jvals)
        assert jgot.shape == out_t.shape and jgot.dtype.name == out_t.dtype, (jgot.dtype, out_t)
        jgot = np.asarray(jgot)
    tol = dict(rtol=1e-5, atol=1e-6) if out_t.dtype in ("float32", "float16") else dict(rtol=1e-12, atol=1e-12)
    if expected is not None:
        np.testing.assert_allclose(got, expected, **tol)
    np.testing.assert_allclose(jgot, got, **tol)
    return got


def _to_jax(jnp, v):
    if isinstance(v, tuple):
        return tuple(_to_jax(jnp, f) for f in v)
    return jnp.asarray(v)


def type_of_call(name, types, attrs=None):
    """The type rule's result for op(args of `types`, **attrs)."""
    xs = [Var(f"x{i}", t) for i, t in enumerate(types)]
    call = make_call(name, xs, attrs or {})
    return infer(call)[0]


def T(shape, dtype="float32"):
    return TensorType(shape, dtype)
