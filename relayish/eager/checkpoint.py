"""`re.checkpoint(fn)`: a region whose values the backward pass recomputes instead of keeping.

    block = re.checkpoint(lambda h: re.tanh(re.tanh(h @ w) @ w))
    y = block(x)                  # one recorded call of fn's program; gradients flow through

Contract. `re.checkpoint(fn)(*tensors)` records fn once more on placeholder tensors of the
arguments' types, in a segment of its own (graph.STATE is saved and restored), and collects
what it recorded into a relayish Function `G(args..., captured...) -> result` (captured: the
recorded tensors fn reads from outside, its weights). The current segment gets ONE binding, a
call of G (`Checkpointed`, one object per structure, so a loop keeps its key); running it runs
G's body, whose intermediate values live only while the call runs.

`re.grad` of a value that depends on checkpointed calls c_1..c_m (in recording order)
composes the gradient from plain pieces, each a recorded call like any gradient (autodiff.py):

1. the gradient of y with respect to the targets and every c_j, the c_j taken as inputs
   (the walk stops at them: no gradient program ever sees G's body);
2. for c_m down to c_1, with dc the cotangent c_j has gathered: dx = the vjp of G at c_j's
   arguments x applied to dc -- a call of `rl.grad(fn (x, dc) { sum(G(x) * dc) })`, which runs
   G's forward again (the recomputation) -- then the gradient of `sum(x * dx)` (dx a constant)
   with respect to the targets and c_1..c_{j-1}, which pulls dx back through whatever computed
   x; each adds into the cotangents.

So between its forward call and its vjp nothing of G's inside is kept: what the backward pass
keeps of a chain of checkpointed blocks is the blocks' inputs and outputs (measured on the
interpreter, tests/eager/test_checkpoint.py). On the jax backend a repeated step is compiled
after inlining and common-subexpression elimination, which can share the recomputed forward
with the first one: XLA then schedules the memory itself.

Limits: fn returns one tensor; fn must not inspect values (there are none while it is
recorded; a RelayishError says so); a checkpointed region cannot be combined with
`re.grad(..., checkpoint=)` (which checkpoints the whole differentiated program).
"""
from __future__ import annotations

import functools

from relayish.errors import GradientError, RelayishError
from relayish.eager import graph
from relayish.eager.runner import Checkpointed, collect
from relayish.eager.tensor import Tensor, as_node
from relayish.ir.expr import Call, Function, Let, Var
from relayish.ir.module import Module
from relayish.ir.types import TensorType, TupleType

_TRACED: dict = {}          # structural key of fn's recorded program -> Checkpointed
_VJPS: dict = {}            # id(Checkpointed) -> (it, its vjp Function, the float arguments)


def checkpoint(fn):
    """`re.checkpoint(fn)`: fn, recorded as one call whose values the backward pass
    recomputes (see the module docstring)."""
    if not callable(fn):
        raise graph.record_error(f"re.checkpoint takes a function, not {type(fn).__name__}",
                                 RelayishError)

    @functools.wraps(fn)
    def checkpointed(*args):
        nodes = [as_node(a) for a in args]
        for i, n in enumerate(nodes):
            if not isinstance(n.type, TensorType):
                raise graph.record_error(f"re.checkpoint: argument {i} is not a tensor",
                                         RelayishError)
        region, captured = _trace(fn, nodes)
        return Tensor(graph.record_call(region, region.ret, nodes + captured))
    return checkpointed


class _Inspected:
    """The value of a placeholder while fn is recorded: inspecting it is the user's mistake."""

    def __array__(self, *args, **kwargs):
        raise RelayishError("re.checkpoint: the function inspected a value (float(), bool(), "
                            "print, np.asarray) while it was recorded; a checkpointed function "
                            "must be a fixed computation of its tensors, without Python "
                            "control flow on their values")


_PLACEHOLDER = _Inspected()


