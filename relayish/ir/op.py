"""The operator registry: one Op per primitive, holding every fact about it.

An op's record (`register_op` fills it; the families in relayish/ops/ register theirs on import):

    type_rule(arg_types, attrs) -> Type      the type rule (raises TypeCheckError)
    impl(xp, *args, **attrs)                 the array implementation, numpy or jax.numpy
    fast_impl(attrs, out_type) -> fn | None  a direct numpy function for the interpreter (skips
                                             the impl's wrapper); used only while `impl` is the
                                             one registered with it (`numpy_fast`)
    grad(orig_call, out_grad) -> [Expr]      the gradient rule (register_gradient)
    tangent(orig_call, tangents) -> Expr     the forward-mode rule (register_tangent)
    differentiable = True                    False: comparisons, logic, integer results
    constant_in = ()                         argument positions the result depends on only
                                             through their shapes and dtypes: no gradient flows
                                             there (zeros_like: (0,); full_like: (0,), its fill
                                             argument still gets one)
    infix = None                             Infix(symbol, precedence, associativity): printed
                                             and parsed as `a symbol b` (ir/text/operators.py)
    prefix = None                            a symbol: printed and parsed as `symbol a` (`-a`)
    effects = frozenset()                    what running it may do besides computing its result:
                                             "fail" (it can raise an EvaluationError on some
                                             well-typed input, e.g. take with an index out of
                                             range). Ops never touch references; an op without
                                             effects may be removed when its result is unused.
    result_dtype = arg_dtype(0)              how dtype_hint finds the result dtype without type
                                             inference: arg_dtype(i), fixed_dtype("bool"),
                                             attr_dtype("dtype") (ir/expr.py dtype_hint)
    linear_in = ()                           argument positions the op is jointly linear in: zero
                                             there gives a zero result (add: (0, 1); divide: (0,))
    bilinear = False                         linear in each of its first two arguments alone: a zero
                                             in either gives zero (multiply, matmul)
    accumulates = False                      elementwise addition of two same-typed tensors: the
                                             interpreter may add in place into an owned buffer
    fills_zeros = False                      all zeros, of attrs shape and dtype (no arguments:
                                             the interpreter may share one read-only zero array)
                                             or of its constant_in arguments' (zeros_like):
                                             reverse AD adds such a gradient to nothing
    symbolic_zero = False                    with fills_zeros: a zero that stands for "nothing was
                                             added here" (reverse AD's adjoint initial values,
                                             `zero_adjoint`): simplify and the jax backend fold
                                             products with it to it (not IEEE where the other
                                             operand is inf or nan, as jax's symbolic zeros),
                                             partial_eval keeps it a call (never a Constant)
    identity_in = {}                         two-argument ops: argument position -> the fill value
                                             that makes the op give back its other argument
                                             (add: {0: 0, 1: 0}; subtract: {1: 0}; multiply:
                                             {0: 1, 1: 1}; divide, power: {1: 1}); simplify
                                             reads it
    involution = False                       one-argument ops: op(op(x)) is x, bit for bit
                                             (negative, logical_not); simplify reads it
    shape_only_in = ()                       argument positions whose values are never read, only
                                             their shapes and dtypes (the `like` of
                                             broadcast_to_like): the jax backend computes a call
                                             with traced arguments only there at trace time.
                                             Unlike constant_in it says nothing to AD (the
                                             gradient rule still gives the position its zero)
    scatters_rows = False                    op(g, indices, like, axis=) is zeros shaped like
                                             `like` with g added at numpy.take's `indices` along
                                             `axis` (take's gradient): reverse AD leaves
                                             `!r + op(..)` inline, the interpreter adds the rows
                                             into r in place (no dense array)
    index_range = None                       ops whose argument indexes an axis (take, gather):
                                             fn(arg shapes, attrs) -> (position of the indices
                                             argument, the axis length n); each index must lie
                                             in [-n, n). The numpy impl raises past it; jax
                                             clamps or drops, so the jax backend checks the
                                             indices from this (rl.compile's check_indices)

Defaults say nothing, so most ops name only their type rule, impl and doc. Adding an op is
one `register_op` call plus its rules (notes/ops.md walks through one). `unregister` and
`registered` (a context manager) take a test's throwaway op out again.
"""
from __future__ import annotations

import contextlib
from typing import Callable

from attrs import define, field, frozen

from relayish.errors import GradientError, RelayishError, TypeCheckError, did_you_mean
from relayish.ir.expr import Call, Expr, Primitive, _short_text, as_expr, provide

