"""Gradient checkpointing, the IR half: a function's let-chain cut into steps, and the schedules
that say which step states a backward pass keeps and which it recomputes (issue 13).

    chain = step_chain(func, every=k)   # func: a type-checked Function; cut every k bindings
                                        # (every="sqrt": k = ceil(sqrt(bindings)))
    chain.steps     [Function]   step i: fn (%s: S_i) -> S_{i+1}; the last one -> func's result
    chain.states    [TupleType]  S_0 = the tuple of func's parameter types
    tree = schedule(m, snapshots)       # how to reverse m steps keeping at most `snapshots`
                                        # states at once, the first included (None: all)
    tree.advances                       # step evaluations its forward sweeps make
    repetitions(m, s), min_advances(m, s)   # t, and the fewest advances of any schedule

The AD half (relayish/ad/checkpoint.py) turns these into a gradient program: each step is
differentiated on its own, and the backward pass re-runs a step's forward from a kept state to
rebuild its backpropagator, instead of keeping every value of the chain alive.

Cutting. The body is put in A-normal form (anf.py), so each op is one `let`. A cut before
binding j carries the variables live there (defined before j, used at j or later), in order of
definition, as one tuple. A cut is allowed only where every live variable is a tensor or a tuple
of tensors: a closure, reference or ADT value crossing it would have to be a gradient input of
the step after it (reverse mode does not take function or reference inputs), and a reference
crossing a cut would also be shared by a step run twice. Steps run again in the backward pass,
so whatever a step does must be a function of its input state: references it makes are its own
(they cannot cross a cut), and ops are deterministic.

Schedules (Griewank and Walther, "Algorithm 799: revolve", ACM TOMS 26(1), 2000). Reversing
steps [a, b) from the kept state s_a: a leaf (b = a + 1) runs the step's vjp from s_a; otherwise
advance from s_a to s_mid (mid - a step evaluations, nothing kept), reverse [mid, b) keeping
s_mid (one snapshot fewer), then reverse [a, mid) again from s_a. With s snapshots (states kept
at once, the first included), the binomial choice of mid advances each step at most t times, t
the least integer with C(s + t, s) >= m (the repetition number), and makes the fewest advances
of any schedule: t * m - C(s + t, t - 1) (checked against the dynamic program in the tests).
Keeping every state (snapshots=None) is the case s >= m: mid = a + 1, one forward sweep, t = 1.
Each leaf's vjp runs its step once more, so a step runs at most t + 1 times in all (once in a
gradient without checkpointing).

Nothing here recurses in Python: the chain and the schedule tree are walked with loops.
"""
from __future__ import annotations

import math

from relayish.errors import RelayishError
from relayish.ir.analysis import FreeVars
from relayish.ir.expr import Function, Tuple, TupleGetItem, Var
from relayish.ir.passes.anf import to_anf_expr
from relayish.ir.types import TupleType, is_tensor_tree
from relayish.ir.visitor import ExprMutator, build_let_chain, let_chain

__all__ = ["StepChain", "step_chain", "Schedule", "schedule", "repetitions", "min_advances"]


class StepChain:
    """The steps of a cut let-chain: `steps[i]` maps state `states[i]` to `states[i + 1]`, the
    last step maps its state to the function's result. `bindings[i]`: how many bindings of the
    A-normal form step i runs (the sizes the cuts made)."""

    def __init__(self, steps, states, bindings):
        self.steps = steps
        self.states = states
        self.bindings = bindings

    def __len__(self):
        return len(self.steps)


def step_chain(func, every=1) -> StepChain:
    """Cut `func`'s body (put in A-normal form first) into steps of at least `every` bindings,
    at the first allowed cut at or after each multiple (the module text). `func` must be
    type-checked (its result and parameters carry types); the steps are new, unchecked
    Functions whose parameter is annotated with its state type."""
    from relayish.ir.typecheck import infer_type
    if every != "sqrt" and (not isinstance(every, int) or isinstance(every, bool) or every < 1):
        raise RelayishError(f"step_chain: every must be a positive int or \"sqrt\", got "
                            f"{every!r}")
    anf = infer_type(Function(list(func.params), to_anf_expr(func.body), func.ret_type))
    bindings, result = let_chain(anf.body)
    if every == "sqrt":                        # ceil(sqrt(n)) bindings a step
        every = math.isqrt(max(len(bindings) - 1, 0)) + 1
    params = list(anf.params)
    for p in params:
        if not is_tensor_tree(p.checked_type):
            raise RelayishError(
                f"checkpointing needs tensor (or tuple of tensor) parameters; %{p.name_hint} "
                f"has type {p.checked_type}")
    order = {id(p): i for i, p in enumerate(params)}
    for j, (var, _) in enumerate(bindings):
        order[id(var)] = len(params) + j
    # live[j]: the variables used at binding j or later and defined before it (a backward sweep)
    free = FreeVars()
    live = set(id(v) for v in free.of(result))
    byid = {id(v): v for v in free.of(result)}
    live_at = [None] * len(bindings)
    for j in range(len(bindings) - 1, -1, -1):
        var, value = bindings[j]
        live.discard(id(var))
        for v in free.of(value):
            if v is not var:                   # a let-bound function calling itself
                live.add(id(v))
                byid[id(v)] = v
        live_at[j] = sorted(live, key=order.__getitem__)
    cuts = [0]
    for j in range(1, len(bindings)):
        if j - cuts[-1] >= every and all(is_tensor_tree(byid[k].checked_type)
                                         for k in live_at[j]):
            cuts.append(j)
    states = [TupleType([p.checked_type for p in params])]
    for j in cuts[1:]:
        states.append(TupleType([byid[k].checked_type for k in live_at[j]]))
    steps, sizes = [], []
    for i, start in enumerate(cuts):
        stop = cuts[i + 1] if i + 1 < len(cuts) else len(bindings)
        live_in = params if i == 0 else [byid[k] for k in live_at[start]]
        if stop < len(bindings):
            out = Tuple([byid[k] for k in live_at[stop]])
        else:
            out = result
        steps.append(_step(live_in, states[i], bindings[start:stop], out))
        sizes.append(stop - start)
    return StepChain(steps, states, sizes)




