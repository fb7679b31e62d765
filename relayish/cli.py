"""The `relayish` command (also `python -m relayish`).

    relayish run FILE [ARG...]          evaluate @main; each ARG is JSON (number or nested list)
    relayish check FILE                 type-check; print each global with its type
    relayish fmt FILE... [--check|--write]
                                        print, check or rewrite the canonical text
    relayish grad FILE [--order N] [--raw]
                                        print the gradient (N = 1) or the N-th derivative tensor,
                                        optimized (--raw: the transform as built)
    relayish opt FILE [--passes a,b,c]  print the program after rl.optimize (default pipeline)
    relayish minimize FILE --x0 JSON [--args JSON | --args-npz FILE] [--json] ...
                                        minimize @main over its first argument, showing progress
    relayish debug FILE [ARG...] [--grad [--raw]]
                                        step through @main (pdb-like commands: n s r b c p l
                                        bt set back q; help lists them)
    relayish dap                        a Debug Adapter Protocol server on stdio (VS Code)
    relayish --version

Errors print `FILE:LINE:COLUMN: message` (or `FILE: message` when no position is known) on
stderr. Exit status: 0 success, 1 an error in the program or its inputs (and `fmt --check` on a
file that is not formatted), 2 usage, 3 `minimize` stopped without converging (the result is
printed anyway), 130 interrupted. notes/cli.md has the details and the reasons.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time

import numpy as np

from relayish.cli_values import (CommandError, excerpt, json_value, npz_value, param_text,
                                 strict_json, tensor_value, to_json)
from relayish.errors import ParseError, RelayishError
from relayish.ir.text.parser import source_position

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_CONVERGED = 3
EXIT_INTERRUPTED = 130


# ---- the argument parser --------------------------------------------------------------------

# argparse reads `-1e-3` as an option (its own test for a negative number knows no exponent):
# every word that is a JSON number, or JSON's -Infinity, is an argument
NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-Infinity$")


class _ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, reading negative numbers in exponent form as arguments."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_NUMBER


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs (examples, exit codes) printed as written; each option's help
    ends with its default when it has one worth showing (not for flags and unset options)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and "%(default)" not in text \
                and (action.option_strings or action.nargs in ("?", "*")):
            text += " (default: %(default)s)"
        return text


EXIT_CODES = """exit status:
  0    success
  1    an error in the program, its inputs or a file (printed as FILE:LINE:COLUMN: message);
       fmt --check: a file is not formatted
  2    usage: an unknown option, a malformed JSON argument
  3    minimize stopped without converging (the result is printed anyway)
  130  interrupted (Ctrl-C)"""

GRAD_HELP = """\
order 1 (the default) prints rl.gradient of @main:
    fn(x1, .., xn) -> (f(x1, .., xn), (df/dx1, .., df/dxn))
  for any parameters (tensors, tuples, ADT values; integer inputs get zero gradients) and a
  float result (a tensor result is seeded with ones: the gradient of the sum of its elements).
order N >= 2 needs @main to take one float tensor x, of shape s, and return a float scalar;
  it prints the program of the N-th derivative tensor
    fn(x) -> Tensor[s * N]        entry [i1, .., iN] = d^N f / dx[i1] .. dx[iN]
  for x of shape (n): order 2 the Hessian, shape (n, n); order 3 shape (n, n, n). It is
  rl.derivative(@main, order=N): the forward-mode jacobian (one jvp per element of x) of the
  order N-1 program, starting from the reverse-mode gradient, so the printed program grows
  about n times with each order.
