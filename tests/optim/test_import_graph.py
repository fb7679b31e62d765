"""relayish/optim/ has no import cycle (issue 11): modules import down a layer map, never back.

The graph counts every import statement, those inside functions too (a lazy import still ties
the two modules together: methods.py and device_loop.py used to import each other that way)."""
import ast
import pathlib

import relayish.optim

PACKAGE = "relayish.optim"
ROOT = pathlib.Path(relayish.optim.__file__).parent


def imports_of(path):
    """The relayish.optim modules a module imports, anywhere in it."""
    modules = {p.stem for p in ROOT.glob("*.py")}
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            # from relayish.optim import newton, or from relayish.optim.newton import step
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if name.startswith(PACKAGE + "."):
                head = name[len(PACKAGE) + 1:].split(".")[0]
                if head in modules:
                    found.add(head)
    found.discard(path.stem)
    return found


def find_cycle(graph):
    """A cycle of graph (a list of nodes, first == last), or None; iterative DFS."""
    state = {}
    for root in sorted(graph):
        if root in state:
            continue
        stack = [(root, iter(sorted(graph[root])))]
        path = [root]
        state[root] = "open"
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                state[node] = "done"
            elif state.get(child) == "open":
                return path[path.index(child):] + [child]
            elif child not in state:
                state[child] = "open"
                path.append(child)
                stack.append((child, iter(sorted(graph.get(child, ())))))
    return None


def optim_graph():
    return {p.stem: imports_of(p) for p in ROOT.glob("*.py") if p.stem != "__init__"}


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
