"""The relayish command, through main(argv) and end to end through the installed script."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import relayish as rl
from relayish.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROSENBROCK = os.path.join(ROOT, "examples", "rosenbrock.rly")

SQUARE = """def @main(%x: Tensor[(2), float64]) -> float64 {
  sum(%x * %x * 3f64)
}
"""


@pytest.fixture
def program(tmp_path):
    def write(text, name="prog.rly"):
        path = tmp_path / name
        path.write_text(text)
        return str(path)
    return write


def _no_constant(name):
    raise ValueError(f"not strict JSON: {name}")


def run_main(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_main_job_end_to_end():
    """The README's command, as a user runs it on a fresh install."""
    proc = subprocess.run([sys.executable, "-m", "relayish.cli", "minimize", ROSENBROCK,
                           "--x0", "[-1.2, 1.0]"], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "iter    0" in proc.stdout and "converged after" in proc.stdout
    assert "x = [1.0, 1.0]" in proc.stdout or "x = [0.99999" in proc.stdout or "x = [1.0, 0.9999" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_minimize_json(capsys):
    code, out, err = run_main(capsys, "minimize", ROSENBROCK, "--x0", "[-1.2, 1.0]",
                              "--method", "trust-ncg", "--backend", "interpreter", "--json")
    assert code == 0
    result = json.loads(out, parse_constant=_no_constant)
    assert set(result) == {"x", "fun", "grad_norm", "n_iter", "converged", "message", "method",
                           "backend", "nfev", "ngev", "nhev", "time_s"}
    assert result["converged"] is True and result["n_iter"] > 0
    assert result["x"] == pytest.approx([1.0, 1.0], abs=1e-8)
    assert "iter" in err          # progress goes to stderr when stdout is JSON


def test_minimize_not_converged_exit_status(capsys):
    code, out, err = run_main(capsys, "minimize", ROSENBROCK, "--x0", "[-1.2, 1.0]",
                              "--method", "gd", "--max-iter", "2", "--backend", "interpreter",
                              "--json")
    assert code == 3 and json.loads(out)["converged"] is False


def test_minimize_wrong_x0_shape(capsys):
    code, out, err = run_main(capsys, "minimize", ROSENBROCK, "--x0", "[1, 2, 3]",
                              "--backend", "interpreter")
    assert code == 1
    assert err.startswith(ROSENBROCK + ": ") and "shape (3,)" in err


def test_minimize_bad_json_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["minimize", ROSENBROCK, "--x0", "[1, "])
    assert exc.value.code == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_run(capsys, program):
    path = program(SQUARE)
    code, out, err = run_main(capsys, "run", path, "[1, 2]")
    assert code == 0 and json.loads(out) == pytest.approx(15.0)
    code, out, err = run_main(capsys, "run", path, "[1, 2]", "--backend", "jax")
    assert code == 0 and json.loads(out) == pytest.approx(15.0)


def test_run_tuple_result(capsys, program):
    path = program("def @main(%x: float64) -> (float64, Tensor[(2), float64]) {\n"
                   "  (%x * 2f64, (%x, %x))\n}\n".replace("(%x, %x)", "stack((%x, %x))"))
    code, out, err = run_main(capsys, "run", path, "1.5")
    assert code == 0, err
    assert json.loads(out) == [3.0, [1.5, 1.5]]


def test_run_argument_errors(capsys, program):
    path = program(SQUARE)
    code, out, err = run_main(capsys, "run", path)
    assert code == 1 and "takes 1 argument" in err
    code, out, err = run_main(capsys, "run", path, "[1, 2, 3]")
    assert code == 1 and "shape (3,)" in err


def test_check(capsys, program):
    code, out, err = run_main(capsys, "check", program(SQUARE))
    assert code == 0
    assert out.strip().startswith("@main: fn (Tensor[(2), float64]) -> float64")


def test_fmt_round_trips(capsys, program):
    code, out, err = run_main(capsys, "fmt", program("def @main(%x: float64) -> float64 { %x*%x }"))
    assert code == 0
    import relayish as rl
    assert "%x * %x" in out
    rl.assert_structural_equal(rl.parse(out), rl.parse("def @main(%x: float64) -> float64 { %x*%x }"))


def test_grad_prints_a_program_that_parses_and_runs(capsys, program):
    import numpy as np

    import relayish as rl
    code, out, err = run_main(capsys, "grad", program(SQUARE))
    assert code == 0
    g = rl.parse(out)
    value, (dx,) = rl.evaluate(g, np.array([1.0, 2.0]))
    assert float(value) == pytest.approx(15.0)
    np.testing.assert_allclose(dx, [6.0, 12.0])


