"""The interpreter and the jax backend compute the same thing on edge values of every dtype:
integer division (by zero, int-min / -1), integer power (negative exponents, overflow), casts
(NaN, infinities and out-of-range floats to integers saturate, NaN -> 0), comparisons,
maximum/minimum, negative/abs of int-min. The semantics are documented in notes/ops.md.

Each case runs one op on both backends through the real pipeline (rl.evaluate and
rl.compile(backend="jax")) on arguments drawn from the dtype's edge values."""
import functools
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relayish as rl

INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOATS = ("float16", "float32", "float64")
NUMERIC = INTS + FLOATS
ALL = NUMERIC + ("bool",)
WIDTH = 6                     # arguments are vectors of this many edge values


_FLOAT_EDGES = (0.0, -1.0, 1.0, 2.0, 7.0, 0.5, -0.5, 1.5, -2.5, 1e10, -1e10, np.nan, np.inf,
                -np.inf, 127.0, 128.0, 255.0, 256.0, -129.0, 2.0 ** 31, -2.0 ** 31 - 1, 2.0 ** 32,
                2.0 ** 63, -2.0 ** 63, 2.0 ** 64, 65504.0, 1e300)


def edge_values(dtype):
    """0, -1, min, max, NaN, +-inf, 1e10, +-0.5 ... as values of `dtype`."""
    if dtype == "bool":
        return [np.bool_(True), np.bool_(False)]
    if dtype in INTS:
        info = np.iinfo(dtype)
        raw = [0, 1, 2, 7, -1, -7, info.min, info.max, info.min + 1, info.max - 1]
        return [np.asarray(v).astype(dtype) for v in raw if info.min <= v <= info.max]
    with np.errstate(over="ignore"):
        values = [np.asarray(v).astype(dtype) for v in _FLOAT_EDGES]
    return values + [np.finfo(dtype).max, np.finfo(dtype).min, np.finfo(dtype).tiny]


COMPARE = ("less", "greater", "less_equal", "greater_equal", "equal", "not_equal")
BINARY = ("divide", "power", "maximum", "minimum", "add", "subtract", "multiply") + COMPARE
UNARY = ("negative", "abs", "relu", "sign")


def ops_for(dtype):
    """(name, build) for every op case on `dtype`: build(x, y) -> expression."""
    binary = COMPARE if dtype == "bool" else BINARY
    unary = () if dtype == "bool" else UNARY
    cases = [(op, functools.partial(lambda op, x, y: getattr(rl, op)(x, y), op)) for op in binary]
    cases += [(op, functools.partial(lambda op, x, y: getattr(rl, op)(x), op)) for op in unary]
    cases += [(f"cast to {d}", functools.partial(lambda d, x, y: rl.cast(x, d), d)) for d in ALL]
    return cases


@functools.lru_cache(maxsize=None)
def program(dtype):
    """fn(%x, %y) { (op1(%x, %y), op2(%x), cast(%x, ...), ...) } on vectors of `dtype` (one
    program per dtype keeps the number of XLA compilations small), and its compiled form."""
    x = rl.var("x", shape=(WIDTH,), dtype=dtype)
    y = rl.var("y", shape=(WIDTH,), dtype=dtype)
    func = rl.Function([x, y], rl.Tuple([build(x, y) for _, build in ops_for(dtype)]))
    return func, rl.compile(func, backend="jax")


