"""`re.grad`, `re.call`: reverse AD of the recorded program, and static programs inside it.

Contract. `re.grad(y, wrt=[w, b])` collects the bindings between the `wrt` tensors and `y`
into a Function `F(w, b, c1, ..., ck) -> y` -- the wrt tensors first, then every value the
walk stopped at (leaves, results whose derivation was dropped, and recorded values that do
not depend on any wrt tensor: constants of the differentiation) -- and differentiates it with
`rl.grad(F, argnums=(0, ..))` (relayish's reverse AD on the program; no tape). That gradient
Function is cached under F's structural key (runner.py), so a training loop builds it once. The
call of the gradient Function is then *recorded* like any op, so the gradients are pending
tensors: printing them runs them, and `re.grad` of an expression of them differentiates the
recorded call again (a Hessian-vector product is `re.grad(re.grad(f, [x])[0] @ v, [x])`).
A non-scalar `y` is summed first (the gradient of the sum of its elements, as rl.gradient).

Total derivatives, as `torch.autograd.grad(y, [a, b])`: each wrt tensor gets the gradient of y
at that tensor with every path counted. A wrt tensor computed from another one
(`b = a * 2.0`) is not cut off as an input of F: the walk goes through it, and F reads it as
`b + d_b`, `d_b` a parameter of zeros; the gradient with respect to `d_b` is b's, and a's
counts the path through b (6 and 3 for `y = (b * 3.0).sum()`). A leaf that requires gradients
and was updated in place under no_grad after a use (`u = w * 2.0; w -= 0.5`) is one tensor
with its later versions, as in PyTorch: a use of an earlier version adds to the gradient of
the wrt tensor it became (graph.latest). A gradient program that needs either is wrapped in a
Function that passes the zeros and adds the versions' gradients, so a repeated step still
records one call.

Values recorded under `re.no_grad()` are constants of every gradient (graph.no_grad), whether
or not they were computed inside the region.

What re.grad can see: pending bindings, and bindings recorded with gradients kept (some input
`requires_grad` and not under `re.no_grad()`). A result that was already run without them
keeps only its value; asking for its gradient is an error saying so.

`re.call(f, *tensors)` records a call of a relayish Function or Module (its @main; a Module
with other globals makes the recorded program a Module, runner.Embedded): its type is checked
against the recorded arguments at once, and its gradient flows through (the call is a binding
like any other).

`re.grad(..., checkpoint=k)` differentiates F with `rl.gradient(F, checkpoint=k)` (the
backward pass recomputes forward values; the result is a Module, embedded the same way).
"""
from __future__ import annotations

import time

from relayish.errors import GradientError, RelayishError, TypeCheckError
from relayish.eager import graph
from relayish.eager.checkpoint import through_checkpoints
from relayish.eager.runner import CLEAR_HOOKS, STATS, Checkpointed, Embedded, collect
from relayish.eager.tensor import Tensor, handles, wrap
from relayish.ir.expr import Call, Function, Let, Tuple, TupleGetItem, Var
from relayish.ir.module import Module
from relayish.ir.types import FuncType, TensorType, TupleType, type_text

_GRAD_CACHE: dict = {}       # structural key of F -> (gradient Function, its result type)
_CALLED: dict = {}           # id(f) -> (f, its Function, its type) for re.call


def _checkpoint_key(spec):
    try:
        hash(spec)
        return spec
    except TypeError:
        return repr(spec)


