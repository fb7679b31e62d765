"""Checkpointing a recursion over a list that is not a tail call (ad/checkpoint_foldr.py):
`@main(%xs, %w..) = match %xs { Cons(h, t) => g(h, @main(t, %w..)), Nil => init(%w..) }`
through rl.gradient, rl.grad, rl.value_and_grad and rl.vjp with checkpoint=k, against the plain
transforms; each g runs twice; the program's round trip; memory growth; refusals."""
import numpy as np
import pytest

import relayish as rl
from relayish.errors import GradientError
from tests.ir.passes.test_checkpoint import counter, evaluations, peak_bytes
from tests.ir.passes.test_checkpoint_api import close

F = "float64"


def foldr(d=3, counted=False, tuple_result=False, tuple_param=False, scalar=False):
    """@main(xs, w[, q]): r <- tanh(@main(t) * w + sin(h)) from r = w * 0.5 at the end.
    tuple_result: R = (r, sum of h); tuple_param: a third parameter q, q.0 * q.1 added to r;
    scalar: r a scalar (sums of w and of sin(h) in their places)."""
    mod = rl.Module()
    p = rl.Prelude(mod)
    T = rl.TensorType((d,), F)
    LT = rl.TypeCall(p.List, [T])
    xs, w = rl.var("xs", type=LT), rl.var("w", type=T)
    q = rl.var("q", type=rl.TupleType([T, rl.TensorType((), F)]))
    h, t, a = rl.var("h", type=T), rl.var("t", type=LT), rl.var("a", type=T)
    main = rl.GlobalVar("main")
    params = [xs, w] + ([q] if tuple_param else [])
    rec = rl.Call(main, [t] + params[1:])
    r = rl.TupleGetItem(rec, 0) if tuple_result else rec
    new = rl.tanh(r * rl.sum(w) + rl.sum(a)) if scalar else rl.tanh(r * w + a)
    if tuple_param:
        new = new + (rl.sum(q[0]) if scalar else q[0]) * q[1]
    if counted:
        new = rl.Call(counter(), [new])
    if tuple_result:
        new = rl.Tuple([new, rl.TupleGetItem(rec, 1) + rl.sum(h)])
    init = (rl.sum(w) if scalar else w) * rl.const(0.5, F)
    if tuple_result:
        init = rl.Tuple([init, rl.const(0.0, F)])
    mod[main] = rl.Function(params, rl.Match(xs, [
        rl.Clause(rl.PatternConstructor(p.Cons, [rl.PatternVar(h), rl.PatternVar(t)]),
                  rl.Let(a, rl.sin(h), new)),
        rl.Clause(rl.PatternConstructor(p.Nil, []), init)]))
    return mod


def args_of(mod, n, d=3, seed=0, tuple_param=False):
    rng = np.random.default_rng(seed)
    out = (rl.list_value(mod, [rng.normal(size=d) for _ in range(n)]), rng.normal(size=d))
    return out + ((rng.normal(size=d), np.float64(0.7)),) if tuple_param else out


def same(mod, k, args, transform=rl.gradient, **kw):
    plain, ck = transform(mod, **kw), transform(mod, checkpoint=k, **kw)
    close(rl.evaluate(ck, *args), rl.evaluate(plain, *args))
    assert rl.infer_type(ck)["main"].checked_type == rl.infer_type(plain)["main"].checked_type
    return ck


@pytest.mark.parametrize("n, k", [(0, 3), (1, 3), (6, 3), (7, 3), (7, 1), (7, 50), (0, "sqrt"),
                                  (1, "sqrt"), (10, "sqrt")])
def test_foldr_same_gradient(n, k):
    mod = foldr()
    same(mod, k, args_of(mod, n))


def test_foldr_of_1000_same_gradient():
    mod = foldr()
    same(mod, 32, args_of(mod, 1000))


def test_foldr_tuple_result_and_tuple_parameter():
    mod = foldr(tuple_result=True, tuple_param=True)
    same(mod, 2, args_of(mod, 5, tuple_param=True))


