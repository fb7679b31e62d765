"""rl.to_jax: a relayish program as a jax function. Under jax.jit, vmap, grad, jvp, hessian and
lax.scan it agrees with relayish's own entry points and with finite differences; its
derivatives are relayish's programs (the jaxprs show them); a recursive Module's gradient
through jax.grad equals rl.grad; round trips rl.to_jax(rl.from_jax(f)) equal f."""
import numpy as np
import pytest

import relayish as rl

jax = pytest.importorskip("jax")
jnp = jax.numpy

from test_jaxpr import CORPUS, newton_sqrt  # noqa: E402  (tests/interop/test_jaxpr.py)

TOL = dict(rtol=1e-9, atol=1e-9)


def _model():
    """A relayish program written in text: tuple parameters, a tuple result."""
    return rl.parse("""
def @main(%p: (Tensor[(3, 2), float64], Tensor[(2), float64]), %x: Tensor[(4, 3), float64])
    -> (float64, Tensor[(4, 2), float64]) {
  let %h = tanh(matmul(%x, %p.0) + %p.1);
  (sum(%h * %h) + sum(sin(%p.0)), %h)
}
""")


def _args(seed=0):
    r = np.random.default_rng(seed)
    return (r.normal(size=(3, 2)), r.normal(size=2)), r.normal(size=(4, 3))


def _loss(mod):
    jf = rl.to_jax(mod)
    return lambda p, x: jf(p, x)[0]


def test_values_under_jit_and_pytrees_in_and_out():
    mod, (p, x) = _model(), _args()
    jf = rl.to_jax(mod)
    ours = jax.jit(jf)(p, x)
    theirs = rl.evaluate(mod, p, x)
    assert isinstance(ours, tuple) and len(ours) == 2
    np.testing.assert_allclose(ours[0], theirs[0], **TOL)
    np.testing.assert_allclose(ours[1], theirs[1], **TOL)


def test_grad_is_relayish_reverse_mode_and_agrees_with_rl_grad_and_differences():
    mod, (p, x) = _model(), _args()
    loss = _loss(mod)
    g = jax.jit(jax.grad(loss))(p, x)
    # rl.grad of the scalar part of @main, on the interpreter
    scalar = rl.parse("""
def @main(%p: (Tensor[(3, 2), float64], Tensor[(2), float64]), %x: Tensor[(4, 3), float64]) {
  let %h = tanh(matmul(%x, %p.0) + %p.1);
  sum(%h * %h) + sum(sin(%p.0))
}
""")
    ref = rl.evaluate(rl.grad(scalar), p, x)
    for a, b in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_allclose(a, b, **TOL)
    # finite differences along a random direction (inner-product identity)
    r = np.random.default_rng(3)
    d = (r.normal(size=(3, 2)), r.normal(size=2))
    eps = 1e-6
    shift = lambda s: tuple(a + s * b for a, b in zip(p, d))
    fd = (loss(shift(eps), x) - loss(shift(-eps), x)) / (2 * eps)
    np.testing.assert_allclose(sum(np.vdot(a, b) for a, b in zip(g, d)), fd, rtol=1e-7)
    # the gradient's jaxpr calls relayish's vjp program, not jax's AD of the lowering
    text = str(jax.make_jaxpr(jax.grad(loss))(p, x))
    assert "relayish_call" in text and "vjp(main)" in text
    assert "tanh" not in text


def test_jvp_is_relayish_forward_mode_and_agrees_with_rl_jvp():
    mod, (p, x) = _model(), _args()
    jf = rl.to_jax(mod)
    r = np.random.default_rng(4)
    dp, dx = (r.normal(size=(3, 2)), r.normal(size=2)), r.normal(size=(4, 3))
    out, tangent = jax.jit(lambda a, b: jax.jvp(jf, a, b))((p, x), (dp, dx))
    _, ref = rl.evaluate(rl.jvp(mod), p, x, dp, dx)
    np.testing.assert_allclose(tangent[0], ref[0], **TOL)
    np.testing.assert_allclose(tangent[1], ref[1], **TOL)
    assert "relayish_linear" in str(jax.make_jaxpr(lambda a, b: jax.jvp(jf, a, b))((p, x),
                                                                                  (dp, dx)))


