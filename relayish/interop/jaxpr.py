"""rl.from_jax: a jax function, read through jax.make_jaxpr, as a relayish Module.

    mod = rl.from_jax(fn, *example_args)      # @main(args...) computes fn(*args)

The jaxpr is read equation by equation (one environment from jaxpr variables to relayish
expressions, one rule per primitive in RULES). Each equation's result is let-bound, named after
its primitive; @main's parameters are named after fn's parameters (the jaxpr's debug info).
Control flow maps to relayish's own:

    cond (cond, switch)        nested if on the branch index
    while (while_loop)         a tail-recursive global @while_N(consts..., carry...): jax cannot
                               reverse it, relayish can (and compiles it as a loop)
    scan (scan, fori_loop)     a tail-recursive global @scan_N over the step index that reads
                               xs[i] with take and writes ys[i] with a select
    jit, pjit, closed_call, custom_jvp_call, custom_vjp_call, remat
                               inlined: their primal jaxpr (relayish differentiates it itself)

Example arguments fix the shapes and dtypes (float64 arguments trace under jax's x64 mode);
arguments and results may be tuples and lists of arrays (they become relayish tuples). A
primitive with no rule is a CompileError naming it and the source line jax recorded for it.
"""
from __future__ import annotations

import itertools

import numpy as np

from relayish.errors import CompileError
from relayish.ir.expr import Call, Constant, Function, GlobalVar, If, Tuple, TupleGetItem, Var
from relayish.ir.module import Module
from relayish.ir.op import get_op, make_call
from relayish.ir.types import TensorType, TupleType
from relayish.ir.typecheck import infer_type
from relayish.ops import api as rop
from relayish.interop.trees import LetChain, leaf_exprs, rebuild, rule_registrar


def from_jax(fn, *example_args):
    """A relayish Module whose @main computes `fn` at the example arguments' shapes and dtypes.

    >>> mod = rl.from_jax(lambda x: jnp.tanh(x).sum(), np.ones(3))
    >>> rl.evaluate(rl.grad(mod), np.zeros(3))        # array([1., 1., 1.])
    """
    import jax
    leaves, in_tree = jax.tree_util.tree_flatten(example_args)
    wide = any(np.dtype(getattr(a, "dtype", np.asarray(a).dtype)).itemsize == 8
               and np.dtype(getattr(a, "dtype", np.asarray(a).dtype)).kind in "fiu"
               for a in leaves)
    with jax.enable_x64(wide):
        closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*example_args)
    return JaxprReader(closed).module(example_args, out_shape)


def _source(eqn) -> str:
    """The line of user code jax recorded for an equation ("file:line:col (function)"), or ""
    (an equation inside a library's jitted function may have none of its own)."""
    try:
        from jax._src import source_info_util
        return source_info_util.summarize(eqn.source_info)
    except Exception:                      # noqa: BLE001  an internal of jax that may move
        return ""


def _tensor_type(aval) -> TensorType:
    return TensorType(tuple(int(d) for d in aval.shape), np.dtype(aval.dtype).name)


def _structure_type(value, what):
    """The relayish type of an example argument or result: tensors and (nested) tuples."""
    if isinstance(value, (tuple, list)):
        return TupleType([_structure_type(v, what) for v in value])
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return TensorType(tuple(int(d) for d in value.shape), np.dtype(value.dtype).name)
    if isinstance(value, (bool, int, float, np.number)):
        return _structure_type(np.asarray(value), what)
    raise CompileError(f"rl.from_jax: {what} is a {type(value).__name__}; relayish takes "
                       "arrays and tuples or lists of them (pass a dict's values as a tuple)")


def _param_name(names, k):
    name = names[k] if names and k < len(names) and names[k] else f"x{k}"
    for cut in "[.":
        name = name.split(cut)[0]
    return name if name.isidentifier() else f"x{k}"


