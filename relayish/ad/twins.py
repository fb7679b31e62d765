"""The type mapping of both AD modes, and the twin ADTs it generates.

Both modes map a type T structurally, differing only at float tensors (and, in reverse mode,
one extra parameter on every function type):

    M(Tensor[s, float]) = leaf(Tensor[s, float])     reverse: (T, ref T)   forward: (T, T)
    M(Tensor[s, int|bool]) = Tensor[s, int|bool]
    M((T1, .., Tn)) = (M T1, .., M Tn)        M(ref T) = ref(M T)      M(a) = a  (type variables)
    M(fn(A..) -> B) = fn(M A.., extra..) -> M B                         reverse: extra = bp
    M(G[A..]) = G'[M A..]

G' is G itself when M leaves every constructor field of G unchanged (the prelude's List, Option,
Tree, Nat: fields that mention only type variables and G), otherwise a *twin* ADT `G<suffix>`
with constructors `C<suffix>` whose fields are the mapped fields. Which ADTs need twins is a
fixpoint over the field types: a field changes when it holds a float tensor or (with extra
function parameters) a function, or mentions an ADT that needs a twin.

With a module, twins are added to it as they are made, and a twin an earlier transform left
there (`G<suffix>..` with exactly the mapped fields) is reused; without one they are collected
in `created` for the caller.
"""
from __future__ import annotations

from relayish.errors import GradientError, RelayishError
from relayish.ir.analysis import walk
from relayish.ir.expr import Constructor, PatternConstructor, TypeData
from relayish.ir.module import fresh_name
from relayish.ir.types import (FuncType, GlobalTypeVar, RefType, TensorType, TupleType, TypeCall,
                               TypeVar, map_type, substitute, walk_type)

__all__ = ["TwinTypes", "adt_definitions"]


