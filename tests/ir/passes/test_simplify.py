"""rl.passes.simplify: each rule, the rules that must not fire, and AD output."""
import numpy as np
import pytest
from hypothesis import given, settings

import relayish as rl
from relayish.ir.visitor import build_let_chain
from strategies import programs
from tests.ir.passes.test_properties import _check, assert_same_value

F3 = "Tensor[(3), float32]"


def simplify(text):
    return rl.passes.simplify(rl.parse_expr(text))


def same_program(got, text):
    rl.assert_structural_equal(got, rl.parse_expr(text))


@pytest.mark.parametrize("body", [
    'zeros(shape=[3], dtype="float32") + %g', '%g + zeros(shape=[3], dtype="float32")',
    '%g - zeros_like(%g)', '%g * ones_like(%g)', 'ones(shape=[3], dtype="float32") * %g',
    '%g / ones_like(%g)', 'power(%g, ones_like(%g))', '-(-(%g))', '%g + const([0, 0, 0], float32)'])
def test_identities_give_back_the_other_argument(body):
    same_program(simplify(f"fn (%g: {F3}) {{ {body} }}"), f"fn (%g: {F3}) {{ %g }}")


def test_a_let_bound_zero_is_seen_through_its_variable():
    same_program(simplify(f'fn (%g: {F3}) {{ let %z = zeros(shape=[3], dtype="float32"); '
                          f'let %n = -%g; (%z + %g, -%n) }}'),
                 f'fn (%g: {F3}) {{ let %z = zeros(shape=[3], dtype="float32"); '
                 f'let %n = -%g; (%g, %g) }}')


def test_no_identity_where_broadcasting_or_dtype_would_change():
    # zeros of a larger shape broadcast g: the result is not g's type
    text = f'fn (%g: {F3}) {{ %g + zeros(shape=[2, 3], dtype="float32") }}'
    same_program(simplify(text), text)
    text = 'fn (%g: float32) { %g * ones(shape=[3], dtype="float32") }'
    same_program(simplify(text), text)
    # 0 - g is -g, not g; g * 2 is not g
    text = f'fn (%g: {F3}) {{ (zeros_like(%g) - %g, %g * full_like(%g, fill_value=2f)) }}'
    same_program(simplify(text), text)


def test_g_times_zeros_stays_nan_and_inf_included():
    # IEEE: inf * 0 and nan * 0 are nan; replacing the product by zeros would hide them
    text = f'fn (%g: {F3}) {{ %g * zeros_like(%g) }}'
    f = rl.parse_expr(text)
    same_program(rl.passes.simplify(f), text)
    g = np.array([np.inf, np.nan, 1.0], dtype="float32")
    assert_same_value(rl.evaluate(rl.passes.simplify(f), g), rl.evaluate(f, g))
    # a known constant folds, and inf * 0 folds to what IEEE gives: nan
    x = rl.var("x")
    f = rl.Function([x], rl.Tuple([rl.const(np.float32(np.inf)) * rl.const(0.0), x * 0.0]))
    out = rl.passes.simplify(f)
    assert isinstance(out.body.fields[0], rl.Constant) and np.isnan(out.body.fields[0].data)
    assert isinstance(out.body.fields[1], rl.Call)          # x * 0 stays: x may be inf
    assert_same_value(rl.evaluate(out, np.float32(np.inf)), rl.evaluate(f, np.float32(np.inf)))


def test_constant_folding_small_tensors_only():
    same_program(simplify("fn () { exp(0f) * 3f + 1f }"), "fn () { 4f }")
    big = rl.Function([], rl.exp(rl.const(np.zeros(100, "float32"))))
    assert isinstance(rl.passes.simplify(big).body, rl.Call)       # 100 elements: not folded
    # an op that may fail is never run at compile time
    text = "fn () { take(const([1, 2], float32), 5) }"
    same_program(simplify(text), text)


