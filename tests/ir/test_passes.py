"""The pass layer: Pass, FunctionPass, Sequential, rl.optimize and check mode."""

import numpy as np
import pytest

import relayish as rl
from relayish.ir.expr import Let
from relayish.ir.visitor import ExprMutator, let_chain
from strategies import CHAIN_LENGTHS


def _square():
    x = rl.var("x", shape=(3,), dtype="float64")
    return rl.Function([x], rl.sum(rl.tanh(x) * x))


def _module():
    return rl.parse("""
def @double(%y: float64) -> float64 { %y * 2f64 }
def @main(%x: float64) -> float64 { let %z = @double(%x); %z + 1f64 }
""")


class _Copy(ExprMutator):
    """Rebuilds every Let (so the output shares no chain with the input) without recursing."""

    def visit_Let(self, e):
        bindings, body = let_chain(e)
        body = self.visit(body)
        for var, value in reversed(bindings):
            body = Let(var, self.visit(value), body)
        return body


def _copy_pass():
    return rl.FunctionPass(lambda func, mod: _Copy().visit(func), name="copy")


def _identity():
    return rl.FunctionPass(lambda func, mod: func, name="identity", preserves={"typed"})


class _Breaks(rl.Pass):
    """Makes @main ill-typed: adds a float32 constant to its float64 result."""

    name = "breaks-types"

    def run(self, mod):
        out = mod.copy()
        main = mod["main"]
        out["main"] = rl.Function(main.params, main.body + rl.const(1.0, "float32"))
        return out


class _Log(rl.Pass):
    def __init__(self, name, log, **kw):
        super().__init__(name, **kw)
        self.log = log

    def run(self, mod):
        self.log.append((self.name, all(getattr(f, "_checked_type", None) is not None
                                        for f in mod.functions.values())))
        return mod


# ---- identity ---------------------------------------------------------------------------------

@pytest.mark.parametrize("passes", [None, [], [_identity()], [_copy_pass()],
                                    [_identity(), _copy_pass(), _identity()]])
def test_identity_pipeline_gives_an_equal_function(passes):
    f = _square()
    g = rl.optimize(f, passes=passes, check=True)
    assert isinstance(g, rl.Function)
    rl.assert_structural_equal(g, f)
    np.testing.assert_allclose(rl.evaluate(g, np.ones(3)), rl.evaluate(f, np.ones(3)))


@pytest.mark.parametrize("passes", [[_identity()], [_copy_pass(), _identity()]])
def test_identity_pipeline_gives_an_equal_module(passes):
    mod = _module()
    before = dict(mod.items())
    out = rl.optimize(mod, passes=passes, check=True)
    assert isinstance(out, rl.Module) and out is not mod
    assert [gv.name_hint for gv in out.global_vars] == ["double", "main"]
    for gv, func in before.items():
        rl.assert_structural_equal(out[gv.name_hint], func)
    assert dict(mod.items()) == before           # the input module is not changed
    assert rl.evaluate(out, 3.0) == 7.0


def test_the_default_pipeline_runs_the_optimizing_passes():
    names = [p.name for p in rl.ir.passes.DEFAULT_PASSES]
    assert names == ["partial_eval", "dead_code", "cse", "simplify", "dead_code"]
    f = _square()
    rl.assert_structural_equal(rl.optimize(f), f)     # nothing to remove: the same program


def test_rl_passes_lists_passes_that_exist():
    for name in rl.passes.__all__:
        value = getattr(rl.passes, name)
        assert isinstance(value, rl.Pass) or isinstance(value, type), name
    assert {"dead_code", "to_anf", "from_anf"} <= set(rl.passes.__all__)


def test_a_pass_called_directly_keeps_the_kind():
    f, mod = _square(), _module()
    assert isinstance(_copy_pass()(f), rl.Function)
    assert isinstance(_copy_pass()(mod), rl.Module)
    rl.assert_structural_equal(_copy_pass()(mod)["main"], mod["main"])


# ---- check mode -------------------------------------------------------------------------------

def test_check_mode_names_the_pass_that_broke_typing():
    pipeline = [_identity(), _Breaks(), _identity()]
    with pytest.raises(rl.TypeCheckError, match=r"pass 'breaks-types' made the program "
                                                r"ill-typed: add: operands must have the same dtype"):
        rl.optimize(_square(), passes=pipeline, check=True)
    # without check mode the broken program comes back, and fails when checked later
    broken = rl.optimize(_square(), passes=pipeline)
    with pytest.raises(rl.TypeCheckError):
        rl.infer_type(broken)


def test_check_mode_names_a_pass_inside_a_nested_sequential():
    inner = rl.Sequential([_identity(), _Breaks()], name="inner")
    outer = rl.Sequential([_copy_pass(), inner], name="outer", check=True)
    with pytest.raises(rl.TypeCheckError, match="pass 'outer/inner/breaks-types'"):
        outer(_module())


