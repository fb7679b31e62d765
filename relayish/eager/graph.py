"""The recorded graph: nodes, the recorder's state, and recording one binding.

Contract. Every operation on recorded tensors appends one `Node` (an SSA binding) whose
arguments are earlier nodes, so creation order (`serial`: segment, index) is a topological
order. A node is

* a leaf: `value` set, `args` None (an input array, a Python scalar, a computed result whose
  derivation was dropped);
* pending: `value` None, `args` set (recorded, not yet run);
* kept: `value` maybe set and `args` set: a result recorded with gradients kept
  (`requires_grad`), whose derivation `re.grad` may still walk.

Kinds: "leaf", "op" (`op` an Op, `attrs` its canonical attributes), "call" (`op` a relayish
Function), "tuple", "proj" (`attrs` the field index). Types are checked here, at record time,
with the op's type rule, so a shape mismatch is an error naming the user's Python line.

User handles (`Tensor`, tensor.py) point at nodes; nodes never point at handles, they count
them (`handles`, kept by Tensor.__init__/__del__): a node none of whose handles is alive is
not an output of the pending program, so bindings only it needed are never computed (or, in a
compiled program, removed as dead code; runner.py).

The segment (`STATE`, `_append`): each binding is also appended to the list of bindings
recorded since the last run, and the segment's structural key is extended by one table lookup
per binding, so a run or a `re.grad` of a repeated iteration finds its program with no walk.
"""
from __future__ import annotations

import itertools
import linecache
import os
import sys

from relayish.errors import RelayishError, TypeCheckError
from relayish.ir.expr import Var
from relayish.ir.types import TensorType, TupleType, type_text as type_str

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # relayish/

# A pending program longer than this runs at the next record even when nothing is inspected,
# so a loop that never looks at a value still keeps a bounded graph.
AUTO_RUN_BINDINGS = 10_000


class Node:
    """One binding of the recorded program (see the module docstring)."""
    __slots__ = ("kind", "op", "attrs", "args", "type", "value", "requires_grad",
                 "shape_key", "mark", "num", "_var", "seg", "idx", "pseg", "pidx", "handles",
                 "needed", "leaf", "grad", "successor", "__weakref__")

    def __init__(self, kind, type_, op, attrs, args, value, requires_grad, shape_key):
        self.kind = kind
        self.op = op
        self.attrs = attrs
        self.args = args
        self.type = type_
        self.value = value
        self.requires_grad = requires_grad
        self.shape_key = shape_key   # this binding's part of a program's key: (kind, op, attrs)
        self.mark = 0        # the last walk (runner.collect) that reached this node
        self.seg = -1        # the segment that recorded it, and its index there
        self.idx = 0
        self.pseg = -1       # the segment that reads it as a parameter (`pidx`: its number)
        self.handles = 0     # live Tensor handles on it (Tensor.__init__/__del__)
        self.needed = False  # a kept derivation reads it: an output of its run
        self.leaf = False    # gradients stop here: mark_leaf, or recorded under no_grad
        self.grad = None     # Tensor.grad: what loss.backward() accumulated for this leaf
        self.successor = None    # the node an in-place update made of this leaf (`latest`)
        # never read before they are written, so not stored here (a store per field is a
        # good part of a node's cost): `num` (runner.Program numbers a program's nodes
        # before reading them), `pidx` (set with `pseg`), `_var` (see `var`)

    @property
    def var(self):
        """A Var annotated with this node's type: what an op's api function is traced with."""
        try:
            return self._var
        except AttributeError:
            self._var = Var("t", self.type)
            return self._var

    @property
    def serial(self) -> tuple:
        """Its place in creation order: (segment, index), segments numbered as made (a
        topological order of the bindings)."""
        return (self.seg, self.idx)

    @property
    def pending(self) -> bool:
        return self.value is None


_SEGMENT_IDS = itertools.count(1)


