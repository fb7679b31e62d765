"""The pass layer: named program transformations, their composition and `optimize`.

    base.py      Pass (a name, requires / preserves / provides, run(mod) -> Module),
                 FunctionPass (a per-Function transform applied to every global), Sequential
                 (passes in order, check mode) and the loop that runs them
    manager.py   optimize and the default pipeline
    api.py       the `rl.passes` namespace: the optimizing passes themselves

notes/passes.md explains how to write a pass and what the optimizing-passes issue adds.
"""
from relayish.ir.passes.base import ANF, TYPED, FunctionPass, Pass, Sequential
from relayish.ir.passes.manager import DEFAULT_PASSES, optimize

__all__ = ["Pass", "FunctionPass", "Sequential", "optimize", "DEFAULT_PASSES", "TYPED", "ANF"]
