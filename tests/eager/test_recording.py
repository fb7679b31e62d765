"""relayish.eager: recording ordinary Python on tensors as a relayish program (issue 15).

Recorded programs equal their builder-made twins; values match numpy; Python control flow on
inspected values; freed tensors leave the pending program; record-time errors name the line.
"""
import inspect

import numpy as np
import pytest

import relayish as rl
from relayish import eager as re
from relayish.eager import graph
from relayish.eager import ops as eager_ops
from relayish.ir.op import list_ops


def _line_of(marker):
    source, start = inspect.getsourcelines(inspect.currentframe().f_back.f_code)
    return start + next(i for i, line in enumerate(source) if marker in line)


def test_recorded_program_equals_its_builder_twin():
    w = re.tensor(np.ones((3, 2)))
    x = re.tensor(np.arange(3.0))
    y = re.tanh(x @ w).sum()
    recorded = re.pending()

    xv = rl.var("x", shape=(3,), dtype="float64")
    wv = rl.var("w", shape=(3, 2), dtype="float64")
    sb = rl.ScopeBuilder()
    m = sb.let(("m", rl.TensorType((2,), "float64")), rl.matmul(xv, wv))
    t = sb.let(("t", rl.TensorType((2,), "float64")), rl.tanh(m))
    s = sb.let(("s", rl.TensorType((), "float64")), rl.sum(t))
    sb.ret(rl.Tuple([s]))
    twin = rl.Function([xv, wv], sb.get())
    rl.assert_structural_equal(recorded, twin)
    assert float(y) == pytest.approx(np.tanh(np.arange(3.0) @ np.ones((3, 2))).sum())
    assert re.stats()["pending"] == 0


def test_python_scalars_take_the_tensor_dtype_and_are_parameters():
    x = re.tensor(np.arange(3.0))
    y = x * 2.0 + 1
    prog = re.pending()
    assert [p.type_annotation for p in prog.params] == [
        rl.TensorType((3,), "float64"), rl.TensorType((), "float64"),
        rl.TensorType((), "float64")]
    np.testing.assert_allclose(np.asarray(y), np.arange(3.0) * 2 + 1)


def test_every_registered_op_is_an_eager_function():
    for name in list_ops():
        if name.startswith("nn."):
            assert callable(getattr(re.nn, name[3:]))
        else:
            assert callable(getattr(eager_ops, name)), name


def test_an_op_registered_later_is_recorded_too():
    with rl.ir.op.registered("eager_twice", 1, type_rule=lambda ts, attrs: ts[0],
                             impl=lambda xp, x: x * 2) as _:
        t = re.tensor(np.ones(2))
        np.testing.assert_array_equal(np.asarray(re.eager_twice(t) + t.eager_twice()), [4, 4])
    with pytest.raises(AttributeError):
        re.no_such_op
    with pytest.raises(AttributeError):
        t.no_such_op


def test_operators_methods_and_indexing_match_numpy():
    a = np.arange(12.0).reshape(3, 4) / 7
    b = np.linspace(-1, 1, 4)
    ta, tb = re.tensor(a), re.tensor(b)
    cases = [
        (ta + tb, a + b), (ta - 1.5, a - 1.5), (2.0 - ta, 2.0 - a), (ta * tb, a * b),
        (ta / 2.0, a / 2.0), (1.0 / (ta + 1), 1.0 / (a + 1)), (-ta, -a), (ta ** 2.0, a ** 2),
        (ta @ tb, a @ b), (ta.T, a.T), (ta.sum(axis=0), a.sum(axis=0)), (ta.mean(), a.mean()),
        (ta.max(axis=1), a.max(axis=1)), (ta.reshape(4, 3), a.reshape(4, 3)),
        (ta.reshape((2, -1)), a.reshape(2, -1)), (abs(tb), np.abs(b)), (re.exp(tb), np.exp(b)),
        (ta < 0.5, a < 0.5), (ta == ta, a == a), (tb.exp(), np.exp(b)),
        (ta[1], a[1]), (ta[1:, 2], a[1:, 2]), (ta[..., :2], a[..., :2]), (ta[-1, -1], a[-1, -1]),
        (ta[[0, 2]], a[[0, 2]]), (re.concatenate([ta, ta], axis=0), np.concatenate([a, a])),
        (re.where(ta > 0.5, ta, 0.0), np.where(a > 0.5, a, 0.0)),
        (re.softmax(tb), np.exp(b) / np.exp(b).sum()),
        (np.ones(4) * tb, b),       # numpy on the left defers to the recorded tensor
    ]
    for got, want in cases:
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
    pieces = re.split(ta, 2, axis=1)
    assert isinstance(pieces, tuple) and len(pieces) == 2
    np.testing.assert_allclose(np.asarray(pieces[1]), a[:, 2:])


def test_inspecting_runs_the_pending_program_once():
    x = re.tensor(np.arange(3.0))
    y = (x * x).sum()
    z = y + 1.0
    assert re.stats()["pending"] == 3
    assert float(z) == 6.0
    assert re.stats()["pending"] == 0
    assert float(y) == 5.0          # computed in the same run
    assert y.item() == 5.0 and int(z) == 6 and "5" in repr(y)


