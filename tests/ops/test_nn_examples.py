"""examples/cnn.py trains (the loss falls under SGD) and examples/transformer.py's gradient
matches jax.grad."""
import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
import cnn  # noqa: E402
import transformer  # noqa: E402


def test_cnn_example_loss_goes_down():
    lines = []
    losses = cnn.train(steps=6, backend="interpreter", log=lines.append)
    assert len(losses) == 7 and losses[-1] < 0.8 * losses[0]
    assert lines[0].startswith("step   0  loss")


def test_cnn_model_file_round_trips():
    import relayish as rl
    mod = rl.parse(cnn.MODEL.read_text())
    rl.assert_structural_equal(rl.parse(rl.astext(mod)), mod)


@pytest.mark.slow      # about 3 s; the CNN example runs by default
def test_transformer_block_gradient_matches_jax():
    ours, theirs = transformer.gradients("interpreter")
    assert len(ours) == 11
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
