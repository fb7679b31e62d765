"""The pass interface: a named program transformation with declared needs.

A pass is `Module -> Module` (`Pass.run`); called on a Function or a Module (`pass_(x)`) it gives
back the same kind: a Function is wrapped as `Module.from_expr` (its @main) and unwrapped after.
Each pass declares, as sets of property names:

    requires   what must hold of its input ("typed": every node's checked_type is set);
    preserves  what it keeps true of what held before (a pass that rebuilds nodes without
               types does not preserve "typed");
    provides   what it makes true whatever held before (a future ANF conversion provides "anf").

The manager (manager.py) establishes what it can ("typed", by type-checking) and refuses a pass
whose other needs nothing before it provides. A pass never mutates its input module: it returns
a new Module (or the same one, unchanged). Expression nodes are immutable, so unchanged functions
are shared between input and output.
"""
from __future__ import annotations

from relayish.errors import RelayishError
from relayish.ir.expr import Function, describe
from relayish.ir.module import Module

# The properties passes speak of today. The manager establishes TYPED itself; ANF must be provided
# by a pass (issue 13's A-normal form conversion). A pass may name others of its own.
TYPED = "typed"
ANF = "anf"
KNOWN_PROPERTIES = frozenset([TYPED, ANF])


def _property_set(value, what, owner) -> frozenset:
    # a bare str is one property: frozenset("typed") would be the set of its letters
    if isinstance(value, str):
        return frozenset([value])
    try:
        names = frozenset(value)
    except TypeError:
        raise RelayishError(f"pass {owner!r}: {what} must be a property name or a collection of "
                            f"them, got {describe(value)}") from None
    for name in names:
        if not isinstance(name, str) or not name:
            raise RelayishError(f"pass {owner!r}: {what} holds {describe(name)}, which is not a "
                                f"property name (a str such as 'typed')")
    return names


class Pass:
    """A named program transformation. Subclass it and override `run(mod) -> Module`:

        class Renumber(rl.Pass):
            name = "renumber"
            requires = {"typed"}
            preserves = {"typed"}
            def run(self, mod): ...

    `pass_(func_or_mod)` runs it alone (through the manager, so its requirements are met) and
    returns the same kind of object it was given. Class attributes give the defaults; the
    constructor's keywords override them for one instance.
    """

    name: str | None = None
    requires: frozenset = frozenset()
    preserves: frozenset = frozenset()
    provides: frozenset = frozenset()

    def __init__(self, name=None, *, requires=None, preserves=None, provides=None):
        if name is not None:
            if not isinstance(name, str) or not name:
                raise RelayishError(f"a pass name must be a non-empty str, got {describe(name)}")
            self.name = name
        elif not self.name:
            self.name = type(self).__name__
        for what, value in (("requires", requires), ("preserves", preserves),
                            ("provides", provides)):
            value = getattr(type(self), what) if value is None else value
            setattr(self, what, _property_set(value, what, self.name))

    def run(self, mod: Module) -> Module:
        """The transformation itself, on a Module; returns a Module and leaves `mod` unchanged."""
        raise RelayishError(f"pass {self.name!r} ({type(self).__name__}) does not define run(mod)")

    def __call__(self, func_or_mod, check=False):
        from relayish.ir.passes.manager import Sequential, apply
        if isinstance(self, Sequential) and not check:
            return apply(self, func_or_mod)
        return apply(Sequential([self], name=self.name, check=check), func_or_mod, named=False)

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r}>"


class FunctionPass(Pass):
    """A pass made of a per-Function transform, applied to every global of the module:

        rename = rl.FunctionPass(lambda func, mod: func, name="identity", preserves={"typed"})

    `transform(func, mod)` gets each global Function and the whole (input) module, and returns a
    Function (the same object when it changes nothing). Subclasses may override
    `transform_function(self, func, mod)` instead of passing `transform`. Globals are visited in
    a loop, in the module's order; the types of the module are kept.
    """

    def __init__(self, transform=None, name=None, *, requires=None, preserves=None, provides=None):
        if transform is not None and not callable(transform):
            raise RelayishError(f"FunctionPass takes a callable transform(func, mod), got "
                                f"{describe(transform)}")
        if name is None and transform is not None:
            name = getattr(transform, "__name__", None)
            name = None if name == "<lambda>" else name
        super().__init__(name, requires=requires, preserves=preserves, provides=provides)
        self._transform = transform

    def transform_function(self, func: Function, mod: Module) -> Function:
        if self._transform is None:
            raise RelayishError(f"FunctionPass {self.name!r} has no transform: pass one, or "
                                "override transform_function(func, mod)")
        return self._transform(func, mod)

    def run(self, mod: Module) -> Module:
        out = mod.copy()
        for gv, func in mod.items():
            new = self.transform_function(func, mod)
            if not isinstance(new, Function):
                raise RelayishError(f"pass {self.name!r} turned @{gv.name_hint} into "
                                    f"{describe(new)}; a function transform returns a Function")
            if new is not func:
                out[gv] = new
        return out
