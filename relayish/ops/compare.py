"""Comparisons and logical operators: bool results, registered differentiable=False.

Their gradient rules return zeros for every input and their tangents are zeros, so AD treats
them as constants (never an error).
"""
from __future__ import annotations

from relayish.ir.op import Infix, fixed_dtype, register_gradient, register_op, register_tangent
from relayish.ir.types import DTYPES
from relayish.ops import api
from relayish.ops._common import as_array
from relayish.ops.elementwise import binary_rule, unary_rule


def zero_grads(orig, g):
    return [api.zeros_like(a) for a in orig.args]


def zero_tangent(orig, ts):
    return api.zeros_like(orig)


def _comparison(name, fn, infix, doc):
    register_op(name, 2, type_rule=binary_rule(name, DTYPES, "any", out_dtype="bool"),
                impl=lambda xp, x, y: as_array(xp, getattr(xp, fn)(x, y)),
                differentiable=False, infix=infix, result_dtype=fixed_dtype("bool"), doc=doc)
    register_gradient(name)(zero_grads)
    register_tangent(name)(zero_tangent)


_comparison("less", "less", Infix("<", "order", "none"), "x < y")
_comparison("greater", "greater", Infix(">", "order", "none"), "x > y")
_comparison("less_equal", "less_equal", Infix("<=", "order", "none"), "x <= y")
_comparison("greater_equal", "greater_equal", Infix(">=", "order", "none"), "x >= y")
_comparison("equal", "equal", Infix("==", "equality", "none"), "x == y")
_comparison("not_equal", "not_equal", Infix("!=", "equality", "none"), "x != y")


def _logical(name, fn, doc):
    register_op(name, 2, type_rule=binary_rule(name, ("bool",), "bool"),
                impl=lambda xp, x, y: as_array(xp, getattr(xp, fn)(x, y)),
                differentiable=False, result_dtype=fixed_dtype("bool"), doc=doc)
    register_gradient(name)(zero_grads)
    register_tangent(name)(zero_tangent)


_logical("logical_and", "logical_and", "x and y (bool tensors)")
_logical("logical_or", "logical_or", "x or y (bool tensors)")

register_op("logical_not", 1, type_rule=unary_rule("logical_not", ("bool",), "bool"),
            impl=lambda xp, x: as_array(xp, xp.logical_not(x)), differentiable=False,
            result_dtype=fixed_dtype("bool"), involution=True,
            doc="not x (bool tensor)")
register_gradient("logical_not")(zero_grads)
register_tangent("logical_not")(zero_tangent)
