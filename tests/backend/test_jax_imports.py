"""relayish/backend/jax/ is a package of one-concern modules in layers (issue 11): each module
imports only modules listed before it in the package docstring's map, so there is no cycle, and
importing the package does not import jax (that happens at the first compile)."""
import subprocess
import sys

from import_graph import find_cycle, package_graph

# the order of the map in relayish/backend/jax/__init__.py
LAYERS = ["values", "zeros", "dots", "limits", "index_checks", "joins", "batching", "dynamic_rule",
          "dynamic_tables", "dynamic_defer", "dynamic_rows", "dynamic_left", "dynamic_loops",
          "dynamic_tail", "dynamic_nest", "trace", "dtypes", "devices", "arguments", "function"]


def test_the_jax_package_import_graph_is_layered():
    graph = package_graph("relayish.backend.jax")
    assert set(graph) == set(LAYERS)
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"
    for k, module in enumerate(LAYERS):
        assert graph[module] <= set(LAYERS[:k]), (module, graph[module] - set(LAYERS[:k]))


def test_the_public_names_and_no_leftover_module():
    import importlib.util

    from relayish.backend.jax import TRACE_LIMITS, JaxFunction, compile_jax
    assert callable(compile_jax) and isinstance(TRACE_LIMITS, dict) and JaxFunction
    for old in ("relayish.backend.jax_backend", "relayish.backend.jax_zeros"):
        assert importlib.util.find_spec(old) is None, old


def test_importing_the_package_does_not_import_jax():
    code = "import sys, relayish.backend.jax; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