class JaxprReader:
    """Reads one closed jaxpr (and the jaxprs nested in it) into relayish expressions."""

    def __init__(self, closed):
        self.closed = closed
        self.mod = Module()
        self.counter = itertools.count()
        self.where = "(no source line recorded)"    # the innermost equation with a source line

    # ---- the entry -------------------------------------------------------------------------
    def module(self, example_args, out_shape):
        import jax
        debug = getattr(self.closed.jaxpr, "debug_info", None)
        names = list(getattr(debug, "arg_names", None) or ())
        # top-level parameter names: jax names leaves "params[0]"; the prefix names the argument
        top_names, offset = [], 0
        for k, arg in enumerate(example_args):
            n = len(jax.tree_util.tree_leaves(arg))
            top_names.append(_param_name(names[offset:offset + 1] or None, 0)
                             if n else f"x{k}")
            offset += n
        params, leaves = [], []
        used = set()
        for k, arg in enumerate(example_args):
            typ = _structure_type(arg, f"argument {k}")
            name = top_names[k] if top_names[k] not in used else f"{top_names[k]}_{k}"
            used.add(name)
            p = Var(name, typ)
            params.append(p)
            leaf_exprs(p, typ, leaves)
        scope = LetChain()
        outs = self.block(scope, self.closed.jaxpr, self.closed.consts, leaves)
        out_type = _structure_type(out_shape, "the result")
        body = scope.close(rebuild(out_type, iter(outs)))
        self.mod["main"] = Function(params, body)
        return infer_type(self.mod)

    # ---- one block --------------------------------------------------------------------------
    def block(self, scope, jaxpr, consts, args):
        """Bind jaxpr's equations in scope; return its outputs (expressions)."""
        env = {}
        for v, c in zip(jaxpr.constvars, consts):
            env[v] = Constant(np.asarray(c))
        for v, a in zip(jaxpr.invars, args):
            env[v] = a
        live = _live_equations(jaxpr)

        def read(atom):
            if hasattr(atom, "val"):             # a Literal
                return Constant(np.asarray(atom.val, dtype=np.dtype(atom.aval.dtype)))
            return env[atom]

        outer = self.where
        for eqn in jaxpr.eqns:
            if not live[id(eqn)]:
                continue
            self.where = _source(eqn) or outer
            rule = RULES.get(eqn.primitive.name)
            if rule is None:
                raise CompileError(
                    f"rl.from_jax: jax primitive '{eqn.primitive.name}' has no relayish "
                    f"equivalent yet (at {self.where}):\n  {_eqn_text(eqn)}")
            try:
                result = rule(self, scope, eqn, [read(a) for a in eqn.invars])
            except CompileError as error:
                if "(at " in str(error):
                    raise
                raise CompileError(f"{error} (at {self.where}):\n  {_eqn_text(eqn)}") from None
            results = result if isinstance(result, list) else [result]
            name = eqn.primitive.name.replace("-", "_")
            for out, r in zip(eqn.outvars, results):
                if type(out).__name__ != "DropVar":
                    env[out] = scope.bind(name, r)
        self.where = outer
        return [read(v) for v in jaxpr.outvars]

    def sub_block(self, scope, sub, args):
        """Inline a nested jaxpr (closed or open) in scope."""
        jaxpr, consts = (sub.jaxpr, sub.consts) if hasattr(sub, "consts") else (sub, ())
        return self.block(scope, jaxpr, consts, args)

    def expression(self, sub, args):
        """A nested jaxpr as one expression (its own let-chain) returning a tuple."""
        scope = LetChain()
        outs = self.sub_block(scope, sub, args)
        return scope.close(Tuple(outs))

    def fresh_global(self, kind):
        return GlobalVar(f"{kind}_{next(self.counter)}")


def _eqn_text(eqn) -> str:
    try:
        text = str(eqn)
    except Exception:                     # noqa: BLE001  printing is jax's; never fail on it
        text = eqn.primitive.name
    return text if len(text) < 400 else text[:400] + " ..."


def _live_equations(jaxpr):
    """{id(eqn): whether a result is used}: jax keeps dead equations (`_ = sign x`)."""
    needed = {v for v in jaxpr.outvars if not hasattr(v, "val")}
    live = {}
    for eqn in reversed(jaxpr.eqns):
        used = any(o in needed for o in eqn.outvars) or bool(getattr(eqn, "effects", None))
        live[id(eqn)] = used
        if used:
            needed.update(a for a in eqn.invars if not hasattr(a, "val"))
    return live


# ---- rules: (reader, scope, eqn, args) -> expression or list of expressions -----------------

def _aval(eqn, k=0):
    return eqn.outvars[k].aval


def _dtype(eqn, k=0):
    return np.dtype(_aval(eqn, k).dtype).name


def _scalar(value, dtype):
    return Constant(np.asarray(value, dtype=dtype))


RULES = {}


def _op(relay_name):
    op = get_op(relay_name)
    return lambda reader, scope, eqn, args: make_call(op, args)


