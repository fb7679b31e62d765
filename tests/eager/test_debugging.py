"""re.debugger(): the pending recorded program in relayish's debugger, bound to its inputs."""
import numpy as np
import pytest

from relayish import eager as re


def test_the_debugger_steps_through_the_pending_program_and_leaves_it_pending():
    w = re.tensor(np.array([[1.0, -2.0], [0.5, 3.0], [2.0, 0.0]]))
    x = re.tensor(np.arange(3.0))
    h = re.tanh(x @ w)
    y = (h * 2.0).sum()
    dbg = re.debugger()
    names = []
    while not dbg.finished:
        names.append(dbg.where().binding)
        dbg.step()
    assert "matmul" in " ".join(n or "" for n in names)
    want = np.tanh(np.arange(3.0) @ np.array([[1.0, -2.0], [0.5, 3.0], [2.0, 0.0]]))
    # the results are the pending outputs: the tensors still alive, h and y
    np.testing.assert_allclose(dbg.result[0], want)
    np.testing.assert_allclose(dbg.result[1], 2.0 * want.sum())
    assert re.stats()["pending"] > 0          # stepping did not run the recorded program
    assert float(y) == pytest.approx(2.0 * want.sum())


def test_the_debugger_reads_earlier_results_as_inputs():
    a = re.tensor(np.array([1.0, 2.0]))
    b = a * 3.0
    float(b.sum())                    # b is computed now: an input of what follows
    c = b + 1.0
    dbg = re.debugger()
    dbg.cont()
    np.testing.assert_allclose(dbg.result[0], [4.0, 7.0])
    np.testing.assert_allclose(np.asarray(c), [4.0, 7.0])
