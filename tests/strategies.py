"""Hypothesis strategies: random WELL-TYPED relayish programs with matching inputs.

    from strategies import programs, assert_value_has_type

    @given(programs())
    def test_something(prog):
        mod, args = prog                    # mod["main"] is the program, args its inputs
        out = rl.evaluate(mod, *args)

    @given(programs(differentiable=True))   # float64 tensor inputs, smooth ops, float64 scalar out
    def test_gradient(prog): ...

Generation is type-directed: pick the type a position must have, then build an expression of
that type from the variables in scope (tensors, tuples, closures, lets, ifs, refs, the prelude's
List/Option/Tree/Nat with constructors and matches, calls of @map/@foldl/@foldr/@length/
@nat_iterate). Every choice is a hypothesis draw whose first alternative is the simplest, so
failing programs shrink. Programs stay small (depth-bounded) and numerically tame: inputs and
constants lie in [-1, 1], exp only sees tanh's output, denominators are 1.5 + tanh(..) and the
arguments of log/sqrt/power are 1 + y*y.

Expressions whose type nothing else pins down (a nullary constructor like Nil as the data of a
match or the tuple of a projection) are bound by an annotated `let` first, so every generated
program has one, fully known type.
"""
from __future__ import annotations

from typing import NamedTuple

import attrs
import numpy as np
import pytest
from hypothesis import strategies as st

import relayish as rl
from relayish.ir.types import substitute, walk_type

F32, F64 = "float32", "float64"
SHAPES = ((), (2,), (3,), (2, 3), (3, 2))


def deep(default, full):
    """The sizes of a deep-program test: `default` in the default run (past Python's recursion
    limit, so a recursive walk still fails there), `full` under `-m slow`."""
    return [default, pytest.param(full, marks=pytest.mark.slow)]


def f32(name, shape=()):
    """A float32 variable (the tests' most common binder)."""
    return rl.var(name, shape=shape, dtype="float32")


def list_module():
    """A module with List[a] = Cons(a, List[a]) | Nil: (mod, List, Cons, Nil)."""
    mod = rl.Module()
    a = rl.TypeVar("a")
    lst = rl.GlobalTypeVar("List")
    cons = rl.Constructor("Cons", [a, rl.TypeCall(lst, [a])], lst)
    nil = rl.Constructor("Nil", [], lst)
    mod.add_type(rl.TypeData(lst, [a], [cons, nil]))
    return mod, lst, cons, nil


# Lengths of the long let-chains that deep-program tests build: the 10^5 that AD output reaches
# under -m slow; by default 2,000, twice Python's recursion limit (a recursive walk fails there
# as surely as at 10^4, at a fifth of the cost; a multiple of 2,000, as tests/backend/test_jax.py's
# long_let_chain needs)
CHAIN_LENGTHS = deep(2_000, 100_000)
BOOL = rl.TensorType((), "bool")
INT = rl.TensorType((), "int32")
UNIT = rl.TupleType([])

SMOOTH_UNARY = ("tanh", "sin", "cos", "sigmoid", "negative", "exp_tanh", "log1p_sq", "sqrt1p_sq",
                "pow1p_sq")
ROUGH_UNARY = ("abs", "relu")
SMOOTH_BINARY = ("add", "subtract", "multiply", "safe_divide")
ROUGH_BINARY = ("maximum", "minimum")
COMPARISONS = ("less", "greater", "less_equal", "greater_equal")


@attrs.define
class Options:
    """What the generator may use. `differentiable` implies float64 and smooth ops only."""
    dtypes: tuple = (F32, F64)
    shapes: tuple = SHAPES
    max_depth: int = 3
    differentiable: bool = False
    refs: bool = True
    closures: bool = True
    adts: bool = True
    ifs: bool = True
    globals: bool = True          # calls of the prelude's @map, @foldl, ... (AD must follow them)
    tensor_constants: bool = True  # non-scalar constants (else scalars broadcast by ops)
    # float comparisons compare `a + 0.3701` with `b`: programs that compare one quantity computed
    # two ways (mean in float64 against mean in float32, cast) otherwise branch on a last-ulp
    # tie, which two correct backends may round apart (numpy's pairwise sum against XLA's)
    offset_comparisons: bool = False