def test_grad_second_order_of_a_scalar(capsys, program):
    import numpy as np

    import relayish as rl
    path = program("def @main(%x: float64) -> float64 { %x * %x * %x }")
    code, out, err = run_main(capsys, "grad", path, "--order", "2")
    assert code == 0, err
    d2 = rl.evaluate(rl.parse(out), np.asarray(2.0))
    assert np.shape(d2) == () and float(d2) == pytest.approx(12.0)     # d2/dx2 x^3 = 6 x


def test_grad_prints_the_optimized_program_and_raw_the_transform(capsys, program):
    path = program(SQUARE)
    code, out, _ = run_main(capsys, "grad", path)
    code_raw, raw, _ = run_main(capsys, "grad", path, "--raw")
    assert code == code_raw == 0
    assert "ref(" in raw and "ref(" not in out           # partial_eval removed the adjoints
    x = np.array([1.0, 2.0])
    (v, (dx,)), (v_raw, (dx_raw,)) = rl.evaluate(rl.parse(out), x), rl.evaluate(rl.parse(raw), x)
    assert v == v_raw
    np.testing.assert_array_equal(dx, dx_raw)


def test_debug_raw_needs_grad(capsys, program):
    code, out, err = run_main(capsys, "debug", program(SQUARE), "[1, 2]", "--raw")
    assert code != 0 and "--raw goes with --grad" in err and "Traceback" not in err


def test_opt_prints_the_optimized_module(capsys, program):
    path = program("def @double(%y: float64) -> float64 { %y * 2f64 }\n"
                   "def @main(%x: float64) -> float64 {\n"
                   "  let %unused = exp(%x); @double(%x) + 0f64\n}")
    code, out, err = run_main(capsys, "opt", path)
    assert code == 0, err
    mod = rl.parse(out)
    assert "exp" not in rl.astext(mod["main"]) and "+ 0f64" not in rl.astext(mod["main"])
    assert rl.evaluate(mod, np.float64(3.0)) == 6.0
    code, out, err = run_main(capsys, "opt", path, "--passes", "inline,dead_code")
    assert code == 0 and "@double(%x)" not in out
    code, out, err = run_main(capsys, "opt", path, "--passes", "dead_code")
    assert code == 0 and "exp" not in out and "@double(%x)" in out


def test_opt_names_an_unknown_pass(capsys, program):
    with pytest.raises(SystemExit) as e:
        main(["opt", program(SQUARE), "--passes", "dead_code,nope"])
    assert e.value.code == 2
    assert "unknown pass 'nope'" in capsys.readouterr().err


def test_parse_error_format(capsys, program):
    path = program("def @main(%x: float64) -> float64 {\n  %x +* 2f64\n}\n")
    code, out, err = run_main(capsys, "check", path)
    assert code == 1
    first = err.splitlines()[0]
    assert first.startswith(f"{path}:2:")
    line, column = first[len(path) + 1:].split(":")[:2]
    assert int(line) == 2 and int(column) > 0
    assert "Traceback" not in err


def test_type_error_format(capsys, program):
    path = program("def @main(%x: float64) -> float64 {\n  %x + 1f32\n}\n")
    code, out, err = run_main(capsys, "check", path)
    assert code == 1
    assert err.startswith(path + ":") and "dtype" in err
    assert "Traceback" not in err


def test_missing_file(capsys, tmp_path):
    missing = str(tmp_path / "nope.rly")
    code, out, err = run_main(capsys, "fmt", missing)
    assert code == 1 and err.startswith(missing + ": cannot read")


def test_error_exit_status_through_the_script(program):
    path = program("def @main(%x: float64) -> float64 {\n  %x +* 2f64\n}\n")
    proc = subprocess.run([sys.executable, "-m", "relayish.cli", "fmt", path],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"{path}:2:") and "Traceback" not in proc.stderr


def test_usage_without_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2


def test_type_error_points_at_the_line_and_column(capsys, program):
    path = program("def @main(%x: Tensor[(3), float32]) {\n"
                   "  let %y = %x * 2f;\n"
                   "  let %z = sum(%y, axis=3);\n"
                   "  %z\n"
                   "}\n")
    code, _, err = run_main(capsys, "check", path)
    assert code == 1
    assert err.startswith(f"{path}:3:12: sum: axis 3 is out of range")


# ---- grad --order N: the N-th derivative tensor ---------------------------------------------

CUBIC = """def @main(%x: Tensor[(3), float64]) -> float64 {
  let %a = take(%x, 0);
  let %b = take(%x, 1);
  let %c = take(%x, 2);
  sum(sin(%x) * %x * %x) + %a * %b * %c * %c + exp(%a * %b)
}
"""
X0 = np.array([0.3, -1.2, 0.7])


