"""Misusing the Python builder API gives a RelayishError that says what was meant, never a bare
Python exception, a memory address, a silent wrong program or a runaway loop (issues 9 and 10)."""
import warnings

import numpy as np
import pytest

import relayish as rl


def f64(name="x", shape=(3,)):
    return rl.var(name, shape=shape, dtype="float64")


def error_of(build) -> str:
    with pytest.raises(rl.RelayishError) as info:
        build()
    text = str(info.value)
    assert "0x" not in text and "object at" not in text, text
    return text


# ---- node fields are checked when the node is built -------------------------------------------

X = f64()
LIST = rl.GlobalTypeVar("L")
CTOR = rl.Constructor("K", [], LIST)
rl.TypeData(LIST, [], [CTOR])

MALFORMED = [
    # (builder, words the message must hold)
    (lambda: rl.Function([1], X), ["rl.Function", "parameters", "list of Vars", "item 0 is 1"]),
    (lambda: rl.Function([1.0], X), ["rl.Function", "parameters", "item 0 is 1.0"]),
    (lambda: rl.Function("x", X), ["rl.Function", "parameters must be a list of Vars", "'x'"]),
    (lambda: rl.Function(X, X), ["parameters must be a list of Vars", "the expression %x",
                                 "[%x]"]),
    (lambda: rl.Function([X], None), ["rl.Function", "body must be an expression", "None"]),
    (lambda: rl.Function([X], X, "float32"), ["rl.Function", "ret_type", "Type"]),
    (lambda: rl.Function([X], X, None, ["a"]), ["rl.Function", "type parameters", "TypeVars"]),
    (lambda: rl.Let(1, X, X), ["rl.Let", "var must be a Var", "1 (an int)"]),
    (lambda: rl.Let("v", X, X), ["rl.Let", "var must be a Var", "'v'"]),
    (lambda: rl.Let(rl.Var("v", "int"), X, X), ["rl.Var", "type_annotation", "Type"]),
    (lambda: rl.Tuple(None), ["rl.Tuple", "fields must be a list of expressions", "None"]),
    (lambda: rl.Tuple(X), ["rl.Tuple", "fields", "[%x]"]),
    (lambda: rl.Tuple([X, None]), ["rl.Tuple", "item 1 is None"]),
    (lambda: rl.Tuple([X, "a"]), ["rl.Tuple", "item 1 is 'a'"]),
    (lambda: rl.Call(X, 3), ["rl.Call", "args must be a list of expressions", "3"]),
    (lambda: rl.Call(rl.GlobalVar("f"), X), ["rl.Call", "args", "[%x]"]),
    (lambda: rl.Call(3, [X]), ["rl.Call", "called value", "3"]),
    (lambda: rl.TupleGetItem(X, "0"), ["rl.TupleGetItem", "index must be an int"]),
    (lambda: rl.TupleGetItem(X, True), ["rl.TupleGetItem", "index must be an int"]),
    (lambda: rl.If(True, X, X), ["rl.If", "cond must be an expression"]),
    (lambda: rl.PatternVar("a"), ["rl.PatternVar", "var must be a Var", "'a'"]),
    (lambda: rl.PatternConstructor("K", []), ["rl.PatternConstructor", "Constructor"]),
    (lambda: rl.PatternTuple([X]), ["rl.PatternTuple", "patterns", "item 0"]),
    (lambda: rl.Clause(X, X), ["rl.Clause", "pattern"]),
    (lambda: rl.Match(X, [rl.PatternWildcard()]), ["rl.Match", "Clauses", "item 0"]),
    (lambda: rl.RefWrite(X, None), ["rl.RefWrite", "value must be an expression"]),
    (lambda: rl.Constant(2.0), ["rl.Constant", "numpy array", "rl.const"]),
    (lambda: rl.Var(3), ["rl.Var", "name", "str"]),
    (lambda: rl.Constructor("K", [1], LIST), ["rl.Constructor", "Types", "item 0"]),
    (lambda: rl.TupleType([1]), ["rl.TupleType", "item 0 is 1"]),
    (lambda: rl.FuncType([X], X), ["rl.FuncType", "arg_types", "Types"]),
    (lambda: rl.RefType(None), ["rl.RefType", "Type"]),
    (lambda: rl.TypeCall("List", []), ["rl.TypeCall", "GlobalTypeVar"]),
    (lambda: rl.TypeData(LIST, ["a"], [CTOR]), ["rl.TypeData", "TypeVars"]),
]


