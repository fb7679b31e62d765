"""Every prelude function that carries floats differentiates: values against numpy, first
derivatives against finite differences, second derivatives (rl.grad of rl.grad) too.

Each case is a @main over a float64 vector x, written in the text format on top of the prelude;
@xs(x) is the list [x0, x1, x2].
"""
import numpy as np
import pytest
from adcheck import check_fd

import relayish as rl
from relayish.ir.prelude import PRELUDE_TEXT

HELPERS = """
def @xs(%x: Tensor[(3), float64]) -> List[float64] {
  Cons(take(%x, 0), Cons(take(%x, 1), Cons(take(%x, 2), Nil())))
}
def @total(%l: List[float64]) -> float64 {
  @foldl(fn (%acc: float64, %v: float64) -> float64 { %acc + %v }, 0f64, %l)
}
def @weighted(%l: List[float64]) -> float64 {
  // sum of (i + 1) * l[i]: tells the order of the elements apart
  let %r = @foldl(fn (%acc: (float64, float64), %v: float64) -> (float64, float64) {
    (%acc.0 + %acc.1 * %v, %acc.1 + 1f64)
  }, (0f64, 1f64), %l);
  %r.0
}
"""

X = np.array([0.7, -1.3, 2.1])
SQ = "fn (%v: float64) -> float64 { %v * %v }"