def _cubic_jax():
    import jax.numpy as jnp
    return lambda x: (jnp.sum(jnp.sin(x) * x * x) + x[0] * x[1] * x[2] ** 2
                      + jnp.exp(x[0] * x[1]))


def _derivative_program(capsys, path, order):
    code, out, err = run_main(capsys, "grad", path, "--order", str(order))
    assert code == 0, err
    return rl.parse(out)            # the printed program is an ordinary relayish module


def test_grad_order_2_prints_the_hessian(capsys, program):
    import jax
    hess = _derivative_program(capsys, program(CUBIC), 2)
    assert str(rl.infer_type(hess)["main"].checked_type).endswith("Tensor[(3, 3), float64]")
    H = np.asarray(rl.evaluate(hess, X0))
    with jax.enable_x64(True):
        expected = np.asarray(jax.jit(jax.hessian(_cubic_jax()))(X0))
    np.testing.assert_allclose(H, expected, rtol=1e-12, atol=1e-12)
    assert not np.allclose(H.sum(axis=1), H[:, 0])      # not the old H . 1 (row sums)


def test_grad_order_3_prints_the_third_derivative_tensor(capsys, program):
    import jax
    path = program(CUBIC)
    d3 = np.asarray(rl.evaluate(_derivative_program(capsys, path, 3), X0))
    assert d3.shape == (3, 3, 3)
    with jax.enable_x64(True):
        f = _cubic_jax()
        # jitted: one compilation of the reference, not one per jax primitive run eagerly
        expected = np.asarray(jax.jit(jax.jacfwd(jax.jacfwd(jax.grad(f))))(X0))
    np.testing.assert_allclose(d3, expected, rtol=1e-10, atol=1e-12)
    # and against central differences of the printed Hessian program
    hess = _derivative_program(capsys, path, 2)
    h = 1e-5
    for k in range(3):
        e = np.eye(3)[k] * h
        fd = (np.asarray(rl.evaluate(hess, X0 + e)) - np.asarray(rl.evaluate(hess, X0 - e))) / (2 * h)
        np.testing.assert_allclose(d3[:, :, k], fd, atol=1e-6)


def test_grad_order_1_of_a_vector_is_value_and_gradient(capsys, program):
    value, (g,) = rl.evaluate(_derivative_program(capsys, program(CUBIC), 1), X0)
    import jax
    with jax.enable_x64(True):
        expected = np.asarray(jax.jit(jax.grad(_cubic_jax()))(X0))
    np.testing.assert_allclose(g, expected, rtol=1e-12)


@pytest.mark.slow
def test_grad_higher_order_of_a_matrix_input(capsys, program):
    import jax
    import jax.numpy as jnp
    path = program("def @main(%m: Tensor[(2, 2), float64]) -> float64 {\n"
                   "  sum(sin(%m) * sum(%m * %m))\n}\n")
    m0 = np.arange(4.0).reshape(2, 2) / 3
    H = np.asarray(rl.evaluate(_derivative_program(capsys, path, 2), m0))
    with jax.enable_x64(True):
        reference = jax.jit(jax.hessian(lambda m: jnp.sum(jnp.sin(m) * jnp.sum(m * m))))
        expected = np.asarray(reference(m0))
    assert H.shape == (2, 2, 2, 2)
    np.testing.assert_allclose(H, expected, rtol=1e-12, atol=1e-12)


def test_grad_higher_order_needs_one_float_tensor_and_a_scalar(capsys, program):
    path = program("def @main(%x: Tensor[(2), float64], %y: float64) -> float64 {\n"
                   "  sum(%x) * %y\n}\n")
    code, out, err = run_main(capsys, "grad", path, "--order", "3")
    assert code == 1 and out == ""
    assert err.startswith(f"{path}: grad --order 3 needs @main to take one float tensor")
    assert len(err) < 400                              # a short message, no program dump
    path = program("def @main(%x: Tensor[(2), float64]) -> Tensor[(2), float64] { %x * %x }\n")
    code, out, err = run_main(capsys, "grad", path, "--order", "2")
    assert code == 1 and "return a float scalar" in err


def test_grad_order_must_be_positive(capsys, program):
    with pytest.raises(SystemExit) as exc:
        main(["grad", program(SQUARE), "--order", "0"])
    assert exc.value.code == 2 and "--order: must be at least 1" in capsys.readouterr().err


