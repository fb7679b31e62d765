"""Values across the jit boundary: host arguments in, trace-time values inside, host results out.

    params = parameters(main)                     # one per compiled function
    values = params.convert(args)                 # checked and converted (runtime/args.py)
    tree = flatten_arg(value, leaves, key, refs, ref_ids)     # per argument value
    value = build_arg(tree, leaves, refs)         # at trace time, leaves are tracers
    desc = encode(result, out_leaves, ref_ids)    # at trace time: tensors become outputs
    host = decode(desc, outputs, refs, entry)     # after the call

Arguments are checked and converted by the shared backend runtime (`Parameters`,
`ValueChecker`: the rule and the error texts are the interpreter's, "bad argument for parameter
%l of @main (field 0 of Cons of field 1 of Cons): expected ..."), with two jax hooks: a jax
array stays where it is (on its device; shape and dtype must be the parameter's), and a
function argument is a CompileError (closures are trace-time objects). A checked value is then
flattened to tensor leaves plus a *tree* of ("t", leaf) / ("tuple", kids) / ("adt", ctor, kids)
/ ("ref", k, [kid]) / ("refalias", k) nodes; the constructors and reference aliasing it meets
are the cache key (function.py: one jax.jit per argument structure). Results are encoded the
same way, plus ("union", index leaf, alts) for a joined value and ("argref", k) for an
argument's reference. Every walk is a loop over an explicit stack: a List of n elements is n
levels deep.
"""
from __future__ import annotations

import numpy as np

from relayish.errors import CompileError
from relayish.backend.values import ConstructorValue, RefValue
from relayish.backend.runtime.args import NP_DTYPES, Parameters, ValueChecker, to_tensor
from relayish.backend.runtime.describe import value_type_text
from relayish.backend.jax.dynamic_tables import JTable
from relayish.backend.jax.values import (POISON, JAdt, JClosure, JConstructorFn, JRef, JUnion,
                                         Restart, describe, is_jax_value, is_tensor)


def parameters(main, name="@main"):
    """The argument checker of a compiled function (runtime/args.py, with the jax hooks)."""
    return Parameters(name, main.params, ValueChecker(convert_function=_no_function_arguments,
                                                      tensor=_tensor))


def _tensor(v, t, path, fail):
    """A jax array is passed as it is (no copy to the host); anything else converts as on the
    interpreter (runtime/args.py to_tensor)."""
    if is_jax_value(v):
        if tuple(v.shape) != t.shape or np.dtype(v.dtype) != NP_DTYPES[t.dtype]:
            fail(t, value_type_text(v), path)
        return v
    return to_tensor(v, t, path, fail)


def _no_function_arguments(checker, v, t, where, fail):
    raise CompileError(f"bad argument for {where}: the jax backend takes no function arguments; "
                       "close over the function inside the program, or use rl.evaluate")


def flatten_arg(value, leaves, key, refs, ref_ids):
    """The rebuild tree of one argument value (already checked against its type); its tensors
    are appended to `leaves`, its structure to the cache `key`, its references to `refs`."""
    root = [None]
    stack = [(value, root, 0)]
    while stack:
        v, parent, slot = stack.pop()
        if isinstance(v, np.ndarray) or is_jax_value(v):
            parent[slot] = ("t", len(leaves))
            leaves.append(v)
        elif isinstance(v, tuple):
            node = [None] * len(v)
            parent[slot] = ("tuple", node)
            stack.extend((f, node, k) for k, f in reversed(list(enumerate(v))))
        elif isinstance(v, ConstructorValue):
            key.append(v.constructor)
            node = [None] * len(v.fields)
            parent[slot] = ("adt", v.constructor, node)
            stack.extend((f, node, k) for k, f in reversed(list(enumerate(v.fields))))
        elif isinstance(v, RefValue):
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
            stack.append((v.value, node, 0))
        else:   # a function, or a value of a type variable the checker let through
            raise CompileError(f"the jax backend cannot take {value_type_text(v)} as an argument "
                               "(it takes tensors, tuples, ADT values and references); use "
                               "rl.evaluate")
    return root[0]


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
        elif isinstance(v, JTable):        # a loop's node table (a map's result, issue 17)
            arrays = v.output_leaves()
            target[slot] = ("table", v.spec, list(range(len(leaves), len(leaves) + len(arrays))))
            leaves.extend(arrays)
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

    def table(d, target, slot, push):
        target[slot] = d[1].decode([leaves[j] for j in d[2]])

    def ref(d, target, slot, push):
        if d[1] in memo:
            target[slot] = memo[d[1]]
        else:
            r = memo[d[1]] = RefValue(None)
            target[slot] = r
            push(d[2], _RefSlot(r), 0)
    return _rebuild(desc, leaves, lambda ctor, k: ConstructorValue(ctor, [None] * k),
                    {"union": union, "argref": argref, "ref": ref, "table": table})
