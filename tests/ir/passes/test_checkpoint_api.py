"""Checkpointing's entry points beyond rl.gradient (grad, value_and_grad, vjp with checkpoint=),
and the Module table's stamp that lets rl.evaluate find a checkpointed program's compiled code
in O(1) however many globals it has."""
import numpy as np
import pytest

import relayish as rl
from relayish.backend.interp import api as interp_api
from relayish.errors import GradientError
from relayish.ir.module import FunctionTable

F = "float64"


# ---- the module table's stamp -------------------------------------------------------------------

def one_function(name="y", k=1.0):
    y = rl.var(name, shape=(), dtype=F)
    return rl.Function([y], y * rl.const(k, F))


def test_every_change_to_a_module_table_gives_a_new_stamp():
    mod = rl.Module()
    assert isinstance(mod.functions, FunctionTable)
    seen = {mod.functions.stamp}
    gv = rl.GlobalVar("g")

    def changed():
        assert mod.functions.stamp not in seen
        seen.add(mod.functions.stamp)
    mod["main"] = one_function()
    changed()
    mod[gv] = one_function()
    changed()
    del mod.functions[mod.get_global_var("g")]
    changed()
    mod.functions.update({mod.get_global_var("main"): one_function(k=2.0)})
    changed()
    mod.functions.setdefault(mod.get_global_var("main"), one_function())
    changed()
    mod.functions.pop(mod.get_global_var("main"))
    changed()
    mod["main"] = one_function()
    mod.functions.clear()
    changed()
    assert rl.Module().functions.stamp != rl.Module().functions.stamp
    copy = mod.copy()
    assert copy.functions.stamp != mod.functions.stamp


def test_evaluate_recompiles_a_module_after_any_change():
    mod = rl.Module()
    mod["main"] = one_function(k=2.0)
    assert rl.evaluate(mod, 3.0) == 6.0
    main = interp_api._MODULE_CACHE[mod][1]
    assert rl.evaluate(mod, 4.0) == 8.0 and interp_api._MODULE_CACHE[mod][1] is main
    mod.functions[mod.get_global_var("main")] = one_function(k=3.0)   # the dict, not mod[..]
    assert rl.evaluate(mod, 4.0) == 12.0
    mod.functions.update({mod.get_global_var("main"): one_function(k=5.0)})
    assert rl.evaluate(mod, 1.0) == 5.0


def test_evaluate_hit_does_not_walk_the_globals():
    """A hit reads the stamp only: a table whose items() would fail is never iterated."""
    mod = rl.Module()
    mod["main"] = one_function(k=2.0)
    for i in range(2000):
        mod[f"g{i}"] = one_function()
    assert rl.evaluate(mod, 1.0) == 2.0

    class Untouchable(FunctionTable):
        def items(self):
            raise AssertionError("the cache walked the module's globals")
        values = keys = __iter__ = items
    table = Untouchable(mod.functions)
    table.stamp = mod.functions.stamp
    mod.functions = table
    assert rl.evaluate(mod, 4.0) == 8.0


# ---- grad, value_and_grad, vjp with checkpoint= ------------------------------------------------

def chain3(n):
    """n steps of u = tanh(u * w) * 0.5 + u over three parameters, then sum(u * x) * c."""
    x = rl.var("x", shape=(4,), dtype=F)
    w = rl.var("w", shape=(4,), dtype=F)
    c = rl.var("c", dtype=F)
    sb = rl.ScopeBuilder()
    u = x
    for _ in range(n):
        u = sb.let("u", rl.tanh(u * w) * rl.const(0.5, F) + u)
    sb.ret(rl.sum(u * x) * c)
    return rl.Function([x, w, c], sb.get())


ARGS3 = (np.linspace(-1, 1, 4), np.array([0.3, -0.2, 1.1, 0.5]), np.float64(1.7))
SPECS = [2, "sqrt", "revolve", ("revolve", 2, 3)]


def close(got, want):
    """Nested tuples of arrays (lists of a relayish List compared by their elements)."""
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            close(a, b)
    elif isinstance(want, rl.ConstructorValue):
        close(rl.from_list_value(got), rl.from_list_value(want))
    else:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("spec, argnums", list(zip(SPECS, [0, 2, (0, 1), (2, 0, 2)])))
