"""The relayish command, through main(argv) and end to end through the installed script."""
import json
import os
import subprocess
import sys

import pytest

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
    result = json.loads(out)
    assert set(result) == {"x", "fun", "n_iter", "converged"}
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


def test_grad_second_order(capsys, program):
    import numpy as np

    import relayish as rl
    path = program("def @main(%x: float64) -> float64 { %x * %x * %x }")
    code, out, err = run_main(capsys, "grad", path, "--order", "2")
    assert code == 0, err
    value, (d2,) = rl.evaluate(rl.parse(out), np.asarray(2.0))
    assert float(value) == pytest.approx(12.0)      # d/dx x^3 = 3 x^2
    assert float(d2) == pytest.approx(12.0)         # d2/dx2 x^3 = 6 x


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
