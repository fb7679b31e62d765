"""Values across the jit boundary: host arguments in, trace-time values inside, host results out.

    tree = flatten_arg(value, param_type, "%x", leaves, key, refs, ref_ids)   # check + flatten
    value = build_arg(tree, leaves, refs)                  # at trace time, leaves are tracers
    desc = encode(result, out_leaves, ref_ids)             # at trace time: tensors become outputs
    host = decode(desc, outputs, refs, entry)              # after the call

An argument is checked against its parameter's type (`param_type`: the type inference result)
and flattened to tensor leaves plus a *tree* of ("t", leaf) / ("tuple", kids) /
("adt", ctor, kids) / ("ref", k, [kid]) / ("refalias", k) nodes; the constructors and reference
aliasing it meets are the cache key (function.py: one jax.jit per argument structure). Numpy and
jax arrays must have the parameter's exact shape and dtype; Python scalars and lists are
converted to its dtype. A mismatch is an EvaluationError naming the path inside the argument
("%l.Cons.1.Cons.0"); function arguments are a CompileError. Results are encoded the same way,
plus ("union", index leaf, alts) for a joined value and ("argref", k) for an argument's
reference. Every walk is a loop over an explicit stack: a List of n elements is n levels deep.
"""
from __future__ import annotations

import numpy as np

from relayish.errors import CompileError, EvaluationError
from relayish.ir.types import FuncType, RefType, TensorType, TupleType, TypeCall, substitute
from relayish.backend.values import ConstructorValue, RefValue
from relayish.backend.jax.values import (POISON, JAdt, JClosure, JConstructorFn, JRef, JUnion,
                                         Restart, describe, is_jax_value, is_tensor)


def param_type(p):
    """The type of parameter `p` from type inference (its annotation when it was not inferred)."""
    t = getattr(p, "_checked_type", None) or p.type_annotation
    if t is None:
        raise CompileError(f"the type of parameter %{p.name_hint} is unknown")
    return t


def type_text(t):
    try:
        return str(t)
    except Exception:  # noqa: BLE001 - error messages must not fail
        return repr(t)


def value_text(v):
    if isinstance(v, np.ndarray) or is_jax_value(v):
        return f"a tensor of shape {tuple(v.shape)} and dtype {np.dtype(v.dtype).name}"
    if isinstance(v, ConstructorValue):
        return f"the ADT value {v.constructor.name_hint}(...)"
    return f"{type(v).__name__} {v!r}"[:120]


def flatten_arg(value, ty, name, leaves, key, refs, ref_ids):
    """Check one argument against its parameter type; returns its rebuild tree (no recursion).

    Paths inside the argument ("%l.Cons.1.Cons.0") are kept as (parent, step) links and
    spelled out only for an error: building each string would be quadratic in a list's length."""
    root = [None]
    stack = [(value, ty, name, root, 0)]
    while stack:
        v, t, path, parent, slot = stack.pop()
        if isinstance(t, TensorType):
            parent[slot] = ("t", len(leaves))
            leaves.append(_tensor_arg(v, t, path))
        elif isinstance(t, TupleType):
            if not isinstance(v, (tuple, list)) or len(v) != len(t.fields):
                raise EvaluationError(f"argument {_path_text(path)}: expected a tuple of type "
                                      f"{type_text(t)}, got {value_text(v)}")
            node = [None] * len(t.fields)
            parent[slot] = ("tuple", node)
            for k in reversed(range(len(t.fields))):
                stack.append((v[k], t.fields[k], (path, f".{k}"), node, k))
        elif isinstance(t, TypeCall):
            if not isinstance(v, ConstructorValue) or v.constructor.belong_to is None or \
                    v.constructor.belong_to.name != t.func.name:
                raise EvaluationError(f"argument {_path_text(path)}: expected a value of type "
                                      f"{type_text(t)}, got {value_text(v)}")
            ctor = v.constructor
            data = ctor.type_data
            if len(v.fields) != len(ctor.inputs):
                raise EvaluationError(f"argument {_path_text(path)}: {ctor.name_hint} takes "
                                      f"{len(ctor.inputs)} field(s), got {len(v.fields)}")
            subst = dict(zip(data.type_vars, t.args)) if data is not None else {}
            key.append(ctor)
            node = [None] * len(ctor.inputs)
            parent[slot] = ("adt", ctor, node)
            for k in reversed(range(len(ctor.inputs))):
                stack.append((v.fields[k], substitute(ctor.inputs[k], subst),
                              (path, f".{ctor.name_hint}.{k}"), node, k))
        elif isinstance(t, RefType):
            if not isinstance(v, RefValue):
                raise EvaluationError(f"argument {_path_text(path)}: expected a reference "
                                      f"(rl.RefValue) of type {type_text(t)}, got "
                                      f"{value_text(v)}")
            k = ref_ids.get(id(v))
            if k is not None:
                key.append(("alias", k))
                parent[slot] = ("refalias", k)
                continue
            k = len(refs)
            ref_ids[id(v)] = k
            refs.append(v)
            key.append("ref")
            node = [None]
            parent[slot] = ("ref", k, node)
            stack.append((v.value, t.value, ("!", path), node, 0))
        elif isinstance(t, FuncType):
            raise CompileError(f"argument {_path_text(path)}: the jax backend takes no function "
                               "arguments; close over the function inside the program, or use "
                               "rl.evaluate")
        else:
            raise CompileError(f"argument {_path_text(path)}: cannot pass a value of type "
                               f"{type_text(t)}")
    return root[0]


