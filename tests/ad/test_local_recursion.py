"""AD of recursive local closures: `let %f = fn (..) { .. %f(..) .. }` (issue 10, item 9).

The language has one form of local recursion: a let whose value is a function may call its own
binder (the type checker and both backends read it as letrec). A let binds one variable, so
mutual recursion between two local functions is written by nesting: the inner recursive closure
calls the outer one (PROGRAMS["nested"]).

Each program is checked, in reverse mode (grad, grad of grad, hessian) and forward mode (jvp,
hvp), against central finite differences and against the same function written with globals.
"""
import numpy as np
import pytest

import relayish as rl

from adcheck import assert_values_close, check_fd

VEC = "Tensor[(3), float64]"

# name -> (local recursion, the same function with globals)
PROGRAMS = {
    # a counter with `if`; the closure captures %x
    "counter": (f"""
def @main(%x: {VEC}) -> float64 {{
  let %f = fn (%n: int32, %acc: {VEC}) -> {VEC} {{
    if (%n > 0) {{ %f(%n - 1, sin(%acc) * %x + %acc) }} else {{ %acc }}
  }};
  sum(%f(3, %x) * %x)
}}
""", f"""
def @f(%x: {VEC}, %n: int32, %acc: {VEC}) -> {VEC} {{
  if (%n > 0) {{ @f(%x, %n - 1, sin(%acc) * %x + %acc) }} else {{ %acc }}
}}
def @main(%x: {VEC}) -> float64 {{ sum(@f(%x, 3, %x) * %x) }}
"""),
    # recursion over a Nat, as in the prelude's nat_iterate
    "nat": (f"""
type Nat {{ Z, S(Nat) }}
def @main(%x: {VEC}) -> float64 {{
  let %g = fn (%n: Nat, %acc: {VEC}) -> {VEC} {{
    match (%n) {{ S(%m) => %g(%m, tanh(%acc * %x) + %x), Z => %acc }}
  }};
  sum(%g(S(S(S(Z))), %x) * %x)
}}
""", f"""
type Nat {{ Z, S(Nat) }}
def @g(%x: {VEC}, %n: Nat, %acc: {VEC}) -> {VEC} {{
  match (%n) {{ S(%m) => @g(%x, %m, tanh(%acc * %x) + %x), Z => %acc }}
}}
def @main(%x: {VEC}) -> float64 {{ sum(@g(%x, S(S(S(Z))), %x) * %x) }}
"""),
    # a fold over a List of the input's elements, with a float accumulator
    "list": (f"""
type List[a] {{ Cons(a, List[a]), Nil }}
def @main(%x: {VEC}) -> float64 {{
  let %xs = Cons(take(%x, 0), Cons(take(%x, 1), Cons(take(%x, 2), Nil)));
  let %fold = fn (%l: List[float64], %acc: float64) -> float64 {{
    match (%l) {{
      Cons(%h, %t) => %fold(%t, %acc * cos(%h) + %h * %h * take(%x, 1)),
      Nil => %acc,
    }}
  }};
  %fold(%xs, 1f64)
}}
""", f"""
type List[a] {{ Cons(a, List[a]), Nil }}
def @fold(%x: {VEC}, %l: List[float64], %acc: float64) -> float64 {{
  match (%l) {{
    Cons(%h, %t) => @fold(%x, %t, %acc * cos(%h) + %h * %h * take(%x, 1)),
    Nil => %acc,
  }}
}}
def @main(%x: {VEC}) -> float64 {{
  let %xs = Cons(take(%x, 0), Cons(take(%x, 1), Cons(take(%x, 2), Nil)));
  @fold(%x, %xs, 1f64)
}}
"""),
    # nested local recursion: the inner recursive closure calls the outer one (mutual recursion)
    "nested": ("""
def @main(%x: Tensor[(3), float64]) -> float64 {
  let %f = fn (%n: int32, %a: float64) -> float64 {
    let %g = fn (%m: int32, %b: float64) -> float64 {
      if (%m > 0) { %g(%m - 1, %b * %a + sin(%b)) }
      else { if (%n > 0) { %f(%n - 1, %b * take(%x, 2)) } else { %b } }
    };
    %g(2, %a)
  };
  %f(2, take(%x, 0)) + %f(1, take(%x, 1))
}
""", """
def @g(%x: Tensor[(3), float64], %n: int32, %a: float64, %m: int32, %b: float64) -> float64 {
  if (%m > 0) { @g(%x, %n, %a, %m - 1, %b * %a + sin(%b)) }
  else { if (%n > 0) { @f(%x, %n - 1, %b * take(%x, 2)) } else { %b } }
}
def @f(%x: Tensor[(3), float64], %n: int32, %a: float64) -> float64 { @g(%x, %n, %a, 2, %a) }
def @main(%x: Tensor[(3), float64]) -> float64 { @f(%x, 2, take(%x, 0)) + @f(%x, 1, take(%x, 1)) }
"""),
    # the recursive closure escapes: it is passed to another closure that calls it
    "higher_order": (f"""
def @main(%x: {VEC}) -> float64 {{
  let %p = fn (%n: int32, %y: float64) -> float64 {{
    if (%n > 0) {{ %p(%n - 1, %y * %y * 0.5f64 + take(%x, 1)) }} else {{ %y }}
  }};
  let %twice = fn (%h: fn (int32, float64) -> float64, %y: float64) -> float64 {{
    %h(2, %h(1, %y))
  }};
  %twice(%p, take(%x, 0)) * take(%x, 2)
}}
""", f"""
def @p(%x: {VEC}, %n: int32, %y: float64) -> float64 {{
  if (%n > 0) {{ @p(%x, %n - 1, %y * %y * 0.5f64 + take(%x, 1)) }} else {{ %y }}
}}
def @main(%x: {VEC}) -> float64 {{ @p(%x, 2, @p(%x, 1, take(%x, 0))) * take(%x, 2) }}
"""),
}

