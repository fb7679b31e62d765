"""The prelude: its ADTs and functions, evaluated and type-checked."""
import numpy as np
import pytest

import relayish as rl
from relayish.ir.types import substitute

F32 = rl.TensorType((), "float32")
F64 = rl.TensorType((), "float64")
I32 = rl.TensorType((), "int32")


def _floats(values, dtype="float32"):
    return [np.asarray(v, dtype) for v in values]


def _run(mod, params, body, *args):
    mod["main"] = rl.Function(params, body)
    return rl.evaluate(mod, *args)


def _fn(name_types, body_fn):
    params = [rl.var(n, type=t) for n, t in name_types]
    return rl.Function(params, body_fn(*params))


def _canonical(t):
    """A FuncType with its type params renamed t0, t1, ... (types equal up to renaming)."""
    names = {tp: rl.TypeVar(f"t{i}") for i, tp in enumerate(t.type_params)}
    inner = substitute(rl.FuncType(t.arg_types, t.ret_type), names)
    return rl.FuncType(inner.arg_types, inner.ret_type, list(names.values()))


@pytest.fixture
def prelude():
    return rl.Prelude(rl.Module())


def test_prelude_names_are_the_modules_own(prelude):
    p, mod = prelude, prelude.mod
    for name in ("List", "Option", "Tree", "Nat"):
        assert getattr(p, name) is mod.get_global_type_var(name)
    for name in ("Cons", "Nil", "Some", "Nothing", "Leaf", "Node", "Z", "S"):
        assert getattr(p, name) is mod.get_constructor(name)
    for name in ("map", "foldl", "foldr", "length", "nat_iterate"):
        gv = getattr(p, name)
        assert isinstance(gv, rl.GlobalVar) and gv is mod.get_global_var(name)
        assert isinstance(mod[gv], rl.Function)
    assert p.Cons.belong_to == p.List and p.S.belong_to == p.Nat
    assert [c.name_hint for c in mod.get_type_data("List").constructors] == ["Cons", "Nil"]
    assert [c.name_hint for c in mod.get_type_data("Nat").constructors] == ["Z", "S"]
    assert rl.Prelude().mod is not None


def test_prelude_is_idempotent(prelude):
    mod = prelude.mod
    n_funcs, n_types = len(mod.functions), len(mod.type_definitions)
    again = rl.Prelude(mod)
    assert len(mod.functions) == n_funcs and len(mod.type_definitions) == n_types
    assert again.Cons is prelude.Cons and again.List is prelude.List
    assert again.map is prelude.map and mod[again.map] is mod[prelude.map]


def test_prelude_reuses_a_users_matching_list():
    a = rl.TypeVar("a")
    List = rl.GlobalTypeVar("List")
    cons = rl.Constructor("Cons", [a, rl.TypeCall(List, [a])], List)
    nil = rl.Constructor("Nil", [], List)
    mod = rl.Module()
    mod.add_type(rl.TypeData(List, [a], [cons, nil]))
    p = rl.Prelude(mod)
    assert p.Cons is cons and p.Nil is nil
    out = _run(mod, [], p.length(cons(rl.const(1.0), cons(rl.const(2.0), nil()))))
    assert int(out) == 2
    l = rl.var("l", type=rl.TypeCall(List, [F32]))
    out = _run(mod, [l], p.map(_fn([("x", F32)], lambda x: x * 2.0), l),
               rl.list_value(mod, _floats([1.0])))
    assert [float(v) for v in rl.from_list_value(out)] == [2.0]


def test_prelude_rejects_a_conflicting_type():
    List = rl.GlobalTypeVar("List")
    mod = rl.Module()
    mod.add_type(rl.TypeData(List, [], [rl.Constructor("Empty", [], List)]))
    with pytest.raises(rl.RelayishError, match="List"):
        rl.Prelude(mod)


def test_prelude_rejects_non_modules():
    with pytest.raises(rl.RelayishError):
        rl.Prelude("mod")


def test_make_nat_builds_nested_s(prelude):
    p = prelude
    e = p.make_nat(3)
    depth = 0
    while isinstance(e, rl.Call) and e.op is p.S:
        e, depth = e.args[0], depth + 1
    assert depth == 3 and isinstance(e, rl.Call) and e.op is p.Z and e.args == []
    assert p.make_nat(0).op is p.Z
    with pytest.raises(rl.RelayishError):
        p.make_nat(-1)


