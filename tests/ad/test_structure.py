"""The one structure map (relayish/ad/structure.py) and node replacement (rewrite.py) that
both AD modes' converters are written with."""
import numpy as np
import pytest

import relayish as rl
from relayish.ad.rewrite import replace_node, with_checked_type
from relayish.ad.structure import has_float, map_structure
from relayish.ir.types import is_tensor_tree
from relayish.errors import GradientError

F = rl.TensorType((2,), "float64")
I = rl.TensorType((), "int32")


def _leaves(t, keep=None):
    """The path of every tensor map_structure reaches, in the order it reaches them."""
    seen = []
    map_structure(t, (), lambda path, t: seen.append((path, t.dtype)),
                  field=lambda path, i, ft: path + (i,), keep=keep)
    return seen


def test_fields_are_walked_in_order_and_packed():
    t = rl.TupleType([F, rl.TupleType([I, F]), F])
    assert _leaves(t) == [((0,), "float64"), ((1, 0), "int32"), ((1, 1), "float64"),
                          ((2,), "float64")]
    doubled = map_structure(t, 1, lambda x, t: 2 * x, field=lambda x, i, ft: x + i,
                            pack=lambda parts, t: tuple(parts))
    assert doubled == (2, (4, 6), 6)


def test_keep_skips_fields_before_their_projection():
    t = rl.TupleType([F, rl.TupleType([I]), I])
    asked = []
    map_structure(t, "x", lambda x, t: None, keep=has_float,
                  field=lambda x, i, ft: asked.append(i) or f"{x}.{i}")
    assert asked == [0]


def test_adt_functions_and_refs_go_to_their_own_actions():
    adt = rl.TypeCall(rl.GlobalTypeVar("List"), [F])
    fn = rl.FuncType([F], F)
    t = rl.TupleType([adt, fn, rl.RefType(F)])
    got = map_structure(t, None, lambda x, t: "tensor", field=lambda x, i, ft: x,
                        pack=lambda parts, t: parts, adt=lambda x, t: "adt",
                        other=lambda x, t: type(t).__name__)
    assert got == ["adt", "FuncType", "RefType"]
    with pytest.raises(GradientError, match="ADT type"):
        map_structure(adt, None, lambda x, t: x)
    with pytest.raises(GradientError, match="cannot convert a value of type"):
        map_structure(fn, None, lambda x, t: x)


def test_type_predicates():
    assert has_float(rl.TupleType([I, rl.TupleType([F])]))
    assert not has_float(rl.TupleType([I, rl.TypeCall(rl.GlobalTypeVar("List"), [F])]))
    assert is_tensor_tree(rl.TupleType([I, rl.TupleType([F])]))
    assert not is_tensor_tree(rl.TupleType([F, rl.FuncType([], F)]))


def test_replace_node_swaps_one_node_and_keeps_types():
    x = rl.var("x", shape=(2,), dtype="float64")
    call = with_checked_type(rl.sin(x), F)
    inner = with_checked_type(rl.multiply(call, call), F)
    expr = rl.Tuple([inner, x])
    z = rl.Var("z", F)
    out = replace_node(expr, call, z)
    new_inner = out.fields[0]
    assert new_inner.args[0] is z and new_inner.args[1] is z
    assert new_inner._checked_type == F                  # the rebuilt node keeps its type
    assert out.fields[1] is x
    assert replace_node(expr, rl.Var("other"), z) is expr  # nothing to replace: same node
    assert replace_node(call, call, z) is z
    value = rl.evaluate(rl.Function([z], out.fields[0]), np.array([1.0, 2.0]))
    np.testing.assert_allclose(value, [1.0, 4.0])
