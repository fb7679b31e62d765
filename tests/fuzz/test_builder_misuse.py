"""Fuzzing the builder: every node and type constructor, every op and the ScopeBuilder, fed
values of the wrong kind.

Property: a misuse raises a RelayishError when it is made, or what it built is usable: printing,
type inference, evaluation (and, for a program that type-checks, printing then parsing back
the same program) either work or raise RelayishErrors. Never another exception, never a runaway
(each case runs under `bounded`: an endless iteration through __getitem__ fails the case at a
few hundred MB instead of eating the machine).

The cases are generated: each field of each constructor x each wrong value; each op x wrong
arguments and attributes; rl.var / rl.const x bad shapes, dtypes and data; sequences of
ScopeBuilder calls; the entry points (evaluate, compile, gradient...) x wrong arguments; and,
under hypothesis, one node of a random well-typed program rebuilt with a wrong field.
"""
from __future__ import annotations

import inspect
import itertools

import attrs
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import relayish as rl
from fuzzing import bounded, fuzz_settings
from relayish.ir.analysis import free_vars
from strategies import programs

F32 = rl.TensorType((), "float32")
VEC = rl.TensorType((2,), "float32")


class Context:
    """Fresh valid pieces for one case: a module with a small ADT, a few nodes."""

    def __init__(self):
        self.mod = rl.Module()
        a = rl.TypeVar("a")
        self.Opt = rl.GlobalTypeVar("Opt")
        self.Some = rl.Constructor("Some", [a], self.Opt)
        self.No = rl.Constructor("No", [], self.Opt)
        self.mod.add_type(rl.TypeData(self.Opt, [a], [self.Some, self.No]))

    @staticmethod
    def one():
        return rl.const(1.0)


# ---- wrong values --------------------------------------------------------------------------

WRONG = {       # label: a fresh wrong value, given the case's Context
    "int": lambda c: 1,
    "big int": lambda c: 2**70,
    "float": lambda c: 2.5,
    "bool": lambda c: True,
    "str": lambda c: "x",
    "odd str": lambda c: "a b%{}\n\x00",
    "None": lambda c: None,
    "list of node": lambda c: [c.one()],
    "empty list": lambda c: [],
    "tuple": lambda c: (c.one(), c.one()),
    "dict": lambda c: {"k": c.one()},
    "numpy array": lambda c: np.ones((2, 2)),
    "numpy string array": lambda c: np.array(["a", "b"]),
    "numpy scalar": lambda c: np.float64(1.5),
    "python function": lambda c: (lambda *a: 1.0),
    "expression": lambda c: c.one(),
    "var": lambda c: rl.var("w"),
    "type": lambda c: F32,
    "pattern": lambda c: rl.PatternWildcard(),
    "constructor": lambda c: c.Some,
    "object": lambda c: object(),
}


# ---- nodes and their valid fields ----------------------------------------------------------