class GeneratedProgram(NamedTuple):
    """`mod, args = prog`; mod["main"] is the program, args match its parameters."""
    mod: rl.Module
    args: tuple

    @property
    def func(self):
        return self.mod["main"]

    @property
    def param_types(self):
        return [p.type_annotation for p in self.func.params]

    @property
    def result_type(self):
        return self.func.ret_type


# ---- helpers on types ----------------------------------------------------------------------

def has_adt(t) -> bool:
    """Whether an ADT type occurs in t (its type arguments may be left open by a nullary ctor)."""
    return any(isinstance(s, rl.TypeCall) for s in walk_type(t))


def _is_float(t):
    return isinstance(t, rl.TensorType) and t.is_float


# ---- the generator -------------------------------------------------------------------------

class _Generator:
    def __init__(self, draw, prelude, opts, rng):
        self.draw = draw
        self.p = prelude
        self.opts = opts
        self.rng = rng
        self.counter = 0

    # ---- choices: the first alternative is the one hypothesis shrinks towards ----------------
    def pick(self, options):
        """options: (weight, thunk) pairs, falsy entries ignored; calls the chosen thunk."""
        options = [o for o in options if o]
        total = sum(w for w, _ in options)
        k = self.draw(st.integers(0, total - 1))
        for weight, thunk in options:
            if k < weight:
                return thunk()
            k -= weight
        raise AssertionError("unreachable")

    def choice(self, seq):
        return self.draw(st.sampled_from(list(seq)))

    def fresh(self, t, annotate=True):
        self.counter += 1
        # sometimes reuse a name: shadowing must survive printing and parsing
        name = "x" if self.draw(st.integers(0, 9)) == 9 else f"v{self.counter}"
        return rl.Var(name, t if annotate else None)

    # ---- types -------------------------------------------------------------------------------
    def tensor_type(self, dtype=None, shape=None):
        dtype = dtype or self.choice(self.opts.dtypes)
        shape = self.choice(self.opts.shapes) if shape is None else shape
        return rl.TensorType(shape, dtype)

    def value_type(self, level=1):
        """A random type for a let, a parameter or a field."""
        o = self.opts
        if level <= 0:
            return self.pick([(8, self.tensor_type), (1, lambda: BOOL)])

        def sub():
            return self.value_type(level - 1)

        def n(lo, hi):
            return self.draw(st.integers(lo, hi))

        return self.pick([
            (8, self.tensor_type), (1, lambda: BOOL), (1, lambda: INT),
            (2, lambda: rl.TupleType([sub() for _ in range(n(2, 3))])),
            o.closures and (2, lambda: rl.FuncType([self.arg_type(level - 1) for _ in range(n(1, 2))],
                                                   sub())),
            o.refs and (1, lambda: rl.RefType(sub())),
            o.adts and (1, lambda: rl.TypeCall(self.p.List, [sub()])),
            o.adts and (1, lambda: rl.TypeCall(self.p.Option, [sub()])),
            o.adts and (1, lambda: rl.TypeCall(self.p.Tree, [self.tensor_type()])),
        ])

    def arg_type(self, level=0):
        """The type of a closure's parameter: a value type, or now and then a function
        (so closures take closures)."""
        return self.pick([
            (3, lambda: self.value_type(level)),
            self.opts.closures and (1, lambda: rl.FuncType([self.tensor_type()], self.tensor_type())),
        ])

    def input_type(self):
        """A type for a parameter of @main: tensors, tuples of them, lists and options."""
        if self.opts.differentiable:
            return self.tensor_type(F64)
        return self.pick([
            (8, self.tensor_type),
            (1, lambda: rl.TupleType([self.tensor_type(), self.tensor_type()])),
            self.opts.adts and (1, lambda: rl.TypeCall(self.p.List, [self.tensor_type()])),
            self.opts.adts and (1, lambda: rl.TypeCall(self.p.Option, [self.tensor_type()])),
        ])

    # ---- expressions ---------------------------------------------------------------------------
    def expr(self, t, env, depth):
        """An expression of type t using the (Var, Type) pairs of env; depth bounds nesting."""
        if depth <= 0:
            return self.leaf(t, env)
        forms = [(4, lambda: self.leaf(t, env))]
        forms += self.type_forms(t, env, depth - 1)
        forms += self.generic_forms(t, env, depth - 1)
        return self.pick(forms)

    def pinned(self, t, env, depth):
        """An expression of type t whose type is known without context (see module doc)."""
        e = self.expr(t, env, depth)
        if not has_adt(t) or isinstance(e, rl.Var):
            return e
        v = self.fresh(t)
        return rl.Let(v, e, v)

    def leaf(self, t, env):
        """A variable of type t (or a field of one, or a float variable reshaped to t), else a
        smallest constructed value."""
        same = [v for v, vt in env if vt == t]
        refs = [v for v, vt in env if vt == rl.RefType(t)]
        fields = [(v, i) for v, vt in env if isinstance(vt, rl.TupleType)
                  for i, ft in enumerate(vt.fields) if ft == t]
        floats = [(v, vt) for v, vt in env if _is_float(t) and _is_float(vt) and vt != t
                  and (vt.dtype == t.dtype or not self.opts.differentiable)]
        return self.pick([
            same and (8, lambda: self.choice(same)),
            (3, lambda: self.construct(t, env)),
            floats and (6, lambda: self.adapt(*self.choice(floats), t)),
            fields and (2, lambda: rl.TupleGetItem(*self.choice(fields))),
            refs and (1, lambda: rl.RefRead(self.choice(refs))),
        ])

    def adapt(self, x, xt, t):
        """The float tensor x of type xt turned into type t (cast, reduce, broadcast)."""
        if xt.dtype != t.dtype:
            x = rl.cast(x, t.dtype)
        if xt.shape == t.shape:
            return x
        if t.shape == ():
            return getattr(rl, self.choice(("sum", "mean")))(x)
        if xt.shape != t.shape[len(t.shape) - len(xt.shape):]:
            x = rl.mean(x)
        return rl.broadcast_to(x, t.shape)

    def construct(self, t, env):
        """A smallest expression of type t built from its constructors (no variables needed)."""
        p = self.p
        if isinstance(t, rl.TensorType):
            return self.constant(t)
        if isinstance(t, rl.TupleType):
            return rl.Tuple([self.leaf(f, env) for f in t.fields])
        if isinstance(t, rl.FuncType):
            params = [self.fresh(a) for a in t.arg_types]
            body = self.leaf(t.ret_type, env + list(zip(params, t.arg_types)))
            return rl.Function(params, body, self._maybe(t.ret_type))
        if isinstance(t, rl.RefType):
            return rl.RefCreate(self.leaf(t.value, env))
        if isinstance(t, rl.TypeCall):
            u = t.args[0] if t.args else None
            if t.func == p.List:
                return self.pick([(1, lambda: p.Nil()),
                                  (1, lambda: p.Cons(self.leaf(u, env), p.Nil()))])
            if t.func == p.Option:
                return self.pick([(1, lambda: p.Nothing()), (1, lambda: p.Some(self.leaf(u, env)))])
            if t.func == p.Tree:
                return p.Leaf(self.leaf(u, env))
            if t.func == p.Nat:
                return p.make_nat(self.draw(st.integers(0, 3)))
        raise AssertionError(f"cannot build a value of type {t!r}")

    def _maybe(self, t):
        """A return-type annotation, sometimes."""
        return t if self.draw(st.booleans()) else None

    def constant(self, t):
        shape, dtype = t.shape, t.dtype
        if shape and not self.opts.tensor_constants and dtype != "bool":
            return rl.op.broadcast_to(self.constant(rl.TensorType((), dtype)), shape=shape)
        if dtype == "bool":
            data = self.rng.random(shape) < 0.5
        elif dtype.startswith("int"):
            data = self.rng.integers(-3, 4, shape)
        else:
            data = np.round(self.rng.uniform(-1.0, 1.0, shape), 2)
        return rl.const(np.asarray(data, dtype=dtype))

    # ---- forms specific to the target type --------------------------------------------------
    def type_forms(self, t, env, d):
        o, p = self.opts, self.p
        e = self.expr
        if isinstance(t, rl.TensorType):
            if t.is_float:
                return self.float_forms(t, env, d)
            if t.dtype == "bool":
                return self.bool_forms(t, env, d)
            if t == INT:
                return [(2, lambda: rl.add(e(INT, env, d), e(INT, env, d))),
                        o.adts and o.globals and (2, lambda: p.length(
                            self.pinned(rl.TypeCall(p.List, [self.value_type(0)]), env, d)))]
            return []
        if isinstance(t, rl.TupleType):
            return [(4, lambda: rl.Tuple([e(f, env, d) for f in t.fields]))]
        if isinstance(t, rl.FuncType):
            def closure():
                params = [self.fresh(a) for a in t.arg_types]
                body = e(t.ret_type, env + list(zip(params, t.arg_types)), d)
                return rl.Function(params, body, self._maybe(t.ret_type))
            return [(4, closure)]
        if isinstance(t, rl.RefType):
            return [(3, lambda: rl.RefCreate(e(t.value, env, d)))]
        if isinstance(t, rl.TypeCall):
            u = t.args[0] if t.args else None
            if t.func == p.List:
                def mapped():
                    a = self.value_type(0)
                    return p.map(e(rl.FuncType([a], u), env, d),
                                 e(rl.TypeCall(p.List, [a]), env, d))
                return [(3, lambda: p.Cons(e(u, env, d), e(t, env, d))),
                        o.globals and o.closures and (1, mapped)]
            if t.func == p.Option:
                return [(3, lambda: p.Some(e(u, env, d)))]
            if t.func == p.Tree:
                return [(2, lambda: p.Leaf(e(u, env, d))),
                        (2, lambda: p.Node(e(t, env, d), e(t, env, d)))]
            if t.func == p.Nat:
                return [(2, lambda: p.S(e(t, env, d)))]
        return []

    def float_forms(self, t, env, d):
        o = self.opts
        e = self.expr
        unary = SMOOTH_UNARY + (() if o.differentiable else ROUGH_UNARY)
        binary = SMOOTH_BINARY + (() if o.differentiable else ROUGH_BINARY)
        forms = [
            (4, lambda: self.unary(self.choice(unary), e(t, env, d), t.dtype)),
            (4, lambda: self.binary(self.choice(binary), t, env, d)),
            (2, lambda: self.reduction(t, env, d)),
            (1, lambda: getattr(rl, self.choice(("zeros_like", "ones_like")))(e(t, env, d))),
            (1, lambda: rl.where(e(rl.TensorType(t.shape, "bool"), env, d), e(t, env, d),
                                 e(t, env, d))),
        ]
        if t.ndim == 2:
            m, n = t.shape
            forms.append((2, lambda: self.matmul(t, env, d)))
            forms.append((1, lambda: rl.transpose(e(rl.TensorType((n, m), t.dtype), env, d))))
            forms.append((1, lambda: rl.stack(
                [e(rl.TensorType((n,), t.dtype), env, d) for _ in range(m)], axis=0)))
            forms.append((1, lambda: rl.reshape(
                e(rl.TensorType(self.choice([(m * n,), (n, m)]), t.dtype), env, d), t.shape)))
        if t.ndim == 1 and t.shape[0] >= 2:
            k = t.shape[0] - 1
            forms.append((1, lambda: rl.concatenate(
                [e(rl.TensorType((k,), t.dtype), env, d),
                 e(rl.TensorType((1,), t.dtype), env, d)], axis=0)))
            forms.append((1, lambda: getattr(rl, self.choice(("softmax", "log_softmax")))(
                e(t, env, d))))
        if t.ndim == 0:
            forms.append((1, lambda: rl.take(e(rl.TensorType((3,), t.dtype), env, d),
                                             int(self.draw(st.integers(0, 2))))))
        others = [dt for dt in o.dtypes if dt != t.dtype]
        if others and not o.differentiable:
            forms.append((1, lambda: rl.cast(e(rl.TensorType(t.shape, self.choice(others)),
                                                  env, d), t.dtype)))
        return forms

    def unary(self, name, x, dtype):
        """name(x); the composite names keep log, sqrt and power on arguments >= 1."""
        if name in ("log1p_sq", "sqrt1p_sq", "pow1p_sq") and not isinstance(x, (rl.Var, rl.Constant)):
            # x is used twice: bind it, so no binder inside x is bound at two places
            v = self.fresh(None, annotate=False)
            return rl.Let(v, x, self.unary(name, v, dtype))
        one = rl.const(1.0, dtype)     # explicit dtypes: `1.0 + x` cannot always see x's dtype
        if name == "exp_tanh":
            return rl.exp(rl.tanh(x))
        if name == "log1p_sq":
            return rl.log(one + x * x)
        if name == "sqrt1p_sq":
            return rl.sqrt(one + x * x)
        if name == "pow1p_sq":
            return rl.power(one + x * x, rl.const(1.5, dtype))
        return getattr(rl, name)(x)

    def binary(self, name, t, env, d):
        """name(a, b) of type t; one operand may be a scalar or a trailing shape (broadcasting)."""
        smaller = [()] + [t.shape[i:] for i in range(1, t.ndim)]
        other = rl.TensorType(self.choice(smaller) if self.draw(st.booleans()) else t.shape,
                              t.dtype)
        a, b = self.expr(t, env, d), self.expr(other, env, d)
        if self.draw(st.booleans()):
            a, b = b, a
        if name == "safe_divide":
            return rl.divide(a, rl.const(1.5, t.dtype) + rl.tanh(b))
        return getattr(rl, name)(a, b)

    def reduction(self, t, env, d):
        """A reduction to type t: over all axes (scalar t) or over an inserted axis."""
        names = ("sum", "mean") if self.opts.differentiable else ("sum", "mean", "max", "min")
        name = self.choice(names)
        if t.ndim == 0 and self.draw(st.booleans()):
            return getattr(rl, name)(self.expr(self.tensor_type(t.dtype), env, d))
        axis = self.draw(st.integers(0, t.ndim))
        shape = t.shape[:axis] + (self.draw(st.integers(2, 3)),) + t.shape[axis:]
        return getattr(rl, name)(self.expr(rl.TensorType(shape, t.dtype), env, d), axis=axis)

    def matmul(self, t, env, d):
        m, n = t.shape
        k = self.draw(st.integers(2, 3))
        return rl.matmul(self.expr(rl.TensorType((m, k), t.dtype), env, d),
                         self.expr(rl.TensorType((k, n), t.dtype), env, d))

    def bool_forms(self, t, env, d):
        e = self.expr

        def compare():
            operand = rl.TensorType(t.shape, self.choice(self.opts.dtypes))
            left = e(operand, env, d)
            if self.opts.offset_comparisons and operand.dtype.startswith("float"):
                left = left + rl.const(0.3701, operand.dtype)
            return getattr(rl, self.choice(COMPARISONS))(left, e(operand, env, d))

        forms = [(6, compare),
                 (1, lambda: rl.logical_not(e(t, env, d))),
                 (1, lambda: getattr(rl, self.choice(("logical_and", "logical_or")))(
                     e(t, env, d), e(t, env, d)))]
        if t == BOOL:
            forms.append((1, lambda: rl.greater(e(INT, env, d), rl.const(1))))
        return forms

    # ---- forms for any target type -----------------------------------------------------------
    def generic_forms(self, t, env, d):
        o, p = self.opts, self.p
        e = self.expr
        fn_vars = [(v, vt) for v, vt in env if isinstance(vt, rl.FuncType) and vt.ret_type == t]
        ref_vars = [(v, vt) for v, vt in env if isinstance(vt, rl.RefType)]

        def let():
            # level 2 now and then: closures taking or returning closures, lists of tuples...
            u = self.value_type(1 + (self.draw(st.integers(0, 3)) == 3))
            value = e(u, env, d)
            v = self.fresh(u, annotate=has_adt(u) or self.draw(st.booleans()))
            return rl.Let(v, value, e(t, env + [(v, u)], d))

        def if_():
            return rl.If(e(BOOL, env, d), e(t, env, d), e(t, env, d))

        def project():
            fields = [self.value_type(0) for _ in range(self.draw(st.integers(1, 2)))]
            i = self.draw(st.integers(0, len(fields)))
            fields.insert(i, t)
            return rl.TupleGetItem(self.pinned(rl.TupleType(fields), env, d), i)

        def call_var():
            f, ft = self.choice(fn_vars)
            return rl.Call(f, [e(a, env, d) for a in ft.arg_types])

        def call_new():
            args = [self.arg_type() for _ in range(self.draw(st.integers(1, 2)))]
            return rl.Call(e(rl.FuncType(args, t), env, d), [e(a, env, d) for a in args])

        def read_new_ref():
            return rl.RefRead(self.pinned(rl.RefType(t), env, d))

        def write_then():
            r, rt = self.choice(ref_vars)
            u = self.fresh(UNIT, annotate=self.draw(st.booleans()))
            return rl.Let(u, rl.RefWrite(r, e(rt.value, env, d)), e(t, env, d))

        def new_ref_write_read():
            u = self.value_type(0)
            r = self.fresh(rl.RefType(u), annotate=self.draw(st.booleans()))
            w = self.fresh(UNIT, annotate=False)
            inner = env + [(r, rl.RefType(u))]
            return rl.Let(r, rl.RefCreate(e(u, env, d)),
                          rl.Let(w, rl.RefWrite(r, e(u, inner, d)), e(t, inner, d)))

        def match_option():
            u = self.value_type(0)
            x = self.fresh(None, annotate=False)
            some = rl.Clause(rl.PatternConstructor(p.Some, [rl.PatternVar(x)]),
                             e(t, env + [(x, u)], d))
            nothing = rl.Clause(self.choice([rl.PatternConstructor(p.Nothing, []),
                                             rl.PatternWildcard()]), e(t, env, d))
            return rl.Match(self.pinned(rl.TypeCall(p.Option, [u]), env, d), [some, nothing])

        def match_list():
            u = self.value_type(0)
            lt = rl.TypeCall(p.List, [u])
            h, rest = self.fresh(None, annotate=False), self.fresh(None, annotate=False)
            data = self.pinned(lt, env, d)
            if self.draw(st.booleans()):
                cons = rl.Clause(rl.PatternConstructor(p.Cons, [rl.PatternVar(h), rl.PatternVar(rest)]),
                                 e(t, env + [(h, u), (rest, lt)], d))
                nil = rl.Clause(rl.PatternConstructor(p.Nil, []), e(t, env, d))
                return rl.Match(data, [cons, nil])
            # a nested pattern, completed by a wildcard
            one = rl.Clause(rl.PatternConstructor(
                p.Cons, [rl.PatternVar(h), rl.PatternConstructor(p.Nil, [])]), e(t, env + [(h, u)], d))
            return rl.Match(data, [one, rl.Clause(rl.PatternWildcard(), e(t, env, d))])

        def match_tuple():
            fields = [self.value_type(0), self.value_type(0)]
            a = self.fresh(None, annotate=False)
            i = self.draw(st.integers(0, 1))
            pats = [rl.PatternWildcard(), rl.PatternWildcard()]
            pats[i] = rl.PatternVar(a)
            return rl.Match(self.pinned(rl.TupleType(fields), env, d),
                            [rl.Clause(rl.PatternTuple(pats), e(t, env + [(a, fields[i])], d))])

        def match_tree():
            u = self.tensor_type()
            tt = rl.TypeCall(p.Tree, [u])
            x, l, r = (self.fresh(None, annotate=False) for _ in range(3))
            return rl.Match(self.pinned(tt, env, d), [
                rl.Clause(rl.PatternConstructor(p.Leaf, [rl.PatternVar(x)]), e(t, env + [(x, u)], d)),
                rl.Clause(rl.PatternConstructor(p.Node, [rl.PatternVar(l), rl.PatternVar(r)]),
                          e(t, env + [(l, tt), (r, tt)], d))])

        def fold():
            a = self.value_type(0)
            lst = e(rl.TypeCall(p.List, [a]), env, d)
            if self.draw(st.booleans()):
                return p.foldl(e(rl.FuncType([t, a], t), env, d), e(t, env, d), lst)
            return p.foldr(e(rl.FuncType([a, t], t), env, d), e(t, env, d), lst)

        def iterate():
            n = p.make_nat(self.draw(st.integers(0, 3)))
            return rl.Call(p.nat_iterate(e(rl.FuncType([t], t), env, d), n), [e(t, env, d)])

        return [
            (3, let),
            o.ifs and (2, if_),
            (1, project),
            fn_vars and (3, call_var),
            o.closures and (1, call_new),
            o.refs and (1, read_new_ref),
            o.refs and ref_vars and (2, write_then),
            o.refs and (1, new_ref_write_read),
            o.adts and (1, match_option),
            o.adts and (1, match_list),
            (1, match_tuple),
            o.adts and (1, match_tree),
            o.adts and o.globals and o.closures and (1, fold),
            o.adts and o.globals and o.closures and (1, iterate),
        ]

    # ---- runtime values ------------------------------------------------------------------------
    def value(self, t):
        return random_value(t, self.p.mod, self.rng)


