"""The runtime the backends share (relayish/backend/runtime/): type checking once, texts for
errors, argument checking and conversion, pattern and let binding."""
import numpy as np
import pytest

import relayish as rl
from relayish.backend.runtime import args as rt_args
from relayish.backend.runtime import bindings, check, describe
from relayish.ir import typecheck
from relayish.ir.analysis import FreeVars
from relayish.ir.visitor import build_let_chain
from strategies import deep, f32, list_module


def f64(name, shape=()):
    return rl.var(name, shape=shape, dtype="float64")


# ---- check.checked -----------------------------------------------------------------------------

def test_checked_types_a_function_once_and_returns_it():
    x = f64("x", (2,))
    f = rl.Function([x], x * x)
    mod, main = check.checked(f)
    assert mod is None and main is f
    assert main.checked_type == rl.FuncType([x.type_annotation], x.type_annotation)


def test_checked_does_not_check_a_checked_program_again(monkeypatch):
    x = f64("x")
    f = rl.infer_type(rl.Function([x], x + x))
    calls = []
    monkeypatch.setattr(typecheck, "infer_type", lambda *a, **k: calls.append(a))
    check.checked(f)
    mod = rl.infer_type(rl.Module.from_expr(rl.Function([f64("y")], rl.const(1.0, "float64"))))
    check.checked(mod)
    assert calls == []


def test_checked_checks_a_module_with_a_new_function_again():
    mod = rl.infer_type(rl.Module.from_expr(rl.Function([f64("y")], rl.const(1.0, "float64"))))
    g = rl.GlobalVar("g")
    z = f64("z")
    mod[g] = rl.Function([z], z * z)
    out, main = check.checked(mod)
    assert out is mod and main is mod["main"]
    assert mod[g].checked_type is not None


_SCALAR_G = """def @g(%y: float32) -> float32 { %y * 2f }
def @main(%x: float32) -> float32 { @g(%x) }"""
_VECTOR_G = """def @g(%y: Tensor[(2), float32]) -> Tensor[(2), float32] { %y * 2f }
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] { @g(%x) }"""


def test_a_function_checked_under_one_module_is_checked_under_another(monkeypatch):
    """@g has another type in m2: `f` checked under m1 ran under m2 (6.0, an ill-typed
    program) before the rule was keyed on the module."""
    m1, m2 = rl.parse(_SCALAR_G), rl.parse(_VECTOR_G)
    x = rl.var("x", dtype="float32")
    f = rl.Function([x], rl.Call(m1.get_global_var("g"), [x]))
    assert rl.evaluate(f, np.float32(3), mod=m1) == 6.0
    with pytest.raises(rl.TypeCheckError, match=r"argument 1 of @g\(%x\)"):
        rl.evaluate(f, np.float32(3), mod=m2)
    with pytest.raises(rl.TypeCheckError, match="g"):      # no module: no @g at all
        rl.evaluate(f, np.float32(3))
    calls = []
    real = typecheck.infer_type
    monkeypatch.setattr(typecheck, "infer_type", lambda *a, **k: calls.append(a) or real(*a, **k))
    assert rl.evaluate(f, np.float32(3), mod=m1) == 6.0     # checked under m1 before: found
    assert calls == []
    m1["h"] = rl.Function([rl.var("z")], rl.const(1.0))      # the module changed: checked again
    assert rl.evaluate(f, np.float32(3), mod=m1) == 6.0
    assert rl.evaluate(f, np.float32(3), mod=m1) == 6.0
    assert len(calls) == 1


@pytest.mark.parametrize("backend", ["interpreter", "jax"])
def test_a_module_of_functions_checked_elsewhere_is_checked(backend):
    m1, m2 = rl.parse(_SCALAR_G), rl.parse(_VECTOR_G)
    run = (lambda m, *a: rl.evaluate(m, *a)) if backend == "interpreter" else \
        (lambda m, *a: rl.compile(m)(*a))
    assert float(run(m1, np.float32(3))) == 6.0
    run(m2, np.ones(2, np.float32))
    mixed = rl.Module({"main": m1["main"], "g": m2["g"]})     # each function checked, apart
    with pytest.raises(rl.TypeCheckError, match=r"argument 1 of @g\(%x\)"):
        run(mixed, np.float32(3))
    m1["g"] = m2["g"]                                          # replaced in place
    with pytest.raises(rl.TypeCheckError, match=r"argument 1 of @g\(%x\)"):
        run(m1, np.float32(3))


def test_checked_wraps_an_expression_in_a_function():
    e = rl.const(2.0) + rl.const(3.0)
    mod, main = check.checked(e)
    assert isinstance(main, rl.Function) and main.params == [] and main.body is e
    assert e.checked_type == rl.TensorType((), "float32")


def test_type_errors_propagate():
    x = f64("x")
    with pytest.raises(rl.TypeCheckError):
        check.checked(rl.Function([x], x + rl.const(1.0, "float32")))