def test_check_mode_blames_the_input_not_a_pass_for_an_ill_typed_input():
    x = rl.var("x", shape=(3,), dtype="float64")
    bad = rl.Function([x], x + rl.const(1.0))
    with pytest.raises(rl.TypeCheckError) as info:
        rl.optimize(bad, passes=[_identity()], check=True)
    assert "pass" not in str(info.value)


# ---- composition and bookkeeping ----------------------------------------------------------------

def test_sequential_runs_its_passes_in_order():
    log = []
    seq = rl.Sequential([_Log("a", log), rl.Sequential([_Log("b", log), _Log("c", log)]),
                         _Log("d", log)], name="abcd")
    seq(_square())
    assert [name for name, _ in log] == ["a", "b", "c", "d"]
    log.clear()
    rl.optimize(_module(), passes=[_Log("z", log), _Log("y", log)])
    assert [name for name, _ in log] == ["z", "y"]


def test_a_pass_requiring_typed_gets_a_typed_module():
    log = []
    needs = dict(requires={"typed"})
    rl.optimize(_module(), passes=[_Log("untyped-ok", log), _Log("typed", log, **needs)])
    assert log == [("untyped-ok", False), ("typed", True)]


def test_a_pass_that_does_not_preserve_types_makes_the_manager_check_again():
    log = []
    rl.optimize(_square(), passes=[_Log("t1", log, requires="typed"), _copy_pass(),
                                   _Log("t2", log, requires="typed")])
    assert log == [("t1", True), ("t2", True)]


def test_requires_preserves_and_provides_compose():
    anf = _Log("to-anf-like", [], provides={"anf"}, preserves={"typed"})
    uses = _Log("uses-anf", [], requires={"anf", "typed"}, preserves={"anf", "typed"})
    seq = rl.Sequential([anf, uses])
    assert seq.requires == {"typed"}
    assert seq.provides == {"anf"}
    assert seq.preserves == {"typed"}
    assert rl.Sequential([]).preserves >= {"typed"}
    # a requirement nothing provides is refused, naming the pass and the property
    with pytest.raises(rl.RelayishError, match=r"pass 'uses-anf' requires 'anf'"):
        rl.optimize(_square(), passes=[uses])
    rl.optimize(_square(), passes=[anf, uses], check=True)
    # a pass that does not preserve 'anf' invalidates it for the next one
    with pytest.raises(rl.RelayishError, match="requires 'anf'"):
        rl.optimize(_square(), passes=[anf, _copy_pass(), uses])


def test_a_str_is_one_property_not_its_letters():
    p = _Log("p", [], requires="typed")
    assert p.requires == {"typed"}


# ---- mistakes -----------------------------------------------------------------------------------

def test_mistakes_are_relayish_errors():
    f = _square()
    with pytest.raises(rl.RelayishError, match="optimize takes a Function or a Module"):
        rl.optimize(f.body)
    with pytest.raises(rl.RelayishError, match="not a pass"):
        rl.optimize(f, passes=[lambda m: m])
    with pytest.raises(rl.RelayishError, match="list of passes"):
        rl.Sequential(_identity())
    with pytest.raises(rl.RelayishError, match="returned .*must return a Module"):
        rl.optimize(f, passes=[_Returns(f)])
    with pytest.raises(rl.RelayishError, match="turned @main into .*returns a Function"):
        rl.optimize(f, passes=[rl.FunctionPass(lambda func, mod: func.body, name="unwrap")])
    with pytest.raises(rl.RelayishError, match="callable"):
        rl.FunctionPass("not a function")
    with pytest.raises(rl.RelayishError, match="does not define run"):
        rl.optimize(f, passes=[rl.Pass("bare")])
    with pytest.raises(rl.RelayishError, match="property name"):
        rl.Pass("p", requires=[1])
    with pytest.raises(rl.RelayishError, match="added the globals @helper"):
        rl.optimize(f, passes=[_AddsGlobal()])


class _Returns(rl.Pass):
    name = "returns-function"

    def __init__(self, value):
        super().__init__()
        self.value = value

    def run(self, mod):
        return self.value


class _AddsGlobal(rl.Pass):
    name = "adds-global"

    def run(self, mod):
        out = mod.copy()
        out["helper"] = mod["main"]
        return out


# ---- deep programs ------------------------------------------------------------------------------

def _chain(n):
    sb = rl.ScopeBuilder()
    x = rl.var("x", dtype="float64")
    acc = x
    for _ in range(n):
        acc = sb.let("v", acc * 1.0)
    sb.ret(acc)
    return rl.Function([x], sb.get())


@pytest.mark.parametrize("n", CHAIN_LENGTHS)
def test_deep_let_chain_through_optimize_with_check(n):
    f = _chain(n)
    g = rl.optimize(f, passes=[_identity(), rl.Sequential([_copy_pass()]), _identity()], check=True)
    assert g is not f and len(let_chain(g.body)[0]) == n
    rl.assert_structural_equal(g, f)
