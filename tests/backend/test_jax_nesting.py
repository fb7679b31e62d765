"""The jax backend on programs nested deep in their text (issue 10 item 12): nested closures
(free variables from relayish.ir.analysis, one walk) and nested ifs on traced conditions, which
are not recursion: past MAX_SWITCH_NESTING the joins are selects, not nested XLA conditionals
(XLA's compiler crashes on some 300 of those), and only the trace limits bound the depth. Real
recursion whose depth depends on a traced value is still a CompileError that says so.
Values are checked at depth against the interpreter; nothing here is timed
(benchmarks/scaling.py measures the cost)."""
import numpy as np
import pytest

import relayish as rl
from relayish.backend.jax.limits import MAX_SWITCH_NESTING
from strategies import deep

F64 = rl.TensorType((), "float64")


def c64(v):
    return rl.const(float(v), "float64")


def nested_fn(n):
    """(fn (%y1) { (fn (%y2) { ... %yn })(%y1 + 1) })(%x + 1): x + n."""
    x = rl.var("x", type=F64)
    ys = [x] + [rl.var(f"y{k}", type=F64) for k in range(1, n + 1)]
    e = ys[n]
    for k in range(n, 0, -1):
        e = rl.Call(rl.Function([ys[k]], e), [ys[k - 1] + c64(1)])
    return rl.Function([x], e, F64)


def nested_if(n):
    """if (%x < n) { (if (%x < n-1) { ... } else { %x }) + 1 } else { %x }, n levels deep."""
    x = rl.var("x", type=F64)
    e = x
    for k in range(n):
        e = rl.If(x < c64(k + 1), e + c64(1), x)
    return rl.Function([x], e, F64)


@pytest.mark.parametrize("n", deep(1200, 3000))
def test_nested_closures_compile(n):
    run = rl.compile(nested_fn(n))
    assert float(run(np.float64(0.5))) == n + 0.5


def test_closures_capturing_from_every_level():
    # fn (%x) { (fn (%a1) { (fn (%a2) { ... %x * %a1 * ... * %an }) ... }) }: each literal
    # captures all the parameters above it
    n = 40
    x = rl.var("x", type=F64)
    ps = [rl.var(f"a{k}", type=F64) for k in range(n)]
    e = x
    for p in ps:
        e = e + p
    for k in range(n - 1, -1, -1):
        e = rl.Call(rl.Function([ps[k]], e), [x + c64(k)])
    f = rl.Function([x], e, F64)
    arg = np.float64(0.25)
    assert float(rl.compile(f)(arg)) == pytest.approx(float(rl.evaluate(f, arg)))


@pytest.mark.parametrize("n", [100, pytest.param(500, marks=pytest.mark.slow)])
def test_nested_ifs_on_traced_conditions_compile(n):
    f = nested_if(n)
    run = rl.compile(f)
    for x in [0.5, n / 2 + 0.25, n - 0.5, n + 3.0]:       # every depth of the nest is reachable
        arg = np.float64(x)
        assert float(run(arg)) == float(rl.evaluate(f, arg)), x
    assert run.trace_count == 1


def _switch_nesting(jaxpr):
    """How deep lax.switch/cond equations nest in a jaxpr (a loop over a work list)."""
    deepest, work = 0, [(jaxpr, 0)]
    while work:
        j, depth = work.pop()
        deepest = max(deepest, depth)
        for eqn in j.eqns:
            inner = depth + (eqn.primitive.name == "cond")
            for param in eqn.params.values():
                for sub in param if isinstance(param, (tuple, list)) else (param,):
                    sub = getattr(sub, "jaxpr", sub)
                    if hasattr(sub, "eqns"):
                        work.append((sub, inner))
    return deepest


def test_deep_nests_are_selects_past_the_switch_nesting_bound():
    import jax
    run = rl.compile(nested_if(200))
    fn = run.jax_function()
    with jax.enable_x64(True):
        closed = jax.make_jaxpr(fn)(np.float64(1.5))
    assert _switch_nesting(closed.jaxpr) == MAX_SWITCH_NESTING


def test_nested_ifs_writing_references_past_the_bound():
    # let %r = ref(0); if (%x < 1) { %r := !%r + 1; if (%x < 2) {...} } ...; !%r, 60 levels:
    # the references written inside the inlined (selected) joins are joined like any other
    n = 60
    x = rl.var("x", type=F64)
    r = rl.Var("r")
    e = rl.Tuple([])
    for k in range(n):
        write = rl.RefWrite(r, rl.RefRead(r) + c64(k + 1))
        e = rl.If(x < c64(n - k), rl.Let(rl.Var(f"u{k}"), write, e), rl.Tuple([]))
    f = rl.Function([x], rl.Let(r, rl.RefCreate(c64(0)),
                                rl.Let(rl.Var("done"), e, rl.RefRead(r))), F64)
    run = rl.compile(f)
    for value in [0.5, 10.5, 30.5, 59.5, 70.0]:
        arg = np.float64(value)
        assert float(run(arg)) == float(rl.evaluate(f, arg)), value


@pytest.mark.slow      # traces 512 nested joins before it is caught
def test_nonterminating_recursion_under_a_traced_condition_is_still_named():
    # @countdown(x) = if x > 0 { countdown(x - 1) + 1 } else { 0 }, behind a traced if: each
    # activation nests 2 joins, so the joins nest past MAX_SWITCH_NESTING long before the
    # recursion is caught (MAX_ACTIVATIONS_UNDER_JOIN activations)
    mod = rl.Module()
    down = rl.GlobalVar("countdown")
    x = rl.var("x", type=F64)
    body = rl.If(x > c64(0), down(x - c64(1)) + c64(1), c64(0))
    for k in range(1):
        body = rl.If(x > c64(-k - 1), body, c64(k))
    mod[down] = rl.Function([x], body, F64)
    y = rl.var("y", type=F64)
    mod["main"] = rl.Function([y], down(y))
    assert float(rl.evaluate(mod, np.float64(3.0))) == 3.0
    with pytest.raises(rl.CompileError) as info:
        rl.compile(mod)(np.float64(3.0))
    message = str(info.value)
    assert "recursion in @countdown does not terminate" in message
    assert "rl.evaluate" in message


def test_a_nest_deeper_than_the_trace_limits_is_refused_with_the_depth_message():
    # the bound on nested ifs is the one every program has: max_depth of the traced program
    with pytest.raises(rl.CompileError, match="chain of .* dependent operations.*limit 300"):
        rl.compile(nested_if(200), limits={"max_depth": 300})(np.float64(0.5))