def test_rl_derivative_and_jacobian():
    """The Python entry points behind `grad --order N`."""
    x = rl.var("x", shape=(2,), dtype="float64")
    d3 = rl.evaluate(rl.derivative(rl.Function([x], rl.sum(x * x * x)), order=3), np.ones(2))
    expected = np.zeros((2, 2, 2))
    expected[0, 0, 0] = expected[1, 1, 1] = 6.0
    np.testing.assert_allclose(d3, expected)
    J = rl.evaluate(rl.jacobian(rl.Function([x], rl.sin(x) * rl.sum(x))), np.array([0.5, 2.0]))
    xs = np.array([0.5, 2.0])
    np.testing.assert_allclose(J, np.diag(np.cos(xs)) * xs.sum() + np.sin(xs)[:, None])
    with pytest.raises(rl.GradientError, match="order must be an int of at least 1"):
        rl.derivative(rl.Function([x], rl.sum(x)), order=0)
    with pytest.raises(rl.GradientError, match="returning a float scalar"):
        rl.derivative(rl.Function([x], x), order=2)


# ---- run: arguments are checked, never converted silently -----------------------------------

MIXED = """def @main(%n: int32, %x: Tensor[(2), float64], %b: bool) -> float64 {
  if (%b) { sum(%x) * cast(%n, dtype="float64") } else { 0f64 }
}
"""


@pytest.mark.parametrize("argv, message", [
    (["10.5", "[1, 2]", "true"], "argument 1 (%n: int32): int32 takes integers, got 10.5"),
    (["true", "[1, 2]", "true"], "argument 1 (%n: int32): int32 takes integers, got true"),
    (["3", "[true, false]", "true"],
     "argument 2 (%x: Tensor[(2), float64]): float64 takes numbers, got true"),
    (["3", "[1, 2]", "1"], "argument 3 (%b: bool): bool takes true or false, got 1"),
    (["3000000000", "[1, 2]", "true"], "argument 1 (%n: int32): 3000000000 is out of the range"),
    (["3", "[1, [2]]", "true"], "argument 2 (%x: Tensor[(2), float64]): the nested lists are "
                                "not rectangular"),
])
def test_run_rejects_arguments_of_the_wrong_kind(capsys, program, argv, message):
    path = program(MIXED)
    code, out, err = run_main(capsys, "run", path, *argv)
    assert code == 1 and out == ""
    assert err.startswith(f"{path}: {message}"), err


def test_run_accepts_arguments_of_the_right_kind(capsys, program):
    code, out, err = run_main(capsys, "run", program(MIXED), "3", "[1, 2.5]", "true")
    assert code == 0, err
    assert json.loads(out) == 10.5


def test_run_output_is_strict_json(capsys, program):
    path = program("def @main(%x: Tensor[(3), float64]) -> Tensor[(3), float64] { %x * 2f64 }")
    code, out, err = run_main(capsys, "run", path, "[Infinity, NaN, 1]")   # Python's JSON
    assert code == 0, err
    # strict JSON: the non-finite numbers as the strings the command reads back
    assert json.loads(out, parse_constant=_no_constant) == ["Infinity", "NaN", 2.0]
    code, again, err = run_main(capsys, "run", path, out.strip())
    assert code == 0, err
    assert json.loads(again) == ["Infinity", "NaN", 4.0]
    code, out, err = run_main(capsys, "run", path, '["-Infinity", "inf", 1]')
    assert code == 1 and "float64 takes numbers" in err


def test_run_prints_float32_at_float32_length(capsys, program):
    path = program("def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] { %x * 1f }")
    code, out, err = run_main(capsys, "run", path, "[0.1, 3.3e-5]")
    assert code == 0, err
    assert out == "[0.1, 3.3e-05]\n"
    assert np.array_equal(np.array(json.loads(out), "float32"), np.array([0.1, 3.3e-5], "float32"))


def test_run_negative_numbers_in_exponent_form(capsys, program):
    path = program("def @main(%x: float64) -> float64 { %x * 2f64 }")
    assert run_main(capsys, "run", path, "-1e-3")[:2] == (0, "-0.002\n")
    assert run_main(capsys, "run", path, "-2.5E+2")[:2] == (0, "-500.0\n")
    code, out, err = run_main(capsys, "minimize", path, "--x0", "-1e-3", "--method", "gd",
                              "--max-iter", "0", "--backend", "interpreter", "--quiet")
    assert code == 3 and "x = -0.001" in out, err


TREE_PROGRAM = """type L[A] { C(A, L[A]), N }
def @main(%x: (float64, L[float32])) -> (float64, L[float32]) {
  let %rest = match (%x.1) { C(%a, %tail) => C(%a * 2f, %tail), N => N };
  (%x.0 + 1f64, %rest)
}
"""


