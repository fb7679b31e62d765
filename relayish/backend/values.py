"""Runtime values shared by the backends.

Tensors are numpy arrays (0-d for scalars; jax arrays from the jax backend), tuples are Python
tuples, ADT values are ConstructorValue, references RefValue, functions Closure.
"""
from __future__ import annotations

from attrs import define, field

from relayish.errors import RelayishError
from relayish.ir.expr import Constructor


@define(eq=False, repr=False)
class ConstructorValue:
    """An ADT value: `Cons(1f, Nil)` is ConstructorValue(cons, [array(1.), ConstructorValue(nil, [])])."""
    constructor: Constructor
    fields: list = field(converter=list, factory=list)

    @property
    def tag(self):
        return self.constructor.tag

    def __repr__(self):
        # iterative over the last field so long lists print without deep recursion
        parts, v, depth = [], self, 0
        while isinstance(v, ConstructorValue) and depth < 50:
            name = v.constructor.name_hint
            if not v.fields:
                parts.append(name)
                break
            head = ", ".join(repr(f) for f in v.fields[:-1])
            parts.append(f"{name}({head + ', ' if head else ''}")
            v, depth = v.fields[-1], depth + 1
        else:
            parts.append("..." if isinstance(v, ConstructorValue) else repr(v))
        closing = sum(p.endswith("(") or p.endswith(", ") for p in parts)
        return "".join(parts) + ")" * closing


@define(eq=False, repr=False)
class RefValue:
    """A mutable cell: `ref(e)` evaluates to one, `!r` reads `.value`, `r := v` writes it."""
    value: object

    def __repr__(self):
        return f"RefValue({self.value!r})"


class Closure:
    """A function value. Backends subclass it; calling it from Python runs the function."""

    func = None   # the Function expression it closes

    def __call__(self, *args):
        raise NotImplementedError


def list_value(mod, items) -> ConstructorValue:
    """A prelude List value from a Python list: list_value(mod, [a, b]) is Cons(a, Cons(b, Nil))."""
    try:
        cons, nil = mod.get_constructor("Cons"), mod.get_constructor("Nil")
    except RelayishError:
        raise RelayishError("list_value needs a module with the prelude's List "
                            "(rl.Prelude(mod) adds it)") from None
    value = ConstructorValue(nil, [])
    for item in reversed(list(items)):
        value = ConstructorValue(cons, [item, value])
    return value


def from_list_value(value) -> list:
    """The Python list of the items of a prelude List value."""
    items = []
    while isinstance(value, ConstructorValue) and value.constructor.name_hint == "Cons":
        items.append(value.fields[0])
        value = value.fields[1]
    if not (isinstance(value, ConstructorValue) and value.constructor.name_hint == "Nil"):
        raise RelayishError(f"from_list_value expects a List value (Cons/Nil), got {value!r}")
    return items