@pytest.mark.parametrize("build, words", MALFORMED)
def test_a_malformed_node_is_refused_when_built(build, words):
    text = error_of(build)
    for word in words:
        assert word in text, (word, text)


def test_fields_are_checked_in_any_container_but_a_wrong_one_is_an_error():
    x = f64()
    assert rl.Tuple((x, x)).fields == [x, x]
    assert rl.Tuple(f for f in [x, x]).fields == [x, x]
    assert rl.Function((x,), x).params == [x]
    for wrong in ({x}, {"a": x}, np.array([1.0, 2.0]), "xy"):
        error_of(lambda: rl.Tuple(wrong))


def test_python_numbers_in_call_arguments_and_tuple_fields_become_constants():
    x = f64()
    # tuple fields have no operand to take a dtype from: rl.const's defaults
    t = rl.Tuple([x, 2.0, [1, 2, 3]])
    assert [f.data.dtype for f in t.fields[1:]] == [np.float32, np.int32]
    assert rl.typeof(rl.Function([x], t)).ret_type == rl.TupleType(
        [x.type_annotation, rl.TensorType((), "float32"), rl.TensorType((3,), "int32")])
    # arguments take the dtype the callee declares for their parameter, when it is evident
    s = rl.var("s", dtype="float64")
    f = rl.Var("f", rl.FuncType([x.type_annotation, s.type_annotation], x.type_annotation))
    call = rl.Call(f, [x, 3])
    assert isinstance(call.args[1], rl.Constant) and call.args[1].data.dtype == np.float64
    func = rl.Function([x, s], x * s)
    np.testing.assert_allclose(rl.evaluate(rl.Function([x], rl.Call(func, [x, 2.0])),
                                           np.ones(3)), [2.0, 2.0, 2.0])
    assert rl.Call(rl.GlobalVar("g"), [1.5]).args[0].data.dtype == np.float32   # unknown callee


def test_typecheck_and_printing_of_a_valid_program_stay_as_they_were():
    x = f64()
    v = rl.var("v", dtype="float64")
    func = rl.Function([x], rl.Let(v, rl.sum(x), v * 2.0))
    assert rl.astext(func).startswith("fn (%x: Tensor[(3), float64])")
    np.testing.assert_allclose(rl.evaluate(func, np.arange(3.0)), 6.0)


# ---- names: what the text format prints must read back ---------------------------------------

@pytest.mark.parametrize("name", ["C D", "fn", "True", "False", "let", "if", "match", "type",
                                  "1C", "", "ref"])
def test_constructor_names_must_be_identifiers_the_text_format_reads_back(name):
    text = error_of(lambda: rl.Constructor(name, [], LIST))
    assert "rl.Constructor" in text and repr(name) in text


@pytest.mark.parametrize("name", ["float32", "int64", "bool", "fn", "A B"])
def test_adt_names_must_not_read_back_as_something_else(name):
    assert "rl.GlobalTypeVar" in error_of(lambda: rl.GlobalTypeVar(name))


def test_type_variables_named_like_dtypes_are_built():
    # the printer renames them (another constraint would break parsed programs)
    assert rl.TypeVar("float32").name == "float32"


@pytest.mark.parametrize("name", ["a b", "fn", "True", "1x"])
def test_any_global_name_round_trips_through_the_text_format(name):
    mod = rl.Module()
    x, y = rl.var("x"), rl.var("y")
    mod[name] = rl.Function([x], x)
    mod["main"] = rl.Function([y], rl.GlobalVar(name)(y))
    rl.assert_structural_equal(rl.parse(rl.astext(mod)), mod)


def test_a_repeated_parameter_is_an_error_naming_it():
    x, y = f64(), f64("y")
    text = error_of(lambda: rl.Function([x, y, x], x))
    assert "%x" in text and "twice" in text


# ---- expressions are not sequences and have no truth value -------------------------------------

@pytest.mark.parametrize("misuse", [
    lambda x: list(x), lambda x: tuple(x), lambda x: [*x], lambda x: iter(x),
    lambda x: rl.Tuple(x), lambda x: 1 in x, lambda x: x in x,
    lambda x: (lambda a, b: a)(*x), lambda x: dict(x),
])
def test_expressions_are_not_iterable(misuse):
    # before: iteration called x[0], x[1], ... without end, building nodes until memory ran out
    text = error_of(lambda: misuse(f64()))
    assert "rl.Tuple" in text or "not a container" in text