class _State:
    """The recorder's global state (one recorder per process; not thread-safe).

    The *segment* is what was recorded since the last run: its bindings (`nodes`, in order;
    each stamped with `seg`/`idx`), the values they read from outside it (`params`, in order of
    first use; stamped `pseg`/`pidx`) and `state`, the structural key of the segment so far,
    extended at each record by one lookup in `_TRIE` (see `_append`). `irregular`: a parameter
    has no value yet (an uncomputed result of an earlier segment; runner.py then walks the
    graph instead); `opaque`: a parameter keeps its derivation (re.grad may walk past it)."""

    def __init__(self):
        self.grad_enabled = True
        self.recorded_since_run = 0
        self.auto_run = None                 # runner.run_pending, set by runner.py on import
        self.tracing = 0                     # re.checkpoint recording its function
        self.overwritten = []                # (node, pseg, pidx) a traced segment replaced
        self.new_segment()

    def new_segment(self):
        self.seg_id = next(_SEGMENT_IDS)     # never reused: a node's stamps stay unambiguous
        self.nodes = []
        self.params = []
        self.state = 0 if self.grad_enabled else grad_mode_state(0, False)
        self.irregular = False
        self.opaque = False

    def save_segment(self):
        saved = (self.seg_id, self.nodes, self.params, self.state, self.irregular,
                 self.opaque, self.recorded_since_run, self.overwritten)
        self.overwritten = []
        return saved

    def restore_segment(self, saved):
        """Back to a saved segment; the parameter stamps a traced one put on its nodes are
        put back."""
        for node, pseg, pidx in reversed(self.overwritten):
            node.pseg, node.pidx = pseg, pidx
        (self.seg_id, self.nodes, self.params, self.state, self.irregular, self.opaque,
         self.recorded_since_run, self.overwritten) = saved


STATE = _State()

# (segment state, binding row) -> the next state: the segment's key is built as it is
# recorded, so a run or a re.grad finds its program by one int, with no walk. Rows name
# their arguments by position in the segment (>= 0), as parameters (< 0), or, for a
# parameter's first use, by its type; a bounded table (cleared, then the hooks forget every
# entry keyed by an old state; the state counter never repeats).
_TRIE: dict = {}
_TRIE_SIZE = 200_000
_STATES = itertools.count(1)
TRIE_RESET_HOOKS: list = []


def _reset_table():
    """Forget the table (and the type numbers its rows use); new states are new numbers, so
    a state reached before cannot be confused with one reached after."""
    _TRIE.clear()
    _TYPE_NUMBERS.clear()
    _TYPE_REFS.clear()
    for hook in TRIE_RESET_HOOKS:
        hook()


def _type_ref(t):
    """A parameter's first use in a row: its type, as a small hashable stand-in (a type's own
    hash is Python code; the table keeps the type alive, so its id stays its own)."""
    known = _TYPE_REFS.get(id(t))
    if known is None:
        if len(_TYPE_REFS) >= 4096:
            _TYPE_REFS.clear()
        if len(_TYPE_NUMBERS) >= _TRIE_SIZE:
            _reset_table()
        known = _TYPE_REFS[id(t)] = ((_TYPE_NUMBERS.setdefault(t, len(_TYPE_NUMBERS)),), t)
    return known[0]


_TYPE_REFS: dict = {}       # id(type) -> (its number, the type)
_TYPE_NUMBERS: dict = {}    # type -> its number (by equality; numbers are never reused)


def _append(node, args, refs=None):
    """Add a recorded binding (not an op: record_op has its own copy) to the segment and
    extend the segment's key (`refs`: the row's argument entries, when the caller knows them:
    every argument already in the segment)."""
    st = STATE
    sid = st.seg_id
    if refs is None:
        refs = [a.idx if a.seg == sid else ~a.pidx if a.pseg == sid else _new_param(st, sid, a)
                for a in args]
    row = (st.state, node.shape_key, *refs)
    nxt = _TRIE.get(row)
    if nxt is None:
        nxt = _TRIE[row] = _new_state(None)
    return _appended(st, sid, node, args, nxt[0])


def _appended(st, sid, node, args, state):
    if node.requires_grad:
        for a in args:
            if a.seg == sid and not a.requires_grad:
                a.needed = True
    if not st.grad_enabled:
        node.leaf = True
    st.state = state
    node.seg = sid
    nodes = st.nodes
    node.idx = len(nodes)
    nodes.append(node)
    st.recorded_since_run += 1
    if st.recorded_since_run > AUTO_RUN_BINDINGS and st.auto_run is not None:
        st.auto_run()
    return node


