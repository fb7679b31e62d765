"""rl.to_dot: the dataflow of a program as Graphviz DOT text (no new dependency).

    rl.to_dot(f_or_mod, mod=None) -> str     `dot -Tsvg` draws it

Nodes are the parameters (boxes) and the let bindings (`%y = tanh(%x)`, one node per binding,
its expression as text), plus one node for each function's result; an edge runs from each
variable to every binding that uses it (also from outside a closure into it: its captures).
Function literals, `match` and `if` values are clusters: a closure's cluster holds its own
parameters and bindings; a match's holds one cluster per clause (pattern variables are nodes
there, fed by the matched value); an if's its two branches. A Module draws each global
function as a cluster, and a call of a global as an edge to that function's cluster label.

Let-chains are walked with a loop (10^5-long ones are fine) and a binding's expression is
scanned iteratively; nested clusters recurse once per level of nesting, under run_deep.
"""
from __future__ import annotations

from relayish.errors import RelayishError
from relayish.ir.expr import Expr, Function, GlobalVar, If, Let, Match, Var
from relayish.ir.fields import children
from relayish.ir.module import Module
from relayish.ir.visitor import run_deep
from relayish.backend.runtime.describe import node_text

__all__ = ["to_dot"]

LABEL_WIDTH = 60


def to_dot(f_or_mod, mod=None):
    """Graphviz DOT text of the dataflow of a Function, a Module (each global function), or any
    expression (see the module docstring)."""
    if isinstance(f_or_mod, Module):
        items = [("@" + gv.name_hint, f) for gv, f in f_or_mod.functions.items()]
    elif isinstance(f_or_mod, Function):
        items = [("fn", f_or_mod)]
    elif isinstance(f_or_mod, Expr):
        items = [("expr", Function([], f_or_mod))]
    else:
        raise RelayishError(f"to_dot takes a Function, Module or expression, "
                            f"got {type(f_or_mod).__name__}")
    return run_deep(_Dot().draw, items)


def _escape(text):
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _pattern_vars(pattern):
    """The Vars a pattern binds (a loop over its sub-patterns)."""
    found, stack = [], [pattern]
    while stack:
        p = stack.pop()
        v = getattr(p, "var", None)
        if isinstance(v, Var):
            found.append(v)
        stack.extend(reversed([q for q in children(p) if not isinstance(q, Var)]))
    return found


