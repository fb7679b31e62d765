"""The text printer: expressions, modules, types and patterns as Relay-style text (v0.0.5).

    astext(node) -> str            node: Expr, Module, Type, Pattern or Clause
    type_text(t) -> str

Let-chains print one binding per line with a loop (10^5-long chains are normal); other nesting
recurses under `run_deep`. Every Var gets a name unique in the printed text (`%x`, `%x_1`, ...),
so the parser never needs shadowing to read the printer's output back. Infix operators take
parentheses from the precedence table below. notes/text-format.md describes the grammar.
"""
from __future__ import annotations

import json
import re

import numpy as np

from relayish.errors import RelayishError
from relayish.ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If,
                              Let, Match, Pattern, PatternConstructor, PatternTuple, PatternVar,
                              PatternWildcard, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem,
                              Var)
from relayish.ir.types import (DTYPES, FuncType, GlobalTypeVar, RefType, TensorType, TupleType, Type,
                               TypeCall, TypeData, TypeVar)
from relayish.ir.text.literals import element_text, scalar_text

VERSION = "0.0.5"

# Precedence: a child is parenthesized when its precedence is below what its position needs.
PREC_BLOCK = 0      # fn, if, match, let blocks
PREC_ASSIGN = 1     # a := b            (non-associative)
PREC_COMPARE = 2    # < > <= >= == !=   (non-associative)
PREC_ADD = 3        # + -               (left-associative)
PREC_MUL = 4        # * /               (left-associative)
PREC_UNARY = 5      # -a  !a
PREC_POSTFIX = 6    # f(a)  t.0
PREC_ATOM = 7

INFIX = {"add": ("+", PREC_ADD), "subtract": ("-", PREC_ADD),
         "multiply": ("*", PREC_MUL), "divide": ("/", PREC_MUL),
         "less": ("<", PREC_COMPARE), "greater": (">", PREC_COMPARE),
         "less_equal": ("<=", PREC_COMPARE), "greater_equal": (">=", PREC_COMPARE),
         "equal": ("==", PREC_COMPARE), "not_equal": ("!=", PREC_COMPARE)}
LEFT_ASSOC = {PREC_ADD, PREC_MUL}

_INLINE_WIDTH = 80
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_]")
INDENT = "  "


def astext(node, show_version=None, **_ignored) -> str:
    """The text form of an expression, module, type or pattern.

        >>> x = rl.var("x"); rl.astext(rl.Function([x], x * x))
        'fn (%x: float32) { %x * %x }'

    A module prints its type definitions, then its functions, after the
    `#[version = "0.0.5"]` header (show_version=False leaves the header out).
    """
    from relayish.ir.module import Module
    from relayish.ir.visitor import run_deep
    if isinstance(node, Type):
        return type_text(node)
    if isinstance(node, TypeData):
        return _Printer().type_data(node)
    if isinstance(node, Module):
        return run_deep(_Printer().module, node, True if show_version is None else show_version)
    if isinstance(node, (Expr, Pattern, Clause)):
        return run_deep(_Printer().top, node, bool(show_version))
    raise RelayishError(f"astext prints expressions, modules, types and patterns, "
                        f"not {type(node).__name__}")


