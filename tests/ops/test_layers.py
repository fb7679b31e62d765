"""Relay's nn.* operators (relayish/ops/layers.py) rule by rule: type rules and their errors,
impl(numpy) and impl(jax.numpy) against jax.lax references, gradient, tangent and second-order
rules against central differences, with shapes and attributes drawn by hypothesis."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relayish as rl
from relayish.errors import RelayishError, TypeCheckError
from opcheck import T, check_grad, check_impl, check_second_order, check_tangent, type_of_call

RNG = np.random.default_rng(12)
FEW = settings(max_examples=3, deadline=None)
FEWER = settings(max_examples=2, deadline=None)     # each example compiles jax.numpy code


def all_rules(name, values, attrs=None):
    check_grad(name, values, attrs)
    check_tangent(name, values, attrs)
    check_second_order(name, values, attrs)


def rand(*shape, dtype="float64"):
    return RNG.uniform(-1, 1, shape).astype(dtype)


def pads(p):
    return ((0, 0), (0, 0), (p[0], p[2]), (p[1], p[3]))


def conv_ref(x, w, strides, padding, dilation, groups):
    with jax.enable_x64(True):
        return np.asarray(jax.lax.conv_general_dilated(
            x, w, strides, pads(padding)[2:], rhs_dilation=dilation,
            feature_group_count=groups))


def pool_ref(x, kind, size, strides, padding, dilation, include_pad=False):
    args = ((1, 1) + tuple(size), (1, 1) + tuple(strides), pads(padding))
    kw = dict(window_dilation=(1, 1) + tuple(dilation))
    with jax.enable_x64(True):
        if kind == "max":
            return np.asarray(jax.lax.reduce_window(x, -np.inf, jax.lax.max, *args, **kw))
        total = jax.lax.reduce_window(x, 0.0, jax.lax.add, *args, **kw)
        ones = np.ones_like(x) if include_pad else None
        count = (size[0] * size[1] if include_pad
                 else jax.lax.reduce_window(np.ones_like(x), 0.0, jax.lax.add, *args, **kw))
        del ones
        return np.asarray(total / count)


# ---- conv2d ---------------------------------------------------------------------------------

@st.composite
def conv_cases(draw):
    groups = draw(st.sampled_from([1, 1, 2]))
    cin, cout = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    strides = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(dilation[0] * (kh - 1) + 1, 6))
    w = draw(st.integers(dilation[1] * (kw - 1) + 1, 6))
    n = draw(st.integers(1, 2))
    return (n, cin, h, w), (cout, cin // groups, kh, kw), dict(
        strides=strides, padding=padding, dilation=dilation, groups=groups)


@FEWER
@given(conv_cases())
def test_conv2d(case):
    xs, ws, attrs = case
    x, w = rand(*xs), rand(*ws)
    expected = conv_ref(x, w, attrs["strides"], attrs["padding"], attrs["dilation"],
                        attrs["groups"])
    assert type_of_call("nn.conv2d", [T(xs), T(ws)], attrs) == T(expected.shape)
    check_impl("nn.conv2d", [x, w], attrs, expected=expected)
    check_impl("nn.conv2d", [x.astype("float32"), w.astype("float32")], attrs, expected=expected)
    all_rules("nn.conv2d", [x, w], attrs)


def test_conv2d_padding_forms_and_errors():
    x, w = T((1, 4, 5, 5)), T((6, 2, 3, 3))
    one = rl.nn.conv2d(rl.var("x"), rl.var("w"), padding=1)
    assert one.attrs["padding"] == (1, 1, 1, 1)
    assert rl.nn.conv2d(rl.var("x"), rl.var("w"), padding=(1, 2)).attrs["padding"] == (1, 2, 1, 2)
    assert type_of_call("nn.conv2d", [x, w], {"groups": 2, "padding": (1, 1)}) == T((1, 6, 5, 5))
    with pytest.raises(RelayishError, match="1, 2 or 4 entries"):
        rl.nn.conv2d(rl.var("x"), rl.var("w"), padding=(1, 2, 3))
    with pytest.raises(TypeCheckError, match="2 input channels per group.*needs 4"):
        type_of_call("nn.conv2d", [x, w])
    with pytest.raises(TypeCheckError, match="groups=4 must divide"):
        type_of_call("nn.conv2d", [x, T((6, 1, 3, 3))], {"groups": 4})
    with pytest.raises(TypeCheckError, match="kernel_size=\\[2, 2\\].*3x3"):
        type_of_call("nn.conv2d", [x, w], {"groups": 2, "kernel_size": 2})
    with pytest.raises(TypeCheckError, match="channels=5"):
        type_of_call("nn.conv2d", [x, w], {"groups": 2, "channels": 5})
    with pytest.raises(TypeCheckError, match="only the NCHW layout"):
        type_of_call("nn.conv2d", [x, w], {"groups": 2, "data_layout": "NHWC"})
    with pytest.raises(TypeCheckError, match="larger than the padded input"):
        type_of_call("nn.conv2d", [T((1, 1, 2, 2)), T((1, 1, 3, 3))])
    with pytest.raises(TypeCheckError, match="4-D"):
        type_of_call("nn.conv2d", [T((1, 5, 5)), w])
    with pytest.raises(TypeCheckError, match="out_dtype"):
        type_of_call("nn.conv2d", [x, w], {"groups": 2, "out_dtype": "float64"})


def test_im2col_col2im_are_adjoint():
    x = rand(2, 3, 5, 4)
    attrs = dict(kernel_size=(2, 3), strides=(2, 1), padding=(1, 0, 1, 2), dilation=(1, 2))
    (cols,) = [check_impl("nn.im2col", [x], attrs)]
    all_rules("nn.im2col", [x], attrs)
    g = rand(*cols.shape)
    all_rules("nn.col2im", [g, x], attrs)
    back = check_impl("nn.col2im", [g, x], attrs)
    np.testing.assert_allclose(np.vdot(g, cols), np.vdot(back, x), rtol=1e-12)


# ---- pooling --------------------------------------------------------------------------------

@st.composite
def pool_cases(draw):
    size = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    strides = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = tuple(draw(st.integers(0, s - 1)) for s in size * 2)
    h = draw(st.integers(dilation[0] * (size[0] - 1) + 1, 6))
    w = draw(st.integers(dilation[1] * (size[1] - 1) + 1, 6))
    return (draw(st.integers(1, 2)), draw(st.integers(1, 2)), h, w), dict(
        pool_size=size, strides=strides, padding=padding, dilation=dilation)


@FEWER
@given(pool_cases(), st.booleans())
def test_max_and_avg_pool2d(case, include_pad):
    shape, attrs = case
    x = rand(*shape)
    expected = pool_ref(x, "max", attrs["pool_size"], attrs["strides"], attrs["padding"],
                        attrs["dilation"])
    assert type_of_call("nn.max_pool2d", [T(shape)], attrs) == T(expected.shape)
    check_impl("nn.max_pool2d", [x], attrs, expected=expected)
    all_rules("nn.max_pool2d", [x], attrs)
    avg = dict(attrs, count_include_pad=include_pad)
    expected = pool_ref(x, "avg", attrs["pool_size"], attrs["strides"], attrs["padding"],
                        attrs["dilation"], include_pad)
    check_impl("nn.avg_pool2d", [x], avg, expected=expected)
    check_impl("nn.avg_pool2d", [x.astype("float32")], avg, expected=expected)
    all_rules("nn.avg_pool2d", [x], avg)


def test_pool_ties_split_and_errors():
    x = np.ones((1, 1, 2, 2))
    grads = rl.evaluate(rl.grad(rl.Function(
        [v := rl.var("v", shape=(1, 1, 2, 2), dtype="float64")],
        rl.sum(rl.nn.max_pool2d(v, pool_size=2)))), x)
    np.testing.assert_allclose(grads, np.full((1, 1, 2, 2), 0.25))
    assert check_impl("nn.max_pool2d", [np.arange(16, dtype="int32").reshape(1, 1, 4, 4)],
                      {"pool_size": 2, "strides": 2, "padding": 1}).dtype == np.int32
    with pytest.raises(TypeCheckError, match="ceil_mode=True is not supported"):
        type_of_call("nn.max_pool2d", [T((1, 1, 4, 4))], {"ceil_mode": True})
    with pytest.raises(TypeCheckError, match="floating-point"):
        type_of_call("nn.avg_pool2d", [T((1, 1, 4, 4), "int32")])
    with pytest.raises(TypeCheckError, match="only the NCHW layout"):
        type_of_call("nn.global_avg_pool2d", [T((1, 1, 4, 4))], {"layout": "NHWC"})


def test_global_avg_pool2d():
    x = rand(2, 3, 4, 5)
    assert type_of_call("nn.global_avg_pool2d", [T(x.shape)]) == T((2, 3, 1, 1))
    check_impl("nn.global_avg_pool2d", [x], expected=x.mean(axis=(2, 3), keepdims=True))
    all_rules("nn.global_avg_pool2d", [x])


# ---- dense, bias_add, batch_flatten, batch_matmul, layer_norm, dropout ----------------------

@FEW
@given(st.lists(st.integers(1, 3), min_size=1, max_size=3), st.integers(1, 4))
def test_dense(xshape, units):
    x, w = rand(*xshape), rand(units, xshape[-1])
    assert type_of_call("nn.dense", [T(x.shape), T(w.shape)]) == T(x.shape[:-1] + (units,))
    check_impl("nn.dense", [x, w], expected=x @ w.T)
    all_rules("nn.dense", [x, w])


def test_dense_errors():
    with pytest.raises(TypeCheckError, match=r"weights are \(units, in_features\)"):
        type_of_call("nn.dense", [T((2, 3)), T((3, 4))])
    with pytest.raises(TypeCheckError, match="units=5"):
        type_of_call("nn.dense", [T((2, 3)), T((4, 3))], {"units": 5})


@FEW
@given(st.lists(st.integers(1, 3), min_size=1, max_size=4), st.data())
def test_bias_add_and_batch_flatten(shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x, b = rand(*shape), rand(shape[axis])
    bshape = [1] * len(shape)
    bshape[axis] = shape[axis]
    check_impl("nn.bias_add", [x, b], {"axis": axis}, expected=x + b.reshape(bshape))
    all_rules("nn.bias_add", [x, b], {"axis": axis})
    check_impl("nn.batch_flatten", [x], expected=x.reshape(shape[0], -1))
    all_rules("nn.batch_flatten", [x])
    with pytest.raises(TypeCheckError, match="bias must be 1-D"):
        type_of_call("nn.bias_add", [T(tuple(shape)), T((shape[axis] + 1,))], {"axis": axis})


@FEW
@given(st.integers(1, 3), st.sampled_from(["same", "x1", "y1"]), st.booleans(), st.booleans())
def test_batch_matmul(b, batches, ta, tb):
    m, k, n = 2, 3, 4
    bx, by = {"same": (b, b), "x1": (1, b), "y1": (b, 1)}[batches]
    x = rand(bx, k, m) if ta else rand(bx, m, k)
    y = rand(by, n, k) if tb else rand(by, k, n)
    attrs = {"transpose_a": ta, "transpose_b": tb}
    expected = np.matmul(np.swapaxes(x, 1, 2) if ta else x, np.swapaxes(y, 1, 2) if tb else y)
    check_impl("nn.batch_matmul", [x, y], attrs, expected=expected)
    all_rules("nn.batch_matmul", [x, y], attrs)


def test_batch_matmul_default_is_x_times_y_transposed():
    assert type_of_call("nn.batch_matmul", [T((2, 3, 4)), T((2, 5, 4))]) == T((2, 3, 5))
    with pytest.raises(TypeCheckError, match="inner dimensions differ"):
        type_of_call("nn.batch_matmul", [T((2, 3, 4)), T((2, 4, 5))])
    with pytest.raises(TypeCheckError, match="batch sizes 2 and 3"):
        type_of_call("nn.batch_matmul", [T((2, 3, 4)), T((3, 5, 4))])


@FEW
@given(st.lists(st.integers(2, 3), min_size=1, max_size=3), st.data(), st.booleans(),
       st.booleans())
def test_layer_norm(shape, data, center, scale):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x, gamma, beta = rand(*shape), rand(shape[axis]), rand(shape[axis])
    attrs = {"axis": axis, "epsilon": 1e-3, "center": center, "scale": scale}
    bshape = [1] * len(shape)
    bshape[axis] = shape[axis]
    xhat = (x - x.mean(axis, keepdims=True)) / np.sqrt(x.var(axis, keepdims=True) + 1e-3)
    expected = (xhat * (gamma.reshape(bshape) if scale else 1)
                + (beta.reshape(bshape) if center else 0))
    check_impl("nn.layer_norm", [x, gamma, beta], attrs, expected=expected)
    all_rules("nn.layer_norm", [x, gamma, beta], attrs)


def test_dropout_is_the_identity_in_inference_form():
    x = rand(2, 3)
    assert type_of_call("nn.dropout", [T((2, 3))]) == rl.TupleType([T((2, 3)), T((2, 3))])
    v = rl.var("v", shape=(2, 3), dtype="float64")
    f = rl.Function([v], rl.sum(rl.nn.dropout(v, rate=0.25) * v))
    np.testing.assert_allclose(rl.evaluate(f, x), np.sum(x * x))
    np.testing.assert_allclose(rl.evaluate(rl.grad(f), x), 2 * x)
    with pytest.raises(TypeCheckError, match=r"rate must be in \[0, 1\)"):
        type_of_call("nn.dropout", [T((2, 3))], {"rate": 1.0})


def test_nn_names_parse_print_and_alias():
    text = """
    fn (%x: Tensor[(1, 2, 6, 6), float32], %w: Tensor[(3, 2, 3, 3), float32],
        %d: Tensor[(4, 27), float32], %b: Tensor[(4), float32]) {
      let %c = nn.relu(nn.conv2d(%x, %w, padding=[1, 1], channels=3, kernel_size=[3, 3]));
      let %p = nn.max_pool2d(%c, pool_size=[2, 2], strides=[2, 2]);
      let %h = nn.bias_add(nn.dense(nn.batch_flatten(%p), %d), %b, axis=-1);
      nn.log_softmax(%h)
    }"""
    f = rl.parse_expr(text)
    assert rl.typeof(f).ret_type == T((1, 4))
    again = rl.parse_expr(rl.astext(f))
    rl.assert_structural_equal(again, f)
    assert "nn.conv2d(" in rl.astext(f) and "log_softmax(" in rl.astext(f)
    with pytest.raises(rl.ParseError, match="unknown operator or constructor 'nn.conv9d'"):
        rl.parse_expr("nn.conv9d(%x)")