FAIL = "fail"       # the effect of an op that can raise at run time on a well-typed input
EFFECTS = frozenset({FAIL})


@frozen
class Infix:
    """How a two-argument op is written between its operands in the text format.

    precedence: a level named in ir/text/operators.py ("equality", "order", "add", "mul").
    associativity: "left" (`a - b - c` is `(a - b) - c` and prints bare) or "none" (parsed
    left to right too, but an operand that is itself at a comparison level always prints in
    parentheses: `(a < b) == c`, never `a < b == c`).
    """
    symbol: str
    precedence: str
    associativity: str = "left"


# ---- result_dtype: each returns attrs -> a dtype string, an argument index, or None ----------

def arg_dtype(i):
    """The result has the dtype of argument i (where(c, x, y): 1)."""
    return lambda attrs: i


def fixed_dtype(dtype):
    """The result always has `dtype` (comparisons: "bool")."""
    return lambda attrs: dtype


def attr_dtype(name, otherwise=None):
    """The result's dtype is the attribute `name` (cast, zeros); when that is None or "",
    `otherwise` (an argument index, or None: unknown)."""
    return lambda attrs: attrs.get(name) or otherwise


_ARG0 = arg_dtype(0)


@define(eq=False, repr=False)
class Op(Primitive):
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
    fast_impl: Callable | None = None
    constant_in: tuple = ()
    infix: Infix | None = None
    prefix: str | None = None
    effects: frozenset = frozenset()
    result_dtype: Callable = _ARG0
    linear_in: tuple = ()
    bilinear: bool = False
    accumulates: bool = False
    fills_zeros: bool = False
    symbolic_zero: bool = False
    identity_in: dict = field(factory=dict)
    involution: bool = False
    shape_only_in: tuple = ()
    scatters_rows: bool = False
    index_range: Callable | None = None
    _fast_impl_of: Callable | None = field(default=None, init=False)   # the impl fast_impl stands for
    _checked_type: object = field(default=None, init=False)

    def __repr__(self):
        return f"<Op {self.name}>"

    def __call__(self, *args, **op_attrs):
        """`rl.op.add(x, y)`: build a call of this op."""
        return make_call(self, list(args), op_attrs)

    def numpy_fast(self, attrs, out_type=None):
        """The direct numpy function for a call with `attrs` (out_type: the call's inferred
        TensorType or None), or None: no fast path, it does not apply, or the impl was replaced
        since (a user's replacement impl is honoured)."""
        if self.fast_impl is None or self._fast_impl_of is not self.impl:
            return None
        return self.fast_impl(attrs, out_type)


_REGISTRY: dict[str, Op] = {}
_GENERATION = [0]      # bumped by every registration: what AD and the backends derive may change


def registry_generation() -> int:
    """A number that changes whenever an op, gradient or tangent rule is (re)registered, so
    that caches of derived programs (rl.optim's compiled problems, the text format's operator
    tables) know when to rebuild."""
    return _GENERATION[0]


def register_op(name, num_inputs, *, attrs=None, type_rule=None, impl=None, differentiable=True,
                normalize_attrs=None, doc="", fast_impl=None, constant_in=(), infix=None,
                prefix=None, effects=frozenset(), result_dtype=_ARG0, linear_in=(),
                bilinear=False, accumulates=False, fills_zeros=False, symbolic_zero=False,
                identity_in=None,
                involution=False, shape_only_in=(), scatters_rows=False, override=False,
                index_range=None) -> Op:
    """Add the op `name` to the registry and return it (the fields: the module docstring).

    A name already registered is an error (Relay's `register_op` refuses one too: a second
    registration by mistake would silently change every program using the op), unless
    `override=True`: then the record is updated in place (calls built before see the new
    rules), keeping the gradient and tangent rules and resetting everything else."""
    if name in _REGISTRY and not override:
        raise RelayishError(f"operator {name!r} is already registered; pass override=True to "
                            f"replace its record")
    effects = frozenset(effects)
    if not effects <= EFFECTS:
        raise RelayishError(f"operator '{name}': unknown effect(s) "
                            f"{', '.join(sorted(effects - EFFECTS))}; known: {', '.join(EFFECTS)}")
    if infix is not None and num_inputs != 2:
        raise RelayishError(f"operator '{name}': an infix operator takes 2 arguments, "
                            f"not {num_inputs}")
    if prefix is not None and num_inputs != 1:
        raise RelayishError(f"operator '{name}': a prefix operator takes 1 argument, "
                            f"not {num_inputs}")
    if scatters_rows and (num_inputs != 3 or "axis" not in (attrs or {})):
        raise RelayishError(f"operator '{name}': an op that scatters rows takes 3 arguments "
                            f"(g, indices, like) and an axis attribute")
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
    op.fast_impl = fast_impl
    op._fast_impl_of = impl
    op.constant_in = tuple(constant_in)
    op.infix = infix
    op.prefix = prefix
    op.effects = effects
    op.result_dtype = result_dtype
    op.linear_in = tuple(linear_in)
    op.bilinear = bilinear
    op.accumulates = accumulates
    op.fills_zeros = fills_zeros
    op.symbolic_zero = symbolic_zero
    op.identity_in = dict(identity_in or {})
    op.involution = involution
    op.shape_only_in = tuple(shape_only_in)
    op.scatters_rows = scatters_rows
    op.index_range = index_range
    return op


