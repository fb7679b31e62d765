"""Node tables: a value of a recursive ADT (a tree, a list) as arrays, for loops over runtime
structure (issue 17; dynamic_rule.py says which arguments, dynamic_loops.py runs the loops).

    spec = TableSpec(mod, adt_type, orders)    # the layout of one ADT type
    table = spec.encode(value, capacity=None, where="parameter %t of @main")   # host: NodeTable
    table.leaves                                # the arrays handed to jax, in spec.layout order
    jt = JTable(spec, leaves)                   # at trace time: the same arrays as tracers

Layout (`spec.layout(capacity)`, N = capacity rows):
    tag        int32[N]          the constructor's tag; -1 in padding rows (rows >= count)
    columns    [N, *shape]       one per tensor field of each constructor (its own dtype);
                                 zeros in rows of other constructors
    children   int32[N]          one per child position j: the row of the j-th child the fold
                                 calls (its `order`), -1 where the constructor has fewer
    count      int32[]           the number of nodes; the root is row count - 1

Rows are in **post-order, children in the order the fold calls them** (`orders[tag]`, the child
field indices in call order), so running the fold's clause on rows 0, 1, ..., count - 1 is the
original evaluation order, and every child's row is before its parent's. A subtree is a
contiguous run of rows ending at its root. A value shared twice in a tree (a DAG) is encoded
twice, as the fold visits it twice. Encoding is a loop with an explicit stack (a list of 10^5
elements is 10^5 levels deep).

Capacity: `capacity=None` buckets the node count up to a power of two (at least 16), so a data
set compiles once per bucket; a fixed capacity compiles once. A value with more nodes than the
capacity is an EvaluationError naming the argument, its size and the capacity.

For batching (rl.vmap, H7): a table's leaves are plain arrays of fixed shapes for a capacity,
so tables of one capacity stack along a new leading axis; `count` differs per example.
"""
from __future__ import annotations

import numpy as np

from relayish.errors import EvaluationError
from relayish.backend.values import ConstructorValue
from relayish.backend.runtime.args import NP_DTYPES
from relayish.backend.runtime.bindings import same_constructor
from relayish.backend.jax.dynamic_rule import adt_fields
from relayish.backend.jax.values import Indexed

MIN_CAPACITY = 16


def bucket(n):
    """The default capacity for n nodes: the next power of two, at least MIN_CAPACITY."""
    c = MIN_CAPACITY
    while c < n:
        c *= 2
    return c


class TableSpec:
    """The node-table layout of one recursive ADT type (module docstring)."""

    def __init__(self, mod, adt, orders):
        data, fields = adt_fields(mod, adt)
        self.adt, self.data, self.orders = adt, data, orders
        self.constructors = list(data.constructors)
        self.columns = []                # (tag, field index, TensorType)
        self.column_of = {}              # (tag, field index) -> column number
        for tag, types in enumerate(fields):
            for m, t in enumerate(types):
                if m not in orders.get(tag, ()):
                    self.column_of[(tag, m)] = len(self.columns)
                    self.columns.append((tag, m, t))
        self.n_children = max((len(o) for o in orders.values()), default=0)

    def layout(self, capacity):
        """[(shape, dtype)] of the leaves: tag, columns, children, count."""
        out = [((capacity,), np.dtype(np.int32))]
        out += [((capacity,) + tuple(t.shape), np.dtype(NP_DTYPES[t.dtype]))
                for _, _, t in self.columns]
        out += [((capacity,), np.dtype(np.int32))] * self.n_children
        out.append(((), np.dtype(np.int32)))
        return out

    def n_leaves(self):
        return 2 + len(self.columns) + self.n_children

    def encode(self, value, capacity=None, where="the argument"):
        """The NodeTable of `value` (already type-checked), rows in post-order."""
        tags, fields, kids = [], [], []
        stack, done = [(value, False)], []
        ctors = self.constructors
        while stack:
            v, expanded = stack.pop()
            if not isinstance(v, ConstructorValue):
                raise EvaluationError(f"bad argument for {where}: expected a "
                                      f"{self.data.header.name} value, got "
                                      f"{type(v).__name__}")
            tag = v.constructor.tag
            if not (0 <= tag < len(ctors) and same_constructor(v.constructor, ctors[tag])):
                raise EvaluationError(f"bad argument for {where}: {v.constructor.name_hint} is "
                                      f"not a constructor of {self.data.header.name}")
            order = self.orders[tag]
            if not expanded:
                stack.append((v, True))
                stack.extend((v.fields[m], False) for m in reversed(order))
                continue
            n = len(order)
            mine = done[len(done) - n:] if n else []
            if n:
                del done[len(done) - n:]
            done.append(len(tags))
            tags.append(tag)
            fields.append(v.fields)
            kids.append(mine)
        count = len(tags)
        if capacity is None:
            capacity = bucket(count)
        elif count > capacity:
            raise EvaluationError(
                f"{where} has {count} nodes, more than the capacity of {capacity} the program "
                "was compiled for (compile with a larger one: "
                "rl.compile(..., capacity={\"nodes\": N}))")
        tag = np.full(capacity, -1, np.int32)
        tag[:count] = tags
        columns = [np.zeros((capacity,) + tuple(t.shape), NP_DTYPES[t.dtype])
                   for _, _, t in self.columns]
        children = [np.full(capacity, -1, np.int32) for _ in range(self.n_children)]
        column_of = self.column_of
        for i, (t, fs, mine) in enumerate(zip(tags, fields, kids)):
            for m, f in enumerate(fs):
                c = column_of.get((t, m))
                if c is not None:
                    columns[c][i] = f
            for j, row in enumerate(mine):
                children[j][i] = row
        return NodeTable(self, capacity, count,
                         [tag] + columns + children + [np.asarray(count, np.int32)])

    def decode(self, leaves):
        """The host value of a table's leaves (the inverse of encode): a loop over the rows in
        post-order, each node built from its children's (earlier) rows."""
        k = len(self.columns)
        tag, columns = np.asarray(leaves[0]), [np.asarray(c) for c in leaves[1:1 + k]]
        children = [np.asarray(c) for c in leaves[1 + k:1 + k + self.n_children]]
        count = int(np.asarray(leaves[-1]))
        if count == 0:
            raise EvaluationError(f"a {self.data.header.name} table of no nodes has no value")
        built = [None] * count
        for i in range(count):
            t = int(tag[i])
            ctor, order = self.constructors[t], self.orders.get(t, ())
            fields = [None] * len(ctor.inputs)
            for m in range(len(fields)):
                if m in order:
                    fields[m] = built[int(children[order.index(m)][i])]
                else:
                    fields[m] = columns[self.column_of[(t, m)]][i]
            built[i] = ConstructorValue(ctor, fields)
        return built[count - 1]