for _jax, _relay in {
        "add": "add", "sub": "subtract", "mul": "multiply", "neg": "negative", "max": "maximum",
        "min": "minimum", "exp": "exp", "log": "log", "sin": "sin", "cos": "cos", "tan": "tan",
        "tanh": "tanh", "logistic": "sigmoid", "sqrt": "sqrt", "abs": "abs", "pow": "power",
        "erf": "erf", "lt": "less", "gt": "greater", "le": "less_equal", "ge": "greater_equal",
        "eq": "equal", "ne": "not_equal", "log1p": "log1p", "expm1": "expm1", "sign": "sign",
        "floor": "floor", "ceil": "ceil", "lgamma": "lgamma", "digamma": "digamma"}.items():
    RULES[_jax] = _op(_relay)


_rule = rule_registrar(RULES)


def _is_float(dtype):
    return np.dtype(dtype).kind == "f"


@_rule("div")
def _div(reader, scope, eqn, args):
    if not _is_float(_dtype(eqn)):
        raise CompileError("rl.from_jax: integer division (jax rounds toward zero) has no "
                           "relayish operator yet")
    return rop.divide(*args)


@_rule("and", "or", "not")
def _logical(reader, scope, eqn, args):
    if _dtype(eqn) != "bool":
        raise CompileError(f"rl.from_jax: bitwise '{eqn.primitive.name}' of integers has no "
                           "relayish operator (logical and/or/not of booleans do)")
    name = {"and": "logical_and", "or": "logical_or", "not": "logical_not"}[eqn.primitive.name]
    return make_call(get_op(name), args)


@_rule("integer_pow")
def _integer_pow(reader, scope, eqn, args):
    (x,), n = args, eqn.params["y"]
    if n == 2:
        return rop.multiply(x, x)
    if n == 1:
        return x
    return rop.power(x, _scalar(n, _dtype(eqn)))


@_rule("square")
def _square(reader, scope, eqn, args):
    return rop.multiply(args[0], args[0])


@_rule("rsqrt")
def _rsqrt(reader, scope, eqn, args):
    return rop.divide(_scalar(1, _dtype(eqn)), rop.sqrt(args[0]))


@_rule("erfc")
def _erfc(reader, scope, eqn, args):
    return rop.subtract(_scalar(1, _dtype(eqn)), rop.erf(args[0]))


@_rule("round")
def _round(reader, scope, eqn, args):
    if int(eqn.params.get("rounding_method", 0)) != 1:
        raise CompileError("rl.from_jax: rounding halves away from zero (lax.round's default) "
                           "has no relayish operator; jnp.round (halves to even) has")
    return make_call(get_op("round"), args)


@_rule("exp2")
def _exp2(reader, scope, eqn, args):
    return rop.exp(rop.multiply(args[0], _scalar(np.log(2.0), _dtype(eqn))))


@_rule("is_finite")
def _is_finite(reader, scope, eqn, args):
    x = args[0]
    return rop.less(rop.abs(x), _scalar(np.inf, np.dtype(eqn.invars[0].aval.dtype)))


@_rule("stop_gradient")
def _stop_gradient(reader, scope, eqn, args):
    return make_call(get_op("stop_gradient"), args)


@_rule("select_n")
def _select_n(reader, scope, eqn, args):
    pred, cases = args[0], args[1:]
    if len(cases) == 2 and np.dtype(eqn.invars[0].aval.dtype) == np.bool_:
        return rop.where(pred, cases[1], cases[0])
    out = cases[-1]
    idx_dtype = np.dtype(eqn.invars[0].aval.dtype)
    for k in range(len(cases) - 2, -1, -1):
        out = rop.where(rop.equal(pred, _scalar(k, idx_dtype)), cases[k], out)
    return out


@_rule("clamp")
def _clamp(reader, scope, eqn, args):
    lo, x, hi = args
    return rop.minimum(rop.maximum(x, lo), hi)


@_rule("convert_element_type")
def _convert(reader, scope, eqn, args):
    source = np.dtype(eqn.invars[0].aval.dtype).name
    target = _dtype(eqn)
    return args[0] if source == target else rop.cast(args[0], target)


@_rule("copy", "copy_p", "optimization_barrier", "reduce_precision")
def _identity(reader, scope, eqn, args):
    return args if len(args) > 1 else args[0]


# ---- shapes -------------------------------------------------------------------------------------

