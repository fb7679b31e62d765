"""The pass interface and how passes run: a named program transformation with declared needs.

    Pass           a name, requires / preserves / provides, run(mod) -> Module
    FunctionPass   a per-Function transform applied to every global (map_globals, shared by
                   the built-in per-function passes)
    Sequential     passes run in order as one pass (Relay's transform.Sequential), check mode
    apply          run a pass on a Function or a Module, giving back the same kind

A pass is `Module -> Module` (`Pass.run`); called on a Function or a Module (`pass_(x)`) it gives
back the same kind: a Function is wrapped as `Module.from_expr` (its @main) and unwrapped after.
Each pass declares, as sets of property names:

    requires   what must hold of its input ("typed": every node's checked_type is set);
    preserves  what it keeps true of what held before (a pass that rebuilds nodes without
               types does not preserve "typed");
    provides   what it makes true whatever held before (to_anf provides "anf").

The run loop keeps the set of properties that hold of the current module. Before a pass it
establishes what the pass requires ("typed": type-check the module) or, for a property it cannot
establish, refuses the pass with an error naming it; after the pass the set becomes
(held & pass.preserves) | pass.provides. In check mode the module is type-checked after every
pass, and a TypeCheckError names the pass that broke typing.

A pass never mutates its input module: it returns a new Module (or the same one, unchanged).
Expression nodes are immutable, so unchanged functions are shared between input and output.
Nothing here walks expressions: passes run in a loop and globals by FunctionPass in a loop, so a
10^5-long let-chain costs the loop nothing (the type checker walks chains with loops).

Keeping types: a pass that declares `preserves = {"typed"}` must leave a checked type on every
node of its output, so that the next pass needs no type check (a check costs as much as a pass).
`keep_type(new, old)` gives a node a pass put in place of `old` the type of `old` (every pass
here replaces a node by one of the same type), and `typed_let_chain` builds a let-chain whose
lets have the type of its body. tests/ir/passes/test_types_kept.py compares what the passes
leave with what the checker infers.

Running a pass is part of the pass interface (`Pass.__call__`), so Sequential and the loop live
here with it; manager.py (the default pipeline, `optimize`) builds on this module, never the
other way round.
"""
from __future__ import annotations

from relayish.errors import RelayishError, TypeCheckError
from relayish.ir.expr import Expr, Function, Let, describe
from relayish.ir.module import Module
from relayish.ir.text.parse_core import POSITIONS
from relayish.ir.typecheck import infer_type
from relayish.ir.visitor import run_deep

# The properties passes speak of today. The run loop establishes TYPED itself; ANF must be
# provided by a pass (to_anf). A pass may name others of its own.
TYPED = "typed"
ANF = "anf"
KNOWN_PROPERTIES = frozenset([TYPED, ANF])


def keep_type(new, old):
    """`new`, put by a pass in place of `old`, with old's checked type if it has none, and
    old's source position (keep_position)."""
    if new is not old:
        if getattr(new, "_checked_type", None) is None:
            t = getattr(old, "_checked_type", None)
            if t is not None:
                _set_type(new, t)
        keep_position(new, old)
    return new


def _set_type(node, t):
    # past the attrs setattr hook (it runs converters and validators; this field has none):
    # a third of the cost, paid on every node a pass builds
    object.__setattr__(node, "_checked_type", t)


def keep_position(new, old):
    """Give `new` the source position of `old` (the parser's POSITIONS entry, or the one AD
    derived for it: ad/origins.py), unless it has one: a rewritten binding keeps the line it
    came from, so the debugger shows an optimized gradient's steps as "backward step of line
    N" too. One weak-dictionary lookup per rebuilt node."""
    where = POSITIONS.get(old)
    if where is not None and new not in POSITIONS:
        POSITIONS[new] = where


def typed_let_chain(bindings, body):
    """build_let_chain whose Lets have the type of `body` (a let's type is its body's)."""
    t = getattr(body, "_checked_type", None)
    for var, value in reversed(bindings):
        body = Let(var, value, body)
        _set_type(body, t)
    return body


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

    `pass_(func_or_mod)` runs it alone (through the run loop below, so its requirements are
    met) and returns the same kind of object it was given. Class attributes give the defaults; the
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
        return map_globals(mod, lambda func: self.transform_function(func, mod), self.name)


def map_globals(mod: Module, transform, pass_name: str) -> Module:
    """A copy of `mod` whose every global Function is `transform(func)`, in the module's order;
    a global the transform returns unchanged (the same object) is not rewritten. The per-function
    passes share it, so each checks the transform's result the same way."""
    out = mod.copy()
    for gv, func in mod.items():
        new = transform(func)
        if not isinstance(new, Function):
            raise RelayishError(f"pass {pass_name!r} turned @{gv.name_hint} into "
                                f"{describe(new)}; a function transform returns a Function")
        if new is not func:
            out[gv] = new
    return out