def _node_specs(c):
    """name: (constructor, valid keyword arguments, wrap): wrap(node) is an expression of a
    closed program that uses the node, or a type for a parameter."""
    one = c.one
    x = rl.var("x")
    v = rl.var("v")
    tv = rl.TypeVar("t")
    g = rl.GlobalTypeVar("G")
    as_expr = None
    in_match = lambda data: lambda p: rl.Match(data, [rl.Clause(p, one())], complete=False)  # noqa: E731
    return {
        "Var": (rl.Var, {"name_hint": "v", "type_annotation": F32},
                lambda n: rl.Let(n, one(), n) if isinstance(n, rl.Var) else n),
        "GlobalVar": (rl.GlobalVar, {"name_hint": "g"}, lambda gv: _global_use(c, gv)),
        "Constant": (rl.Constant, {"data": np.ones(2, "float32")}, as_expr),
        "Tuple": (rl.Tuple, {"fields": [one(), one()]}, as_expr),
        "TupleGetItem": (rl.TupleGetItem, {"tuple_value": rl.Tuple([one()]), "index": 0}, as_expr),
        "Function": (rl.Function, {"params": [x], "body": x, "ret_type": F32, "type_params": []},
                     lambda f: rl.Call(f, [one()])),
        "Call": (rl.Call, {"op": rl.get_op("add"), "args": [one(), one()], "attrs": {}}, as_expr),
        "Let": (rl.Let, {"var": v, "value": one(), "body": v}, as_expr),
        "If": (rl.If, {"cond": rl.const(True), "true_branch": one(), "false_branch": one()},
               as_expr),
        "RefCreate": (rl.RefCreate, {"value": one()}, as_expr),
        "RefRead": (rl.RefRead, {"ref": rl.RefCreate(one())}, as_expr),
        "RefWrite": (rl.RefWrite, {"ref": rl.RefCreate(one()), "value": one()}, as_expr),
        "Match": (rl.Match, {"data": c.Some(one()),
                             "clauses": [rl.Clause(rl.PatternWildcard(), one())],
                             "complete": True}, as_expr),
        "Clause": (rl.Clause, {"lhs": rl.PatternWildcard(), "rhs": one()},
                   lambda cl: rl.Match(one(), [cl])),
        "PatternVar": (rl.PatternVar, {"var": rl.var("p")}, in_match(one())),
        "PatternConstructor": (rl.PatternConstructor,
                               {"constructor": c.Some, "patterns": [rl.PatternWildcard()]},
                               in_match(c.Some(one()))),
        "PatternTuple": (rl.PatternTuple, {"patterns": [rl.PatternWildcard()] * 2},
                         in_match(rl.Tuple([one(), one()]))),
        "Constructor": (rl.Constructor, {"name_hint": "K", "inputs": [F32], "belong_to": g},
                        lambda k: _ctor_use(c, g, k)),
        # types: used as the annotation of a parameter
        "TensorType": (rl.TensorType, {"shape": (2,), "dtype": "float32"}, as_expr),
        "TupleType": (rl.TupleType, {"fields": [F32, VEC]}, as_expr),
        "FuncType": (rl.FuncType, {"arg_types": [F32], "ret_type": F32, "type_params": []},
                     as_expr),
        "RefType": (rl.RefType, {"value": F32}, as_expr),
        "TypeVar": (rl.TypeVar, {"name": "t"}, as_expr),
        "TypeCall": (rl.TypeCall, {"func": c.Opt, "args": [F32]}, as_expr),
        "GlobalTypeVar": (rl.GlobalTypeVar, {"name": "H"}, lambda h: _adt_use(c, h)),
        "TypeData": (rl.TypeData, {"header": g, "type_vars": [tv],
                                   "constructors": [rl.Constructor("L", [tv], g)]},
                     lambda d: _type_data_use(c, d)),
    }


def _ctor_use(c, g, k):
    c.mod.add_type(rl.TypeData(g, [], [k]))
    return rl.Call(k, [c.one()])


def _global_use(c, gv):
    c.mod[gv] = rl.Function([], c.one())
    return rl.Call(gv, [])


def _adt_use(c, header):
    c.mod.add_type(rl.TypeData(header, [], [rl.Constructor("HC", [], header)]))
    return header


def _type_data_use(c, data):
    c.mod.add_type(data)
    return c.one()


def _init_names(cls):
    return [a.alias for a in attrs.fields(cls) if a.init]


SPEC_NAMES = sorted(_node_specs(Context()))
NODE_CASES = [(node, field, wrong) for node in SPEC_NAMES
              for field in _node_specs(Context())[node][1] for wrong in WRONG]


# ---- using what was built ------------------------------------------------------------------

