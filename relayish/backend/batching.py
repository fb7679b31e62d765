"""rl.vmap: a relayish program mapped over a batch of examples.

    vf = rl.vmap(f, in_axes=0)           # f: a Function, or a Module (its @main)
    rl.evaluate(vf, xs, w)               # the reference: f on each example, results stacked
    run = rl.compile(vf, backend="jax")  # f traced once, under jax.vmap, inside one jax.jit
    run = rl.compile(vf, backend="jax", devices=jax.devices("cpu")[:4])   # the batch sharded
    rl.astext(vf)                        # a header comment, then f's text

Contract. `vf` is a `Batched`: the program `f` and one entry of `in_axes` per parameter (an int
or None given once applies to every parameter). A parameter batched on axis `a`:
  * a tensor, or a tuple of tensors (nested): each tensor argument carries one more axis, at
    `a` (negative counts from the end of the batched shape), the batch;
  * any other type (ADT values such as a List or a Tree): a Python list of values, one per
    example (in_axes 0); on jax, a tree or list argument must be a node-table argument of f
    (a parameter f only passes to a recognized fold, issue 17: relayish/backend/jax/
    dynamic_rule.py): each example's table
    is padded to the largest capacity of the batch (or the fixed capacity={"nodes": N}) and
    the tables are stacked [B, capacity, ...], so the fold's loop advances every example at
    once (jax batches a loop by running it until the last example is done);
  * a function or a reference: not batchable (pass it unbatched, in_axes None).
An unbatched parameter (None) takes one value, shared by every example. The result of f must be
a tensor or tuples of tensors; `vf`'s result has the same structure, each tensor stacked on a
new leading axis (the batch). Errors are relayish errors naming the parameter: in_axes of the
wrong length, a batch axis out of range or on an unbatchable parameter (TypeCheckError, from
rl.vmap), an argument without its batch axis, batch sizes that differ between arguments
(EvaluationError, from the call).

Why a wrapper and not a relayish Function (notes/batching.md): a batched program as relayish IR
needs either a map node every pass, the printer, the type checker and AD would have to learn,
or B copies of f (its size growing with the batch). The semantics is the per-example loop, and
the jax backend gets the batched program from jax.vmap of f's single trace: jax's batching
rules already cover every primitive a relayish program lowers to, lax.switch included.

Backends (`compile_batched`, called by rl.compile): a backend whose compiled callables are jax
traceable (registry `jax_traceable`) runs jax.jit(jax.vmap(run_one)), with `run_one` f
compiled for one example (traced once per argument structure: jax's cache keys the vmapped
function by the batched shapes, and each new batch size reuses run_one's trace; its traced
joins are selects, `select_joins`, and its run-time checks come back as outputs, checked per
example after the call, `call_in_trace`); with
`devices=`, a 1-D `jax.sharding.Mesh` over the batch axis shards the batched arguments and the
results (`NamedSharding`), the unbatched arguments are replicated, and a batch size that is not
a multiple of the device count is an EvaluationError (no padding: a padded example would run
the program on made-up data). Any other backend runs the per-example loop.
Not yet: on jax, ADT arguments that are not node tables and function or reference arguments
(CompileErrors say so); rl.vmap of a Batched (vmap of vmap); AD of a Batched (batch the
gradient instead: rl.vmap(rl.grad(f))).
"""
from __future__ import annotations

import numpy as np

from relayish.errors import CompileError, EvaluationError, RelayishError, TypeCheckError
from relayish.ir.expr import Function
from relayish.ir.link import link_program
from relayish.ir.module import Module
from relayish.ir.types import FuncType, RefType, TensorType, TupleType, is_tensor_tree
from relayish.ir.visitor import run_deep
from relayish.backend.runtime.args import ValueChecker, to_tensor
from relayish.backend.runtime.check import checked, param_type
from relayish.backend.runtime.describe import type_text, value_type_text

__all__ = ["Batched", "vmap", "compile_batched", "StackedTables"]

_NDARRAY = np.ndarray