def test_grad_and_value_and_grad_with_checkpoint(spec, argnums):
    f = chain3(12)
    for transform in (rl.grad, rl.value_and_grad):
        plain = transform(f, argnums=argnums)
        ck = transform(f, argnums=argnums, checkpoint=spec)
        assert isinstance(ck, rl.Module)
        close(rl.evaluate(ck, *ARGS3), rl.evaluate(plain, *ARGS3))
        assert rl.infer_type(ck)["main"].checked_type == rl.typeof(plain)


@pytest.mark.parametrize("spec", SPECS + [1000])
def test_vjp_with_checkpoint(spec):
    f = chain3(12)
    x, w, c = [rl.var(p.name_hint, type=p.type_annotation) for p in f.params]
    y = rl.var("y", dtype=F)
    g = rl.Function([x, w, c], rl.Let(y, rl.Call(f, [x, w, c]), rl.Tuple([y, x * w])))
    plain, ck = rl.vjp(g), rl.vjp(g, checkpoint=spec)
    assert rl.infer_type(ck)["main"].checked_type == rl.typeof(plain)
    want_v, want_back = rl.evaluate(plain, *ARGS3)
    got_v, got_back = rl.evaluate(ck, *ARGS3)
    close(got_v, want_v)
    rng = np.random.default_rng(1)
    for _ in range(2):                                # the backpropagator runs again
        ct = (np.float64(rng.normal()), rng.normal(size=4))
        close(got_back(ct), want_back(ct))
    ck = rl.vjp(f, checkpoint=spec)                   # a scalar result, the last step's vjp
    close(rl.evaluate(ck, *ARGS3)[1](np.float64(0.7)),
          rl.evaluate(rl.vjp(f), *ARGS3)[1](np.float64(0.7)))


def test_vjp_with_checkpoint_keeps_little():
    """The vjp's backpropagator holds the inputs only: its peak is the schedule's."""
    from tests.ir.passes.test_checkpoint import chain
    f = chain(128, shape=(1024,))
    x = np.full(1024, 0.1)

    def peak(prog):
        import tracemalloc
        from relayish.backend.interp.api import _compile_module
        run = _compile_module(prog if isinstance(prog, rl.Module) else rl.Module.from_expr(prog))
        run(x)[1](np.float64(1.0))
        tracemalloc.start()
        try:
            run(x)[1](np.float64(1.0))
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak(rl.vjp(f, checkpoint="revolve")) < 0.1 * peak(rl.vjp(f))


def test_loop_entry_points_with_checkpoint():
    from tests.ir.passes.test_checkpoint import list_loop, loop_args
    mod = list_loop()
    args = loop_args(mod, 9)
    for argnums in (1, (0, 2)):
        for transform in (rl.grad, rl.value_and_grad):
            close(rl.evaluate(transform(mod, argnums=argnums, checkpoint=3), *args),
                  rl.evaluate(transform(mod, argnums=argnums), *args))
    plain, ck = rl.vjp(mod), rl.vjp(mod, checkpoint=4)
    assert rl.infer_type(ck)["main"].checked_type == rl.infer_type(plain)["main"].checked_type
    (got_v, got_back), (want_v, want_back) = rl.evaluate(ck, *args), rl.evaluate(plain, *args)
    close(got_v, want_v)
    for ct in (np.float64(1.0), np.float64(-0.4)):
        close(got_back(ct), want_back(ct))


def test_checkpointed_entry_points_refuse_as_the_plain_ones():
    f = chain3(3)
    with pytest.raises(GradientError, match="argnums"):
        rl.grad(f, argnums=5, checkpoint=2)
    x = rl.var("x", shape=(3,), dtype=F)
    vec = rl.Function([x], rl.tanh(x) * x)
    with pytest.raises(GradientError, match="float scalar"):
        rl.value_and_grad(vec, checkpoint="sqrt")
    with pytest.raises(GradientError, match="checkpoint="):
        rl.vjp(vec, checkpoint=0)
