"""The interop tests compare with jax at float64: each runs in jax's 64-bit mode."""
import pytest


@pytest.fixture(autouse=True)
def x64():
    jax = pytest.importorskip("jax")
    with jax.enable_x64(True):
        yield