class Batched:
    """A program mapped over a batch: what rl.vmap returns (see the module docstring).

    `program` is f as given (a Function or Module), `main` its checked function, `in_axes` one
    entry per parameter (None or an int), `batch_size(*args)` the batch size of a call.
    """

    __slots__ = ("program", "mod", "main", "in_axes", "names", "types", "result_type",
                 "__weakref__")

    def __init__(self, program, in_axes):
        if isinstance(program, Batched):
            raise TypeCheckError("rl.vmap of a batched program (rl.vmap(rl.vmap(f))) is not "
                                 "supported; batch f once over a flattened batch axis instead")
        if not isinstance(program, (Function, Module)):
            raise TypeCheckError("rl.vmap takes a relayish Function or Module, got "
                                 f"{type(program).__name__}")
        self.program = program
        self.mod, self.main = checked(program, None, who="rl.vmap", error=TypeCheckError)
        params = self.main.params
        self.names = ["%" + p.name_hint for p in params]
        self.types = [param_type(p) for p in params]
        self.in_axes = _normalized_axes(in_axes, self)
        self.result_type = self.main.checked_type.ret_type
        if not is_tensor_tree(self.result_type):
            raise TypeCheckError(
                f"rl.vmap: {self.name} returns {type_text(self.result_type)}; a batched program "
                "returns tensors and tuples of tensors (stacked on a new axis 0)")

    @property
    def name(self):
        return "@main" if isinstance(self.program, Module) else "fn"

    def __repr__(self):
        return f"<relayish Batched {self.name} in_axes={self.in_axes}>"

    def header(self):
        """One comment line saying how the program is batched."""
        axes = ", ".join(f"{n} on axis {a}" if a is not None else f"{n} unbatched"
                         for n, a in zip(self.names, self.in_axes))
        return (f"// rl.vmap(in_axes={self.in_axes}): {self.name} over a batch ({axes}); "
                "results stacked on axis 0")

    def relayish_text(self, show_version=None):
        """rl.astext(vf): the header comment, then the program's own text."""
        from relayish.ir.text.printer import astext
        return self.header() + "\n" + astext(self.program, show_version=show_version)

    def is_tensors(self, k):
        """Does parameter k batch along an axis (tensors), rather than as a list of values?"""
        return is_tensor_tree(self.types[k])

    # ---- a call's arguments ---------------------------------------------------------------
    def split(self, args, tensor=to_tensor):
        """(batch size, argument values) of a call, checked: each batched tensor argument
        converted to its batched type (`tensor`: the conversion hook, runtime/args.py), each
        batched value list a list; unbatched arguments are left to the program's checker."""
        if len(args) != len(self.names):
            raise EvaluationError(f"rl.vmap({self.name}) takes {len(self.names)} argument(s) "
                                  f"({', '.join(self.names)}), got {len(args)}")
        sizes, values = [], []
        checker = ValueChecker(tensor=tensor)
        for k, (arg, axis) in enumerate(zip(args, self.in_axes)):
            if axis is None:
                values.append(arg)
                continue
            owner = f"parameter {self.names[k]} of rl.vmap({self.name}) (batched on axis {axis})"
            if self.is_tensors(k):
                batched, size = self._batched_type(k, arg, owner)
                values.append(checker.to_value(arg, batched, owner))
            elif isinstance(arg, StackedTables):        # encoded ahead (encode_batch)
                size = arg.size
                values.append(arg)
            else:
                if not isinstance(arg, (list, tuple)):
                    raise EvaluationError(
                        f"bad argument for {owner}: a batched {type_text(self.types[k])} is a "
                        f"Python list of values, one per example; got {value_type_text(arg)}")
                size = len(arg)
                values.append(list(arg))
            sizes.append((self.names[k], size))
        if len({s for _, s in sizes}) > 1:
            raise EvaluationError(
                f"rl.vmap({self.name}): the batched arguments have different batch sizes ("
                + ", ".join(f"{n}: {s}" for n, s in sizes) + ")")
        return sizes[0][1], values

    def _batched_type(self, k, arg, owner):
        """(parameter k's type with the batch axis inserted in every tensor, batch size), the
        size read from the first tensor of `arg`."""
        t, axis = self.types[k], self.in_axes[k]
        leaf, leaf_t = arg, t
        while isinstance(leaf_t, TupleType):          # down to the first tensor
            if not isinstance(leaf, (tuple, list)) or len(leaf) != len(leaf_t.fields):
                raise EvaluationError(f"bad argument for {owner}: expected "
                                      f"{type_text(t)} batched, got {value_type_text(arg)}")
            if not leaf_t.fields:
                raise EvaluationError(f"bad argument for {owner}: an empty tuple has no batch "
                                      "axis; pass it unbatched (in_axes None)")
            leaf, leaf_t = leaf[0], leaf_t.fields[0]
        try:
            shape = tuple(np.shape(leaf))
        except ValueError:       # a ragged nested list
            shape = None
        if shape is None or len(shape) != leaf_t.ndim + 1:
            got = "a ragged list" if shape is None else f"shape {shape}"
            raise EvaluationError(
                f"bad argument for {owner}: expected a batch of {type_text(leaf_t)} with the "
                f"batch axis at {axis} (shape {_insert(leaf_t.shape, axis, 'B')}), got {got}: "
                "a batched argument needs the batch axis")
        size = shape[_axis(axis, leaf_t.ndim)]
        return _map_tensors(t, lambda tt: TensorType(_insert(tt.shape, axis, size),
                                                     tt.dtype)), size

    def example(self, values, i):
        """The arguments of example i, from `split`'s values (numpy arrays)."""
        out = []
        for k, (v, axis) in enumerate(zip(values, self.in_axes)):
            if axis is None:
                out.append(v)
            elif self.is_tensors(k):
                out.append(_map_values(v, lambda a: np.take(a, i, axis=_axis(axis, a.ndim - 1))))
            else:
                out.append(v[i])
        return out

    def map_examples(self, run_one, args):
        """The reference semantics: `run_one` (f on one example) on each example, each result
        tensor stacked on a new axis 0."""
        size, values = self.split(args)
        results = [run_one(*self.example(values, i)) for i in range(size)]
        return _stack(results, self.result_type)


