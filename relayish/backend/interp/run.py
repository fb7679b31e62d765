"""The machine: runs compiled Code (code.py) on frames, at any IR recursion depth.

    execute(code, slots) -> value      run `code` on the frame `slots` until it returns
    InterpreterClosure(code, env)      the interpreter's function values; calling one from
                                       Python checks its arguments (runtime.args) and executes

The loop: run the block's steps, then dispatch on its terminator. CALL pushes (caller frame,
call block) on an explicit list and continues at the callee's entry block with a fresh frame
`[*args, *closure.env, *code.rest]`; RETURN pops it and writes the result into the caller's
slot; TAILCALL pushes nothing. IR calls are never Python calls, so a 20,000-deep non-tail
recursion is a 20,000-long list; MAX_CALL_DEPTH frames turn runaway recursion into an
EvaluationError. A function value that is not interpreter code (a constructor, a Python
callable, another backend's closure) is called from Python (`call_foreign`).

Errors: RelayishErrors pass through with a note of the IR call stack (innermost first, added
once); any other fault in a terminator (only ill-typed programs get there) becomes an
EvaluationError showing the terminator's program text.
"""
from __future__ import annotations

import weakref

import numpy as np

from relayish.errors import EvaluationError, RelayishError
from relayish.backend.values import Closure
from relayish.backend.runtime.describe import node_text, value_text, value_type_text
from relayish.backend.interp.code import BRANCH, CALL, JUMP, RETURN, TAILCALL
from relayish.backend.interp.deferred import settle_all

__all__ = ["execute", "InterpreterClosure", "call_foreign", "MAX_CALL_DEPTH"]

MAX_CALL_DEPTH = 2_000_000          # IR frames on the explicit stack before we give up


class InterpreterClosure(Closure):
    """A function value of the interpreter: compiled code plus its captured values.

    Calling it from Python checks and converts the arguments and runs the function:
    `rl.evaluate(fn_returning_fn)(np.ones(3))`.
    """

    __slots__ = ("code", "env")

    def __init__(self, code, env):
        self.code = code
        self.env = env

    @property
    def func(self):
        f = self.code.func
        return f() if isinstance(f, weakref.ref) else f

    def __call__(self, *args):
        code = self.code
        frame = code.params.convert(args)
        frame += self.env
        frame += code.rest
        return execute(code, frame)

    def __repr__(self):
        return f"<Closure {self.code.name}>"



def execute(code, slots):
    """Run `code` on the frame `slots` until its outermost RETURN; returns the value.

    Float faults follow IEEE (log(-1) is nan, 1/0. is inf, exp(1000.) is inf) without numpy's
    RuntimeWarnings, as XLA computes them: one errstate per run, not one per op (it costs
    about 3 us, several times a small op). notes/ops.md."""
    with np.errstate(all="ignore"):
        try:
            return _run(code, slots)
        finally:
            settle_all()         # no deferred sum leaves interpreter code (deferred.py)


def _run(code, slots):
    stack = []                       # (caller slots, CALL block) per active IR call
    push, pop = stack.append, stack.pop
    block = code.entry
    try:
        while True:
            for step in block.steps:
                step(slots)
            kind = block.kind
            if kind is RETURN:
                value = slots[block.src]
            elif kind is CALL or kind is TAILCALL:
                fn = slots[block.src]
                if fn.__class__ is InterpreterClosure:
                    callee = fn.code
                    argslots = block.args
                    n = len(argslots)
                    if n != callee.nparams:
                        raise arity_error(callee, n, block.node)
                    if n == 1:
                        frame = [slots[argslots[0]], *fn.env, *callee.rest]
                    elif n == 0:
                        frame = [*fn.env, *callee.rest]
                    else:
                        frame = [*block.gather(slots), *fn.env, *callee.rest]
                    if kind is CALL:
                        if len(stack) >= MAX_CALL_DEPTH:
                            raise EvaluationError(f"IR call depth exceeded {MAX_CALL_DEPTH} frames "
                                                  f"(unbounded recursion?) at {node_text(block.node)}")
                        push((slots, block))
                    slots = frame
                    block = callee.entry
                    continue
                value = call_foreign(fn, [slots[i] for i in block.args], block.node)
                if kind is CALL:
                    slots[block.dst] = value
                    block = block.target
                    continue
            elif kind is JUMP:
                block = block.target
                continue
            elif kind is BRANCH:
                block = block.target if slots[block.src] else block.other
                continue
            else:  # MATCH
                value = slots[block.src]
                for matcher, target in block.clauses:
                    if matcher is None or matcher(value, slots):
                        block = target
                        break
                else:
                    raise EvaluationError(f"no clause matches the value {value_text(value)} in "
                                          f"{node_text(block.node, 300)}")
                continue
            # a RETURN (or a foreign tail call) produced `value`
            if not stack:
                return value
            slots, caller = pop()
            slots[caller.dst] = value
            block = caller.target
    except RelayishError as exc:
        add_trace(exc, block, stack, slots)
        raise
    except Exception as exc:  # noqa: BLE001 - a fault in a terminator of an ill-typed program
        error = EvaluationError(f"{type(exc).__name__}: {exc} in {node_text(block.node)}")
        add_trace(error, block, stack, slots)
        raise error from exc


def add_trace(exc, block, stack, slots=None):
    """Note the IR call stack (innermost first) on an error, once, and the expression that
    failed as `exc.node` (where the command line finds FILE:LINE:COLUMN)."""
    if getattr(exc, "_relayish_traced", False):
        return
    exc._relayish_traced = True
    if getattr(exc, "node", None) is None:
        exc.node = failed_node(block, slots)
    names = [block.code.name] + [caller.code.name for _, caller in reversed(stack[-8:])]
    more = f" ... ({len(stack) - 8} more)" if len(stack) > 8 else ""
    exc.add_note("IR call stack (innermost first): " + " <- ".join(names) + more)


def failed_node(block, slots):
    """The expression of `block` that raised: the first step whose slot is still unwritten
    (a frame's locals start as None and each is written once), else the terminator's."""
    if slots is not None:
        for info in block.info:
            slot = info.slot
            if slot is not None and slot < len(slots) and slots[slot] is None:
                return info.node
    return block.node


def call_foreign(fn, args, node):
    """Call a function value that is not interpreter code: constructors, ops, other backends."""
    if not callable(fn):
        raise EvaluationError(f"cannot call a value of type {value_type_text(fn)} in {node_text(node)}")
    settle_all()                 # the callee may read a reference (deferred.py)
    try:
        return fn(*args)
    except EvaluationError as exc:
        if getattr(fn, "names_call_site", False) and not getattr(exc, "_relayish_traced", False):
            raise EvaluationError(f"{exc} in {node_text(node)}") from None
        raise
    except RelayishError:
        raise
    except Exception as exc:  # noqa: BLE001 - a Python callable passed in by the user
        raise EvaluationError(f"{type(exc).__name__} in the function called by {node_text(node)}: "
                              f"{exc}") from exc


def arity_error(code, n, node):
    return code.params.arity_error(n, f" in {node_text(node)}")