def _new_state(out):
    """A table entry: the next state, and for an op row its result type and shape key."""
    if len(_TRIE) >= _TRIE_SIZE:
        _reset_table()
    return (next(_STATES), *out) if out is not None else (next(_STATES),)


def _new_param(st, sid, a):
    """`a`, read by the segment for the first time, becomes its next parameter; its row
    entry is its type."""
    if st.tracing:
        st.overwritten.append((a, a.pseg, getattr(a, "pidx", 0)))
    a.pseg = sid
    a.pidx = len(st.params)
    st.params.append(a)
    if a.value is None:
        st.irregular = True
    elif a.args is not None:
        st.opaque = True
    elif a.requires_grad and a.successor is not None:
        st.opaque = True     # updated in place before: which parameter it now is, the key can't say
    known = _TYPE_REFS.get(id(a.type))
    return known[0] if known is not None else _type_ref(a.type)


class no_grad:
    """`with re.no_grad(): ...`: results recorded here carry no gradient, as in PyTorch,
    whenever they are computed: they are leaves of gradients (`leaf`), so `re.grad` and
    `backward()` take them as constants, and once run nothing of their derivation is kept
    (the SGD update of a training loop). The mode is part of the segment's key (one table
    row at each switch), so a step recorded with a term under no_grad and the same step
    without it never share a cached gradient or list of leaves. (A class, not a generator
    context manager: entered at every step of a loop.)"""
    __slots__ = ("before",)

    def __enter__(self):
        st = STATE
        self.before = st.grad_enabled
        if st.grad_enabled:
            st.grad_enabled = False
            st.state = grad_mode_state(st.state, False)
        return self

    def __exit__(self, *exc):
        st = STATE
        if self.before and not st.grad_enabled:
            st.grad_enabled = True
            st.state = grad_mode_state(st.state, True)
        return False


def grad_mode_state(state, enabled):
    """The segment's state after a switch of the grad mode (a row of the table)."""
    row = (state, _GRAD_MODE_KEY, enabled)
    nxt = _TRIE.get(row)
    if nxt is None:
        nxt = _TRIE[row] = _new_state(None)
    return nxt[0]


def user_location() -> str:
    """`file:line: source` of the innermost caller outside relayish (the line that recorded)."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back
    if frame is None:
        return "<unknown line>"
    filename, line = frame.f_code.co_filename, frame.f_lineno
    source = linecache.getline(filename, line).strip()
    return f"{filename}:{line}: {source}" if source else f"{filename}:{line}"


def record_error(message, cls=TypeCheckError):
    """An error for the binding being recorded, naming the user's Python line."""
    return cls(f"{message}\n  recorded at {user_location()}")


def _requires_grad(args) -> bool:
    if not STATE.grad_enabled:
        return False
    for a in args:
        if a.requires_grad:
            return True
    return False


def frozen(attrs):
    """A hashable form of canonical attributes (lists become tuples, dicts sorted items)."""
    if isinstance(attrs, dict):
        return tuple(sorted((k, frozen(v)) for k, v in attrs.items()))
    if isinstance(attrs, list):
        return tuple(frozen(v) for v in attrs)
    return attrs


# (op, argument types, frozen attrs) -> result type, for calls the segment table has not seen
# (a rule builds shapes and types each time, ~5 us); bounded.
_RULE_MEMO: dict = {}
_RULE_MEMO_SIZE = 4096