# name: (body of @main over %x, the value as a numpy function of x)
CASES = {
    "id": ("@id(take(%x, 0)) * take(%x, 1)", lambda x: x[0] * x[1]),
    "compose": (f"@compose({SQ}, fn (%v: float64) -> float64 {{ sin(%v) }})(take(%x, 2))",
                lambda x: np.sin(x[2]) ** 2),
    "flip": ("@flip(fn (%a: float64, %b: float64) -> float64 { %a * %a * %b })(take(%x, 0), take(%x, 1))",
             lambda x: x[1] ** 2 * x[0]),
    "hd": ("@hd(@xs(%x)) * take(%x, 2)", lambda x: x[0] * x[2]),
    "tl": ("@weighted(@tl(@xs(%x)))", lambda x: x[1] + 2 * x[2]),
    "nth": ("@nth(@xs(%x), 2) * @nth(@xs(%x), 1)", lambda x: x[2] * x[1]),
    "update": ("@weighted(@update(@xs(%x), 1, take(%x, 0) * take(%x, 2)))",
               lambda x: x[0] + 2 * x[0] * x[2] + 3 * x[2]),
    "map": (f"@weighted(@map({SQ}, @xs(%x)))", lambda x: x[0] ** 2 + 2 * x[1] ** 2 + 3 * x[2] ** 2),
    "foldl": ("@weighted(@xs(%x))", lambda x: x[0] + 2 * x[1] + 3 * x[2]),
    "foldr": ("@foldr(fn (%v: float64, %acc: float64) -> float64 { sin(%v + %acc) }, 0f64, @xs(%x))",
              lambda x: np.sin(x[0] + np.sin(x[1] + np.sin(x[2])))),
    "foldr1": ("@foldr1(fn (%a: float64, %b: float64) -> float64 { %a * %b + %a }, @xs(%x))",
               lambda x: x[0] * (x[1] * x[2] + x[1]) + x[0]),
    "concat": ("@weighted(@concat(@xs(%x), @tl(@xs(%x))))",
               lambda x: x[0] + 2 * x[1] + 3 * x[2] + 4 * x[1] + 5 * x[2]),
    "filter": ("@total(@filter(fn (%v: float64) -> bool { %v > 0f64 }, @map(" + SQ + ", @xs(%x))))"
               " + @total(@filter(fn (%v: float64) -> bool { %v > 0f64 }, @xs(%x)))",
               lambda x: np.sum(x ** 2) + np.sum(x[x > 0])),
    "zip": ("@foldl(fn (%acc: float64, %p: (float64, float64)) -> float64 { %acc + %p.0 * %p.1 },"
            " 0f64, @zip(@xs(%x), @tl(@xs(%x))))", lambda x: x[0] * x[1] + x[1] * x[2]),
    "rev": ("@weighted(@rev(@xs(%x)))", lambda x: 3 * x[0] + 2 * x[1] + x[2]),
    "map_accuml": ("let %r = @map_accuml(fn (%acc: float64, %v: float64) -> (float64, float64) {"
                   " (%acc * %v, %acc + %v) }, 1f64, @xs(%x)); %r.0 + @weighted(%r.1)",
                   lambda x: x[0] * x[1] * x[2] + 3 * (1 + x[0]) + 2 * (x[0] + x[1])
                   + (x[0] * x[1] + x[2])),
    "map_accumr": ("let %r = @map_accumr(fn (%acc: float64, %v: float64) -> (float64, float64) {"
                   " (%acc * %v, %acc + %v) }, 1f64, @xs(%x)); %r.0 + @weighted(%r.1)",
                   lambda x: x[0] * x[1] * x[2] + (x[2] * x[1] + x[0]) + 2 * (x[2] + x[1])
                   + 3 * (1 + x[2])),
    # unfold x0 * 0.5^k for k = 0, 1, 2 (a counter in the seed stops it)
    "unfoldr": ("@weighted(@unfoldr(fn (%s: (float64, int32)) -> Option[((float64, int32), float64)] {"
                " if (%s.1 < 3) { Some(((%s.0 * 0.5f64, %s.1 + 1), %s.0 * take(%x, 1))) }"
                " else { Nothing() } }, (take(%x, 0), 0)))",
                lambda x: x[0] * x[1] * (1 + 2 * 0.5 + 3 * 0.25)),
    "unfoldl": ("@weighted(@unfoldl(fn (%s: (float64, int32)) -> Option[((float64, int32), float64)] {"
                " if (%s.1 < 3) { Some(((%s.0 * 0.5f64, %s.1 + 1), %s.0 * take(%x, 1))) }"
                " else { Nothing() } }, (take(%x, 0), 0)))",
                lambda x: x[0] * x[1] * (3 + 2 * 0.5 + 0.25)),
    "iterate": ("@iterate(fn (%v: float64) -> float64 { %v * take(%x, 0) + take(%x, 1) }, 3)(take(%x, 2))",
                lambda x: ((x[2] * x[0] + x[1]) * x[0] + x[1]) * x[0] + x[1]),
    "tmap": ("match (@tmap(" + SQ + ", Rose(take(%x, 0), Cons(Rose(take(%x, 1), Nil()), Nil())))) {"
             " Rose(%v, %kids) => %v * @hd(@map(fn (%t: RoseTree[float64]) -> float64 {"
             " match (%t) { Rose(%w, _) => %w } }, %kids)) }",
             lambda x: x[0] ** 2 * x[1] ** 2),
    "nat_nth": ("@nat_nth(@xs(%x), S(S(Z()))) * @nat_nth(@xs(%x), S(Z()))", lambda x: x[2] * x[1]),
    "nat_update": ("@weighted(@nat_update(@xs(%x), S(Z()), sin(take(%x, 2))))",
                   lambda x: x[0] + 2 * np.sin(x[2]) + 3 * x[2]),
    "nat_iterate": ("@nat_iterate(" + SQ + ", S(S(Z())))(take(%x, 1))", lambda x: x[1] ** 4),
}


def _program(body: str) -> rl.Module:
    text = PRELUDE_TEXT + HELPERS + f"def @main(%x: Tensor[(3), float64]) -> float64 {{ {body} }}\n"
    return rl.parse(text)


@pytest.mark.parametrize("name", sorted(CASES))
def test_prelude_function_value_and_gradients(name):
    body, expected = CASES[name]
    mod = _program(body)
    np.testing.assert_allclose(float(rl.evaluate(mod, X)), expected(X), rtol=1e-12)
    check_fd(mod, [X])
    check_fd(_sum_of_gradient(mod), [X], rtol=1e-4, atol=1e-5)


def _sum_of_gradient(mod: rl.Module) -> rl.Module:
    """@main(x) = sum(grad f(x)): its gradient takes second derivatives through the prelude."""
    grads = rl.grad(mod)
    grads["gradient"] = grads["main"]
    x = rl.var("x", shape=(3,), dtype="float64")
    grads["main"] = rl.Function([x], rl.sum(grads.get_global_var("gradient")(x)))
    return grads


def test_every_float_carrying_prelude_function_is_covered():
    from relayish.ir.prelude import FUNCTION_NAMES
    integer_only = {"length", "sum", "size", "nat_add", "nat_double"}
    assert set(FUNCTION_NAMES) - integer_only == set(CASES)
