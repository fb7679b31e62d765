"""Timing helpers shared by the benchmark scripts (each adds this folder to sys.path by being
run as `python benchmarks/<name>.py`)."""
import time


def best_of(fn, repeat):
    """Best CPU time of `repeat` runs: process time, so that other processes sharing the
    machine's cores do not count (on an idle machine it equals wall time)."""
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)