def test_make_list_builds_cons_cells(prelude):
    p = prelude
    one, two = rl.const(1.0), rl.const(2.0)
    e = p.make_list([one, two])
    assert e.op is p.Cons and e.args[0] is one and e.args[1].args[0] is two
    assert e.args[1].args[1].op is p.Nil


def test_map(prelude):
    p, mod = prelude, prelude.mod
    l = rl.var("l", type=rl.TypeCall(p.List, [F32]))
    double = _fn([("x", F32)], lambda x: x * 2.0)
    out = _run(mod, [l], p.map(double, l), rl.list_value(mod, _floats([1.0, 2.5, -3.0])))
    got = rl.from_list_value(out)
    assert [float(v) for v in got] == [2.0, 5.0, -6.0]
    assert all(isinstance(v, np.ndarray) and v.dtype == np.float32 for v in got)
    assert rl.from_list_value(rl.evaluate(mod, rl.list_value(mod, []))) == []


def test_map_changes_the_element_type(prelude):
    p, mod = prelude, prelude.mod
    l = rl.var("l", type=rl.TypeCall(p.List, [F32]))
    positive = _fn([("x", F32)], lambda x: x > 0.0)
    out = _run(mod, [l], p.map(positive, l), rl.list_value(mod, _floats([1.0, -1.0])))
    assert [bool(v) for v in rl.from_list_value(out)] == [True, False]


def test_foldl_folds_from_the_left(prelude):
    p, mod = prelude, prelude.mod
    l = rl.var("l", type=rl.TypeCall(p.List, [F32]))
    minus = _fn([("acc", F32), ("x", F32)], lambda acc, x: acc - x)
    out = _run(mod, [l], p.foldl(minus, rl.const(0.0), l), rl.list_value(mod, _floats([1, 2, 3])))
    assert float(out) == -6.0           # ((0 - 1) - 2) - 3


def test_foldr_folds_from_the_right(prelude):
    p, mod = prelude, prelude.mod
    l = rl.var("l", type=rl.TypeCall(p.List, [F32]))
    minus = _fn([("x", F32), ("acc", F32)], lambda x, acc: x - acc)
    out = _run(mod, [l], p.foldr(minus, rl.const(0.0), l), rl.list_value(mod, _floats([1, 2, 3])))
    assert float(out) == 2.0            # 1 - (2 - (3 - 0))


def test_foldl_with_a_tuple_accumulator(prelude):
    p, mod = prelude, prelude.mod
    acc_t = rl.TupleType([F64, F64])
    l = rl.var("l", type=rl.TypeCall(p.List, [F64]))
    step = _fn([("acc", acc_t), ("x", F64)],
               lambda acc, x: rl.Tuple([acc[0] + x, acc[1] * x]))
    init = rl.Tuple([rl.const(0.0, "float64"), rl.const(1.0, "float64")])
    out = _run(mod, [l], p.foldl(step, init, l), rl.list_value(mod, _floats([2, 3, 4], "float64")))
    assert isinstance(out, tuple) and (float(out[0]), float(out[1])) == (9.0, 24.0)


def test_length(prelude):
    p, mod = prelude, prelude.mod
    l = rl.var("l", type=rl.TypeCall(p.List, [rl.TensorType((2,), "float32")]))
    mod["main"] = rl.Function([l], p.length(l))
    for n in (0, 1, 5):
        out = rl.evaluate(mod, rl.list_value(mod, [np.zeros(2, "float32")] * n))
        assert isinstance(out, np.ndarray) and out.dtype == np.int32 and int(out) == n


def test_nat_iterate_applies_f_n_times(prelude):
    p, mod = prelude, prelude.mod
    x = rl.var("x", type=F32)
    double = _fn([("y", F32)], lambda y: y * 2.0)
    for n in (0, 1, 4):
        out = _run(mod, [x], rl.Call(p.nat_iterate(double, p.make_nat(n)), [x]), np.float32(1.5))
        assert float(out) == 1.5 * 2 ** n