def _shape(eqn, k=0):
    return tuple(int(d) for d in _aval(eqn, k).shape)


def _in_shape(eqn, k=0):
    return tuple(int(d) for d in eqn.invars[k].aval.shape)


@_rule("reshape", "squeeze", "expand_dims")
def _reshape(reader, scope, eqn, args):
    if eqn.params.get("dimensions") not in (None, ()) and eqn.primitive.name == "reshape":
        raise CompileError("rl.from_jax: a reshape with a dimension order has no relayish "
                           "operator (transpose first)")
    if _in_shape(eqn) == _shape(eqn):
        return args[0]
    return rop.reshape(args[0], _shape(eqn))


@_rule("broadcast_in_dim")
def _broadcast_in_dim(reader, scope, eqn, args):
    x, shape = args[0], _shape(eqn)
    dims = tuple(eqn.params["broadcast_dimensions"])
    in_shape = _in_shape(eqn)
    if list(dims) != sorted(dims):
        raise CompileError("rl.from_jax: broadcast_in_dim that reorders axes")
    placed = [1] * len(shape)
    for d, n in zip(dims, in_shape):
        placed[d] = n
    if tuple(placed) != in_shape:
        x = rop.reshape(x, tuple(placed))
    return x if tuple(placed) == shape else rop.broadcast_to(x, shape)


@_rule("transpose")
def _transpose(reader, scope, eqn, args):
    perm = tuple(int(p) for p in eqn.params["permutation"])
    return args[0] if perm == tuple(range(len(perm))) else rop.transpose(args[0], perm)


@_rule("concatenate")
def _concatenate(reader, scope, eqn, args):
    return rop.concatenate(Tuple(list(args)), axis=int(eqn.params["dimension"]))


@_rule("slice")
def _slice(reader, scope, eqn, args):
    start, limit = tuple(eqn.params["start_indices"]), tuple(eqn.params["limit_indices"])
    strides = eqn.params.get("strides") or (1,) * len(start)
    x = args[0]
    if any(b != 0 or e != n for b, e, n in zip(start, limit, _in_shape(eqn))):
        x = rop.strided_slice(x, start, limit)
    for axis, step in enumerate(strides):
        if step != 1:       # every step-th position of the cut: a take of those positions
            positions = np.arange(0, limit[axis] - start[axis], step, dtype="int32")
            x = rop.take(x, Constant(positions), axis=axis)
    return x


@_rule("split")
def _split(reader, scope, eqn, args):
    axis, sizes = int(eqn.params["axis"]), eqn.params["sizes"]
    shape, start, out = _in_shape(eqn), 0, []
    for n in sizes:
        begin = [0] * len(shape)
        end = list(shape)
        begin[axis], end[axis] = start, start + n
        out.append(rop.strided_slice(args[0], tuple(begin), tuple(end)))
        start += n
    return out


@_rule("dynamic_slice")
def _dynamic_slice(reader, scope, eqn, args):
    x, starts = args[0], args[1:]
    sizes = tuple(eqn.params["slice_sizes"])
    shape = _in_shape(eqn)
    static = [getattr(a, "val", None) for a in eqn.invars[1:]]
    for axis, (start, size, known) in enumerate(zip(starts, sizes, static)):
        if size == shape[axis]:
            continue
        if known is not None:             # a literal start: a static slice, clamped as jax does
            s = int(min(max(int(known), 0), shape[axis] - size))
            begin = [0] * len(shape)
            end = [int(d) for d in _shape_of(x, shape, sizes, axis)]
            begin[axis], end[axis] = s, s + size
            x = rop.strided_slice(x, tuple(begin), tuple(end))
            continue
        # a traced start: take the positions start + [0, size), start clamped into range
        dt = np.dtype(eqn.invars[1 + axis].aval.dtype)
        s = rop.minimum(rop.maximum(start, _scalar(0, dt)), _scalar(shape[axis] - size, dt))
        x = rop.take(x, rop.add(s, Constant(np.arange(size, dtype=dt))), axis=axis)
    return x


def _shape_of(x, shape, sizes, axis):
    # the axes before `axis` are already cut to their slice size
    return [sizes[k] if k < axis else shape[k] for k in range(len(shape))]


