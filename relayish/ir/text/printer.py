"""The text printer: expressions, modules, types and patterns as Relay-style text (v0.0.5).

    astext(node) -> str            node: Expr, Module, Type, Pattern or Clause

(A type's text is types.type_text, which this module uses.) Expressions and patterns print by
`visit_<NodeClass>` / `pattern_<PatternClass>` methods; the sharing scan reads the fields each
node class declares. On import the printer provides `astext` to expr.py, for str(node).
Let-chains print one binding per line with a loop (10^5-long chains are normal), and so do
left-leaning infix chains (`a + b + c ...`) and else-if chains; other nesting recurses under
`run_deep`. Printing is linear in the program: each node's text is a small list of pieces
(strings and the pieces of its children) that is joined once at the end, never copied into
its parent's string; indentation stops growing after MAX_INDENT columns. Every Var gets a name
unique in the printed text (`%x`, `%x_1`, ...), so the parser never needs shadowing to read
the printer's output back. Infix operators take parentheses from the precedence table below.
Comments handed over by the formatter (format.py) print before the item they are attached to.
notes/text-format.md describes the grammar.
"""
from __future__ import annotations

import json
import re

import numpy as np

from relayish.errors import RelayishError
from relayish.ir.expr import (Call, Clause, Constant, Constructor, Expr, GlobalVar, If, Let,
                              Pattern, Tuple, TypeData, Var, provide)
from relayish.ir.fields import ONE_CHILD, VAR, VARS, child_fields
from relayish.ir.module import Module
from relayish.ir.op import Op
from relayish.ir.structural import attr_equal
from relayish.ir.types import DTYPES, Type, type_text
from relayish.ir.visitor import run_deep
from relayish.ir.text.literals import element_text, scalar_text
# a child is parenthesized when its precedence is below what its position needs; the infix
# operators' precedences are the parser's own table
from relayish.ir.text.operators import (PREC_ATOM, PREC_BLOCK, PREC_POSTFIX, PREC_UNARY,
                                        REF_WRITE, tables)

VERSION = "0.0.5"

_INLINE_WIDTH = 80
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_]")
INDENT = "  "
MAX_INDENT = 64      # columns: deeper blocks print at this indentation (keeps the text linear)


def astext(node, show_version=None, declare_free_vars=False, **_ignored) -> str:
    """The text form of an expression, module, type or pattern.

        >>> x = rl.var("x"); rl.astext(rl.Function([x], x * x))
        'fn (%x: float32) { %x * %x }'
        >>> print(rl.astext(x * x, declare_free_vars=True))
        free_var %x: float32;
        %x * %x

    A module prints its type definitions, then its functions, after the
    `#[version = "0.0.5"]` header (show_version=False leaves the header out). Each def
    declares its free variables first (`free_var %x: T;`), so that any module parses back with
    their annotations. An expression is printed as a piece of a program (`%x + 1f`, as str(e)
    and messages show it); declare_free_vars=True declares its free variables too, as Relay
    prints a whole expression, so that parse_expr reads them back without free_vars=.
    """
    if isinstance(node, Type):
        return type_text(node)
    if isinstance(node, TypeData):
        return _render(_Printer().type_data(node))
    if isinstance(node, Module):
        return print_module(node, True if show_version is None else show_version)
    if isinstance(node, (Expr, Pattern, Clause)):
        return _render(run_deep(_Printer().top, node, bool(show_version), declare_free_vars))
    if hasattr(node, "relayish_text"):
        # a wrapper of a program from a higher layer (rl.vmap's Batched) prints itself
        return node.relayish_text(show_version)
    raise RelayishError(f"astext prints expressions, modules, types and patterns, "
                        f"not {type(node).__name__}")


def print_module(mod, show_version=True, comments=None, spellings=None) -> str:
    """The text of a module; `comments` (from the formatter) print before their items."""
    return _render(run_deep(_Printer(comments, spellings).module, mod, show_version))


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


# ---- pieces of text ----------------------------------------------------------------------------
# The printer builds each node's text as a list of pieces (str, or lists of pieces) holding its
# children's pieces by reference; `_render` joins them once. Building the string at every level
# instead copies each subtree's text once per enclosing level: quadratic in nesting, cubic with
# the indentation growing too (2,000 nested ifs took 48 s).

def _strings(doc):
    """The strings of a piece list, in order (an explicit stack: pieces nest as deep as the
    program)."""
    if isinstance(doc, str):
        yield doc
        return
    stack = [iter(doc)]
    while stack:
        for piece in stack[-1]:
            if isinstance(piece, str):
                yield piece
            else:
                stack.append(iter(piece))
                break
        else:
            stack.pop()