def grad(y, wrt, checkpoint=None):
    """`re.grad(loss, wrt=[w, b])` -> a list of recorded tensors, one gradient per wrt tensor.

        w = re.tensor(np.ones(3), requires_grad=True)
        (gw,) = re.grad((w * w).sum(), wrt=[w])      # 2 * w, recorded

    checkpoint= (k, "sqrt", "revolve", ("revolve", snapshots): rl.gradient's option): the
    gradient program recomputes forward values in its backward pass instead of keeping them.
    """
    if not isinstance(wrt, Tensor):
        try:
            wrt = list(wrt)
        except TypeError:
            raise graph.record_error("re.grad: wrt= takes a list of tensors: wrt=[w]",
                                     GradientError) from None
    fast = _fast_key(y, wrt, checkpoint)
    if fast is not None:
        known = _GRAD_FAST.get(fast)
        if known is not None:
            st = graph.STATE
            nodes, params = st.nodes, st.params
            refs = known[2]
            return _record_gradient(known, [nodes[r] if r >= 0 else params[~r]
                                            for r in refs], wrt, refs)
    _check_grad_arguments(y, wrt)
    targets = []
    for w in wrt:
        if all(w.node is not t for t in targets):
            targets.append(w.node)
    grads = _gradients(y.node, targets, checkpoint, fast, total=True)
    if len(grads) == len(wrt):
        return grads
    by_node = {id(t): g for t, g in zip(targets, grads)}
    return [by_node[id(w.node)] for w in wrt]


def _gradients(y, targets, checkpoint=None, fast=None, stops=(), total=False):
    """One recorded gradient per target node (the walk also stops at `stops`: values taken
    as constants). `total`: torch.autograd.grad's total derivatives (the module docstring);
    otherwise each target is an input of F and the walk stops there (checkpoint.py composes
    with such partial gradients). A derivation holding re.checkpoint regions is composed by
    checkpoint.py."""
    is_param, dependent, aliases = _boundary(y, targets, {id(s) for s in stops}, total)
    roots = [t for t in targets if id(t) not in dependent]
    prog = collect([y], is_param, leading=roots + [a for a, _ in aliases])
    regions = [n for n in prog.bindings if n.kind == "call" and isinstance(n.op, Checkpointed)]
    if regions:
        if checkpoint is not None:
            raise graph.record_error("re.grad(..., checkpoint=) of a value computed by "
                                     "re.checkpoint regions: use one or the other",
                                     GradientError)
        if dependent or aliases:
            raise graph.record_error(
                "re.grad: with re.checkpoint regions in the derivation, a wrt tensor must not "
                "be computed from another wrt tensor, nor be a parameter updated in place "
                "after a use (not supported yet)", GradientError)
        return through_checkpoints(y, targets, regions,
                                   lambda yy, ww, ss: _gradients(yy, ww, stops=ss))
    params = prog.params
    deps = [t for t in targets if id(t) in dependent]
    # F's layout is part of the key: which targets are its inputs and which are perturbed
    # bindings, and which versions add to which target (their number fixes the result)
    layout = (tuple([t.num for t in targets]), tuple([(a.num, targets.index(t))
                                                      for a, t in aliases]))
    key = (prog.key, _checkpoint_key(checkpoint), layout)
    cached = _GRAD_CACHE.get(key)
    if cached is None:
        t0 = time.perf_counter()
        cached = _GRAD_CACHE[key] = _gradient_function(prog, targets, roots, deps, aliases,
                                                       checkpoint)
        STATS["gradient_s"] += time.perf_counter() - t0
    gfunc, ret_type, value_first = cached
    known = (gfunc, ret_type, None, targets, value_first)
    if fast is not None:
        refs = [_segment_ref(p) for p in params]
        if None not in refs:
            # the same segment, output and wrt positions give the same F: next time, no walk
            if len(_GRAD_FAST) >= 4096:
                _GRAD_FAST.clear()
            _GRAD_FAST[fast] = (gfunc, ret_type, refs, [_segment_ref(t) for t in targets],
                                value_first)
    return _record_gradient(known, params, None)


# (segment state, y's position, the wrt tensors' positions, checkpoint=) -> (gradient
# Function, its result type, F's parameters and targets as segment positions, checkpointed?)
_GRAD_FAST: dict = {}
graph.TRIE_RESET_HOOKS.append(_GRAD_FAST.clear)
CLEAR_HOOKS.extend([_GRAD_FAST.clear, _GRAD_CACHE.clear])