@pytest.mark.parametrize("index", ["a", 1.0, slice(0, 2), True, None, (0, 1)])
def test_projection_takes_one_int(index):
    text = error_of(lambda: f64()[index])
    assert "takes one int" in text and "rl.take" in text


def test_projection_with_numpy_ints():
    t = rl.Tuple([f64(), f64("y")])
    assert t[np.int64(1)].index == 1 and type(t[np.int64(1)].index) is int


@pytest.mark.parametrize("misuse", [
    lambda x, y: bool(x < y), lambda x, y: (x < y) and y, lambda x, y: not x,
    lambda x, y: 1 if x > y else 0, lambda x, y: x or y,
])
def test_expressions_have_no_truth_value(misuse):
    text = error_of(lambda: misuse(f64(), f64("y")))
    assert "rl.If" in text and "rl.where" in text


def test_identity_is_is_and_hash():
    x = f64()
    assert x is x and x is not f64() and x in [x] and len({x, f64()}) == 2


# ---- numpy defers to relayish -------------------------------------------------------------------

@pytest.mark.parametrize("left", [np.ones(3), np.float64(2.0), np.ones((2, 3))])
def test_numpy_operands_build_the_relayish_op(left):
    x = f64()
    for op, name in [(lambda a, b: a + b, "add"), (lambda a, b: a * b, "multiply"),
                     (lambda a, b: a - b, "subtract"), (lambda a, b: a / b, "divide"),
                     (lambda a, b: a < b, "greater")]:
        call = op(left, x)
        assert isinstance(call, rl.Call) and call.op.name == name, (name, call)
        assert call.args[1 if name != "greater" else 0] is x


def test_numpy_adds_to_an_expression_and_runs():
    x = f64()
    np.testing.assert_allclose(rl.evaluate(rl.Function([x], np.ones(3) + x), np.arange(3.0)),
                               [1.0, 2.0, 3.0])


def test_an_expression_is_not_an_array():
    assert "no value until the program runs" in error_of(lambda: np.asarray(f64()))


# ---- Python lists adapt like Python scalars; dtype hints follow a let-chain ----------------------

def test_python_lists_take_the_dtype_of_the_other_operand():
    x = f64()
    for expr in (x + [1.0, 2.0, 3.0], [1.0, 2.0, 3.0] * x, x - [1, 2, 3]):
        const = next(a for a in expr.args if isinstance(a, rl.Constant))
        assert const.data.dtype == np.float64, expr
    func = rl.Function([x], x + [1.0, 2.0, 3.0])
    np.testing.assert_allclose(rl.evaluate(func, np.zeros(3)), [1.0, 2.0, 3.0])
    # numpy arrays keep the dtype they have (the user chose it), as numpy scalars do
    assert (x + np.ones(3, "float32")).args[1].data.dtype == np.float32
    # without another operand a Python list is float32/int32 like a Python scalar
    assert rl.const([1.0, 2.0]).data.dtype == np.float32


def test_an_int_list_with_a_float_hint_and_a_float_list_with_an_int_hint():
    i = rl.var("i", shape=(2,), dtype="int64")
    assert (i + [1, 2]).args[1].data.dtype == np.int64
    assert (i + [1.5, 2.0]).args[1].data.dtype == np.float32   # no silent truncation: a type error


def test_dtype_hints_follow_a_long_let_chain():
    # before: the hint gave up after eight hops and `y * 0.9` became a float32 constant
    x = rl.var("x", dtype="float64")
    sb = rl.ScopeBuilder()
    y = x
    for k in range(20):
        y = sb.let(f"y{k}", rl.tanh(y) + 1.0)
    sb.ret(y * 0.9)
    func = rl.Function([x], sb.get())
    assert rl.typeof(func).ret_type == rl.TensorType((), "float64")


def test_dtype_hints_stay_cheap_on_a_builder_chain_of_ten_thousand():
    x = rl.var("x", dtype="float64")
    sb = rl.ScopeBuilder()
    y = x
    for k in range(10_000):       # quadratic without the memo: ~5 * 10^7 hops
        y = sb.let("y", y * 1.0001)
    assert (y * 2.0).args[1].data.dtype == np.float64


