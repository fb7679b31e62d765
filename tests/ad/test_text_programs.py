"""Gradients of programs written as text: globals over a user ADT, closures writing a ref,
bare nullary constructors used as values. Checked against jax on the same function."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import relayish as rl

PROGRAM = '''
type List[a] { Cons(a, List[a]), Nil }
def @sumsq(%l: List[float64]) -> float64 {
  match (%l) {
    Cons(%h, %t) => %h * %h + @sumsq(%t),
    Nil => 0f64,
  }
}
def @main(%x: Tensor[(3), float64]) -> float64 {
  let %l = Cons(take(%x, 0), Cons(take(%x, 1), Cons(take(%x, 2), NIL)));
  let %r = ref(0f64);
  let %f = fn (%y: float64) { %r := !%r + sin(%y); !%r };
  %f(take(%x, 0));
  %f(take(%x, 1));
  @sumsq(%l) * !%r
}
'''


def reference(x):
    return jnp.sum(x * x) * (jnp.sin(x[0]) + jnp.sin(x[1]))


@pytest.fixture(params=["Nil", "Nil()"])
def mod(request):
    return rl.parse(PROGRAM.replace("NIL", request.param))


X = np.array([0.3, -0.5, 0.9])


def test_gradient_matches_jax(mod):
    with jax.enable_x64(True):
        expected = np.asarray(jax.jit(jax.grad(reference))(jnp.asarray(X)))
    np.testing.assert_allclose(rl.evaluate(rl.grad(mod), X), expected, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(rl.compile(rl.grad(mod))(X)), expected, rtol=1e-12)


def test_hessian_matches_jax(mod):
    with jax.enable_x64(True):
        expected = np.asarray(jax.jit(jax.hessian(reference))(jnp.asarray(X)))
    np.testing.assert_allclose(rl.evaluate(rl.hessian(mod), X), expected, rtol=1e-10)


def test_jvp_matches_gradient(mod):
    v = np.array([0.2, 1.0, -0.7])
    value, tangent = rl.evaluate(rl.jvp(mod), X, v)
    assert float(value) == pytest.approx(float(rl.evaluate(mod, X)))
    assert float(tangent) == pytest.approx(float(rl.evaluate(rl.grad(mod), X) @ v), rel=1e-12)