def _fast_key(y, wrt, checkpoint):
    """The key of the walk-free path, or None where the segment does not determine F: y is
    recorded in the current segment and every wrt tensor is in it or read by it, and no value
    the segment reads keeps a derivation the walk could follow past it."""
    st = graph.STATE
    sid = st.seg_id
    if st.opaque or st.irregular or y.__class__ is not Tensor or y.node.seg != sid:
        return None
    try:
        refs = tuple([w.node.idx if w.node.seg == sid else ~w.node.pidx
                      if w.node.pseg == sid else None for w in wrt])
        ck = None if checkpoint is None else _checkpoint_key(checkpoint)
    except AttributeError:          # not tensors: the checks of the general path report it
        return None
    if None in refs:
        return None
    return (st.state, y.node.idx, refs, ck)


def _segment_ref(node):
    sid = graph.STATE.seg_id
    if node.seg == sid:
        return node.idx
    if node.pseg == sid:
        return ~node.pidx
    return None


def _segment_node(ref):
    st = graph.STATE
    return st.nodes[ref] if ref >= 0 else st.params[~ref]


def _record_gradient(known, params, wrt, refs=None):
    """Record the call of the gradient program on F's parameters (`refs`: their positions
    in the segment, when known); one tensor per wrt."""
    gfunc, ret_type, _, targets, value_first = known
    call = graph.record_call(gfunc, ret_type, params, refs)
    if value_first:
        call = graph.record_proj(call, 1)          # (value, gradients): the gradients
    grads = handles(graph.record_projections(call, len(targets)))
    if wrt is None or len(grads) == len(wrt):
        return grads
    if isinstance(targets[0], int):
        targets = [_segment_node(r) for r in targets]
    by_node = {id(t): g for t, g in zip(targets, grads)}
    return [by_node[id(w.node)] for w in wrt]


def _check_grad_arguments(y, wrt):
    if not isinstance(y, Tensor):
        raise graph.record_error(f"re.grad: the output must be a recorded tensor, got "
                                 f"{type(y).__name__}", GradientError)
    if isinstance(wrt, Tensor):
        raise graph.record_error("re.grad: wrt= takes a list of tensors: wrt=[w]", GradientError)
    wrt = list(wrt)
    if not wrt or not all(isinstance(w, Tensor) for w in wrt):
        raise graph.record_error("re.grad: wrt= takes a non-empty list of recorded tensors",
                                 GradientError)
    if not y.dtype.startswith("float"):
        raise graph.record_error(f"re.grad: the output is {y.dtype}; gradients need a float "
                                 f"output", GradientError)
    for w in wrt:
        if not w.dtype.startswith("float"):
            raise graph.record_error(f"re.grad: wrt tensor of dtype {w.dtype}: gradients are "
                                     f"taken with respect to float tensors", GradientError)
    computed = y.node.args is None and y.node.kind != "leaf"
    constant = y.node.leaf and not y.node.requires_grad       # recorded under no_grad
    if (computed or constant) and all(w.node is not y.node for w in wrt):
        raise graph.record_error(
            "re.grad: this output was already computed without keeping its derivation (none "
            "of its inputs had requires_grad=True, or it was recorded under re.no_grad()); "
            "create the inputs with re.tensor(..., requires_grad=True), or call re.grad "
            "before inspecting the output", GradientError)