def test_a_var_bound_to_itself_does_not_loop():
    v = rl.Var("v")
    sb = rl.ScopeBuilder()
    sb.let(v, v * 2.0)
    assert (v * 1.0).args[1].data.dtype == np.float32       # nothing known: the default


# ---- constants -----------------------------------------------------------------------------------

def test_a_string_is_not_a_value():
    text = error_of(lambda: rl.ScopeBuilder().let("y", "str"))
    assert "sb.let('y'" in text and "string" in text and "str224" not in text


def test_ragged_lists_are_relayish_errors():
    assert "different lengths" in error_of(lambda: rl.const([[1, 2], [3]]))


@pytest.mark.parametrize("build, dtype", [
    (lambda: rl.const(2**70), "int32"),
    (lambda: rl.const(2**40), "int32"),
    (lambda: rl.const([1, 2**40]), "int32"),
    (lambda: rl.const([1, 2**70]), "int32"),
    (lambda: rl.var("i", dtype="int32") + 2**40, "int32"),
    (lambda: rl.const(-1, "uint8"), "uint8"),
])
def test_an_int_that_does_not_fit_its_dtype(build, dtype):
    text = error_of(build)
    assert "does not fit in " + dtype in text


def test_a_list_of_expressions_is_not_a_constant():
    assert "rl.Tuple" in error_of(lambda: rl.const([f64(), 1.0]))


@pytest.mark.parametrize("value", [None, {"a": 1}, object(), [object()]])
def test_other_values_are_not_constants(value):
    assert "not a constant" in error_of(lambda: rl.const(value))


# ---- float faults: IEEE results without numpy warnings -------------------------------------------

@pytest.mark.parametrize("backend", ["interpreter", "jax"])
def test_float_faults_give_ieee_values_without_warnings(backend):
    x = rl.var("x", dtype="float64")
    cases = [(rl.log(x), -1.0, np.nan), (rl.log(x), 0.0, -np.inf), (rl.sqrt(x), -1.0, np.nan),
             (rl.exp(x), 1000.0, np.inf), (x / x, 0.0, np.nan), (x * 1e300, 1e300, np.inf),
             (rl.log(rl.const(-1.0, "float64")) + x, 0.0, np.nan)]   # a constant-folded one
    func = rl.Function([x], rl.Tuple([c[0] for c in cases]))
    args = np.array([c[1] for c in cases])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run = (lambda a: rl.evaluate(func, a)) if backend == "interpreter" else rl.compile(
            func, backend="jax")
        got = [run(a)[k] for k, a in enumerate(args)]
    for value, (_, _, expected) in zip(got, cases):
        np.testing.assert_equal(np.asarray(value, dtype="float64"), expected)


@pytest.mark.parametrize("misuse", [float, int, len, complex, lambda x: range(x),
                                    lambda x: [1, 2][x]])
def test_an_expression_has_no_python_value(misuse):
    assert "rl.evaluate" in error_of(lambda: misuse(f64("x", ())))


def test_call_attributes_are_an_operators_own():
    x = f64()
    add, total = rl.get_op("add"), rl.get_op("sum")
    assert "has no attribute(s) k" in error_of(lambda: rl.Call(add, [x, x], {"k": 1}))
    assert "takes none" in error_of(lambda: rl.Call(rl.GlobalVar("f"), [x], {"axis": 0}))
    assert "attrs must be a dict" in error_of(lambda: rl.Call(add, [x, x], 3))
    call = rl.Call(total, [x])            # the defaults filled in, as rl.sum(x) has them
    assert call.attrs == rl.sum(x).attrs
    assert rl.astext(call) == rl.astext(rl.sum(x))


def test_malformed_type_definitions_and_dtypes():
    assert "type_vars must be a list" in error_of(lambda: rl.TypeData(LIST, 3, []))
    assert "constructors must be a list" in error_of(lambda: rl.TypeData(LIST, [], None))
    assert "unknown dtype" in error_of(lambda: rl.TensorType((), rl.TensorType((), "float32")))
    for name in (("y",), ("y", rl.TensorType(), 1)):
        assert "takes a pair" in error_of(lambda: rl.ScopeBuilder().let(name, 1.0))
