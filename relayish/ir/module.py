"""A Module: mutually recursive global functions and algebraic data type definitions.

Globals are looked up by name: a GlobalVar("f") built anywhere names the module's @f, so a
body may refer to a function before or after it is added.
"""
from __future__ import annotations

import itertools

from relayish.errors import RelayishError
from relayish.ir.expr import (Constructor, Expr, Function, GlobalVar, TypeData, describe,
                              program_text)
from relayish.ir.types import GlobalTypeVar

_STAMPS = itertools.count(1)


def fresh_name(name, taken, sep=""):
    """`name`, or `name<sep>1`, `name<sep>2`, ... : the first not in `taken`."""
    if name not in taken:
        return name
    i = 1
    while f"{name}{sep}{i}" in taken:
        i += 1
    return f"{name}{sep}{i}"


# the name of a called Module's @main until ir/link.py merges it (then main_1, main_2, ...)
LINKED_MAIN = "main of a called Module"


class FunctionTable(dict):
    """A Module's table of functions (a dict) with a stamp, new on each change, unique across
    tables: a cache of what was compiled from a module compares one integer instead of the
    whole table (the interpreter's cache; a checkpointed program has 10^4+ globals)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.stamp = next(_STAMPS)

    def _changed(method):
        def changed(self, *args, **kwargs):
            self.stamp = next(_STAMPS)
            return method(self, *args, **kwargs)
        changed.__name__ = method.__name__
        return changed

    __setitem__ = _changed(dict.__setitem__)
    __delitem__ = _changed(dict.__delitem__)
    __ior__ = _changed(dict.__ior__)
    pop = _changed(dict.pop)
    popitem = _changed(dict.popitem)
    setdefault = _changed(dict.setdefault)
    update = _changed(dict.update)
    clear = _changed(dict.clear)
    del _changed


class Module:
    """`mod = rl.Module(); mod["main"] = rl.Function(...)`; `mod.add_type(rl.TypeData(...))`."""

    def __init__(self, functions=None, type_definitions=None):
        self._globals: dict[str, GlobalVar] = {}
        self.functions: dict[GlobalVar, Function] = FunctionTable()
        self._types: dict[str, GlobalTypeVar] = {}
        self.type_definitions: dict[GlobalTypeVar, TypeData] = {}
        self._constructors: dict[str, Constructor] = {}
        for data in (type_definitions.values() if isinstance(type_definitions, dict)
                     else type_definitions or []):
            self.add_type(data)
        for gv, func in (functions or {}).items():
            self[gv] = func

    # ---- functions -------------------------------------------------------------------------
    def __setitem__(self, key, func):
        if not isinstance(func, Function):
            raise RelayishError(f"a module holds functions; {describe(key)} was given "
                                f"{describe(func)}")
        gv = self.get_global_var(key, create=True)
        self.functions[gv] = func

    def __getitem__(self, key):
        if isinstance(key, (GlobalTypeVar,)):
            return self.type_definitions[self.get_global_type_var(key.name)]
        gv = self.get_global_var(key)
        return self.functions[gv]

    def __contains__(self, key):
        name = key.name_hint if isinstance(key, GlobalVar) else key
        return name in self._globals

    def get_global_var(self, key, create=False) -> GlobalVar:
        """The module's GlobalVar for a name or for a GlobalVar of that name."""
        if isinstance(key, GlobalVar):
            name = key.name_hint
        elif isinstance(key, str):
            name = key
        else:
            raise RelayishError(f"module keys are names or GlobalVars, got {describe(key)}")
        gv = self._globals.get(name)
        if gv is None:
            if not create:
                known = ", ".join("@" + n for n in self._globals) or "none"
                raise RelayishError(f"the module has no global function @{name} (it has: {known})")
            gv = key if isinstance(key, GlobalVar) else GlobalVar(name)
            self._globals[name] = gv
        return gv

    @property
    def global_vars(self) -> list:
        return list(self.functions)

    def items(self):
        return list(self.functions.items())

    # ---- algebraic data types --------------------------------------------------------------
    def add_type(self, data: TypeData) -> TypeData:
        if not isinstance(data, TypeData):
            raise RelayishError(f"add_type takes a TypeData, got {type(data).__name__}")
        name = data.header.name
        if name in self._types and self.type_definitions[self._types[name]] is not data:
            raise RelayishError(f"the module already defines a type named {name}")
        for ctor in data.constructors:
            other = self._constructors.get(ctor.name_hint)
            if other is not None and other is not ctor:
                raise RelayishError(f"the module already has a constructor named {ctor.name_hint}")
        self._types[name] = data.header
        self.type_definitions[data.header] = data
        for ctor in data.constructors:
            self._constructors[ctor.name_hint] = ctor
        return data

    def get_global_type_var(self, name) -> GlobalTypeVar:
        try:
            return self._types[name]
        except KeyError:
            raise RelayishError(f"the module has no type named {name}") from None

    def get_type_data(self, key) -> TypeData:
        gtv = key if isinstance(key, GlobalTypeVar) else self.get_global_type_var(key)
        try:
            return self.type_definitions[self.get_global_type_var(gtv.name)]
        except KeyError:
            raise RelayishError(f"the module has no type named {gtv.name}") from None

    def get_constructor(self, name) -> Constructor:
        try:
            return self._constructors[name]
        except KeyError:
            raise RelayishError(f"the module has no constructor named {name}") from None

    @property
    def constructors(self) -> dict:
        return dict(self._constructors)

    # ---- building ----------------------------------------------------------------------------
    @classmethod
    def from_expr(cls, expr, functions=None, type_definitions=None) -> "Module":
        """A module whose @main is `expr` (a Function, or any expression made into fn() { expr })."""
        mod = cls(functions, type_definitions)
        if not isinstance(expr, Function):
            if not isinstance(expr, Expr):
                raise RelayishError(f"Module.from_expr takes an expression, got {type(expr).__name__}")
            expr = Function([], expr)
        mod["main"] = expr
        return mod

    def as_callee(self) -> GlobalVar:
        """This module's @main as the callee of a call in another program (`rl.Call(mod, args)`):
        a GlobalVar linked to the module; ir/link.py merges the module's globals into the
        caller's (renamed where they clash) before the program runs or is differentiated."""
        if "main" not in self:
            raise RelayishError("a Module called from another program needs a @main function")
        gv = GlobalVar(LINKED_MAIN)      # a name no lookup resolves: only linking does
        gv.linked = self
        return gv

    def copy(self) -> "Module":
        """A shallow copy: the same functions and types, in a new table."""
        new = Module()
        for data in self.type_definitions.values():
            new.add_type(data)
        for gv, func in self.functions.items():
            new._globals[gv.name_hint] = gv
            new.functions[gv] = func
        return new

    def __repr__(self):
        return f"<Module {', '.join('@' + gv.name_hint for gv in self.functions)}>"

    def __str__(self):
        return program_text(self)
