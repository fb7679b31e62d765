"""The default pipeline: `DEFAULT_PASSES` and `optimize` (Function or Module -> same kind).

    rl.optimize(x)                       # the default pipeline, once
    rl.optimize(x, passes=[...])         # the caller's passes, in order
    rl.optimize(x, check=True)           # type-check after every pass, naming the culprit

The default pipeline (notes/passes.md, "Default pipeline", has the figures behind it):

    partial_eval, dead_code, cse, simplify, dead_code

Not inline: on closures nested inside closures (AD output of `(fn (%y1) { (fn (%y2) { ..
})(..) })(..)`) its output doubles with each level (14 levels: 196,605 lets, 5 s), while
partial_eval inlines the same known closures under its fuel (30 levels: 0.04 s), and on y ** 5
(orders 1-4) the pipeline without inline leaves the same 0, 0, 1, 2 lets.
partial_eval makes AD's references and backpropagator closures static and drops them (most of
the size of AD output); dead_code removes what that left unused; cse merges the
primal values the unrolled backward passes recompute; simplify removes the folded zeros and
ones; a last dead_code removes what cse and simplify made unused. It runs once: a second round
removes nothing more on the programs measured (AD output of y ** 5 at orders 1-4, MLPs, the tree
network) and would double the cost.

Every pass is linear in program size. The pipeline type-checks its input once: every pass in it
keeps checked types on what it rebuilds (base.py, "Keeping types"), so none is followed by a
check. It still costs about 45-55 us per node (140-190 us per let of a chain's gradient,
benchmarks/passes.py section 8), so a program larger than `FULL_PIPELINE_LIMIT` nodes gets
dead_code only (about 16 us a node). dead_code, simplify, dead_code was measured there too: on
AD output they remove nothing that partial_eval has not made static first. Running passes (the properties,
check mode, Sequential) is base.py's; this module only chooses what runs by default.
"""
from __future__ import annotations

from relayish.ir.expr import Function, Let
from relayish.ir.module import Module
from relayish.ir.passes.base import Pass, Sequential, apply
from relayish.ir.passes.cse import CSE
from relayish.ir.passes.dead_code import DeadCode
from relayish.ir.passes.partial_eval import PartialEval
from relayish.ir.passes.simplify import Simplify

# cse binds what it merges (CSE(bind=True)): the interpreter evaluates a shared node at each use
DEFAULT_PASSES: tuple = (PartialEval(), DeadCode(), CSE(bind=True), Simplify(), DeadCode())

# Past this many nodes (the whole module's expressions, each shared node once) the default
# pipeline runs only these: nested closures and ifs are large without being long let-chains
# (300 nested ifs' gradient: 17 s through the full pipeline when the bound counted lets). At the
# limit the full pipeline takes at most about 2 s (56 us a node on 1,200 nested ifs' gradient,
# the costliest measured; 45 us on a chain's): the 1.6 s the bound of 20,000 allowed when the
# pipeline type-checked after every pass (80 us a node), and a little more.
FULL_PIPELINE_LIMIT = 35_000
LARGE_PROGRAM_PASSES: tuple = (DeadCode(),)


def optimize(func_or_mod, passes=None, check=False):
    """Optimize a program: a Function or a Module in, the same kind out, with the same meaning.

        mod2 = rl.optimize(mod)                         # the default pipeline
        f2 = rl.optimize(f, passes=[my_pass], check=True)

    `passes=None` runs the default pipeline (DEFAULT_PASSES, once; for a program of more than
    FULL_PIPELINE_LIMIT bindings, LARGE_PROGRAM_PASSES). `passes` is a list of Pass objects (or
    one Pass) run in order. `check=True` type-checks the input and the program after every pass,
    naming in the TypeCheckError the pass that made it ill-typed. A Module in gives a new Module
    out; the input is never changed.
    """
    if passes is None:
        passes = default_passes(func_or_mod)
    pipeline = Sequential(passes if not isinstance(passes, Pass) else [passes],
                          name="optimize", check=check)
    return apply(pipeline, func_or_mod, named=False)


def default_passes(func_or_mod) -> tuple:
    """The passes `optimize(x)` runs on x: the full pipeline unless x is very large."""
    if count_nodes(func_or_mod, FULL_PIPELINE_LIMIT + 1) > FULL_PIPELINE_LIMIT:
        return LARGE_PROGRAM_PASSES
    return DEFAULT_PASSES


def count_lets(func_or_mod, stop: int) -> int:
    """The number of Let nodes in a Function or a Module's functions, counting up to `stop`
    (a program is only compared with a limit, so the walk ends there). A stack, no recursion;
    a node shared by two places counts once."""
    return _count(func_or_mod, stop, lambda node: isinstance(node, Let))


def count_nodes(func_or_mod, stop: int) -> int:
    """The number of expression nodes, as count_lets counts Lets."""
    return _count(func_or_mod, stop, lambda node: True)


def _count(func_or_mod, stop, counted) -> int:
    if isinstance(func_or_mod, Module):
        stack = list(func_or_mod.functions.values())
    elif isinstance(func_or_mod, Function):
        stack = [func_or_mod]
    else:
        return 0                             # apply() reports the wrong kind of object
    from relayish.ir.passes.uses import operands
    seen, count = set(), 0
    while stack and count < stop:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        count += counted(node)
        stack.extend(operands(node))
    return count
