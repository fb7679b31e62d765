"""einsum(operands..., subscripts="ij,jk->ik"): numpy's Einstein summation over any number of
tensors of one dtype.

The subscripts are kept in explicit form ("ij,jk->ik"; an implicit "ij,jk" gets numpy's output,
the letters used once, sorted), so a call prints and parses back as written. Not supported (a
TypeCheckError says so): "..." (write the axes out), a letter twice in one operand (diagonals:
take them with other ops), broadcasting a size-1 axis against a larger one.

The gradient for operand k is one einsum of the output cotangent with the other operands onto
k's subscripts; letters of k that appear nowhere else (summed over k alone) are broadcast back.
The tangent is the sum over k of einsum with operand k replaced by its tangent (einsum is linear
in each operand). Both are einsums, so every order differentiates.
"""
from __future__ import annotations

import re

import numpy as np

from relayish.errors import RelayishError, TypeCheckError
from relayish.ir.op import register_gradient, register_op, register_tangent
from relayish.ir.types import TensorType
from relayish.ops import api
from relayish.ops._common import NUMERIC, as_array, require_dtype, same_dtype, tensor_args

_LETTERS = re.compile(r"[a-zA-Z]*")


def parse_subscripts(op, text, count=None):
    """'ij,jk->ik' -> (['ij', 'jk'], 'ik'); implicit output: the letters used once, sorted."""
    text = text.replace(" ", "")
    if "." in text:
        raise RelayishError(f"{op}: '...' in the subscripts {text!r} is not supported; name "
                            "every axis")
    inputs, arrow, output = text.partition("->")
    terms = inputs.split(",")
    if not all(_LETTERS.fullmatch(t) for t in terms + [output]):
        raise RelayishError(f"{op}: subscripts {text!r} must be letters, comma-separated "
                            "operands and an optional '->' with the output's letters")
    if count is not None and len(terms) != count:
        raise RelayishError(f"{op}: subscripts {text!r} name {len(terms)} operands, got {count}")
    for t in terms:
        if len(set(t)) != len(t):
            raise RelayishError(f"{op}: operand subscripts {t!r} repeat a letter (a diagonal); "
                                "not supported")
    used = "".join(terms)
    if not arrow:
        output = "".join(sorted(c for c in set(used) if used.count(c) == 1))
    if len(set(output)) != len(output):
        raise RelayishError(f"{op}: the output {output!r} repeats a letter")
    missing = [c for c in output if c not in used]
    if missing:
        raise RelayishError(f"{op}: output letter {missing[0]!r} appears in no operand")
    return terms, output


def canon_subscripts(op, name, value):
    if not isinstance(value, str):
        raise RelayishError(f"operator '{op}': attribute {name} must be a string like "
                            f"'ij,jk->ik', got {value!r}")
    terms, output = parse_subscripts(op, value)
    return ",".join(terms) + "->" + output


def einsum_rule(types, attrs):
    ts = tensor_args("einsum", types)
    if not ts:
        raise TypeCheckError("einsum: needs at least one operand")
    try:
        terms, output = parse_subscripts("einsum", attrs["subscripts"], len(ts))
    except RelayishError as err:
        raise TypeCheckError(str(err)) from None
    dtype = same_dtype("einsum", *ts)
    require_dtype("einsum", ts[0], NUMERIC, "numeric")
    sizes = {}
    for term, t in zip(terms, ts):
        if len(term) != t.ndim:
            raise TypeCheckError(f"einsum: subscripts {term!r} name {len(term)} axes, the "
                                 f"operand {t} has {t.ndim}")
        for c, d in zip(term, t.shape):
            if sizes.setdefault(c, d) != d:
                raise TypeCheckError(f"einsum: axis {c!r} has size {sizes[c]} in one operand "
                                     f"and {d} in another")
    return TensorType(tuple(sizes[c] for c in output), dtype)


def einsum_impl(xp, *operands, subscripts):
    if xp is np:         # numpy contracts left to right unless asked to plan the order
        return as_array(xp, np.einsum(subscripts, *operands, optimize=len(operands) > 2))
    return xp.einsum(subscripts, *operands)


register_op("einsum", -1, attrs={"subscripts": ""}, type_rule=einsum_rule, impl=einsum_impl,
            normalize_attrs=lambda attrs: {**attrs, "subscripts": canon_subscripts(
                "einsum", "subscripts", attrs["subscripts"])},
            doc='einsum(a, b, ..., subscripts="ij,jk->ik"): numpy.einsum (no "...", no '
                'diagonals)')


@register_gradient("einsum")
def einsum_grad(orig, g):
    terms, output = parse_subscripts("einsum", orig.attrs["subscripts"])
    grads = []
    for k, (term, x) in enumerate(zip(terms, orig.args)):
        others = [(t, a) for j, (t, a) in enumerate(zip(terms, orig.args)) if j != k]
        reached = set(output).union(*(t for t, _ in others))
        kept = "".join(c for c in term if c in reached)
        subs = ",".join([output] + [t for t, _ in others]) + "->" + kept
        d = api.einsum(subs, g, *(a for _, a in others))
        if kept != term:          # letters summed over this operand alone: broadcast back
            d = api.broadcast_to_like(
                api.expand_dims(d, tuple(i for i, c in enumerate(term) if c not in reached)), x)
        grads.append(d)
    return grads


@register_tangent("einsum")
def einsum_tangent(orig, ts):
    subs, args = orig.attrs["subscripts"], list(orig.args)
    total = None
    for k in range(len(args)):
        term = api.einsum(subs, *(args[:k] + [ts[k]] + args[k + 1:]))
        total = term if total is None else total + term
    return total
