"""The operator registry: one Op per primitive, holding everything about it.

An op's record: its type rule `type_rule(arg_types, attrs) -> Type`, its array implementation
`impl(xp, *args, **attrs)` written against the array API (numpy or jax.numpy), its gradient
rule `grad(orig_call, out_grad) -> [Expr per input]` building relayish expressions, and its
tangent rule for forward mode. The families in relayish/ops/ fill the registry on import.
"""
from __future__ import annotations

from typing import Callable

from attrs import define, field

from relayish.errors import GradientError, RelayishError
from relayish.ir.expr import Call, Expr, _short_text


@define(eq=False, repr=False)
class Op(Expr):
    name: str
    num_inputs: int                    # -1: any number
    attr_defaults: dict = field(factory=dict)   # keyword attributes and their defaults
    type_rule: Callable | None = None
    impl: Callable | None = None
    grad: Callable | None = None       # None and differentiable: a missing rule (an error)
    tangent: Callable | None = None
    differentiable: bool = True        # False: comparisons, logical and integer ops (zero grads)
    normalize_attrs: Callable | None = None  # attrs dict -> canonical attrs dict (or raises)
    doc: str = ""
    _checked_type: object = field(default=None, init=False)

    def __repr__(self):
        return f"<Op {self.name}>"

    def __call__(self, *args, **op_attrs):
        """`rl.op.add(x, y)`: build a call of this op."""
        return make_call(self, list(args), op_attrs)


_REGISTRY: dict[str, Op] = {}
_GENERATION = [0]      # bumped by every registration: what AD and the backends derive may change


def registry_generation() -> int:
    """A number that changes whenever an op, gradient or tangent rule is (re)registered, so
    that caches of derived programs (rl.optim's compiled problems) know when to rebuild."""
    return _GENERATION[0]


def register_op(name, num_inputs, *, attrs=None, type_rule=None, impl=None, differentiable=True,
                normalize_attrs=None, doc="") -> Op:
    """Add (or update) the op `name` in the registry and return it."""
    _GENERATION[0] += 1
    op = _REGISTRY.get(name)
    if op is None:
        op = Op(name, num_inputs)
        _REGISTRY[name] = op
    op.num_inputs = num_inputs
    op.attr_defaults = dict(attrs or {})
    op.type_rule = type_rule
    op.impl = impl
    op.differentiable = differentiable
    op.normalize_attrs = normalize_attrs
    op.doc = doc
    return op


def get_op(name) -> Op:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise RelayishError(f"unknown operator {name!r}") from None


def list_ops() -> list:
    return sorted(_REGISTRY)


def register_gradient(name):
    """Decorator: `@rl.register_gradient("my_op") def my_op_grad(orig_call, out_grad): ...`.

    The rule returns one relayish Expr per input of the call (the cotangent of that input).
    """
    def register(rule):
        get_op(name).grad = rule
        _GENERATION[0] += 1
        return rule
    return register


def register_tangent(name):
    """Decorator for forward mode: `rule(orig_call, tangents) -> Expr` (the output tangent)."""
    def register(rule):
        get_op(name).tangent = rule
        _GENERATION[0] += 1
        return rule
    return register


def gradient_rule(call: Call):
    """The gradient rule of an op call, or a GradientError naming the op and showing the call."""
    op = call.op
    if op.grad is None:
        raise GradientError(f"no gradient rule for operator '{op.name}' in {_short_text(call, 200)}; "
                            f"register one with @rl.register_gradient({op.name!r})")
    return op.grad


def make_call(op, args, op_attrs=None) -> Call:
    """Build `op(args, **attrs)`, checking the arity and attribute names and normalizing values."""
    from relayish.ir.expr import as_expr
    if isinstance(op, str):
        op = get_op(op)
    args = [as_expr(a, like=next((b for b in args if isinstance(b, Expr)), None)) for a in args]
    if op.num_inputs >= 0 and len(args) != op.num_inputs:
        raise RelayishError(f"operator '{op.name}' takes {op.num_inputs} argument(s), got {len(args)}")
    op_attrs = dict(op_attrs or {})
    unknown = sorted(set(op_attrs) - set(op.attr_defaults))
    if unknown:
        raise RelayishError(f"operator '{op.name}' has no attribute(s) {', '.join(unknown)}; "
                            f"its attributes are: {', '.join(op.attr_defaults) or 'none'}")
    full = {**op.attr_defaults, **op_attrs}
    if op.normalize_attrs is not None:
        full = op.normalize_attrs(full)
    return Call(op, args, full)