def vmap(f, in_axes=0):
    """f mapped over a batch: tensor arguments carry a batch axis (in_axes: an int, None for an
    argument shared by every example, or a tuple with one entry per parameter), ADT arguments
    come as a Python list of values; results are stacked on axis 0. rl.evaluate and rl.compile
    run it (rl.compile(vf, backend="jax", devices=[...]) shards the batch over devices).

    >>> x = rl.var("x", shape=(3,)); w = rl.var("w", shape=(3,))
    >>> vf = rl.vmap(rl.Function([x, w], rl.sum(x * w)), in_axes=(0, None))
    >>> rl.evaluate(vf, np.ones((5, 3), "float32"), np.arange(3, dtype="float32"))  # shape (5,)
    """
    return Batched(link_program(f) if isinstance(f, (Function, Module)) else f, in_axes)


def _normalized_axes(in_axes, vf):
    n = len(vf.names)
    if isinstance(in_axes, (tuple, list)):
        if len(in_axes) != n:
            raise TypeCheckError(
                f"rl.vmap: in_axes has {len(in_axes)} entries but {vf.name} takes {n} "
                f"parameter(s) ({', '.join(vf.names) or 'none'}): one entry per parameter")
        axes = list(in_axes)
    else:
        axes = [in_axes] * n
    for k, axis in enumerate(axes):
        if axis is None:
            continue
        where = f"rl.vmap: in_axes {axis!r} for {vf.names[k]}: {type_text(vf.types[k])}"
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
            raise TypeCheckError(f"{where}: an entry of in_axes is an int or None")
        axes[k] = axis = int(axis)
        t = vf.types[k]
        if is_tensor_tree(t):
            for leaf in _tensor_leaves(t):
                if not -(leaf.ndim + 1) <= axis <= leaf.ndim:
                    raise TypeCheckError(f"{where}: the batch axis of a rank-{leaf.ndim} tensor "
                                         f"is between {-(leaf.ndim + 1)} and {leaf.ndim}")
        elif _holds_function_or_ref(t):
            raise TypeCheckError(f"{where}: functions and references cannot be batched; pass "
                                 "it unbatched (in_axes None)")
        elif axis != 0:
            raise TypeCheckError(f"{where}: a batched value of this type is a Python list of "
                                 "values, one per example: in_axes 0 or None")
    if all(a is None for a in axes):
        raise TypeCheckError(f"rl.vmap: in_axes batches none of {vf.name}'s parameters ("
                             f"{', '.join(vf.names) or 'none'}); batch at least one")
    return tuple(axes)


def _holds_function_or_ref(t):
    stack = [t]
    while stack:
        t = stack.pop()
        if isinstance(t, (FuncType, RefType)):
            return True
        if isinstance(t, TupleType):
            stack.extend(t.fields)
    return False


def _axis(axis, ndim):
    """A batch axis as a position in a batched shape of rank ndim + 1."""
    return axis if axis >= 0 else axis + ndim + 1


