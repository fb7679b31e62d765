"""examples/interop.py runs (in a subprocess: it turns on jax's 64-bit mode for its process)
and its checks hold: relayish's gradient through a jax while loop against finite differences,
training through rl.to_jax, a PyTorch CNN's parameter gradients against autograd."""
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("jax")

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow          # docs/interop.md runs the same steps by default
def test_the_interop_example_runs_and_its_checks_hold():
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "interop.py")],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "trained with" in done.stdout and "loss" in done.stdout
    try:
        import torch  # noqa: F401
    except ImportError:
        return
    assert "largest difference" in done.stdout