def type_text(t) -> str:
    """`float32`, `Tensor[(2, 3), float64]`, `(T1, T2)`, `fn [a](a) -> a`, `ref(T)`, `List[a]`."""
    if isinstance(t, TensorType):
        if not t.shape:
            return t.dtype
        if len(t.shape) == 1:
            return f"Tensor[({t.shape[0]}), {t.dtype}]"
        return f"Tensor[({', '.join(str(d) for d in t.shape)}), {t.dtype}]"
    if isinstance(t, TupleType):
        if len(t.fields) == 1:
            return f"({type_text(t.fields[0])},)"
        return "(" + ", ".join(type_text(f) for f in t.fields) + ")"
    if isinstance(t, FuncType):
        params = ""
        if t.type_params:
            params = "[" + ", ".join(type_text(p) for p in t.type_params) + "]"
        args = ", ".join(type_text(a) for a in t.arg_types)
        return f"fn {params}({args}) -> {type_text(t.ret_type)}"
    if isinstance(t, RefType):
        return f"ref({type_text(t.value)})"
    if isinstance(t, (TypeVar, GlobalTypeVar)):
        return t.name
    if isinstance(t, TypeCall):
        if not t.args:
            return t.func.name          # `Nat`: the parser reads it back as Nat[]
        return f"{t.func.name}[{', '.join(type_text(a) for a in t.args)}]"
    if t is None:
        return "?"
    raise RelayishError(f"cannot print {t!r} as a type")


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_]+")


def _global_text(name) -> str:
    """`@f`, or `@"my-f"` for a name that is not made of letters, digits and _."""
    name = str(name)
    return "@" + name if _PLAIN_NAME.fullmatch(name) else "@" + json.dumps(name)


def _attr_text(value) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "True" if value else "False"
    if value is None:
        return "None"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        text = repr(float(value))
        return text if ("." in text or "e" in text or "n" in text) else text + ".0"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_attr_text(v) for v in value) + "]"
    if isinstance(value, np.ndarray):
        return _attr_text(value.tolist())
    if isinstance(value, Type):
        return json.dumps(type_text(value))
    return json.dumps(str(value))


