"""Gradient checks shared by the AD tests.

Values are relayish runtime values: numpy arrays, tuples, ConstructorValues. A "direction" has the
structure of a value with random float leaves (integer leaves stay, their direction is zero).
`check_fd` checks the inner-product identity <grad f(x), d> == (f(x + e d) - f(x - e d)) / 2e.
"""
from __future__ import annotations

import numpy as np

import relayish as rl


def _rebuild(v, fn):
    """Map fn over the float leaves of a value (tuples and ADT values kept)."""
    if isinstance(v, tuple):
        return tuple(_rebuild(f, fn) for f in v)
    if isinstance(v, rl.ConstructorValue):
        return rl.ConstructorValue(v.constructor, [_rebuild(f, fn) for f in v.fields])
    a = np.asarray(v)
    return fn(a) if a.dtype.kind == "f" else a


def _zip(a, b, fn):
    if isinstance(a, tuple):
        return tuple(_zip(x, y, fn) for x, y in zip(a, b, strict=True))
    if isinstance(a, rl.ConstructorValue):
        assert isinstance(b, rl.ConstructorValue) and b.constructor is a.constructor
        return rl.ConstructorValue(a.constructor, [_zip(x, y, fn) for x, y in
                                                   zip(a.fields, b.fields, strict=True)])
    a = np.asarray(a)
    return fn(a, np.asarray(b)) if a.dtype.kind == "f" else a


def leaves(v):
    out = []
    _rebuild(v, lambda a: out.append(a) or a)
    return out


def inner(a, b) -> float:
    return float(sum(np.sum(x * y) for x, y in zip(leaves(a), leaves(b), strict=True)))


def direction(v, rng):
    return _rebuild(v, lambda a: rng.normal(size=a.shape).astype(a.dtype))


def axpy(x, d, eps):
    return _zip(x, d, lambda a, b: (a + eps * b).astype(a.dtype))


def scalar_of(out) -> float:
    """The sum of the (first field of the) output: what rl.gradient differentiates."""
    if isinstance(out, tuple):
        out = out[0]
    return float(np.sum(out))


def check_fd(prog, args, seed=0, eps=1e-6, rtol=1e-5, atol=1e-6, grads=None):
    """The gradient of prog (Function or Module) at args passes the inner-product identity.

    Returns the gradients (a tuple, one per argument)."""
    rng = np.random.default_rng(seed)
    if grads is None:
        value, grads = rl.evaluate(rl.gradient(prog), *args)
        np.testing.assert_allclose(scalar_of(value), scalar_of(rl.evaluate(prog, *args)),
                                   rtol=1e-12, atol=1e-12)
    ds = [direction(a, rng) for a in args]
    plus = scalar_of(rl.evaluate(prog, *[axpy(a, d, eps) for a, d in zip(args, ds)]))
    minus = scalar_of(rl.evaluate(prog, *[axpy(a, d, -eps) for a, d in zip(args, ds)]))
    numeric = (plus - minus) / (2 * eps)
    analytic = sum(inner(g, d) for g, d in zip(grads, ds))
    np.testing.assert_allclose(analytic, numeric, rtol=rtol, atol=atol)
    return grads


def assert_values_close(a, b, rtol=1e-9, atol=1e-9):
    la, lb = leaves(a), leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)