def _boundary(y, targets, stop_ids=frozenset(), total=False):
    """The walk from y: (its stop rule, the ids of the dependent targets, the aliases).

    It stops at values without a derivation, marked leaves and no_grad results (and the
    `stop_ids`, taken as such), and at recorded values that depend on no target (constants
    of the differentiation). Partial (`total` False): at every target. Total: at a target
    computed from no other target (an input of F); a *dependent* target, computed from
    another, is walked through (F perturbs it: Program.function). Aliases (total only):
    `(leaf, target)` for a leaf requiring gradients met by the walk whose in-place updates
    led to a target (graph.latest): its gradient adds to that target's."""
    target_ids = {id(t) for t in targets}
    reaches = {}
    aliases = {}
    stack = [(y, False)]
    while stack:                          # post-order over the derivations, explicit stack
        n, ready = stack.pop()
        if id(n) in reaches:
            continue
        if n.args is None or n.leaf or id(n) in stop_ids or \
                (not total and id(n) in target_ids):
            hit = id(n) in target_ids
            if total and not hit and n.requires_grad:
                owner = _updated_into(n, target_ids)
                if owner is not None:
                    aliases[id(n)] = (n, owner)
                    hit = True
            reaches[id(n)] = hit
            continue
        if not ready:
            stack.append((n, True))
            stack.extend((a, False) for a in n.args if id(a) not in reaches)
            continue
        reaches[id(n)] = id(n) in target_ids or any(reaches[id(a)] for a in n.args)
    dependent = set()
    if total:
        for t in targets:
            if id(t) in reaches and not (t.args is None or t.leaf or id(t) in stop_ids) and \
                    any(reaches[id(a)] for a in t.args):
                dependent.add(id(t))

    def is_param(n):
        if id(n) in target_ids:
            return id(n) not in dependent
        return n.args is None or n.leaf or id(n) in stop_ids or not reaches.get(id(n), False)
    return is_param, dependent, list(aliases.values())


def _updated_into(n, target_ids):
    """The target that the leaf n became by in-place updates (itself excluded), or None."""
    nxt = n.successor
    while nxt is not None:
        if id(nxt) in target_ids:
            return nxt
        nxt = nxt.successor
    return None


def _gradient_function(prog, targets, roots, deps, aliases, checkpoint):
    """The recorded gradient program (a Function, or an Embedded Module), its result type,
    and whether that result is rl.gradient's (value, (every parameter's gradient)), of which
    the first fields of the second are the targets' (checkpoint=). F's parameters are the
    roots and aliases (prog.params, leading), after the perturbations of `deps`."""
    from relayish.ad.api import grad as rl_grad
    from relayish.ad.api import gradient as rl_gradient
    from relayish.ops import api
    program = prog.program(single=True, perturb=deps)
    main = program["main"] if isinstance(program, Module) else program
    if prog.outputs[0].type.shape != ():
        main = Function(main.params, api.sum(main.body))
        if isinstance(program, Module):
            program["main"] = main
        else:
            program = main
    k = len(deps) + len(roots) + len(aliases)
    if checkpoint is not None:
        if isinstance(program, Module):
            raise graph.record_error("re.grad(..., checkpoint=): the recorded program embeds a "
                                     "Module; checkpointing takes a Function", GradientError)
        result = rl_gradient(program, checkpoint=checkpoint)
        ret = TupleType([prog.outputs[0].type if prog.outputs[0].type.shape == () else
                         TensorType((), prog.outputs[0].type.dtype),
                         TupleType([n.type for n in deps] + [p.type for p in prog.params])])
    else:
        result = rl_grad(program, argnums=tuple(range(k)))
        ret = TupleType([n.type for n in deps] + [p.type for p in prog.params[:k - len(deps)]])
    if deps or aliases:
        return _totals(result, prog, targets, roots, deps, aliases, checkpoint is not None)
    return (Embedded(result) if isinstance(result, Module) else result), ret, \
        checkpoint is not None