def test_a_type_checker_fault_surfaces_and_is_not_swallowed(monkeypatch):
    # the interpreter used to fall back to the parameters' annotations on any non-type error
    def broken(self, *args):
        raise ZeroDivisionError("a bug in the type checker")
    monkeypatch.setattr(typecheck.TypeChecker, "finish", broken)
    x = f64("x")
    with pytest.raises(ZeroDivisionError, match="a bug in the type checker"):
        check.checked(rl.Function([x], x))
    with pytest.raises(ZeroDivisionError):
        rl.evaluate(rl.Function([f64("y")], rl.const(1.0, "float64")), 1.0)


def test_checked_rejects_what_is_not_a_program():
    with pytest.raises(rl.RelayishError, match="evaluate takes a Function, Module or expression, "
                                               "got int"):
        check.checked(3)
    with pytest.raises(rl.RelayishError, match="mod= must be a Module"):
        check.checked(rl.Function([], rl.const(1.0)), mod="m")
    with pytest.raises(rl.CompileError, match="no @main"):
        check.checked(rl.Module(), error=rl.CompileError)


# ---- describe ----------------------------------------------------------------------------------

class _JaxLike:
    shape = (2, 3)
    dtype = np.dtype("float32")


class _BadRepr:
    def __repr__(self):
        raise ValueError("no repr")


def test_value_descriptions():
    mod, _, cons, nil = list_module()
    vt = describe.value_type_text
    assert vt(np.zeros((2,), "float64")) == "Tensor[(2), float64]"
    assert vt(_JaxLike()) == "Tensor[(2, 3), float32]"
    assert vt(np.float32(1)) == "numpy scalar float32"
    assert vt((1, 2)) == "a tuple of 2 field(s)"
    assert vt(rl.ConstructorValue(nil, [])) == "a value of constructor Nil"
    assert vt(rl.RefValue(1)) == "a reference"
    assert vt("hi") == "str 'hi'"
    assert vt(np.zeros(2, "complex64")).startswith("an array of shape (2,)")
    assert describe.short(_BadRepr()) == "<_BadRepr>"
    assert describe.short("x" * 100).endswith("...") and len(describe.short("x" * 100)) == 60


def test_node_text_is_one_shortened_line():
    x = f64("x")
    e = x
    for _ in range(100):
        e = e + rl.const(1.0, "float64")
    text = describe.node_text(e, limit=50)
    assert len(text) == 50 and text.endswith("...") and "\n" not in text
    assert describe.type_text(rl.TensorType((2,), "float32")) == "Tensor[(2), float32]"


# ---- args --------------------------------------------------------------------------------------

def _params(*params):
    rl.infer_type(rl.Function(list(params), rl.Tuple(list(params))))
    return rt_args.Parameters("@f", params, rt_args.ValueChecker())


def test_arguments_pass_through_or_convert():
    a = np.ones(3, "float64")
    p = _params(f64("x", (3,)), rl.var("n", dtype="int32"))
    out = p.convert([a, 7])
    assert out[0] is a
    assert out[1].dtype == np.int32 and out[1].shape == () and out[1] == 7


@pytest.mark.parametrize("value, message", [
    (np.ones(2, "float64"), r"parameter %x of @f: expected Tensor\[\(3\), float64\], got "
                            r"Tensor\[\(2\), float64\]"),
    ([1.0, [2.0]], "not a rectangular array"),
    ("abc", "got str 'abc'"),
])
def test_argument_errors_name_the_parameter(value, message):
    p = _params(f64("x", (3,)))
    with pytest.raises(rl.EvaluationError, match=message):
        p.convert([value])


def test_integer_arguments_are_range_checked_and_floats_rejected():
    p = _params(rl.var("n", dtype="int8"))
    with pytest.raises(rl.EvaluationError, match="out of range for int8"):
        p.convert([300])
    with pytest.raises(rl.EvaluationError, match="does not convert to int8 exactly"):
        p.convert([1.5])


def test_arity_errors_list_the_parameters():
    p = _params(f64("x"), f64("y"))
    with pytest.raises(rl.EvaluationError, match=r"@f takes 2 argument\(s\) \(%x, %y\), got 1"):
        p.convert([1.0])


def test_the_path_inside_an_argument_is_named():
    mod, lst, cons, nil = list_module()
    t = rl.TypeCall(lst, [rl.TupleType([rl.TensorType((), "float64")] * 2)])
    checker = rt_args.ValueChecker()
    good = (np.float64(1.0), 2.0)
    bad = rl.ConstructorValue(cons, [good, rl.ConstructorValue(cons, [(1.0, "no"),
                                                                     rl.ConstructorValue(nil, [])])])
    with pytest.raises(rl.EvaluationError, match=r"bad argument for parameter %l of @g \(field 1 "
                                                 r"of field 0 of Cons of field 1 of Cons\): "
                                                 r"expected float64, got str 'no'"):
        checker.to_value(bad, t, "parameter %l of @g")