def test_nat_iterate_returns_a_closure(prelude):
    p, mod = prelude, prelude.mod
    inc = _fn([("y", F32)], lambda y: y + 1.0)
    mod["main"] = rl.Function([], p.nat_iterate(inc, p.make_nat(3)))
    f = rl.evaluate(mod)
    assert isinstance(f, rl.Closure)
    assert float(f(np.float32(0.5))) == 3.5


def test_nat_iterate_on_lists(prelude):
    p, mod = prelude, prelude.mod
    lt = rl.TypeCall(p.List, [F32])
    l = rl.var("l", type=lt)
    push = _fn([("l", lt)], lambda l: p.Cons(rl.const(7.0), l))
    out = _run(mod, [l], rl.Call(p.nat_iterate(push, p.make_nat(2)), [l]),
               rl.list_value(mod, _floats([1.0])))
    assert [float(v) for v in rl.from_list_value(out)] == [7.0, 7.0, 1.0]


def test_polymorphic_functions_at_two_types_in_one_program(prelude):
    p, mod = prelude, prelude.mod
    l32 = rl.var("a", type=rl.TypeCall(p.List, [F32]))
    l64 = rl.var("b", type=rl.TypeCall(p.List, [F64]))
    body = rl.Tuple([p.length(l32), p.length(l64),
                     p.map(_fn([("x", F64)], lambda x: x + 1.0), l64)])
    out = _run(mod, [l32, l64], body, rl.list_value(mod, _floats([1.0])),
               rl.list_value(mod, _floats([1.0, 2.0], "float64")))
    assert int(out[0]) == 1 and int(out[1]) == 2
    assert [float(v) for v in rl.from_list_value(out[2])] == [2.0, 3.0]
    mod = rl.infer_type(mod)
    assert mod["main"].checked_type.ret_type == rl.TupleType(
        [I32, I32, rl.TypeCall(p.List, [F64])])


def test_option_and_tree_values(prelude):
    p, mod = prelude, prelude.mod
    tt = rl.TypeCall(p.Tree, [F32])
    t = rl.var("t", type=tt)
    x, l = rl.Var("x"), rl.Var("l")
    leftmost = rl.GlobalVar("leftmost")
    mod[leftmost] = rl.Function([t], rl.Match(t, [
        rl.Clause(rl.PatternConstructor(p.Leaf, [rl.PatternVar(x)]), p.Some(x)),
        rl.Clause(rl.PatternConstructor(p.Node, [rl.PatternVar(l), rl.PatternWildcard()]),
                  rl.Call(leftmost, [l]))]), rl.TypeCall(p.Option, [F32]))
    tree = p.Node(p.Node(p.Leaf(rl.const(3.0)), p.Leaf(rl.const(4.0))), p.Leaf(rl.const(5.0)))
    out = _run(mod, [], rl.Call(leftmost, [tree]))
    assert isinstance(out, rl.ConstructorValue) and out.constructor is p.Some
    assert float(out.fields[0]) == 3.0


def test_inferred_polymorphic_types(prelude):
    p, mod = prelude, prelude.mod
    mod = rl.infer_type(mod)
    a, b = rl.TypeVar("t0"), rl.TypeVar("t1")
    List = p.List

    def ty(name):
        return _canonical(mod[name].checked_type)

    assert ty("map") == rl.FuncType([rl.FuncType([a], b), rl.TypeCall(List, [a])],
                                    rl.TypeCall(List, [b]), [a, b])
    # Relay's order: foldl : fn[A, B](fn(A, B) -> A, A, List[B]) -> A
    assert ty("foldl") == rl.FuncType([rl.FuncType([a, b], a), a, rl.TypeCall(List, [b])], a,
                                      [a, b])
    assert ty("foldr") == rl.FuncType([rl.FuncType([a, b], b), b, rl.TypeCall(List, [a])], b,
                                      [a, b])
    assert ty("length") == rl.FuncType([rl.TypeCall(List, [a])], I32, [a])
    assert ty("nat_iterate") == rl.FuncType([rl.FuncType([a], a), rl.TypeCall(p.Nat, [])],
                                            rl.FuncType([a], a), [a])


