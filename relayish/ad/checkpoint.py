"""Checkpointed reverse mode: `rl.gradient(f, checkpoint=...)` recomputes forward values in the
backward pass instead of keeping them alive.

    fn (T1..Tn) -> R   to   fn (T1..Tn) -> (R, (dT1..dTn))     (rl.gradient's type and values)

    checkpoint=k               cut the let-chain every k bindings, keep every cut's state
                               (k near sqrt(n): O(sqrt n) live values, each step run twice)
    checkpoint="sqrt"          k = ceil(sqrt(n))
    checkpoint="revolve"       one binding a step, s = ceil(log2(m)) + 1 snapshots: Griewank's
                               binomial schedule, O(log n) live states
    checkpoint=("revolve", s)  s snapshots (states kept at once, the first included); also
                               ("revolve", s, k): steps of k bindings

Scheme. relayish/ir/passes/checkpoint.py cuts f's body (in A-normal form) into steps, step i a
function `fn (%s: S_i) -> S_{i+1}` of the tuple of variables live at its cut, and gives the
schedule: a binary tree of ranges of steps. Each step is differentiated on its own (`vjp`; the
last one by `gradient`, which seeds f's result as rl.gradient does), and the output program is
the schedule, written out:

    let %seg_i  = <step i>                         one per distinct step (alike steps share it)
    let %vjp_i  = <vjp of step i>
    let %rev_a_b = fn (%s: S_a, %g: S_b) {          reverse [a, b): the cotangent of S_a
      let %m = %adv_a_mid(%s);                      advance: a closure, so the states it makes
      let %g_mid = %rev_mid_b(%m, %g);              die with its frame
      %rev_a_mid(%s, %g_mid)                        a tail call: this frame is gone
    };
    let %rev_a_a+1 = fn (%s, %g) { %vjp_a(%s).1(%g).0 }     a leaf: the step's tape lives
                                                             only during this call
    ranges ending at the last step take no %g and give (R, cotangent)
    main: let %r = %rev_0_m((%x1, .., %xn)); (%r.0, %r.1)

The interpreter keeps a frame's slots until the frame returns, so what a backward pass keeps is
what the frames on the stack hold: the chain of right ranges (one snapshot each, the schedule's
`kept`), and one step's tape. Without checkpointing the backpropagator closures keep every
op's inputs until the end. The output is an ordinary program: it type-checks, prints, parses,
runs on any backend and differentiates again (its gradient keeps everything: checkpointing is
of the outer reverse pass only).

Limits: only f's top-level let-chain is cut (a loop inside a recursive global or a closure is
one step); f must have tensor or tuple-of-tensor parameters and no globals (no module), and a
cut is made only where the live values are tensors or tuples of them (the IR module's text).
"""
from __future__ import annotations

import math

from relayish.errors import GradientError, RelayishError
from relayish.ir.analysis import global_refs
from relayish.ir.expr import Call, Function, Let, Tuple, TupleGetItem, Var
from relayish.ir.module import Module
from relayish.ir.passes.checkpoint import schedule, step_chain
from relayish.ir.text.printer import astext
from relayish.ir.visitor import build_let_chain

__all__ = ["checkpoint_options", "checkpointed_gradient"]


def checkpoint_options(spec):
    """(every, snapshots, revolve?) from a `checkpoint=` value; GradientError for anything else.
    snapshots None: keep every state (or, for "revolve", chosen from the number of steps)."""
    def bad():
        return GradientError(
            f"checkpoint= takes a positive int k (cut every k bindings), \"sqrt\", \"revolve\" "
            f"or (\"revolve\", snapshots[, k]); got {spec!r}")
    if isinstance(spec, bool):
        raise bad()
    if isinstance(spec, int):
        if spec < 1:
            raise bad()
        return spec, None, False
    if spec == "sqrt":
        return "sqrt", None, False
    if spec == "revolve":
        return 1, None, True
    if isinstance(spec, tuple) and 2 <= len(spec) <= 3 and spec[0] == "revolve":
        rest = spec[1:]
        if all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in rest):
            return (rest[1] if len(rest) == 2 else 1), rest[0], True
    raise bad()


def checkpointed_gradient(func, spec, vjp, gradient):
    """The checkpointed gradient program of the type-checked Function `func` (module text).
    `vjp` and `gradient` are the AD entry points (api.py's: this module never imports api)."""
    every, snapshots, revolve = checkpoint_options(spec)
    if global_refs(func.body):
        raise GradientError(
            "checkpoint= cuts the let-chain of a Function without globals; this one calls "
            f"@{global_refs(func.body)[0]}: differentiate it without checkpoint=")
    try:
        if every == "sqrt":
            n = len(step_chain(func, 1).steps)
            every = max(1, math.isqrt(max(n - 1, 0)) + 1)
        chain = step_chain(func, every)
    except GradientError:
        raise
    except RelayishError as err:
        raise GradientError(f"checkpoint=: {err}") from None
    m = len(chain)
    if revolve and snapshots is None:
        snapshots = max(1, math.ceil(math.log2(m))) + 1 if m > 1 else 1
    plan = schedule(m, snapshots)
    return _Builder(chain, plan, vjp, gradient).program(func)


