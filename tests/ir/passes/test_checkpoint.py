"""Gradient checkpointing: the schedules (ir/passes/checkpoint.py) and rl.gradient(f, checkpoint=)
(ad/checkpoint.py): same gradients, the recompute count, order 2, the program's round trip."""
import functools
import tracemalloc

import numpy as np
import pytest

import relayish as rl
from relayish.errors import GradientError
from relayish.ir.passes.checkpoint import (min_advances, repetitions, schedule, step_chain)

F = "float64"
COUNT = []


@functools.lru_cache(None)
def counter():
    """An identity op counting its evaluations, registered when a test first needs it (not at
    import: tests/ops/test_ops_api.py parametrizes over the registry as it is at collection)."""
    op = rl.register_op("test_checkpoint_count", 1, type_rule=lambda ts, attrs: ts[0], override=True,
                        impl=lambda xp, x: (COUNT.append(1), x)[1],
                        doc="identity, counting its evaluations (tests/ir/passes)")
    rl.register_gradient("test_checkpoint_count")(lambda orig, g: [g])
    rl.register_tangent("test_checkpoint_count")(lambda orig, tangents: tangents[0])
    return op


def chain(n, counted=False, shape=(4,)):
    """n steps of u = tanh(u) * 0.5 + u (4 bindings each with the counting op), then sum(u * x)."""
    x = rl.var("x", shape=shape, dtype=F)
    sb = rl.ScopeBuilder()
    u = x
    for _ in range(n):
        v = rl.tanh(u) * rl.const(0.5, F) + u
        u = sb.let("u", rl.Call(counter(), [v]) if counted else v)
    sb.ret(rl.sum(u * x))
    return rl.Function([x], sb.get())


def same_gradient(f, spec, *args):
    want = rl.evaluate(rl.gradient(f), *args)
    g = rl.gradient(f, checkpoint=spec)
    got = rl.evaluate(g, *args)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    assert main_type(g) == rl.typeof(rl.gradient(f))
    return g


def main_type(mod):
    return rl.infer_type(mod)["main"].checked_type


# ---- schedules --------------------------------------------------------------------------------

@functools.lru_cache(None)
def fewest(m, s):
    """The dynamic program: fewest step evaluations in advances reversing m steps, s snapshots."""
    if m == 1:
        return 0
    if s == 1:
        return m - 1 + fewest(m - 1, 1)
    return min(mid + fewest(m - mid, s - 1) + fewest(mid, s) for mid in range(1, m))


def test_binomial_schedule_is_optimal_and_within_its_snapshots():
    for s in range(1, 7):
        for m in range(1, 60):
            plan = schedule(m, s)
            assert plan.advances == fewest(m, s) == min_advances(m, s), (m, s)
            assert plan.kept <= s
            assert sorted(plan.leaves) == list(range(m))


def test_repetition_number_bounds_the_recompute():
    # each step advanced at most t times: total advances <= t * m
    for m, s in [(10_000, 14), (10_000, 5), (1000, 10), (100, 2)]:
        t = repetitions(m, s)
        assert schedule(m, s).advances <= t * m
        assert min_advances(m, s) <= t * m
    assert repetitions(10_000, 14) == 5
    # keeping every state: one forward sweep
    plan = schedule(100)
    assert plan.advances == 99 and repetitions(100) == 1


def test_schedule_refuses_bad_sizes():
    with pytest.raises(rl.RelayishError, match="snapshots"):
        schedule(10, 0)
    with pytest.raises(rl.RelayishError, match="at least one step"):
        schedule(0)


