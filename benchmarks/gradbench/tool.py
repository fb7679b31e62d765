"""The machinery the eval modules share: timing as GradBench's python tools time, and relayish
programs loaded from .rly templates, differentiated and compiled once per input shape.

GradBench's protocol (its python/gradbench/gradbench/wrap.py is the model): a function gets the
message's `input`, converts it untimed (`pre`), runs the computation at least `min_runs` times
and for at least `min_seconds`, timing each run as one `{"name": "evaluate", "nanoseconds"}`
entry, and converts the last result untimed (`post`). The timed region here waits for the
result (jax.block_until_ready), since the jax backend returns before XLA has finished.

A program is built lazily inside the timed region of its first run (parse, AD, passes, XLA
compilation), as jax's tool traces and compiles inside its first timed call; later runs of
the same shape find it in `_programs`.
"""
import os
import string
import time
from dataclasses import dataclass
from typing import Any, Callable

import jax

import relayish as rl

EVALS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "evals")


@dataclass
class Wrapped:
    """An eval function: `function(converted input)` computes, `wrapped(raw input)` answers
    an evaluate message ({"success", "output", "timings"})."""
    function: Callable[[Any], Any]
    wrapped: Callable[[Any], dict]

    def __call__(self, *args, **kwargs):
        return self.function(*args, **kwargs)


def multiple_runs(*, pre, post):
    """Decorator: the function timed as GradBench's `wrap.multiple_runs` times it, each run
    ending when its result is ready."""
    def decorator(function):
        def wrapped(raw):
            value = pre(raw)
            min_runs, min_seconds = raw.get("min_runs", 1), raw.get("min_seconds", 0)
            timings, elapsed = [], 0.0
            while len(timings) < min_runs or elapsed < min_seconds:
                start = time.perf_counter_ns()
                output = jax.block_until_ready(function(value))
                end = time.perf_counter_ns()
                timings.append({"name": "evaluate", "nanoseconds": end - start})
                elapsed += (end - start) / 1e9
            return {"success": True, "output": post(output), "timings": timings}
        return Wrapped(function=function, wrapped=wrapped)
    return decorator


def single_run(*, pre, post):
    """Decorator for evals without `min_runs` (hello): one timed run."""
    def decorator(function):
        def wrapped(raw):
            value = pre(raw)
            start = time.perf_counter_ns()
            output = jax.block_until_ready(function(value))
            end = time.perf_counter_ns()
            return {"success": True, "output": post(output),
                    "timings": [{"name": "evaluate", "nanoseconds": end - start}]}
        return Wrapped(function=function, wrapped=wrapped)
    return decorator


def template_text(name, **sizes):
    """The text of evals/NAME.rly with its `$size` parameters (shapes, trip counts: relayish
    shapes are static) replaced by the given values."""
    with open(os.path.join(EVALS_DIR, name + ".rly")) as f:
        text = f.read()
    try:
        return string.Template(text).substitute({k: str(v) for k, v in sizes.items()})
    except KeyError as missing:
        raise rl.RelayishError(f"evals/{name}.rly needs the size {missing}") from None


def load(name, **sizes):
    """evals/NAME.rly parsed as a Module for these sizes."""
    return rl.parse(template_text(name, **sizes), filename=f"evals/{name}.rly")


def entry(module, global_name):
    """A copy of `module` whose @main is its global `global_name`: one .rly file holds an
    eval's objective and the helpers its functions share, and each function differentiates
    one of them (which must not call @main, the name it takes)."""
    out = module.copy()
    out["main"] = module[global_name]
    return out


def define(module, name, program):
    """module[name] = program, an AD result: a Function, or a Module whose @main it is, whose
    other globals join `module` (a name `module` already has must be the same function)."""
    if isinstance(program, rl.Module):
        for gv, func in program.functions.items():
            if gv.name_hint == "main":
                continue
            if gv.name_hint in module and module[gv.name_hint] is not func:
                raise rl.RelayishError(f"@{gv.name_hint} of the program given for @{name} "
                                       "differs from the module's")
            module[gv.name_hint] = func
        program = program["main"]
    module[name] = program
    return module


_programs = {}
# the programs the jax backend refused, by key: {key: the CompileError's message}
on_interpreter = {}


def compiled(key, build, fallback=False, **compile_options):
    """The compiled program for `key` (an eval, a function and the input's sizes), built by
    `build()` (a Function or Module) and compiled by the jax backend the first time. With
    `fallback`, a program the jax backend refuses (a CompileError, at its first call) runs on
    the interpreter instead, recorded in `on_interpreter`: for the constructs that do not
    compile yet (notes/gradbench.md)."""
    run = _programs.get(key)
    if run is None:
        program = build()
        run = rl.compile(program, backend="jax", **compile_options)
        if fallback:
            run = _first_call_falls_back(key, run, program)
        _programs[key] = run
    return run


def _first_call_falls_back(key, run, program):
    state = {"run": run, "tried": False}

    def call(*args):
        if state["tried"]:
            return state["run"](*args)
        state["tried"] = True
        try:
            return run(*args)
        except rl.CompileError as e:
            on_interpreter[key] = str(e).splitlines()[0]
            state["run"] = rl.compile(program, backend="interpreter")
            return state["run"](*args)
    return call
