"""The terminal front end's command loop in-process (relayish/debug/terminal.py `interact` on
text streams): what a newcomer meets in the second hour (issue 28). tests/debug/test_terminal.py
drives the real command through a pseudo-terminal."""
import io

from relayish.cli import debug_target
from relayish.debug.terminal import interact

COST = """\
def @cost(%w: Tensor[(2), float64]) -> float64 {
  let %s = sum(%w * %w);
  %s
}

def @main(%x: Tensor[(2), float64]) -> float64 {
  let %y = %x * 2f64;
  @cost(%y)
}
"""


def session(tmp_path, *commands, text=COST):
    path = tmp_path / "cost.rly"
    path.write_text(text)
    out = io.StringIO()
    commands = io.StringIO("".join(c + "\n" for c in commands))
    interact(debug_target(str(path), [[1.0, 2.0]]), commands, out)
    return out.getvalue()


def test_p_of_an_unknown_variable_lists_the_variables(tmp_path):
    out = session(tmp_path, "p %undefined", "p %yy")
    assert "*** no variable %undefined in the program" in out
    assert "free_var" not in out and "parse_expr" not in out
    assert "(did you mean %y?)" in out


def test_set_inside_a_called_function_names_that_function(tmp_path):
    out = session(tmp_path, "n", "s", "set %w [1, 2, 3]")
    assert "%w in @cost is a Tensor[(2), float64]" in out
    assert "@main expects" not in out


def test_locals_prints_each_type_once(tmp_path):
    out = session(tmp_path, "n", "locals")
    line = next(ln for ln in out.splitlines() if "%y" in ln and "min" in ln)
    assert line.count("float64[2]") == 1, line


def test_bt_shows_the_main_frame_a_tail_call_replaced(tmp_path):
    out = session(tmp_path, "n", "s", "bt")
    frames = [ln for ln in out.splitlines() if " in @" in ln and "cost.rly:" in ln]
    assert any("in @main (tail call)" in ln and ":8 " in ln for ln in frames), frames
    assert frames[-1].startswith("> ") and frames[-1].endswith("cost.rly:2 in @cost"), frames
