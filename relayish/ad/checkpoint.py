"""Checkpointed reverse mode: `rl.gradient(f, checkpoint=...)` recomputes forward values in the
backward pass instead of keeping them alive.

    fn (T1..Tn) -> R   to a Module whose @main is fn (T1..Tn) -> (R, (dT1..dTn)) (rl.gradient's
                       type and values)

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
last one by `gradient`, which seeds f's result as rl.gradient does), and the output module is
the schedule, written out as globals:

    @ck_seg<i>   = <step i>                        one per distinct step (alike steps share it)
    @ck_vjp<i>   = <vjp of step i>
    @ck_rev<a>_<b> = fn (%s: S_a, %g: S_b) {       reverse [a, b): the cotangent of S_a
      let %s_mid = @ck_adv<a>_<mid>(%s);           advance (or one step, or one span)
      let %g_mid = @ck_rev<mid>_<b>(%s_mid, %g);
      @ck_rev<a>_<mid>(%s, %g_mid)                 a tail call: this frame is gone
    }
    @ck_span<lo>_<hi> = fn (%s) { @ck_span<half>_<hi>(@ck_span<lo>_<half>(%s)) }
    @ck_adv<a>_<mid>  = fn (%s) { the <= 2 log2 m spans covering [a, mid), in order }

An advance is a walk down a segment tree of spans over the steps: a span's frame holds two
states and the walk is log2 m deep, so an advance holds O(log m) states at a time, and the
spans (at most 2m) are shared by every advance. (A let-chain of the steps would keep all the
states it made in its frame until it returned; and one function advancing "to a given stop"
has no single result type, since the states at different cuts have different types.)
    @ck_rev<a>_<a+1> = fn (%s, %g) { @ck_vjp<a>(%s).1(%g).0 }   a leaf: the step's tape lives
                                                                only during this call
    ranges ending at the last step take no %g and give (R, cotangent)
    @main = fn (%x1, ..) { let %r = @ck_rev0_<m>((%x1, .., %xn)); (%r.0, %r.1) }

Globals, not let-bound closures: a closure per range would be allocated on every run (2m of
them for m steps, more memory than the states the schedule saves when the steps are small).
The interpreter keeps a frame's slots until the frame returns, so what a backward pass keeps is
what the frames on the stack hold: the chain of right ranges (one snapshot each, the schedule's
`kept`), and one step's tape. Without checkpointing the backpropagator closures keep every
op's inputs until the end. The output is an ordinary program: it type-checks, prints, parses,
runs on any backend and differentiates again (its gradient keeps everything: checkpointing is
of the outer reverse pass only).

Other entry points (`checkpointed_entry`). rl.grad and rl.value_and_grad with checkpoint= are
the gradient program above, renamed @ck_gradient, under an @main that picks the value and the
gradients asked for (argnums; the steps' vjps compute every parameter's cotangent anyway).
rl.vjp with checkpoint= differentiates every step with vjp (the last one too), so every range
takes a cotangent; its @main runs the forward once (the span tree, nothing kept) and returns
the value and `fn (%g: R) { @ck_rev0_<m>((%x1, .., %xn), %g) }`, a closure holding only the
inputs: each call of it runs the schedule, so the forward runs once more than in the gradient
(each step at most t + 2 times) and the closure may be called any number of times.

Limits: only f's top-level let-chain is cut (a loop inside a recursive global or a closure is
one step); f must have tensor or tuple-of-tensor parameters and no globals (no module), and a
cut is made only where the live values are tensors or tuples of them (the IR module's text).
"""
from __future__ import annotations

import math

from relayish.errors import GradientError, RelayishError
from relayish.ir.analysis import global_refs
from relayish.ir.expr import Call, Function, GlobalVar, Let, Tuple, TupleGetItem, Var
from relayish.ir.module import Module
from relayish.ir.passes.checkpoint import schedule, step_chain
from relayish.ir.text.printer import astext
from relayish.ir.types import is_tensor_tree
from relayish.ir.visitor import build_let_chain

