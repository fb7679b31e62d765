"""The import graph of relayish, for the tests that keep it acyclic (issue 11).

`module_graph()` maps every module of relayish/ (each .py file in every subpackage; a
package's __init__.py is the package's own name) to the relayish modules it imports. Every
import statement counts, those inside functions too: a lazy import still ties the two modules
together (ad/api.py and ad/forward.py, optim/methods.py and optim/device_loop.py used to import
each other that way). An edge goes to the module that is named, not to the packages around it:
`from relayish.ir.expr import Var` is an edge to relayish.ir.expr, `from relayish.ir import
expr` too (expr is a module), `from relayish import parse` to relayish (the package's
__init__). Relative imports are resolved; `importlib.import_module("relayish...")` with a
constant name counts as an import.

`package_graph("relayish.ad")` is the same graph seen inside one package (stems of its
top-level modules), `strongly_connected` lists the cycles (each strongly connected set) and
`find_cycle` one cycle as a path. All walks are loops, not recursion. Imported as
`import_graph` (tests/conftest.py puts tests/ on the path).
"""
import ast
import importlib.util
import pathlib

from relayish.ir.analysis import strongly_connected_components


def module_files(package="relayish"):
    """{dotted module name: path} for every .py file under the package's folder (found
    without importing it: the graph is read from the source alone)."""
    top, *below = package.split(".")
    root = pathlib.Path(importlib.util.find_spec(top).origin).parent.joinpath(*below)
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = (package,) + path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def module_graph(package="relayish"):
    """{module: the modules of `package` it imports, anywhere in it}."""
    files = module_files(package)
    return {name: _imports_of(name, path, files) for name, path in files.items()}


# (module, path, mtime, size) -> its imports: the import-graph tests of every package read the
# same files, and parsing all of relayish is most of each test's cost; a file edited between
# two calls has a new mtime and is read again
_IMPORTS = {}


def _imports_of(name, path, files):
    stat = path.stat()
    key = (name, str(path), stat.st_mtime_ns, stat.st_size, frozenset(files))
    if key not in _IMPORTS:
        _IMPORTS[key] = frozenset(_read_imports(name, path, files))
    return set(_IMPORTS[key])


def _read_imports(name, path, files):
    is_package = path.name == "__init__.py"
    here = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, here)
            # `from pkg import mod` names the module; `from mod import name` the module itself
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base
                       for alias in node.names]
        elif _is_import_module_call(node):
            targets = [node.args[0].value]
        else:
            continue
        for target in targets:
            target = _known_prefix(target, files)
            if target is not None and target != name:
                found.add(target)
    return found


def _absolute(module, level, here):
    if not level:
        return module or ""
    parts = here.split(".")
    parts = parts[:len(parts) - (level - 1)]
    return ".".join(parts + ([module] if module else []))


def _is_import_module_call(node):
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module" and len(node.args) == 1
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str))


def _known_prefix(target, files):
    """The longest prefix of the dotted name that is a module of the package (`import a.b.c`
    names a.b.c; a name below a module, such as a.b.func, is that module)."""
    parts = target.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in files:
            return candidate
        parts.pop()
    return None


def package_graph(package):
    """{module stem: the sibling modules it imports, anywhere in it} for a package like
    "relayish.ad" (its top-level modules, __init__ left out; an import of a module below a
    sibling subpackage is not counted)."""
    prefix = package + "."
    root = package.split(".")[0]
    files = module_files(root)
    graph = {name: _imports_of(name, path, files) for name, path in files.items()}
    stems = {name[len(prefix):] for name, path in files.items()
             if name.startswith(prefix) and "." not in name[len(prefix):]
             and path.name != "__init__.py"}
    result = {}
    for stem in stems:
        heads = {target[len(prefix):].split(".")[0] for target in graph[prefix + stem]
                 if target.startswith(prefix)}
        result[stem] = (heads & stems) - {stem}
    return result


def strongly_connected(graph):
    """The strongly connected sets of more than one node (each an import cycle), each sorted,
    in sorted order (relayish's own Tarjan: ir/analysis.py)."""
    ordered = {node: sorted(graph.get(node, ())) for node in sorted(graph)}
    return sorted(sorted(c) for c in strongly_connected_components(ordered) if len(c) > 1)


def describe_cycles(graph):
    """Each cycle as text: its modules and, for each, the members it imports."""
    lines = []
    for component in strongly_connected(graph):
        members = set(component)
        lines.append(", ".join(component))
        lines += [f"    {m} -> {', '.join(sorted(graph[m] & members))}" for m in component]
    return "\n".join(lines)


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
