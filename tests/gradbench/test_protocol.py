"""The protocol round trip of benchmarks/gradbench/run.py: a fake eval process drives the tool
over pipes with GradBench's messages, as GradBench's eval programs do, and checks the answers."""
import json
import os
import subprocess
import sys

import pytest

RUN = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks", "gradbench",
                   "run.py")


class FakeEval:
    """Sends one message a line and reads one answer a line, checking the ids as GradBench's
    SingleModuleValidatedEval does."""

    def __init__(self):
        env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(RUN), os.pardir, os.pardir))
        self.tool = subprocess.Popen([sys.executable, RUN], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)
        self.id = 0

    def send(self, message):
        self.tool.stdin.write(json.dumps({"id": self.id} | message) + "\n")
        self.tool.stdin.flush()
        response = json.loads(self.tool.stdout.readline())
        assert response["id"] == self.id
        self.id += 1
        return response

    def close(self):
        self.tool.stdin.close()
        assert self.tool.wait(timeout=60) == 0


@pytest.fixture(scope="module")
def tool():
    fake = FakeEval()
    yield fake
    fake.close()


def test_start_and_define(tool):
    assert tool.send({"kind": "start", "eval": "lse"}) == {"id": 0, "tool": "relayish"}
    assert tool.send({"kind": "define", "module": "lse"}) == {"id": 1, "success": True}


def test_define_of_an_unknown_eval_fails(tool):
    response = tool.send({"kind": "define", "module": "nope"})
    assert response["success"] is False and "nope" in response["error"]


def test_evaluate_runs_and_times_each_run(tool):
    x = [0.5, -1.0, 2.0]
    response = tool.send({"kind": "evaluate", "module": "lse", "function": "gradient",
                          "input": {"x": x, "min_runs": 3, "min_seconds": 0},
                          "description": "n=3"})
    assert response["success"] is True
    e = [float(v) for v in (lambda z: z / z.sum())(__import__("numpy").exp(x))]
    assert response["output"] == pytest.approx(e, rel=1e-12)
    timings = response["timings"]
    assert len(timings) == 3
    assert all(t["name"] == "evaluate" and isinstance(t["nanoseconds"], int) and
               t["nanoseconds"] > 0 for t in timings)


def test_hello_takes_a_bare_number(tool):
    assert tool.send({"kind": "define", "module": "hello"})["success"]
    square = tool.send({"kind": "evaluate", "module": "hello", "function": "square", "input": 3.0})
    double = tool.send({"kind": "evaluate", "module": "hello", "function": "double", "input": 3.0})
    assert (square["output"], double["output"]) == (9.0, 6.0)
    assert len(square["timings"]) == 1


def test_a_failing_function_answers_with_an_error(tool):
    response = tool.send({"kind": "evaluate", "module": "lse", "function": "no_such",
                          "input": {"x": [1.0], "min_runs": 1, "min_seconds": 0}})
    assert response["success"] is False and "no_such" in response["error"]
    response = tool.send({"kind": "evaluate", "module": "lse", "function": "primal",
                          "input": {"min_runs": 1, "min_seconds": 0}})     # no "x"
    assert response["success"] is False and "KeyError" in response["error"]


def test_other_messages_get_their_id_back(tool):
    expected = {"id": tool.id}
    assert tool.send({"kind": "analysis", "of": 2, "valid": True}) == expected
