"""relayish/optim/ has no import cycle (issue 11): modules import down a layer map, never back.

The graph counts every import statement, those inside functions too (a lazy import still ties
the two modules together: methods.py and device_loop.py used to import each other that way)."""
from import_graph import find_cycle, package_graph


def optim_graph():
    return package_graph("relayish.optim")


def test_the_optim_import_graph_is_acyclic():
    graph = optim_graph()
    assert {"newton", "methods", "problem", "objective"} <= graph.keys()
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_newton_is_written_once():
    """The step function lives in newton.py; the jax drivers and the other methods use it."""
    graph = optim_graph()
    assert "newton" in graph["newton_xla"] and "newton" in graph["methods"]
    assert not graph["newton"] & {"methods", "newton_xla", "problem", "hessian"}


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