class NodeTable:
    """A host value as a node table: `leaves` (numpy arrays, the spec's layout), `count`
    nodes, `capacity` rows."""
    __slots__ = ("spec", "capacity", "count", "leaves")

    def __init__(self, spec, capacity, count, leaves):
        self.spec, self.capacity, self.count, self.leaves = spec, capacity, count, leaves

    def __repr__(self):
        return (f"<NodeTable of {self.spec.data.header.name}: {self.count} nodes, capacity "
                f"{self.capacity}>")


class JTable:
    """A node table at trace time: `tag`, `columns`, `children`, `count` are jax values."""
    __slots__ = ("spec", "tag", "columns", "children", "count", "capacity", "serial")

    def __init__(self, spec, leaves):
        self.spec = spec
        k = len(spec.columns)
        self.tag = leaves[0]
        self.columns = list(leaves[1:1 + k])
        self.children = list(leaves[1 + k:1 + k + spec.n_children])
        self.count = leaves[-1]
        self.capacity = int(leaves[0].shape[0])
        self.serial = -1

    def field(self, tag, m, i):
        """Field m of row i, a row of constructor `tag` (a tensor field: its column at i)."""
        from jax import lax
        return lax.dynamic_index_in_dim(self.columns[self.spec.column_of[(tag, m)]], i, 0,
                                        keepdims=False)

    def output_leaves(self):
        """The table's arrays in the spec's layout, to return it from a compiled program."""
        return [self.tag] + self.columns + self.children + [self.count]


class JCursor(Indexed):
    """A node of a table passed by value, `row` a traced int32: what a tail loop that matches
    a table argument (reverse AD's left fold, `@walk_ad(h, xs_ad, %bp)`) carries from one
    iteration to the next (dynamic_tail.py); `match` on it is a switch on the row's tag
    (dynamic_left.match_cursor). Joins join the rows of one table."""
    __slots__ = ("table", "row")

    def __init__(self, table, row):
        self.table, self.row = table, row

    def join_key(self):
        return self.table

    def parts(self):
        return [self.row]

    def with_parts(self, parts):
        return JCursor(self.table, parts[0])


class JChild:
    """A child of the node a fold's loop is at: its row (a traced int32)."""
    __slots__ = ("row", "serial")

    def __init__(self, row):
        self.row, self.serial = row, -1


__all__ = ["MIN_CAPACITY", "bucket", "TableSpec", "NodeTable", "JTable", "JCursor", "JChild"]