def register_alias(name, target) -> Op:
    """`name` parses to the op `target` (the same Op object, printed under target's name):
    Relay's `nn.relu` is `relu`."""
    op = get_op(target)
    if _REGISTRY.get(name, op) is not op:
        raise RelayishError(f"cannot alias {name!r} to {target!r}: {name!r} is an operator "
                            f"of its own")
    _REGISTRY[name] = op
    _GENERATION[0] += 1
    return op


def unregister(name) -> None:
    """Remove the op (or alias) `name` from the registry, with every alias pointing at it.
    Calls built before keep their Op object; new text and `get_op` no longer find it."""
    op = get_op(name)
    for key in [k for k, v in _REGISTRY.items() if v is op or k == name]:
        del _REGISTRY[key]
    _GENERATION[0] += 1


@contextlib.contextmanager
def registered(name, num_inputs, **record):
    """`with registered("my_op", 1, type_rule=..., impl=...) as op:` a throwaway op for a
    test, removed on exit (the name must be free)."""
    if name in _REGISTRY:
        raise RelayishError(f"operator {name!r} is already registered")
    op = register_op(name, num_inputs, **record)
    try:
        yield op
    finally:
        if _REGISTRY.get(name) is op:
            unregister(name)


def get_op(name) -> Op:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise RelayishError(f"unknown operator {name!r}{did_you_mean(name, _REGISTRY)}") \
            from None


def list_ops() -> list:
    return sorted(_REGISTRY)


def aliases_of(op) -> list:
    """The other names `op` is registered under (register_alias: `nn.relu` for relu)."""
    return [name for name, value in _REGISTRY.items() if value is op and name != op.name]


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


provide("make_call", make_call)      # `x + y` on expressions (expr.py cannot import this module)


def not_a_value_message(op) -> str:
    """Why an op may not stand as a value, with the fix: ops are only called, so passing one
    where a function is wanted takes a closure, `fn (%a, %b) { add(%a, %b) }`. The parser (a
    bare op name) and the type checker (an Op node built in Python) say the same."""
    n = op.num_inputs
    params = ", ".join("%" + (chr(ord("a") + i) if i < 26 else f"a{i}") for i in range(n)) \
        if n >= 0 else "%a, ..."
    return (f"operator '{op.name}' is not a value: operators are only called, as in "
            f"{op.name}(...); to pass it as a function, wrap it in one: "
            f"fn ({params}) {{ {op.name}({params}) }}")


_AS_TYPE_ERROR: dict = {}      # an exception class -> its TypeCheckError twin (made once)


def type_rule_error(exc, message) -> TypeCheckError:
    """The TypeCheckError to raise for `exc`, raised by an op's type rule: it says `message`
    (the call's text, the argument types) and is also an instance of exc's own class, with its
    attributes, so a caller's `except ValueError` (or the user's own error class) still catches
    what the user's rule raised, and `except rl.TypeCheckError` catches every type error."""
    cls = type(exc)
    twin = cls if issubclass(cls, TypeCheckError) else _AS_TYPE_ERROR.get(cls)
    if twin is None:
        try:
            twin = type(f"TypeCheckError_{cls.__name__}", (TypeCheckError, cls),
                        {"__str__": lambda self: self.args[0] if self.args else "",
                         "__module__": TypeCheckError.__module__})
        except TypeError:         # a class that cannot be combined (a C layout): no twin
            twin = TypeCheckError
        _AS_TYPE_ERROR[cls] = twin
    err = twin.__new__(twin)
    err.__dict__.update(getattr(exc, "__dict__", {}))
    BaseException.__init__(err, message)
    return err