def _insert(shape, axis, size):
    shape = list(shape)
    shape.insert(_axis(axis, len(shape)), size)
    return tuple(shape)


def _tensor_leaves(t):
    if isinstance(t, TupleType):
        return [leaf for f in t.fields for leaf in _tensor_leaves(f)]
    return [t]


def _map_tensors(t, fn):
    """The tensor-tree type `t` with `fn` applied to each tensor type (types are shallow)."""
    if isinstance(t, TupleType):
        return TupleType([_map_tensors(f, fn) for f in t.fields])
    return fn(t)


def _map_values(v, fn):
    if isinstance(v, tuple):
        return tuple(_map_values(f, fn) for f in v)
    return fn(v)


def _stack(results, t):
    """Results of type `t` (tensor trees), one per example, stacked on a new axis 0."""
    if isinstance(t, TupleType):
        return tuple(_stack([r[k] for r in results], f) for k, f in enumerate(t.fields))
    if not results:
        return np.zeros((0,) + tuple(t.shape), t.dtype)
    return np.stack([np.asarray(r) for r in results])


# ---- backends ------------------------------------------------------------------------------------

def compile_batched(vf, backend, compile_one, devices=None):
    """rl.compile of a Batched on the Backend record `backend`; `compile_one(program, device)`
    compiles f for one example on it (rl.compile's device and limits applied)."""
    if backend.jax_traceable:
        return BatchedJaxFunction(vf, compile_one, devices)
    if devices is not None:
        raise RelayishError(f"devices= shards a batch over jax devices; the {backend.name} "
                            "runs on one device (use backend=\"jax\")")
    run_one = compile_one(vf.program, None)

    def run(*args):
        return vf.map_examples(run_one, args)
    run.__doc__ = f"rl.vmap's per-example loop on the {backend.name}"
    return run


