"""Algebraic simplification of AD's zeros and ones: `rl.passes.simplify`, `simplify_expr`.

Rules (each reads the Op record, never an op's name; "fill" below is a value every element of
a tensor is known to have: a Constant, or what an effect-free op whose result depends on
nothing but attributes and its arguments' types computes, `zeros(...)`, `ones_like(%x)`):

    op(c1, ..., cn) -> its value      constant folding: an op without effects whose arguments
                                      are Constants (at least one), or sit where the record's
                                      `constant_in` says only their type matters, and whose
                                      result has at most FOLD_LIMIT elements. It runs the
                                      op's own numpy impl, as the interpreter would: NaN and
                                      Inf come out as the program computes them (`inf * 0f`
                                      folds to nan).
    op(a, b) -> a or b                the record's `identity_in` {position: fill}: when that
                                      argument is all `fill` and the other argument's type is
                                      the result's type (no broadcasting, no dtype change):
                                      `zeros + g`, `g + zeros`, `g - zeros`, `g * ones`,
                                      `ones * g`, `g / ones`, `g ** ones`
    op(op(g)) -> g                    the record's `involution`: `negative(negative(g))`
    !r -> its initial value           a read of a reference that no write can have reached
                                      yet (below), when the value `ref(v)` stored is a Constant
                                      or an effect-free op call without arguments (`zeros(..)`)
    let %v = c; ... %v -> c           a let of a Constant (at most FOLD_LIMIT elements) or of
                                      a variable is put in place, so the rules see it

    op(.., z, ..) -> z'               z a zero adjoint (a call of an op whose record says
                                      symbolic_zero: `zero_adjoint(..)`, what reverse AD starts
                                      every adjoint as): a bilinear op with z as one operand
                                      (`g * z`, `matmul(z, g)`), or an op linear in its
                                      `linear_in` positions with zero adjoints in all of them
                                      (`-z`, `sum(z)`, `broadcast_to_like(z, %t)`, `z / g`,
                                      `z1 + z2`), gives the zero adjoint z' of its own type, when
                                      the op has no effects, the type is static and the
                                      arguments dropped are pure. Checked before folding, so a
                                      product with a Constant stays a zero adjoint.

Not a rule: `g * zeros -> zeros` for a user's zeros (`zeros(..)`, `zeros_like(%x)`, a Constant).
IEEE gives nan for `inf * 0` and `nan * 0`, so replacing the product would hide a NaN or Inf of
`g` that the program shows. Only when `g` is known finite is it safe, and the one such `g` this
pass knows is a Constant, which constant folding covers (it computes the product, and gives nan
where IEEE does). A zero adjoint is different: it stands for "nothing was added here", and jax's
symbolic zeros fold its products whatever `g` holds, so does this pass (and the jax backend,
backend/jax/zeros.py): the optimized gradient gives 0 there where the raw transform computes
nan on the interpreter, the one departure from IEEE besides the sign of a zero (notes/ad.md,
"Zero adjoints").

NaN and Inf. Every rule but one gives back bit for bit what the program computed: x * 1, x / 1,
x - 0, x ** 1, -(-x) are x for every x, NaN, Inf and -0.0 included, and integer arithmetic is
exact (ops/elementwise.py says how x ** 1 was checked).
The exception is the sign of a zero: IEEE's -0.0 + 0.0 is +0.0, so `zeros + g` at g = -0.0 was
+0.0 and becomes -0.0 (and `g - zeros` with a fill of -0.0, likewise). Only 1/x, atan2 or a
printed sign can tell them apart; jax's symbolic zeros behave the same way, and XLA's
simplifier makes the same rewrite.

References never written. A reference made by `ref(v)` is tracked when every place its value
flows to is a let, a tuple field, a projection, the operand of a read or the target of a write
(so no call, closure result, branch result or other reference can hold it, and every write to
it is a `r := ...` in the program). A read of a tracked reference, in the same function body as
the `ref(v)` that made it (each call of a function makes its own), that comes before every
write to it in evaluation order (text order: a write inside a closure counts where the closure
is written, since it can only run after that), reads `v`. A node shared at two places is left
alone. Reverse AD makes every adjoint a `ref(zeros(...))`; the first `r := !r + g` becomes
`r := zeros + g`, then `r := g`.

Types: every rule gives a value of the replaced expression's type (identity_in checks it; a
folded value has the type the checker inferred), and rebuilt nodes take the checked type of the
node they replace. Let-chains are loops; other nesting recurses under `run_deep`.
"""
from __future__ import annotations