def exercise(c, built, wrap=None, close=True):
    """Print, type-check and run `built` (an Expr, Type, Pattern or Clause) in a program; each
    step works or raises a RelayishError. A program that type-checks prints as text that
    parses back to the same program. The program's @main takes the expression's free
    variables as parameters (close=False leaves them free)."""
    repr(built)
    str(built)
    if wrap is not None:
        built = wrap(built)
    if isinstance(built, rl.Type):
        hash(built)
        param = rl.Var("p", built)
        main = rl.Function([param], param)
    elif isinstance(built, rl.Expr):
        main = rl.Function(_free_vars(built) if close else [], built)
    else:
        return
    c.mod["main"] = main
    text = rl.astext(c.mod)
    try:
        mod = rl.infer_type(c.mod)
    except rl.RelayishError:
        return
    try:
        again = rl.parse(text)
    except rl.ParseError as err:
        raise AssertionError(f"a well-typed built program prints as text that does not parse: "
                             f"{err}\n{text}") from None
    rl.assert_structural_equal(again, mod)
    if not main.params:
        try:
            rl.evaluate(mod)
        except rl.RelayishError:
            pass


def _free_vars(e):
    """free_vars is internal: on a malformed node it may fail where the public entry points
    must not, so a failure here leaves the program to them (unclosed)."""
    try:
        return free_vars(e)
    except Exception:  # noqa: BLE001
        return []


def relayish_or_usable(what, build, c=None, wrap=None, close=True):
    """build() raises a RelayishError or returns something `exercise` accepts."""
    c = c or Context()
    with bounded(what):
        try:
            built = build()
        except rl.RelayishError:
            return
        try:
            exercise(c, built, wrap, close)
        except rl.RelayishError:
            pass


def test_a_global_function_with_a_free_variable():
    """fn () { %x } as @main: inference rejects the free %x, or the module round-trips."""
    relayish_or_usable("@main = fn () { %x }", lambda: rl.var("x"), close=False)


@pytest.mark.parametrize("node, field, wrong", NODE_CASES)
def test_node_field_misuse(node, field, wrong):
    c = Context()
    cls, kwargs, wrap = _node_specs(c)[node]
    kwargs = dict(kwargs, **{field: WRONG[wrong](c)})
    relayish_or_usable(f"rl.{node}({field}=<{wrong}>)", lambda: cls(**kwargs), c, wrap)


@pytest.mark.parametrize("node", SPEC_NAMES)
def test_valid_node_specs_are_usable(node):
    """The table's valid arguments build a node that type-checks (so a misuse case differs
    from a working program only in its wrong field)."""
    c = Context()
    cls, kwargs, wrap = _node_specs(c)[node]
    built = cls(**kwargs)
    exercise(c, built, wrap)
    rl.infer_type(c.mod)


# ---- the usual typos: a node where a list is meant, and the reverse ----------------------

def _x():
    return rl.var("x")