def record_op(op, args, attrs, fa=None) -> Node:
    """Record `op(args, **attrs)` (attrs canonical; `fa`: frozen(attrs) when the caller has it),
    its type from the op's type rule. `args` (a list) becomes the node's.

    The segment's table gives the result type with the next state: the row (the state, the
    op, its attributes, where its arguments come from) fixes the arguments' types, so a
    repeated iteration looks up neither a type rule nor its memo."""
    if fa is None:
        fa = frozen(attrs) if attrs else ()
    st = STATE
    sid = st.seg_id
    if len(args) == 2:               # most ops (then one): no comprehension, no loop
        a, b = args
        rg = a.requires_grad or b.requires_grad
        row = (st.state, op, fa,
               a.idx if a.seg == sid else ~a.pidx if a.pseg == sid else _new_param(st, sid, a),
               b.idx if b.seg == sid else ~b.pidx if b.pseg == sid else _new_param(st, sid, b))
    elif len(args) == 1:
        a = args[0]
        rg = a.requires_grad
        row = (st.state, op, fa,
               a.idx if a.seg == sid else ~a.pidx if a.pseg == sid else _new_param(st, sid, a))
    else:
        rg = False
        for a in args:
            if a.requires_grad:
                rg = True
                break
        row = (st.state, op, fa, *[a.idx if a.seg == sid else ~a.pidx if a.pseg == sid
                                   else _new_param(st, sid, a) for a in args])
    try:
        hit = _TRIE.get(row)
        keyed = True
    except TypeError:            # an unhashable attribute: a row of its own
        hit = None
        keyed = False
    if hit is None:
        casts = _promotion(op, args)
        if casts is not None:            # mixed dtypes: PyTorch's promotion, as casts
            try:                         # checked first: a refused call records nothing
                _apply_rule(op, [a.type if d is None else TensorType(a.type.shape, d)
                                 for a, d in zip(args, casts)], attrs)
            except BaseException:
                _forget_params(st, row[3:])
                raise
            # the row names the arguments read for the first time by their types: a row of
            # its own puts them in the key before the casts name them by position
            pre = (row[0], _PROMOTE_KEY, *row[1:])
            nxt = _TRIE.get(pre)
            if nxt is None:
                nxt = _TRIE[pre] = _new_state(None)
            st.state = nxt[0]
            return record_op(op, [a if d is None else record_cast(a, d)
                                  for a, d in zip(args, casts)], attrs, fa)
        try:
            out = _rule(op, args, attrs, fa)
        except BaseException:
            _forget_params(st, row[3:])      # the binding is not recorded: nor its reads
            raise
        hit = _new_state(out)
        if keyed:
            _TRIE[row] = hit
    if rg:
        if st.grad_enabled:
            for a in args:
                if a.seg == sid and not a.requires_grad:
                    a.needed = True
        else:
            rg = False
    # Node(...) and _appended, written out: this is the path every recorded op takes (a
    # call of Node's __init__ is a third of a node's cost)
    nodes = st.nodes
    node = _new_object(Node)
    node.kind = "op"
    node.op = op
    node.attrs = attrs
    node.args = args
    node.type = hit[1]
    node.value = None
    node.requires_grad = rg
    node.shape_key = hit[2]
    node.mark = 0
    node.seg = sid
    node.idx = len(nodes)
    node.pseg = -1
    node.handles = 0
    node.needed = False
    node.leaf = not st.grad_enabled      # a no_grad result: gradients stop at it
    node.grad = None
    node.successor = None
    st.state = hit[0]
    nodes.append(node)
    st.recorded_since_run += 1
    if st.recorded_since_run > AUTO_RUN_BINDINGS and st.auto_run is not None:
        st.auto_run()
    return node


_new_object = object.__new__


# PyTorch's type promotion for the ops that take operands of one dtype: the positions of
# the operands it applies to. A repeated step reads the casts' rows and the op's from the
# table; the row of the unpromoted call is never stored, so it comes back here (a miss).
_PROMOTING = {name: (0, 1) for name in (
    "add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "less",
    "greater", "less_equal", "greater_equal", "equal", "not_equal")}
_PROMOTING["where"] = (1, 2)
_CATEGORY = {"bool": 0, "float16": 2, "float32": 2, "float64": 2}    # ints: 1
_DEFAULT_FLOAT = "float32"       # torch.get_default_dtype(), and relayish's Python floats


def category(dtype):
    """bool 0, ints 1, floats 2 (PyTorch's categories of promotion)."""
    return _CATEGORY.get(dtype, 1)


def _promote_pair(a, b):
    """torch.promote_types: the higher category's dtype, or within one, the wider (None
    where torch refuses, as uint64 with a signed int)."""
    if a == b:
        return a
    ca, cb = category(a), category(b)
    if ca != cb:
        return a if ca > cb else b
    import numpy as np
    name = np.promote_types(a, b).name
    return name if category(name) == ca else None