class _Rename(ExprMutator):
    def __init__(self, mapping):
        super().__init__()
        self.mapping = mapping

    def visit_Var(self, e):
        return self.mapping.get(id(e), e)


def _step(live_in, state_type, bindings, out) -> Function:
    """fn (%s: state_type) { let %v = %s.0; ...; <bindings, on fresh Vars>; out }"""
    s = Var("s", state_type)
    mapping, chain = {}, []
    rename = _Rename(mapping)
    for k, v in enumerate(live_in):
        fresh = mapping[id(v)] = Var(v.name_hint)
        chain.append((fresh, TupleGetItem(s, k)))
    for var, value in bindings:
        # mapped before its value is renamed: a let-bound closure may call itself
        fresh = mapping[id(var)] = Var(var.name_hint, var.type_annotation)
        chain.append((fresh, rename.visit(value)))
    return Function([s], build_let_chain(chain, rename.visit(out)))


# ---- schedules -------------------------------------------------------------------------------

def _beta(s, t) -> int:
    """C(s + t, s): the most steps s snapshots reverse with each step advanced at most t times."""
    return math.comb(s + t, s)


def _snapshots(m, snapshots) -> int:
    if snapshots is None:
        return max(m, 1)
    if isinstance(snapshots, bool) or not isinstance(snapshots, int) or snapshots < 1:
        raise RelayishError(f"snapshots must be a positive int (the states kept at once, the "
                            f"first one included) or None, got {snapshots!r}")
    return snapshots


def repetitions(m, snapshots=None) -> int:
    """The least t with C(s + t, s) >= m: the most times the binomial schedule advances one
    step (0 for a single step; 1 when every state can be kept)."""
    s = _snapshots(m, snapshots)
    if m <= 1:
        return 0
    t = 1
    while _beta(s, t) < m:
        t += 1
    return t


def min_advances(m, snapshots=None) -> int:
    """The fewest step evaluations of any schedule's advances reversing m steps with s
    snapshots: t * m - C(s + t, t - 1) (Griewank's theorem; s = 1: m (m - 1) / 2)."""
    s = _snapshots(m, snapshots)
    if m <= 1:
        return 0
    t = repetitions(m, s)
    return t * m - math.comb(s + t, t - 1)


def _split(m, s) -> int:
    """Where to take the next snapshot, as an offset into a range of m >= 2 steps that s
    snapshots (its first state included) reverse."""
    if s >= m:
        return 1
    if s == 1:
        return m - 1
    t = repetitions(m, s)
    # An optimal mid (every one in this interval makes min_advances(m, s) advances; the tests
    # check it against the dynamic program): the right part [mid, m), reversed with s - 1
    # snapshots, within C(s - 1 + t, t) steps and beyond C(s - 1 + t - 1, t - 1) of the end;
    # the left part [0, mid), advanced once more now, within C(s + t - 1, s) steps.
    return min(_beta(s, t - 1), m - _beta(s - 1, t - 1), m - 1)


class Schedule:
    """The reversal of steps [0, m) as a binary tree of ranges. `nodes`: (a, b, mid) for every
    range of two or more steps (mid: where its snapshot is taken), parents before children;
    `leaves`: the single steps; `advances`: step evaluations made by the advances (a leaf's own
    forward, inside its vjp, is not counted); `kept`: the most states kept at once (the first
    one included; the state an advance is making is not counted)."""

    def __init__(self, m, snapshots=None):
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise RelayishError(f"a schedule needs at least one step, got {m!r}")
        self.m = m
        self.snapshots = s0 = _snapshots(m, snapshots)
        self.nodes, self.leaves = [], []
        self.advances, self.kept = 0, 1
        work = [(0, m, s0, 1)]
        while work:
            a, b, s, kept = work.pop()
            self.kept = max(self.kept, kept)
            if b - a == 1:
                self.leaves.append(a)
                continue
            mid = a + _split(b - a, s)
            self.nodes.append((a, b, mid))
            self.advances += mid - a
            work.append((a, mid, s, kept))
            # a single step left of the end needs no snapshot of its own: its vjp runs from
            # the state the advance made, which nothing keeps afterwards
            work.append((mid, b, max(s - 1, 1), kept + (b - mid > 1)))


def schedule(m, snapshots=None) -> Schedule:
    """The binomial (revolve) schedule for m steps keeping at most `snapshots` states at once
    (None: every state, one forward sweep)."""
    return Schedule(m, snapshots)
