"""Fixtures shared by the recording tests."""
import jax
import pytest

from relayish import eager as re


@pytest.fixture(autouse=True)
def _nothing_pending():
    """Every recording test starts and ends with nothing pending (an earlier test's leftovers
    would change what a run computes and how it is keyed)."""
    re.run()
    yield
    re.run()


@pytest.fixture
def fresh_x64():
    """Nothing pending before or after the test, which runs with float64 enabled (its jax
    references are float64) without touching jax's global configuration."""
    re.run()
    with jax.enable_x64(True):
        yield
    re.run()
