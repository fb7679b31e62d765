"""Differential fuzzing: the interpreter and the jax backend on the same random programs.

Property: on a random well-typed program (tests/strategies.py) both backends give the same
value within tolerance, and leave the same values in written reference arguments, or both
raise RelayishErrors; the jax backend may refuse (CompileError) only a program with functions
in its signature, which it documents it leaves to the interpreter. On random differentiable
programs the gradients (rl.gradient) agree too. Then chains of ops on edge values (NaN,
infinities, int-min, 0...) of every dtype, where the single-op cases of
tests/backend/test_integer_semantics.py leave off.

The comparison helpers are the backend tests' own (same_value, _fresh_args, edge_values).
"""
from __future__ import annotations

import pathlib
import sys
import warnings

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import relayish as rl
from fuzzing import bounded, fuzz_settings
from strategies import differentiable_programs, programs

# the backend tests import each other as top-level modules (pytest puts tests/backend on the
# path when it collects them); do the same when tests/fuzz runs alone
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "backend"))
from test_integer_semantics import ALL as DTYPES, edge_values  # noqa: E402
from test_jax import same_value  # noqa: E402
from test_jax_random import _fresh_args, _has_function  # noqa: E402

COMPILE_SECONDS = 60      # a jit compile of a random program is slow, but not this slow


def run_both(mod_or_func, args):
    """(interpreter outcome, jax outcome, argument copies each ran on); an outcome is
    ("value", v) or ("error", RelayishError). Another exception propagates: a failure."""
    outcomes = []
    for run in (lambda: rl.evaluate(mod_or_func, *ins),
                lambda: rl.compile(mod_or_func, backend="jax")(*ins)):
        ins = _fresh_args(args)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                outcomes.append(("value", run(), ins))
        except rl.RelayishError as err:
            outcomes.append(("error", err, ins))
    return outcomes


def assert_agree(outcomes, what, may_refuse=False, rtol=2e-5, atol=1e-5):
    (kind_i, interp, args_i), (kind_j, jax_out, args_j) = outcomes
    if kind_j == "error" and may_refuse and isinstance(jax_out, rl.CompileError):
        return
    assert kind_i == kind_j, (
        f"{what}: the interpreter {'raised ' + repr(interp) if kind_i == 'error' else 'returned'}"
        f" but the jax backend {'raised ' + repr(jax_out) if kind_j == 'error' else 'returned'}"
        f" {'' if kind_j == 'error' else repr(jax_out)}")
    if kind_i == "value":
        same_value(interp, jax_out, rtol=rtol, atol=atol)
        for a, b in zip(args_i, args_j):          # written references agree too
            same_value(a, b, path="argument", rtol=rtol, atol=atol)


def _signature_has_function(func):
    return any(_has_function(p.type_annotation) for p in func.params) or \
        _has_function(func.ret_type)


@fuzz_settings("differential_programs")
@given(programs(max_depth=4))
def test_random_programs_agree_on_both_backends(prog):
    mod, args = prog
    with bounded("a random program on both backends", seconds=COMPILE_SECONDS):
        outcomes = run_both(mod, args)
    assert_agree(outcomes, rl.astext(mod["main"]),
                 may_refuse=_signature_has_function(mod["main"]))


@fuzz_settings("differential_gradients")
@given(differentiable_programs(max_depth=4, offset_comparisons=True))
def test_random_gradients_agree_on_both_backends(prog):
    mod, args = prog
    with bounded("a random gradient on both backends", seconds=COMPILE_SECONDS):
        outcomes = run_both(rl.gradient(mod), args)
    assert_agree(outcomes, f"the gradient of {rl.astext(mod['main'])}", rtol=1e-6, atol=1e-8)


# ---- chains of ops on edge values ----------------------------------------------------------

UNARY = ["negative", "abs", "relu", "exp", "log", "sin", "cos", "tan", "tanh", "sigmoid", "sqrt",
         "logical_not", "zeros_like", "ones_like"]
BINARY = ["add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "less",
          "greater", "less_equal", "greater_equal", "equal", "not_equal", "logical_and",
          "logical_or"]
REDUCE = ["sum", "mean", "max", "min"]


TOLERANCE = {"float16": (2e-3, 1e-3), "float32": (2e-5, 1e-6)}    # rtol, atol; else exact-ish


@st.composite
def edge_chains(draw):
    """(fn (%x: T, %y: T) { a chain of 1 to 4 ops and casts over %x, %y }, vectors of edge
    values of T as arguments, (rtol, atol) of the least precise float dtype on the way).
    Steps that do not type-check are skipped while building."""
    dtype = draw(st.sampled_from(DTYPES))
    n = 4
    x, y = rl.var("x", shape=(n,), dtype=dtype), rl.var("y", shape=(n,), dtype=dtype)
    e, seen = x, {dtype}
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["unary", "binary", "cast", "reduce"]))
        if kind == "unary":
            candidate = getattr(rl, draw(st.sampled_from(UNARY)))(e)
        elif kind == "binary":
            other = draw(st.sampled_from([x, y]))
            pair = (e, other) if draw(st.booleans()) else (other, e)
            candidate = getattr(rl, draw(st.sampled_from(BINARY)))(*pair)
        elif kind == "cast":
            candidate = rl.cast(e, draw(st.sampled_from(DTYPES)))
        else:
            candidate = getattr(rl, draw(st.sampled_from(REDUCE)))(e)
        try:
            seen.add(rl.infer_type(rl.Function([x, y], candidate)).body.checked_type.dtype)
        except rl.RelayishError:
            continue
        e = candidate
    values = edge_values(dtype)
    args = [np.array([draw(st.sampled_from(values)) for _ in range(n)], dtype=dtype)
            for _ in range(2)]
    tol = next((TOLERANCE[d] for d in ("float16", "float32") if d in seen), (1e-12, 1e-12))
    return rl.Function([x, y], e), args, tol


@fuzz_settings("differential_edge_chains")
@given(edge_chains())
def test_op_chains_on_edge_values_agree_on_both_backends(case):
    func, args, (rtol, atol) = case
    with bounded("an op chain on both backends", seconds=COMPILE_SECONDS):
        outcomes = run_both(func, tuple(args))
    assert_agree(outcomes, f"{rl.astext(func)} on {[a.tolist() for a in args]}",
                 rtol=rtol, atol=atol)
