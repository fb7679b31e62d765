"""The import graph of one relayish package, for the tests that keep it acyclic (issue 11).

The graph counts every import statement, those inside functions too: a lazy import still ties
the two modules together (ad/api.py and ad/forward.py, optim/methods.py and optim/device_loop.py
used to import each other that way). Imported as `import_graph` (tests/conftest.py puts tests/
on the path).
"""
import ast
import importlib
import pathlib


def package_graph(package):
    """{module stem: the sibling modules it imports, anywhere in it} for a package like
    "relayish.ad" (its top-level modules, __init__ left out)."""
    root = pathlib.Path(importlib.import_module(package).__file__).parent
    modules = {p.stem for p in root.glob("*.py")}
    return {p.stem: _imports_of(p, package, modules) for p in root.glob("*.py")
            if p.stem != "__init__"}


def _imports_of(path, package, modules):
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            # from relayish.ad import forward, or from relayish.ad.forward import jvp
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if name.startswith(package + "."):
                head = name[len(package) + 1:].split(".")[0]
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