def random_value(t, mod, rng):
    """A random runtime value of type t (tensors in [-1, 1], lists of length 0 to 3)."""
    if isinstance(t, rl.TensorType):
        if t.dtype == "bool":
            return np.asarray(rng.random(t.shape) < 0.5)
        if t.dtype.startswith(("int", "uint")):
            return np.asarray(rng.integers(0, 4, t.shape), dtype=t.dtype)
        return np.asarray(rng.uniform(-1.0, 1.0, t.shape), dtype=t.dtype)
    if isinstance(t, rl.TupleType):
        return tuple(random_value(f, mod, rng) for f in t.fields)
    if isinstance(t, rl.RefType):
        return rl.RefValue(random_value(t.value, mod, rng))
    if isinstance(t, rl.TypeCall):
        data = mod.get_type_data(t.func)
        name = t.func.name
        if name == "List":
            n = int(rng.integers(0, 4))
            return rl.list_value(mod, [random_value(t.args[0], mod, rng) for _ in range(n)])
        if name == "Option":
            if rng.random() < 0.3:
                return rl.ConstructorValue(mod.get_constructor("Nothing"), [])
            return rl.ConstructorValue(mod.get_constructor("Some"),
                                       [random_value(t.args[0], mod, rng)])
        if name == "Nat":
            v = rl.ConstructorValue(mod.get_constructor("Z"), [])
            for _ in range(int(rng.integers(0, 4))):
                v = rl.ConstructorValue(mod.get_constructor("S"), [v])
            return v
        if name == "Tree":
            return rl.ConstructorValue(mod.get_constructor("Leaf"),
                                       [random_value(t.args[0], mod, rng)])
        raise AssertionError(f"no random values for {data!r}")
    raise AssertionError(f"no random values of type {t!r}")