TYPOS = {
    "rl.Function(x, body)": lambda: rl.Function(_x(), rl.const(1.0)),
    "rl.Tuple(x)": lambda: rl.Tuple(_x()),
    "rl.Call(f, x)": lambda: rl.Call(rl.Function([_x()], rl.const(1.0)), _x()),
    "rl.Match(x, clause)": lambda: rl.Match(rl.const(1.0), rl.Clause(rl.PatternWildcard(),
                                                                      rl.const(1.0))),
    "rl.PatternTuple(pattern)": lambda: rl.PatternTuple(rl.PatternWildcard()),
    "rl.TupleType(type)": lambda: rl.TupleType(F32),
    "rl.FuncType(type, type)": lambda: rl.FuncType(F32, F32),
    "rl.Constructor(name, type, adt)": lambda: rl.Constructor("K", F32, rl.GlobalTypeVar("G")),
    "list(x)": lambda: list(_x()),
    "tuple(x)": lambda: tuple(_x()),
    "iter(x)": lambda: iter(_x()),
    "1 in x": lambda: 1 in _x(),
    "x in [x]": lambda: rl.const(1.0) in [_x()],
    "len(x)": lambda: len(_x()),
    "bool(x)": lambda: bool(_x()),
    "x[1.5]": lambda: _x()[1.5],
    "x['a']": lambda: _x()["a"],
    "x[None]": lambda: _x()[None],
    "x[-1]": lambda: rl.Tuple([rl.const(1.0)])[-1],
    "x[2**70]": lambda: rl.Tuple([rl.const(1.0)])[2**70],
    "x[1:2]": lambda: rl.Tuple([rl.const(1.0)])[1:2],
    "x + 'a'": lambda: _x() + "a",
    "x + None": lambda: _x() + None,
    "x + [1, 2]": lambda: _x() + [1, 2],
    "x + object()": lambda: _x() + object(),
    "x @ 3": lambda: _x() @ 3,
    "x < 's'": lambda: _x() < "s",
    "x ** (lambda: 1)": lambda: _x() ** (lambda: 1),
    "x + 2**70": lambda: _x() + 2**70,
    "int32 var + 2**40": lambda: rl.var("i", dtype="int32") + 2**40,
    "x * np.ones(2)": lambda: _x() * np.ones(2),
    "np.ones(2) * x": lambda: np.ones(2) * _x(),
    "x(1, 'a')": lambda: _x()(1, "a"),
    "float(x)": lambda: float(_x()),
    "int(x)": lambda: int(_x()),
    "np.asarray(x)": lambda: np.asarray(_x()),
    "hash(F32) and x == x": lambda: (hash(F32), _x() == _x()),
    "a parameter typed by an ADT the module lacks": lambda: rl.GlobalTypeVar("H"),
}


@pytest.mark.parametrize("typo", sorted(TYPOS))
def test_typos_raise_relayish_errors(typo):
    relayish_or_usable(typo, TYPOS[typo])


# ---- rl.var, rl.const, rl.TensorType -------------------------------------------------------

BAD_SHAPES = [(-1,), (2.5,), "3", "(2, 3)", [[2]], (True,), 3, (2**70,), np.ones(2), (None,),
              {2: 3}, (1, "a")]
BAD_DTYPES = ["float", "f32", "str", "float128", "complex64", "object", 3, np.float32, "Float32",
              "", "bool8", "int", "U5", "datetime64", None]
BAD_NAMES = [3, None, "", "a b", "%x", "@f", "x\ny", b"x", ("x",)]


@pytest.mark.parametrize("shape", BAD_SHAPES, ids=repr)
def test_var_shape_misuse(shape):
    relayish_or_usable(f"rl.var('x', shape={shape!r})", lambda: rl.var("x", shape=shape))


@pytest.mark.parametrize("dtype", BAD_DTYPES, ids=repr)
def test_var_and_tensor_type_dtype_misuse(dtype):
    relayish_or_usable(f"rl.var('x', dtype={dtype!r})", lambda: rl.var("x", dtype=dtype))
    relayish_or_usable(f"rl.TensorType((), {dtype!r})", lambda: rl.TensorType((), dtype))


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_var_name_misuse(name):
    relayish_or_usable(f"rl.var({name!r})", lambda: rl.var(name))


BAD_CONST = {
    "ragged list": ([[1, 2], [3]], None),
    "2**70": (2**70, None),
    "-2**70": (-2**70, None),
    "string": ("abc", None),
    "None": (None, None),
    "object": (object(), None),
    "complex": (1j, None),
    "string array": (np.array(["a"]), None),
    "datetime": (np.datetime64("2020-01-01"), None),
    "empty list": ([], None),
    "empty nested list": ([[]], None),
    "dict": ({1: 2}, None),
    "function": (lambda: 1, None),
    "expression": (rl.const(1.0), None),
    "1.5 as int32": (1.5, "int32"),
    "300 as uint8": (300, "uint8"),
    "-1 as uint8": (-1, "uint8"),
    "nan as int32": (float("nan"), "int32"),
    "inf as int64": (float("inf"), "int64"),
    "2**40 as int32": (2**40, "int32"),
    "1e300 as float16": (1e300, "float16"),
    "1 as str dtype": (1, "str"),
    "1 as bad dtype": (1, "float33"),
    "list with None": ([1.0, None], None),
    "list with string": ([1.0, "a"], None),
}