def run_both(dtype, x, y):
    """Every op on `dtype` applied to x, y on both backends; the results, by op name."""
    func, compiled = program(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # float arithmetic may warn (0/0, overflow)
        expected = rl.evaluate(func, x, y)
    got = compiled(x, y)
    results = {}
    for (op, _), e, g in zip(ops_for(dtype), expected, got):
        e, g = np.asarray(e), np.asarray(g)
        assert g.dtype == e.dtype, (op, dtype, g.dtype, e.dtype)
        where = f"{op} on {dtype} {x.tolist()}, {y.tolist()}"
        if e.dtype.kind == "f":
            # XLA on CPU flushes float32/float64 subnormal results to zero (notes/ops.md)
            tiny = np.finfo(e.dtype).tiny
            e, g = (np.where(np.abs(v) < tiny, np.zeros_like(v), v) for v in (e, g))
        if op == "power" and dtype in FLOATS:
            # float pow is a libm/XLA approximation: within a few ulp, special values exact
            np.testing.assert_allclose(g, e, rtol=4 * np.finfo(dtype).eps, err_msg=where)
        else:
            assert np.array_equal(g, e, equal_nan=e.dtype.kind == "f"), \
                f"{where}: interpreter {e.tolist()}, jax {g.tolist()}"
        results[op] = e
    return results


def vectors(dtype):
    pool = edge_values(dtype)
    vec = st.lists(st.sampled_from(range(len(pool))), min_size=WIDTH, max_size=WIDTH)
    return st.tuples(vec, vec).map(
        lambda picks: [np.stack([pool[i] for i in p]).astype(dtype) for p in picks])


@settings(max_examples=20, deadline=None, derandomize=True)
@given(st.sampled_from(ALL).flatmap(lambda d: st.tuples(st.just(d), vectors(d))))
def test_backends_agree_on_edge_values(case):
    dtype, (x, y) = case
    run_both(dtype, x, y)


def chunks(values, dtype):
    """`values` cut into argument vectors of WIDTH (the last one padded with the first value)."""
    values = list(values)
    for i in range(0, len(values), WIDTH):
        part = values[i:i + WIDTH]
        yield np.stack(part + [values[0]] * (WIDTH - len(part))).astype(dtype)


# each dtype compiles every op for jax: the default run sweeps one dtype per family (the
# narrowest signed, the widest unsigned, the narrowest float, bool), -m slow every dtype
SWEPT = ("int8", "uint64", "float16", "bool")


@pytest.mark.parametrize("dtype", [d if d in SWEPT else pytest.param(d, marks=pytest.mark.slow)
                                   for d in ALL])
def test_backends_agree_on_every_pair_of_edge_values(dtype):
    # hypothesis samples; this sweeps every pair of edge values of every dtype once
    pool = edge_values(dtype)
    pairs = [(a, b) for a in pool for b in pool]
    for x, y in zip(chunks([a for a, _ in pairs], dtype), chunks([b for _, b in pairs], dtype)):
        run_both(dtype, x, y)


# ---- the chosen semantics, spelled out (each failed before: the backends disagreed) -----------

def vec(values, dtype):
    return np.asarray((list(values) * WIDTH)[:WIDTH], dtype=dtype)


def one(op, dtype, x, y=(0,)):
    return run_both(dtype, vec(x, dtype), vec(y, dtype))[op].tolist()


def test_integer_division_by_zero_is_zero():
    assert one("divide", "int32", [7, -7, 0], [0]) == [0] * WIDTH
    assert one("divide", "uint8", [7], [0]) == [0] * WIDTH


def test_integer_division_floors_and_wraps():
    lo = np.iinfo("int32").min
    assert one("divide", "int32", [7, -7, lo], [2, 2, -1])[:3] == [3, -4, lo]


def test_float_to_int_casts_saturate_and_send_nan_to_zero():
    x = [np.nan, 1e10, -1e10, np.inf, -np.inf, -0.5]
    assert one("cast to int32", "float64", x) == [0, 2 ** 31 - 1, -2 ** 31, 2 ** 31 - 1,
                                                  -2 ** 31, 0]
    assert one("cast to uint8", "float32", [-1.0, 300.0, 255.9, np.nan])[:4] == [0, 255, 255, 0]
    assert one("cast to int64", "float64", [2.0 ** 63, -2.0 ** 64])[:2] == [2 ** 63 - 1, -2 ** 63]


def test_integer_casts_wrap():
    assert one("cast to uint8", "int32", [-1, 300, 2 ** 31 - 1])[:3] == [255, 44, 255]


def test_integer_power_wraps_and_negative_exponents_truncate():
    assert one("power", "int32", [2, 1, -1, -1, 0, 3], [-1, -5, -1, -2, -1, 2 ** 31 - 1]) == \
        [0, 1, -1, 1, 0, pow(3, 2 ** 31 - 1, 2 ** 32) - 2 ** 32]


def test_negative_and_abs_of_int_min_wrap():
    lo = np.iinfo("int8").min
    assert one("negative", "int8", [lo]) == one("abs", "int8", [lo]) == [lo] * WIDTH


def test_constant_folding_follows_the_same_rules():
    # the jax backend runs ops on trace-time constants with numpy: same function, same answer
    x = rl.var("x", shape=(), dtype="float32")
    seven, zero = rl.const(7, dtype="int32"), rl.const(0, dtype="int32")
    body = rl.Tuple([seven / zero, rl.cast(rl.const(np.float32(np.nan)), "int32"), x])
    func = rl.Function([x], body)
    a = rl.evaluate(func, np.float32(1))
    b = rl.compile(func, backend="jax")(np.float32(1))
    assert [int(a[0]), int(a[1])] == [int(b[0]), int(b[1])] == [0, 0]
