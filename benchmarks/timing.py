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


def interleaved_best(runners, items, rounds, epochs=False):
    """{name: best ms per item}: each runner (run(k) for item k) warmed up once, then `rounds`
    rounds in which the runners take turns (a slow phase of a shared machine falls on all of
    them), CPU time of the process, the best round's mean per item.

    Turns are item by item, so that every call follows another library's work (cold caches,
    and jax's CPU threads parked: see notes/jax-backend.md), or with `epochs` the whole data
    set at a turn, each runner calling itself back to back as a training loop does."""
    for run in runners.values():        # warm-up: first-call costs are not steady state
        run(0)
    best = dict.fromkeys(runners, float("inf"))
    for _ in range(rounds):
        spent = dict.fromkeys(runners, 0.0)
        turns = ([[(name, k) for k in range(items)] for name in runners] if epochs else
                 [[(name, k) for name in runners] for k in range(items)])
        for turn in turns:
            for name, k in turn:
                t0 = time.process_time()
                runners[name](k)
                spent[name] += time.process_time() - t0
        for name in runners:
            best[name] = min(best[name], spent[name] / items * 1e3)
    return best


def print_against(best, reference, what="PyTorch", also=None, also_heading=""):
    """One line per runner: its ms per item and its ratio to `reference`'s; with `also` (a
    second {name: ms} of the same runners, measured another way) its figures beside them."""
    ref_ms = best[reference]
    if also is not None:
        print(f"  {'':38s} {'epochs':>20s}   {also_heading:>20s}")
    for name, ms in best.items():
        line = f"  {name:38s} {ms:8.2f} ms   {ms / ref_ms:5.2f}x {what}"
        if also is not None:
            line += f"   {also[name]:8.2f} ms   {also[name] / also[reference]:5.2f}x {what}"
        print(line)
    return ref_ms
