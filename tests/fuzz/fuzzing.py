"""What the fuzzers share: how many examples each runs, and a guard on time and memory.

The default suite runs every fuzzer briefly (derandomized under CI=true by the "ci" profile of
tests/conftest.py); `RELAYISH_FUZZ=long python -m pytest tests/fuzz` runs thousands of examples,
on fresh random draws. The counts below are the only place either figure is written.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import time

import pytest
from hypothesis import HealthCheck, settings

LONG = os.environ.get("RELAYISH_FUZZ", "").strip().lower() == "long"

# examples per fuzz test: (the suite's count, which the default run halves and -m slow runs in
# full: tests/conftest.py; RELAYISH_FUZZ=long)
EXAMPLES = {
    "random_text": (40, 20_000),
    "mutated_text": (30, 20_000),
    "mutated_expr": (15, 5_000),
    "literals": (30, 10_000),
    "builder_nested_misuse": (30, 5_000),
    "differential_programs": (12, 1_000),
    "differential_gradients": (6, 300),
    "differential_edge_chains": (20, 5_000),
    # test_dynamic_loops.py: each example compiles a program with jax (~0.5-1 s)
    "dynamic_programs": (6, 300),
    "dynamic_let_ifs": (4, 200),
    "dynamic_vmap": (4, 200),
    "dynamic_nested": (4, 200),
    # the gradient of a nested loop (~5-15 s to compile each on a loaded 2-core machine)
    "dynamic_nested_gradients": (2, 100),
    # test_eager_vs_torch.py: each example runs 3 steps, compiling with jax from the second
    "eager_vs_torch": (6, 500),
    # test_builder_vs_eager.py: each example runs eager's recorder once (jax) and the interpreter
    "builder_vs_eager": (8, 500),
}

# nesting depths of the deep-nesting cases (the parser stops at 30,000 levels or brackets).
# 3,000 and 31,000 (past the parser's limit; tests/ir/test_parser.py checks the rejection by
# default) run under `-m slow`; 1,200 is already past Python's recursion limit
DEEP_NESTING_DEPTHS = ((100, 1_200, pytest.param(3_000, marks=pytest.mark.slow),
                        pytest.param(31_000, marks=pytest.mark.slow))
                       if not LONG else (100, 1_000, 3_000, 5_000, 9_000, 31_000, 100_000))
FLAT_CHAIN_LENGTH = 100_000 if LONG else 10_000     # terms of `1f + 1f + ...`

# per example: a run past this, or a process grown by this much, is a runaway (a hang, an
# endless iteration) and fails the example instead of eating the machine
TIME_LIMIT_S = 5.0
MEMORY_LIMIT_MB = 500


def fuzz_settings(name, **overrides):
    """The hypothesis settings of the fuzz test `name` (a key of EXAMPLES)."""
    short, long = EXAMPLES[name]
    extra = {"derandomize": False} if LONG else {}   # a long run explores; the "ci" profile fixes
    return settings(max_examples=long if LONG else short, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much],
                    **extra, **overrides)


class Runaway(AssertionError):
    """A guarded call ran past its time or memory budget."""


class _Tripped(BaseException):
    """Raised from the signal handler: a BaseException, so no `except Exception` in the code
    under test swallows it on the way out."""


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _start_jax_backend():
    """Start jax's default backend and run one operation on it before a budget's baseline is
    taken: on a GPU machine the driver and libraries add hundreds of MB of resident memory
    once per process, which would otherwise count against whichever guarded body came first."""
    global _BACKEND_STARTED
    if not _BACKEND_STARTED:
        import jax.numpy as jnp
        (jnp.zeros(2) + 1).block_until_ready()
        _BACKEND_STARTED = True


_BACKEND_STARTED = False


@contextlib.contextmanager
def bounded(what, seconds=TIME_LIMIT_S, memory_mb=MEMORY_LIMIT_MB):
    """Run the body under a time and memory budget; past either, raise Runaway naming `what`.

    A timer signal looks at the clock and the process's resident memory every 20 ms, so an
    endless loop of node building (an Expr iterated by __getitem__) stops at a few hundred MB.
    Only the main thread gets signals; elsewhere (or without /proc) the body runs unguarded.
    """
    if not hasattr(signal, "setitimer") or not os.path.exists("/proc/self/statm"):
        yield
        return
    _start_jax_backend()
    start, cpu, base = time.monotonic(), time.process_time(), _rss_bytes()
    limit = base + memory_mb * 2**20
    reason, stopped = [], {}

    def check(signum, frame):
        # CPU time, so a loaded machine does not fail a slow but finite run; wall time as a
        # backstop for a blocked one
        if not reason:
            if time.process_time() - cpu > seconds or time.monotonic() - start > 4 * seconds:
                reason.append(f"ran past {seconds:g} s")
            elif _rss_bytes() > limit:
                reason.append(f"grew memory by more than {memory_mb} MB")
        if reason:
            _interrupt()

    def _interrupt():
        # relayish runs deep work in a helper thread (run_deep) while this one waits in join():
        # stop that thread, whose error run_deep hands back here. Raising here instead would
        # leave it running with the recursion limit restored under it: a fatal stack overflow.
        # Once per thread (a second one could land in run_deep's own handler); again after a
        # second if the first was lost.
        deep = [t for t in threading.enumerate() if t.name == "relayish-deep" and t.is_alive()]
        if deep:
            now = time.monotonic()
            for t in deep:
                if now - stopped.get(t.ident, -1e9) > 1.0:
                    stopped[t.ident] = now
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident),
                                                               ctypes.py_object(_Tripped))
            return
        signal.setitimer(signal.ITIMER_REAL, 0)
        raise _Tripped

    try:
        previous = signal.signal(signal.SIGALRM, check)
    except ValueError:              # not the main thread
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, 0.02, 0.02)
    try:
        yield
    except _Tripped:
        raise Runaway(f"{what}: {reason[0]}") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
