"""Shape B of issue 17: a tail recursion whose depth depends on traced values, as ONE
lax.while_loop.

    value = tail_call(ev, loop, callee, args)   # TraceEvaluator.enter's hook; None: unroll

`@loop(x) = if (sum(x * x) > eps) { @loop(step(x)) } else { x }` unrolls forever at trace time
(each level is a traced join whose alternative recurses again; limits.py stops it with a
CompileError). A function dynamic_rule.find_tail_loops recognized (every use of itself a tail
call, a result of tensors) called with traced tensor arguments runs instead as
`lax.while_loop`, carrying its arguments. Its body is traced once, with two cells (JRefs made
before it, so the joins of the body's traced ifs join them like any reference): where the body
calls the function again, the call writes `continue := True` and `next := the arguments` and
gives zeros of the result type; where it returns a value, `continue` stays False and the value
is the loop's result. The loop runs while `continue`, at most `capacity["steps"]` iterations
(rl.compile(..., capacity={"steps": N}); default DEFAULT_STEPS); a loop still going after them
sets a flag the host turns into an EvaluationError naming the function and the bound, never a
silent result.

Called with trace-time constant arguments the recursion unrolls as before (its depth is known
when tracing; small static loops stay unrolled), and so do arguments other than tensors and
tuples of them (a Nat counter; reverse AD's lifted arguments hold references: the gradient of
such a loop is not compiled as a loop yet and ends in limits.py's CompileError, as before). A
function whose every tail position calls itself never ends and is not a loop either. Writes to
references made outside the loop, and such a loop inside another loop or under a traced if,
are CompileErrors naming the function.
"""
from __future__ import annotations

import numpy as np

from relayish.errors import CompileError
from relayish.backend.jax.dynamic_defer import _is_tree, _leaves, _tmap
from relayish.backend.jax.values import (Frame, JRef, closure_name, is_traced, load_jax,
                                         next_serial)

DEFAULT_STEPS = 100_000


def _zeros(t):
    """Zeros of a result type made of tensors and tuples."""
    import jax.numpy as jnp
    from relayish.backend.runtime.args import NP_DTYPES
    from relayish.ir.types import TupleType
    if isinstance(t, TupleType):
        return tuple(_zeros(f) for f in t.fields)
    return jnp.zeros(t.shape, NP_DTYPES[t.dtype])


class _Active:
    """The loop being traced: the function and its two cells."""

    def __init__(self, loop, cont, nxt, result):
        self.loop, self.cont, self.nxt, self.result = loop, cont, nxt, result


def tail_call(ev, loop, callee, args):
    """The value of a call of the recognized tail recursion `loop` (module docstring), or
    None when it should unroll (constant arguments) -- or, inside the loop's own body, the
    recorded recursive call."""
    active = ev.tail
    if active is not None and active.loop is loop:
        # the body calls itself: continue with these arguments
        ev.write(active.cont, np.asarray(True))
        ev.write(active.nxt, tuple(_tmap(lambda v, o: _cast(v, o), a, o)
                                   for a, o in zip(args, active.nxt.value)))
        return _zeros(loop.ret)
    # constants unroll at trace time; so do arguments other than tensors (a Nat counter, the
    # references of reverse AD's lifted arguments: a loop carrying them is not compiled yet,
    # and a traced condition then ends in limits.py's CompileError, as before)
    if not all(_is_tree(a) for a in args) or \
            not any(is_traced(x) for a in args for x in _leaves(a, [])):
        return None
    name = closure_name(callee)
    if active is not None or ev.loop is not None or ev.join_depth:
        raise CompileError(f"{name}: a loop whose trip count is traced inside another loop or "
                           "under a traced if is not compiled as a loop yet; use rl.evaluate")
    return _run(ev, loop, name, [_tmap(lambda v: _cast(v, v), a) for a in args])


def _cast(v, like):
    import jax.numpy as jnp
    from jax import lax
    return lax.convert_element_type(jnp.asarray(v), jnp.asarray(like).dtype)


def _run(ev, loop, name, args):
    jax = load_jax()
    import jax.numpy as jnp
    from jax import lax
    func = loop.func
    steps = ev.capacity.get("steps", DEFAULT_STEPS)
    start = next_serial()
    cont, nxt = JRef(np.asarray(False), start), JRef(tuple(args), start)
    saved_frames, saved_tail = ev.frames, ev.tail

    def step(values):
        """One iteration: (continue, next arguments, result) of the body on `values`."""
        cont.value, nxt.value = np.asarray(False), tuple(values)
        env = dict(zip(func.params, values))
        result = ev.eval(func.body, env)
        if not _is_tree(result):
            raise CompileError(f"{name} returns a non-tensor value from a loop")
        return (jnp.asarray(cont.value), list(nxt.value),
                _tmap(lambda v, o: _cast(v, o), result, _zeros(loop.ret)))

    # trace once to find writes to references made before the loop (not carried yet)
    frame = Frame(start)
    try:
        ev.frames, ev.tail = [frame], _Active(loop, cont, nxt, None)

        def probe():
            try:
                step(args)
            finally:
                for ref, old in frame.log.values():
                    ref.value = old
            return []
        jax.make_jaxpr(probe)()
    finally:
        ev.frames, ev.tail = saved_frames, saved_tail
    outer = [ref for ref, _ in frame.log.values() if ref is not cont and ref is not nxt]
    if outer:
        raise CompileError(f"{name}: its loop writes a reference made outside it; a loop whose "
                           "trip count is traced is not compiled with such effects yet: use "
                           "rl.evaluate")

    def body(state):
        i, going, values, _ = state
        try:
            ev.frames, ev.tail = [], _Active(loop, cont, nxt, None)
            going, values, result = step(values)
        finally:
            ev.frames, ev.tail = saved_frames, saved_tail
        return i + 1, going, values, result
    state = (jnp.asarray(0, jnp.int32), jnp.asarray(True), list(args), _zeros(loop.ret))
    _, going, _, result = lax.while_loop(lambda s: s[1] & (s[0] < steps), body, state)
    ev.faults.append((going, f"{name} ran more than {steps} iterations, the loop's step "
                             "capacity: rl.compile(..., capacity={\"steps\": ...}) a larger one"))
    return result


__all__ = ["DEFAULT_STEPS", "tail_call"]
