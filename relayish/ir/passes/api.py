"""`rl.passes`: the optimizing passes, each a Pass (Function or Module -> the same kind).

    dead_code    unused bindings whose values have no effect that matters (dead_code.py)
    to_anf       A-normal form as Relay's ToANormalForm: every compound operand, constant and
                 scope result let-bound (anf.py); provides "anf"
    from_anf     its inverse where safe: bound atoms and single-use pure values put back
    merge_matmul matmuls sharing their right operand become one against stacked weights
                 (merge_matmul.py; issue 16)
    cse          common-subexpression elimination of pure values, scoped by dominance (cse.py);
                 a merged value is one shared node (Relay's); CSE(bind=True) lets it
    simplify     AD's zeros and ones, constant folding, unwritten reference reads (simplify.py)
    fold_constant  Relay's FoldConstant: op calls on constants, lets of constants, projections
                 of tuples written in place (fold_constant.py)
    inline, partial_eval   inlining; partial evaluation with globals specialised to static
                 arguments (inline.py, partial_eval.py)

Each name is a Pass object: call it (`rl.passes.dead_code(f)`) or list it in
`rl.optimize(x, passes=[rl.passes.to_anf, rl.passes.dead_code])`. The classes (DeadCode, ToANF,
FromANF) make more instances, and `Effects` is the effect analysis the passes read
(notes/passes.md).
Write your own with `rl.Pass` or `rl.FunctionPass`.

Gradient checkpointing is not listed here: it is `checkpoint=` on rl.gradient, rl.grad,
rl.value_and_grad and rl.vjp (ad/checkpoint*.py). What it changes is which forward values a
*gradient* program keeps, so it needs AD; a Pass maps a program to an equal program and runs
before AD sees it, and no marking of steps would survive as less memory unless reverse AD
itself learned a "recompute this" marker. Its IR half, cutting a let-chain into steps and the
revolve schedules, is ir/passes/checkpoint.py (step_chain, schedule). notes/passes.md says why.
"""
from relayish.ir.passes.anf import FromANF, ToANF
from relayish.ir.passes.cse import CSE
from relayish.ir.passes.dead_code import DeadCode
from relayish.ir.passes.effects import Effects
from relayish.ir.passes.fold_constant import FoldConstant
from relayish.ir.passes.inline import Inline
from relayish.ir.passes.merge_matmul import MergeMatmul, merge_matmul
from relayish.ir.passes.partial_eval import PartialEval
from relayish.ir.passes.simplify import Simplify

dead_code = DeadCode()
to_anf = ToANF()
from_anf = FromANF()
cse = CSE()
simplify = Simplify()
fold_constant = FoldConstant()
partial_eval = PartialEval()
inline = Inline()

__all__ = ["dead_code", "to_anf", "from_anf", "merge_matmul", "DeadCode", "ToANF", "FromANF",
           "MergeMatmul", "Effects", "cse", "CSE",
           "simplify", "Simplify", "fold_constant", "FoldConstant",
           "partial_eval", "PartialEval", "inline", "Inline"]