def test_vmap_and_grad_of_vmap():
    mod, (p, x) = _model(), _args()
    loss = _loss(mod)
    xs = np.stack([x, 2 * x, -x])
    batched = jax.jit(jax.vmap(loss, in_axes=(None, 0)))(p, xs)
    np.testing.assert_allclose(batched, [loss(p, xi) for xi in xs], **TOL)
    g = jax.jit(jax.grad(lambda p: jax.vmap(loss, in_axes=(None, 0))(p, xs).sum()))(p)
    expected = [sum(np.asarray(jax.grad(loss)(p, xi)[k]) for xi in xs) for k in range(2)]
    for a, b in zip(g, expected):
        np.testing.assert_allclose(a, b, **TOL)


def test_hessian_agrees_with_rl_hessian():
    f = rl.parse("""
def @main(%x: Tensor[(3), float64]) -> float64 { sum(sin(%x) * %x * %x) + @exp_half(%x) }
def @exp_half(%x: Tensor[(3), float64]) -> float64 { sum(exp(%x * 0.5f64)) }
""")
    x = np.array([0.3, -1.2, 0.8])
    h = jax.jit(jax.hessian(rl.to_jax(f)))(x)
    np.testing.assert_allclose(h, rl.evaluate(rl.hessian(f), x), **TOL)


def test_lax_scan_over_the_function_and_its_gradient():
    mod, (p, x) = _model(), _args()
    loss = _loss(mod)

    def total(p):
        def step(c, xi):
            return c + loss(p, xi), None
        return jax.lax.scan(step, 0.0, np.stack([x, 0.5 * x]))[0]
    g = jax.jit(jax.grad(total))(p)
    expected = [np.asarray(jax.grad(loss)(p, x)[k]) + np.asarray(jax.grad(loss)(p, 0.5 * x)[k])
                for k in range(2)]
    for a, b in zip(g, expected):
        np.testing.assert_allclose(a, b, **TOL)


def test_a_recursive_module_has_relayish_gradient_through_jax_grad():
    a = np.array([1e12, 9.0, 0.25])     # about 25 iterations: more rows than rl.compile's first 16
    mod = rl.from_jax(newton_sqrt, a)
    jf = rl.to_jax(mod)
    np.testing.assert_allclose(jax.jit(jf)(a), np.sqrt(a).sum(), **TOL)
    g = jax.jit(jax.grad(jf))(a)
    np.testing.assert_allclose(g, rl.evaluate(rl.grad(mod), a), **TOL)
    np.testing.assert_allclose(g, 0.5 / np.sqrt(a), rtol=1e-8)
    # outside any jax trace the gradient program is rl.compile's run: its rows grew past 16
    # (rows fixed at the first 16 would raise the capacity's EvaluationError)
    np.testing.assert_allclose(jax.grad(jf)(a), g, **TOL)


def test_integer_parameters_get_no_tangent():
    f = rl.parse("""
def @main(%x: Tensor[(3), float64], %n: int32) -> float64 { sum(%x * %x) * cast(%n, dtype="float64") }
""")
    jf = rl.to_jax(f)
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(jax.grad(jf)(x, np.int32(3)), 6 * x, **TOL)


def test_bad_arguments_are_relayish_errors():
    jf = rl.to_jax(_model())
    p, x = _args()
    with pytest.raises(rl.CompileError, match="takes 2 argument"):
        jf(p)
    with pytest.raises(rl.CompileError, match="shape"):
        jf(p, x[:2])
    with pytest.raises(rl.CompileError, match="tuple of 2"):
        jf(p[0], x)


ROUND_TRIP = [c for c in CORPUS if c[0] == "mlp"]     # the rest under -m slow
ROUND_TRIP_SLOW = [c for c in CORPUS if c not in ROUND_TRIP]


def _round_trip(fn, args, argnums):
    jf = rl.to_jax(rl.from_jax(fn, *args))
    np.testing.assert_allclose(jax.jit(jf)(*args), jax.jit(fn)(*args), **TOL)
    ours = jax.jit(jax.grad(jf, argnums=argnums))(*args)
    theirs = jax.jit(jax.grad(fn, argnums=argnums))(*args)
    for a, b in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)):
        np.testing.assert_allclose(a, b, **TOL)


@pytest.mark.parametrize("name,fn,args,argnums", ROUND_TRIP, ids=[c[0] for c in ROUND_TRIP])
def test_round_trip_equals_the_jax_function(name, fn, args, argnums):
    _round_trip(fn, args, argnums)


@pytest.mark.slow
@pytest.mark.parametrize("name,fn,args,argnums", ROUND_TRIP_SLOW,
                         ids=[c[0] for c in ROUND_TRIP_SLOW])
def test_round_trip_equals_the_jax_function_rest_of_corpus(name, fn, args, argnums):
    _round_trip(fn, args, argnums)