__all__ = ["checkpoint_options", "checkpointed_gradient", "checkpointed_vjp", "select_gradients"]


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
    chain, plan = _plan(func, spec)
    return _Builder(chain, plan, vjp, gradient).program(func)


def checkpointed_vjp(func, spec, vjp):
    """The checkpointed vjp program of the type-checked Function `func`: a Module whose @main is
    fn (T1..Tn) -> (R, fn (R) -> (T1..Tn)), rl.vjp's type and values (module text)."""
    out_t = func.checked_type.ret_type
    if not is_tensor_tree(out_t):
        raise GradientError(f"vjp needs a function returning tensors or tuples of tensors; "
                            f"this one returns {out_t}")
    chain, plan = _plan(func, spec)
    return _Builder(chain, plan, vjp, None, result=out_t).program(func)


def select_gradients(grad_mod, func, mode, argnums):
    """rl.grad's or rl.value_and_grad's @main over the gradient Module `grad_mod` of `func`:
    its @main becomes @ck_gradient, and the new @main picks the value and the gradients of
    `argnums` from it (the module text)."""
    from relayish.ad.reverse_entry import _check_output, _normalize_argnums
    _check_output(func, func.checked_type.ret_type, mode)
    argnums = _normalize_argnums(0 if argnums is None else argnums, len(func.params))
    out = Module()
    for data in grad_mod.type_definitions.values():
        out.add_type(data)
    for gv, f in grad_mod.functions.items():
        out[GlobalVar("ck_gradient") if gv.name_hint == "main" else gv] = f
    params = [Var(p.name_hint, p.checked_type) for p in func.params]
    r = Var("r")
    grads = TupleGetItem(r, 1)
    picked = TupleGetItem(grads, argnums) if isinstance(argnums, int) else \
        Tuple([TupleGetItem(grads, i) for i in argnums])
    result = picked if mode == "grad" else Tuple([TupleGetItem(r, 0), picked])
    out["main"] = Function(params, Let(r, Call(GlobalVar("ck_gradient"), params), result))
    return out


def _plan(func, spec):
    """(the step chain of `func`, its schedule) for a `checkpoint=` value."""
    every, snapshots, revolve = checkpoint_options(spec)
    if global_refs(func.body):
        raise GradientError(
            "checkpoint= cuts the let-chain of a Function without globals; this one calls "
            f"@{global_refs(func.body)[0]}: differentiate it without checkpoint=")
    try:
        chain = step_chain(func, every)
    except GradientError:
        raise
    except RelayishError as err:
        raise GradientError(f"checkpoint=: {err}") from None
    m = len(chain)
    if revolve and snapshots is None:
        snapshots = max(1, math.ceil(math.log2(m))) + 1 if m > 1 else 1
    return chain, schedule(m, snapshots)


