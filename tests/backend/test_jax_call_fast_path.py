"""The call path of a compiled program whose argument is a node table (issue 17): the checks
a first call makes hold on every later call, and a NodeTable passed pre-encoded (as a data
loader would) is checked like a value that is encoded on the call: its layout, the fixed
capacity, its arrays. (JaxFunction.__call__ has no shortcut for such programs: the wrapper
costs ~20 us against a ~2 ms TreeLSTM gradient, notes/jax-backend.md.)"""
import os
import sys

import numpy as np
import pytest

import relayish as rl
from relayish.errors import EvaluationError
from relayish.backend.jax.dynamic_tables import NodeTable

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples"))
from treelstm import init_params, random_tree, to_value, treelstm_module  # noqa: E402
from test_jax_dynamic import LIST as LIST_F64  # noqa: E402

DIMS = dict(vocab=20, embed=6, hidden=4, classes=3)
# test_jax_dynamic's list fold, in float32
LIST = LIST_F64.replace("float64", "float32") + """
def @main(%w: Tensor[(3), float32], %l: L) -> Tensor[(3), float32] { @fold(%w, %l) }
"""


@pytest.fixture(scope="module")
def steady():
    """The TreeLSTM's forward compiled for 16 rows, called twice (a steady state)."""
    mod = treelstm_module(**DIMS)
    params = init_params(np.random.default_rng(0), **DIMS)
    run = rl.compile(mod, backend="jax", capacity={"nodes": 16})
    tree = to_value(mod, random_tree(np.random.default_rng(0), 5, DIMS["vocab"]))
    table = run.node_tables()[7].encode(tree, 16)
    expected = rl.evaluate(mod, *params, tree, np.int32(1))
    for _ in range(2):
        np.testing.assert_allclose(run(*params, table, np.int32(1)), expected, rtol=1e-5)
        np.testing.assert_allclose(run(*params, tree, np.int32(1)), expected, rtol=1e-5)
    assert run.trace_count == 1
    return mod, params, run, tree, table


def test_a_wrong_shaped_argument_after_steady_calls_is_still_an_error(steady):
    _, params, run, _, table = steady
    with pytest.raises(EvaluationError, match=r"bad argument for parameter %E of @main: "
                                              r"expected Tensor\[\(20, 6\), float32\], got "
                                              r"Tensor\[\(3, 6\), float32\]"):
        run(params[0][:3], *params[1:], table, np.int32(1))
    with pytest.raises(EvaluationError, match=r"parameter %E of @main: expected Tensor\[\(20, "
                                              r"6\), float32\], got Tensor\[\(20, 6\), float64"):
        run(params[0].astype(np.float64), *params[1:], table, np.int32(1))
    assert run.trace_count == 1


def test_a_tree_over_capacity_after_steady_calls_is_still_an_error(steady):
    mod, params, run, _, _ = steady
    big = to_value(mod, random_tree(np.random.default_rng(1), 9, DIMS["vocab"]))   # 17 nodes
    with pytest.raises(EvaluationError, match=r"parameter %t of @main has 17 nodes, more than "
                                              r"the capacity of 16"):
        run(*params, big, np.int32(1))


def test_a_table_for_another_capacity_is_an_error_not_a_second_compilation(steady):
    _, params, run, tree, _ = steady
    table = run.node_tables()[7].encode(tree, 32)
    with pytest.raises(EvaluationError, match=r"parameter %t of @main: a node table of 32 rows, "
                                              r"but the program was compiled for a capacity of "
                                              r"16: encode it with node_tables\(\)\[7\]"):
        run(*params, table, np.int32(1))
    assert run.trace_count == 1


def test_a_table_of_another_adt_or_with_wrong_arrays_is_an_error(steady):
    _, params, run, _, table = steady
    mod = rl.infer_type(rl.parse(LIST))
    other = rl.compile(mod, backend="jax")
    nil, cons = mod.get_constructor("Nil"), mod.get_constructor("Cons")
    value = rl.ConstructorValue(cons, [np.ones(3, np.float32), rl.ConstructorValue(nil, [])])
    lst = other.node_tables()[1].encode(value, 16)
    with pytest.raises(EvaluationError, match=r"parameter %t of @main: a node table of L laid "
                                              r"out for another program; this program takes "
                                              r"\w+ tables"):
        run(*params, lst, np.int32(1))
    broken = NodeTable(table.spec, 16, table.count,
                       [table.leaves[0].astype(np.int64)] + table.leaves[1:])
    with pytest.raises(EvaluationError, match=r"parameter %t of @main: the node table's arrays "
                                              r"are \[int64\[16\]"):
        run(*params, broken, np.int32(1))
    assert run.trace_count == 1


def test_a_table_encoded_by_another_compilation_of_the_program_is_taken(steady):
    mod, params, run, tree, _ = steady
    again = rl.compile(mod, backend="jax", capacity={"nodes": 16})
    table = again.node_tables()[7].encode(tree, 16)
    np.testing.assert_allclose(run(*params, table, np.int32(1)),
                               rl.evaluate(mod, *params, tree, np.int32(1)), rtol=1e-5)
    assert run.trace_count == 1