class _Dot:
    def __init__(self):
        self.lines = []
        self.ids = {}           # id(Var) -> DOT node id
        self.globals = {}       # global name -> the DOT id of its cluster's anchor node
        self.keep = []          # the Vars keyed by id, alive while drawing
        self.count = 0

    def new_id(self, prefix="n"):
        self.count += 1
        return f"{prefix}{self.count}"

    def out(self, depth, text):
        self.lines.append("  " * depth + text)

    def node(self, depth, label, shape="ellipse", style=None):
        nid = self.new_id()
        extra = f", style={style}" if style else ""
        self.out(depth, f'{nid} [label="{_escape(label)}", shape={shape}{extra}];')
        return nid

    def bind(self, var, nid):
        self.ids[id(var)] = nid
        self.keep.append(var)

    def draw(self, items):
        self.out(0, "digraph relayish {")
        self.out(1, 'node [fontname="monospace", fontsize=10];')
        self.out(1, "compound=true;")
        # anchors first, so that calls of a global defined later still find their target
        for name, _ in items:
            if name.startswith("@"):
                self.globals[name[1:]] = self.new_id("g")
        for name, func in items:
            self.function(func, name, 1, anchor=self.globals.get(name[1:]))
        self.out(0, "}")
        return "\n".join(self.lines) + "\n"

    # ---- structure ------------------------------------------------------------------------
    def function(self, func, name, depth, anchor=None):
        """A cluster for `func`; returns the id of its result node."""
        self.out(depth, f"subgraph cluster_{self.new_id('c')} {{")
        self.out(depth + 1, f'label="{_escape(name)}"; style=rounded;')
        if anchor is not None:
            self.out(depth + 1, f'{anchor} [label="{_escape(name)}", shape=plaintext];')
        for p in func.params:
            self.bind(p, self.node(depth + 1, "%" + p.name_hint, shape="box"))
        result = self.body(func.body, depth + 1)
        self.out(depth, "}")
        return result

    def body(self, e, depth):
        """The bindings of a let-chain (a loop), then its result; returns the result's id."""
        while isinstance(e, Let):
            self.binding(e.var, e.value, depth)
            e = e.body
        if isinstance(e, Var) and id(e) in self.ids:
            return self.ids[id(e)]
        return self.value(None, e, depth)

    def binding(self, var, value, depth):
        nid = self.value(var, value, depth)
        self.bind(var, nid)

    def value(self, var, value, depth):
        """The node (or cluster) computing `value`, bound to `var` (None: a result)."""
        name = "%" + var.name_hint if var is not None else "result"
        if isinstance(value, Function):
            nid = self.node(depth, f"{name} = fn", shape="component")
            if var is not None:
                self.bind(var, nid)          # a recursive closure refers to itself
            inner = self.function(value, f"fn {name}", depth)
            self.edge(inner, nid, dashed=True)
            return nid
        if isinstance(value, Match):
            data = self.operand(value.data, depth)
            nid = self.node(depth, f"{name} = match", shape="diamond")
            self.out(depth, f"subgraph cluster_{self.new_id('c')} {{")
            self.out(depth + 1, f'label="match {_escape(node_text(value.data, 30))}"; '
                     "style=dashed;")
            for k, clause in enumerate(value.clauses):
                self.out(depth + 1, f"subgraph cluster_{self.new_id('c')} {{")
                self.out(depth + 2, f'label="{_escape(node_text(clause.lhs, 40))}";')
                for v in _pattern_vars(clause.lhs):
                    pid = self.node(depth + 2, "%" + v.name_hint, shape="box")
                    self.bind(v, pid)
                    self.edge(data, pid)
                self.edge(self.body(clause.rhs, depth + 2), nid)
                self.out(depth + 1, "}")
            self.out(depth, "}")
            return nid
        if isinstance(value, If):
            cond = self.operand(value.cond, depth)
            nid = self.node(depth, f"{name} = if", shape="diamond")
            self.edge(cond, nid)
            for label, branch in (("then", value.true_branch), ("else", value.false_branch)):
                self.out(depth, f"subgraph cluster_{self.new_id('c')} {{")
                self.out(depth + 1, f'label="{label}"; style=dashed;')
                self.edge(self.body(branch, depth + 1), nid)
                self.out(depth, "}")
            return nid
        if isinstance(value, Let):
            return self.body(value, depth)
        text = node_text(value, LABEL_WIDTH)
        nid = self.node(depth, f"{name} = {text}" if var is not None else text,
                        shape="ellipse" if var is not None else "doubleoctagon")
        for src in self.uses(value):
            self.edge(src, nid)
        return nid

    def operand(self, e, depth):
        if isinstance(e, Var) and id(e) in self.ids:
            return self.ids[id(e)]
        return self.value(None, e, depth)

    def uses(self, value):
        """The DOT ids of the variables (and globals) `value` reads, each once, in order."""
        found, seen, stack = [], set(), [value]
        while stack:
            e = stack.pop()
            if isinstance(e, Var):
                nid = self.ids.get(id(e))
                if nid is not None and nid not in seen:
                    seen.add(nid)
                    found.append(nid)
                continue
            if isinstance(e, GlobalVar):
                nid = self.globals.get(e.name_hint)
                if nid is not None and nid not in seen:
                    seen.add(nid)
                    found.append(nid)
                continue
            stack.extend(reversed(children(e)))
        return found

    def edge(self, src, dst, dashed=False):
        self.out(1, f"{src} -> {dst}" + (" [style=dashed];" if dashed else ";"))