@pytest.mark.parametrize("case", sorted(BAD_CONST))
def test_const_misuse(case):
    value, dtype = BAD_CONST[case]
    relayish_or_usable(f"rl.const({case})", lambda: rl.const(value, dtype=dtype))


# ---- ops: wrong arguments and attributes ---------------------------------------------------

M = lambda: rl.var("m", shape=(2, 3))   # noqa: E731
OPS = [name for name in rl.op.__all__ if callable(getattr(rl.op, name))]
BAD_ATTRS = {"axis": ["a", 5, 2.5, [0, 0], -9, None], "keepdims": ["yes", 2, None],
             "newshape": ["abc", (-1, -1), (7,), (2.5,), None], "shape": [None, "x", (-2,), (4, 4)],
             "dtype": ["float", 3, None, "str"], "axes": [[0, 0], [5, 0], "ab", 1],
             "indices": ["a", 9, 2.5, [9]], "fill_value": ["a", None, [1, 2]],
             "begin": ["a", (9,), None], "end": ["a", (-9,), None], "foo": [1]}
BAD_ARGS = {"none": [None], "string": ["a"], "nested list": [[[1, 2], [3]]], "no args": [],
            "too many": [M(), M(), M(), M()], "matrix and string": [M(), "a"],
            "tuple for tensor": [rl.Tuple([M(), M()])], "function": [lambda: 1]}


def _op_cases():
    """Each op x each kind of wrong arguments, and x each wrong value of each attribute it
    takes (plus one it does not take)."""
    for name in OPS:
        for label in BAD_ARGS:
            yield name, f"args: {label}"
        takes = set(inspect.signature(getattr(rl.op, name)).parameters) | {"foo"}
        for attr, values in BAD_ATTRS.items():
            if attr in takes:
                for k, _ in enumerate(values):
                    yield name, f"{attr} #{k}"


OP_CASES = list(_op_cases())


def _op_call(name, case):
    fn = getattr(rl.op, name)
    if case.startswith("args: "):
        args = BAD_ARGS[case[len("args: "):]]
        return lambda: fn(*args)
    attr, k = case.split(" #")
    value = BAD_ATTRS[attr][int(k)]
    n_args = 2 if name in ("add", "subtract", "multiply", "divide", "power", "maximum",
                           "minimum", "matmul", "less", "greater", "less_equal",
                           "greater_equal", "equal", "not_equal", "logical_and", "logical_or",
                           "collapse_sum_like", "broadcast_to_like", "reshape_like",
                           "cast_like") else 1
    args = [M() for _ in range(n_args)]
    if name in ("zeros", "ones"):
        args = []
    if name in ("concatenate", "stack"):
        args = [[M(), M()]]
    return lambda: fn(*args, **{attr: value})


@pytest.mark.parametrize("name, case", OP_CASES)
def test_op_misuse(name, case):
    relayish_or_usable(f"rl.{name}({case})", _op_call(name, case))


# ---- ScopeBuilder --------------------------------------------------------------------------