class _Builder:
    def __init__(self, chain, plan, vjp, gradient):
        self.chain, self.plan = chain, plan
        self.vjp, self.gradient = vjp, gradient
        self.lets = []                       # (Var, value) of the output's top-level chain
        self.seg, self.back = {}, {}         # step index -> Var of its step / its vjp
        self.by_text = {}                    # step text -> (seg Var, vjp Var)
        self.rev = {}                        # (a, b) -> Var of the range's reversal

    def program(self, func):
        chain, plan = self.chain, self.plan
        m = len(chain)
        self._steps()
        # children before parents: the reverse of the schedule's preorder
        for a, b, mid in reversed(plan.nodes):
            for key in ((a, mid), (mid, b)):
                if key[1] - key[0] == 1 and key not in self.rev:
                    self._leaf(*key)
            self._range(a, b, mid)
        if m == 1:
            self._leaf(0, 1)
        params = [Var(p.name_hint, p.checked_type) for p in func.params]
        r = Var("r")
        body = Let(r, Call(self.rev[(0, m)], [Tuple(params)]),
                   Tuple([TupleGetItem(r, 0), TupleGetItem(r, 1)]))
        return Function(params, build_let_chain(self.lets, body))

    def _let(self, name, value, t=None):
        v = Var(name, t)
        self.lets.append((v, value))
        return v

    def _steps(self):
        """A Var bound to each step and one to its vjp (the last step: its gradient); alike
        steps (the same text: a loop unrolled) share both."""
        last = len(self.chain) - 1
        for i, step in enumerate(self.chain.steps):
            key = (i == last, astext(step))
            hit = self.by_text.get(key)
            if hit is None:
                seg = self._let(f"seg{i}", step)
                derived = self.gradient(step) if i == last else self.vjp(step)
                if isinstance(derived, Module):     # tensor states need no ADT helpers
                    raise GradientError("checkpoint=: a step's derivative needs a module")
                back = self._let(f"grad{i}" if i == last else f"vjp{i}", derived)
                hit = self.by_text[key] = (seg, back)
            self.seg[i], self.back[i] = hit

    def _types(self, a, b):
        """(the state type at a, the cotangent type at b, or None at the end)."""
        states = self.chain.states
        return states[a], (states[b] if b < len(states) else None)

    def _leaf(self, a, b):
        s_t, g_t = self._types(a, b)
        s = Var("s", s_t)
        r = Var("r")
        if g_t is None:                      # the last step: gradient gives (R, (dS,))
            body = Let(r, Call(self.back[a], [s]),
                       Tuple([TupleGetItem(r, 0), TupleGetItem(TupleGetItem(r, 1), 0)]))
            self.rev[(a, b)] = self._let(f"rev{a}_{b}", Function([s], body))
            return
        g = Var("g", g_t)
        back = TupleGetItem(Call(self.back[a], [s]), 1)
        body = TupleGetItem(Call(back, [g]), 0)
        self.rev[(a, b)] = self._let(f"rev{a}_{b}", Function([s, g], body))

    def _advance(self, a, mid):
        """A callee advancing state a to mid: a step, or a closure running the steps (its
        frame, holding the states in between, is gone when it returns)."""
        if mid - a == 1:
            return self.seg[a]
        s = Var("s", self.chain.states[a])
        lets, cur = [], s
        for i in range(a, mid - 1):
            nxt = Var("s")
            lets.append((nxt, Call(self.seg[i], [cur])))
            cur = nxt
        body = build_let_chain(lets, Call(self.seg[mid - 1], [cur]))
        return self._let(f"adv{a}_{mid}", Function([s], body))

    def _range(self, a, b, mid):
        s_t, g_t = self._types(a, b)
        adv = self._advance(a, mid)
        s, sm = Var("s", s_t), Var("s_mid")
        if g_t is None:
            r, ga = Var("r"), Var("g")
            body = Let(sm, Call(adv, [s]),
                   Let(r, Call(self.rev[(mid, b)], [sm]),
                   Let(ga, Call(self.rev[(a, mid)], [s, TupleGetItem(r, 1)]),
                       Tuple([TupleGetItem(r, 0), ga]))))
            self.rev[(a, b)] = self._let(f"rev{a}_{b}", Function([s], body))
            return
        g, gm = Var("g", g_t), Var("g_mid")
        body = Let(sm, Call(adv, [s]),
               Let(gm, Call(self.rev[(mid, b)], [sm, g]),
                   Call(self.rev[(a, mid)], [s, gm])))
        self.rev[(a, b)] = self._let(f"rev{a}_{b}", Function([s, g], body))
