"""Bounds on tracing for XLA: what the jax backend refuses before it hangs or XLA crashes.

    TRACE_LIMITS            the bounds for the process (assign to the dict)
    trace_limits(limits)    per call: rl.compile(f, limits={"max_depth": ..., "max_ops": ...,
                            "max_seconds": ...})
    chain_depth(jaxpr)      the longest chain of dependent equations, checked before XLA compiles

MAX_SWITCH_NESTING and MAX_ACTIVATIONS_UNDER_JOIN bound joins (joins.py, trace.py). Each bound
crossed is a CompileError that names the function unrolled most and points to the interpreter;
the measurements behind the figures are in notes/jax-backend.md.
"""
from __future__ import annotations

from relayish.errors import RelayishError


# Traced joins nested deeper than this are not lax.switch but every alternative inlined and a
# select: XLA's compiler recurses once per nested conditional, slowly and then into a crash
# (measured with nested ifs: 100 nested switches compile in 4 s, 150 in 8 s, 200 in 24 s, 300
# segfault in the MLIR-to-HLO lowering). Nesting in the program text is not recursion, so it
# is bounded only by TRACE_LIMITS (max_depth), like any other program.
MAX_SWITCH_NESTING = 16
# Activations of one function inside traced joins beyond which recursion is taken to depend on a
# traced value (it would nest joins forever).
MAX_ACTIVATIONS_UNDER_JOIN = 512

# Bounds on one trace and on the program handed to XLA (notes/jax-backend.md has the
# measurements). Override per call with rl.compile(..., limits={"max_depth": ...}) or for the
# process by assigning to this dict.
#   max_depth:   the longest chain of dependent operations in the traced program. XLA's compiler
#                crashes the process (segfault) on deep chains: a chain of 40,000 (and 28,000)
#                dependent elementwise ops did, 20,000 compiled (10 s); half of that is the bound.
#   max_ops:     tensor operations recorded in one trace (unrolled recursion over a long list, a
#                non-terminating recursion): bounds the trace's memory.
#   max_seconds: wall time of one trace (a recursion that records nothing but never ends).
TRACE_LIMITS = {"max_depth": 10_000, "max_ops": 200_000, "max_seconds": 300.0}


def trace_limits(limits):
    """TRACE_LIMITS updated with the `limits` given to rl.compile (checked)."""
    out = dict(TRACE_LIMITS)
    if limits is None:
        return out
    if not isinstance(limits, dict):
        raise RelayishError(f"limits must be a dict (keys {', '.join(TRACE_LIMITS)}), got "
                            f"{type(limits).__name__}")
    for key, value in limits.items():
        if key not in TRACE_LIMITS:
            raise RelayishError(f"unknown limit {key!r}; the limits are "
                                f"{', '.join(TRACE_LIMITS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise RelayishError(f"limit {key} must be a positive number, got {value!r}")
        out[key] = value
    return out


def chain_depth(jaxpr):
    """The longest chain of dependent equations in a jaxpr (a loop; an equation with inner
    jaxprs, a switch or a loop, counts as its deepest inner chain plus one)."""
    depth = {}
    deepest = 0
    for eqn in jaxpr.eqns:
        inner = 0
        for param in eqn.params.values():
            for sub in (param if isinstance(param, (tuple, list)) else (param,)):
                sub = getattr(sub, "jaxpr", sub)        # ClosedJaxpr -> Jaxpr
                if hasattr(sub, "eqns"):
                    inner = max(inner, chain_depth(sub))
        d = 1 + inner + max((depth.get(v, 0) for v in eqn.invars if not hasattr(v, "val")),
                            default=0)
        for v in eqn.outvars:
            depth[v] = d
        deepest = max(deepest, d)
    return deepest