@st.composite
def programs(draw, *, differentiable=False, max_depth=3, param_types=None, result_type=None,
             dtypes=None, max_params=3, **features):
    """A GeneratedProgram (mod, args): a closed, well-typed @main with random inputs.

    differentiable=True: float64 tensor parameters, smooth ops only, a float64 scalar result.
    param_types / result_type fix the signature; features (refs, closures, adts, ifs, globals,
    tensor_constants, shapes) switch parts of the language off: see Options.
    """
    opts = Options(dtypes=tuple(dtypes or ((F64,) if differentiable else (F32, F64))),
                   max_depth=max_depth, differentiable=differentiable, **features)
    mod = rl.Module()
    prelude = rl.Prelude(mod)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    gen = _Generator(draw, prelude, opts, rng)
    if param_types is None:
        param_types = [gen.input_type() for _ in range(draw(st.integers(1, max_params)))]
    if result_type is None:
        result_type = rl.TensorType((), F64) if differentiable else gen.value_type()
    params = [gen.fresh(pt) for pt in param_types]
    body = gen.expr(result_type, list(zip(params, param_types)), max_depth)
    mod["main"] = rl.Function(params, body, result_type)
    return GeneratedProgram(mod, tuple(gen.value(pt) for pt in param_types))


def differentiable_programs(**kwargs):
    """programs(differentiable=True, ...): float64 inputs, smooth ops, float64 scalar output."""
    return programs(differentiable=True, **kwargs)


