"""The `relayish` command.

    relayish run FILE [ARG...]      evaluate @main; each ARG is JSON (number or nested list)
    relayish check FILE             type-check; print each global with its type
    relayish fmt FILE               print the canonical text
    relayish grad FILE [--order N]  print the (N-th order) gradient program of @main
    relayish minimize FILE --x0 JSON [--method newton] [--json] ...
                                    minimize @main over its tensor argument, showing progress

run and minimize take --backend jax|interpreter and --device cpu|gpu. Errors print
`FILE:LINE:COLUMN: message` (or `FILE: message` when no position is known) on stderr and exit
with status 1; usage mistakes exit with 2 (argparse). `minimize` exits with 0 when it
converged and 3 when it stopped without converging (the result is printed either way).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from relayish.errors import ParseError, RelayishError
from relayish.ir.text.parser import source_position

EXIT_ERROR = 1
EXIT_NOT_CONVERGED = 3


class CommandError(Exception):
    """A user-facing failure that is not a RelayishError (e.g. an unreadable file)."""


def _parser():
    p = argparse.ArgumentParser(
        prog="relayish",
        description="Run, check, format, differentiate and optimize relayish programs.")
    sub = p.add_subparsers(dest="command", metavar="{run,check,fmt,grad,minimize}")
    sub.required = True

    def backend_options(sp):
        sp.add_argument("--backend", choices=("jax", "interpreter"), default=None,
                        help="execution backend (run: interpreter by default; minimize: jax)")
        sp.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                        help="device for the jax backend (default cpu)")

    sp = sub.add_parser("run", help="evaluate @main on JSON arguments and print the result")
    sp.add_argument("file")
    sp.add_argument("args", nargs="*", metavar="ARG", help="JSON number or nested list")
    backend_options(sp)

    sp = sub.add_parser("check", help="type-check and print each global with its type")
    sp.add_argument("file")

    sp = sub.add_parser("fmt", help="print the program in canonical text form")
    sp.add_argument("file")

    sp = sub.add_parser("grad", help="print the gradient program of @main")
    sp.add_argument("file")
    sp.add_argument("--order", type=int, default=1, help="order of the derivative (default 1)")

    sp = sub.add_parser("minimize", help="minimize @main over its tensor argument")
    sp.add_argument("file")
    sp.add_argument("--x0", required=True, help="starting point, JSON (number or nested list)")
    sp.add_argument("--method", default="newton",
                    choices=("newton", "newton-cg", "trust-ncg", "bfgs", "gd"))
    sp.add_argument("--tol", type=float, default=1e-8, help="gradient-norm tolerance")
    sp.add_argument("--max-iter", type=int, default=100)
    sp.add_argument("--json", action="store_true",
                    help='print {"x": [...], "fun": f, "n_iter": k, "converged": b} on stdout '
                         "(progress goes to stderr)")
    sp.add_argument("--quiet", action="store_true", help="no per-iteration progress")
    backend_options(sp)
    return p


def main(argv=None):
    """Entry point of the `relayish` console script; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args, parser)
    except ParseError as e:
        _report(args.file, e.message, e.line, e.column, e.source_line, e.column)
    except RelayishError as e:
        line, column = getattr(e, "line", None), getattr(e, "column", None)
        where = source_position(getattr(e, "node", None)) if line is None else None
        if where is not None:
            _, line, column = where
        _report(args.file, str(e), line, column)
    except CommandError as e:
        _report(args.file, str(e))
    except BrokenPipeError:                 # `relayish grad f.rly | head`: not an error
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        print("relayish: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the command never shows a traceback
        _report(args.file, f"internal error ({type(e).__name__}: {e}); this is a bug in relayish")
    return EXIT_ERROR


def _report(file, message, line=None, column=None, source_line=None, caret=None):
    where = f"{file}:{line}:{column}" if line else file
    print(f"{where}: {message}", file=sys.stderr)
    if source_line is not None and caret:
        print("  " + source_line, file=sys.stderr)
        print("  " + " " * max(caret - 1, 0) + "^", file=sys.stderr)


# ---- helpers --------------------------------------------------------------------------------

def _load(path):
    from relayish.ir.text.parser import parse
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as e:
        raise CommandError(f"cannot read the file: {e.strerror or e}") from None
    return parse(text)


def _json_arg(text, what, parser):
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        parser.error(f"{what} is not valid JSON ({e.msg}): {text!r}")
    if not _is_numeric_json(value):
        parser.error(f"{what} must be a JSON number or nested list of numbers: {text!r}")
    return value


def _is_numeric_json(v):
    if isinstance(v, bool):
        return True
    if isinstance(v, (int, float)):
        return True
    if isinstance(v, list):
        return all(_is_numeric_json(x) for x in v)
    return False


def to_json(value):
    """A runtime value as JSON-able data: tensors as (nested) lists, tuples as lists."""
    from relayish.backend.values import ConstructorValue, RefValue
    if isinstance(value, tuple):
        return [to_json(v) for v in value]
    if isinstance(value, ConstructorValue):
        return {value.constructor.name_hint: [to_json(f) for f in value.fields]}
    if isinstance(value, RefValue):
        return {"ref": to_json(value.value)}
    try:
        arr = np.asarray(value)
    except Exception:  # noqa: BLE001 - closures and other values print as text
        return repr(value)
    if arr.dtype == object:
        return repr(value)
    return arr.tolist()


def _main_types(mod):
    from relayish.ir.typecheck import infer_type
    mod = infer_type(mod)
    return mod, mod["main"].checked_type


# ---- commands -------------------------------------------------------------------------------

def cmd_run(args, parser):
    from relayish.ir.types import TensorType
    mod, ftype = _main_types(_load(args.file))
    if len(args.args) != len(ftype.arg_types):
        raise CommandError(f"@main takes {len(ftype.arg_types)} argument(s), "
                           f"{len(args.args)} given")
    values = []
    for k, (text, t) in enumerate(zip(args.args, ftype.arg_types)):
        data = _json_arg(text, f"argument {k + 1}", parser)
        if not isinstance(t, TensorType):
            raise CommandError(f"argument {k + 1}: @main's parameter has type {t}; the command "
                               "line passes tensors only")
        arr = np.asarray(data, dtype=t.dtype)
        if arr.shape != t.shape:
            raise CommandError(f"argument {k + 1} has shape {arr.shape}, @main expects {t}")
        values.append(arr)
    backend = args.backend or "interpreter"
    if backend == "interpreter":
        from relayish.backend.interpreter import evaluate
        result = evaluate(mod, *values)
    else:
        from relayish.backend.api import compile as rl_compile
        result = rl_compile(mod, backend="jax", device=args.device)(*values)
    print(json.dumps(to_json(result)))
    return 0


def cmd_check(args, parser):
    from relayish.ir.typecheck import infer_type
    mod = infer_type(_load(args.file))
    for gv, func in mod.items():
        print(f"@{gv.name_hint}: {func.checked_type}")
    return 0


def cmd_fmt(args, parser):
    from relayish.ir.text.printer import astext
    print(astext(_load(args.file)))
    return 0


def cmd_grad(args, parser):
    from relayish.ad import api
    from relayish.ir.text.printer import astext
    if args.order < 1:
        parser.error(f"--order must be at least 1, got {args.order}")
    g = _load(args.file)
    for _ in range(args.order - 1):
        g = api.grad(g)
    print(astext(api.gradient(g)))
    return 0


def cmd_minimize(args, parser):
    from relayish.optim.minimize import minimize, progress_printer
    x0 = _json_arg(args.x0, "--x0", parser)
    mod = _load(args.file)
    stream = sys.stderr if args.json else sys.stdout
    callback = None if args.quiet else progress_printer(stream)
    res = minimize(mod, x0, method=args.method, tol=args.tol, max_iter=args.max_iter,
                   backend=args.backend or "jax", device=args.device, callback=callback)
    x = to_json(res.x)
    if args.json:
        print(json.dumps({"x": x, "fun": res.fun, "n_iter": res.n_iter,
                          "converged": res.converged}))
    else:
        status = "converged" if res.converged else "did not converge"
        print(f"{args.method}: {status} after {res.n_iter} iterations ({res.message})")
        print(f"fun = {res.fun:.12g}")
        print(f"grad_norm = {res.grad_norm:.3e}")
        print(f"x = {json.dumps(x)}")
    return 0 if res.converged else EXIT_NOT_CONVERGED


COMMANDS = {"run": cmd_run, "check": cmd_check, "fmt": cmd_fmt, "grad": cmd_grad,
            "minimize": cmd_minimize}


if __name__ == "__main__":
    sys.exit(main())
