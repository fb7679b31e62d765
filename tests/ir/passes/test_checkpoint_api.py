"""Checkpointing's entry points beyond rl.gradient (grad, value_and_grad, vjp with checkpoint=),
and the Module table's stamp that lets rl.evaluate find a checkpointed program's compiled code
in O(1) however many globals it has."""
import numpy as np
import pytest

import relayish as rl
from relayish.backend.interp import api as interp_api
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