def test_run_reads_back_the_tuples_and_adt_values_it_prints(capsys, program):
    path = program(TREE_PROGRAM)
    code, out, err = run_main(capsys, "run", path, '[1.5, {"C": [0.1, {"C": [2, {"N": []}]}]}]')
    assert code == 0, err
    assert json.loads(out) == [2.5, {"C": [0.2, {"C": [2.0, {"N": []}]}]}]
    code, again, err = run_main(capsys, "run", path, out.strip())
    assert code == 0 and json.loads(again) == [3.5, {"C": [0.4, {"C": [2.0, {"N": []}]}]}]
    for bad, words in [('[1.5, {"D": []}]', "has no constructor 'D'"),
                       ('[1.5, {"C": [0.1]}]', "C takes a JSON list of 2 field(s)"),
                       ('[1.5]', "is a JSON list of its 2 field(s)"),
                       ('[1.5, [0.1]]', "is a JSON object")]:
        code, out, err = run_main(capsys, "run", path, bad)
        assert code == 1 and words in err, err


def test_check_reads_the_program_from_stdin(capsys, monkeypatch):
    import io
    text = "def @main(%x: float64) -> float64 { %x * %x }\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    code, out, err = run_main(capsys, "check", "-")
    assert code == 0 and out == "@main: fn (float64) -> float64\n", err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"def @main() { %y }")))
    code, out, err = run_main(capsys, "check", "-")
    assert code == 1 and err.startswith("<stdin>:1:")


@pytest.mark.parametrize("argv", [
    ["minimize", "PATH", "--x0", "1", "--max-iter", "-1"],
    ["minimize", "PATH", "--x0", "1", "--tol", "nan"],
    ["minimize", "PATH", "--x0", "1", "--tol", "-1e-3"],
    ["minimize", "PATH", "--x0", "1", "--backend", "interpreter", "--device", "gpu"],
    ["grad", "PATH", "--order", "0"],
    ["run", "PATH", "1", "--capacity", "{\"nodes\": 0}"],
    ["run", "PATH", "1", "--capacity", "64"],
    ["run", "PATH", "1", "--capacity", "{\"nodes\": 64}"],      # the interpreter has no loops
    ["run", "PATH", "1", "--device", "gpu"],
])
def test_bad_option_values_exit_2(capsys, program, argv):
    path = program("def @main(%x: float64) -> float64 { %x * %x }")
    with pytest.raises(SystemExit) as exc:
        main([path if a == "PATH" else a for a in argv])
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_run_capacity_reaches_rl_compile(capsys, program, monkeypatch):
    import relayish.backend.api as backend_api
    seen = {}
    real = backend_api.compile

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **{**kwargs, "backend": "interpreter", "capacity": None})
    monkeypatch.setattr(backend_api, "compile", spy)
    path = program("def @main(%x: float64) -> float64 { %x * %x }")
    code, out, err = run_main(capsys, "run", path, "3", "--backend", "jax",
                              "--capacity", '{"nodes": 64, "steps": 10}')
    assert code == 0 and json.loads(out) == 9.0, err
    assert seen["capacity"] == {"nodes": 64, "steps": 10}


def test_args_npz_on_a_file_that_is_not_npz(capsys, program, tmp_path):
    path = program("def @main(%x: float64, %y: float64) -> float64 { %x * %x * %y }")
    bad = tmp_path / "data.npz"
    bad.write_text("not an archive\n")
    code, out, err = run_main(capsys, "minimize", path, "--x0", "1", "--args-npz", str(bad),
                              "--backend", "interpreter")
    assert code == 1 and f"--args-npz {bad}: not a .npz file" in err
    assert "pickle" not in err


def test_device_gpu_with_the_interpreter_says_what_the_python_api_says(capsys, program):
    with pytest.raises(rl.RelayishError) as api_error:
        rl.compile(rl.parse(SQUARE), backend="interpreter", device="gpu")
    path = program(SQUARE)
    # a combination no machine runs is a usage error (exit 2), in rl.compile's words
    with pytest.raises(SystemExit) as exc:
        main(["run", path, "[1, 2]", "--device", "gpu"])
    assert exc.value.code == 2 and str(api_error.value) in capsys.readouterr().err
    with pytest.raises(rl.RelayishError) as minimize_error:
        rl.optim.minimize(rl.parse(SQUARE), np.ones(2), backend="interpreter", device="gpu")
    assert str(minimize_error.value) == str(api_error.value)
    with pytest.raises(SystemExit) as exc:
        main(["minimize", path, "--x0", "[1, 2]", "--backend", "interpreter", "--device", "gpu"])
    assert exc.value.code == 2 and str(api_error.value) in capsys.readouterr().err


# ---- unreadable files, long messages ---------------------------------------------------------

