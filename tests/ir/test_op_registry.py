"""The op registry where Relay's defines the behaviour (issue 28): a second registration of a
name is refused unless asked for, and an exception a user's type rule raises reaches the caller
as itself (a TypeCheckError that is also an instance of its class)."""
from __future__ import annotations

import pytest

import relayish as rl
from relayish.ir.op import get_op, registered


def same_type(types, attrs):
    return types[0]


def test_registering_a_name_twice_is_an_error_unless_override():
    with registered("test_twice", 1, type_rule=same_type, impl=lambda xp, x: x) as op:
        with pytest.raises(rl.RelayishError, match="'test_twice' is already registered; "
                                                   "pass override=True"):
            rl.register_op("test_twice", 1, type_rule=same_type, impl=lambda xp, x: x + 1)
        assert get_op("test_twice") is op and op.impl(None, 1) == 1      # unchanged
        again = rl.register_op("test_twice", 1, type_rule=same_type,
                               impl=lambda xp, x: x + 1, override=True)
        assert again is op and op.impl(None, 1) == 2                      # replaced in place
    with pytest.raises(rl.RelayishError, match="already registered"):
        rl.register_op("add", 2)                  # a built-in op too
    assert get_op("add").type_rule is not None


class RuleBroke(Exception):
    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


@pytest.mark.parametrize("exc", [RuleBroke("no such shape", 7), ValueError("bad rank"),
                                 KeyError("axis"), rl.RelayishError("a relayish complaint")])
def test_an_exception_from_a_type_rule_reaches_the_caller_as_itself(exc):
    def rule(types, attrs):
        raise exc
    with registered("test_broken_rule", 1, type_rule=rule, impl=lambda xp, x: x) as op:
        x = rl.var("x", shape=(2,))
        with pytest.raises(type(exc)) as info:
            rl.infer_type(rl.Function([x], op(x)))
    err = info.value
    assert isinstance(err, rl.TypeCheckError)          # and a type error of relayish's
    assert "test_broken_rule(%x)" in str(err)          # naming the call
    if isinstance(exc, RuleBroke):
        assert err.code == 7 and "RuleBroke: no such shape" in str(err)
        assert isinstance(err.__cause__, RuleBroke)    # the rule's own traceback is kept


def test_a_type_rules_own_type_check_error_keeps_its_class():
    class ShapeError(rl.TypeCheckError):
        pass

    def rule(types, attrs):
        raise ShapeError("shapes disagree")
    with registered("test_shape_rule", 1, type_rule=rule, impl=lambda xp, x: x) as op:
        x = rl.var("x", shape=(2,))
        with pytest.raises(ShapeError, match="shapes disagree\n  in test_shape_rule"):
            rl.infer_type(rl.Function([x], op(x)))
