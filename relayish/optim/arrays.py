"""The array namespaces Newton's iteration is written against (as the ops' impls are).

A namespace is `xp` (numpy or jax.numpy) plus the two control-flow forms the iteration needs,
`while_loop(cond, body, state)` and `cond(pred, if_true, if_false, *operands)`: on the host they
are Python's while and if, under jax.jit `lax.while_loop` and `lax.cond`. jax is imported only
when the XLA namespace is asked for (backend="auto" and the interpreter never import it).
"""
from __future__ import annotations

import attrs
import numpy as np


@attrs.frozen
class Namespace:
    xp: object
    while_loop: object
    cond: object


def _while_loop(cond, body, state):
    while cond(state):
        state = body(state)
    return state


def _cond(pred, if_true, if_false, *operands):
    return if_true(*operands) if pred else if_false(*operands)


HOST = Namespace(np, _while_loop, _cond)


def xla():
    """jax.numpy with lax's control flow: for functions traced by jax.jit."""
    import jax.numpy as jnp
    from jax import lax
    return Namespace(jnp, lax.while_loop, lax.cond)
