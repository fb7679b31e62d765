"""rl.evaluate: the numpy reference interpreter's entry point and its compile caches.

    evaluate(f_or_mod, *args, mod=None, debug_nans=False, debug_alloc=False) -> value

The program is type-checked once (runtime.check.checked: a TypeCheckError is the user's, any
other fault of the checker surfaces), compiled (compiler.py) with the cyclic GC paused and
under run_deep, cached, and run by the machine (run.py). Caches are weak: per Function, its
Code; per Module, its @main closure and the stamp of the module's table of functions (compiled
again when the table changes; a hit costs O(1) in the number of globals); other expressions are
compiled on each call.
"""
from __future__ import annotations

import weakref

from relayish.errors import EvaluationError, RelayishError
from relayish.ir.expr import Expr, Function
from relayish.ir.identity import WeakIdentityMap
from relayish.ir.link import link
from relayish.ir.module import Module
from relayish.ir.visitor import no_gc, run_deep
from relayish.backend.batching import Batched
from relayish.backend.runtime.check import checked
from relayish.backend.runtime.describe import value_type_text
from relayish.backend.interp.compiler import Program
from relayish.backend.interp.modes import compile_options
from relayish.backend.interp.run import InterpreterClosure, execute

__all__ = ["evaluate"]

# Weak caches: a cached value must not refer to its key, or the key would never die. Code holds
# its top-level Function through a weakref, and a module's entry holds its main closure (whose
# code refers to the module's functions, never to the Module).
_FUNCTION_CACHE = WeakIdentityMap()     # Function -> Code (by identity: `==` builds an op)
_MODULE_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # Module -> (stamp, main)


def _compile_quietly(fn, *args):
    """run_deep(fn) with the cyclic garbage collector paused.

    Compiling allocates one closure per node and frees almost nothing, which makes CPython's
    collector rescan the whole (large) program repeatedly: about half the compile time of a
    10^5-node program. Nothing cyclic becomes garbage while compiling.
    """
    with no_gc():
        return run_deep(fn, *args)


def _compile_module(mod, options=None):
    """The closure of a Module's @main, compiled again when the module's functions change
    (`options`: a debug mode's Program arguments; not cached)."""
    if options:
        mod, _ = checked(link(mod)[0])
        return _compile_quietly(_compile_program, Program(mod, **options))
    # The table's stamp changes with any change to it (ir/module.py): the hit costs O(1), not
    # a walk over the globals. A table replaced by a plain dict is never cached.
    stamp = getattr(mod.functions, "stamp", None)
    state = _MODULE_CACHE.get(mod)
    if state is not None and stamp is not None and state[0] == stamp:
        return state[1]
    program = Program(checked(link(mod)[0])[0])    # called Modules merged (ir/link.py)
    main = _compile_quietly(_compile_program, program)
    _MODULE_CACHE[mod] = (stamp, main)
    return main


def _compile_program(program):
    main = program.global_closure(program.mod.get_global_var("main"))
    program.drain()
    return main


def _compile_closed(func, mod=None, cache=True, options=None):
    """The Code of a closed Function (globals resolved in `mod`), cached per Function
    (`options`: a debug mode's Program arguments; not cached)."""
    cache = cache and mod is None and not options
    if cache:
        code = _FUNCTION_CACHE.get(func)
        if code is not None:
            return code
    func, mod = link(func, mod)          # called Modules' globals merged (ir/link.py)
    mod, func = checked(func, mod)
    program = Program(mod, **(options or {}))

    def build():
        code = program.compile_function(func, "fn")
        program.drain()
        return code
    code = _compile_quietly(build)
    if cache:
        code.func = weakref.ref(func)
        _FUNCTION_CACHE[func] = code
    return code


# ---- entry point -----------------------------------------------------------------------------

def evaluate(f_or_mod, *args, mod=None, debug_nans=False, debug_alloc=False):
    """Run a program on the numpy interpreter and return its value.

    - a Module: runs @main on `args`;
    - a Function: calls it on `args` (globals it names are looked up in `mod=`);
    - any other closed expression: its value (if that is a function and args are given, it is
      called on them);
    - a batched program (rl.vmap): the program on each example, results stacked.

    debug_nans=True: an EvaluationError at the first binding whose value has a NaN or an Inf,
    naming it, its op, its source position and its inputs' summaries (modes.py).
    debug_alloc=True: no buffer sharing (no shared zero tensors, no in-place accumulation) and
    every array a reference releases filled with NaN, so that a read of a released buffer shows
    up as NaN. Either mode compiles the program afresh (no cache); when both are off, nothing
    of them is in the compiled code.

    >>> x = rl.var("x", shape=(2,), dtype="float64")
    >>> rl.evaluate(rl.Function([x], x * x), [1.0, 2.0])
    array([1., 4.])
    """
    options = compile_options(debug_nans, debug_alloc)
    if isinstance(f_or_mod, Batched):
        # rl.vmap's reference semantics: the program on each example, results stacked
        return f_or_mod.map_examples(lambda *xs: evaluate(
            f_or_mod.program, *xs, debug_nans=debug_nans, debug_alloc=debug_alloc), args)
    if isinstance(f_or_mod, Module):
        return _compile_module(f_or_mod, options)(*args)
    if isinstance(f_or_mod, Function):
        return InterpreterClosure(_compile_closed(f_or_mod, mod, options=options), ())(*args)
    if isinstance(f_or_mod, Expr):
        # not cached: the compiled code refers to the expression's nodes, which would keep a
        # weakly cached expression alive forever
        code = _compile_closed(Function([], f_or_mod), mod, cache=False, options=options)
        value = execute(code, list(code.rest))
        if args:
            if not callable(value):
                raise EvaluationError(f"evaluate was given {len(args)} argument(s) but the "
                                      f"expression evaluates to {value_type_text(value)}, "
                                      "not a function")
            return value(*args)
        return value
    raise RelayishError(f"evaluate takes a Function, Module or expression, "
                        f"got {type(f_or_mod).__name__}")