def test_a_binary_file_is_not_utf8_text(capsys, tmp_path):
    path = tmp_path / "binary.rly"
    path.write_bytes(b"def @main() { 1 }\n\xff\xfe\x00\x01")
    for command in ("check", "fmt", "grad"):
        code, out, err = run_main(capsys, command, str(path))
        assert code == 1 and out == ""
        assert err.startswith(f"{path}: cannot read the file: not UTF-8 text"), err


def test_a_parse_error_on_a_huge_line_shows_a_window(capsys, program):
    path = program("def @main(%x: float64) -> float64 { " + "%x + " * 50000 + "+ }\n")
    code, out, err = run_main(capsys, "check", path)
    assert code == 1
    first, source, caret = err.splitlines()
    assert first.startswith(f"{path}:1:")
    assert len(source) < 300 and len(caret) < 300
    column = int(first[len(path) + 1:].split(":")[1])
    assert column > 250000
    assert source[len(caret) - 1] == "+"            # the caret points at the stray '+'


def test_overlong_message_lines_are_cut(capsys):
    from relayish.cli import _guarded
    from relayish.cli_values import MESSAGE_LINE_LIMIT

    def fail():
        raise rl.RelayishError("short line\n" + "x" * 100000)
    assert _guarded("f.rly", fail) == 1
    err = capsys.readouterr().err
    assert err.startswith("f.rly: short line\n")
    assert len(err) < MESSAGE_LINE_LIMIT + 200 and "more characters)" in err


# ---- fmt --check / --write -------------------------------------------------------------------

UNFORMATTED = "def @main(%x: float64) -> float64 { %x*%x }"


def _formatted(capsys, path):
    code, out, err = run_main(capsys, "fmt", path)
    assert code == 0, err
    return out


def test_fmt_check(capsys, program):
    messy = program(UNFORMATTED, "messy.rly")
    tidy = program(_formatted(capsys, messy), "tidy.rly")
    code, out, err = run_main(capsys, "fmt", "--check", tidy)
    assert (code, out, err) == (0, "", "")
    code, out, err = run_main(capsys, "fmt", "--check", tidy, messy)
    assert code == 1 and out == f"{messy}: not formatted\n"


def test_fmt_write(capsys, program, tmp_path):
    messy = program(UNFORMATTED, "messy.rly")
    code, out, err = run_main(capsys, "fmt", "--write", messy)
    assert code == 0 and out == f"{messy}: reformatted\n"
    text = open(messy).read()
    rl.assert_structural_equal(rl.parse(text), rl.parse(UNFORMATTED))
    assert run_main(capsys, "fmt", "--check", messy)[0] == 0
    code, out, err = run_main(capsys, "fmt", "--write", messy)      # already formatted
    assert (code, out) == (0, "")
    assert [p.name for p in tmp_path.iterdir()] == ["messy.rly"]   # no temporary file left


def test_fmt_keeps_comments(capsys, program):
    text = "// the objective\ndef @main(%x: float64) -> float64 { %x*%x }  /* square */\n"
    path = program(text)
    code, out, err = run_main(capsys, "fmt", path)
    assert code == 0 and "// the objective" in out and "/* square */" in out
    code, out, err = run_main(capsys, "fmt", "--write", path)
    assert code == 0
    written = open(path).read()
    assert written.startswith('#[version = "0.0.5"]\n// the objective\ndef @main')
    assert "/* square */" in written and "%x * %x" in written
    assert run_main(capsys, "fmt", "--check", path)[0] == 0


