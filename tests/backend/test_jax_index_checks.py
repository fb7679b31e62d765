"""Index checks on the jax backend (issue 25, finding 9; backend/jax/index_checks.py): an index
out of range is an EvaluationError on both backends, where jax alone would clamp it."""
import numpy as np
import pytest

import relayish as rl

F64, I32 = "float64", "int32"


def _take_program():
    x, i = rl.var("x", shape=(3,), dtype=F64), rl.var("i", shape=(2,), dtype=I32)
    return rl.Function([x, i], rl.take(x, i))


def test_finding9_out_of_range_take_is_an_error_on_jax_too():
    f = _take_program()
    x, good, bad = np.arange(3.0), np.array([0, -1], I32), np.array([0, 5], I32)
    run = rl.compile(f)
    np.testing.assert_array_equal(run(x, good), [0.0, 2.0])
    with pytest.raises(rl.EvaluationError, match="take: index 5 is out of range"):
        rl.evaluate(f, x, bad)
    with pytest.raises(rl.EvaluationError,
                       match=r"take: an index is out of range for an axis of size 3 in "
                             r"take\(%x, %i\).*check_indices=False"):
        run(x, bad)
    np.testing.assert_array_equal(run(x, good), [0.0, 2.0])   # the program still runs
    # turned off, jax's own semantics: the index is clamped
    np.testing.assert_array_equal(rl.compile(f, check_indices=False)(x, bad), [0.0, 2.0])
    with pytest.raises(rl.RelayishError, match="check_indices= must be True or False"):
        rl.compile(f, check_indices="yes")


def test_finding9_gather_scatter_and_take_gradient_are_checked():
    data = rl.var("d", shape=(2, 3), dtype=F64)
    idx = rl.var("k", shape=(1, 3), dtype=I32)
    gather = rl.Function([data, idx], rl.sum(rl.gather(data, 0, idx)))
    scatter = rl.Function([data, idx], rl.scatter_add(data, idx, rl.ones((1, 3), F64)))
    x, i = rl.var("x", shape=(3,), dtype=F64), rl.var("i", dtype=I32)
    grad = rl.grad(rl.Function([x, i], rl.take(x, i) * 2.0))    # take and take_backward
    d, bad = np.ones((2, 3)), np.array([[0, 2, 1]], I32)
    for f, args, op in ((gather, (d, bad), "gather"), (scatter, (d, bad), "scatter_add"),
                        (grad, (np.ones(3), np.int32(-4)), "take")):
        with pytest.raises(rl.EvaluationError, match=f"{op}: index -?[24] is out of range"):
            rl.evaluate(f, *args)
        with pytest.raises(rl.EvaluationError, match=f"{op}: an index is out of range.* in "):
            rl.compile(f)(*args)


def test_finding9_checks_reach_into_branches_and_compiled_loops():
    # a take under a traced if, and inside the loop over a node table (a fold over a list of
    # word indices, as the RNN and TreeLSTM embed their words): checked where it runs
    x, i, c = rl.var("x", shape=(3,), dtype=F64), rl.var("i", dtype=I32), rl.var("c", dtype="bool")
    branch = rl.compile(rl.Function([x, i, c], rl.If(c, rl.take(x, i), rl.sum(x))))
    assert float(branch(np.arange(3.0), np.int32(7), False)) == 3.0     # not taken: no error
    with pytest.raises(rl.EvaluationError, match="take: an index is out of range"):
        branch(np.arange(3.0), np.int32(7), True)
    mod = rl.parse("""
    type List[a] { Cons(a, List[a]), Nil }
    def @read(%E: Tensor[(5, 2), float64], %xs: List[int32]) -> Tensor[(2), float64] {
      match (%xs) {
        Nil => zeros(shape=[2], dtype="float64"),
        Cons(%w, %rest) => { let %h = @read(%E, %rest); tanh(%h + take(%E, %w, axis=0)) }
      }
    }
    def @main(%E: Tensor[(5, 2), float64], %xs: List[int32]) -> float64 { sum(@read(%E, %xs)) }
    """)
    run = rl.compile(mod)
    E = np.arange(10.0).reshape(5, 2) / 10
    good, bad = ([np.int32(w) for w in words] for words in ([1, 4, 0], [1, 9, 0]))
    assert sorted(run.node_tables()) == [1]         # the list is a table: one loop
    np.testing.assert_allclose(run(E, rl.list_value(mod, good)),
                               rl.evaluate(mod, E, rl.list_value(mod, good)))
    with pytest.raises(rl.EvaluationError, match=r"take: an index is out of range .*take\(%E"):
        run(E, rl.list_value(mod, bad))
    assert run.trace_count == 1


def test_jax_function_keeps_jax_semantics_and_vmap_is_checked_per_example():
    # the pure jax function (for jax's transformations) is not checked: jax clamps there, as
    # documented (index_checks.py); rl.vmap's batch checks each example
    x, i = rl.var("x", shape=(3,)), rl.var("i", shape=(2,), dtype=I32)
    jf = rl.compile(rl.Function([x, i], rl.take(x, i))).jax_function()
    np.testing.assert_array_equal(np.asarray(jf(np.arange(3.0, dtype="float32"),
                                                np.array([0, 5], I32))), [0.0, 2.0])
    x, i = rl.var("x", shape=(3,), dtype=F64), rl.var("i", dtype=I32)
    vf = rl.vmap(rl.Function([x, i], rl.take(x, i)))
    with pytest.raises(rl.EvaluationError, match="example 1 of rl.vmap.*take: an index is out"):
        rl.compile(vf)(np.ones((2, 3)), np.array([0, 9], I32))
    np.testing.assert_array_equal(np.asarray(rl.compile(vf, check_indices=False)(
        np.ones((2, 3)), np.array([0, 9], I32))), [1.0, 1.0])


def test_programs_without_index_ops_are_traced_unchanged():
    x = rl.var("x", shape=(3,), dtype=F64)
    run = rl.compile(rl.Function([x], rl.sum(x * x)))
    assert not run.check_indices
    assert rl.compile(_take_program()).check_indices


_LEFT_FOLD_WITH_TAKE = '''type T { K0(int32), K1(T) }
def @walk(%E: Tensor[(5, 3), float64], %h: Tensor[(3), float64], %t: T) -> Tensor[(3), float64] {
  match (%t) {
    K0(%f1) => { take(%E, %f1, axis=0) + %h },
    K1(%f2) => { let %n3 = tanh(%h); @walk(%E, %n3, %f2) }
  }
}
def @main(%E: Tensor[(5, 3), float64], %t: T) -> float64 {
  sum(@walk(%E, zeros(shape=[3], dtype="float64"), %t))
}'''


def test_a_left_folds_exit_clause_checks_its_index():
    # found by CI's slow fuzz run: the check's flag cell made the left fold refuse to compile;
    # the fold now carries it, so the gradient compiles as a loop and a bad index still raises
    mod = rl.parse(_LEFT_FOLD_WITH_TAKE)
    k0, k1 = mod.get_constructor("K0"), mod.get_constructor("K1")

    def tree(i):
        return rl.ConstructorValue(k1, [rl.ConstructorValue(k1, [rl.ConstructorValue(k0, [np.int32(i)])])])
    E = np.arange(15.0).reshape(5, 3)
    run = rl.compile(rl.grad(mod), backend="jax")
    np.testing.assert_allclose(run(E, tree(2)), rl.evaluate(rl.grad(mod), E, tree(2)))
    assert "left fold" in run.explain()
    with pytest.raises(rl.EvaluationError, match="out of range for an axis of size 5"):
        run(E, tree(9))