X = np.array([0.3, -0.5, 0.9])
V = np.array([0.7, 0.2, -1.1])


@pytest.fixture(params=sorted(PROGRAMS))
def pair(request):
    local, globl = PROGRAMS[request.param]
    return rl.parse(local), rl.parse(globl)


def fd_gradient(f, x, eps=1e-6):
    """Central differences of the scalar function f (a Python callable) at x."""
    return np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(len(x))])


def test_same_function_as_the_global_version(pair):
    local, globl = pair
    assert float(rl.evaluate(local, X)) == pytest.approx(float(rl.evaluate(globl, X)), rel=1e-14)


def test_grad_against_finite_differences_and_globals(pair):
    local, globl = pair
    g = rl.evaluate(rl.grad(local), X)
    np.testing.assert_allclose(g, rl.evaluate(rl.grad(globl), X), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(g, fd_gradient(lambda x: float(rl.evaluate(local, x)), X),
                               rtol=1e-6, atol=1e-8)
    check_fd(local, [X])


def test_hessian_and_hvp_against_finite_differences_and_globals(pair):
    local, globl = pair
    h = rl.evaluate(rl.hessian(local), X)
    np.testing.assert_allclose(h, rl.evaluate(rl.hessian(globl), X), rtol=1e-10, atol=1e-12)
    grad = rl.grad(local)
    numeric = np.stack([fd_gradient(lambda x: float(rl.evaluate(grad, x)[i]), X)
                        for i in range(3)])
    np.testing.assert_allclose(h, numeric, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(h, h.T, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rl.evaluate(rl.hvp(local), X, V), h @ V, rtol=1e-10, atol=1e-12)


def test_jvp_against_finite_differences_and_globals(pair):
    local, globl = pair
    value, tangent = rl.evaluate(rl.jvp(local), X, V)
    assert float(value) == pytest.approx(float(rl.evaluate(local, X)), rel=1e-14)
    eps = 1e-6
    numeric = (float(rl.evaluate(local, X + eps * V)) - float(rl.evaluate(local, X - eps * V))) \
        / (2 * eps)
    assert float(tangent) == pytest.approx(numeric, rel=1e-6, abs=1e-8)
    assert float(tangent) == pytest.approx(float(rl.evaluate(rl.jvp(globl), X, V)[1]),
                                           rel=1e-12, abs=1e-14)


def test_jvp_of_jvp_second_directional_derivative(pair):
    local, _ = pair
    j = rl.jvp(local)                           # fn(x, v) -> (f, J v)
    x, v = rl.var("x", shape=(3,), dtype="float64"), rl.var("v", shape=(3,), dtype="float64")
    jj = rl.jvp(rl.Function([x, v], rl.GlobalVar("j")(x, v)[1]), mod=_with_entry(j, "j"))
    _, second = rl.evaluate(jj, X, V, V, np.zeros(3))    # d/dt J(x + t v) v = v^T H v
    h = rl.evaluate(rl.hessian(local), X)
    assert float(second) == pytest.approx(float(V @ h @ V), rel=1e-9, abs=1e-11)


def _with_entry(mod, name):
    out = rl.Module()
    for data in mod.type_definitions.values():
        out.add_type(data)
    for gv, fn in mod.functions.items():
        out[name if gv.name_hint == "main" else gv] = fn
    return out


# each program's four derivatives compile for jax (up to 2 s of CPU): the default run takes one
# program, -m slow all of them
@pytest.mark.parametrize("pair", ["counter"] + [pytest.param(name, marks=pytest.mark.slow)
                                               for name in sorted(PROGRAMS) if name != "counter"],
                         indirect=True)
def test_outputs_print_parse_and_run_on_jax(pair):
    local, _ = pair
    for prog, args in [(rl.grad(rl.grad(_first_component(local))), (X[0],)),
                       (rl.hessian(local), (X,)), (rl.jvp(local), (X, V)),
                       (rl.hvp(local), (X, V))]:
        rl.assert_structural_equal(rl.parse(rl.astext(prog)), prog)
        expected = rl.evaluate(prog, *args)
        got = rl.compile(prog, backend="jax")(*args)
        assert_values_close(got, expected, rtol=1e-10, atol=1e-12)


def _first_component(mod):
    """x0 -> main((x0, X[1], X[2])): a scalar function of a scalar, for rl.grad(rl.grad(.))."""
    x0 = rl.var("x0", dtype="float64")
    x = rl.op.stack(rl.Tuple([x0, rl.const(X[1]), rl.const(X[2])]), axis=0)
    out = _with_entry(mod, "inner")
    out["main"] = rl.Function([x0], rl.GlobalVar("inner")(x))
    return out


def test_grad_of_grad_against_finite_differences_and_globals(pair):
    local, globl = pair
    f = _first_component(local)
    d2 = rl.grad(rl.grad(f))
    numeric = (float(rl.evaluate(rl.grad(f), X[0] + 1e-6)) -
               float(rl.evaluate(rl.grad(f), X[0] - 1e-6))) / 2e-6
    assert float(rl.evaluate(d2, X[0])) == pytest.approx(numeric, rel=1e-6, abs=1e-8)
    assert float(rl.evaluate(d2, X[0])) == pytest.approx(
        float(rl.evaluate(rl.grad(rl.grad(_first_component(globl))), X[0])), rel=1e-10)


def test_builder_letrec_function_input():
    """A recursive local closure built with the Python API, differentiated as a plain Function
    (no module): grad, grad of grad and jvp; the gradient output is a Function again."""
    x = rl.var("x", dtype="float64")
    n = rl.var("n", dtype="int32")
    acc = rl.var("acc", dtype="float64")
    f64 = rl.TensorType((), "float64")
    f = rl.var("f", type=rl.FuncType([rl.TensorType((), "int32"), f64], f64))
    body = rl.If(n > rl.const(0, dtype="int32"),
                 f(n - rl.const(1, dtype="int32"), acc * x + rl.sin(acc)), acc)
    prog = rl.Function([x], rl.Let(f, rl.Function([n, acc], body, ret_type=f64),
                                   f(rl.const(3, dtype="int32"), x)))
    d1 = rl.grad(prog)
    assert isinstance(d1, rl.Function)
    d2 = rl.grad(d1)
    at = 0.7
    numeric1 = (float(rl.evaluate(prog, at + 1e-6)) - float(rl.evaluate(prog, at - 1e-6))) / 2e-6
    numeric2 = (float(rl.evaluate(d1, at + 1e-6)) - float(rl.evaluate(d1, at - 1e-6))) / 2e-6
    assert float(rl.evaluate(d1, at)) == pytest.approx(numeric1, rel=1e-7)
    assert float(rl.evaluate(d2, at)) == pytest.approx(numeric2, rel=1e-6)
    value, tangent = rl.evaluate(rl.jvp(prog), at, 1.0)
    assert float(tangent) == pytest.approx(numeric1, rel=1e-7)
    assert float(rl.evaluate(rl.hvp(prog), at, 1.0)) == pytest.approx(numeric2, rel=1e-6)


def test_deep_local_recursion_runs():
    """200 recursive calls of a local closure: the gradient program recurses as deep."""
    mod = rl.parse(PROGRAMS["counter"][0].replace("%f(3, %x)", "%f(200, %x * 0.01f64)")
                   .replace("sin(%acc) * %x + %acc", "sin(%acc) * 0.001f64 + %acc"))
    glob = rl.parse(PROGRAMS["counter"][1].replace("@f(%x, 3, %x)", "@f(%x, 200, %x * 0.01f64)")
                    .replace("sin(%acc) * %x + %acc", "sin(%acc) * 0.001f64 + %acc"))
    np.testing.assert_allclose(rl.evaluate(rl.grad(mod), X), rl.evaluate(rl.grad(glob), X),
                               rtol=1e-12)
    np.testing.assert_allclose(rl.evaluate(rl.jvp(mod), X, V)[1],
                               rl.evaluate(rl.jvp(glob), X, V)[1], rtol=1e-12)