def test_reads_of_a_reference_no_write_has_reached():
    got = simplify(f'fn (%g: {F3}) {{ let %r = ref(zeros(shape=[3], dtype="float32")); '
                   f'let %u = %r := !%r + %g; !%r }}')
    same_program(got, f'fn (%g: {F3}) {{ let %r = ref(zeros(shape=[3], dtype="float32")); '
                      f'let %u = %r := %g; !%r }}')
    # through a tuple and a projection, as reverse AD stores its adjoints
    got = simplify('fn (%y: float32) { let %d = (%y, ref(0f)); let %r = %d.1; '
                   'let %u = %r := !%r + 1f; !%d.1 }')
    same_program(got, 'fn (%y: float32) { let %d = (%y, ref(0f)); let %r = %d.1; '
                      'let %u = %r := 1f; !%d.1 }')


@pytest.mark.parametrize("text", [
    # a write before the read
    "fn (%g: float32) { let %r = ref(0f); let %u = %r := %g; !%r + %g }",
    # the reference escapes into a call, which may write it
    "fn (%g: float32, %h: fn (ref(float32)) -> ()) { let %r = ref(0f); let %u = %h(%r); !%r }",
    # the read is in a closure: it may run after a write
    "fn (%g: float32) { let %r = ref(0f); let %f = fn () { !%r }; let %u = %r := %g; %f() }",
    # stored in another reference
    "fn (%g: float32) { let %r = ref(0f); let %s = ref(%r); let %u = (!%s) := %g; !%r }",
])
def test_reads_that_a_write_may_have_reached_stay(text):
    f = rl.parse_expr(text)
    assert rl.astext(rl.passes.simplify(f)).count("!%r") == rl.astext(f).count("!%r")


def operations(program):
    """The lets of a program's A-normal form: every op, tuple, projection, ref access one."""
    return rl.astext(rl.passes.to_anf(program)).count("let %")


def test_ad_output_shrinks_and_keeps_its_values():
    y = rl.var("y", shape=(), dtype="float64")
    g = rl.Function([y], y ** rl.const(5.0, "float64"))
    for order in range(1, 4):
        g = rl.grad(g, optimize=False)
        out = rl.optimize(g, passes=[rl.passes.CSE(bind=True), rl.passes.simplify, rl.passes.dead_code],
                          check=True)
        assert operations(out) < operations(g)
        assert_same_value(rl.evaluate(out, np.float64(0.7)), rl.evaluate(g, np.float64(0.7)))


@pytest.mark.parametrize("n", [1_000, pytest.param(100_000, marks=pytest.mark.slow)])
def test_long_chains(n):
    x = rl.var("x", shape=(), dtype="float64")
    bindings, prev = [], x
    for k in range(n):
        v = rl.var(f"v{k}", shape=(), dtype="float64")
        bindings.append((v, rl.tanh(prev) * rl.const(1.0, "float64") + rl.zeros_like(prev)))
        prev = v
    f = rl.Function([x], build_let_chain(bindings, prev))
    out = rl.passes.simplify(f)
    text = rl.astext(out)
    assert text.count("tanh(") == n and "zeros_like" not in text and "1f64" not in text
    assert_same_value(rl.evaluate(out, np.float64(0.3)), rl.evaluate(f, np.float64(0.3)))


@given(programs(max_depth=4))
def test_simplify_keeps_the_values_of_random_programs(prog):
    _check(prog.mod, prog.args, [rl.passes.simplify])


@settings(max_examples=10)
@given(programs(differentiable=True))
def test_simplified_programs_differentiate_to_the_same_gradient(prog):
    want = rl.evaluate(rl.gradient(prog.mod, optimize=False), *prog.args)
    out = _check(prog.mod, prog.args, [rl.passes.simplify, rl.passes.dead_code])
    assert_same_value(rl.evaluate(rl.gradient(out, optimize=False), *prog.args), want)