def _path_text(path):
    """The text of a path built by flatten_arg: a name, (parent, ".step") or ("!", parent)."""
    prefix, suffix = [], []
    while isinstance(path, tuple):
        if path[0] == "!":
            prefix.append("!")
            path = path[1]
        else:
            suffix.append(path[1])
            path = path[0]
    return "".join(prefix) + path + "".join(reversed(suffix))


def _tensor_arg(v, t, path):
    dtype = np.dtype(t.dtype)
    if isinstance(v, np.ndarray) or is_jax_value(v):
        if tuple(v.shape) != t.shape or np.dtype(v.dtype) != dtype:
            raise EvaluationError(f"argument {_path_text(path)}: expected {type_text(t)}, got "
                                  f"{value_text(v)}")
        return v
    if isinstance(v, (bool, int, float, np.generic, list)):
        try:
            arr = np.asarray(v, dtype=dtype)
        except (TypeError, ValueError):
            raise EvaluationError(f"argument {_path_text(path)}: cannot convert {v!r} to "
                                  f"{type_text(t)}") from None
        if arr.shape != t.shape:
            raise EvaluationError(f"argument {_path_text(path)}: expected {type_text(t)}, got a "
                                  f"value of shape {arr.shape}")
        return arr
    raise EvaluationError(f"argument {_path_text(path)}: expected {type_text(t)}, got "
                          f"{value_text(v)}")


def ref_paths(tree, n_params):
    """For each parameter, the indices of the references it holds."""
    out = []
    for node in tree:
        found, stack = [], [node]
        while stack:
            n = stack.pop()
            if n[0] == "ref":
                found.append(n[1])
                stack.append(n[2][0])
            elif n[0] == "refalias":
                found.append(n[1])
            elif n[0] == "tuple":
                stack.extend(n[1])
            elif n[0] == "adt":
                stack.extend(n[2])
        out.append(found)
    return out


def leaf_indices(tree, ref_index):
    """The leaves inside argument reference number `ref_index` (their buffers can be donated)."""
    stack, out, inside = [(n, False) for n in tree], [], []
    while stack:
        n, within = stack.pop()
        kind = n[0]
        if kind == "t":
            if within:
                out.append(n[1])
        elif kind == "tuple":
            stack.extend((c, within) for c in n[1])
        elif kind == "adt":
            stack.extend((c, within) for c in n[2])
        elif kind == "ref":
            stack.append((n[2][0], within or n[1] == ref_index))
    return sorted(out)


def _rebuild(tree, leaves, make_adt, special):
    """The value a tree of ("t", leaf) / ("tuple", kids) / ("adt", ctor, kids) nodes describes,
    built with a loop (long lists are deep trees). `make_adt(ctor, n)` makes an ADT value whose
    `.fields` has n empty slots; `special[kind](node, target, slot, push)` builds the other node
    kinds, calling `push(node, target, slot)` for a child to build into `target[slot]`."""
    out = [None]
    stack = [(tree, out, 0)]

    def push(node, target, slot):
        stack.append((node, target, slot))
    while stack:
        item = stack.pop()
        if item[0] == "tuple-done":
            _, fields, target, slot = item
            target[slot] = tuple(fields)
            continue
        n, target, slot = item
        kind = n[0]
        if kind == "t":
            target[slot] = leaves[n[1]]
        elif kind == "tuple":
            fields = [None] * len(n[1])
            stack.append(("tuple-done", fields, target, slot))
            stack.extend((c, fields, k) for k, c in reversed(list(enumerate(n[1]))))
        elif kind == "adt":
            value = make_adt(n[1], len(n[2]))
            target[slot] = value
            stack.extend((c, value.fields, k) for k, c in reversed(list(enumerate(n[2]))))
        elif kind in special:
            special[kind](n, target, slot, push)
        else:
            raise CompileError(f"internal: unknown value tree node {kind!r}")
    return out[0]