@pytest.mark.parametrize("n", deep(20_000, 200_000))
def test_long_lists_are_checked_and_converted_without_recursion(n):
    mod, lst, cons, nil = list_module()
    t = rl.TypeCall(lst, [rl.TensorType((), "float64")])
    exact = rl.ConstructorValue(nil, [])
    loose = rl.ConstructorValue(nil, [])
    for i in range(n):
        exact = rl.ConstructorValue(cons, [np.array(float(i)), exact])
        loose = rl.ConstructorValue(cons, [float(i), loose])
    checker = rt_args.ValueChecker()
    assert checker.conforms(exact, t)
    assert not checker.conforms(loose, t)
    out = checker.to_value(loose, t, "parameter %l of @g")
    assert rl.from_list_value(out)[-1].dtype == np.float64 and len(rl.from_list_value(out)) == n


def test_reference_contents_are_converted_in_place():
    ref = rl.RefValue([1, 2])
    t = rl.RefType(rl.TensorType((2,), "float32"))
    out = rt_args.ValueChecker().to_value(ref, t, "parameter %r of @g")
    assert out is ref and ref.value.dtype == np.float32


def test_function_arguments_go_through_the_backend_hook():
    t = rl.FuncType([rl.TensorType((), "float32")], rl.TensorType((), "float32"))
    with pytest.raises(rl.EvaluationError, match="this backend takes no function arguments"):
        rt_args.ValueChecker().to_value(abs, t, "parameter %f of @g")
    seen = []

    def convert(checker, v, ftype, where, fail):
        seen.append(where)
        return ("wrapped", v)
    checker = rt_args.ValueChecker(function_conforms=lambda v, ft: v is abs,
                                   convert_function=convert)
    assert checker.conforms(abs, t) and not checker.conforms(len, t)
    assert checker.to_value((len,), rl.TupleType([t]), "parameter %p of @g") == (("wrapped", len),)
    assert seen == ["field 0 of parameter %p of @g"]


# ---- bindings ----------------------------------------------------------------------------------

def test_compiled_patterns_and_bind_pattern_agree():
    mod, lst, cons, nil = list_module()
    h, t2 = rl.var("h"), rl.var("t2")
    pattern = rl.PatternConstructor(cons, [rl.PatternTuple([rl.PatternVar(h), rl.PatternWildcard()]),
                                           rl.PatternConstructor(cons, [rl.PatternWildcard(),
                                                                        rl.PatternVar(t2)])])
    one = rl.ConstructorValue(nil, [])
    two = rl.ConstructorValue(cons, [("a", "b"), rl.ConstructorValue(cons, [("c", "d"), one])])
    slots = {}
    matcher = bindings.compile_pattern(pattern, lambda var: var.name_hint)
    assert matcher(two, slots) and slots == {"h": "a", "t2": one}
    out = {}
    assert bindings.bind_pattern(pattern, two, out) and out == {h: "a", t2: one}
    short = rl.ConstructorValue(cons, [("a", "b"), one])
    assert not matcher(short, {}) and not bindings.bind_pattern(pattern, short, {})
    assert bindings.compile_pattern(rl.PatternWildcard(), None) is None


def test_constructors_match_by_name_and_tag_across_copies():
    _, _, cons, nil = list_module()
    _, _, cons2, nil2 = list_module()
    assert bindings.same_constructor(cons2, cons) and not bindings.same_constructor(nil, cons)
    assert bindings.bind_pattern(rl.PatternConstructor(nil, []), rl.ConstructorValue(nil2, []), {})


def test_bind_pattern_resolves_values_and_reports_structure_mismatches():
    x = rl.var("x")
    pattern = rl.PatternTuple([rl.PatternVar(x)])
    out = {}
    assert bindings.bind_pattern(pattern, "box", out, resolve=lambda v: (1,) if v == "box" else v)
    assert out == {x: 1}
    with pytest.raises(rl.EvaluationError, match="tuple pattern"):
        bindings.bind_pattern(pattern, 3, {})


@pytest.mark.parametrize("n", deep(20_000, 100_000))
def test_let_chain_is_a_loop(n):
    x = f32("x")
    chain = [(rl.Var(f"t{i}"), x) for i in range(n)]
    pairs, body = bindings.let_chain(build_let_chain(chain, x))
    assert len(pairs) == n and body is x and pairs[0][0] is chain[0][0]


def test_recursive_bindings():
    f, y = rl.Var("f"), f32("y")
    loop = rl.Function([y], rl.Call(f, [y]))
    free = FreeVars()
    assert bindings.is_recursive(f, loop, free)
    assert not bindings.is_recursive(rl.Var("g"), loop, free)
    assert not bindings.is_recursive(f, y, free)