the printed program is optimized by rl.optimize's default pipeline (partial_eval,
  dead_code, cse, simplify, dead_code), as rl.gradient returns it; --raw prints the transform
  as built (optimize=False)."""


def _backend_help(names):
    """--backend's help: each choice with its registry summary ("auto": minimize's policy)."""
    from relayish.backend import registry
    lines = [f"{name}: " + ("start where it runs at once, compile once that pays"
                            if name not in registry.names() else registry.get(name).summary)
             for name in names]
    return "execution backend; " + "; ".join(lines)


def _parser():
    p = _ArgumentParser(
        prog="relayish", formatter_class=_HelpFormatter,
        description="Run, check, format, differentiate and optimize relayish programs.",
        epilog="Each command has its own help: relayish COMMAND --help.\n\n" + EXIT_CODES)
    from relayish import __version__
    p.add_argument("--version", action="version", version=f"relayish {__version__}")
    sub = p.add_subparsers(dest="command", parser_class=_ArgumentParser,
                           metavar="{run,check,fmt,grad,opt,minimize,debug,dap}")
    sub.required = True

    def command(name, help, example, description=None):
        sp = sub.add_parser(name, help=help, description=description or help,
                            formatter_class=_HelpFormatter,
                            epilog=f"example:\n  {example}\n\n{EXIT_CODES}")
        sp.set_defaults(command_parser=sp, handler=COMMANDS[name])
        return sp

    # the choices come from the backend registry (relayish/backend/registry.py), which rl.compile
    # and rl.optim.minimize read too
    from relayish.backend import registry
    from relayish.optim.backends import AUTO, backend_choices

    def device_option(sp):
        only = ", ".join(f"the {b} runs on the {'/'.join(registry.get(b).devices)} only"
                         for b in registry.names()
                         if len(registry.get(b).devices) < len(registry.all_devices()))
        sp.add_argument("--device", choices=registry.all_devices(), default="cpu",
                        help="device of the backend" + (f" ({only})" if only else ""))

    sp = command("run", "evaluate @main on JSON arguments and print the result as JSON (an "
                 "index out of range, as in take, is an error on both backends: jax checks)",
                 "relayish run prog.rly '[1.0, 2.0]' 3")
    sp.add_argument("file", metavar="FILE")
    sp.add_argument("args", nargs="*", metavar="ARG",
                    help="one JSON value (number, true/false or nested list) per parameter of "
                         "@main; a float parameter takes numbers, an int parameter integers, a "
                         "bool parameter true/false: nothing is converted silently")
    sp.add_argument("--backend", choices=registry.names(), default="interpreter",
                    help=_backend_help(registry.names()))
    device_option(sp)
    sp.add_argument("--capacity", type=_capacity, metavar="JSON",
                    help="with --backend jax: the sizes of the loops over dynamic structure, "
                         "rl.compile's capacity=, e.g. '{\"nodes\": 64}' (rows of a tree's "
                         "node table) or '{\"steps\": 1000}' (trips of a loop)")

    sp = command("check", "type-check and print each global with its type",
                 "relayish check prog.rly   (FILE - reads the program from stdin)")
    sp.add_argument("file", metavar="FILE")

    sp = command("fmt", "print the program in canonical text form, or check or rewrite files",
                 "relayish fmt --check examples/*.rly")
    sp.add_argument("files", nargs="+", metavar="FILE")
    mode = sp.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="print each FILE that is not formatted and exit with 1 if any")
    mode.add_argument("--write", action="store_true",
                      help="rewrite each FILE in place in canonical form")

    sp = command("grad", "print the gradient (or N-th derivative) program of @main",
                 "relayish grad prog.rly --order 2 > hessian.rly",
                 description="Print a relayish program derived from @main.\n\n" + GRAD_HELP)
    sp.add_argument("file", metavar="FILE")
    sp.add_argument("--order", type=_at_least(1), default=1, metavar="N",
                    help="1: value and gradient; N >= 2: the N-th derivative tensor")
    sp.add_argument("--raw", action="store_true",
                    help="print the transform as built, without the optimizing passes")

    from relayish.ir.passes import api as passes_api
    pass_names = [n for n in passes_api.__all__ if n[:1].islower()]
    sp = command("opt", "print the program after the optimizing passes",
                 "relayish opt prog.rly --passes inline,partial_eval,dead_code",
                 description="Print the module of FILE optimized by rl.optimize: the default "
                             "pipeline\n(partial_eval, dead_code, cse, simplify, dead_code), "
                             "or the passes named\nby --passes, in order.")
    sp.add_argument("file", metavar="FILE")
    sp.add_argument("--passes", metavar="a,b,c",
                    help="comma-separated passes to run instead of the default pipeline: "
                         + ", ".join(pass_names))

    sp = command("minimize", "minimize @main over its first parameter",
                 "relayish minimize examples/rosenbrock.rly --x0 '[-1.2, 1.0]' --json",
                 description="Minimize @main (returning a float scalar) over its first "
                             "parameter, starting at --x0;\nthe other parameters are fixed "
                             "data (--args or --args-npz). Progress lines go to\nstdout, or to "
                             "stderr with --json.")
    sp.add_argument("file", metavar="FILE")
    sp.add_argument("--x0", required=True, metavar="JSON",
                    help="starting point: a JSON number or nested list of the first "
                         "parameter's shape")
    data = sp.add_mutually_exclusive_group()
    data.add_argument("--args", metavar="JSON",
                      help="a JSON list with one value per parameter after the first (Python's "
                           "args=), e.g. '[[1, 2, 3], 0.5]'")
    data.add_argument("--args-npz", metavar="NPZ",
                      help="a numpy .npz file of those parameters, by name (np.savez(f, a=...))"
                           " or in order (arr_0, arr_1, ..)")
    sp.add_argument("--method", default="newton",
                    choices=("newton", "newton-cg", "trust-ncg", "bfgs", "gd"),
                    help="newton: exact Hessian and line search; newton-cg, trust-ncg: "
                         "Hessian-vector products; bfgs; gd: gradient descent")
    sp.add_argument("--tol", type=_tolerance, default=1e-8, help="gradient-norm tolerance")
    sp.add_argument("--max-iter", type=_at_least(0), default=100, metavar="N",
                    help="iteration limit")
    sp.add_argument("--backend", choices=backend_choices(), default=AUTO,
                    help=_backend_help(backend_choices()))
    device_option(sp)
    sp.add_argument("--json", action="store_true",
                    help="print the result as one strict JSON object on stdout: x, fun, "
                         "grad_norm, n_iter, converged, message, method, backend, nfev, ngev, "
                         "nhev, time_s (non-finite numbers are null)")
    sp.add_argument("--history", action="store_true",
                    help="with --json: add the per-iteration history (iter, fun, grad_norm, "
                         "step)")
    sp.add_argument("--quiet", action="store_true", help="no per-iteration progress lines")
    sp.add_argument("--plot", metavar="PNG",
                    help="save f and |grad| per iteration (log scale) to this PNG file "
                         "(needs matplotlib: pip install 'relayish[plot]')")

    from relayish.debug.terminal import COMMANDS as DEBUG_COMMANDS
    sp = command("debug", "step through @main with pdb-like commands",
                 "relayish debug prog.rly '[1.0, 2.0]' --grad",
                 description="Run @main (or, with --grad, its gradient program) under the "
                             "debugger, paused\nbefore its first binding, reading commands "
                             "from the terminal:\n\n" + DEBUG_COMMANDS)
    sp.add_argument("file", metavar="FILE")
    sp.add_argument("args", nargs="*", metavar="ARG",
                    help="one JSON value per parameter of @main, as for `relayish run`")
    sp.add_argument("--grad", action="store_true",
                    help="debug rl.gradient of @main (the program `relayish grad` prints), each "
                         "binding at the primal line it comes from")
    sp.add_argument("--raw", action="store_true",
                    help="with --grad: the gradient as AD builds it (`relayish grad --raw`): "
                         "the backward pass as ordinary bindings, references and closures")

    command("dap", "serve the Debug Adapter Protocol on stdin/stdout (for VS Code)",
            "relayish dap   (started by the editor; docs/debugging.md has launch.json)",
            description="A Debug Adapter Protocol server on stdin/stdout. The editor starts "
                        "it; `launch`\ntakes program (a .rly file), args (a list of JSON "
                        "values, one per parameter of\n@main), stopOnEntry and grad. "
                        "docs/debugging.md shows the VS Code setup.")
    return p


def _at_least(low):
    """An argparse type: an int >= low (anything else is a usage error, exit 2)."""
    def convert(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value
    convert.__name__ = "integer"
    return convert


def _tolerance(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _capacity(text):
    """--capacity: a JSON object of positive integers (rl.compile's capacity=)."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        value = None
    if not (isinstance(value, dict) and value and all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value.values())):
        raise argparse.ArgumentTypeError(f"expected a JSON object of positive integers such as "
                                         f"'{{\"nodes\": 64}}', got {text!r}")
    return value