def _sb_steps():
    """name: a function doing one thing with a ScopeBuilder (some of them misuses)."""
    one = rl.const(1.0)

    def if_block(sb, cond=rl.const(True), ret=True):
        with sb.if_scope(cond):
            if ret:
                sb.ret(one)

    def else_block(sb, ret=True):
        with sb.else_scope():
            if ret:
                sb.ret(one)

    def raising_inside(sb):
        with sb.if_scope(rl.const(True)):
            raise rl.RelayishError("user code fails inside the scope")

    return {
        "let": lambda sb: sb.let("y", one),
        "let typed": lambda sb: sb.let(("y", F32), one),
        "let str value": lambda sb: sb.let("y", "str"),
        "let None value": lambda sb: sb.let("y", None),
        "let function value": lambda sb: sb.let("y", lambda: 1),
        "let bad dtype": lambda sb: sb.let(("y", "float32"), one),
        "let 1-tuple name": lambda sb: sb.let(("y",), one),
        "let 3-tuple name": lambda sb: sb.let(("y", F32, 3), one),
        "let int name": lambda sb: sb.let(3, one),
        "let var twice": lambda sb: [v := rl.var("z"), sb.let(v, one), sb.let(v, one)],
        "ret": lambda sb: sb.ret(one),
        "ret str": lambda sb: sb.ret("str"),
        "ret None": lambda sb: sb.ret(None),
        "ret list": lambda sb: sb.ret([one, one]),
        "if": if_block,
        "if float cond": lambda sb: if_block(sb, cond=1.0),
        "if None cond": lambda sb: if_block(sb, cond=None),
        "if without ret": lambda sb: if_block(sb, ret=False),
        "else": else_block,
        "else without ret": lambda sb: else_block(sb, ret=False),
        "raise inside if": raising_inside,
        "get": lambda sb: sb.get(),
    }


SB_STEPS = _sb_steps()
# every step alone; pairs and triples of the steps whose order matters
SB_ORDER = ["let", "ret", "if", "else", "get", "if without ret", "raise inside if"]
SB_SEQUENCES = ([(step,) for step in sorted(SB_STEPS)]
                + list(itertools.product(SB_ORDER, repeat=2))
                + [seq for seq in itertools.product(SB_ORDER[:5], repeat=3) if len(set(seq)) == 3])


@pytest.mark.parametrize("steps", SB_SEQUENCES, ids=" ; ".join)
def test_scope_builder_misuse(steps):
    def build():
        sb = rl.ScopeBuilder()
        for step in steps:
            SB_STEPS[step](sb)
        return sb.get()
    relayish_or_usable(f"ScopeBuilder: {' ; '.join(steps)}", build)


# ---- entry points with wrong arguments ----------------------------------------------------

def _square():
    x = rl.var("x", dtype="float64")
    return rl.Function([x], x * x)


def _apply():
    f = rl.var("f", type=rl.FuncType([rl.TensorType((), "float64")],
                                     rl.TensorType((), "float64")))
    x = rl.var("x", dtype="float64")
    return rl.Function([f, x], f(x))


ENTRY_POINTS = {
    "infer_type": lambda w: rl.infer_type(w),
    "astext": lambda w: rl.astext(w),
    "evaluate(w)": lambda w: rl.evaluate(w),
    "evaluate(f, w)": lambda w: rl.evaluate(_square(), w),
    "evaluate(f, 1, w)": lambda w: rl.evaluate(_square(), 1.0, w),
    "compile(w)": lambda w: rl.compile(w),
    "compile(f)(w)": lambda w: rl.compile(_square())(w),
    "compile(f, backend=w)": lambda w: rl.compile(_square(), backend=w),
    "gradient(w)": lambda w: rl.gradient(w),
    "grad(f, argnums=w)": lambda w: rl.grad(_square(), argnums=w),
    "vjp(w)": lambda w: rl.vjp(w),
    "jvp(w)": lambda w: rl.jvp(w),
    "structural_equal(f, w)": lambda w: rl.structural_equal(_square(), w),
    "parse(w)": lambda w: rl.parse(w),
    "Module.from_expr(w)": lambda w: rl.Module.from_expr(w),
    "mod[w] = f": lambda w: rl.Module().__setitem__(w, _square()),
    "mod['main'] = w": lambda w: rl.Module().__setitem__("main", w),
    "evaluate(apply, w, 1)": lambda w: rl.evaluate(_apply(), w, 1.0),
}


