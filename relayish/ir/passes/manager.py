"""The pass manager: run a list of passes over a module, keeping track of what holds.

    Sequential(passes, name=...)   a pass made of passes, run in order (Relay's
                                   transform.Sequential); nested Sequentials are flattened
    optimize(x, passes=None)       Function or Module -> same kind, default pipeline or `passes`

The manager keeps a set of properties that hold of the current module. Before a pass it
establishes what the pass requires ("typed": type-check the module) or, for a property it cannot
establish, refuses the pass with an error naming it; after the pass the set becomes
(held & pass.preserves) | pass.provides. In check mode the module is type-checked after every
pass, and a TypeCheckError names the pass that broke typing.

Nothing here walks expressions: passes are run in a loop and globals by FunctionPass in a loop,
so a 10^5-long let-chain costs the manager nothing (the type checker walks chains with loops).
"""
from __future__ import annotations

from relayish.errors import RelayishError, TypeCheckError
from relayish.ir.expr import Expr, Function, describe
from relayish.ir.module import Module
from relayish.ir.passes.base import KNOWN_PROPERTIES, TYPED, Pass
from relayish.ir.typecheck import infer_type
from relayish.ir.visitor import run_deep

# The default optimization pipeline. Empty for now: the optimizing passes (dead code, CSE,
# inlining, partial evaluation, simplification) come with issue 13, which fills this list.
DEFAULT_PASSES: tuple = ()


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


def optimize(func_or_mod, passes=None, check=False):
    """Optimize a program: a Function or a Module in, the same kind out, with the same meaning.

        mod2 = rl.optimize(mod)                         # the default pipeline
        f2 = rl.optimize(f, passes=[my_pass], check=True)

    `passes=None` runs the default pipeline, which is empty for now (the optimizing passes come
    later): the result is then structurally equal to the input. `passes` is a list of Pass
    objects (or one Pass) run in order. `check=True` type-checks the input and the program after
    every pass, naming in the TypeCheckError the pass that made it ill-typed. A Module in gives
    a new Module out; the input is never changed.
    """
    if passes is None:
        passes = DEFAULT_PASSES
    pipeline = Sequential(passes if not isinstance(passes, Pass) else [passes],
                          name="optimize", check=check)
    return apply(pipeline, func_or_mod, named=False)


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
                                    "no pass before it provides it (the manager can establish "
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
