"""relayish: a small typed functional language for differentiable programming.

    import relayish as rl
    x = rl.var("x", shape=(3,), dtype="float64")
    f = rl.Function([x], rl.sum(rl.tanh(x) * x))
    rl.evaluate(rl.grad(f), np.ones(3))

The public names here are those of API.md; everything else is internal.
"""
from relayish.errors import (CompileError, EvaluationError, GradientError, ParseError,
                             RelayishError, TypeCheckError)
from relayish.ir.types import (FuncType, GlobalTypeVar, RefType, TensorType, TupleType, Type,
                               TypeCall, TypeVar)
from relayish.ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If,
                              Let, Match, PatternConstructor, PatternTuple, PatternVar,
                              PatternWildcard, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem,
                              TypeData, Var, const, var)
from relayish.ir.op import Op, get_op, register_gradient, register_op, register_tangent
from relayish.ir.module import Module
from relayish.ir.builder import ScopeBuilder
from relayish import ops as _ops  # noqa: F401  fills the operator registry
from relayish.ops import api as op
from relayish.ops.api import *  # noqa: F401,F403  every operator as rl.NAME
from relayish.ir.text.printer import astext
from relayish.ir.text.parser import parse, parse_expr
from relayish.ir.text.format import format_text
from relayish.ir.structural import assert_structural_equal, structural_equal
from relayish.ir.typecheck import infer_type, typeof
from relayish.ir.prelude import Prelude
from relayish.backend.values import (Closure, ConstructorValue, RefValue, from_list_value,
                                     list_value)
from relayish.backend.interp.api import evaluate
from relayish.backend.api import compile  # noqa: A004  API name
from relayish.backend.batching import vmap
from relayish.ad.api import (derivative, grad, gradient, hessian, hvp, jacobian, jvp,
                             value_and_grad, vjp)
from relayish import optim
from relayish import debug
from relayish.debug.dot import to_dot
from relayish.ir.passes import FunctionPass, Pass, Sequential, optimize
from relayish.ir.passes import api as passes
from relayish import eager  # define-by-run: `from relayish import eager as re`
from relayish.interop import from_jax, from_torch, to_jax  # jax and PyTorch in and out (docs/interop.md)

__version__ = "0.1.0"
