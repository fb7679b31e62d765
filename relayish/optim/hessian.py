"""The derived programs of a problem and the Hessian strategies.

From the flat objective (objective.py): the gradient program (rl.gradient), and for Newton the
Hessian in one of three ways:
* "reverse": rl.hessian (reverse over reverse), fused with the gradient into one program
  fn(x) -> (f, g, H) — the default on the interpreter (cheaper to run and to derive there);
* "forward": hessian_forward (n forward-over-reverse HVPs stacked in one program);
* on the jax backend's cpu path ("auto" or "forward"): `batched_newton`, the relayish program
  jvp(gradient) taken as a jax function and vmapped over the n basis vectors
  (newton_xla.DeviceNewton), which also keeps Newton's iterations on the device.
newton-cg and trust-ncg use the HVP program (forward over reverse).
"""
from __future__ import annotations

from relayish.errors import CompileError, RelayishError
from relayish.ir.expr import Call, Function, Let, Tuple, TupleGetItem, Var
from relayish.optim.newton_xla import DeviceNewton


class InternalCompileError(CompileError):
    """A failure inside relayish while building a compiled evaluation (a bug), as opposed to
    a program the backend refuses: backend="auto" never falls back on it, it surfaces."""


# The derived programs are optimized (the default pipeline): AD's zero adjoints stay
# `zero_adjoint(..)` calls through it, whose products simplify folds (and the jax backend
# folds what is left of them), so no `x * 0` of an adjoint reaches XLA
# (tests/backend/test_hessian_program.py; notes/passes.md, "Default pipeline").
def gradient_program(obj):
    from relayish.ad import api
    return api.gradient(obj)


# "auto": forward over reverse where Newton's device path vmaps it (jax, cpu), reverse over
# reverse elsewhere (cheaper on the interpreter and to derive: notes/ad.md, notes/optim.md)
HESSIANS = ("auto", "forward", "reverse")


def hessian_program(obj, mode="forward"):
    """The Hessian program: forward-over-reverse (n HVPs) or rl.hessian (reverse-over-reverse)."""
    if mode == "reverse":
        from relayish.ad import api
        return api.hessian(obj)
    from relayish.ad.api import hessian_forward
    return hessian_forward(obj)


def hvp_program(obj):
    from relayish.ad.api import hvp_forward_over_reverse
    return hvp_forward_over_reverse(obj)


def fused_value_grad_hess(obj, g_prog, mode="forward"):
    """fn(x) -> (f, g, H) in one program (one compiled call per Newton iteration); g_prog is
    the gradient program of obj."""
    h_prog = hessian_program(obj, mode)
    if not (isinstance(g_prog, Function) and isinstance(h_prog, Function)):
        return None
    x = Var("x", g_prog.params[0].type_annotation)
    vg, h = Var("vg", None), Var("h", None)
    body = Let(vg, Call(g_prog, [x]), Let(h, Call(h_prog, [x]),
               Tuple([TupleGetItem(vg, 0), TupleGetItem(TupleGetItem(vg, 1), 0), h])))
    return Function([x], body)


def jvp_of_gradient(gradient):
    from relayish.ad.api import jvp
    return jvp(gradient)


def batched_newton(jg_run, fun_run, n):
    """DeviceNewton for fn(x) -> (f, g, H, p) as one jitted jax computation, or None.

    jg_run is the compiled relayish program jvp(gradient(f)) : (x, v) -> ((f, (g,)), (_, (H v,))),
    forward over reverse; `jg_run.jax_function()` is its pure jax function. vmapped over the n
    basis vectors it gives the rows of H, while its primal half (f, g) does not depend on v and
    stays unbatched: one pass computes f, g and H (the batched form of hessian_forward's n HVPs;
    jax.hessian batches its HVPs the same way). p is the Newton direction when H is positive
    definite (NaN from the Cholesky otherwise: then the optimizer falls back to its modified
    Cholesky on H). fun_run is the compiled objective, for the line search in XLA.
    """
    # here, not at the top: `import relayish` does not load the jax backend's modules
    from relayish.backend.jax.function import NotTensorFunction
    try:
        jg = jg_run.jax_function()
        fun = fun_run.jax_function()
    except NotTensorFunction:
        # jax_function's documented refusal: a parameter or result that is not tensors (the
        # compiled Hessian program handles those). A CompileError of the trace (jax_function
        # traces the program) is real and surfaces: it was hidden by this fallback too
        return None
    except RelayishError:
        raise
    except Exception as e:  # noqa: BLE001 - a failure outside relayish's errors is a bug: say so
        raise _batching_failed("the compiled program's jax function", e) from e
    if not (jg_run.uses_x64 and fun_run.uses_x64):
        return None
    device = DeviceNewton(jg, fun, n)
    try:
        device.check()
    except NotImplementedError as e:
        # jax has no batching rule for a primitive the program uses ("Batching rule for ... not
        # implemented"): vmap cannot batch it, so the Hessian's n HVPs run as separate calls.
        # Any other NotImplementedError is a failure like the rest
        if "Batching rule" not in str(e):
            raise _batching_failed("jax.vmap of the forward-over-reverse program", e) from e
        return None
    except RelayishError:
        raise
    except Exception as e:  # noqa: BLE001 - any other failure is a bug: say so
        raise _batching_failed("jax.vmap of the forward-over-reverse program", e) from e
    return device


def _batching_failed(what, e):
    return InternalCompileError(
        f"Newton's batched Hessian failed ({what}): {type(e).__name__}: {e}\n"
        "(this is a bug in relayish; pass hessian=\"reverse\" to build the Hessian as a "
        "relayish program instead)")