def _totals(result, prog, targets, roots, deps, aliases, value_first):
    """The gradient program wrapped so that it takes prog's parameters and returns one
    gradient per target: it passes zeros for the perturbations, and adds the gradients of
    a target's earlier versions (aliases) to its own."""
    from relayish.ops import api
    xs = [Var(f"x{i}", p.type) for i, p in enumerate(prog.params)]
    zeros = [api.zeros(n.type.shape, n.type.dtype) for n in deps]
    inner = result["main"] if isinstance(result, Module) else result
    fv, rv = Var("gradient", None), Var("grads", None)
    grads = TupleGetItem(rv, 1) if value_first else rv
    field = {id(n): i for i, n in enumerate(deps + roots + [a for a, _ in aliases])}
    outs = []
    for t in targets:
        g = TupleGetItem(grads, field[id(t)])
        for a, owner in aliases:
            if owner is t:
                g = api.add(g, TupleGetItem(grads, field[id(a)]))
        outs.append(g)
    body = Let(fv, inner, Let(rv, Call(fv, zeros + xs), Tuple(outs)))
    func = Function(xs, body)
    ret = TupleType([t.type for t in targets])
    if isinstance(result, Module):
        mod = Module()
        for gv, f in result.functions.items():
            if gv.name_hint != "main":
                mod[gv] = f
        for data in result.type_definitions.values():
            mod.add_type(data)
        mod["main"] = func
        return Embedded(mod), ret, False
    return func, ret, False


def backward(self, gradient=None, create_graph=False):
    """`loss.backward()`, PyTorch style: the gradient of `loss` with respect to every leaf
    that requires gradients and that `loss` depends on (tensors made with
    `requires_grad=True`, and parameters updated in place under `re.no_grad()`) is added to
    that leaf's `.grad` (`.grad = None` resets it).

    It is `re.grad(loss, wrt=<those leaves>)`, recorded: nothing is computed until a value is
    inspected, and the gradients of a step run in the same compiled program as the step.
    Unlike PyTorch, the recorded derivation is not freed (backward may be called again; it
    goes when `loss` does), and `.grad` is a recorded tensor. `gradient=` weights a
    non-scalar loss (the gradient of `(loss * gradient).sum()`); `create_graph=True` keeps
    the gradients' own derivation, for gradients of gradients.
    """
    if not isinstance(self, Tensor):
        raise graph.record_error("backward() is a method of recorded tensors", GradientError)
    y = self
    if gradient is not None:
        y = (self * gradient).sum()
    elif y.shape != ():
        raise graph.record_error(
            f"backward() of a tensor of shape {y.shape}: the gradient is implicit only for a "
            f"scalar; pass gradient= (a tensor of that shape) or call .sum().backward()",
            GradientError)
    leaves = _grad_leaves(y.node)
    for n in leaves:
        if n.successor is not None:
            # a use of a version before an in-place update counts for the tensor it became
            leaves = list({id(m): m for m in map(graph.latest, leaves)}.values())
            break
    if not leaves:
        raise graph.record_error(
            "backward(): this tensor depends on no tensor that requires gradients (make the "
            "parameters with re.tensor(..., requires_grad=True); results recorded under "
            "re.no_grad() keep no derivation)", GradientError)
    wrt = handles(leaves)
    if create_graph:
        grads = grad(y, wrt=wrt)
    else:
        with graph.no_grad():
            grads = grad(y, wrt=wrt)
    with graph.no_grad():
        for n, g in zip(leaves, grads):
            n.grad = g if n.grad is None else n.grad + g


def _grad_leaves(y):
    """The leaves requiring gradients that y's kept derivation reaches, in a data-independent
    order (depth first from y, arguments in order): an explicit stack, no recursion.

    A y recorded in a segment whose parameters keep no derivation (not `opaque` nor
    `irregular`): the walk stays inside the segment, so what it finds is fixed by the
    segment's key, y's position and which parameters require gradients (a requires_grad_()
    on a parameter already read makes the segment opaque): a repeated step looks it up."""
    st = graph.STATE
    key = None
    if y.seg == st.seg_id and not st.opaque and not st.irregular:
        key = (st.state, y.idx, *[p.requires_grad for p in st.params])
        refs = _LEAVES.get(key)
        if refs is not None:
            nodes, params = st.nodes, st.params
            return [nodes[r] if r >= 0 else params[~r] for r in refs]
    found = _walk_leaves(y)
    if key is not None:
        refs = [_segment_ref(n) for n in found]
        if None not in refs:
            if len(_LEAVES) >= 4096:
                _LEAVES.clear()
            _LEAVES[key] = refs
    return found