class _Builder:
    """The schedule as globals. `result`: None for the gradient program (the last step by
    `gradient`, the ranges ending there take no cotangent); R for the vjp program (every step
    by `vjp`, every range takes the cotangent at its end, R's at the last)."""

    def __init__(self, chain, plan, vjp, gradient, result=None):
        self.chain, self.plan = chain, plan
        self.vjp, self.gradient = vjp, gradient
        self.result = result
        self.out = Module()                  # every piece a global (the module text)
        self.seg, self.back = {}, {}         # step index -> @ck_seg<i> / @ck_vjp<i> it uses
        self.by_text = {}                    # step text -> (@ck_seg<i>, @ck_vjp<i>)
        self.rev = {}                        # (a, b) -> @ck_rev<a>_<b>, a range's reversal
        self.spans = {}                      # (lo, hi) -> @ck_span<lo>_<hi>

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
        if self.result is not None:
            self.out["main"] = self._vjp_main(params)
            return self.out
        r = Var("r")
        body = Let(r, Call(self.rev[(0, m)], [Tuple(params)]),
                   Tuple([TupleGetItem(r, 0), TupleGetItem(r, 1)]))
        self.out["main"] = Function(params, body)
        return self.out

    def _vjp_main(self, params):
        """fn (%x..) { let %s = (%x..); let %y = <steps 0..m, nothing kept>;
                       (%y, fn (%g) { @ck_rev0_<m>(%s, %g) }) }"""
        m = len(self.chain)
        s, y, g = Var("s"), Var("y"), Var("g", self.result)
        last = s if m == 1 else Var("s_last")
        lets = [(s, Tuple(params))]
        if m > 1:
            lets.append((last, self._advance(0, m - 1, s)))
        lets.append((y, Call(self.seg[m - 1], [last])))
        back = Function([g], Call(self.rev[(0, m)], [s, g]))
        return Function(params, build_let_chain(lets, Tuple([y, back])))

    def _let(self, name, value):
        gv = GlobalVar("ck_" + name)
        self.out[gv] = value
        return gv

    def _steps(self):
        """A Var bound to each step and one to its vjp (the last step: its gradient); alike
        steps (the same text: a loop unrolled) share both."""
        last = len(self.chain) - 1 if self.result is None else -1   # the one by `gradient`
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
        """(the state type at a, the cotangent type at b: None at the end of the gradient
        program, R at the end of the vjp program)."""
        states = self.chain.states
        return states[a], (states[b] if b < len(states) else self.result)

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

    def _advance(self, a, mid, s):
        """The call advancing state %s at a to mid: a step, a span, or @ck_adv<a>_<mid>
        running the spans that cover [a, mid) one after the other."""
        if mid - a == 1:
            return Call(self.seg[a], [s])
        cover = self._cover(a, mid)
        if len(cover) == 1:
            return Call(self._span(*cover[0]), [s])
        s0 = Var("s", self.chain.states[a])
        lets, cur = [], s0
        for lo, hi in cover[:-1]:
            nxt = Var("s")
            lets.append((nxt, Call(self._span(lo, hi), [cur])))
            cur = nxt
        body = build_let_chain(lets, Call(self._span(*cover[-1]), [cur]))
        return Call(self._let(f"adv{a}_{mid}", Function([s0], body)), [s])

    def _cover(self, a, mid):
        """The nodes of the segment tree over steps [0, m - 1) that cover [a, mid), in order
        (at most 2 log2 m of them)."""
        out, stack = [], [(0, len(self.chain) - 1)]
        while stack:
            lo, hi = stack.pop()
            if mid <= lo or hi <= a:
                continue
            if a <= lo and hi <= mid:
                out.append((lo, hi))
                continue
            half = (lo + hi) // 2
            stack.append((half, hi))
            stack.append((lo, half))
        return out

    def _span(self, lo, hi):
        """@ck_span<lo>_<hi>(%s) = @ck_span<half>_<hi>(@ck_span<lo>_<half>(%s)), a step at the
        bottom: shared by every advance through that node, and its frame holds two states."""
        if hi - lo == 1:
            return self.seg[lo]
        hit = self.spans.get((lo, hi))
        if hit is None:
            half = (lo + hi) // 2              # depth log2 m: Python recursion is fine here
            left, right = self._span(lo, half), self._span(half, hi)
            s, mid = Var("s", self.chain.states[lo]), Var("s_half")
            hit = self.spans[(lo, hi)] = self._let(
                f"span{lo}_{hi}", Function([s], Let(mid, Call(left, [s]), Call(right, [mid]))))
        return hit

    def _range(self, a, b, mid):
        s_t, g_t = self._types(a, b)
        s, sm = Var("s", s_t), Var("s_mid")
        adv = self._advance(a, mid, s)
        if g_t is None:
            r, ga = Var("r"), Var("g")
            body = Let(sm, adv,
                   Let(r, Call(self.rev[(mid, b)], [sm]),
                   Let(ga, Call(self.rev[(a, mid)], [s, TupleGetItem(r, 1)]),
                       Tuple([TupleGetItem(r, 0), ga]))))
            self.rev[(a, b)] = self._let(f"rev{a}_{b}", Function([s], body))
            return
        g, gm = Var("g", g_t), Var("g_mid")
        body = Let(sm, adv,
               Let(gm, Call(self.rev[(mid, b)], [sm, g]),
                   Call(self.rev[(a, mid)], [s, gm])))
        self.rev[(a, b)] = self._let(f"rev{a}_{b}", Function([s, g], body))