@_rule("dynamic_update_slice")
def _dynamic_update_slice(reader, scope, eqn, args):
    operand, update, starts = args[0], args[1], args[2:]
    shape, ushape = _in_shape(eqn, 0), _in_shape(eqn, 1)
    static = [getattr(a, "val", None) for a in eqn.invars[2:]]
    if any(s is None for s in static):
        # a traced start: the positions start + [0, size) along each cut axis as a mask
        mask, placed = None, update
        for axis, (start, n) in enumerate(zip(starts, ushape)):
            if n == shape[axis]:
                continue
            if n != 1:
                raise CompileError("rl.from_jax: dynamic_update_slice at a traced position of "
                                   "a block wider than 1 has no relayish rule yet")
            dt = np.dtype(eqn.invars[2 + axis].aval.dtype)
            s = rop.minimum(rop.maximum(start, _scalar(0, dt)), _scalar(shape[axis] - 1, dt))
            hit = rop.equal(Constant(np.arange(shape[axis], dtype=dt)), s)
            axis_shape = [1] * len(shape)
            axis_shape[axis] = shape[axis]
            hit = rop.reshape(hit, tuple(axis_shape))
            mask = hit if mask is None else rop.logical_and(mask, hit)
        if mask is None:
            return update
        return rop.where(mask, placed, operand)
    begin = [int(min(max(int(s), 0), shape[k] - ushape[k])) for k, s in enumerate(static)]
    end = [b + n for b, n in zip(begin, ushape)]
    if tuple(ushape) == tuple(shape):
        return update
    mask = np.zeros(shape, dtype=bool)
    mask[tuple(slice(b, e) for b, e in zip(begin, end))] = True
    placed = rop.slice_scatter(update, operand, tuple(begin), tuple(end))
    return rop.where(Constant(mask), placed, operand)


@_rule("iota")
def _iota(reader, scope, eqn, args):
    shape, dim = _shape(eqn), int(eqn.params["dimension"])
    axis_shape = [1] * len(shape)
    axis_shape[dim] = shape[dim]
    values = np.arange(shape[dim], dtype=_dtype(eqn)).reshape(axis_shape)
    return Constant(np.ascontiguousarray(np.broadcast_to(values, shape)))


# ---- reductions -------------------------------------------------------------------------------

def _reduce(relay):
    def rule(reader, scope, eqn, args):
        axes = tuple(int(a) for a in eqn.params["axes"])
        if not axes:
            return args[0]
        return getattr(rop, relay)(args[0], axis=axes)
    return rule


RULES["reduce_sum"] = _reduce("sum")
RULES["reduce_max"] = _reduce("max")
RULES["reduce_min"] = _reduce("min")


@_rule("argmax", "argmin")
def _argmax(reader, scope, eqn, args):
    (axis,) = eqn.params["axes"]
    out = getattr(rop, eqn.primitive.name)(args[0], axis=int(axis))
    return out if _dtype(eqn) == "int32" else rop.cast(out, _dtype(eqn))


@_rule("cumsum")
def _cumsum(reader, scope, eqn, args):
    if eqn.params.get("reverse"):
        raise CompileError("rl.from_jax: a reversed cumsum has no relayish operator yet")
    return rop.cumsum(args[0], axis=int(eqn.params["axis"]))


@_rule("dot_general")
def _dot_general(reader, scope, eqn, args):
    lhs, rhs = args
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    ls, rs = _in_shape(eqn, 0), _in_shape(eqn, 1)
    lc, rc, lb, rb = (tuple(int(d) for d in ds) for ds in (lc, rc, lb, rb))
    lf = tuple(d for d in range(len(ls)) if d not in lc + lb)
    rf = tuple(d for d in range(len(rs)) if d not in rc + rb)
    if not lb and len(lc) == 1 and len(ls) <= 2 and len(rs) <= 2:
        # the common matmul shapes directly: x @ w, w @ x, x @ w.T ...
        a = lhs if lc[0] == len(ls) - 1 else rop.transpose(lhs, (1, 0))
        b = rhs if rc[0] == 0 or len(rs) == 1 else rop.transpose(rhs, (1, 0))
        return rop.matmul(a, b)
    size = lambda shape, dims: int(np.prod([shape[d] for d in dims], dtype=np.int64))
    B, M, K, N = size(ls, lb), size(ls, lf), size(ls, lc), size(rs, rf)
    a = _arranged(lhs, ls, lb + lf + lc, (B, M, K))
    b = _arranged(rhs, rs, rb + rc + rf, (B, K, N))
    out = rop.matmul(a, b)
    return rop.reshape(out, _shape(eqn))