# ---- entry point and error reporting --------------------------------------------------------

def main(argv=None):
    """Entry point of the `relayish` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        return args.handler(args)
    except BrokenPipeError:                 # `relayish grad f.rly | head`: not an error
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_OK
    except KeyboardInterrupt:
        print("relayish: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _guarded(file, action):
    """Run action(); report any failure as `FILE: ...` on stderr and return the exit status.
    No traceback is ever shown."""
    try:
        return action()
    except ParseError as e:
        _report(file, e.message, e.line, e.column)
        # the line, or a window of a long one, and a caret under the column
        snippet = getattr(e, "snippet", "")
        if snippet:
            print(snippet, file=sys.stderr)
    except RelayishError as e:
        line, column = getattr(e, "line", None), getattr(e, "column", None)
        where = _error_position(getattr(e, "node", None)) if line is None else None
        if where is not None:
            _, line, column = where
        _report(file, str(e), line, column)
    except CommandError as e:
        _report(file, str(e))
    except (BrokenPipeError, KeyboardInterrupt):
        raise
    except RecursionError:
        _report(file, "the input is nested too deeply to process")
    except Exception as e:  # noqa: BLE001 - the command never shows a traceback
        _report(file, f"internal error ({type(e).__name__}: {excerpt(str(e))}); "
                      "this is a bug in relayish")
    return EXIT_ERROR


def _error_position(node):
    """(file, line, column) of the expression an error names, or of the nearest parsed one:
    a function's result for a function (a return-type mismatch), the last binding with a
    place in the text for a variable (variables are shared nodes, without one)."""
    from relayish.ir.expr import Function, Let
    where = source_position(node)
    if where is not None or not isinstance(node, (Function, Let)):
        return where
    body = node.body if isinstance(node, Function) else node
    lets = []
    while isinstance(body, Let):            # a loop: let-chains are long
        lets.append(body)
        body = body.body
    for candidate in [body] + [part for let in reversed(lets) for part in (let.value, let)]:
        where = source_position(candidate)
        if where is not None:
            return where
    return None


def _report(file, message, line=None, column=None):
    file = "<stdin>" if file == STDIN else file
    where = f"{file}:{line}:{column}" if line else file
    print(f"{where}: {excerpt(message)}", file=sys.stderr)


def _usage(args, message):
    args.command_parser.error(message)      # exits with status 2


# ---- reading files and arguments ------------------------------------------------------------

STDIN = "-"            # FILE - reads the program from standard input


def _read_text(path):
    try:
        if path == STDIN:
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as fh:
                data = fh.read()
    except OSError as e:
        raise CommandError(f"cannot read the file: {e.strerror or e}") from None
    try:
        return data.decode("utf-8-sig")     # a leading byte-order mark is not text
    except UnicodeDecodeError as e:
        raise CommandError(f"cannot read the file: not UTF-8 text (byte 0x{data[e.start]:02x} "
                           f"at offset {e.start})") from None


def _load(path):
    from relayish.ir.text.parser import parse
    return parse(_read_text(path), filename="<stdin>" if path == STDIN else path)


def _main_function(mod):
    """The type-checked module and its @main."""
    from relayish.ir.typecheck import infer_type
    if "main" not in mod:
        raise CommandError("the program has no @main function")
    mod = infer_type(mod)
    return mod, mod["main"]


def _json_arg(args, text, what):
    """A command-line JSON value; malformed JSON is a usage error. What it must hold is the
    parameter's type's business (json_value: an input error)."""
    return _json_loads(args, text, what)


def _json_loads(args, text, what):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        _usage(args, f"{what} is not valid JSON ({e.msg}): {excerpt(text)!r}")
    except RecursionError:
        _usage(args, f"{what} is nested too deeply")


# ---- commands -------------------------------------------------------------------------------

def cmd_run(args):
    _check_device(args)
    if args.capacity is not None and args.backend != "jax":
        _usage(args, "--capacity sizes the jax backend's loops: it goes with --backend jax")
    return _guarded(args.file, lambda: _run(args))


def _check_device(args):
    """--device against --backend: a combination no machine runs is a usage error (a gpu
    that this machine lacks is rl.compile's error, exit 1)."""
    from relayish.backend import registry
    if args.backend in registry.names():
        try:
            registry.check_device(registry.get(args.backend), args.device)
        except RelayishError as e:            # rl.compile's own words
            _usage(args, f"--backend {args.backend} --device {args.device}: {e}")


def _run(args):
    from relayish.backend.api import compile as rl_compile
    mod, main = _main_function(_load(args.file))
    ftype = main.checked_type
    if len(args.args) != len(ftype.arg_types):
        raise CommandError(f"@main takes {len(ftype.arg_types)} argument(s), "
                           f"{len(args.args)} given")
    values = [json_value(_json_arg(args, text, f"argument {k + 1}"), t, mod,
                         f"argument {k + 1} ({param_text(param, t)})")
              for k, (text, param, t) in enumerate(zip(args.args, main.params, ftype.arg_types))]
    # rl.compile checks the device against the backend (the interpreter runs on the cpu only)
    run = rl_compile(mod, backend=args.backend, device=args.device, capacity=args.capacity)
    print(strict_json(to_json(run(*values))))
    return EXIT_OK


def cmd_check(args):
    return _guarded(args.file, lambda: _check(args))


def _check(args):
    from relayish.ir.typecheck import infer_type
    mod = infer_type(_load(args.file))
    for gv, func in mod.items():
        print(f"@{gv.name_hint}: {func.checked_type}")
    return EXIT_OK


def format_source(text, filename=None):
    """The canonical text of a program file, comments kept (rl.format_text), ending with one
    newline."""
    from relayish.ir.text.format import format_text
    formatted = format_text(text, filename)
    return formatted if formatted.endswith("\n") else formatted + "\n"


def cmd_fmt(args):
    if not (args.check or args.write) and len(args.files) > 1:
        _usage(args, "printing takes one FILE; use --check or --write for several")
    if args.write and STDIN in args.files:
        _usage(args, "--write rewrites files in place; - (stdin) has none")
    status = EXIT_OK
    for path in args.files:
        status = max(status, _guarded(path, lambda: _fmt_one(args, path)))
    return status


def _fmt_one(args, path):
    text = _read_text(path)
    formatted = format_source(text, filename=path)
    if not (args.check or args.write):
        sys.stdout.write(formatted)
        return EXIT_OK
    if formatted == text:
        return EXIT_OK
    if args.check:
        print(f"{path}: not formatted")
        return EXIT_ERROR
    _replace_file(path, formatted)
    print(f"{path}: reformatted")
    return EXIT_OK


def _replace_file(path, text):
    """Write text to path through a temporary file in the same folder: an interrupted write
    leaves the old file whole."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        mode = os.stat(path).st_mode & 0o7777
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".relayish-fmt-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        raise CommandError(f"cannot write the file: {e.strerror or e}") from None


def cmd_grad(args):
    return _guarded(args.file, lambda: _grad(args))


def _grad(args):
    from relayish.ad import api
    from relayish.ir.text.printer import astext
    from relayish.ir.types import TensorType
    mod, main = _main_function(_load(args.file))
    optimize = not args.raw
    if args.order == 1:
        out = api.gradient(mod, optimize=optimize)
    else:
        ftype = main.checked_type
        x_t = ftype.arg_types[0] if len(ftype.arg_types) == 1 else None
        ret = ftype.ret_type
        if not (isinstance(x_t, TensorType) and x_t.is_float and isinstance(ret, TensorType)
                and ret.is_float and ret.shape == ()):
            raise CommandError(f"grad --order {args.order} needs @main to take one float tensor "
                               f"and return a float scalar; @main is {ftype} (--order 1 "
                               "differentiates any @main)")
        out = api.derivative(mod, order=args.order, optimize=optimize)
    print(astext(out))
    return EXIT_OK


def cmd_opt(args):
    passes = _pass_list(args, args.passes) if args.passes is not None else None
    return _guarded(args.file, lambda: _opt(args, passes))


def _pass_list(args, text):
    """The Pass objects named by --passes (a usage error names an unknown one)."""
    from relayish.ir.passes import Pass
    from relayish.ir.passes import api as passes_api
    names = [n.strip() for n in text.split(",")]
    known = [n for n in passes_api.__all__ if isinstance(getattr(passes_api, n), Pass)]
    for name in names:
        if name not in known:
            _usage(args, f"unknown pass {name!r} in --passes; the passes are: "
                         + ", ".join(known))
    return [getattr(passes_api, n) for n in names]


def _opt(args, passes):
    from relayish.ir.passes.manager import optimize
    from relayish.ir.text.printer import astext
    from relayish.ir.typecheck import infer_type
    mod = infer_type(_load(args.file))       # every global is optimized: no @main needed
    print(astext(optimize(mod, passes=passes)))
    return EXIT_OK


def cmd_minimize(args):
    _check_device(args)
    if args.history and not args.json:
        _usage(args, "--history goes with --json (the progress lines show the history)")
    x0_data = _json_arg(args, args.x0, "--x0")
    args_data = _json_arg_list(args) if args.args is not None else None
    return _guarded(args.file, lambda: _minimize(args, x0_data, args_data))


def _json_arg_list(args):
    value = _json_loads(args, args.args, "--args")
    if not isinstance(value, list):
        _usage(args, f"--args must be a JSON list with one value per parameter after the "
                     f"first, e.g. '[[1, 2], 3]'; got {excerpt(args.args)!r}")
    return value


def _fixed_args(args, mod, main, args_data):
    """The values of @main's parameters after the first, from --args or --args-npz."""
    params, types = main.params[1:], main.checked_type.arg_types[1:]
    if args.args_npz is not None:
        return _npz_args(args.args_npz, params, types)
    given = [] if args_data is None else args_data
    if len(given) != len(params):
        names = ", ".join(param_text(p, t) for p, t in zip(params, types)) or "none"
        raise CommandError(f"@main takes {len(params)} parameter(s) after the first ({names}); "
                           f"{len(given)} given" + ("" if args_data is not None else
                                                    " (pass them with --args or --args-npz)"))
    return tuple(json_value(data, t, mod, f"--args value {k + 1} ({param_text(param, t)})")
                 for k, (data, param, t) in enumerate(zip(given, params, types)))


def _npz_args(path, params, types):
    import zipfile
    try:
        if os.path.isfile(path) and not zipfile.is_zipfile(path):
            raise CommandError(f"--args-npz {path}: not a .npz file (np.savez writes one: a "
                               f"zip archive of .npy arrays)")
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise CommandError(f"--args-npz {path}: cannot read the arrays: "
                           f"{getattr(e, 'strerror', None) or e}") from None
    names = [p.name_hint for p in params]
    positional = [f"arr_{k}" for k in range(len(arrays))]
    if arrays and sorted(arrays) == sorted(positional) and not set(arrays) & set(names):
        keys = positional
        if len(keys) != len(names):
            raise CommandError(f"--args-npz {path}: has {len(keys)} array(s) (arr_0..), @main "
                               f"takes {len(names)} parameter(s) after the first")
    else:
        missing = [n for n in names if n not in arrays]
        unknown = sorted(set(arrays) - set(names))
        if missing or unknown:
            detail = "; ".join(part for part in (
                f"missing {', '.join(missing)}" if missing else "",
                f"unknown {', '.join(unknown)}" if unknown else "") if part)
            raise CommandError(f"--args-npz {path}: the arrays are named after @main's "
                               f"parameters after the first ({', '.join(names) or 'none'}) or "
                               f"arr_0, arr_1, ..; {detail}")
        keys = names
    return tuple(npz_value(arrays[key], p, t, f"--args-npz {path}: array {key}")
                 for key, p, t in zip(keys, params, types))


def _minimize(args, x0_data, args_data):
    from relayish.optim.minimize import minimize, progress_printer
    plt = _pyplot() if args.plot else None
    mod, main = _main_function(_load(args.file))
    if not main.params:
        raise CommandError("@main takes no parameter to minimize over")
    x_t = main.checked_type.arg_types[0]
    x0 = json_value(x0_data, x_t, mod, f"--x0 ({param_text(main.params[0], x_t)})")
    fixed = _fixed_args(args, mod, main, args_data)
    stream = sys.stderr if args.json else sys.stdout
    callback = None if args.quiet else progress_printer(stream)
    start = time.perf_counter()
    res = minimize(mod, x0, method=args.method, tol=args.tol, max_iter=args.max_iter,
                   backend=args.backend, device=args.device, args=fixed, callback=callback)
    seconds = time.perf_counter() - start
    if plt is not None:
        _plot(plt, res, args.plot)
    x = to_json(res.x)
    if args.json:
        result = {"x": x, "fun": res.fun, "grad_norm": res.grad_norm, "n_iter": res.n_iter,
                  "converged": res.converged, "message": res.message, "method": res.method,
                  "backend": res.backend, "nfev": res.nfev, "ngev": res.ngev, "nhev": res.nhev,
                  "time_s": round(seconds, 6)}
        if args.history:
            result["history"] = res.history
        print(strict_json(result))
    else:
        # the message reads "converged: ..." or "stopped: ...": say the status once
        status, _, reason = res.message.partition(": ")
        print(f"{args.method}: {status} after {res.n_iter} iterations: {reason or status}")
        print(f"fun = {res.fun:.12g}")
        print(f"grad_norm = {res.grad_norm:.3e}")
        print(f"x = {strict_json(x)}")
        print(f"evaluations: nfev = {res.nfev}, ngev = {res.ngev}, nhev = {res.nhev}; "
              f"time {seconds:.3f} s (setup and compilation included)")
    return EXIT_OK if res.converged else EXIT_NOT_CONVERGED


def _pyplot():
    """matplotlib.pyplot on a file-only backend, or a CommandError saying how to install it
    (checked before minimizing, so a long run does not end in this error)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CommandError("--plot needs matplotlib, which is not installed: "
                           "pip install 'relayish[plot]' (or pip install matplotlib)") from None
    return plt


def _plot(plt, res, path):
    iters = [e["iter"] for e in res.history]
    funs = [e["fun"] for e in res.history]
    norms = [e["grad_norm"] for e in res.history]
    fig, (ax_f, ax_g) = plt.subplots(2, 1, sharex=True, figsize=(6.4, 6.4))
    ax_f.plot(iters, funs, marker=".")
    # a log scale needs positive values; an objective that reaches zero or below gets a
    # symmetric log scale, linear near zero
    ax_f.set_yscale("log" if funs and min(funs) > 0 else "symlog")
    ax_f.set_ylabel("f")
    ax_f.set_title(f"{res.method}: {res.message}", fontsize="small")
    ax_g.plot(iters, norms, marker=".", color="tab:orange")
    ax_g.set_yscale("log" if norms and min(norms) > 0 else "symlog")
    ax_g.set_ylabel("|grad f|")
    ax_g.set_xlabel("iteration")
    for ax in (ax_f, ax_g):
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    try:
        fig.savefig(path, format="png")
    except OSError as e:
        raise CommandError(f"--plot {path}: cannot write the file: {e.strerror or e}") from None
    finally:
        plt.close(fig)


# ---- the debugger's front ends ----------------------------------------------------------------

def cmd_debug(args):
    from relayish.debug.terminal import interact

    def session():
        data = [_json_arg(args, text, f"argument {k + 1}") for k, text in enumerate(args.args)]
        if args.raw and not args.grad:
            raise CommandError("--raw goes with --grad (the raw gradient program)")
        target = debug_target(args.file, data, args.grad, args.raw)
        return interact(target, sys.stdin, sys.stdout)
    return _guarded(args.file, session)


def cmd_dap(args):
    from relayish.debug.dap import serve
    saved = sys.stdout
    # stdout carries the protocol: anything else printed while serving (a stray print of a
    # Python callback) goes to stderr instead of corrupting a message
    sys.stdout = sys.stderr
    try:
        return serve(sys.stdin.buffer, saved.buffer, debug_target)
    finally:
        sys.stdout = saved


class DebugTarget:
    """What the debugger's front ends (relayish/debug/terminal.py, dap.py) need of the command
    line: the program of a file with its arguments converted from JSON, and values shown and
    read back as JSON. `program` is the module (its gradient with grad=True)."""

    def __init__(self, path, program, values, grad):
        self.path, self.program, self.values, self.grad = path, program, values, grad

    def debugger(self):
        from relayish.debug import Debugger
        return Debugger(self.program, *self.values)

    def result_text(self, value):
        return strict_json(to_json(value))

    def parse_value(self, text, old, variable="the variable"):
        """A value for a tensor variable from JSON text, of the old value's dtype and shape
        (nothing converted silently, as for `relayish run`); None when the text is not JSON
        (the caller then evaluates it as an expression). `variable` names it in messages
        ("%w in @cost")."""
        from relayish.ir.types import TensorType
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            return None
        if not isinstance(old, (np.ndarray, np.generic)):
            raise RelayishError(f"a JSON value sets a tensor; this variable holds "
                               f"{type(old).__name__} (give an expression instead)")
        old = np.asarray(old)
        t = TensorType(tuple(old.shape), str(old.dtype))
        try:
            return tensor_value(data, t, f"the new value of {variable}",
                                expects=f"{variable} is a")
        except CommandError as e:
            raise RelayishError(str(e)) from None


def debug_target(path, data, grad=False, raw=False):
    """The DebugTarget of a file and JSON arguments (`relayish debug`, DAP's `launch`): the
    file read and type-checked, each argument converted to its @main parameter's type; with
    grad=True the program is rl.gradient of @main (same arguments), optimized unless raw."""
    try:
        return _debug_target(path, data, grad, raw)
    except CommandError as e:               # the front ends report relayish errors
        raise RelayishError(str(e)) from None


def _debug_target(path, data, grad, raw=False):
    from relayish.ad import api
    mod, main = _main_function(_load(path))
    ftype = main.checked_type
    if len(data) != len(ftype.arg_types):
        raise CommandError(f"@main takes {len(ftype.arg_types)} argument(s), {len(data)} given")
    values = [json_value(value, t, mod, f"argument {k + 1} ({param_text(param, t)})")
              for k, (value, param, t) in enumerate(zip(data, main.params, ftype.arg_types))]
    # the debugger places a gradient program's bindings in its text as `relayish grad [--raw]`
    # prints it, and each generated binding at the primal line it comes from (Position.origin;
    # the passes keep those positions on what they rewrite)
    program = api.gradient(mod, optimize=not raw) if grad else mod
    return DebugTarget(path, program, values, grad)


COMMANDS = {"run": cmd_run, "check": cmd_check, "fmt": cmd_fmt, "grad": cmd_grad, "opt": cmd_opt,
            "minimize": cmd_minimize, "debug": cmd_debug, "dap": cmd_dap}


if __name__ == "__main__":
    sys.exit(main())