def _trace(fn, nodes):
    """Record fn on placeholders in a segment of its own; (Checkpointed, captured nodes)."""
    st = graph.STATE
    saved = st.save_segment()
    st.new_segment()
    st.tracing += 1
    st.recorded_since_run = 0
    auto_run, st.auto_run = st.auto_run, None      # no run while fn is recorded
    trace_sid = st.seg_id
    try:
        holders = [graph.leaf(_PLACEHOLDER, n.type) for n in nodes]
        out = fn(*[Tensor(h) for h in holders])
        if not isinstance(out, Tensor) or not isinstance(out.type, TensorType):
            raise graph.record_error(f"re.checkpoint: the function must return one recorded "
                                     f"tensor, not {type(out).__name__}", RelayishError)
        prog = collect([out.node], lambda n: n.seg != trace_sid, leading=holders)
    finally:
        st.tracing -= 1
        st.auto_run = auto_run
        st.restore_segment(saved)
    region = _TRACED.get(prog.key)
    if region is None:
        program = prog.program(single=True)
        if isinstance(program, Module):
            raise graph.record_error("re.checkpoint: the function calls a Module with other "
                                     "globals; checkpoint a function of plain operations",
                                     RelayishError)
        if len(_TRACED) >= 1024:
            _TRACED.clear()
        region = _TRACED[prog.key] = Checkpointed(program, out.node.type)
    return region, list(prog.params[len(holders):])


def through_checkpoints(y, targets, regions, plain_grad):
    """The gradients of y with respect to `targets` (nodes) when y's derivation holds the
    checkpointed calls `regions` (nodes, in recording order): a list of recorded tensors.
    `plain_grad(y_node, wrt_nodes, stops)` is re.grad's walk with extra stopping nodes."""
    cot = {}

    def add(node, g):
        old = cot.get(id(node))
        cot[id(node)] = g if old is None else old + g

    first = plain_grad(y, list(targets) + list(regions), ())
    for node, g in zip(list(targets) + list(regions), first):
        add(node, g)
    for j in range(len(regions) - 1, -1, -1):
        c = regions[j]
        dc = cot.get(id(c))
        if dc is None:
            continue
        vjp, floats = _vjp(c.op)
        call = graph.record_call(vjp, TupleType([c.args[i].type for i in floats]),
                                 list(c.args) + [dc.node])
        dxs = [graph.record_proj(call, k) for k in range(len(floats))]
        wrt = list(targets) + list(regions[:j])
        terms = [(Tensor(c.args[i]) * Tensor(dx)).sum() for i, dx in zip(floats, dxs)]
        if not terms:
            continue
        s = terms[0]
        for t in terms[1:]:
            s = s + t
        for node, g in zip(wrt, plain_grad(s.node, wrt, dxs)):
            add(node, g)
    return [cot[id(t)] for t in targets]


def _vjp(region):
    """`fn (x..., dc) -> (dx for each float x)`: the vjp of the region's Function, which
    computes its forward again."""
    known = _VJPS.get(id(region))
    if known is not None and known[0] is region:
        return known[1], known[2]
    from relayish.ad.api import grad as rl_grad
    from relayish.ops import api
    g = region.main
    xs = [Var(f"x{i}", p.type_annotation) for i, p in enumerate(g.params)]
    dc = Var("dc", region.ret)
    fv = Var("region", None)
    body = Let(fv, g, api.sum(api.multiply(Call(fv, xs), dc)))
    floats = [i for i, p in enumerate(g.params)
              if isinstance(p.type_annotation, TensorType) and p.type_annotation.is_float]
    if not floats:
        raise graph.record_error("re.checkpoint: the region has no float argument to "
                                 "differentiate", GradientError)
    vjp = rl_grad(Function(xs + [dc], body), argnums=tuple(floats))
    if len(_VJPS) >= 1024:
        _VJPS.clear()
    _VJPS[id(region)] = (region, vjp, floats)
    return vjp, floats
