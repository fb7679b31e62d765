"""relayish/ad/ has no import cycle (issue 11): api.py holds every entry point and imports the
transforms (reverse.py, forward.py); no transform imports api.py, not even inside a function
(forward.py's hvp used to call back into api.gradient that way)."""
from import_graph import find_cycle, package_graph


def test_the_ad_import_graph_is_acyclic():
    graph = package_graph("relayish.ad")
    assert {"api", "forward", "reverse"} <= graph.keys()
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_the_entry_points_sit_above_the_transforms():
    graph = package_graph("relayish.ad")
    assert {"forward", "reverse"} <= graph["api"]
    assert not any("api" in graph[m] for m in graph if m != "api")


def test_every_public_entry_point_is_in_api():
    from relayish.ad import api, forward
    for name in ("jvp", "hvp", "hvp_forward_over_reverse", "hvp_reverse", "hessian",
                 "hessian_forward", "jacobian", "derivative", "gradient", "grad", "vjp"):
        assert callable(getattr(api, name)), name
        assert not hasattr(forward, name), f"forward.py still defines {name}"


def test_the_shared_modules_sit_below_both_transforms():
    # structure.py (the structure map), rewrite.py (node replacement) and twins.py (the type
    # map) serve both modes, lifted.py (reverse mode's type L) and reverse_scopes.py (the
    # let-chains it emits into) the reverse modules: no transform is above them;
    # reverse_entry (the entry builder) builds on reverse
    graph = package_graph("relayish.ad")
    for shared in ("structure", "rewrite", "twins", "lifted", "reverse_scopes"):
        assert not graph[shared] & {"api", "forward", "reverse", "reverse_entry"}, shared
    assert "reverse" in graph["reverse_entry"] and "reverse_entry" not in graph["reverse"]
    assert "reverse_entry" in graph["api"]
