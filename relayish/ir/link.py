"""Calling a Module from another program: its globals merged into the caller's module.

`rl.Call(mod, args)` calls `mod`'s @main: the callee is a GlobalVar linked to `mod`
(`Module.as_callee`; any Module, the result of an AD entry point for a program with globals
among them). `link(prog, mod)` gives the program back with every linked module's functions
and types merged into one module: a global keeps its name where the name is free and gets
`<name>_1`, `<name>_2`, ... where it is taken (a callee's @main always is: the caller's @main,
or the name reserved for it), and the calls point at the merged names. A linked module may
itself call linked modules; each module is merged once, however often it is called.

The entry points that differentiate or run a program link it first (the AD entry points,
rl.evaluate, rl.compile), so nested AD is one line:

    g = rl.grad(mod)                                       # a Module (mod has globals)
    h = rl.grad(rl.Function([x], rl.sum(rl.Call(g, [x]) * x)))

Types: a linked module's ADTs are added to the caller's; the same TypeData in both (a type
they share) is added once; two different types of one name are a RelayishError (types are
not renamed).
"""
from __future__ import annotations

from relayish.errors import RelayishError
from relayish.ir.analysis import walk
from relayish.ir.expr import Function, GlobalVar
from relayish.ir.module import Module, fresh_name
from relayish.ir.visitor import ExprMutator, run_deep

__all__ = ["link", "link_program", "linked_modules"]


def linked_modules(roots) -> list:
    """The modules the linked callees in `roots` (expressions) name, each once, in order."""
    found = {}
    for root in roots:
        for node in walk(root):
            if isinstance(node, GlobalVar) and node.linked is not None:
                found.setdefault(id(node.linked), node.linked)
    return list(found.values())


def link(prog, mod=None):
    """(prog, mod) with the linked modules merged: a Function gives (the function, the module
    of its globals: a copy of mod, or a new one); a Module gives (the merged module, None).
    Nothing linked: (prog, mod) unchanged."""
    return run_deep(_link, prog, mod)


def link_program(prog):
    """A Function or Module ready to run: a Function with linked callees becomes a Module
    whose @main it is; anything else is returned as it is."""
    func, mod = link(prog)
    if isinstance(prog, Function) and mod is not None:
        mod["main"] = func
        return mod
    return func


def _link(prog, mod):
    own = list(prog.functions.values()) if isinstance(prog, Module) else [prog]
    if mod is not None:
        own += list(mod.functions.values())
    pending = linked_modules(own)
    if not pending:
        return prog, mod
    target = (prog if isinstance(prog, Module) else mod or Module()).copy()
    taken = {gv.name_hint for gv in target.functions} | {"main"}
    # every module reached, each with its globals' merged names
    renames, order = {}, []
    while pending:
        callee = pending.pop()
        if id(callee) in renames:
            continue
        names = {}
        for gv in callee.functions:
            names[gv.name_hint] = fresh_name(gv.name_hint, taken, sep="_")
            taken.add(names[gv.name_hint])
        renames[id(callee)] = names
        order.append(callee)
        pending += [m for m in linked_modules(callee.functions.values())
                    if id(m) not in renames]
    rewrite = _Relink(renames, {})
    for gv, func in list(target.functions.items()):
        target[gv] = rewrite.visit(func)
    for callee in order:
        for data in callee.type_definitions.values():
            _add_type(target, data)
        callee_rewrite = _Relink(renames, renames[id(callee)])
        for gv, func in callee.functions.items():
            target[renames[id(callee)][gv.name_hint]] = callee_rewrite.visit(func)
    if isinstance(prog, Module):
        return target, None
    return rewrite.visit(prog), target


def _add_type(target, data):
    name = data.header.name
    try:
        existing = target.get_type_data(name)
    except RelayishError:
        target.add_type(data)
        return
    if existing is not data:
        raise RelayishError(f"a called module defines the type {name}, and so does the caller "
                            "(a different one): rename one of them; types are not renamed "
                            "when modules are merged")


class _Relink(ExprMutator):
    """Calls of the merged globals by their new names: a linked callee by its module's @main,
    a plain global by the current module's renaming (absent: its own name)."""

    def __init__(self, renames, names):
        super().__init__()
        self.renames, self.names = renames, names

    def visit_GlobalVar(self, e):
        if e.linked is not None:
            return GlobalVar(self.renames[id(e.linked)]["main"])
        new = self.names.get(e.name_hint, e.name_hint)
        return e if new == e.name_hint else GlobalVar(new)