class BatchedJaxFunction:
    """rl.compile(rl.vmap(f), backend="jax", devices=None | [...]): jax.jit(jax.vmap(run_one)).

    `run_one` is f compiled for one example (a JaxFunction, traced once per argument
    structure); `devices` (when given) the 1-D mesh the batch is sharded over (`mesh`).
    """

    def __init__(self, vf, compile_one, devices=None):
        import jax
        self.vf = vf
        self.mesh = None
        self.devices = None if devices is None else _resolve_devices(devices)
        platform = None if self.devices is None else self.devices[0].platform
        self.run_one = compile_one(vf.program, platform)
        # jax batches lax.switch on a batched index by broadcasting every operand (the weights
        # too) to the batch and selecting; every alternative traced inline and its outputs
        # selected (joins.py) computes the same with unbatched weights (notes/batching.md)
        self.run_one.select_joins = True
        self.uses_x64 = self.run_one.uses_x64
        refs = [n for n, t in zip(vf.names, vf.types) if _holds_function_or_ref(t)]
        if refs:
            raise CompileError(f"rl.vmap({vf.name}) on the jax backend takes no function or "
                               f"reference arguments ({', '.join(refs)}); use rl.evaluate(vf, "
                               "...) or rl.compile(vf, backend=\"interpreter\")")
        # ADT arguments: node tables (issue 17), stacked over the batch
        self.tables = {}
        specs = self.run_one.node_tables()
        for k, name in enumerate(vf.names):
            if vf.is_tensors(k):
                continue
            if k not in specs:
                raise CompileError(
                    f"rl.vmap({vf.name}) on the jax backend: batching ADT arguments needs the "
                    f"node-table path, and parameter {name}: {type_text(vf.types[k])} is not a "
                    "node-table argument (one @main only passes to a recognized fold over a "
                    "recursive ADT, notes/jax-backend.md). Use rl.evaluate(vf, ...) or "
                    "rl.compile(vf, backend=\"interpreter\")")
            self.tables[k] = specs[k]
        kwargs = {}
        if self.devices is not None:
            from jax.sharding import Mesh, NamedSharding, PartitionSpec
            self.mesh = Mesh(np.array(self.devices), ("batch",))

            def spec(t, axis):      # the batch axis of each tensor split over the mesh
                if axis is None:
                    return NamedSharding(self.mesh, PartitionSpec())
                if isinstance(t, TupleType):
                    return tuple(spec(f, axis) for f in t.fields)
                if not isinstance(t, TensorType):       # a node table: rows [B, ...]
                    return NamedSharding(self.mesh, PartitionSpec("batch"))
                return NamedSharding(self.mesh, PartitionSpec(
                    *([None] * _axis(axis, t.ndim)), "batch"))
            kwargs["in_shardings"] = tuple(spec(t, a) for t, a in zip(vf.types, vf.in_axes))
            kwargs["out_shardings"] = NamedSharding(self.mesh, PartitionSpec("batch"))
        self._jitted = jax.jit(jax.vmap(self._one, in_axes=vf.in_axes, out_axes=0), **kwargs)
        self._seen = set()           # argument signatures already traced
        self._fault_messages = []    # the texts of f's run-time checks (set by its trace)
        self._checked = set()        # ((shape, dtype) per argument) of array calls that passed
        self._array_class = type(jax.numpy.zeros(()))

    def __repr__(self):
        where = "" if self.devices is None else f" sharded over {len(self.devices)} devices"
        return f"<relayish BatchedJaxFunction {self.vf.name}{where}>"

    def __call__(self, *args):
        # the fast path: arrays of shapes and dtypes already checked go straight to jax (the
        # checks below cost as much as a small program's run)
        key = tuple([(a.shape, a.dtype) for a in args
                     if a.__class__ is _NDARRAY or a.__class__ is self._array_class])
        if key in self._checked:
            return self._run(args)
        size, values = self.vf.split(args, tensor=_keep_jax_arrays)
        if self.devices is not None and size % len(self.devices):
            raise EvaluationError(
                f"rl.vmap({self.vf.name}): a batch of {size} example(s) does not split evenly "
                f"over {len(self.devices)} devices; pass a batch whose size is a multiple of "
                f"{len(self.devices)} (the batch is not padded)")
        for k, spec in self.tables.items():
            values[k] = self._table_leaves(k, spec, values[k])
        signature = _signature(values)
        if signature not in self._seen:
            # the first call of a signature traces f: inside run_deep, as JaxFunction traces
            # (deep programs), and the inner trace nests in this thread
            out = run_deep(self._run, values)
            self._seen.add(signature)
        else:
            out = self._run(values)
        if len(key) == len(args) and all(v is a for v, a in zip(values, args)):
            self._checked.add(key)       # all arrays, taken as they are: checked once is enough
        return out

    def _one(self, *args):
        """f on one example (under jax.vmap): (its result, its run-time check flags); a node
        table's leaves become its NodeTable."""
        import jax.numpy as jnp
        if self.tables:
            from relayish.backend.jax.dynamic_tables import NodeTable
            args = list(args)
            for k, spec in self.tables.items():
                args[k] = NodeTable(spec, int(args[k][0].shape[0]), None, list(args[k]))
        out, flags, self._fault_messages = self.run_one.call_in_trace(*args)
        return out, jnp.zeros((0,), bool) if flags is None else flags

    def encode_batch(self, *args):
        """The call's arguments with each batch of trees or lists encoded once as a
        StackedTables (the host work a data loader does ahead of the call); tensors and
        unbatched arguments are returned as given. `run(*run.encode_batch(*args))` equals
        `run(*args)`."""
        self.vf.split(args, tensor=_keep_jax_arrays)        # the same checks as a call
        out = list(args)
        for k, spec in self.tables.items():
            if self.vf.in_axes[k] is not None and not isinstance(args[k], StackedTables):
                out[k] = StackedTables(spec, len(args[k]), self._table_leaves(k, spec, args[k]))
        return tuple(out)

    def _table_leaves(self, k, spec, value):
        """The node-table leaves of parameter k's argument: one table, or (batched) the tables
        of the examples padded to one capacity and stacked, [B, capacity, ...]."""
        fixed = self.run_one.capacity.get("nodes")
        name = f"parameter {self.vf.names[k]} of rl.vmap({self.vf.name})"
        if isinstance(value, StackedTables):
            capacity = int(value.leaves[0].shape[1])
            if value.spec is not spec or (fixed is not None and capacity != fixed):
                raise EvaluationError(
                    f"bad argument for {name}: tables encoded by another program or for another "
                    f"capacity ({capacity} rows; this program takes {fixed or 'any'}); encode "
                    "them with this program's encode_batch")
            return value.leaves
        if self.vf.in_axes[k] is None:
            return spec.encode(value, fixed, name).leaves
        tables = [spec.encode(v, fixed, f"example {i} of {name}") for i, v in enumerate(value)]
        if not tables:
            raise EvaluationError(f"rl.vmap({self.vf.name}): an empty batch of trees for {name}")
        capacity = max(t.capacity for t in tables)
        return [np.stack(rows) for rows in zip(*(_padded(spec, t, capacity) for t in tables))]

    def _run(self, values):
        if self.uses_x64:
            import jax
            with jax.enable_x64(True):
                out, flags = self._jitted(*values)
        else:
            out, flags = self._jitted(*values)
        if flags.shape[-1]:              # run-time checks (a loop's capacity), per example
            failed = np.asarray(flags)
            if failed.any():
                raise EvaluationError("; ".join(
                    f"example {i} of rl.vmap({self.vf.name}): " + "; ".join(
                        m for m, f in zip(self._fault_messages, row) if f)
                    for i, row in enumerate(failed) if row.any()))
        return out

    @property
    def trace_count(self):
        """How many times f itself was traced (once per argument structure, whatever the
        batch sizes)."""
        return self.run_one.trace_count