class Sequential(Pass):
    """Passes run in order, as one pass:

        pipeline = rl.Sequential([pass_a, pass_b], name="cleanup", check=True)
        mod2 = pipeline(mod)      # or pipeline.run(mod) on a Module

    `check=True` type-checks the module after every pass (and once before the first), and a
    pass that leaves it ill-typed is named in the TypeCheckError. Its `requires` are what its
    passes require that no earlier one provides, it preserves what all of them preserve, and it
    provides what the last pass to touch a property provides.
    """

    def __init__(self, passes, name="sequential", check=False):
        passes = _pass_list(passes, "Sequential")
        self.passes = passes
        self.check = bool(check)
        # compose the transfer functions held -> (held & preserves) | provides of the passes
        requires, preserved, provided = set(), set(KNOWN_PROPERTIES), set()
        for p in passes:
            requires |= p.requires - provided
            preserved &= p.preserves
            provided = (provided & p.preserves) | p.provides
        super().__init__(name, requires=requires, preserves=preserved, provides=provided)

    def run(self, mod: Module) -> Module:
        if not isinstance(mod, Module):
            raise RelayishError(f"pass {self.name!r}: run takes a Module, got {describe(mod)}; "
                                "call the pass on a Function instead")
        return _run(self, mod)

    def __repr__(self):
        return f"<Sequential {self.name!r}: {', '.join(p.name for p in self.passes) or 'no passes'}>"


def apply(pipeline, func_or_mod, named=True):
    """Run a Sequential on a Function or a Module, returning the same kind.

    `named=False` leaves the pipeline's own name out of the pass paths in messages (for the
    implicit pipeline of optimize and of a pass called alone)."""
    if isinstance(func_or_mod, Module):
        return run_deep(_run, pipeline, func_or_mod, named)
    if isinstance(func_or_mod, Function):
        mod = run_deep(_run, pipeline, Module.from_expr(func_or_mod), named)
        return _unwrap(mod, pipeline)
    hint = (" (make it a Function: rl.Function([], expr))" if isinstance(func_or_mod, Expr)
            else "")
    raise RelayishError(f"{pipeline.name} takes a Function or a Module, got "
                        f"{describe(func_or_mod)}{hint}")


def _unwrap(mod, pipeline):
    extra = [gv.name_hint for gv in mod.global_vars if gv.name_hint != "main"]
    if extra:
        added = ", ".join("@" + n for n in extra)
        raise RelayishError(f"{pipeline.name}: the passes added the globals {added} to a Function's "
                            "module, so the result is not one Function; optimize a Module instead")
    return mod["main"]


def _pass_list(passes, who) -> list:
    if isinstance(passes, Pass) or isinstance(passes, (str, bytes, dict)) or \
            not hasattr(passes, "__iter__"):
        hint = "; put it in a list: [pass]" if isinstance(passes, Pass) else ""
        raise RelayishError(f"{who} takes a list of passes, got {describe(passes)}{hint}")
    passes = list(passes)
    for p in passes:
        if not isinstance(p, Pass):
            raise RelayishError(f"{who}: {describe(p)} is not a pass (a Pass, FunctionPass or "
                                "Sequential)")
    return passes


def _run(pipeline: Sequential, mod: Module, named=True) -> Module:
    """Run the pipeline's passes in a loop, establishing requirements and checking in check mode."""
    held = set()
    if pipeline.check:
        _type_check(mod, None)    # an ill-typed input is the caller's error, not a pass's
        held.add(TYPED)
    mod = mod.copy()     # the result is a new Module even when no pass changes anything
    # nested Sequentials are flattened with an explicit stack of (path, passes, position, check)
    stack = [(pipeline.name if named else "", pipeline.passes, 0, pipeline.check)]
    while stack:
        prefix, passes, k, check = stack.pop()
        if k == len(passes):
            continue
        p = passes[k]
        stack.append((prefix, passes, k + 1, check))
        path = f"{prefix}/{p.name}" if prefix else p.name
        if isinstance(p, Sequential):
            stack.append((path, p.passes, 0, check or p.check))
            continue
        for need in sorted(p.requires - held):
            if need != TYPED:
                raise RelayishError(f"pass {path!r} requires {need!r}, which does not hold here: "
                                    "no pass before it provides it (the pass manager can establish "
                                    f"only {TYPED!r}, by type-checking)")
        if TYPED in p.requires and (TYPED not in held or not all(
                getattr(f, "_checked_type", None) is not None for f in mod.functions.values())):
            # not typed yet, or a pass that claimed to preserve types left a function without one
            _type_check(mod, None)
            held.add(TYPED)
        out = p.run(mod)
        if not isinstance(out, Module):
            raise RelayishError(f"pass {path!r} returned {describe(out)}; run(mod) must "
                                "return a Module")
        mod = out
        held = (held & p.preserves) | p.provides
        if check:
            _type_check(mod, path)
            held.add(TYPED)
    return mod


def _type_check(mod, path):
    if path is None:
        infer_type(mod)
        return
    try:
        infer_type(mod)
    except TypeCheckError as error:
        raise TypeCheckError(f"pass {path!r} made the program ill-typed: {error}") from error
