"""Shared pytest setup: hypothesis profiles.

"ci" (the default) keeps property tests fast (and fixed under CI=true: 15 examples where a test
names no count of its own); "dev" runs more examples locally:
    HYPOTHESIS_PROFILE=dev python -m pytest tests/ir

The default run leaves to `-m slow` the cases tests/default_run.py names by their measured
cost (marked here), beside the tests marked slow in their own files.

The default run (`-m "not slow"`) gives every property test about half its examples (8 where it
names 15; see light_examples). A run that selects the slow tests (`-m slow`, `-m "slow or not
slow"`), RELAYISH_FUZZ=long or a profile other than "ci" gives them their full counts; under
`-m slow` the property tests count as slow, so CI's `-m slow` run repeats each one at its full
count.
"""
import math
import os
import sys

import pytest
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


def light_examples(count):
    """The examples a property test naming `count` runs by default: about half, at least 2."""
    return min(count, max(2, math.ceil(count / 2)))


def _selects_slow(config):
    expression = (config.getoption("markexpr") or "").strip()
    return "slow" in expression and expression != "not slow"


@pytest.hookimpl(tryfirst=True)     # before the -m selection, so an added slow mark counts
def pytest_collection_modifyitems(config, items):
    from default_run import leaves_to_slow      # tests/default_run.py: cases left by cost
    for item in items:
        if leaves_to_slow(item.nodeid):
            item.add_marker(pytest.mark.slow)
    selects_slow = _selects_slow(config)
    full = (selects_slow or os.environ.get("RELAYISH_FUZZ", "").strip().lower() == "long"
            or os.environ.get("HYPOTHESIS_PROFILE", "ci") != "ci")     # "dev" asks for more
    for item in items:
        test = getattr(item, "obj", None)
        if not getattr(test, "is_hypothesis_test", False):
            continue
        if selects_slow:
            item.add_marker(pytest.mark.slow)
        if full:
            continue
        # @given stores the settings it runs with on the test and reads them at call time;
        # hypothesis's public @settings refuses a second application, so the light count is set
        # on that attribute. The full settings are kept aside: parametrized items share one
        # function and each must see the same light count, not half of half.
        named = getattr(test, "_relayish_full_settings", None)
        if named is None:
            named = test._hypothesis_internal_use_settings
            test._relayish_full_settings = named
        test._hypothesis_internal_use_settings = settings(
            named, max_examples=light_examples(named.max_examples))