def attr_equal(a, b) -> bool:
    """Attribute values compare by value; lists and tuples alike; never raises."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a).tolist(), np.asarray(b).tolist()
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(attr_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return False
    if isinstance(a, (bool, np.bool_)) != isinstance(b, (bool, np.bool_)):
        return False
    if isinstance(a, (float, np.floating)) and isinstance(b, (float, np.floating)):
        return bool(a == b or (np.isnan(a) and np.isnan(b)))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - exotic attribute values: unequal rather than a crash
        return False


_DTYPE_NAME = {np.dtype(d): d for d in DTYPES}
_SCALAR_CACHE: dict = {}


def _const_text(data: np.ndarray) -> str:
    dtype = _DTYPE_NAME.get(data.dtype)
    if dtype is None:
        raise RelayishError(f"cannot print a constant of dtype {data.dtype}")
    if data.ndim == 0:
        key = (dtype, data.tobytes())
        text = _SCALAR_CACHE.get(key)
        if text is None:
            if len(_SCALAR_CACHE) > 100_000:
                _SCALAR_CACHE.clear()
            text = _SCALAR_CACHE[key] = scalar_text(data)
        return text
    if data.size == 0:
        shape = "(" + ", ".join(str(d) for d in data.shape) + ("," if data.ndim == 1 else "") + ")"
        return f"const([], {dtype}, shape={shape})"
    flat = [element_text(x, dtype) for x in data.reshape(-1)]
    # nest the flat list by the shape, innermost dimension first
    for dim in reversed(data.shape):
        flat = ["[" + ", ".join(flat[i:i + dim]) + "]" for i in range(0, len(flat), dim)]
    return f"const({flat[0]}, {dtype})"


class _Block:
    """A block being printed: graph bindings wait in `pending` for the next line."""
    __slots__ = ("ind", "pending", "open")

    def __init__(self, ind):
        self.ind, self.pending, self.open = ind, [], True


_ATOMS = (Var, GlobalVar, Constant, Constructor)


def _shared_nodes(root) -> set:
    """ids of the non-atomic nodes that more than one parent refers to (an explicit stack)."""
    seen, shared = set(), set()
    stack = [root]
    while stack:
        e = stack.pop()
        for child in _children(e):
            if isinstance(child, _ATOMS) or type(child).__name__ == "Op":
                continue
            key = id(child)
            if key in seen:
                shared.add(key)
            else:
                seen.add(key)
                stack.append(child)
    return shared


def _children(e):
    if isinstance(e, Let):
        return (e.value, e.body)
    if isinstance(e, Call):
        return (e.op, *e.args)
    if isinstance(e, Tuple):
        return e.fields
    if isinstance(e, TupleGetItem):
        return (e.tuple_value,)
    if isinstance(e, Function):
        return (e.body,)
    if isinstance(e, If):
        return (e.cond, e.true_branch, e.false_branch)
    if isinstance(e, Match):
        return (e.data, *(c.rhs for c in e.clauses))
    if isinstance(e, RefCreate):
        return (e.value,)
    if isinstance(e, RefRead):
        return (e.ref,)
    if isinstance(e, RefWrite):
        return (e.ref, e.value)
    return ()


class _Printer:
    def __init__(self):
        self.blocks: list[_Block] = []
        self.shared: set = set()
        self.hoisted: dict = {}
        self.graph_counter = 0
        self.names: dict[int, str] = {}
        self.taken: set[str] = set()
        self.counters: dict[str, int] = {}   # next suffix to try per base name
        self.keep: list = []           # keeps named Vars alive so their ids stay unique

    # ---- names -------------------------------------------------------------------------------
    def var_name(self, v: Var) -> str:
        name = self.names.get(id(v))
        if name is None:
            base = str(v.name_hint or "") or "v"
            if not (base.isascii() and base.replace("_", "a").isalnum()):
                base = _NAME_CHARS.sub("_", base) or "v"
            name, k = base, self.counters.get(base, 0)
            while name in self.taken:
                k += 1
                name = f"{base}_{k}"
            self.counters[base] = k
            self.taken.add(name)
            self.names[id(v)] = name
            self.keep.append(v)
        return "%" + name

    def binder(self, v: Var) -> str:
        if v.type_annotation is None:
            return self.var_name(v)
        return f"{self.var_name(v)}: {type_text(v.type_annotation)}"

    # ---- top level ---------------------------------------------------------------------------
    def top(self, node, show_version):
        head = f'#[version = "{VERSION}"]\n' if show_version else ""
        if isinstance(node, Pattern):
            return head + self.pattern(node)
        if isinstance(node, Clause):
            return head + self.pattern(node.lhs) + " => " + self.braced(node.rhs, "")
        self.shared = _shared_nodes(node)
        return head + self.block(node, "")

    def module(self, mod, show_version):
        parts = []
        for data in mod.type_definitions.values():
            parts.append(self.type_data(data))
        for gv, func in mod.functions.items():
            self.names, self.taken, self.keep, self.counters = {}, set(), [], {}
            self.shared, self.hoisted, self.graph_counter = _shared_nodes(func), {}, 0
            parts.append(self.function(func, "", "def " + _global_text(gv.name_hint)))
        text = "\n".join(parts)
        if show_version:
            text = f'#[version = "{VERSION}"]\n' + text
        return text + ("\n" if parts else "")

    def type_data(self, data: TypeData) -> str:
        params = ""
        if data.type_vars:
            params = "[" + ", ".join(type_text(v) for v in data.type_vars) + "]"
        ctors = []
        for c in data.constructors:
            if c.inputs:
                ctors.append(f"{c.name_hint}({', '.join(type_text(t) for t in c.inputs)})")
            else:
                ctors.append(c.name_hint)
        return f"type {data.header.name}{params} {{ {', '.join(ctors)} }}" if ctors else \
            f"type {data.header.name}{params} {{}}"

    # ---- blocks ------------------------------------------------------------------------------
    def block(self, e, ind) -> str:
        """A let-chain, one binding per line at indentation `ind` (a loop down the chain).

        `let %_ = e;` prints as the statement `e;` unless the body turns out to use `%_`.
        Shared subexpressions first met in this block print as graph bindings `%0 = e;` just
        before the line that uses them first.
        """
        ctx = _Block(ind)
        self.blocks.append(ctx)
        lines, statements = [], []
        while isinstance(e, Let):
            value = self.expr(e.value, ind)
            if ctx.pending:
                lines.extend(ctx.pending)
                ctx.pending.clear()
            v = e.var
            if v.name_hint == "_" and v.type_annotation is None and id(v) not in self.names:
                statements.append((len(lines), v, value))
                lines.append(f"{ind}{value};")
            else:
                lines.append(f"{ind}let {self.binder(v)} = {value};")
            e = e.body
        tail = self.expr(e, ind, 0)
        lines.extend(ctx.pending)
        lines.append(ind + tail)
        ctx.open = False
        self.blocks.pop()
        for index, v, value in statements:
            if id(v) in self.names:          # used after all: print the binding
                lines[index] = f"{ind}let {self.var_name(v)} = {value};"
        return "\n".join(lines)

    def braced(self, e, ind) -> str:
        """`{ e }` on one line when short, else a block on its own lines."""
        inner = self.block(e, ind + INDENT)
        flat = inner.strip()
        if "\n" not in flat and len(flat) + len(ind) <= _INLINE_WIDTH:
            return "{ " + flat + " }"
        return "{\n" + inner + "\n" + ind + "}"

    # ---- expressions -------------------------------------------------------------------------
    def expr(self, e, ind, need=0) -> str:
        """The text of `e`, parenthesized if its precedence is below `need`."""
        if id(e) in self.shared:
            return self.graph_binding(e)
        text, prec = self.expr_prec(e, ind)
        if prec < need:
            if prec == PREC_BLOCK and isinstance(e, Let):
                return self.braced(e, ind)
            return "(" + text + ")"
        return text

    def expr_prec(self, e, ind):
        if isinstance(e, Var):
            return self.var_name(e), PREC_ATOM
        if isinstance(e, GlobalVar):
            return _global_text(e.name_hint), PREC_ATOM
        if isinstance(e, Constant):
            text = _const_text(np.asarray(e.data))
            return text, (PREC_UNARY if text.startswith("-") else PREC_ATOM)
        if isinstance(e, Constructor):
            return e.name_hint, PREC_ATOM
        if type(e).__name__ == "Op":
            return e.name, PREC_ATOM
        if isinstance(e, Tuple):
            fields = [self.expr(f, ind) for f in e.fields]
            if len(fields) == 1:
                return f"({fields[0]},)", PREC_ATOM
            return "(" + ", ".join(fields) + ")", PREC_ATOM
        if isinstance(e, TupleGetItem):
            return f"{self.postfix_target(e.tuple_value, ind)}.{e.index}", PREC_POSTFIX
        if isinstance(e, Call):
            return self.call(e, ind)
        if isinstance(e, Let):
            return self.braced(e, ind), PREC_ATOM
        if isinstance(e, Function):
            return self.function(e, ind, "fn "), PREC_BLOCK
        if isinstance(e, If):
            cond = self.expr(e.cond, ind)
            return (f"if ({cond}) {self.braced(e.true_branch, ind)} "
                    f"else {self.braced(e.false_branch, ind)}"), PREC_BLOCK
        if isinstance(e, Match):
            return self.match(e, ind), PREC_BLOCK
        if isinstance(e, RefCreate):
            return f"ref({self.expr(e.value, ind)})", PREC_POSTFIX
        if isinstance(e, RefRead):
            return "!" + self.expr(e.ref, ind, PREC_UNARY), PREC_UNARY
        if isinstance(e, RefWrite):
            return (f"{self.expr(e.ref, ind, PREC_ASSIGN + 1)} := "
                    f"{self.expr(e.value, ind, PREC_ASSIGN + 1)}"), PREC_ASSIGN
        raise RelayishError(f"cannot print a {type(e).__name__} node")

    def graph_binding(self, e) -> str:
        """A node used more than once: named by `%N = e;` in the innermost open block the first
        time, by `%N` while that block is open (printed anew where it is closed)."""
        bound = self.hoisted.get(id(e))
        if bound is not None and bound[1].open:
            return bound[0]
        ctx = self.blocks[-1]
        text, _ = self.expr_prec(e, ctx.ind)
        while str(self.graph_counter) in self.taken:
            self.graph_counter += 1
        name = str(self.graph_counter)
        self.taken.add(name)
        ctx.pending.append(f"{ctx.ind}%{name} = {text};")
        self.hoisted[id(e)] = ("%" + name, ctx)
        return "%" + name

    def postfix_target(self, e, ind):
        if id(e) in self.shared:
            return self.graph_binding(e)
        text, prec = self.expr_prec(e, ind)
        if prec < PREC_POSTFIX or isinstance(e, Constant):
            return "(" + text + ")"
        return text

    def call(self, e, ind):
        op = e.op
        is_op = type(op).__name__ == "Op"
        attrs = dict(e.attrs or {})
        if is_op:
            defaults = op.attr_defaults
            attrs = {k: v for k, v in attrs.items()
                     if not (k in defaults and attr_equal(v, defaults[k]))}
            if not attrs and len(e.args) == 2 and op.name in INFIX:
                sym, prec = INFIX[op.name]
                left_need = prec if prec in LEFT_ASSOC else prec + 1
                lhs = self.expr(e.args[0], ind, left_need)
                rhs = self.expr(e.args[1], ind, prec + 1)
                return f"{lhs} {sym} {rhs}", prec
            if not attrs and len(e.args) == 1 and op.name == "negative":
                arg = e.args[0]
                if isinstance(arg, Constant):
                    return "-(" + self.expr(arg, ind) + ")", PREC_UNARY
                return "-" + self.expr(arg, ind, PREC_UNARY), PREC_UNARY
            head = op.name
        else:
            head = self.postfix_target(op, ind)
        args = [self.expr(a, ind) for a in e.args]
        args += [f"{k}={_attr_text(v)}" for k, v in attrs.items()]
        return f"{head}({', '.join(args)})", PREC_POSTFIX

    def function(self, f, ind, head) -> str:
        params = ""
        if f.type_params:
            params = "[" + ", ".join(type_text(p) for p in f.type_params) + "]"
        if head.startswith("fn"):
            head = "fn " + params
        else:
            head = head + params
        args = ", ".join(self.binder(p) for p in f.params)
        ret = "" if f.ret_type is None else f" -> {type_text(f.ret_type)}"
        return f"{head}({args}){ret} {self.braced(f.body, ind)}"

    def match(self, m, ind) -> str:
        keyword = "match" if m.complete else "match?"
        inner = ind + INDENT
        lines = [f"{keyword} ({self.expr(m.data, ind)}) {{"]
        for c in m.clauses:
            lhs = self.pattern(c.lhs)
            body = self.block(c.rhs, inner + INDENT)     # a block: it binds the pattern's vars
            rhs = "{\n" + body + "\n" + inner + "}" if "\n" in body else body.strip()
            lines.append(f"{inner}{lhs} => {rhs},")
        lines.append(ind + "}")
        return "\n".join(lines)

    def pattern(self, p) -> str:
        if isinstance(p, PatternWildcard):
            return "_"
        if isinstance(p, PatternVar):
            return self.binder(p.var)
        if isinstance(p, PatternConstructor):
            if not p.patterns:
                return p.constructor.name_hint
            return f"{p.constructor.name_hint}({', '.join(self.pattern(s) for s in p.patterns)})"
        if isinstance(p, PatternTuple):
            subs = [self.pattern(s) for s in p.patterns]
            if len(subs) == 1:
                return f"({subs[0]},)"
            return "(" + ", ".join(subs) + ")"
        raise RelayishError(f"cannot print a {type(p).__name__} pattern")
