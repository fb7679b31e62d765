"""tests/default_run.py, the table of cases the default run leaves to `-m slow`: each entry
names a test that exists, no file is named twice (a dict literal would keep the second), and
conftest marks exactly what it names."""
import ast
import os
import re

import pytest

from default_run import LEFT_TO_SLOW, leaves_to_slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_no_file_is_named_twice():
    with open(os.path.join(ROOT, "tests", "default_run.py"), encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    table = next(node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                 and getattr(node.targets[0], "id", None) == "LEFT_TO_SLOW")
    files = [key.value for key in table.keys]
    assert len(files) == len(set(files)), [f for f in files if files.count(f) > 1]


@pytest.mark.parametrize("path", sorted(LEFT_TO_SLOW))
def test_every_entry_names_a_test_of_its_file(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
        defined = set(re.findall(r"^def (test_\w+)", fh.read(), re.M))
    for name in LEFT_TO_SLOW[path]:
        assert name.split("[", 1)[0] in defined, f"{path} has no {name}"


def test_entries_match_by_name_parametrization_or_its_start():
    path = "tests/backend/test_jax_dynamic_tail.py"
    assert leaves_to_slow(f"{path}::test_the_loops_hessian_is_one_compilation_for_every_trip_count")
    assert leaves_to_slow(f"{path}::test_traced_condition_loop_gradient_is_one_compilation_for_"
                          "every_trip_count[float32-0.0002]")
    assert not leaves_to_slow(f"{path}::test_traced_condition_loop_gradient_is_one_compilation_"
                              "for_every_trip_count[float64-1e-10]")
    assert not leaves_to_slow("tests/test_cli.py::test_run")