def _arranged(x, shape, order, newshape):
    if order != tuple(range(len(shape))):
        x = rop.transpose(x, order)
    return rop.reshape(x, newshape)


# ---- indexing: x[idx] (gather) and x.at[i].set / add (scatter) --------------------------------

@_rule("gather")
def _gather(reader, scope, eqn, args):
    x, idx = args
    d = eqn.params["dimension_numbers"]
    xs, ishape = _in_shape(eqn, 0), _in_shape(eqn, 1)
    sizes = tuple(eqn.params["slice_sizes"])
    if (tuple(d.collapsed_slice_dims) == (0,) and tuple(d.start_index_map) == (0,)
            and not tuple(getattr(d, "operand_batching_dims", ())) and ishape
            and ishape[-1] == 1 and sizes == (1,) + xs[1:]
            and tuple(d.offset_dims) == tuple(range(len(ishape) - 1, len(ishape) - 1 + len(xs) - 1))):
        flat = rop.reshape(idx, ishape[:-1]) if len(ishape) > 1 else rop.reshape(idx, ())
        dt = np.dtype(eqn.invars[1].aval.dtype)
        flat = rop.minimum(rop.maximum(flat, _scalar(0, dt)), _scalar(xs[0] - 1, dt))
        return rop.take(x, flat, axis=0)
    raise CompileError("rl.from_jax: this form of gather (only x[indices] along the first axis "
                       "maps to relayish's take)")


@_rule("scatter", "scatter-add", "scatter_add")
def _scatter(reader, scope, eqn, args):
    x, idx, upd = args
    d = eqn.params["dimension_numbers"]
    xs, ishape, ushape = _in_shape(eqn, 0), _in_shape(eqn, 1), _in_shape(eqn, 2)
    dt = np.dtype(eqn.invars[1].aval.dtype)
    if not (tuple(d.inserted_window_dims) == (0,) and tuple(d.scatter_dims_to_operand_dims) == (0,)
            and ishape and ishape[-1] == 1 and ushape == ishape[:-1] + xs[1:]):
        raise CompileError("rl.from_jax: this form of scatter (only x.at[indices] along the "
                           "first axis maps to relayish)")
    flat = rop.reshape(idx, ishape[:-1])              # (k...) positions along axis 0
    n_idx = int(np.prod(ishape[:-1], dtype=np.int64))
    flat = rop.reshape(flat, (n_idx,))
    upd = rop.reshape(upd, (n_idx,) + xs[1:])
    # hit[k, j]: update k writes row j (out of range: nothing, as jax's FILL_OR_DROP)
    hit = rop.equal(rop.reshape(flat, (n_idx, 1)), Constant(np.arange(xs[0], dtype=dt)))
    hit_f = rop.cast(hit, np.dtype(eqn.invars[0].aval.dtype).name)
    tail = (1,) * (len(xs) - 1)
    # rows[j] = sum over k of hit[k, j] * upd[k]
    spread = rop.sum(rop.multiply(rop.reshape(hit_f, (n_idx, xs[0]) + tail),
                                  rop.reshape(upd, (n_idx, 1) + xs[1:])), axis=0)
    if eqn.primitive.name != "scatter":
        return rop.add(x, spread)
    touched = rop.reshape(rop.greater(rop.sum(hit_f, axis=0), _scalar(0, _dtype(eqn))),
                          (xs[0],) + tail)
    return rop.where(touched, spread, x)


# ---- calls and control flow -------------------------------------------------------------------

@_rule("pjit", "jit", "closed_call", "core_call", "remat", "remat2", "checkpoint", "custom_jvp_call",
       "custom_vjp_call", "custom_vjp_call_jaxpr", "custom_lin")
def _inline(reader, scope, eqn, args):
    p = eqn.params
    sub = p.get("jaxpr") or p.get("call_jaxpr") or p.get("fun_jaxpr")
    if sub is None:
        raise CompileError(f"rl.from_jax: '{eqn.primitive.name}' without a jaxpr to inline")
    n = len(sub.jaxpr.invars if hasattr(sub, "consts") else sub.invars)
    return reader.sub_block(scope, sub, args[len(args) - n:])


def _project(scope, expr, n, name):
    if n == 1:
        return [TupleGetItem(scope.bind(name, expr), 0)]
    v = scope.bind(name, expr)
    return [TupleGetItem(v, k) for k in range(n)]