@st.composite
def types(draw, level=2, adts=True, closures=True, refs=True):
    """A random relayish type (over a fresh prelude's ADTs when adts=True); returns (type, mod)."""
    mod = rl.Module()
    gen = _Generator(draw, rl.Prelude(mod), Options(adts=adts, closures=closures, refs=refs),
                     np.random.default_rng(0))
    return gen.value_type(level), mod


# ---- checking values against types ---------------------------------------------------------

def assert_value_has_type(value, t, mod, where="result"):
    """Raise AssertionError (naming the path inside the value) unless value is of type t."""
    stack = [(value, t, where)]
    while stack:
        v, t, path = stack.pop()
        if isinstance(t, rl.TensorType):
            assert hasattr(v, "shape") and hasattr(v, "dtype") and not isinstance(v, np.generic), \
                f"{path}: expected a tensor array of type {t}, got {type(v).__name__} {v!r}"
            assert tuple(v.shape) == t.shape, f"{path}: shape {tuple(v.shape)} != {t.shape}"
            assert np.dtype(v.dtype).name == t.dtype, f"{path}: dtype {v.dtype} != {t.dtype}"
        elif isinstance(t, rl.TupleType):
            assert isinstance(v, tuple) and len(v) == len(t.fields), \
                f"{path}: expected a {len(t.fields)}-tuple, got {v!r}"
            stack.extend((f, ft, f"{path}.{i}") for i, (f, ft) in enumerate(zip(v, t.fields)))
        elif isinstance(t, rl.FuncType):
            assert isinstance(v, rl.Closure) and callable(v), f"{path}: expected a closure, got {v!r}"
        elif isinstance(t, rl.RefType):
            assert isinstance(v, rl.RefValue), f"{path}: expected a RefValue, got {v!r}"
            stack.append((v.value, t.value, f"!{path}"))
        elif isinstance(t, rl.TypeCall):
            assert isinstance(v, rl.ConstructorValue), \
                f"{path}: expected a {t.func.name} value, got {v!r}"
            data = mod.get_type_data(t.func)
            assert any(v.constructor is c for c in data.constructors), \
                f"{path}: constructor {v.constructor.name_hint} is not one of {t.func.name}'s"
            subst = dict(zip(data.type_vars, t.args))
            assert len(v.fields) == len(v.constructor.inputs), f"{path}: wrong number of fields"
            for i, (f, ft) in enumerate(zip(v.fields, v.constructor.inputs)):
                stack.append((f, substitute(ft, subst),
                              f"{path}.{v.constructor.name_hint}[{i}]"))
        else:
            raise AssertionError(f"{path}: cannot check a value against type {t!r}")