def build_arg(node, leaves, refs):
    """The trace-time value of one argument from its rebuild tree; `refs` collects the argument
    references by index (a "refalias" node is a reference seen before)."""
    def ref(n, target, slot, push):
        r = JRef(None, -1)
        while len(refs) <= n[1]:
            refs.append(None)
        refs[n[1]] = r
        target[slot] = r
        push(n[2][0], _RefSlot(r), 0)

    def refalias(n, target, slot, push):
        target[slot] = refs[n[1]]
    return _rebuild(node, leaves, lambda ctor, k: JAdt(ctor, [None] * k, -1),
                    {"ref": ref, "refalias": refalias})


class _RefSlot:
    """`slot[0] = v` stores into a reference: a place a rebuild loop can write a child to."""
    __slots__ = ("ref",)

    def __init__(self, ref):
        self.ref = ref

    def __setitem__(self, slot, value):
        self.ref.value = value


# ---- results -------------------------------------------------------------------------------------


def encode(value, leaves, ref_ids, memo=None):
    """A descriptor of a trace-time result; its tensors are appended to `leaves` (depth first,
    left to right). A loop with an explicit stack: a 10^4-element list is 10^4 levels deep."""
    if memo is None:
        memo = {}
    out = [None]
    stack = [(value, out, 0)]
    while stack:
        v, target, slot = stack.pop()
        if isinstance(v, tuple):
            children = [None] * len(v)
            target[slot] = ("tuple", children)
            stack.extend((c, children, k) for k, c in reversed(list(enumerate(v))))
        elif is_tensor(v):
            leaves.append(v)
            target[slot] = ("t", len(leaves) - 1)
        elif isinstance(v, ConstructorValue):
            children = [None] * len(v.fields)
            target[slot] = ("adt", v.constructor, children)
            stack.extend((c, children, k) for k, c in reversed(list(enumerate(v.fields))))
        elif isinstance(v, JUnion):
            leaves.append(v.index)
            children = [None] * len(v.alts)
            target[slot] = ("union", len(leaves) - 1, children)
            stack.extend((c, children, k) for k, c in reversed(list(enumerate(v.alts))))
        elif isinstance(v, JRef):
            if id(v) in ref_ids:
                target[slot] = ("argref", ref_ids[id(v)])
            elif id(v) in memo:
                target[slot] = memo[id(v)]
            else:
                node = ["ref", len(memo), None]
                memo[id(v)] = node
                target[slot] = node
                stack.append((v.value, node, 2))
        elif v is POISON:
            raise Restart()
        elif isinstance(v, (JClosure, JConstructorFn)):
            raise CompileError("a compiled program cannot return a function (the jax backend "
                               "returns tensors, tuples, ADT values and references); call it "
                               "inside the program, or use rl.evaluate")
        else:
            raise CompileError(f"cannot return a {describe(v)} from a compiled program")
    return out[0]


def is_pure(desc):
    stack = [desc]
    while stack:
        d = stack.pop()
        if d[0] == "tuple":
            stack.extend(d[1])
        elif d[0] != "t":
            return False
    return True


def pure_tree(desc, leaves):
    """Nested tuples of the leaves, as `desc` (tuples and tensors only) says."""
    return decode(desc, leaves, [], None)


def decode(desc, leaves, refs, entry, memo=None):
    """The host value of a result descriptor (the inverse of encode): a "union" picks its
    alternative by a leaf's index, "argref" is an argument's reference, a "ref" seen twice is
    one RefValue (`memo`)."""
    if memo is None:
        memo = {}

    def union(d, target, slot, push):
        push(d[2][int(np.asarray(leaves[d[1]]))], target, slot)

    def argref(d, target, slot, push):
        target[slot] = refs[d[1]]

    def ref(d, target, slot, push):
        if d[1] in memo:
            target[slot] = memo[d[1]]
        else:
            r = memo[d[1]] = RefValue(None)
            target[slot] = r
            push(d[2], _RefSlot(r), 0)
    return _rebuild(desc, leaves, lambda ctor, k: ConstructorValue(ctor, [None] * k),
                    {"union": union, "argref": argref, "ref": ref})
