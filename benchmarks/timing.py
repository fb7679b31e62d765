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


def interleaved_best(runners, items, rounds):
    """{name: best ms per item}: each runner (run(k) for item k) warmed up once, then `rounds`
    rounds in which the runners take turns item by item (a slow phase of a shared machine
    falls on all of them), CPU time of the process, the best round's mean per item."""
    for run in runners.values():        # warm-up: first-call costs are not steady state
        run(0)
    best = dict.fromkeys(runners, float("inf"))
    for _ in range(rounds):
        spent = dict.fromkeys(runners, 0.0)
        for k in range(items):
            for name, run in runners.items():
                t0 = time.process_time()
                run(k)
                spent[name] += time.process_time() - t0
        for name in runners:
            best[name] = min(best[name], spent[name] / items * 1e3)
    return best


def print_against(best, reference, what="PyTorch"):
    """One line per runner: its ms per item and its ratio to `reference`'s."""
    ref_ms = best[reference]
    for name, ms in best.items():
        print(f"  {name:38s} {ms:8.2f} ms   {ms / ref_ms:5.2f}x {what}")
    return ref_ms