def test_step_chain_cuts_every_k_bindings_where_the_state_is_tensors():
    f = rl.infer_type(chain(5, counted=True))     # 4 bindings a step, then one, then sum
    c = step_chain(f, 4)
    assert c.bindings == [4, 4, 4, 4, 4, 1]
    assert all(len(s.fields) == 2 for s in c.states[1:])        # (x, u)
    # a closure live across bindings: no cut while it is live
    x = rl.var("x", dtype=F)
    k = rl.var("k", type=rl.FuncType([rl.TensorType((), F)], rl.TensorType((), F)))
    y = rl.var("y", dtype=F)
    a = rl.var("a", dtype=F)
    body = rl.Let(a, rl.sin(x), rl.Let(k, rl.Function([y], y * x), rl.Call(k, [rl.cos(a)])))
    g = rl.infer_type(rl.Function([x], body))
    assert step_chain(g, 1).bindings == [1, 2]      # no cut while %k is live
    same_gradient(rl.Function([x], body), 1, np.float64(0.3))


# ---- same gradients ---------------------------------------------------------------------------

@pytest.mark.parametrize("spec", [1, 3, 4, "sqrt", "revolve", ("revolve", 2), ("revolve", 3, 4)])
def test_short_chain_same_gradient(spec):
    same_gradient(chain(10), spec, np.linspace(-1, 1, 4))


# revolve on 1,002 bindings recomputes most (2 s of CPU): under -m slow; revolve's schedules of
# several levels stay in the default run on the short chain (2 and 3 snapshots for 42 bindings)
@pytest.mark.parametrize("spec", ["sqrt", pytest.param(("revolve", 8), marks=pytest.mark.slow)])
def test_chain_of_1000_same_gradient(spec):
    same_gradient(chain(250), spec, np.linspace(-1, 1, 4))     # 1,002 bindings


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["sqrt", "revolve"])
def test_chain_of_10000_same_gradient(spec):
    same_gradient(chain(2500), spec, np.linspace(-1, 1, 4))    # 10,002 bindings


def test_several_parameters_ints_and_tuple_result():
    x = rl.var("x", shape=(3,), dtype=F)
    w = rl.var("w", type=rl.TupleType([rl.TensorType((3,), F), rl.TensorType((), F)]))
    n = rl.var("n", shape=(), dtype="int32")
    sb = rl.ScopeBuilder()
    a = sb.let("a", rl.tanh(x * w[0]) + w[1])
    b = sb.let("b", a * rl.cast(n, F))
    c = sb.let("c", rl.exp(b) * x)
    sb.ret(rl.Tuple([rl.sum(c * a), c]))
    f = rl.Function([x, w, n], sb.get())
    args = (np.array([0.1, -0.4, 0.7]), (np.array([1.0, 2.0, -1.0]), np.float64(0.3)),
            np.int32(2))
    for spec in (1, 2, "revolve"):
        want = rl.evaluate(rl.gradient(f), *args)
        got = rl.evaluate(rl.gradient(f, checkpoint=spec), *args)
        np.testing.assert_allclose(got[0][0], want[0][0])
        np.testing.assert_allclose(got[0][1], want[0][1])
        np.testing.assert_allclose(got[1][0], want[1][0])
        np.testing.assert_allclose(got[1][1][0], want[1][1][0])
        np.testing.assert_allclose(got[1][1][1], want[1][1][1])
        assert int(got[1][2]) == int(want[1][2]) == 0


# ---- recompute count --------------------------------------------------------------------------

def evaluations(g, *args):
    COUNT.clear()
    rl.evaluate(g, *args)
    return len(COUNT)


def test_recompute_count():
    n, x = 40, np.linspace(-1, 1, 4)
    f = chain(n, counted=True)
    assert evaluations(rl.gradient(f), x) == n
    # steps of one iteration (4 bindings), every state kept: one sweep and each leaf's vjp
    assert evaluations(rl.gradient(f, checkpoint=4), x) == 2 * n
    # the binomial schedule over the n + 1 steps (the last is the final sum): its advances,
    # then each leaf once
    for s in (1, 2, 3, 5):
        plan = schedule(n + 1, s)
        assert evaluations(rl.gradient(f, checkpoint=("revolve", s, 4)), x) == plan.advances + n
        assert plan.advances + n <= (repetitions(n + 1, s) + 1) * n
    # one binding a step, the default number of snapshots
    m = len(step_chain(rl.infer_type(f), 1).steps)
    t = repetitions(m, int(np.ceil(np.log2(m))) + 1)
    assert evaluations(rl.gradient(f, checkpoint="revolve"), x) <= (t + 1) * n