def test_foldr_grad_value_and_grad_vjp():
    scalar = foldr(tuple_param=True, scalar=True)
    args = args_of(scalar, 8, tuple_param=True)
    for argnums in (1, (2, 0)):
        same(scalar, 3, args, rl.grad, argnums=argnums)
        same(scalar, 3, args, rl.value_and_grad, argnums=argnums)
    # vjp of a vector foldr: the backpropagator runs again with another cotangent
    mod = foldr(tuple_param=True)
    plain, ck = rl.vjp(mod), rl.vjp(mod, checkpoint=3)
    (gv_, gb), (wv, wb) = rl.evaluate(ck, *args), rl.evaluate(plain, *args)
    close(gv_, wv)
    for ct in (np.ones(3), np.array([0.3, -1.0, 2.0])):
        close(gb(ct), wb(ct))


def test_foldr_over_a_nat():
    mod = rl.Module()
    p = rl.Prelude(mod)
    NT = rl.TypeCall(p.Nat, [])
    n, m = rl.var("n", type=NT), rl.var("m", type=NT)
    w = rl.var("w", dtype=F)
    main = rl.GlobalVar("main")
    mod[main] = rl.Function([n, w], rl.Match(n, [
        rl.Clause(rl.PatternConstructor(p.S, [rl.PatternVar(m)]),
                  rl.sin(rl.Call(main, [m, w]) * w)),
        rl.Clause(rl.PatternConstructor(p.Z, []), w)]))
    plain, ck = rl.gradient(mod), rl.gradient(mod, checkpoint=2)
    for k in (0, 3, 8):
        nat = rl.ConstructorValue(p.Z, [])
        for _ in range(k):
            nat = rl.ConstructorValue(p.S, [nat])
        want, got = rl.evaluate(plain, nat, 0.8), rl.evaluate(ck, nat, 0.8)
        np.testing.assert_allclose(got[0], want[0])
        np.testing.assert_allclose(got[1][1], want[1][1])


def test_foldr_recompute_count_and_round_trip():
    mod = foldr(counted=True)
    args = args_of(mod, 10)
    assert evaluations(rl.gradient(mod), *args) == 10
    ck = rl.gradient(mod, checkpoint=3)
    assert evaluations(ck, *args) == 20          # once plain, once in its chunk's vjp
    assert evaluations(rl.gradient(mod, checkpoint="sqrt"), *args) == 20
    rl.assert_structural_equal(rl.parse(rl.astext(ck)), ck)


def test_foldr_live_memory_grows_as_sqrt():
    """States of 8 KiB: 64 -> 256 elements with k = sqrt(n) (the element gradients, the result
    floor, are a list of n vectors in both)."""
    peaks = {}
    for n in (64, 256):
        mod = foldr(d=1024)
        args = args_of(mod, n, d=1024)
        floor = n * 1024 * 8
        peaks[None, n] = peak_bytes(rl.gradient(mod), *args) - floor
        peaks["ck", n] = peak_bytes(rl.gradient(mod, checkpoint="sqrt"), *args) - floor
    assert peaks[None, 256] > 3.5 * peaks[None, 64]
    assert peaks["ck", 256] < 2.8 * peaks["ck", 64]
    assert peaks["ck", 256] < 0.3 * peaks[None, 256]


