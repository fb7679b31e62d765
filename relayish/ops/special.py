"""Special functions: lgamma, digamma, polygamma(n, x), multigammaln(a, d).

Each derivative is the next function of the chain, so every order is available:
lgamma' = digamma, digamma' = polygamma(1, .), polygamma(n, .)' = polygamma(n + 1, .), and
multigammaln's is a sum of digammas. numpy has none of them: under numpy lgamma is libm's
(math.lgamma, elementwise) and digamma/polygamma are computed here (recurrence up to x >= 10,
then the asymptotic series; digamma reflects x < 1/2); under jax they are jax.scipy.special's.
Both agree to about 1e-14 relative in float64 away from the poles (tests/ops/test_special_ops.py).

Poles (x = 0, -1, -2, ...): lgamma is inf, digamma nan, polygamma inf (jax's values).
"""
from __future__ import annotations

import math

import numpy as np

from relayish.errors import TypeCheckError
from relayish.ir.op import register_op
from relayish.ir.types import FLOAT_DTYPES
from relayish.ops import api
from relayish.ops._common import (as_array, canon_int, libm_impl, normalizer, scalar_like,
                                  tensor_arg)
from relayish.ops.elementwise import elementwise_derivative, unary_rule


def _lgamma_scalar(v):
    """math.lgamma, with inf where libm reports a pole or an overflow (as jax gives)."""
    try:
        return math.lgamma(v)
    except (ValueError, OverflowError):
        return math.inf


_lgamma_impl = libm_impl(_lgamma_scalar, "gammaln")
register_op("lgamma", 1, type_rule=unary_rule("lgamma"), impl=_lgamma_impl,
            doc="log |Gamma(x)| (inf at the poles 0, -1, -2, ...)")


@elementwise_derivative("lgamma")
def lgamma_grad(orig, v):
    return v * api.digamma(orig.args[0])


# ---- digamma and polygamma under numpy -----------------------------------------------------

_SHIFT = 10.0                     # the asymptotic series is used from here on (error < 1e-16)
# Bernoulli numbers B2, B4, ..., B16
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510)


def _digamma_numpy(x):
    x = np.asarray(x, dtype=np.float64)
    reflect = x < 0.5
    y = np.where(reflect, 1.0 - x, x)      # psi(x) = psi(1 - x) - pi / tan(pi x)
    acc = np.zeros_like(y)
    while True:                             # psi(y) = psi(y + 1) - 1 / y
        low = y < _SHIFT
        if not low.any():
            break
        acc -= np.where(low, 1.0 / np.where(low, y, 1.0), 0.0)
        y = np.where(low, y + 1.0, y)
    inv2 = 1.0 / (y * y)
    series = sum(b / (2 * k + 2) * inv2 ** (k + 1) for k, b in enumerate(_BERNOULLI))
    out = np.log(y) - 0.5 / y - series + acc
    pole = reflect & (x == np.floor(x))
    out = np.where(reflect, out - np.pi / np.tan(np.pi * x), out)
    return np.where(pole | (x == -np.inf), np.nan, out)


def _polygamma_numpy(n, x):
    """psi^(n)(x) = (-1)^(n+1) n! sum_k 1 / (x + k)^(n+1), n >= 1: the terms below _SHIFT
    summed (as many as x is below it), the tail by its asymptotic series."""
    x = np.asarray(x, dtype=np.float64)
    sign = -1.0 if n % 2 == 0 else 1.0
    fact = float(math.factorial(n))
    y = np.where(np.isfinite(x), x, _SHIFT)
    acc = np.zeros_like(y)
    start = _SHIFT + n
    while True:
        low = y < start
        if not low.any():
            break
        with np.errstate(divide="ignore"):   # a pole: 1 / 0 is inf, as jax gives
            acc += np.where(low, 1.0 / np.where(low, y, 1.0) ** (n + 1), 0.0)
        y = np.where(low, y + 1.0, y)
    tail = math.factorial(n - 1) / y ** n + fact / (2 * y ** (n + 1))
    for k, b in enumerate(_BERNOULLI, start=1):
        tail = tail + b * math.factorial(2 * k + n - 1) / math.factorial(2 * k) / y ** (2 * k + n)
    out = sign * (fact * acc + tail)
    return np.where(x == np.inf, np.nan, np.where(x == -np.inf, np.inf, out))


def _special_impl(numpy_fn, jax_fn):
    def impl(xp, x, **attrs):
        if xp is np:
            return as_array(xp, numpy_fn(x, **attrs).astype(x.dtype), dtype=x.dtype)
        import jax.scipy.special
        return jax_fn(jax.scipy.special, x, **attrs)
    return impl


register_op("digamma", 1, type_rule=unary_rule("digamma"),
            impl=_special_impl(_digamma_numpy, lambda sp, x: sp.digamma(x)),
            doc="the digamma function psi(x) = d/dx lgamma(x) (nan at the poles)")


@elementwise_derivative("digamma")
def digamma_grad(orig, v):
    return v * api.polygamma(1, orig.args[0])


def polygamma_rule(types, attrs):
    if attrs["n"] < 1:
        raise TypeCheckError(f"polygamma: n must be at least 1 (n = 0 is digamma), got "
                             f"{attrs['n']}")
    return unary_rule("polygamma")(types, attrs)


register_op("polygamma", 1, attrs={"n": 1}, type_rule=polygamma_rule,
            impl=_special_impl(lambda x, n: _polygamma_numpy(n, x),
                               lambda sp, x, n: sp.polygamma(n, x)),
            normalize_attrs=normalizer("polygamma", n=canon_int),
            doc="polygamma(n, x): the n-th derivative of digamma (n >= 1; 1 is trigamma)")


@elementwise_derivative("polygamma")
def polygamma_grad(orig, v):
    return v * api.polygamma(orig.attrs["n"] + 1, orig.args[0])


# ---- multigammaln ----------------------------------------------------------------------------

def multigammaln_rule(types, attrs):
    a = tensor_arg("multigammaln", types, 0)
    if a.dtype not in FLOAT_DTYPES:
        raise TypeCheckError(f"multigammaln: expects floating-point tensors, got {a}")
    if attrs["d"] < 1:
        raise TypeCheckError(f"multigammaln: d must be at least 1, got {attrs['d']}")
    return a


def multigammaln_impl(xp, a, d):
    """log Gamma_d(a) = d (d - 1) / 4 log(pi) + sum_{j < d} lgamma(a - j / 2)."""
    out = xp.full_like(a, d * (d - 1) / 4 * math.log(math.pi))
    for j in range(d):
        out = out + _lgamma_impl(xp, a - xp.asarray(j / 2, dtype=a.dtype))
    return as_array(xp, out, dtype=a.dtype)


register_op("multigammaln", 1, attrs={"d": 1}, type_rule=multigammaln_rule,
            impl=multigammaln_impl, normalize_attrs=normalizer("multigammaln", d=canon_int),
            doc="multigammaln(a, d): the log of the multivariate gamma function of dimension d")


@elementwise_derivative("multigammaln")
def multigammaln_grad(orig, v):
    """d/da multigammaln(a, d) = sum_{j < d} digamma(a - j / 2)."""
    a = orig.args[0]
    total = api.digamma(a)
    for j in range(1, orig.attrs["d"]):
        total = total + api.digamma(a - scalar_like(j / 2, a))
    return v * total