def _promote_all(dtypes):
    out = dtypes[0] if dtypes else None
    for d in dtypes[1:]:
        out = _promote_pair(out, d) if out is not None else None
    return out


def promoted_dtype(types):
    """PyTorch's result dtype of operands of these tensor types: the dimensioned operands
    decide, and a zero-dimensional one (a Python number's leaf, `re.tensor(2.0)`) only when
    its category (bool < int < float) is higher; a Python float with an int tensor is a
    float32 leaf, the default dtype."""
    dim = [t.dtype for t in types if t.shape != ()]
    zero = [t.dtype for t in types if t.shape == ()]
    rd, rz = _promote_all(dim), _promote_all(zero)
    if rd is None:
        return rz
    if rz is not None and category(rz) > category(rd):
        return _promote_pair(rd, rz)
    return rd


def _promotion(op, args):
    """The dtype each argument is cast to (None: as it is), or None for no cast."""
    positions = _PROMOTING.get(op.name)
    if positions is None or len(args) <= max(positions):
        return None
    types = [args[i].type for i in positions]
    if not all(t.__class__ is TensorType for t in types):
        return None
    out = promoted_dtype(types)
    if out is None:
        return None
    if op.name == "divide" and category(out) < 2:
        out = _DEFAULT_FLOAT                         # `/` is true division, as in PyTorch
    casts = [out if i in positions and args[i].type.dtype != out else None
             for i in range(len(args))]
    return casts if any(casts) and not (out == "bool" and op.name not in _COMPARISONS) else None


_COMPARISONS = {"less", "greater", "less_equal", "greater_equal", "equal", "not_equal",
                "where"}


def record_cast(node, dtype) -> Node:
    """Record `cast(node, dtype)`."""
    from relayish.ir.op import get_op
    op = get_op("cast")
    attrs = op.normalize_attrs({"dtype": dtype})
    return record_op(op, [node], attrs)


def _forget_params(st, refs):
    """Undo the parameters a refused record added: its arguments read for the first time
    (a type's stand-in, a tuple, in the row; one per parameter, appended last)."""
    before = len(st.params) - sum(1 for r in refs if r.__class__ is tuple)
    for p in st.params[before:]:
        p.pseg = -1
    del st.params[before:]


def _rule(op, args, attrs, fa):
    """(result type, shape key) of a call: from the memo, or the op's type rule."""
    arg_types = [a.type for a in args]
    try:
        memo_key = (op, *arg_types, fa)
        out = _RULE_MEMO.get(memo_key)
    except TypeError:            # an unhashable attribute: no memo for this call
        memo_key = out = None
    if out is None:
        out = _apply_rule(op, arg_types, attrs)
        if memo_key is not None:
            if len(_RULE_MEMO) >= _RULE_MEMO_SIZE:
                _RULE_MEMO.clear()
            _RULE_MEMO[memo_key] = out
    return out, ("op", op, fa)


def _apply_rule(op, arg_types, attrs):
    if op.type_rule is None:
        raise record_error(f"operator '{op.name}' has no type rule")
    try:
        out = op.type_rule(arg_types, dict(attrs))
    except RelayishError as e:
        raise record_error(f"{e}") from None
    except Exception as e:  # noqa: BLE001 - a rule that breaks on odd input is a type error
        shown = ", ".join(type_str(t) for t in arg_types)
        raise record_error(f"operator '{op.name}' cannot take arguments of types ({shown}) "
                           f"({type(e).__name__}: {e})") from None
    if not isinstance(out, (TensorType, TupleType)):
        raise record_error(f"the type rule of operator '{op.name}' returned {out!r}, not a "
                           f"tensor or tuple type")
    return out


def record_tuple(args) -> Node:
    args = list(args)
    return _append(Node("tuple", TupleType([a.type for a in args]), None, None, args, None,
                        _requires_grad(args), _TUPLE_KEY), args)