def test_an_optax_training_loop():
    optax = pytest.importorskip("optax")
    mod, (p, x) = _model(), _args()
    loss = _loss(mod)
    opt = optax.adam(0.05)

    @jax.jit
    def step(p, state):
        value, g = jax.value_and_grad(loss)(p, x)
        updates, state = opt.update(g, state, p)
        return optax.apply_updates(p, updates), state, value
    state = opt.init(p)
    values = []
    for _ in range(30):
        p, state, value = step(p, state)
        values.append(float(value))
    assert values[-1] < values[0] - 0.5


def slow_decay(x):
    """A while loop of about 1,150 iterations from x = (1e5, 0): past the 1,024 rows that
    to_jax's gradient loops keep inside a jax trace by default."""
    y = jax.lax.while_loop(lambda c: jnp.sum(c) > 1.0, lambda c: c * 0.99, x)
    return jnp.sum(y * y)


def test_a_loop_past_its_rows_raises_when_the_jax_program_runs_never_a_wrong_value():
    x = np.array([1e5, 0.0])
    jf = rl.to_jax(rl.from_jax(slow_decay, x))
    step = jax.jit(jax.grad(jf))
    with pytest.raises(jax.errors.JaxRuntimeError,
                       match=r"EvaluationError: rl.to_jax: @while_0_ad ran more than 1024 "
                             r"iterations.*capacity=\{\"steps\": N\}"):
        jax.block_until_ready(step(x))
    # a run within the rows is not affected by the check
    small = np.array([50.0, 0.0])             # 390 iterations: 50 * 0.99^390 <= 1
    np.testing.assert_allclose(step(small), 2 * small * 0.99 ** (2 * 390), rtol=1e-12)


def test_a_capacity_given_raises_under_jit_and_outside_any_trace():
    a = np.array([2.0, 9.0, 0.25])
    mod = rl.from_jax(newton_sqrt, a)          # about 8 iterations from these starts
    short = rl.to_jax(mod, capacity={"steps": 3})
    with pytest.raises(jax.errors.JaxRuntimeError, match="ran more than 3 iterations"):
        jax.block_until_ready(jax.jit(jax.grad(short))(a))
    with pytest.raises(rl.EvaluationError, match="ran more than 3 iterations"):
        jax.grad(short)(a)
    with pytest.raises(rl.EvaluationError, match="iterations"):
        rl.compile(rl.grad(mod), backend="jax", capacity={"steps": 3})(a)


@pytest.mark.slow
def test_a_loop_past_its_capacity_under_vmap_raises():
    """The flags of the batch's elements: any of them failed (the check itself sits outside
    the vmap, where a cond stays a cond)."""
    a = np.array([2.0, 9.0, 0.25])
    short = rl.to_jax(rl.from_jax(newton_sqrt, a), capacity={"steps": 3})
    batch = np.stack([np.ones(3), a])       # the first converges at once, the second not
    with pytest.raises(jax.errors.JaxRuntimeError, match="ran more than 3 iterations"):
        jax.block_until_ready(jax.jit(jax.vmap(jax.grad(short)))(batch))


@pytest.mark.slow
def test_vmap_of_a_loop_and_its_gradient():
    a = np.array([2.0, 9.0, 0.25])
    jf = rl.to_jax(rl.from_jax(newton_sqrt, a))
    batch = np.stack([a, 4 * a, a + 1])
    np.testing.assert_allclose(jax.jit(jax.vmap(jf))(batch), np.sqrt(batch).sum(1), **TOL)
    g = jax.jit(jax.grad(lambda b: jax.vmap(jf)(b).sum()))(batch)
    np.testing.assert_allclose(g, 0.5 / np.sqrt(batch), rtol=1e-8)


def test_grad_of_grad_is_relayish_reverse_over_reverse():
    f = rl.parse("def @main(%x: Tensor[(3), float64]) -> float64 { sum(sin(%x) * %x) }")
    jf = rl.to_jax(f)
    x = np.array([0.3, -1.2, 0.8])
    gg = jax.jit(jax.grad(lambda x: jax.grad(jf)(x).sum()))(x)
    # d/dx sum(cos x * x + sin x) = -sin x * x + 2 cos x
    np.testing.assert_allclose(gg, -np.sin(x) * x + 2 * np.cos(x), **TOL)
    text = str(jax.make_jaxpr(jax.grad(lambda x: jax.grad(jf)(x).sum()))(x))
    assert "vjp(vjp(main))" in text