def _render(doc) -> str:
    """The text of a piece list."""
    return doc if isinstance(doc, str) else "".join(_strings(doc))


def _one_line(doc, limit=None):
    """The text of `doc` if it is one line of at most `limit` characters, else None. Reads no
    more of it than that (the first line break or the limit ends the walk)."""
    out, n = [], 0
    for piece in _strings(doc):
        n += len(piece)
        if "\n" in piece or (limit is not None and n > limit):
            return None
        out.append(piece)
    return "".join(out)


def _lines(lines) -> list:
    """Line pieces joined by line breaks."""
    out = []
    for line in lines:
        if out:
            out.append("\n")
        out.append(line)
    return out


def _deeper(ind) -> str:
    return ind + INDENT if len(ind) < MAX_INDENT else ind


_ATOMS = (Var, GlobalVar, Constant, Constructor, Op)


def _scan(root):
    """(ids of the non-atomic nodes that more than one parent refers to, the Vars used but
    bound nowhere in `root` in order of discovery): one walk with an explicit stack, reading
    each node's declared fields (a VAR or VARS field binds; other children are used)."""
    seen, shared = set(), set()
    used, bound = {}, set()
    stack = [root]
    if isinstance(root, Var):
        used[id(root)] = root
    while stack:
        e = stack.pop()
        for name, kind in child_fields(type(e)):
            items = (getattr(e, name),) if kind in ONE_CHILD else getattr(e, name)
            if kind == VAR or kind == VARS:
                bound.update(id(v) for v in items)
                continue
            for child in items:
                if isinstance(child, _ATOMS):
                    if isinstance(child, Var):
                        used.setdefault(id(child), child)
                    continue
                key = id(child)
                if key in seen:
                    shared.add(key)
                else:
                    seen.add(key)
                    stack.append(child)
    return shared, [v for key, v in used.items() if key not in bound]


def _infix(e, by_op):
    """The operators.Infix entry when the Call `e` prints as an infix operator, else None
    (`by_op`: the operator table of this print, operators.tables().by_op)."""
    op = e.op
    if not isinstance(op, Op) or len(e.args) != 2:
        return None
    infix = by_op.get(op.name)
    if infix is None:
        return None
    defaults = op.attr_defaults
    for k, v in (e.attrs or {}).items():
        if not (k in defaults and attr_equal(v, defaults[k])):
            return None
    return infix