import numpy as np

from relayish.ir.expr import (Call, Constant, Function, Let, RefCreate, RefRead, RefWrite,
                              Tuple, TupleGetItem, Var)
from relayish.ir.op import Op
from relayish.ir.passes.base import TYPED, Pass, keep_type, map_globals, typed_let_chain
from relayish.ir.passes.fold_constant import FOLD_LIMIT, fold_call, is_pure
from relayish.ir.passes.uses import operands
from relayish.ir.types import TensorType
from relayish.ir.visitor import ExprMutator, no_gc, run_deep

__all__ = ["Simplify", "simplify_expr", "FOLD_LIMIT"]

_PROBE_LIMIT = 1 << 20   # a fill is learned by computing the op at most this large


# ---- references no write can have reached ---------------------------------------------------

class _RefFlow:
    """Which reads of tracked references come before every write (the module text).

    A walk in evaluation order (children in field order, a let's value before its body); each
    value has a fact: ("ref", id(RefCreate)), ("tuple", [facts]) or None."""

    def __init__(self):
        self.holds: dict[int, object] = {}     # id(let-bound Var) -> the fact of its value
        self.memo: dict[int, object] = {}
        self.seen_twice: set[int] = set()
        self.escaped: set[int] = set()
        self.created: dict[int, tuple] = {}    # id(RefCreate) -> (function id, its node)
        self.first_write: dict[int, int] = {}  # id(RefCreate) -> position of its first write
        self.reads: list = []                  # (RefRead, id(RefCreate), position, function id)
        self.defs: dict[int, object] = {}      # id(let-bound Var) -> its value
        self.position = 0
        self.function = [0]

    def escape(self, fact):
        stack = [fact]
        while stack:
            f = stack.pop()
            if f is None:
                continue
            if f[0] == "ref":
                self.escaped.add(f[1])
            else:
                stack.extend(f[1])

    def use(self, child):
        """The fact of `child`, for a use that keeps track of it."""
        if isinstance(child, Var):
            return self.holds.get(id(child))
        if id(child) in self.memo:
            self.seen_twice.add(id(child))
            return self.memo[id(child)]
        fact = self.fact(child)
        self.memo[id(child)] = fact
        return fact

    def fact(self, e):
        if isinstance(e, Let):
            while isinstance(e, Let):
                self.defs[id(e.var)] = e.value
                self.holds[id(e.var)] = self.use(e.value)
                e = e.body
                if isinstance(e, Let) and id(e) in self.memo:
                    break
            return self.use(e)
        if isinstance(e, Tuple):
            return ("tuple", [self.use(f) for f in e.fields])
        if isinstance(e, TupleGetItem):
            t = self.use(e.tuple_value)
            return t[1][e.index] if t is not None and t[0] == "tuple" else None
        if isinstance(e, RefCreate):
            self.escape(self.use(e.value))
            self.created[id(e)] = (self.function[-1], e)
            return ("ref", id(e))
        if isinstance(e, RefRead):
            r = self.use(e.ref)
            self.position += 1
            if r is not None and r[0] == "ref":
                self.reads.append((e, r[1], self.position, self.function[-1]))
            return None
        if isinstance(e, RefWrite):
            r = self.use(e.ref)
            self.escape(self.use(e.value))
            self.position += 1
            if r is not None and r[0] == "ref":
                self.first_write.setdefault(r[1], self.position)
            return None
        if isinstance(e, Function):
            self.function.append(id(e))
            self.escape(self.use(e.body))
            self.function.pop()
            return None
        for child in operands(e):          # any other node: what flows into it escapes
            self.escape(self.use(child))
        return None

    def unwritten_reads(self, expr) -> dict:
        """id(RefRead) -> the `ref(v)` whose `v` it reads."""
        self.escape(self.use(expr))
        out = {}
        for read, ref, position, function in self.reads:
            made_in, create = self.created[ref]
            if ref in self.escaped or ref in self.seen_twice or id(read) in self.seen_twice \
                    or made_in != function or self.first_write.get(ref, position) < position:
                continue
            init = create.value
            if isinstance(init, Var):       # `let %z = zeros(..); ref(%z)`: the closed value
                init = self.defs.get(id(init), init)
            if isinstance(init, Constant) or (isinstance(init, Call) and isinstance(init.op, Op)
                                              and not init.args and not init.op.effects):
                out[id(read)] = init
        return out