def record_proj(arg, index) -> Node:
    if not isinstance(arg.type, TupleType) or not 0 <= index < len(arg.type.fields):
        raise record_error(f"field {index} of a value of type {type_str(arg.type)}")
    args = [arg]
    return _append(Node("proj", arg.type.fields[index], None, index, args, None,
                        STATE.grad_enabled and arg.requires_grad, ("proj", None, index)), args)


def record_projections(arg, count) -> list:
    """`record_proj(arg, i)` for i < count (the gradients of a gradient call): one row of
    the segment's key for all of them."""
    st = STATE
    sid = st.seg_id
    ref = arg.idx if arg.seg == sid else ~arg.pidx if arg.pseg == sid else \
        _new_param(st, sid, arg)
    row = (st.state, _PROJECTIONS, count, ref)
    nxt = _TRIE.get(row)
    if nxt is None:
        if not isinstance(arg.type, TupleType) or len(arg.type.fields) < count:
            raise record_error(f"{count} fields of a value of type {type_str(arg.type)}")
        nxt = _TRIE[row] = _new_state(None)
    rg = st.grad_enabled and arg.requires_grad
    fields = arg.type.fields
    args = [arg]
    nodes = st.nodes
    out = []
    for i in range(count):
        node = _new_object(Node)        # Node(...), written out as in record_op
        node.kind = "proj"
        node.op = None
        node.attrs = i
        node.args = args
        node.type = fields[i]
        node.value = None
        node.requires_grad = rg
        node.shape_key = _PROJ_KEYS[i] if i < len(_PROJ_KEYS) else ("proj", None, i)
        node.mark = 0
        node.seg = sid
        node.idx = len(nodes)
        node.pseg = -1
        node.handles = 0
        node.needed = False
        node.leaf = not st.grad_enabled
        node.grad = None
        node.successor = None
        nodes.append(node)
        out.append(node)
    st.state = nxt[0]
    st.recorded_since_run += count
    if st.recorded_since_run > AUTO_RUN_BINDINGS and st.auto_run is not None:
        st.auto_run()
    return out


_PROJECTIONS = ("projections", None, None)
_PROJ_KEYS = [("proj", None, i) for i in range(64)]


def record_call(func, ret_type, args, refs=None) -> Node:
    """Record a call of the relayish Function `func` (already type-checked: `ret_type`);
    `refs`: the arguments' row entries when every one is in the segment already (re.grad's
    repeated step knows them)."""
    args = list(args)
    return _append(Node("call", ret_type, func, None, args, None, _requires_grad(args),
                        ("call", func, None)), args, refs)


def mark_leaf(node) -> None:
    """Make the recorded result `node` a leaf that requires gradients (an in-place update of
    a parameter under re.no_grad(), PyTorch's `p -= lr * p.grad`): bindings that read it keep
    their derivations, gradients stop at it (re.grad, backward), and once it is computed its
    own derivation is dropped. The mark is part of the segment's key."""
    st = STATE
    node.requires_grad = True
    node.leaf = True
    if node.seg == st.seg_id:
        row = (st.state, _LEAF_KEY, node.idx)
        nxt = _TRIE.get(row)
        if nxt is None:
            nxt = _TRIE[row] = _new_state(None)
        st.state = nxt[0]
    elif node.value is not None:
        node.args = None


def is_leaf(node) -> bool:
    """Where gradients stop: a value without a derivation, a result marked a leaf, or one
    recorded under no_grad."""
    return node.args is None or node.leaf


def latest(node):
    """The node a leaf requiring gradients became through in-place updates under no_grad
    (`w -= lr * g` records a new node and repoints the handle; the old one's `successor` is
    it): PyTorch's one tensor, whose `.grad` collects the gradients of every version used."""
    while node.successor is not None:
        node = node.successor
    return node


def leaf(value, type_, requires_grad=False) -> Node:
    if not isinstance(type_, TensorType):
        raise RelayishError(f"a recorded leaf is a tensor, not {type_str(type_)}")
    return Node("leaf", type_, None, None, None, value, requires_grad, _LEAF_KEY)


_TUPLE_KEY = ("tuple", None, None)
_LEAF_KEY = ("leaf", None, None)
_GRAD_MODE_KEY = ("grad_mode", None, None)
_PROMOTE_KEY = ("promote", None, None)
