"""The architecture's two checkable rules (issue 11, "Done when"): the import graph of all of
relayish/ has no cycle, and no module is over 1,000 lines.

The graph (tests/import_graph.py) is read from the source: every module of every subpackage,
every import statement including those inside functions (a lazy import still ties two modules
together). Per-package checks with more detail live beside the packages
(tests/ad/test_ad_imports.py, tests/optim/test_import_graph.py).
"""
from import_graph import describe_cycles, module_files, module_graph, strongly_connected

MAX_LINES = 1000

# The layer map of notes/architecture.md: which of relayish's parts each part may import.
# ad and backend sit side by side and never import each other (AD output is an ordinary
# program; a backend runs any program); ad reads op records through ir's registry, not ops/.
MAY_IMPORT = {
    "errors": set(),
    "ir": {"errors"},
    "ops": {"ir", "errors"},
    "ad": {"ir", "errors"},
    "backend": {"ops", "ir", "errors"},
    "optim": {"backend", "ad", "ops", "ir", "errors"},
    "debug": {"backend", "ad", "ops", "ir", "errors"},
    "eager": {"debug", "optim", "backend", "ad", "ops", "ir", "errors"},
    # jax and PyTorch in and out: reads programs into ir, runs them through ad and backend
    "interop": {"backend", "ad", "ops", "ir", "errors"},
}


def test_relayish_has_no_import_cycle():
    graph = module_graph("relayish")
    # the walk sees every subpackage (a graph of relayish/__init__.py alone would pass)
    assert {"relayish.ir.expr", "relayish.ad.api", "relayish.optim.minimize",
            "relayish.backend.api", "relayish.cli"} <= graph.keys()
    assert not strongly_connected(graph), "import cycles:\n" + describe_cycles(graph)


def _part(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_imports_run_down_the_layer_map():
    upward = sorted(f"{a} imports {b}" for a, bs in module_graph("relayish").items()
                    for b in bs
                    if _part(a) in MAY_IMPORT and _part(b) not in (_part(a), None)
                    and _part(b) not in MAY_IMPORT[_part(a)])
    assert not upward, "imports against the layer map:\n" + "\n".join(upward)


def test_no_module_is_over_a_thousand_lines():
    lengths = {name: len(path.read_text().splitlines())
               for name, path in module_files("relayish").items()}
    too_long = {name: n for name, n in lengths.items() if n > MAX_LINES}
    assert not too_long, "modules over 1,000 lines: " + ", ".join(
        f"{name} ({n})" for name, n in sorted(too_long.items()))


def test_the_graph_sees_lazy_relative_and_dynamic_imports(tmp_path, monkeypatch):
    """The reader counts what Python would import, wherever the statement is."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from . import b\n")
    (package / "a.py").write_text("def f():\n    from pkg.sub.b import g\n    return g\n")
    (package / "sub" / "b.py").write_text("from ..a import f\nfrom pkg import c\n")
    (package / "c.py").write_text("import importlib\nM = importlib.import_module('pkg.a')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = module_graph("pkg")
    assert graph == {"pkg": set(), "pkg.sub": {"pkg.sub.b"}, "pkg.a": {"pkg.sub.b"},
                     "pkg.sub.b": {"pkg.a", "pkg.c"}, "pkg.c": {"pkg.a"}}
    assert strongly_connected(graph) == [["pkg.a", "pkg.c", "pkg.sub.b"]]