# ---- live memory ------------------------------------------------------------------------------

def peak_bytes(prog, *args):
    """tracemalloc's peak over one run of the compiled @main (compiled by a first run; called
    directly, so that only the program's own allocations count)."""
    from relayish.backend.interp.api import _compile_module
    run = _compile_module(prog if isinstance(prog, rl.Module) else rl.Module.from_expr(prog))
    run(*args)
    tracemalloc.start()
    try:
        run(*args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_live_memory_grows_as_the_schedule_says():
    x = np.full(1024, 0.1)                  # states of 8 KiB: they, not the program, count
    peaks = {}
    for n in (64, 256):
        f = chain(n, shape=(1024,))
        for spec in (None, "sqrt", "revolve"):
            g = rl.gradient(f, checkpoint=spec) if spec else rl.gradient(f)
            peaks[spec, n] = peak_bytes(g, x)
    assert peaks[None, 256] > 3.5 * peaks[None, 64]                # linear
    assert 1.5 < peaks["sqrt", 256] / peaks["sqrt", 64] < 2.5       # sqrt(4) = 2
    assert peaks["revolve", 256] < 1.5 * peaks["revolve", 64]      # log
    assert peaks["sqrt", 256] < 0.15 * peaks[None, 256]
    assert peaks["revolve", 256] < 0.05 * peaks[None, 256]


# ---- the output is an ordinary program --------------------------------------------------------

def test_round_trip_and_type():
    g = rl.gradient(chain(6), checkpoint=("revolve", 2))
    text = rl.astext(g)
    rl.assert_structural_equal(rl.parse(text), g)
    assert main_type(g) == rl.typeof(rl.gradient(chain(6)))


def test_second_order():
    f = chain(6, shape=())
    x = rl.var("x", dtype=F)
    for spec in (2, "revolve"):
        g = rl.gradient(f, checkpoint=spec)
        g = rename_main(g, "g")
        g["main"] = rl.Function([x], rl.TupleGetItem(rl.TupleGetItem(
            rl.Call(rl.GlobalVar("g"), [x]), 1), 0))
        got = rl.evaluate(rl.grad(g), np.float64(0.4))
        want = rl.evaluate(rl.grad(rl.grad(f)), np.float64(0.4))
        np.testing.assert_allclose(got, want, rtol=1e-12)


def rename_main(mod, name):
    """A copy of mod with its @main renamed @name."""
    out = rl.Module()
    for data in mod.type_definitions.values():
        out.add_type(data)
    for gv, func in mod.functions.items():
        out[rl.GlobalVar(name) if gv.name_hint == "main" else gv] = func
    return out


def test_jax_backend_agrees():
    g = rl.gradient(chain(8), checkpoint=("revolve", 2))
    x = np.linspace(-1, 1, 4)
    want = rl.evaluate(g, x)
    got = rl.compile(g, backend="jax")(x)
    np.testing.assert_allclose(np.asarray(got[1][0]), want[1][0], rtol=1e-10)


# ---- errors -----------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", [0, -2, True, "binomial", ("revolve", 0), ("revolve",), 2.5])
def test_bad_checkpoint_value(spec):
    with pytest.raises(GradientError, match="checkpoint="):
        rl.gradient(chain(2), checkpoint=spec)


def test_adt_parameters_and_globals_are_refused():
    mod = rl.Module()
    p = rl.Prelude(mod)
    lt = rl.TypeCall(p.List, [rl.TensorType((), F)])
    xs = rl.var("xs", type=lt)
    y = rl.var("y", dtype=F)
    with pytest.raises(GradientError, match="%xs"):
        rl.gradient(rl.Function([xs, y], rl.sin(y)), checkpoint=2)
    with pytest.raises(GradientError, match="not a Function with mod="):
        rl.gradient(chain(2), mod=mod, checkpoint=2)


# ---- loops over a list or a Nat (ad/checkpoint_loop.py) ---------------------------------------

def list_loop(d=3, counted=False, result=None):
    """@main(%xs, %s, %w): s <- tanh(s * w + h) for each h of xs, then sum(s * s)."""
    mod = rl.Module()
    p = rl.Prelude(mod)
    T = rl.TensorType((d,), F)
    LT = rl.TypeCall(p.List, [T])
    xs, s, w = rl.var("xs", type=LT), rl.var("s", type=T), rl.var("w", type=T)
    h, t = rl.var("h", type=T), rl.var("t", type=LT)
    main = rl.GlobalVar("main")
    new = rl.tanh(s * w + h)
    if counted:
        new = rl.Call(counter(), [new])
    body = rl.Match(xs, [
        rl.Clause(rl.PatternConstructor(p.Cons, [rl.PatternVar(h), rl.PatternVar(t)]),
                  rl.Call(main, [t, new, w])),
        rl.Clause(rl.PatternConstructor(p.Nil, []), result or rl.sum(s * s))])
    mod[main] = rl.Function([xs, s, w], body)
    return mod


def loop_args(mod, n, d=3, seed=0):
    rng = np.random.default_rng(seed)
    return (rl.list_value(mod, [rng.normal(size=d) for _ in range(n)]), rng.normal(size=d),
            rng.normal(size=d))


def same_loop_gradient(mod, k, args):
    plain, ck = rl.gradient(mod), rl.gradient(mod, checkpoint=k)
    want, got = rl.evaluate(plain, *args), rl.evaluate(ck, *args)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    gl, wl = rl.from_list_value(got[1][0]), rl.from_list_value(want[1][0])
    assert len(gl) == len(wl)
    for a, b in zip(gl, wl):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    for a, b in zip(got[1][1:], want[1][1:]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    assert rl.typeof(ck["main"]) == rl.typeof(plain["main"])
    return ck


@pytest.mark.parametrize("n, k", [(0, 3), (1, 3), (7, 3), (9, 3), (7, 1), (7, 50), (0, "sqrt"),
                                  (1, "sqrt"), (10, "sqrt")])
def test_list_loop_same_gradient(n, k):
    mod = list_loop()
    same_loop_gradient(mod, k, loop_args(mod, n))


def test_list_loop_of_1000_same_gradient():
    mod = list_loop()
    same_loop_gradient(mod, 32, loop_args(mod, 1000))


def test_nat_loop_same_gradient():
    mod = rl.Module()
    p = rl.Prelude(mod)
    NT = rl.TypeCall(p.Nat, [])
    n, m = rl.var("n", type=NT), rl.var("m", type=NT)
    s, w = rl.var("s", dtype=F), rl.var("w", dtype=F)
    main = rl.GlobalVar("main")
    a = rl.var("a", dtype=F)
    step = rl.Let(a, rl.sin(s * w), rl.Call(main, [m, a + s, w]))     # a let before the call
    mod[main] = rl.Function([n, s, w], rl.Match(n, [
        rl.Clause(rl.PatternConstructor(p.S, [rl.PatternVar(m)]), step),
        rl.Clause(rl.PatternConstructor(p.Z, []), s * w)]))
    plain, ck = rl.gradient(mod), rl.gradient(mod, checkpoint=2)
    for k in (0, 3, 8):
        want = rl.evaluate(plain, _nat(p, k), 0.3, 1.2)
        got = rl.evaluate(ck, _nat(p, k), 0.3, 1.2)
        np.testing.assert_allclose(got[0], want[0])
        np.testing.assert_allclose(got[1][1], want[1][1])
        np.testing.assert_allclose(got[1][2], want[1][2])
    assert rl.typeof(ck["main"]) == rl.typeof(plain["main"])


def _nat(p, k):
    v = rl.ConstructorValue(p.Z, [])
    for _ in range(k):
        v = rl.ConstructorValue(p.S, [v])
    return v


def test_list_loop_recompute_count_and_round_trip():
    mod = list_loop(counted=True)
    args = loop_args(mod, 10)
    assert evaluations(rl.gradient(mod), *args) == 10
    ck = rl.gradient(mod, checkpoint=3)
    assert evaluations(ck, *args) == 20          # once plain, once in its chunk's vjp
    assert evaluations(rl.gradient(mod, checkpoint="sqrt"), *args) == 20
    rl.assert_structural_equal(rl.parse(rl.astext(ck)), ck)


def test_list_loop_gradient_differentiates_again():
    def d_dw(grad_mod):
        """@main(xs, s, w) = sum(dw), the gradient program's main renamed @g."""
        out = rename_main(grad_mod, "g")
        xs, s, w = [rl.var(q.name_hint, type=q.checked_type)
                    for q in rl.infer_type(grad_mod)["main"].params]
        out["main"] = rl.Function([xs, s, w], rl.sum(rl.TupleGetItem(rl.TupleGetItem(
            rl.Call(rl.GlobalVar("g"), [xs, s, w]), 1), 2)))
        return out
    ck = d_dw(rl.gradient(list_loop(), checkpoint=2))
    plain = d_dw(rl.gradient(list_loop()))
    args = loop_args(ck, 5)
    got = rl.evaluate(rl.gradient(ck), *args)
    want = rl.evaluate(rl.gradient(plain), *args)
    np.testing.assert_allclose(got[0], want[0])
    np.testing.assert_allclose(got[1][1], want[1][1])
    np.testing.assert_allclose(got[1][2], want[1][2])


def test_loops_refused():
    with pytest.raises(GradientError, match="positive int k"):
        rl.gradient(list_loop(), checkpoint=("revolve", 0))
    # not a tail call (the recursion's result is used): a foldr, checkpointed since
    # (test_checkpoint_foldr.py); the same gradient here
    mod = rl.Module()
    p = rl.Prelude(mod)
    T = rl.TensorType((), F)
    LT = rl.TypeCall(p.List, [T])
    xs, h, t = rl.var("xs", type=LT), rl.var("h", type=T), rl.var("t", type=LT)
    main = rl.GlobalVar("main")
    mod[main] = rl.Function([xs], rl.Match(xs, [
        rl.Clause(rl.PatternConstructor(p.Cons, [rl.PatternVar(h), rl.PatternVar(t)]),
                  h * rl.Call(main, [t])),
        rl.Clause(rl.PatternConstructor(p.Nil, []), rl.const(1.0, F))]))
    args = (rl.list_value(mod, [np.float64(v) for v in (0.5, -1.5, 2.0)]),)
    np.testing.assert_allclose(rl.evaluate(rl.gradient(mod, checkpoint=2), *args)[0], -1.5)
    # not a recursion at all
    y = rl.var("y", dtype=F)
    plain = rl.Module()
    plain["main"] = rl.Function([y], rl.sin(y))
    with pytest.raises(GradientError, match="not a match"):
        rl.gradient(plain, checkpoint=2)


# ---- loops with the binomial schedule (checkpoint="revolve" on a tail recursion) --------------

@pytest.mark.parametrize("n, spec", [(0, "revolve"), (1, "revolve"), (2, ("revolve", 1)),
                                     (7, ("revolve", 2)), (30, "revolve"), (30, ("revolve", 3))])
def test_list_loop_revolve_same_gradient(n, spec):
    mod = list_loop()
    same_loop_gradient(mod, spec, loop_args(mod, n))


def test_list_loop_revolve_recompute_count_and_split():
    """One sweep for the result's seed, the schedule's advances, each leaf's vjp: exactly
    2 n + schedule(n, s).advances; @ck_mid (int32, at run time) is the schedule's split."""
    from relayish.ir.passes.checkpoint import _split
    mod = list_loop(counted=True)
    n = 33
    args = loop_args(mod, n)
    for s in (1, 2, 3, None):
        spec = "revolve" if s is None else ("revolve", s)
        snaps = s or int(np.ceil(np.log2(n))) + 1
        assert evaluations(rl.gradient(mod, checkpoint=spec), *args) == \
            2 * n + schedule(n, snaps).advances
    probe = rename_main(rl.gradient(mod, checkpoint="revolve"), "unused")
    m, s = rl.var("m", dtype="int32"), rl.var("s", dtype="int32")
    probe["main"] = rl.Function([m, s], rl.Call(rl.GlobalVar("ck_mid"), [m, s]))
    for mm in range(2, 70):
        for ss in range(1, 7):
            assert int(rl.evaluate(probe, np.int32(mm), np.int32(ss))) == _split(mm, ss)


def test_list_loop_revolve_memory_grows_as_log():
    peaks = {}
    for n in (64, 256):
        mod = list_loop(d=1024)
        args = loop_args(mod, n, d=1024)
        floor = n * 1024 * 8                       # the element gradients, a list of n vectors
        for spec in (None, "revolve"):
            g = rl.gradient(mod, checkpoint=spec) if spec else rl.gradient(mod)
            peaks[spec, n] = peak_bytes(g, *args) - floor
    assert peaks[None, 256] > 3.5 * peaks[None, 64]
    assert peaks["revolve", 256] < 1.6 * peaks["revolve", 64]
    assert peaks["revolve", 256] < 0.05 * peaks[None, 256]


def test_list_loop_revolve_vjp_and_grad():
    from tests.ir.passes.test_checkpoint_api import close
    mod = list_loop()
    args = loop_args(mod, 12)
    for transform, kw in ((rl.grad, {"argnums": (2, 1)}), (rl.value_and_grad, {"argnums": 0})):
        close(rl.evaluate(transform(mod, checkpoint=("revolve", 2), **kw), *args),
              rl.evaluate(transform(mod, **kw), *args))
    (gv, gb), (wv, wb) = (rl.evaluate(rl.vjp(mod, checkpoint="revolve"), *args),
                          rl.evaluate(rl.vjp(mod), *args))
    close(gv, wv)
    for ct in (np.float64(1.0), np.float64(-2.5)):
        close(gb(ct), wb(ct))
    with pytest.raises(GradientError, match="foldr"):
        from tests.ir.passes.test_checkpoint_foldr import foldr
        rl.gradient(foldr(), checkpoint="revolve")
    with pytest.raises(GradientError, match="positive int k"):
        rl.gradient(mod, checkpoint=("revolve", 2, 3))


def test_list_loop_parameters_in_any_order():
    """@main(%w, %xs, %s): the chunk vjp's cotangents come in @main's parameter order."""
    mod = rl.Module()
    p = rl.Prelude(mod)
    T = rl.TensorType((3,), F)
    LT = rl.TypeCall(p.List, [T])
    xs, s, w = rl.var("xs", type=LT), rl.var("s", type=T), rl.var("w", type=T)
    h, t = rl.var("h", type=T), rl.var("t", type=LT)
    main = rl.GlobalVar("main")
    mod[main] = rl.Function([w, xs, s], rl.Match(xs, [
        rl.Clause(rl.PatternConstructor(p.Cons, [rl.PatternVar(h), rl.PatternVar(t)]),
                  rl.Call(main, [w, t, rl.tanh(s * w + h)])),
        rl.Clause(rl.PatternConstructor(p.Nil, []), rl.sum(s * s))]))
    rng = np.random.default_rng(5)
    args = (rng.normal(size=3), rl.list_value(mod, [rng.normal(size=3) for _ in range(9)]),
            rng.normal(size=3))
    from tests.ir.passes.test_checkpoint_api import close
    want = rl.evaluate(rl.gradient(mod), *args)
    for spec in (2, "sqrt", ("revolve", 2)):
        close(rl.evaluate(rl.gradient(mod, checkpoint=spec), *args), want)