@pytest.mark.parametrize("entry, wrong", list(itertools.product(sorted(ENTRY_POINTS), WRONG)))
def test_entry_point_misuse(entry, wrong):
    relayish_or_usable(f"{entry} with w = <{wrong}>",
                       lambda: ENTRY_POINTS[entry](WRONG[wrong](Context())))


BAD_CALLBACKS = {
    "returns a string": lambda x: "str",
    "returns None": lambda x: None,
    "returns a vector": lambda x: np.ones(3),
    "returns float32": lambda x: np.float32(1.0),
    "returns a tuple": lambda x: (x, x),
    "returns a list": lambda x: [1.0],
    "takes no argument": lambda: 1.0,
}


@pytest.mark.parametrize("callback", sorted(BAD_CALLBACKS))
def test_python_callable_results_are_checked(callback):
    """A Python callable where the program expects fn(float64) -> float64: a result of
    another type is a RelayishError, not the program's result."""
    with bounded(f"evaluate(apply, <callable that {callback}>, 1.0)"):
        try:
            out = rl.evaluate(_apply(), BAD_CALLBACKS[callback], np.float64(1.0))
        except rl.RelayishError:
            return
    assert isinstance(out, np.ndarray) and out.dtype == np.float64 and out.shape == (), \
        f"a callable that {callback} gave the program's float64 result {out!r}"


# ---- one wrong field inside a random program -----------------------------------------------

def _edges(root):
    """(parent, field, index, child) for every Expr child of an Expr, without recursion."""
    out, stack, seen = [], [root], set()
    while stack:
        node = stack.pop()
        if id(node) in seen or isinstance(node, (rl.Op, rl.GlobalVar, rl.Constructor)):
            continue
        seen.add(id(node))
        for name in _init_names(type(node)) if attrs.has(type(node)) else []:
            value = getattr(node, name)
            items = enumerate(value) if isinstance(value, list) else [(None, value)]
            for i, child in items:
                if isinstance(child, rl.Expr):
                    out.append((node, name, i, child))
                    stack.append(child)
                elif isinstance(child, rl.Clause):
                    stack.append(child)
    return out


@st.composite
def programs_with_one_wrong_field(draw):
    prog = draw(programs(max_depth=3))
    main = prog.mod["main"]
    edges = [e for e in _edges(main) if attrs.has(type(e[3]))
             and not isinstance(e[3], (rl.Op, rl.GlobalVar, rl.Constructor))]
    parent, name, i, child = draw(st.sampled_from(edges))
    fields = _init_names(type(child))
    field = draw(st.sampled_from(fields))
    wrong = draw(st.sampled_from(sorted(WRONG)))
    return prog, parent, name, i, child, field, wrong


@fuzz_settings("builder_nested_misuse")
@given(programs_with_one_wrong_field())
def test_one_wrong_field_in_a_random_program(case):
    """Rebuild one node of a random program with one wrong field: the constructor refuses it
    with a RelayishError, or the program holding it prints, type-checks and runs or raises
    RelayishErrors."""
    prog, parent, name, i, child, field, wrong = case
    mod, cls = prog.mod, type(child)

    def rebuild():
        kwargs = {a: getattr(child, a) for a in _init_names(cls)}
        kwargs[field] = WRONG[wrong](Context())
        node = cls(**kwargs)
        if i is None:
            setattr(parent, name, node)
        else:
            getattr(parent, name)[i] = node
        return mod

    with bounded(f"{cls.__name__}({field}=<{wrong}>) in {rl.astext(mod['main'])}"):
        try:
            rebuilt = rebuild()
        except rl.RelayishError:
            return
        try:
            rl.astext(rebuilt)
            checked = rl.infer_type(rebuilt)
        except rl.RelayishError:
            return
        try:
            rl.evaluate(checked, *prog.args)
        except rl.RelayishError:
            pass