def _closed_over_weights():
    """Three ways the weights of a program get into it other than as parameters: a constant
    in a Function, a let-bound value a closure captures, a global that returns them."""
    w = np.array([[1.0, -2.0], [0.5, 0.3], [-0.7, 1.1]])
    x = rl.var("x", shape=(3,), dtype="float64")
    const = rl.Function([x], rl.op.sum(rl.op.sin(rl.op.matmul(x, rl.const(w)))))
    wv, g, y = rl.var("w", shape=(3, 2), dtype="float64"), rl.Var("g"), \
        rl.var("y", shape=(3,), dtype="float64")
    inner = rl.Function([x], rl.op.sum(rl.op.sin(rl.op.matmul(x, wv))))
    let_bound = rl.Function([y], rl.Let(wv, rl.const(w), rl.Let(g, inner, rl.Call(g, [y]))))
    text = ", ".join(f"[{a}, {b}]" for a, b in w)
    global_ = rl.parse(f"""
def @weights() -> Tensor[(3, 2), float64] {{ const([{text}], float64) }}
def @main(%x: Tensor[(3), float64]) -> float64 {{ sum(sin(matmul(%x, @weights()))) }}
""")
    return w, {"constant": const, "let-bound closure": let_bound, "global": global_}


def test_programs_closing_over_their_weights_under_grad_and_hessian():
    w, programs = _closed_over_weights()
    x = np.array([0.3, -0.4, 0.9])
    c = np.cos(x @ w)
    for name, prog in programs.items():
        jf = rl.to_jax(prog)
        np.testing.assert_allclose(jax.jit(jf)(x), np.sin(x @ w).sum(), **TOL, err_msg=name)
        np.testing.assert_allclose(jax.jit(jax.grad(jf))(x), w @ c, **TOL, err_msg=name)
        np.testing.assert_allclose(jax.jit(jax.hessian(jf))(x),
                                   -(w * np.sin(x @ w)) @ w.T, **TOL, err_msg=name)
    # a free variable (bound nowhere) is refused when exporting, naming it
    wv, x_ = rl.var("w", shape=(3, 2), dtype="float64"), rl.var("x", shape=(3,), dtype="float64")
    with pytest.raises(rl.CompileError, match=r"free variables \(%w\)"):
        rl.to_jax(rl.Function([x_], rl.op.sum(rl.op.matmul(x_, wv))))


def test_round_trip_of_a_function_closing_over_arrays_under_grad_outside_jit():
    w = jnp.asarray(np.random.default_rng(6).normal(size=(3, 2)))

    def f(x):
        return jnp.sum(jax.nn.softplus(x @ w)) ** 2
    x = np.array([0.2, -1.0, 0.5])
    jf = rl.to_jax(rl.from_jax(f, x))
    np.testing.assert_allclose(jax.grad(jf)(x), jax.grad(f)(x), **TOL)


def _entry_ops(step, *args):
    """The kinds of the instructions of the compiled step's entry computation (a fusion by
    its kind), as a multiset."""
    import collections
    import re
    text = step.lower(*args).compile().as_text()
    entry = text[text.index("\nENTRY"):]
    return collections.Counter(
        m.group(1) + (":" + m.group(2) if m.group(2) else "")
        for m in re.finditer(r"= \S+ ([\w-]+)\(.*?(?:kind=(\w+))?(?:, calls|$)", entry, re.M))


def test_an_exported_training_step_compiles_to_the_same_xla_program_as_jax_s_own():
    """No copies, transposes, conversions or unfused pieces of its own: the jitted SGD step
    of an imported and exported MLP (float32) is, instruction kind for instruction kind, the
    step jax's AD makes of the original (benchmarks/interop.py measures the time)."""
    def mlp(params, x):
        (w1, b1), (w2, b2) = params
        return jnp.sum(jnp.tanh(jnp.tanh(x @ w1 + b1) @ w2 + b2) ** 2)

    def sgd(loss):
        @jax.jit
        def step(params, x):
            return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params,
                                          jax.grad(loss)(params, x))
        return step
    r = np.random.default_rng(7)
    params = ((r.normal(size=(8, 16)), r.normal(size=16)), (r.normal(size=(16, 4)),
                                                            r.normal(size=4)))
    params, x = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float32),
                                       (params, r.normal(size=(5, 8))))
    ours, theirs = sgd(rl.to_jax(rl.from_jax(mlp, params, x))), sgd(mlp)
    assert _entry_ops(ours, params, x) == _entry_ops(theirs, params, x)
    for a, b in zip(jax.tree_util.tree_leaves(ours(params, x)),
                    jax.tree_util.tree_leaves(theirs(params, x))):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