class TwinTypes:
    """M(t) for one AD mode (see the module docstring); `twin_data` and `ctor` give the twin of
    an ADT and of its constructors.

    leaf: TensorType -> Type, the mapped float tensor; extra_params: types appended to every
    function's parameters; suffix: appended to the names of twin types and constructors.
    """

    def __init__(self, leaf, suffix, extra_params=(), module=None, type_definitions=None,
                 taken_names=()):
        self.leaf = leaf
        self.suffix = suffix
        self.extra_params = list(extra_params)
        self.mod = module
        self.type_data: dict = {}      # GlobalTypeVar -> TypeData (known definitions)
        defs = module.type_definitions if module is not None else (type_definitions or {})
        for gtv, data in defs.items():
            self.type_data[gtv] = data
        self.taken = set(taken_names)  # type and constructor names in use besides the module's
        self.twin: dict = {}           # GlobalTypeVar -> twin TypeData (or the same TypeData)
        self.created: list = []        # the twins made, in order
        self._needs: dict = {}

    # ---- definitions ----------------------------------------------------------------------
    def add_type_data(self, data: TypeData):
        if data.header not in self.type_data:
            self.type_data[data.header] = data
            if self.mod is not None and \
                    data.header.name not in {g.name for g in self.mod.type_definitions}:
                self.mod.add_type(data)

    def data_of(self, gtv) -> TypeData:
        data = self.type_data.get(gtv)
        if data is None and self.mod is not None:
            try:
                data = self.mod.get_type_data(gtv)
            except RelayishError:
                data = None
        if data is None:
            raise GradientError(f"the ADT {gtv.name} is not defined in the module; "
                                "pass the Module that defines it")
        self.add_type_data(data)
        return data

    # ---- which ADTs need a twin: fixpoint over field types --------------------------------
    def needs_twin(self, gtv) -> bool:
        if gtv not in self._needs:
            self._compute_needs(gtv)
        return self._needs[gtv]

    def _compute_needs(self, root):
        todo, seen = [root], []                      # the ADTs reachable from root
        while todo:
            g = todo.pop()
            if g in seen or g in self._needs:
                continue
            seen.append(g)
            for ctor in self.data_of(g).constructors:
                for ft in ctor.inputs:
                    todo.extend(_type_calls(ft))
        needs = {g: any(self._directly_changes(ft) for c in self.data_of(g).constructors
                        for ft in c.inputs) for g in seen}
        changed = True
        while changed:
            changed = False
            for g in seen:
                if needs[g]:
                    continue
                for c in self.data_of(g).constructors:
                    for ft in c.inputs:
                        if any(needs.get(h, self._needs.get(h, False)) for h in _type_calls(ft)):
                            needs[g] = changed = True
        self._needs.update(needs)

    def _directly_changes(self, t) -> bool:
        """Whether M changes t whatever the twins: a mapped tensor, or a function when function
        types get extra parameters."""
        return any((isinstance(s, TensorType) and self.leaf(s) != s)
                   or (isinstance(s, FuncType) and self.extra_params) for s in walk_type(t))

    # ---- the mapping ----------------------------------------------------------------------
    def __call__(self, t):
        if isinstance(t, TensorType):
            return self.leaf(t)
        if isinstance(t, FuncType):
            return FuncType([self(a) for a in t.arg_types] + self.extra_params, self(t.ret_type),
                            t.type_params)
        if isinstance(t, (TupleType, RefType, TypeVar)):    # M of the components, nothing else
            return map_type(t, self)
        if isinstance(t, TypeCall):
            return TypeCall(self.twin_data(t.func).header, [self(a) for a in t.args])
        if isinstance(t, GlobalTypeVar):
            return self.twin_data(t).header
        raise GradientError(f"cannot differentiate through values of type {t}")

    def changes(self, t) -> bool:
        return self(t) != t

    def twin_data(self, gtv) -> TypeData:
        data = self.data_of(gtv)
        twin = self.twin.get(data.header)
        if twin is not None:
            return twin
        if not self.needs_twin(data.header):
            self.twin[data.header] = data
            return data
        reused = self._existing_twin(data)
        if reused is not None:
            return reused
        header = GlobalTypeVar(fresh_name(data.header.name + self.suffix, self._type_names()))
        taken = self._ctor_names()
        ctors = []
        for c in data.constructors:
            name = fresh_name(c.name_hint + self.suffix, taken)
            taken.add(name)
            self.taken.add(name)
            ctors.append(Constructor(name, [], header))
        twin = TypeData(header, list(data.type_vars), ctors)
        self.twin[data.header] = twin
        self.taken.add(header.name)
        for c, orig in zip(ctors, data.constructors):  # after registering: recursive types
            c.inputs = [self(ft) for ft in orig.inputs]
        if self.mod is not None:
            self.mod.add_type(twin)
        self.type_data[header] = twin
        self.created.append(twin)
        return twin

    def _existing_twin(self, data):
        """A twin made by an earlier transform of the module (`<G><suffix>...`, same fields)."""
        if self.mod is None:
            return None
        for other in list(self.type_data.values()):
            if other is data or not other.header.name.startswith(data.header.name + self.suffix) \
                    or len(other.constructors) != len(data.constructors) \
                    or len(other.type_vars) != len(data.type_vars):
                continue
            self.twin[data.header] = other
            subst = dict(zip(data.type_vars, other.type_vars))
            if all(len(c.inputs) == len(o.inputs)
                   and all(self(substitute(ft, subst)) == ot
                           for ft, ot in zip(o.inputs, c.inputs))
                   for c, o in zip(other.constructors, data.constructors)):
                return other
            del self.twin[data.header]
        return None

    def _type_names(self):
        names = {g.name for g in self.type_data} | self.taken
        if self.mod is not None:
            names |= {g.name for g in self.mod.type_definitions}
        return names

    def _ctor_names(self):
        names = set(self.taken)
        for data in self.type_data.values():
            names |= {c.name_hint for c in data.constructors}
        if self.mod is not None:
            names |= set(self.mod.constructors)
        return names

    def ctor(self, c: Constructor) -> Constructor:
        """The twin of constructor c (c itself when its ADT needs no twin)."""
        if c.type_data is not None:
            self.add_type_data(c.type_data)
        if c.belong_to is None:
            raise GradientError(f"constructor {c.name_hint} belongs to no ADT definition")
        orig = self.data_of(c.belong_to)
        twin = self.twin_data(c.belong_to)
        for k, o in enumerate(orig.constructors):
            if o is c:
                return twin.constructors[k]
        for k, o in enumerate(orig.constructors):    # the same constructor reached by name
            if o.name_hint == c.name_hint:
                return twin.constructors[k]
        raise GradientError(f"constructor {c.name_hint} is not one of {orig.header.name}'s")


def adt_definitions(expr) -> dict:
    """{GlobalTypeVar: TypeData} of the ADTs whose constructors `expr` builds or matches, in
    order of first use: the definitions a transform of expr must know (inputs of ADT type)."""
    defs = {}
    for node in walk(expr):
        c = node.constructor if isinstance(node, PatternConstructor) else node
        if isinstance(c, Constructor) and c.type_data is not None:
            defs.setdefault(c.type_data.header, c.type_data)
    return defs


def _type_calls(t):
    """The ADT heads mentioned in type t."""
    return [s.func if isinstance(s, TypeCall) else s for s in walk_type(t)
            if isinstance(s, (TypeCall, GlobalTypeVar))]


