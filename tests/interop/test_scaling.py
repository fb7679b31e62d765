"""Scaling out through jax (examples/data_parallel.py, docs/scaling.md): a data-parallel
training step of a relayish-differentiated model, sharded over simulated CPU devices and over
two processes (jax.distributed on a free localhost port), equals the same steps on one device.
Each runs in subprocesses: the device count must be set before jax starts."""
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("jax")

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "data_parallel.py"


def _run(*args, timeout):
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)
    return done.returncode, done.stdout + done.stderr


def test_sharded_over_simulated_devices_equals_one_device():
    code, out = _run("--devices", "2", timeout=300)
    assert code == 0, out
    assert "2 devices: max difference from one device" in out


@pytest.mark.slow
def test_two_processes_with_jax_distributed_equal_one_device():
    # the launcher waits at most 240 s for its processes and kills what is left
    code, out = _run("--processes", "2", timeout=300)
    assert code == 0, out
    lines = [line for line in out.splitlines() if "max difference from one device" in line]
    assert len(lines) == 2 and all(line.startswith("process ") for line in lines), out