def test_misapplied_prelude_function_is_a_type_error(prelude):
    p, mod = prelude, prelude.mod
    l = rl.var("l", type=rl.TypeCall(p.List, [F32]))
    wrong = _fn([("x", F64)], lambda x: x)          # float64 -> float64 over a float32 list
    mod["main"] = rl.Function([l], p.map(wrong, l))
    with pytest.raises(rl.TypeCheckError):
        rl.infer_type(mod)


def test_prelude_round_trips_through_text(prelude):
    mod = prelude.mod
    text = rl.astext(mod)
    for name in ("@map", "@foldl", "@foldr", "@length", "@nat_iterate", "List", "Cons"):
        assert name in text
    rl.assert_structural_equal(rl.parse(text), mod)


def test_user_text_names_nat_without_brackets(prelude):
    """`Nat` and `Nat[]` name the same (parameterless) type in program text."""
    text = rl.astext(prelude.mod) + """
def @twice(%n: Nat) -> Nat { S(S(%n)) }
def @main() -> int32 { match (@twice(Z())) { S(_) => 1, Z => 0 } }
"""
    mod = rl.parse(text)
    assert int(rl.evaluate(mod)) == 1


def test_prelude_text_parses_on_its_own():
    from relayish.ir.prelude import PRELUDE_TEXT
    mod = rl.parse(PRELUDE_TEXT)
    assert set(mod.type_definitions) == {rl.GlobalTypeVar(n) for n in
                                         ("List", "Option", "Tree", "RoseTree", "Nat")}
    from relayish.ir.prelude import FUNCTION_NAMES
    assert {gv.name_hint for gv in mod.functions} == set(FUNCTION_NAMES)
    rl.infer_type(mod)


# ---- Relay's prelude functions that carry no floats (the others: tests/ad/test_prelude_gradients.py)

def _ints(mod, values):
    return rl.list_value(mod, [np.int32(v) for v in values])


def test_sum_adds_int32_lists(prelude):
    p, mod = prelude, prelude.mod
    l = rl.var("l", type=rl.TypeCall(p.List, [I32]))
    for values in ([], [4], [1, -2, 30]):
        assert int(_run(mod, [l], p.sum(l), _ints(mod, values))) == sum(values)


def test_size_counts_the_nodes_of_a_rose_tree(prelude):
    p, mod = prelude, prelude.mod
    leaf = lambda v: p.Rose(rl.const(v), p.Nil())          # noqa: E731
    tree = p.Rose(rl.const(0.0), p.make_list([leaf(1.0), p.Rose(rl.const(2.0), p.make_list([leaf(3.0)]))]))
    assert int(_run(mod, [], p.size(tree))) == 4


def test_nat_add_and_nat_double(prelude):
    p, mod = prelude, prelude.mod

    def count(v):
        n = 0
        while v.constructor is p.S:
            n, v = n + 1, v.fields[0]
        return n
    assert count(_run(mod, [], p.nat_add(p.make_nat(2), p.make_nat(3)))) == 5
    assert count(_run(mod, [], p.nat_double(p.make_nat(4)))) == 8


def test_filter_zip_and_rev_on_ints(prelude):
    p, mod = prelude, prelude.mod
    l = rl.var("l", type=rl.TypeCall(p.List, [I32]))
    odd = _fn([("v", I32)], lambda v: rl.not_equal(v - (v / 2) * 2, rl.const(0, "int32")))
    out = _run(mod, [l], p.rev(p.filter(odd, l)), _ints(mod, [1, 2, 3, 5, 6]))
    assert [int(v) for v in rl.from_list_value(out)] == [5, 3, 1]
    out = _run(mod, [l], p.zip(l, p.tl(l)), _ints(mod, [1, 2, 3]))
    assert [tuple(map(int, pair)) for pair in rl.from_list_value(out)] == [(1, 2), (2, 3)]


def test_hd_of_an_empty_list_is_an_evaluation_error(prelude):
    p, mod = prelude, prelude.mod
    l = rl.var("l", type=rl.TypeCall(p.List, [I32]))
    with pytest.raises(rl.EvaluationError):
        _run(mod, [l], p.hd(l), _ints(mod, []))


def test_prelude_repr_names_its_parts_without_memory_addresses():
    text = repr(rl.Prelude())
    assert "0x" not in text and "functions" in text
