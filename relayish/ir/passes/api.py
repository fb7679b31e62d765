"""`rl.passes`: the optimizing passes, each a Pass (Function or Module -> the same kind).

It holds only passes that exist and are tested; `rl.passes.__all__` lists them. None exist yet:
dead-code elimination, CSE, inlining, partial evaluation, simplification and the A-normal form
conversion are the optimizing-passes issue's work (notes/passes.md), and relayish has no ANF
conversion to wrap today. Write your own with `rl.Pass` or `rl.FunctionPass`.
"""

__all__: list = []
