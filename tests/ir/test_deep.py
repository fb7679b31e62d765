"""Deep programs: a 100,000-long let-chain and a 20,000-deep nested expression.

AD output and generated programs are this deep; no pass may recurse along them in Python.
Each step is a separate test so a failure names the pass that overflowed. The default run
takes a tenth of each size (already far past Python's recursion limit); `-m slow` the full sizes.
"""
import numpy as np
import pytest

import relayish as rl
from relayish.ir.visitor import build_let_chain, let_chain

N_LETS = 100_000
N_NESTED = 20_000
SIZES = [pytest.param(10, id="tenth"), pytest.param(1, id="full", marks=pytest.mark.slow)]
F64 = rl.TensorType((), "float64")


def _long_let_chain(n_lets):
    """fn (%x: float64) { let %v1 = %x + 1; let %v2 = %v1 * 1; ...; %vN }: returns x + N/2."""
    x = rl.var("x", type=F64)
    bindings, prev = [], x
    one = rl.const(1.0, "float64")
    for i in range(n_lets):
        v = rl.Var(f"v{i}")
        bindings.append((v, prev + one if i % 2 == 0 else prev * one))
        prev = v
    return rl.Function([x], build_let_chain(bindings, prev), F64)


def _deep_nesting(n_nested):
    """fn (%x: float64) { %x * 1.0001 * 1.0001 * ... } nested n_nested deep (no lets)."""
    x = rl.var("x", type=F64)
    y = x
    factor = rl.const(1.0001, "float64")
    for _ in range(n_nested):
        y = y * factor
    return rl.Function([x], y, F64)


@pytest.fixture(scope="module", params=SIZES)
def n_lets(request):
    return N_LETS // request.param


@pytest.fixture(scope="module", params=SIZES)
def n_nested(request):
    return N_NESTED // request.param


@pytest.fixture(scope="module")
def chain(n_lets):
    return rl.Module.from_expr(_long_let_chain(n_lets))


@pytest.fixture(scope="module")
def nested(n_nested):
    return rl.Module.from_expr(_deep_nesting(n_nested))


@pytest.fixture(scope="module")
def chain_text(chain):
    return rl.astext(chain)


def test_let_chain_infer_type(chain):
    mod = rl.infer_type(chain)
    assert mod["main"].checked_type == rl.FuncType([F64], F64)


def test_let_chain_astext(chain_text, n_lets):
    assert chain_text.count("let ") == n_lets


def test_let_chain_parse_and_structural_equal(chain, chain_text, n_lets):
    parsed = rl.parse(chain_text)
    bindings, _ = let_chain(parsed["main"].body)
    assert len(bindings) == n_lets
    assert rl.structural_equal(parsed, chain)
    rl.assert_structural_equal(parsed, chain)


def test_let_chain_structural_inequality_found_at_the_end(chain, n_lets):
    other = _long_let_chain(n_lets)
    bindings, body = let_chain(other.body)
    v, _ = bindings[-1]
    bindings[-1] = (v, bindings[-2][0] - rl.const(1.0, "float64"))
    changed = rl.Module.from_expr(rl.Function(other.params, build_let_chain(bindings, body)))
    assert not rl.structural_equal(changed, chain)


def test_let_chain_evaluate(chain, n_lets):
    out = rl.evaluate(chain, np.float64(0.5))
    assert isinstance(out, np.ndarray) and out.dtype == np.float64
    assert float(out) == 0.5 + n_lets // 2


def test_nested_infer_type(nested):
    mod = rl.infer_type(nested)
    assert mod["main"].checked_type == rl.FuncType([F64], F64)


def test_nested_evaluate(nested, n_nested):
    out = rl.evaluate(nested, np.float64(2.0))
    assert np.isclose(float(out), 2.0 * 1.0001 ** n_nested, rtol=1e-9)


def test_nested_astext_and_parse(nested, n_nested):
    text = rl.astext(nested)
    assert text.count("1.0001") == n_nested
    rl.assert_structural_equal(rl.parse(text), nested)


def test_builder_made_chain_runs():
    x = rl.var("x", type=F64)
    sb = rl.ScopeBuilder()
    y = x
    for _ in range(N_LETS // 10):
        y = sb.let(("y", F64), y * rl.const(1.0, "float64"))
    sb.ret(y)
    f = rl.Function([x], sb.get())
    assert float(rl.evaluate(f, np.float64(3.0))) == 3.0