# (segment state, y's position, the parameters' requires_grad) -> the leaves' positions
_LEAVES: dict = {}
graph.TRIE_RESET_HOOKS.append(_LEAVES.clear)
CLEAR_HOOKS.append(_LEAVES.clear)


def _walk_leaves(y):
    found, seen = [], set()
    stack = [y]
    while stack:
        n = stack.pop()
        if id(n) in seen or not n.requires_grad:
            continue
        seen.add(id(n))
        if graph.is_leaf(n):
            found.append(n)
        else:
            stack.extend(reversed(n.args))
    return found


Tensor.backward = backward


def call(f, *args):
    """`re.call(f, *tensors)`: record a call of the relayish Function `f` (or Module `mod`,
    its @main); returns a tensor, or a tuple of them for a tuple result. Its gradient flows.

        x = rl.var("x", shape=(3,), dtype="float64")
        f = rl.Function([x], rl.tanh(x))
        y = re.call(f, re.tensor(np.ones(3)))
    """
    from relayish.eager.tensor import as_node
    known = _CALLED.get(id(f))
    if known is None or known[0] is not f:
        # one checked Function per f: the recorded call names it, so every iteration of a
        # loop has the same structural key
        func = _callable_function(f)
        known = _CALLED[id(f)] = (f, func, _checked_type(func))
    _, func, ftype = known
    if len(args) != len(ftype.arg_types):
        raise graph.record_error(f"re.call: the function takes {len(ftype.arg_types)} "
                                 f"argument(s), got {len(args)}", TypeCheckError)
    nodes = []
    for i, (a, t) in enumerate(zip(args, ftype.arg_types)):
        like = _LikeType(t) if isinstance(t, TensorType) else None
        n = as_node(a, like=like)
        if n.type != t:
            raise graph.record_error(f"re.call: argument {i} has type {type_text(n.type)}, the "
                                     f"function's parameter {type_text(t)}", TypeCheckError)
        nodes.append(n)
    return wrap(graph.record_call(func, ftype.ret_type, nodes))


class _LikeType:
    """Stands for a tensor of type t when a Python number takes its dtype (as_node's `like`)."""

    def __init__(self, t):
        from relayish.ir.expr import Var
        self.type = t
        self.var = Var("p", t)


def _callable_function(f):
    if isinstance(f, Module):
        if "main" not in f:
            raise graph.record_error("re.call: this Module has no @main", RelayishError)
        func = f["main"]
        if not _reads_globals(func):
            return func
        try:
            return Embedded(f)
        except RelayishError as e:
            raise graph.record_error(f"re.call: {e}", RelayishError) from None
    if isinstance(f, Function):
        return f
    raise graph.record_error(f"re.call takes a relayish Function or Module, not "
                             f"{type(f).__name__}", RelayishError)


def _reads_globals(func) -> bool:
    from relayish.ir.analysis import global_refs
    return bool(global_refs(func))


def _checked_type(func) -> FuncType:
    from relayish.ir.typecheck import infer_type
    try:
        if isinstance(func, Embedded):
            t = infer_type(func.mod)["main"]._checked_type
        else:
            t = infer_type(func)._checked_type
    except TypeCheckError as e:
        raise graph.record_error(f"re.call: {e}", TypeCheckError) from None
    if not isinstance(t, FuncType) or t.type_params:
        raise graph.record_error("re.call: the function must have a monomorphic type",
                                 RelayishError)
    return t
