"""WeakIdentityMap: a weak-keyed table keyed by identity, for tables keyed by expressions.

    table = WeakIdentityMap()       # key -> value; an entry goes when its key is collected
    table[node] = value; table.get(node); node in table; table.pop(node); len(table)

weakref.WeakKeyDictionary compares keys with `==` (two weak references are equal when their
referents are), and `==` on expressions builds an `equal` call (ir/expr.py), whose truth value
is an error: a WeakKeyDictionary cannot hold expressions. This table looks keys up by `id` and
checks the referent is the key itself (PyTorch's WeakIdKeyDictionary answers the same problem
for tensors). Keys must be weak-referenceable; values are held strongly, so a value must not
refer to its key or the key never dies.
"""
from __future__ import annotations

import weakref

__all__ = ["WeakIdentityMap"]


class WeakIdentityMap:
    __slots__ = ("_data", "_remove", "__weakref__")

    def __init__(self):
        data = {}       # id(key) -> (weakref.KeyedRef to key, value)

        def remove(ref, data=data):     # no reference to self: the table may die first
            entry = data.get(ref.key)
            if entry is not None and entry[0] is ref:   # the id may hold a newer key already
                del data[ref.key]
        self._data, self._remove = data, remove

    def get(self, key, default=None):
        entry = self._data.get(id(key))
        if entry is None or entry[0]() is not key:
            return default
        return entry[1]

    def __getitem__(self, key):
        entry = self._data.get(id(key))
        if entry is None or entry[0]() is not key:
            raise KeyError(id(key))
        return entry[1]

    def __setitem__(self, key, value):
        self._data[id(key)] = (weakref.KeyedRef(key, self._remove, id(key)), value)

    def __delitem__(self, key):
        self[key]           # noqa: B018 - a KeyError for a key not held
        del self._data[id(key)]

    def pop(self, key, default=None):
        if key not in self:
            return default
        return self._data.pop(id(key))[1]

    def __contains__(self, key):
        entry = self._data.get(id(key))
        return entry is not None and entry[0]() is key

    def __len__(self):
        return len(self._data)

    def __repr__(self):
        return f"<WeakIdentityMap of {len(self._data)} entries>"
