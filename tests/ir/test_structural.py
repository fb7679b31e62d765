"""Structural (alpha) equality: positive and negative cases, the diff of assert_structural_equal,
modules, types, patterns, and 10^5-long let-chains."""
import numpy as np
import pytest

import relayish as rl
from relayish.ir.structural import StructuralMismatch
from relayish.ir.visitor import build_let_chain
from strategies import CHAIN_LENGTHS, f32


def list_types():
    a = rl.TypeVar("a")
    lst = rl.GlobalTypeVar("List")
    cons = rl.Constructor("Cons", [a, rl.TypeCall(lst, [a])], lst)
    nil = rl.Constructor("Nil", [], lst)
    return rl.TypeData(lst, [a], [cons, nil]), cons, nil


def test_alpha_equivalent_functions_are_equal():
    x, y = f32("x"), f32("y")
    p, q = f32("p"), f32("q")
    assert rl.structural_equal(rl.Function([x, y], x * y + x), rl.Function([p, q], p * q + p))
    rl.assert_structural_equal(rl.Function([x], rl.Let(y, x, y)), rl.Function([p], rl.Let(q, p, q)))


def test_different_binding_structure_is_not_equal():
    x, y = f32("x"), f32("y")
    p, q = f32("p"), f32("q")
    assert not rl.structural_equal(rl.Function([x, y], x - y), rl.Function([p, q], q - p))
    assert not rl.structural_equal(rl.Function([x, y], x + x), rl.Function([p, q], p + q))
    # the let body refers to the bound var on one side and to the parameter on the other
    v1, v2 = f32("v"), f32("v")
    assert not rl.structural_equal(rl.Function([x], rl.Let(v1, x, v1)), rl.Function([p], rl.Let(v2, p, p)))
    # a bound var against a free one
    free = f32("free")
    assert not rl.structural_equal(rl.Function([x], x), rl.Function([p], free))
    assert not rl.structural_equal(rl.Function([x], x), rl.Function([p, q], p))


def test_free_vars_equal_only_if_identical_unless_mapped():
    x, y, z = f32("x"), f32("x"), f32("z")
    assert rl.structural_equal(x + x, x + x)
    assert not rl.structural_equal(x + x, y + y)
    assert rl.structural_equal(x + x, y + y, map_free_vars=True)
    assert not rl.structural_equal(x + z, y + y, map_free_vars=True)     # the pairing is one-to-one
    assert not rl.structural_equal(x + x, y + z, map_free_vars=True)
    assert not rl.structural_equal(x, rl.var("x", dtype="float64"), map_free_vars=True)


def test_var_type_annotations_are_compared():
    x, p = rl.var("x", dtype="float32"), rl.var("x", dtype="float64")
    assert not rl.structural_equal(rl.Function([x], x), rl.Function([p], p))
    u, w = rl.Var("u"), rl.Var("w")
    assert not rl.structural_equal(rl.Function([x], rl.Let(u, x, u)),
                                   rl.Function([rl.var("y")], rl.Let(f32("w"), x, w)))
    assert rl.structural_equal(rl.Function([x], rl.Let(u, x, u)), rl.Function([x], rl.Let(w, x, w)))


def test_constants_compare_by_dtype_shape_and_bits():
    assert rl.structural_equal(rl.const(1.0), rl.const(1.0))
    assert not rl.structural_equal(rl.const(1.0), rl.const(2.0))
    assert not rl.structural_equal(rl.const(1.0), rl.const(1.0, "float64"))
    assert not rl.structural_equal(rl.const(np.ones(2)), rl.const(np.ones((2, 1))))
    assert rl.structural_equal(rl.const(np.nan), rl.const(np.nan))
    assert not rl.structural_equal(rl.const(0.0), rl.const(-0.0))
    assert rl.structural_equal(rl.const(np.arange(6.0).reshape(2, 3).T),
                               rl.const(np.ascontiguousarray(np.arange(6.0).reshape(2, 3).T)))


def test_call_attrs_and_ops_are_compared():
    m = f32("m", (2, 3))
    assert rl.structural_equal(rl.sum(m, axis=1), rl.sum(m, axis=1))
    assert not rl.structural_equal(rl.sum(m, axis=1), rl.sum(m, axis=0))
    assert not rl.structural_equal(rl.sum(m, axis=1), rl.sum(m, axis=1, keepdims=True))
    assert not rl.structural_equal(rl.sum(m), rl.mean(m))
    assert not rl.structural_equal(m + m, m * m)
    assert not rl.structural_equal(rl.cast(m, "int32"), rl.cast(m, "int64"))


def test_every_node_kind_negative_cases():
    x = f32("x")
    t = rl.var("t", type=rl.TupleType([rl.TensorType(), rl.TensorType()]))
    r = rl.var("r", type=rl.RefType(rl.TensorType()))
    pairs = [
        (rl.Tuple([x, x]), rl.Tuple([x])),
        (rl.TupleGetItem(t, 0), rl.TupleGetItem(t, 1)),
        (rl.If(x > x, x, x), rl.If(x > x, x, -x)),
        (rl.RefCreate(x), rl.RefRead(r)),
        (rl.RefWrite(r, x), rl.RefWrite(r, -x)),
        (rl.GlobalVar("f")(x), rl.GlobalVar("g")(x)),
        (rl.Function([], x, ret_type=rl.TensorType()), rl.Function([], x)),
        (rl.Function([], x, type_params=[rl.TypeVar("a")]), rl.Function([], x)),
        (x, rl.const(1.0)),
    ]
    for a, b in pairs:
        assert not rl.structural_equal(a, b)
        assert rl.structural_equal(a, a)
    assert rl.structural_equal(rl.GlobalVar("f")(x), rl.GlobalVar("f")(x))     # globals by name


