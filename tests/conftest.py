"""Shared pytest setup: hypothesis profiles.

"ci" (the default) keeps property tests fast (and fixed under CI=true: 15 examples where a test
names no count of its own); "dev" runs more examples locally:
    HYPOTHESIS_PROFILE=dev python -m pytest tests/ir
"""
import os
import sys

from hypothesis import HealthCheck, settings

# tests/strategies.py is imported as `strategies` by the test modules of every directory
sys.path.insert(0, os.path.dirname(__file__))

_SLOW_DATA = [HealthCheck.too_slow, HealthCheck.data_too_large]

# under CI (CI=true) the examples are derandomized: a submission lands or fails on its own
# merits, not on a draw; local runs keep exploring new examples
settings.register_profile("ci", max_examples=15, deadline=None, derandomize=bool(os.environ.get("CI")),
                          suppress_health_check=_SLOW_DATA, print_blob=True)
settings.register_profile("dev", max_examples=300, deadline=None,
                          suppress_health_check=_SLOW_DATA, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