@_rule("cond")
def _cond(reader, scope, eqn, args):
    index, operands = args[0], args[1:]
    branches = eqn.params["branches"]
    dt = np.dtype(eqn.invars[0].aval.dtype)
    out = reader.expression(branches[-1], operands)
    for k in range(len(branches) - 2, -1, -1):
        test = rop.equal(index, _scalar(k, dt))
        out = If(test, reader.expression(branches[k], operands), out)
    return _project(scope, out, len(eqn.outvars), "cond")


def _typed_params(names, avals):
    return [Var(n, _tensor_type(a)) for n, a in zip(names, avals)]


def _fresh(new, carry, params):
    """The next iteration's carry, where an entry is a parameter of the loop other than its
    own (a carry moved to another place, an invariant made a carry) as a same-shape reshape: a
    new value each iteration. The jax backend compiles a loop whose carries are each either
    passed on unchanged or made in the loop; a value made before the loop in one iteration and
    in the loop in the next (what a shift `(x, prev) -> (f(x), x)` is in reverse mode, where
    each value carries its adjoint reference) it refuses."""
    out = []
    for k, value in enumerate(new):
        if any(value is p for p in params) and value is not carry[k]:
            value = rop.reshape(value, carry[k].type_annotation.shape)
        out.append(value)
    return out


@_rule("while")
def _while(reader, scope, eqn, args):
    p = eqn.params
    cn, bn = p["cond_nconsts"], p["body_nconsts"]
    cconsts, bconsts, init = args[:cn], args[cn:cn + bn], args[cn + bn:]
    avals = [v.aval for v in eqn.invars]
    gv = reader.fresh_global("while")
    params = _typed_params([f"c{k}" for k in range(cn)] + [f"b{k}" for k in range(bn)]
                           + [f"carry{k}" for k in range(len(init))], avals)
    pc, pb, carry = params[:cn], params[cn:cn + bn], params[cn + bn:]
    body = LetChain()
    (pred,) = reader.sub_block(body, p["cond_jaxpr"], pc + carry)
    step = LetChain()
    new = _fresh(reader.sub_block(step, p["body_jaxpr"], pb + carry), carry, params)
    again = step.close(Call(gv, pc + pb + new))
    body_expr = body.close(If(pred, again, Tuple(list(carry))))
    reader.mod[gv] = Function(params, body_expr,
                              ret_type=TupleType([_tensor_type(a) for a in avals[cn + bn:]]))
    return _project(scope, Call(gv, list(args)), len(init), "loop")


@_rule("scan")
def _scan(reader, scope, eqn, args):
    p = eqn.params
    nc, nk, length = p["num_consts"], p["num_carry"], int(p["length"])
    reverse = bool(p["reverse"])
    consts, init, xs = args[:nc], args[nc:nc + nk], args[nc + nk:]
    body_jaxpr = p["jaxpr"]
    in_avals = [v.aval for v in eqn.invars]
    y_avals = [v.aval for v in eqn.outvars[nk:]]
    gv = reader.fresh_global("scan")
    step_t = TensorType((), "int32")
    i = Var("i", step_t)
    ps = _typed_params([f"c{k}" for k in range(nc)], in_avals[:nc])
    pk = _typed_params([f"carry{k}" for k in range(nk)], in_avals[nc:nc + nk])
    px = _typed_params([f"xs{k}" for k in range(len(xs))], in_avals[nc + nk:])
    py = _typed_params([f"ys{k}" for k in range(len(y_avals))], y_avals)
    step = LetChain()
    at = step.bind("t", rop.subtract(_scalar(length - 1, "int32"), i) if reverse else i)
    x_t = [step.bind("x", rop.take(x, at, axis=0)) for x in px]
    outs = reader.sub_block(step, body_jaxpr, ps + pk + x_t)
    new_carry, y_t = _fresh(outs[:nk], pk, ps + pk + px), outs[nk:]
    hit = step.bind("hit", rop.equal(Constant(np.arange(length, dtype="int32")), at))
    new_ys = []
    for ys, y, aval in zip(py, y_t, y_avals):
        mask = rop.reshape(hit, (length,) + (1,) * (len(aval.shape) - 1))
        new_ys.append(step.bind("ys", rop.where(mask, y, ys)))
    again = step.close(Call(gv, ps + [rop.add(i, _scalar(1, "int32"))] + new_carry + px + new_ys))
    done = Tuple(list(pk) + list(py))
    body = If(rop.less(i, _scalar(length, "int32")), again, done)
    ret = TupleType([_tensor_type(a) for a in in_avals[nc:nc + nk]]
                    + [_tensor_type(a) for a in y_avals])
    reader.mod[gv] = Function(ps + [i] + pk + px + py, body, ret_type=ret)
    zeros = [rop.zeros(tuple(int(d) for d in a.shape), np.dtype(a.dtype).name) for a in y_avals]
    call = Call(gv, list(consts) + [_scalar(0, "int32")] + list(init) + list(xs) + zeros)
    return _project(scope, call, nk + len(y_avals), "scan")