def test_fmt_usage(capsys, program):
    path = program(SQUARE)
    for argv in (["fmt", path, path], ["fmt", "--check", "--write", path]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    capsys.readouterr()


def test_fmt_reports_a_parse_error_per_file(capsys, program):
    good = program(SQUARE, "good.rly")
    bad = program("def @main( {", "bad.rly")
    code, out, err = run_main(capsys, "fmt", "--check", bad, good)
    assert code == 1 and err.startswith(f"{bad}:1:")


# ---- minimize: JSON, counts, args, plot ------------------------------------------------------

def test_minimize_json_is_strict_and_complete(capsys, program):
    # the objective is NaN at the start: minimize stops at once
    code, out, err = run_main(capsys, "minimize", program(SQUARE), "--x0", "[NaN, 2]",
                              "--backend", "interpreter", "--json", "--history")
    assert code == 3
    result = json.loads(out, parse_constant=_no_constant)
    assert result["fun"] == "NaN" and result["converged"] is False
    assert "not finite" in result["message"]
    for key in ("grad_norm", "nfev", "ngev", "nhev", "time_s", "history"):
        assert key in result


def test_minimize_json_history_and_counts(capsys):
    code, out, err = run_main(capsys, "minimize", ROSENBROCK, "--x0", "[-1.2, 1.0]",
                              "--backend", "interpreter", "--json", "--history", "--quiet")
    assert code == 0 and err == ""
    result = json.loads(out, parse_constant=_no_constant)
    history = result["history"]
    assert len(history) == result["n_iter"] + 1
    assert history[0]["iter"] == 0 and history[0]["step"] is None
    assert history[-1]["grad_norm"] == pytest.approx(result["grad_norm"])
    assert result["message"] == "converged: gradient norm below tol"
    assert result["nfev"] >= result["n_iter"] and result["nhev"] >= result["n_iter"]
    assert result["time_s"] > 0


def test_minimize_history_needs_json(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["minimize", ROSENBROCK, "--x0", "[-1.2, 1.0]", "--history"])
    assert exc.value.code == 2 and "--history goes with --json" in capsys.readouterr().err


def test_minimize_summary_says_the_outcome_once(capsys):
    code, out, err = run_main(capsys, "minimize", ROSENBROCK, "--x0", "[-1.2, 1.0]",
                              "--backend", "interpreter", "--quiet")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("newton: converged after ")
    assert lines[0].endswith(" iterations: gradient norm below tol")
    assert out.count("converged") == 1
    assert "nfev = " in out and "ngev = " in out and "nhev = " in out
    assert " s (setup and compilation included)" in out


LEAST_SQUARES = """def @main(%w: Tensor[(2), float64], %a: Tensor[(3, 2), float64],
           %b: Tensor[(3), float64], %scale: float64) -> float64 {
  let %r = matmul(%a, reshape(%w, newshape=[2, 1]));
  %scale * sum((reshape(%r, newshape=[3]) - %b) * (reshape(%r, newshape=[3]) - %b))
}
"""
A = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
B = np.array([1.0, 2.0, 3.0])


def _least_squares_x():
    return np.linalg.lstsq(A, B, rcond=None)[0]


def test_minimize_args_json(capsys, program):
    code, out, err = run_main(capsys, "minimize", program(LEAST_SQUARES), "--x0", "[0, 0]",
                              "--args", json.dumps([A.tolist(), B.tolist(), 0.5]),
                              "--backend", "interpreter", "--json", "--quiet")
    assert code == 0, err
    np.testing.assert_allclose(json.loads(out)["x"], _least_squares_x(), rtol=1e-8)


@pytest.mark.parametrize("by_name", [True, False])
def test_minimize_args_npz(capsys, program, tmp_path, by_name):
    npz = str(tmp_path / "data.npz")
    if by_name:
        np.savez(npz, scale=np.float64(0.5), b=B, a=A)
    else:
        np.savez(npz, A, B, np.float64(0.5))
    code, out, err = run_main(capsys, "minimize", program(LEAST_SQUARES), "--x0", "[0, 0]",
                              "--args-npz", npz, "--backend", "interpreter", "--json",
                              "--quiet")
    assert code == 0, err
    np.testing.assert_allclose(json.loads(out)["x"], _least_squares_x(), rtol=1e-8)


def test_minimize_args_errors(capsys, program, tmp_path):
    path = program(LEAST_SQUARES)
    base = ["minimize", path, "--x0", "[0, 0]", "--backend", "interpreter", "--quiet"]
    code, out, err = run_main(capsys, *base)
    assert code == 1 and "takes 3 parameter(s) after the first" in err and "--args" in err
    code, out, err = run_main(capsys, *base, "--args", json.dumps([A.tolist(), B.tolist()]))
    assert code == 1 and "3 parameter(s) after the first" in err and "2 given" in err
    code, out, err = run_main(capsys, *base, "--args",
                              json.dumps([A.tolist(), [True, False, True], 0.5]))
    assert code == 1 and "--args value 2 (%b: Tensor[(3), float64]): float64 takes numbers" in err
    npz = str(tmp_path / "data.npz")
    np.savez(npz, a=A, b=B.astype("float32"), scale=np.float64(0.5), extra=B)
    code, out, err = run_main(capsys, *base, "--args-npz", npz)
    assert code == 1 and "unknown extra" in err
    np.savez(npz, a=A, b=B.astype(bool), scale=np.float64(0.5))
    code, out, err = run_main(capsys, *base, "--args-npz", npz)
    assert code == 1 and "array b (%b: Tensor[(3), float64]): the array has dtype bool" in err
    code, out, err = run_main(capsys, *base, "--args-npz", str(tmp_path / "missing.npz"))
    assert code == 1 and "cannot read the arrays" in err
    with pytest.raises(SystemExit) as exc:
        main([*base, "--args", "{\"a\": 1}"])
    assert exc.value.code == 2 and "--args must be a JSON list" in capsys.readouterr().err


def test_minimize_x0_is_checked_like_run_arguments(capsys, program):
    code, out, err = run_main(capsys, "minimize", program(SQUARE), "--x0", "[true, false]",
                              "--backend", "interpreter")
    assert code == 1 and "--x0 (%x: Tensor[(2), float64]): float64 takes numbers" in err


def test_minimize_plot(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "progress.png"
    code, out, err = run_main(capsys, "minimize", ROSENBROCK, "--x0", "[-1.2, 1.0]",
                              "--backend", "interpreter", "--quiet", "--plot", str(png))
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_minimize_plot_without_matplotlib(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)       # import matplotlib fails
    png = tmp_path / "progress.png"
    code, out, err = run_main(capsys, "minimize", ROSENBROCK, "--x0", "[-1.2, 1.0]",
                              "--backend", "interpreter", "--plot", str(png))
    assert code == 1 and out == ""                 # checked before minimizing
    assert "--plot needs matplotlib" in err and "relayish[plot]" in err
    assert not png.exists()


# ---- --version, --help, python -m relayish, the console script -------------------------------

def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"relayish {rl.__version__}\n"


@pytest.mark.parametrize("command", ["run", "check", "fmt", "grad", "minimize"])
def test_help_shows_an_example_and_the_exit_codes(capsys, command):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert f"example:\n  relayish {command} " in out
    assert "3    minimize stopped without converging" in out and "130  interrupted" in out


def test_the_fmt_help_example_passes_on_the_shipped_examples(capsys):
    # `relayish fmt --check examples/*.rly`, as fmt --help shows it
    import glob
    files = sorted(glob.glob(os.path.join(ROOT, "examples", "*.rly")))
    assert files
    code, out, err = run_main(capsys, "fmt", "--check", *files)
    assert code == 0 and out == "" and err == ""


@pytest.mark.parametrize("text, argv, where", [
    ("def @main(%x: Tensor[(3), float64]) -> float64 {\n  let %i = 5;\n"
     "  let %y = take(%x, %i);\n  %y\n}\n", ["run", "PATH", "[1, 2, 3]"],
     "3:12: take: index 5 is out of range"),
    ("def @main(%x: Tensor[(3), float64]) -> float32 {\n  let %y = sum(%x);\n  %y\n}\n",
     ["check", "PATH"], "2:12: type mismatch in let %y = sum(%x); %y (the function's return"),
    ("type T { A, B }\ndef @main(%x: float64) -> float64 {\n"
     "  let %t = if (%x > 0f64) { A } else { B };\n  match? (%t) {\n    A => %x,\n  }\n}\n",
     ["run", "PATH", "-1.0"], "4:3: no clause matches"),
])
def test_run_time_faults_and_return_mismatches_carry_the_position(capsys, program, text, argv,
                                                                  where):
    path = program(text)
    code, out, err = run_main(capsys, *[path if a == "PATH" else a for a in argv])
    assert code == 1 and err.startswith(f"{path}:{where}"), err


def test_help_shows_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["minimize", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for default in ("(default: newton)", "(default: 1e-08)", "(default: 100)", "(default: cpu)"):
        assert default in out
    with pytest.raises(SystemExit):
        main(["grad", "--help"])
    out = capsys.readouterr().out
    assert "Tensor[s * N]" in out and "Hessian" in out and "(default: 1)" in out


def test_python_dash_m_relayish_and_the_console_script(program):
    path = program("def @main(%x: float64) -> float64 {\n  %x +* 2f64\n}\n")
    script = os.path.join(os.path.dirname(sys.executable), "relayish")
    for argv in ([sys.executable, "-m", "relayish"], [script]):
        proc = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and proc.stdout == f"relayish {rl.__version__}\n"
        proc = subprocess.run([*argv, "check", path], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 1
        assert proc.stderr.startswith(f"{path}:2:") and "Traceback" not in proc.stderr


def test_interrupt_and_closed_stdout(capsys, program, monkeypatch):
    import relayish.cli as cli
    path = program(SQUARE)

    def interrupted(path):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "_load", interrupted)
    code, out, err = run_main(capsys, "check", path)
    assert code == 130 and err == "relayish: interrupted\n"

    def closed(path):
        raise BrokenPipeError
    monkeypatch.setattr(cli, "_load", closed)
    monkeypatch.setattr(sys, "stdout", sys.stdout)      # main replaces it with /dev/null
    assert main(["grad", path]) == 0


def test_a_byte_order_mark_is_not_part_of_the_program(capsys, tmp_path):
    path = tmp_path / "bom.rly"
    path.write_bytes(b"\xef\xbb\xbf" + SQUARE.encode())
    code, out, err = run_main(capsys, "check", str(path))
    assert code == 0, err