# ---- the rewrite ----------------------------------------------------------------------------

def _tensor_type(e):
    t = getattr(e, "_checked_type", None)
    return t if isinstance(t, TensorType) else None


class _Simplify(ExprMutator):
    def __init__(self, unwritten):
        super().__init__()
        self.unwritten = unwritten          # id(RefRead) -> the stored value it reads
        self.subst: dict[int, object] = {}  # id(let-bound Var) -> the Constant it holds
        self.values: dict[int, object] = {} # id(let-bound Var) -> its (simplified) value
        self.fills: dict = {}               # (op, attrs, types) -> fill or None (probe memo)
        self.rewrites = 0

    def visit(self, expr):
        # a rebuilt node has the type of the node it replaces (every rule keeps types)
        return keep_type(super().visit(expr), expr)

    # ---- facts -------------------------------------------------------------------------------
    def constant_value(self, e):
        """The value of `e` if it is a Constant (after substitution), else None."""
        return e.data if isinstance(e, Constant) else None

    def fill(self, e):
        """The value every element of `e` has, when known; else None."""
        if isinstance(e, Var):
            e = self.values.get(id(e), e)
        if isinstance(e, Constant):
            data = e.data
            if data.size and data.dtype != np.bool_ and (data == data.flat[0]).all():
                return data.flat[0].item()
            return None
        if isinstance(e, Call) and isinstance(e.op, Op):
            value = self.evaluate(e, _PROBE_LIMIT)
            if value is not None and value.size and value.dtype != np.bool_ and \
                    (value == value.flat[0]).all():
                return value.flat[0].item()
        return None

    def evaluate(self, call, limit):
        """The value of an op call computed now (constant folding), or None when it cannot be:
        the op has effects, an argument is neither a Constant nor where only its type counts,
        a type is not a known tensor type, or the result is larger than `limit`."""
        op = call.op
        if op.effects or op.impl is None:
            return None
        # the cheap test first (most calls have a variable operand): it was half of the pass
        constant_in, subst = op.constant_in, self.subst
        for k, a in enumerate(call.args):
            if k not in constant_in and not isinstance(
                    subst.get(id(a), a) if isinstance(a, Var) else a, Constant):
                return None
        out_type = _tensor_type(call)
        if out_type is None or any(d is None for d in out_type.shape) or \
                int(np.prod(out_type.shape, dtype=np.int64)) > limit:
            return None
        args, key = [], [op, _frozen(call.attrs), out_type]
        for k, a in enumerate(call.args):
            if isinstance(a, Var) and id(a) in self.subst:
                a = self.subst[id(a)]
            if isinstance(a, Constant):
                args.append(a.data)
                key.append(("c", a.data.dtype.str, a.data.shape, a.data.tobytes()))
                continue
            t = _tensor_type(a)
            if k not in op.constant_in or t is None or any(d is None for d in t.shape):
                return None
            args.append(np.zeros(t.shape, t.dtype))     # only its shape and dtype count
            key.append(("t", t))
        key = tuple(key)
        if key in self.fills:
            return self.fills[key]
        value = fold_call(op, call.attrs, args, out_type)
        self.fills[key] = value
        return value

    def definition(self, e):
        """The simplified value a let-bound Var holds (or `e` itself)."""
        return self.values.get(id(e), e) if isinstance(e, Var) else e

    def zero_adjoint(self, e):
        """The `zero_adjoint(..)` call `e` is (or a let-bound Var holds), else None."""
        e = self.definition(e)
        if isinstance(e, Call) and isinstance(e.op, Op) and e.op.symbolic_zero:
            return e
        return None

    def zero_adjoint_result(self, call):
        """A fresh zero adjoint of `call`'s type when the call is bilinear in a zero adjoint or
        linear in zero adjoints only (the module text), else None."""
        op, args = call.op, call.args
        out_type = _tensor_type(call)
        if op.effects or out_type is None or any(not isinstance(d, int) for d in out_type.shape):
            return None
        if op.bilinear and len(args) >= 2:
            zero = self.zero_adjoint(args[0])
            if zero is None:
                zero = self.zero_adjoint(args[1])
        elif op.linear_in and all(k < len(args) and self.zero_adjoint(args[k]) is not None
                                  for k in op.linear_in):
            zero = self.zero_adjoint(args[op.linear_in[0]])
        else:
            return None
        if zero is None or not all(is_pure(a) for a in args):
            return None
        out = Call(zero.op, [], {"shape": tuple(out_type.shape), "dtype": out_type.dtype})
        out._checked_type = out_type
        return out

    # ---- rules -------------------------------------------------------------------------------
    def visit_Var(self, e):
        return self.subst.get(id(e), e)

    def visit_RefRead(self, e):
        init = self.unwritten.get(id(e))
        if init is not None:
            self.rewrites += 1
            return self.visit(init)
        return super().visit_RefRead(e)

    def visit_Call(self, e):
        new = super().visit_Call(e)
        op = new.op
        if not isinstance(op, Op):
            return new
        if getattr(new, "_checked_type", None) is None:
            new._checked_type = getattr(e, "_checked_type", None)
        # folded only when a Constant goes in: `zeros(..)` or `ones_like(%x)` alone is one op
        # already, and the backends recognise it (the interpreter shares one zero array for
        # the record's fills_zeros); the rules still read its fill
        zero = self.zero_adjoint_result(new)
        if zero is not None:
            self.rewrites += 1
            return zero
        value = self.evaluate(new, FOLD_LIMIT) if any(
            isinstance(a, Constant) for a in new.args) else None
        if value is not None:
            self.rewrites += 1
            out = Constant(value)
            out._checked_type = new._checked_type
            return out
        result_type = getattr(new, "_checked_type", None)
        if op.identity_in and len(new.args) == 2 and result_type is not None:
            for k, fill in op.identity_in.items():
                other = new.args[1 - k]
                if getattr(other, "_checked_type", None) == result_type and \
                        self.fill(new.args[k]) == fill and fill is not None:
                    self.rewrites += 1
                    return other
        if op.involution and len(new.args) == 1:
            inner = self.definition(new.args[0])
            if isinstance(inner, Call) and inner.op is op and len(inner.args) == 1 and \
                    inner.attrs == new.attrs and \
                    getattr(inner.args[0], "_checked_type", None) == result_type:
                self.rewrites += 1
                return inner.args[0]
        return new

    def visit_Let(self, e):
        chain = []
        while isinstance(e, Let):
            value = self.visit(e.value)
            var = e.var
            if var.type_annotation is None and (isinstance(value, Var) or isinstance(
                    value, Constant) and value.data.size <= FOLD_LIMIT):
                # put in place: the rules see the constant, and a rule that gave back a
                # variable (`let %a = zeros + %g`) leaves no `let %a = %g` behind
                self.subst[id(var)] = value
            else:
                if isinstance(value, (Call, Constant, Var)):
                    self.values[id(var)] = value
                chain.append((var, value))
            e = e.body
        return typed_let_chain(chain, self.visit(e))


def _frozen(attrs):
    return tuple(sorted((k, repr(v)) for k, v in attrs.items()))


def simplify_expr(expr):
    """`expr` (type-checked) with the rules of the module text applied, bottom-up, once."""
    def run():
        return _Simplify(_RefFlow().unwritten_reads(expr)).visit(expr)
    with no_gc():
        return run_deep(run)


class Simplify(Pass):
    """`rl.passes.simplify`: AD's zeros and ones simplified, constants folded (simplify.py).

        >>> f = rl.parse_expr("fn (%g: float32) { zeros(shape=[], dtype=\"float32\") + %g * 1f }")
        >>> print(rl.passes.simplify(f))
        fn (%g: float32) { %g }
    """

    name = "simplify"
    requires = frozenset([TYPED])       # the rules compare checked types
    preserves = frozenset([TYPED])      # and keep them on what they rebuild

    def run(self, mod):
        return map_globals(mod, simplify_expr, self.name)