class _Printer:
    def __init__(self, comments=None, spellings=None):
        # the formatter's op names as the text wrote them: id(Call) -> an alias (`nn.relu`)
        self.spellings: dict = spellings or {}
        self.blocks: list[_Block] = []
        self.shared: set = set()
        self.hoisted: dict = {}
        self.graph_counter = 0
        self.names: dict[int, str] = {}
        self.taken: set[str] = set()
        self.counters: dict[str, int] = {}   # next suffix to try per base name
        self.keep: list = []           # keeps named Vars alive so their ids stay unique
        self.shadowed: dict[str, int] = {}   # type variable names in scope -> binders open
        # the formatter's comments: key (see parser.keep_comments) -> texts; popped as printed
        self.comments: dict = dict(comments or {})
        # the operator tables read once per print: the live views cost a registry check a call
        ops = tables()
        self.infix_by_op, self.prefix_by_op = ops.by_op, ops.prefix_by_op

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
        return f"{self.var_name(v)}: {self.type(v.type_annotation)}"

    def type(self, t) -> str:
        return type_text(t, self.shadowed)

    def open_type_vars(self, type_vars):
        for v in type_vars:
            self.shadowed[v.name] = self.shadowed.get(v.name, 0) + 1

    def close_type_vars(self, type_vars):
        for v in type_vars:
            self.shadowed[v.name] -= 1
            if not self.shadowed[v.name]:
                del self.shadowed[v.name]

    def comment_lines(self, key, ind) -> list:
        """The comments attached to `key`, one line each at indentation `ind` (a /* */ comment
        keeps its own line breaks); each prints once."""
        if not self.comments:
            return []
        return [ind + text.rstrip() for text in self.comments.pop(key, ())]

    # ---- top level ---------------------------------------------------------------------------
    def top(self, node, show_version, declare_free_vars=True):
        head = f'#[version = "{VERSION}"]\n' if show_version else ""
        if isinstance(node, Pattern):
            return [head, self.pattern(node)]
        if isinstance(node, Clause):
            return [head, self.pattern(node.lhs), " => ", self.braced(node.rhs, "")]
        self.shared, free = _scan(node)
        return [head, self.block(node, "", self.free_var_lines(free if declare_free_vars else ()))]

    def free_var_lines(self, free) -> list:
        """`free_var %x: T;` for each free variable, named before anything else, so that each
        keeps its own name (a bound variable of the same name is the one renamed)."""
        for v in free:
            self.var_name(v)
        return [["free_var ", self.binder(v), ";"] for v in free]

    def module(self, mod, show_version):
        items = []
        for data in mod.type_definitions.values():
            items.append(self.comment_lines(("type", data.header.name), "") +
                         [self.type_data(data)])
        for gv, func in mod.functions.items():
            self.names, self.taken, self.keep, self.counters = {}, set(), [], {}
            self.shared, free = _scan(func)
            self.hoisted, self.graph_counter = {}, 0
            # a global with free variables does not type-check, but its text still reads back
            declared = self.free_var_lines(free)
            items.append(self.comment_lines(("def", gv.name_hint), "") +
                         [self.function(func, "", "def " + _global_text(gv.name_hint), declared)])
        end = self.comment_lines(("end",), "")
        # comments the program no longer has a place for (a formatter bug if any) are kept
        lost = [text for texts in self.comments.values() for text in texts]
        lines = [line for item in items for line in item] + end + lost
        doc = _lines(lines)
        if show_version:
            doc = [f'#[version = "{VERSION}"]\n', doc]
        return [doc, "\n"] if lines else doc

    def type_data(self, data: TypeData):
        params = ""
        if data.type_vars:
            params = "[" + ", ".join(v.name for v in data.type_vars) + "]"
        self.open_type_vars(data.type_vars)
        ctors = []
        for c in data.constructors:
            if c.inputs:
                ctors.append(f"{c.name_hint}({', '.join(self.type(t) for t in c.inputs)})")
            else:
                ctors.append(c.name_hint)
        self.close_type_vars(data.type_vars)
        if not ctors:        # Relay's form for a type defined elsewhere; `type T {}` reads the same
            return f"extern type {data.header.name}{params}"
        return f"type {data.header.name}{params} {{ {', '.join(ctors)} }}"

    # ---- blocks ------------------------------------------------------------------------------
    def block(self, e, ind, declarations=()):
        """A let-chain, one binding per line at indentation `ind` (a loop down the chain),
        after the `free_var` declarations given.

        `let %_ = e;` prints as the statement `e;` unless the body turns out to use `%_`.
        Shared subexpressions first met in this block print as graph bindings `%0 = e;` just
        before the line that uses them first (after that line's comments).
        """
        root = e
        ctx = _Block(ind)
        self.blocks.append(ctx)
        lines, statements = [[ind, d] for d in declarations], []
        while isinstance(e, Let):
            v = e.var
            comments = self.comment_lines(v, ind)
            value = self.expr(e.value, ind)
            lines.extend(comments)
            if ctx.pending:
                lines.extend(ctx.pending)
                ctx.pending.clear()
            if v.name_hint == "_" and v.type_annotation is None and id(v) not in self.names:
                statements.append((len(lines), v, value))
                lines.append([ind, value, ";"])
            else:
                lines.append([ind, "let ", self.binder(v), " = ", value, ";"])
            e = e.body
        comments = self.comment_lines(("tail", root), ind)
        tail = self.expr(e, ind, 0)
        lines.extend(comments)
        lines.extend(ctx.pending)
        lines.append([ind, tail])
        lines.extend(self.comment_lines(("end", root), ind))
        ctx.open = False
        self.blocks.pop()
        for index, v, value in statements:
            if id(v) in self.names:          # used after all: print the binding
                lines[index] = [ind, "let ", self.var_name(v), " = ", value, ";"]
        return _lines(lines)

    def braced(self, e, ind, declarations=()):
        """`{ e }` on one line when short, else a block on its own lines."""
        inner_ind = _deeper(ind)
        inner = self.block(e, inner_ind, declarations)
        flat = _one_line(inner, _INLINE_WIDTH - len(ind) + len(inner_ind))
        if flat is not None:
            return "{ " + flat.strip() + " }"
        return ["{\n", inner, "\n", ind, "}"]

    # ---- expressions -------------------------------------------------------------------------
    def expr(self, e, ind, need=0):
        """The pieces of `e`, parenthesized if its precedence is below `need`."""
        if id(e) in self.shared:
            return self.graph_binding(e)
        doc, prec = self.expr_prec(e, ind)
        if prec < need:
            if prec == PREC_BLOCK and isinstance(e, Let):
                return self.braced(e, ind)
            return ["(", doc, ")"]
        return doc

    def expr_prec(self, e, ind):
        """(the pieces of `e`, its precedence), by `visit_<NodeClass>`."""
        rule = getattr(self, "visit_" + type(e).__name__, None)
        if rule is None or not isinstance(e, Expr):
            raise RelayishError(f"cannot print a {type(e).__name__} node")
        return rule(e, ind)

    def visit_Var(self, e, ind):
        return self.var_name(e), PREC_ATOM

    def visit_GlobalVar(self, e, ind):
        return _global_text(e.name_hint), PREC_ATOM

    def visit_Constant(self, e, ind):
        text = _const_text(np.asarray(e.data))
        return text, (PREC_UNARY if text.startswith("-") else PREC_ATOM)

    def visit_Constructor(self, e, ind):
        return e.name_hint, PREC_ATOM

    def visit_Op(self, e, ind):
        return e.name, PREC_ATOM

    def visit_Tuple(self, e, ind):
        fields = [self.expr(f, ind) for f in e.fields]
        if len(fields) == 1:
            return ["(", fields[0], ",)"], PREC_ATOM
        return ["(", _joined(fields, ", "), ")"], PREC_ATOM

    def visit_TupleGetItem(self, e, ind):
        return [self.postfix_target(e.tuple_value, ind), f".{e.index}"], PREC_POSTFIX

    def visit_Call(self, e, ind):
        return self.call(e, ind)

    def visit_Let(self, e, ind):
        return self.braced(e, ind), PREC_ATOM

    def visit_Function(self, e, ind):
        return self.function(e, ind, "fn "), PREC_BLOCK

    def visit_If(self, e, ind):
        return self.if_chain(e, ind), PREC_BLOCK

    def visit_Match(self, e, ind):
        return self.match(e, ind), PREC_BLOCK

    def visit_RefCreate(self, e, ind):
        return ["ref(", self.expr(e.value, ind), ")"], PREC_POSTFIX

    def visit_RefRead(self, e, ind):
        return ["!", self.expr(e.ref, ind, PREC_UNARY)], PREC_UNARY

    def visit_RefWrite(self, e, ind):
        return [self.expr(e.ref, ind, REF_WRITE.left_need), " := ",
                self.expr(e.value, ind, REF_WRITE.right_need)], REF_WRITE.prec

    def if_chain(self, e, ind):
        """`if (c) {..} else if (d) {..} else {..}`: an If in the else branch continues the
        chain (a loop, so 10^5 else-ifs print without recursion)."""
        doc = ["if (", self.expr(e.cond, ind), ") ", self.braced(e.true_branch, ind)]
        other = e.false_branch
        while (isinstance(other, If) and id(other) not in self.shared
               and ("tail", other) not in self.comments and ("end", other) not in self.comments):
            doc += [" else if (", self.expr(other.cond, ind), ") ",
                    self.braced(other.true_branch, ind)]
            other = other.false_branch
        doc += [" else ", self.braced(other, ind)]
        return doc

    def graph_binding(self, e):
        """A node used more than once: named by `%N = e;` in the innermost open block the first
        time, by `%N` while that block is open (printed anew where it is closed)."""
        bound = self.hoisted.get(id(e))
        if bound is not None and bound[1].open:
            return bound[0]
        ctx = self.blocks[-1]
        doc, _ = self.expr_prec(e, ctx.ind)
        while str(self.graph_counter) in self.taken:
            self.graph_counter += 1
        name = str(self.graph_counter)
        self.taken.add(name)
        ctx.pending.append([ctx.ind, "%", name, " = ", doc, ";"])
        self.hoisted[id(e)] = ("%" + name, ctx)
        return "%" + name

    def postfix_target(self, e, ind):
        if id(e) in self.shared:
            return self.graph_binding(e)
        doc, prec = self.expr_prec(e, ind)
        if prec < PREC_POSTFIX or isinstance(e, Constant):
            return ["(", doc, ")"]
        return doc

    def call(self, e, ind):
        infix = _infix(e, self.infix_by_op)
        if infix is not None:
            return self.infix_chain(e, infix, ind)
        op = e.op
        is_op = isinstance(op, Op)
        attrs = dict(e.attrs or {})
        if is_op:
            defaults = op.attr_defaults
            attrs = {k: v for k, v in attrs.items()
                     if not (k in defaults and attr_equal(v, defaults[k]))}
            symbol = self.prefix_by_op.get(op.name) if not attrs and len(e.args) == 1 else None
            if symbol is not None:           # `-x`: the op's record says prefix="-"
                arg = e.args[0]
                if isinstance(arg, Constant):      # `-(1f)`: `-1f` would read as one literal
                    return [symbol + "(", self.expr(arg, ind), ")"], PREC_UNARY
                return [symbol, self.expr(arg, ind, PREC_UNARY)], PREC_UNARY
            head = self.spellings.get(id(e), op.name)
        else:
            head = self.postfix_target(op, ind)
        args = [self.expr(a, ind) for a in e.args]
        args += [f"{k}={_attr_text(v)}" for k, v in attrs.items()]
        return [head, "(", _joined(args, ", "), ")"], PREC_POSTFIX

    def infix_chain(self, e, infix, ind):
        """`a + b - c * d`: the left operands of an operator that chains (operators.py) at
        the same precedence need no parentheses, so the chain down the left is walked with a
        loop (a 200,000-term sum prints without recursion)."""
        right = []                       # (operator, right operand), outermost first
        while True:
            right.append((infix, e.args[1]))
            left = e.args[0]
            if not infix.chains or not isinstance(left, Call) or id(left) in self.shared:
                break
            inner = _infix(left, self.infix_by_op)
            if inner is None or inner.prec != infix.prec:
                break
            e, infix = left, inner
        doc = [self.expr(left, ind, infix.left_need)]
        for op, rhs in reversed(right):
            doc += [" ", op.symbol, " ", self.expr(rhs, ind, op.right_need)]
        return doc, infix.prec

    def function(self, f, ind, head, declarations=()):
        params = ""
        if f.type_params:
            params = "[" + ", ".join(p.name for p in f.type_params) + "]"
        if head.startswith("fn"):
            head = "fn " + params
        else:
            head = head + params
        self.open_type_vars(f.type_params)
        args = ", ".join(self.binder(p) for p in f.params)
        ret = "" if f.ret_type is None else f" -> {self.type(f.ret_type)}"
        body = self.braced(f.body, ind, declarations)
        self.close_type_vars(f.type_params)
        return [head, "(", args, ")", ret, " ", body]

    def match(self, m, ind):
        keyword = "match" if m.complete else "match?"
        inner = _deeper(ind)
        data = m.data
        if isinstance(data, Tuple) and id(data) not in self.shared:
            scrutinee = self.expr(data, ind)      # `match (%a, %b)`, as Relay writes it
        else:
            scrutinee = ["(", self.expr(data, ind), ")"]
        lines = [[keyword, " ", scrutinee, " {"]]
        for c in m.clauses:
            lines.extend(self.comment_lines(c, inner))
            lhs = self.pattern(c.lhs)
            body_ind = _deeper(inner)
            body = self.block(c.rhs, body_ind)     # a block: it binds the pattern's vars
            flat = _one_line(body)
            rhs = ["{\n", body, "\n", inner, "}"] if flat is None else flat.strip()
            lines.append([inner, lhs, " => ", rhs, ","])
        lines.append(ind + "}")
        return _lines(lines)

    def pattern(self, p) -> str:
        """The text of a pattern, by `pattern_<PatternClass>`."""
        rule = getattr(self, "pattern_" + type(p).__name__, None)
        if rule is None or not isinstance(p, Pattern):
            raise RelayishError(f"cannot print a {type(p).__name__} pattern")
        return rule(p)

    def pattern_PatternWildcard(self, p):
        return "_"

    def pattern_PatternVar(self, p):
        return self.binder(p.var)

    def pattern_PatternConstructor(self, p):
        if not p.patterns:
            return p.constructor.name_hint
        return f"{p.constructor.name_hint}({', '.join(self.pattern(s) for s in p.patterns)})"

    def pattern_PatternTuple(self, p):
        subs = [self.pattern(s) for s in p.patterns]
        if len(subs) == 1:
            return f"({subs[0]},)"
        return "(" + ", ".join(subs) + ")"


def _joined(docs, sep) -> list:
    out = []
    for d in docs:
        if out:
            out.append(sep)
        out.append(d)
    return out


provide("astext", astext)        # str(node) on expressions and modules (expr.py cannot import this)