class StackedTables:
    """A batch of tree or list arguments encoded as node tables stacked [B, capacity, ...]
    (BatchedJaxFunction.encode_batch), passed in place of the list of values. `leaves` are
    numpy arrays, or jax arrays already on the device (jax.device_put each: a data loader's
    prefetch)."""

    __slots__ = ("spec", "size", "leaves")

    def __init__(self, spec, size, leaves):
        self.spec, self.size, self.leaves = spec, size, list(leaves)

    def __repr__(self):
        return (f"<StackedTables of {self.spec.data.header.name}: {self.size} examples, "
                f"capacity {int(self.leaves[0].shape[1])}>")


def _keep_jax_arrays(v, t, path, fail):
    """A jax array stays on its device (dtype and shape checked); anything else converts as
    any argument does."""
    if type(v).__module__.startswith("jax"):
        if tuple(v.shape) != t.shape or np.dtype(v.dtype) != np.dtype(t.dtype):
            fail(t, value_type_text(v), path)
        return v
    return to_tensor(v, t, path, fail)


def _padded(spec, table, capacity):
    """A NodeTable's leaves with padding rows up to `capacity` (a bucket's tables are
    padded rows already: tag and children -1, columns 0; count unchanged)."""
    extra = capacity - table.capacity
    if not extra:
        return table.leaves
    k = len(spec.columns)
    out = []
    for j, leaf in enumerate(table.leaves[:-1]):
        fill = 0 if 1 <= j <= k else -1
        pad = np.full((extra,) + leaf.shape[1:], fill, leaf.dtype)
        out.append(np.concatenate([leaf, pad]))
    return out + [table.leaves[-1]]


def _signature(values):
    out, stack = [], list(values)
    while stack:
        v = stack.pop()
        if isinstance(v, (tuple, list)):
            stack.extend(v)
        else:
            out.append((tuple(v.shape), str(v.dtype)))
    return tuple(out)


def _resolve_devices(devices):
    """jax devices from `devices=`: jax Device objects, or strings "cpu:1" (one device) and
    "cpu" / "gpu" (all of that platform's devices)."""
    import jax
    if isinstance(devices, str) or not hasattr(devices, "__iter__"):
        devices = [devices]
    out = []
    for d in devices:
        if isinstance(d, jax.Device):
            out.append(d)
            continue
        if not isinstance(d, str):
            raise RelayishError(f"devices= takes jax devices or strings such as 'cpu:0', got "
                                f"{type(d).__name__} {d!r}")
        platform, _, index = d.lower().partition(":")
        platform = {"cuda": "gpu"}.get(platform, platform)
        try:
            found = jax.devices(platform)
        except RuntimeError:
            found = []
        if not found:
            raise RelayishError(f"devices=: jax has no {platform!r} device here (it has "
                                f"{', '.join(sorted({x.platform for x in jax.devices()}))})")
        if not index:
            out.extend(found)
            continue
        if not index.isdigit() or int(index) >= len(found):
            raise RelayishError(f"devices=: no device {d!r}; jax has {len(found)} {platform} "
                                f"device(s), {platform}:0 to {platform}:{len(found) - 1}")
        out.append(found[int(index)])
    if not out:
        raise RelayishError("devices= is empty; give at least one device")
    if len(set(out)) != len(out):
        raise RelayishError(f"devices= names a device twice: {out}")
    if len({d.platform for d in out}) > 1:
        raise RelayishError(f"devices= mixes platforms ({out}); shard over devices of one kind")
    return out