def test_foldr_refused():
    mod = rl.Module()
    p = rl.Prelude(mod)
    T = rl.TensorType((), F)
    LT = rl.TypeCall(p.List, [T])
    xs, w, h, t = (rl.var("xs", type=LT), rl.var("w", type=T), rl.var("h", type=T),
                   rl.var("t", type=LT))
    main = rl.GlobalVar("main")

    def module(cons_rhs, nil_rhs=None):
        m = rl.Module()
        for data in mod.type_definitions.values():
            m.add_type(data)
        m[main] = rl.Function([xs, w], rl.Match(xs, [
            rl.Clause(rl.PatternConstructor(p.Cons, [rl.PatternVar(h), rl.PatternVar(t)]),
                      cons_rhs),
            rl.Clause(rl.PatternConstructor(p.Nil, []), nil_rhs or w)]))
        return m
    with pytest.raises(GradientError, match="changes %w"):
        rl.gradient(module(h * rl.Call(main, [t, w * h])), checkpoint=2)
    with pytest.raises(GradientError, match="2 times"):
        rl.gradient(module(rl.Call(main, [t, w]) * rl.Call(main, [t, w])), checkpoint=2)
    y = rl.var("y", type=T)
    closure = rl.Function([y], rl.Call(main, [t, y]))
    with pytest.raises(GradientError, match="inside a closure"):
        rl.gradient(module(h * rl.Call(closure, [w])), checkpoint=2)
    with pytest.raises(GradientError, match="rest of the list"):
        rl.gradient(module(h * rl.Call(main, [xs, w])), checkpoint=2)
    for bad in ("binomial", 0, ("revolve", 2, 3)):
        with pytest.raises(GradientError, match="positive int k"):
            rl.gradient(module(h * rl.Call(main, [t, w])), checkpoint=bad)
    for bad in ("revolve", ("revolve", 2)):
        with pytest.raises(GradientError, match="foldr's steps run from the list's end"):
            rl.gradient(module(h * rl.Call(main, [t, w])), checkpoint=bad)
    # reading the rest of the list (its head here): a chunk's last cell would see Nil there
    h2, t2 = rl.var("h2", type=T), rl.var("t2", type=LT)
    head = rl.Match(t, [
        rl.Clause(rl.PatternConstructor(p.Cons, [rl.PatternVar(h2), rl.PatternVar(t2)]), h2),
        rl.Clause(rl.PatternConstructor(p.Nil, []), rl.const(1.0, F))])
    for rhs in (h * head + rl.Call(main, [t, w]) * w,         # a foldr
                rl.Call(main, [t, w * head])):                # a tail recursion
        with pytest.raises(GradientError, match="reads the rest of the list"):
            rl.gradient(module(rhs), checkpoint=2)


def test_sqrt_chunk_is_ceil_sqrt_of_the_length():
    ck = rl.gradient(foldr(), checkpoint="sqrt")
    probe = rl.Module()
    for data in ck.type_definitions.values():
        probe.add_type(data)
    for gv, f in ck.functions.items():
        if gv.name_hint != "main":
            probe[gv] = f
    xs = rl.var("xs", type=rl.infer_type(ck)["main"].params[0].checked_type)
    probe["main"] = rl.Function([xs], rl.Call(rl.GlobalVar("ck_sqrt_len"), [xs]))
    for n, k in [(0, 1), (1, 1), (2, 2), (4, 2), (5, 3), (99, 10), (100, 10), (101, 11)]:
        assert int(rl.evaluate(probe, args_of(probe, n, d=3)[0])) == k


def test_tail_loop_with_a_tuple_parameter():
    """The fixed parameters' gradients are summed field by field (a tuple has no `+`)."""
    mod = rl.Module()
    p = rl.Prelude(mod)
    T = rl.TensorType((3,), F)
    LT = rl.TypeCall(p.List, [T])
    xs, s = rl.var("xs", type=LT), rl.var("s", type=T)
    q = rl.var("q", type=rl.TupleType([T, rl.TensorType((), F)]))
    h, t = rl.var("h", type=T), rl.var("t", type=LT)
    main = rl.GlobalVar("main")
    mod[main] = rl.Function([xs, s, q], rl.Match(xs, [
        rl.Clause(rl.PatternConstructor(p.Cons, [rl.PatternVar(h), rl.PatternVar(t)]),
                  rl.Call(main, [t, rl.tanh(s * q[0] + h) * q[1], q])),
        rl.Clause(rl.PatternConstructor(p.Nil, []), rl.sum(s * s))]))
    rng = np.random.default_rng(3)
    args = (rl.list_value(mod, [rng.normal(size=3) for _ in range(7)]), rng.normal(size=3),
            (rng.normal(size=3), np.float64(0.8)))
    for k in (2, "sqrt"):
        same(mod, k, args)
