"""GradBench's own eval programs against relayish and GradBench's tools, one after another:
`python benchmarks/gradbench/compare.py GRADBENCH_DIR [--evals lse gmm ...] [--tools ...]`.

GRADBENCH_DIR is a checkout of github.com/gradbench/gradbench. Each eval program
(python/gradbench/gradbench/evals/<eval>/run.py, which validates answers against the C++
`manual` tool or a stored answer) is connected to each tool in turn, as GradBench's `gradbench`
command connects them: the eval's messages go to the tool, the tool's answers back. The table
has, per evaluate message: eval, function, size, valid (relayish's answer as the eval judged
it), relayish's median time, jax's, their ratio, PyTorch's, the manual tool's, and relayish's
first call (which includes parsing, AD and XLA compilation).

The evals need numpy, pydantic and dataclasses-json (the bench extra); the manual tool is
built with `make -C tools/manual` once, with nlohmann-json's json.hpp (the nlohmann-json
package on PyPI ships it) on the include path: compare.py does both when the binaries are
missing. A stored copy of GradBench may lack data files (lstm's text, two ht inputs):
compare.py says which and writes a generated substitute of the same size in their place.

Every tool runs on one thread (OMP/MKL/OPENBLAS_NUM_THREADS=1, XLA's CPU backend on one
thread), pinned to the same core, so that the tools compete on equal terms.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ALL_EVALS = ("hello", "lse", "llsq", "kmeans", "gmm", "ode", "det", "lstm", "ba", "ht",
             "saddle", "particle")
# the evals each of GradBench's tools implements (its tools/<tool>/evals.txt, python modules)
TOOL_EVALS = {
    "relayish": set(ALL_EVALS),
    "jax": {"hello", "lse", "gmm", "kmeans", "llsq", "ode"},
    "jax_blocking": {"lse", "gmm", "kmeans", "llsq", "ode"},
    "pytorch": {"hello", "lse", "gmm", "kmeans", "lstm", "ba", "ht"},
    "manual": {"hello", "lse", "gmm", "kmeans", "llsq", "ode", "lstm", "det", "ba", "ht"},
}


def tool_command(tool, gradbench_dir):
    if tool == "relayish":
        return [sys.executable, os.path.join(HERE, "run.py")]
    if tool == "jax_blocking":
        return [sys.executable, os.path.join(HERE, "jax_blocking.py"), gradbench_dir]
    package = os.path.join(gradbench_dir, "python", "gradbench", "gradbench")
    if tool == "manual":
        return [sys.executable, os.path.join(package, "cpp.py"), "manual"]
    return [sys.executable, os.path.join(package, "tools", tool, "run.py")]


def environment(gradbench_dir):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (os.path.join(gradbench_dir, "python", "gradbench"),
                    os.path.dirname(os.path.dirname(HERE)), env.get("PYTHONPATH")) if p)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = "1"
    env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    env["CXXFLAGS"] = manual_cxxflags()
    return env


def manual_cxxflags():
    """The flags of GradBench's cpp/common.mk plus nlohmann-json's headers from PyPI."""
    try:
        import nlohmann_json
        include = os.path.join(os.path.dirname(nlohmann_json.__file__), "include")
    except ImportError:
        include = next(iter(glob.glob(os.path.join(sys.prefix, "lib", "python*", "site-packages",
                                                   "nlohmann_json", "include"))), "")
    return (f"-std=c++17 -O3 -Wall -I../../cpp -I{include}/nlohmann -I{include} "
            "-Wno-unknown-pragmas")


def build_manual(gradbench_dir, env):
    """tools/manual/bin/<eval>: the evals validate against these."""
    missing = [e for e in sorted(TOOL_EVALS["manual"])
               if not os.path.exists(os.path.join(gradbench_dir, "tools", "manual", "bin", e))]
    if missing:
        print(f"building GradBench's manual tool ({', '.join(missing)})", file=sys.stderr)
        subprocess.run(["make", "-C", "tools/manual", "NATIVE=no"] + [f"bin/{e}" for e in missing],
                       cwd=gradbench_dir, env=env, check=True, stdout=subprocess.DEVNULL)


# ---- data files a stored copy may lack ----------------------------------------------------

def substitute_missing_data(gradbench_dir, evals):
    """Writes a generated stand-in for each missing data file the evals read, saying so."""
    if "lstm" in evals:
        path = os.path.join(gradbench_dir, "evals", "lstm", "data", "lstm_full.txt")
        if not os.path.exists(path):
            write_substitute_text(path, 8192)
    if "ht" in evals:
        for variant in ("complicated_big", "complicated_small"):
            path = os.path.join(gradbench_dir, "evals", "ht", "data", variant,
                                "hand12_t26_c100000.txt")
            if not os.path.exists(path):
                write_substitute_hand(path, npts=100000)


def write_substitute_text(path, chars):
    """`chars` characters of English-like text (letters, spaces, punctuation: 7-bit codes, as
    the original's), which is all the eval reads (its default -c goes up to 8192)."""
    import numpy as np
    rng = np.random.default_rng(29)
    words = ("the of and to in is was that for it with as his on be at by had this not are "
             "but from or have an they which one you were her all she there would their we "
             "him been has when who will more no if out so said what up its about into than "
             "them can only other new some could time these two may then do first any my now "
             "such like our over man me even most made after also did many before must "
             "through back years where much your way well down should because each just "
             "those people Mr how too little state good very make world still own see men "
             "work long get here between both life being under never day same another know").split()
    out, length = [], 0
    while length < chars:
        w = str(rng.choice(words)) + (", " if rng.random() < 0.08 else
                                      ". " if rng.random() < 0.06 else " ")
        out.append(w)
        length += len(w)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("".join(out)[:chars])
    print(f"missing {path}: wrote a generated text of {chars} characters in its place",
          file=sys.stderr)


def write_substitute_hand(path, npts):
    """An ht input of `npts` points in the format of its neighbours (hand11_*: 51,200 points):
    correspondences drawn among the model's triangles, points and barycentric us drawn as the
    neighbour's, the same 26 pose parameters."""
    import numpy as np
    folder = os.path.dirname(path)
    neighbour = sorted(glob.glob(os.path.join(folder, "hand11_*.txt")))[0]
    with open(neighbour) as f:
        n0, ntheta = (int(v) for v in f.readline().split())
        rows = [f.readline().split() for _ in range(n0)]
        us = np.array([[float(v) for v in f.readline().split()] for _ in range(n0)])
        theta = [f.readline().strip() for _ in range(ntheta)]
    rng = np.random.default_rng(29)
    pick = rng.integers(0, n0, size=npts)
    with open(path, "w") as f:
        f.write(f"{npts} {ntheta}\n")
        for i in pick:
            f.write(" ".join(rows[i]) + "\n")
        for i in pick:
            f.write(f"{us[i, 0]!r} {us[i, 1]!r}\n")
        f.write("\n".join(theta) + "\n")
    print(f"missing {path}: wrote {npts} points resampled from {os.path.basename(neighbour)} "
          "in its place", file=sys.stderr)


# ---- running one eval against one tool ------------------------------------------------------

def run_pair(gradbench_dir, env, eval_name, eval_args, tool, timeout):
    """[{function, size, success, valid, timings(ns)}...] for each evaluate message."""
    eval_cmd = [sys.executable, os.path.join("python", "gradbench", "gradbench", "evals",
                                             eval_name, "run.py")] + eval_args
    ev = subprocess.Popen(eval_cmd, cwd=gradbench_dir, env=env, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True)
    to = subprocess.Popen(tool_command(tool, gradbench_dir), cwd=gradbench_dir, env=env,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    timer = threading.Timer(timeout, lambda: (ev.kill(), to.kill()))
    timer.start()
    results, pending = [], {}
    try:
        for line in ev.stdout:
            message = json.loads(line)
            kind = message.get("kind")
            if kind == "evaluate":
                pending[message["id"]] = {"function": message["function"],
                                          "size": message.get("description", "")}
            to.stdin.write(line)
            to.stdin.flush()
            if kind == "end":
                break
            answer = to.stdout.readline()
            if not answer:
                break
            response = json.loads(answer)
            if kind == "evaluate":
                row = pending[message["id"]]
                row["success"] = response.get("success", False)
                row["timings"] = [t["nanoseconds"] for t in response.get("timings") or []]
                row["valid"] = False
                row["error"] = response.get("error")
                results.append(row)
            elif kind == "analysis":
                row = next((r for r in results if r is pending.get(message["of"])), None)
                if row is not None:
                    row["valid"] = message["valid"]
                    if not message["valid"]:
                        row["error"] = message.get("error")
            ev.stdin.write(answer)
            ev.stdin.flush()
    except (BrokenPipeError, ValueError):
        pass
    finally:
        timer.cancel()
        for p in (ev, to):
            try:
                p.stdin.close()
            except BrokenPipeError:
                pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
    return results


# ---- the table ------------------------------------------------------------------------------

def median_ms(row):
    if not row or not row.get("success") or not row.get("timings"):
        return None
    times = row["timings"][1:] or row["timings"]      # the first call compiles
    return statistics.median(times) / 1e6


def fmt(ms):
    return "-" if ms is None else f"{ms:.3f}" if ms < 10 else f"{ms:.1f}"


def table(results, tools):
    """Markdown rows from {tool: {eval: [rows]}}."""
    header = ["eval", "function", "size", "valid", "relayish ms", "jax ms", "ratio",
              "jax as shipped ms", "PyTorch ms", "manual ms", "relayish first call ms"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for eval_name, rows in results.get("relayish", {}).items():
        for row in rows:
            def other(tool):
                theirs = results.get(tool, {}).get(eval_name, [])
                match = [r for r in theirs if r["function"] == row["function"]
                         and r["size"] == row["size"]]
                return median_ms(match[0]) if match else None
            ours, jax_ms = median_ms(row), other("jax_blocking")
            ratio = f"{ours / jax_ms:.2f}" if ours is not None and jax_ms else "-"
            first = fmt(row["timings"][0] / 1e6) if row.get("timings") else "-"
            valid = "yes" if row.get("valid") else ("no" if row.get("success") else "error")
            lines.append("| " + " | ".join([eval_name, row["function"], row["size"], valid,
                                            fmt(ours), fmt(jax_ms), ratio, fmt(other("jax")),
                                            fmt(other("pytorch")), fmt(other("manual")),
                                            first]) + " |")
    return "\n".join(lines)


def summary(results):
    """Per eval, the geometric mean over its evaluations of relayish's median over each other
    tool's (where both ran and relayish's answer was valid): the issue's goal is <= 1.0 against
    jax and PyTorch, <= 2.0 against manual."""
    import math
    lines = ["| eval | vs jax | vs PyTorch | vs manual | first call vs jax's |", "|---|---|---|---|---|"]
    for eval_name, rows in results.get("relayish", {}).items():
        cells = []
        for tool, first in (("jax_blocking", False), ("pytorch", False), ("manual", False),
                            ("jax_blocking", True)):
            ratios = []
            for row in rows:
                theirs = [r for r in results.get(tool, {}).get(eval_name, [])
                          if r["function"] == row["function"] and r["size"] == row["size"]]
                if not (theirs and row.get("valid") and theirs[0].get("timings")):
                    continue
                if first:
                    ours, other = row["timings"][0], theirs[0]["timings"][0]
                else:
                    ours, other = median_ms(row), median_ms(theirs[0])
                if ours and other:
                    ratios.append(ours / other)
            cells.append(f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f} "
                         f"({len(ratios)})" if ratios else "-")
        lines.append(f"| {eval_name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gradbench_dir")
    parser.add_argument("--evals", nargs="+", default=list(ALL_EVALS), choices=ALL_EVALS)
    parser.add_argument("--tools", nargs="+",
                        default=["relayish", "jax_blocking", "jax", "pytorch", "manual"],
                        choices=sorted(TOOL_EVALS))
    parser.add_argument("--eval-args", action="append", default=[], metavar="EVAL=ARGS",
                        help='arguments for one eval program, e.g. --eval-args "lse=-n 2500 5000"')
    parser.add_argument("--min-seconds", type=float, default=None,
                        help="passed to every eval (GradBench's default is 1)")
    parser.add_argument("--min-runs", type=int, default=3,
                        help="passed to every eval (GradBench's default is 1; the medians "
                             "leave the first run out, which compiles)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per eval and tool")
    parser.add_argument("--json", help="write the raw results here")
    parser.add_argument("--merge", nargs="+", default=[], metavar="JSON",
                        help="print the table of these results files (from --json) and exit")
    args = parser.parse_args(argv)
    if args.merge:
        merged = {}
        for path in args.merge:
            with open(path) as f:
                for tool, evals in json.load(f).items():
                    merged.setdefault(tool, {}).update(evals)
        print(table(merged, None))
        print()
        print(summary(merged))
        return
    gradbench_dir = os.path.abspath(args.gradbench_dir)
    extra = {}
    for item in args.eval_args:
        name, _, rest = item.partition("=")
        extra[name] = rest.split()
    env = environment(gradbench_dir)
    build_manual(gradbench_dir, env)
    substitute_missing_data(gradbench_dir, args.evals)
    results = {}
    for eval_name in args.evals:
        eval_args = extra.get(eval_name, [])
        if eval_name != "hello":
            eval_args = eval_args + ["--min-runs", str(args.min_runs)]
            if args.min_seconds is not None:
                eval_args = eval_args + ["--min-seconds", str(args.min_seconds)]
        for tool in args.tools:
            if eval_name not in TOOL_EVALS[tool]:
                continue
            start = time.time()
            rows = run_pair(gradbench_dir, env, eval_name, eval_args, tool, args.timeout)
            results.setdefault(tool, {})[eval_name] = rows
            print(f"{eval_name} / {tool}: {len(rows)} evaluations in {time.time() - start:.0f} s",
                  file=sys.stderr)
            if tool == "relayish":
                for row in rows:
                    if not row.get("valid") and row.get("error"):
                        print(f"  {row['function']} {row['size']}: {row['error'][-600:]}",
                              file=sys.stderr)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f)
    print(table(results, args.tools))
    print()
    print(summary(results))


if __name__ == "__main__":
    main()