# ---- convolutions and pooling (2-D, any layout: transposed to relayish's NCHW / OIHW) ----------

def _inverse(perm):
    out = [0] * len(perm)
    for k, p in enumerate(perm):
        out[p] = k
    return tuple(out)


def _to_layout(x, perm):
    return x if tuple(perm) == tuple(range(len(perm))) else rop.transpose(x, tuple(perm))


@_rule("conv_general_dilated")
def _conv(reader, scope, eqn, args):
    p = eqn.params
    d = p["dimension_numbers"]
    if len(p["window_strides"]) != 2:
        raise CompileError("rl.from_jax: only 2-D convolutions map to relayish's nn.conv2d")
    if any(int(k) != 1 for k in p["lhs_dilation"]) or int(p["batch_group_count"]) != 1:
        raise CompileError("rl.from_jax: a transposed (input-dilated) or batch-grouped "
                           "convolution has no relayish operator")
    (top, bottom), (left, right) = p["padding"]
    x = _to_layout(args[0], d.lhs_spec)          # (batch, feature, spatial...) = NCHW
    w = _to_layout(args[1], d.rhs_spec)          # (out, in, spatial...) = OIHW
    y = rop.nn.conv2d(x, w, strides=tuple(int(s) for s in p["window_strides"]),
                      padding=(int(top), int(left), int(bottom), int(right)),
                      dilation=tuple(int(r) for r in p["rhs_dilation"]),
                      groups=int(p["feature_group_count"]))
    return _to_layout(y, _inverse(d.out_spec))


def _pool_layout(eqn):
    """The axis order that puts the two windowed axes last (NCHW-like), or a CompileError."""
    window = tuple(int(w) for w in eqn.params["window_dimensions"])
    strides = tuple(int(s) for s in eqn.params["window_strides"])
    spatial = [k for k, (w, s) in enumerate(zip(window, strides)) if w != 1 or s != 1]
    if len(window) != 4 or len(spatial) > 2 or any(
            int(b) != 1 for b in tuple(eqn.params["base_dilation"])
            + tuple(eqn.params["window_dilation"])):
        raise CompileError("rl.from_jax: only undilated 2-D pooling windows map to relayish's "
                           "nn.max_pool2d / nn.avg_pool2d")
    spatial = spatial if len(spatial) == 2 else [k for k in (2, 3) if k not in spatial][
        :2 - len(spatial)] + spatial
    spatial = sorted(spatial)
    others = [k for k in range(4) if k not in spatial]
    perm = tuple(others + spatial)
    pads = eqn.params["padding"]
    if any(tuple(pads[k]) != (0, 0) for k in others):
        raise CompileError("rl.from_jax: padding along an axis a pooling window does not move on")
    (top, bottom), (left, right) = (pads[k] for k in spatial)
    attrs = dict(pool_size=tuple(window[k] for k in spatial),
                 strides=tuple(strides[k] for k in spatial),
                 padding=(int(top), int(left), int(bottom), int(right)))
    return perm, attrs


@_rule("reduce_window_max")
def _max_pool(reader, scope, eqn, args):
    perm, attrs = _pool_layout(eqn)
    y = rop.nn.max_pool2d(_to_layout(args[0], perm), **attrs)
    return _to_layout(y, _inverse(perm))


@_rule("reduce_window_sum")
def _sum_pool(reader, scope, eqn, args):
    perm, attrs = _pool_layout(eqn)
    # a window sum is the average counting the padding, times the window's size
    y = rop.nn.avg_pool2d(_to_layout(args[0], perm), count_include_pad=True, **attrs)
    size = attrs["pool_size"][0] * attrs["pool_size"][1]
    return rop.multiply(_to_layout(y, _inverse(perm)), _scalar(size, _dtype(eqn)))