def test_match_and_patterns():
    data, cons, nil = list_types()
    l = rl.var("l", type=rl.TypeCall(data.header, [rl.TensorType()]))
    def program(complete=True, wildcard=False):
        h, tl = rl.Var("h"), rl.Var("t")
        first = rl.PatternWildcard() if wildcard else rl.PatternVar(h)
        body = rl.const(0.0) if wildcard else h
        return rl.Match(l, [rl.Clause(rl.PatternConstructor(cons, [first, rl.PatternVar(tl)]), body),
                            rl.Clause(rl.PatternConstructor(nil, []), rl.const(0.0))], complete)
    assert rl.structural_equal(program(), program())
    assert not rl.structural_equal(program(), program(complete=False))
    assert not rl.structural_equal(program(), program(wildcard=True))
    # constructors of the same name and type made separately are the same constructor
    data2, cons2, nil2 = list_types()
    assert rl.structural_equal(cons(rl.const(1.0), nil()), cons2(rl.const(1.0), nil2()))
    assert not rl.structural_equal(cons(rl.const(1.0), nil()), cons(rl.const(1.0), cons(rl.const(1.0), nil())))
    a, b = rl.Var("a"), rl.Var("b")
    assert rl.structural_equal(rl.PatternTuple([rl.PatternVar(a)]), rl.PatternTuple([rl.PatternVar(b)]))
    assert not rl.structural_equal(rl.PatternTuple([rl.PatternVar(a)]), rl.PatternTuple([rl.PatternWildcard()]))


def test_types_compare_as_values():
    assert rl.structural_equal(rl.TensorType((2,)), rl.TensorType((2,), "float32"))
    assert not rl.structural_equal(rl.TensorType((2,)), rl.TensorType((3,)))
    assert rl.structural_equal(rl.FuncType([rl.TypeVar("a")], rl.TypeVar("a"), [rl.TypeVar("a")]),
                               rl.FuncType([rl.TypeVar("a")], rl.TypeVar("a"), [rl.TypeVar("a")]))


def test_modules_compare_globals_by_name_and_type_definitions():
    def module(extra=False, const=1.0, ctor_name="Nil"):
        mod = rl.Module()
        data, cons, nil = list_types()
        if ctor_name != "Nil":
            nil = rl.Constructor(ctor_name, [], data.header)
            data = rl.TypeData(data.header, data.type_vars, [cons, nil])
        mod.add_type(data)
        x = f32("x")
        mod["main"] = rl.Function([x], x + rl.GlobalVar("helper")(x))
        y = f32("y")
        mod["helper"] = rl.Function([y], y * rl.const(const))
        if extra:
            mod["other"] = rl.Function([], rl.const(0.0))
        return mod
    assert rl.structural_equal(module(), module())
    assert not rl.structural_equal(module(), module(extra=True))
    assert not rl.structural_equal(module(), module(const=2.0))
    assert not rl.structural_equal(module(), module(ctor_name="Empty"))
    with pytest.raises(StructuralMismatch, match="@helper"):
        rl.assert_structural_equal(module(), module(const=2.0))


def test_assert_structural_equal_shows_path_and_both_sides():
    x, p = f32("x"), f32("p")
    a = rl.Function([x], rl.Let(f32("y"), x * x, rl.Tuple([x, x + rl.const(1.0)])))
    b = rl.Function([p], rl.Let(f32("y"), p * p, rl.Tuple([p, p + rl.const(2.0)])))
    with pytest.raises(rl.RelayishError) as info:
        rl.assert_structural_equal(a, b)
    err = info.value
    assert isinstance(err, AssertionError) and isinstance(err, StructuralMismatch)
    assert err.path == ".body.body.fields[1].args[1]"
    text = str(err)
    assert "different constants" in text and "lhs: 1f" in text and "rhs: 2f" in text
    rl.assert_structural_equal(a, a)


@pytest.mark.parametrize("n", CHAIN_LENGTHS)
def test_long_let_chains_compare_iteratively_and_report_the_first_difference(n):
    add, one, two = rl.get_op("add"), rl.const(1.0), rl.const(2.0)

    def chain(n, bad_at=None):
        x = f32("x")
        bindings, prev = [], x
        for i in range(n):
            v = rl.Var("v", rl.TensorType())
            bindings.append((v, rl.Call(add, [prev, two if i == bad_at else one])))
            prev = v
        return rl.Function([x], build_let_chain(bindings, prev))
    a, b = chain(n), chain(n)
    assert rl.structural_equal(a, b)
    c = chain(n, bad_at=n - 10)
    with pytest.raises(StructuralMismatch) as info:
        rl.assert_structural_equal(a, c)
    assert info.value.path == f".body*{n - 9}.value.args[1]"


def test_shared_subexpressions_are_compared_once():
    x = f32("x")
    e1, e2 = x, x
    for _ in range(200):            # 2^200 paths as a tree: only a DAG walk finishes
        e1, e2 = e1 + e1, e2 + e2
    assert rl.structural_equal(e1, e2)


def test_nullary_adt_name_equals_its_call_without_arguments():
    nat = rl.GlobalTypeVar("Nat")
    assert rl.structural_equal(rl.TypeCall(nat, []), nat)
    assert rl.structural_equal(rl.FuncType([rl.TypeCall(nat, [])], nat), rl.FuncType([nat], nat))
    n1, n2 = rl.var("n", type=nat), rl.var("n", type=rl.TypeCall(nat, []))
    assert rl.structural_equal(rl.Function([n1], n1), rl.Function([n2], n2))
    assert not rl.structural_equal(rl.TypeCall(nat, [rl.TensorType()]), nat)
