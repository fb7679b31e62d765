"""Module: global functions by name or GlobalVar, ADT definitions, from_expr, errors."""
import pytest

import relayish as rl


def _identity():
    x = rl.var("x")
    return rl.Function([x], x)


def test_set_and_get_by_name_and_global_var():
    mod = rl.Module()
    f = _identity()
    mod["f"] = f
    assert mod["f"] is f
    gv = mod.get_global_var("f")
    assert isinstance(gv, rl.GlobalVar) and gv.name_hint == "f"
    assert mod[gv] is f
    assert mod[rl.GlobalVar("f")] is f       # a GlobalVar made anywhere names @f
    assert "f" in mod and gv in mod and "g" not in mod
    assert mod.global_vars == [gv] and mod.items() == [(gv, f)]


def test_a_given_global_var_is_the_one_the_module_keeps():
    mod = rl.Module()
    g = rl.GlobalVar("g")
    mod[g] = _identity()
    assert mod.get_global_var("g") is g
    replacement = _identity()
    mod["g"] = replacement                  # replacing keeps the same GlobalVar
    assert mod.get_global_var("g") is g and mod[g] is replacement
    assert len(mod.functions) == 1


def test_recursive_global_refers_to_itself():
    mod = rl.Module()
    f = rl.GlobalVar("f")
    x = rl.var("x")
    func = rl.Function([x], rl.Call(f, [x]))
    mod[f] = func
    assert mod[f].body.op is mod.get_global_var("f")


def test_missing_global_is_a_relayish_error_listing_what_exists():
    mod = rl.Module()
    mod["main"] = _identity()
    with pytest.raises(rl.RelayishError, match=r"@nope.*@main"):
        mod["nope"]
    with pytest.raises(rl.RelayishError):
        mod[3]


def test_only_functions_go_in_a_module():
    mod = rl.Module()
    with pytest.raises(rl.RelayishError, match="functions"):
        mod["x"] = rl.var("x")


def test_from_expr_makes_main():
    f = _identity()
    mod = rl.Module.from_expr(f)
    assert mod["main"] is f
    body = rl.const(1.0)
    mod2 = rl.Module.from_expr(body)
    assert isinstance(mod2["main"], rl.Function) and mod2["main"].params == []
    assert mod2["main"].body is body
    with pytest.raises(rl.RelayishError):
        rl.Module.from_expr("not an expr")


def _list_type_data(name="List", cons="Cons", nil="Nil"):
    a = rl.TypeVar("a")
    List = rl.GlobalTypeVar(name)
    c = rl.Constructor(cons, [a, rl.TypeCall(List, [a])], List)
    n = rl.Constructor(nil, [], List)
    return rl.TypeData(List, [a], [c, n])


def test_add_type_registers_header_and_constructors():
    mod = rl.Module()
    data = _list_type_data()
    assert mod.add_type(data) is data
    assert mod.get_global_type_var("List") is data.header
    assert mod.get_type_data("List") is data and mod.get_type_data(rl.GlobalTypeVar("List")) is data
    assert mod[rl.GlobalTypeVar("List")] is data
    assert mod.get_constructor("Cons") is data.constructors[0]
    assert set(mod.constructors) == {"Cons", "Nil"}
    mod.add_type(data)                          # re-adding the same definition is harmless
    assert len(mod.type_definitions) == 1


def test_conflicting_type_definitions_are_errors():
    mod = rl.Module()
    mod.add_type(_list_type_data())
    with pytest.raises(rl.RelayishError, match="List"):
        mod.add_type(_list_type_data())
    with pytest.raises(rl.RelayishError, match="Cons"):
        mod.add_type(_list_type_data(name="List2"))
    with pytest.raises(rl.RelayishError):
        mod.add_type("List")
    with pytest.raises(rl.RelayishError, match="Nope"):
        mod.get_type_data("Nope")
    with pytest.raises(rl.RelayishError, match="Nope"):
        mod.get_constructor("Nope")


def test_constructor_argument_to_module_init_and_copy():
    data = _list_type_data()
    f = _identity()
    mod = rl.Module({rl.GlobalVar("main"): f}, [data])
    assert mod["main"] is f and mod.get_type_data("List") is data
    other = mod.copy()
    other["extra"] = _identity()
    assert "extra" not in mod and other["main"] is f
    assert other.get_type_data("List") is data


def test_prelude_types_usable_in_type_calls():
    mod = rl.Module()
    p = rl.Prelude(mod)
    t = rl.TypeCall(p.List, [rl.TensorType()])
    assert mod.get_type_data(t.func).header is p.List