def test_python_control_flow_on_inspected_values():
    x = re.tensor(np.array([3.0, -1.0]))
    steps = 0
    while float((x * x).sum()) > 0.01:      # bool/float inspect and branch in Python
        x = x * 0.5
        steps += 1
    assert steps == 5          # 10 / 4**5 < 0.01
    y = x if bool(x[0] > 0.0) else -x
    np.testing.assert_allclose(np.asarray(y), np.array([3.0, -1.0]) / 32)


def test_a_freed_tensor_leaves_the_pending_program():
    x = re.tensor(np.arange(3.0))
    a = re.exp(x)
    b = x + 1.0
    assert len(re.pending().params) == 2 and re.stats()["pending"] == 2
    del a
    prog = re.pending()
    assert re.stats()["pending"] == 1
    assert "exp" not in rl.astext(prog)
    np.testing.assert_allclose(np.asarray(b), np.arange(3.0) + 1)


def test_an_intermediate_without_handle_is_computed_not_returned():
    x = re.tensor(np.arange(3.0))
    y = re.tanh(x * 2.0).sum()
    prog = re.pending()
    assert "tanh" in rl.astext(prog)
    assert float(y) == pytest.approx(np.tanh(np.arange(3.0) * 2).sum())


def test_shape_mismatch_names_the_recording_line():
    a = re.tensor(np.ones((2, 3)))
    b = re.tensor(np.ones((4,)))
    with pytest.raises(rl.TypeCheckError) as err:
        a + b  # the line the error names
    line = _line_of("a + b  # the line the error names")
    assert f"test_recording.py:{line}" in str(err.value)
    assert "a + b" in str(err.value)
    with pytest.raises(rl.TypeCheckError, match=r"test_recording.py:\d+: .*re.matmul"):
        re.matmul(a, b)


def test_a_refused_record_leaves_no_parameter_behind():
    a = re.tensor(np.ones((2, 3)))
    c = re.tensor(np.ones(3))
    for _ in range(3):                           # interpreted, compiled, then a cache hit
        kept = a * 2.0                           # a and 2.0: the segment's parameters
        for bad in (re.tensor(np.ones((4,))), re.tensor(np.ones((5,)))):
            with pytest.raises(rl.TypeCheckError):
                kept + bad                       # bad is read first here, then refused
        total = (kept + c).sum()
        assert len(graph.STATE.params) == 3      # a, 2.0, c: no refused argument
        assert float(total) == pytest.approx(18.0)


@pytest.mark.parametrize("index", [
    "[::2]", "[:, ::2]", "[..., ::-1]", "[::-1, 1:, ::-2]", "[None]", "[:, None]", "[..., None]",
    "[None, 1, ::2, None]", "[1, None, :, 3]", "[0, 2:0:-1]", "[:, 3:1]", "[None, ...]",
    "[:, :, 5:1:-2]", "[1::3, -1]"])
def test_steps_and_new_axes_index_as_numpy_does(index):
    a = np.arange(24.0).reshape(2, 3, 4) / 7
    got = np.asarray(eval("re.tensor(a)" + index))
    want = eval("a" + index)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=0)


def test_a_stepped_slices_gradient_matches_jax():
    jax = pytest.importorskip("jax")
    a = np.arange(24.0).reshape(2, 3, 4) / 7

    def f(w):
        return (w[::-1, 1:, ::2] ** 2).sum() + w[None, 0, ::3].sum()
    w = re.tensor(a)
    (g,) = re.grad(f(w), wrt=[w])
    with jax.enable_x64(True):
        want = jax.grad(f)(jax.numpy.asarray(a))
    np.testing.assert_allclose(np.asarray(g), np.asarray(want), rtol=1e-12)


def test_user_mistakes_are_relayish_errors():
    a = re.tensor(np.ones((2, 3)))
    with pytest.raises(rl.RelayishError, match="boolean mask selects a data-dependent"):
        a[a > 0.5]
    with pytest.raises(rl.RelayishError, match="boolean masks are not recorded"):
        a[:, [True, False, True]]
    with pytest.raises(rl.RelayishError, match="has 3 entries for a tensor of rank 2"):
        a[0, None, 1, 2]
    with pytest.raises(rl.RelayishError, match="out of range"):
        a[5]
    with pytest.raises(rl.RelayishError, match="not a tensor, a number or an array"):
        a + "x"
    with pytest.raises(rl.RelayishError, match="item"):
        a.item()
    with pytest.raises(rl.RelayishError, match="a string"):
        re.tensor("abc")
    with pytest.raises(rl.RelayishError):
        re.sum(a, axis=7)


def test_the_pending_program_runs_in_the_interpreter_then_compiled():
    re.clear_cache()
    for k in range(4):
        x = re.tensor(np.full(3, float(k)))
        y = (x * x + 1.0).sum()
        assert float(y) == 3 * (k * k + 1)
    s = re.stats()
    assert (s["runs"], s["misses"], s["hits"], s["compiles"]) == (4, 1, 3, 1)
    assert s["hit_rate"] == 0.75
