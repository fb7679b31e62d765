"""relayish as a GradBench tool: `python benchmarks/gradbench/run.py [--multithreaded]`.

Speaks GradBench's protocol on stdin/stdout as its python tools do (tools/jax/run.py): one JSON
message a line, each answered by one JSON line with the same "id":
  start    -> {"id", "tool": "relayish"}
  define   -> {"id", "success", "error"?}: imports evals/<module>.py (the eval's functions)
  evaluate -> {"id", "success", "output", "timings": [{"name": "evaluate", "nanoseconds"}...]}
              or {"id", "success": false, "error"} when the function raised
  anything else (analysis, end) -> {"id"}
Each eval's objective is a relayish program (evals/<module>.rly) and every derivative comes
from relayish's AD, compiled by the jax backend in float64, once per input shape (tool.py).

Single-threaded unless --multithreaded: pinned to the first CPU, and XLA's CPU backend told to
use one thread for its kernels (set before jax is imported).
"""
import argparse
import importlib
import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
EVAL_MODULES = ("hello", "lse", "llsq", "kmeans", "gmm", "ode", "det", "lstm", "ba", "ht",
                "saddle", "particle")


def single_thread():
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_cpu_multi_thread_eigen=false"
                               " intra_op_parallelism_threads=1").strip()
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, [min(os.sched_getaffinity(0))])


def define(module):
    if module not in EVAL_MODULES:
        return {"success": False, "error": f"relayish has no eval named {module!r}"}
    try:
        importlib.import_module(f"evals.{module}")
        return {"success": True}
    except Exception as e:          # the eval reports it; the tool keeps serving
        return {"success": False, "error": "".join(traceback.format_exception(e))}


def evaluate(message):
    try:
        functions = importlib.import_module(f"evals.{message['module']}")
        function = getattr(functions, message["function"], None)
        if function is None or not hasattr(function, "wrapped"):
            return {"success": False,
                    "error": f"eval {message['module']} has no function {message['function']!r}"}
        return function.wrapped(message["input"])
    except Exception as e:
        return {"success": False, "error": "".join(traceback.format_exception(e))}


def respond(message):
    kind = message.get("kind")
    if kind == "start":
        return {"tool": "relayish"}
    if kind == "define":
        return define(message["module"])
    if kind == "evaluate":
        return evaluate(message)
    return {}


def serve(lines, out):
    for line in lines:
        if not line.strip():
            continue
        message = json.loads(line)
        out.write(json.dumps({"id": message["id"]} | respond(message)) + "\n")
        out.flush()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--multithreaded", action="store_true")
    args = parser.parse_args(argv)
    if not args.multithreaded:
        single_thread()
    sys.path.insert(0, HERE)         # evals/ and tool.py
    try:
        serve(sys.stdin, sys.stdout)
    except (EOFError, BrokenPipeError):
        pass


if __name__ == "__main__":
    main()
