"""The default pipeline: `DEFAULT_PASSES` and `optimize` (Function or Module -> same kind).

Running passes (the properties, check mode, Sequential) is base.py's; this module only chooses
what runs when the caller names no passes.
"""
from __future__ import annotations

from relayish.ir.passes.base import Pass, Sequential, apply

# The default optimization pipeline. Empty for now: the optimizing passes (dead code, CSE,
# inlining, partial evaluation, simplification) come with issue 13, which fills this list.
DEFAULT_PASSES: tuple = ()


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
