"""`run.explain()`: the jax backend's rule for recursion over runtime data, in words (issue 17).
Each case is checked two ways: the line names what the compiler does (a node table, a loop, or
unrolled and why), and the compilation agrees (`node_tables()`, the trace count over inputs of
different structure)."""
import numpy as np
import pytest

import relayish as rl

LIST = """
type List[a] { Cons(a, List[a]), Nil }
"""
MAIN = """
def @main(%W: Tensor[(2, 2), float64], %xs: List[Tensor[(2), float64]]) -> float64 {
  sum(@read(%W, %xs))
}
"""


def _read(cons_clause):
    return rl.parse(LIST + """
def @read(%W: Tensor[(2, 2), float64], %xs: List[Tensor[(2), float64]]) -> Tensor[(2), float64] {
  match (%xs) {
    Nil => zeros(shape=[2], dtype="float64"),
    """ + cons_clause + """
  }
}
""" + MAIN)


FOLD = _read("Cons(%x, %rest) => { let %h = @read(%W, %rest); tanh(matmul(%W, %h) + %x) }")


def _traces(mod, lengths=(1, 3, 6)):
    """The trace count after running lists of these lengths (one capacity for all)."""
    run = rl.compile(mod, backend="jax", capacity={"nodes": 16})
    for n in lengths:
        xs = rl.list_value(mod, list(np.full((n, 2), 0.5)))
        np.testing.assert_allclose(run(np.eye(2), xs), rl.evaluate(mod, np.eye(2), xs),
                                   rtol=1e-12)
    return run.trace_count


def test_a_fold_over_a_list_argument_is_a_node_table():
    run = rl.compile(FOLD, backend="jax")
    assert run.explain().splitlines() == [
        "parameter %xs: List[Tensor[(2), float64]]: a node table, one loop for every structure "
        "(folded by @read)",
        "@read: a fold over List[Tensor[(2), float64]]"]
    assert list(run.node_tables()) == [1] and _traces(FOLD) == 1


def test_the_gradient_program_is_a_map_then_a_fold():
    text = rl.compile(rl.grad(FOLD), backend="jax").explain()
    assert "parameter %xs: List[Tensor[(2), float64]]: a node table" in text
    assert "@ad_lift_List: a fold over List[Tensor[(2), float64]], mapping it to " \
           "List[(Tensor[(2), float64], ref(Tensor[(2), float64]))]" in text
    assert "@read_ad: a fold over List[(Tensor[(2), float64], ref(Tensor[(2), float64]))]" in text


REFUSED = {
    "an argument that changes": (
        "Cons(%x, %rest) => { let %h = @read(%W * 0.5f64, %rest); tanh(matmul(%W, %h) + %x) }",
        "clause Cons: each child must be the argument of exactly one `let %r = @read(...)`, "
        "passing its other parameters unchanged"),
    "a call after an effect": (
        "Cons(%x, %rest) => { let %r = ref(%x); let %u = (%r := %x * 2f64); "
        "let %h = @read(%W, %rest); tanh(matmul(%W, %h) + !%r) }",
        "clause Cons: @read is called on %rest after a binding with effects (a reference or a "
        "function call): the recursive calls must come first"),
    "a child used twice": (
        "Cons(%x, %rest) => { let %h = @read(%W, %rest); let %g = @read(%W, %rest); %h + %g }",
        "clause Cons: each child must be the argument of exactly one `let %r = @read(...)`"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_recursion_the_rule_refuses_says_why_and_unrolls(case):
    clause, reason = REFUSED[case]
    mod = _read(clause)
    run = rl.compile(mod, backend="jax")
    lines = run.explain().splitlines()
    assert lines[0] == ("parameter %xs: List[Tensor[(2), float64]]: unrolled, one trace per "
                        "structure: @main uses it other than as the argument a fold matches on "
                        "(it is passed to @read: below)")
    assert lines[1].startswith("@read: unrolled at trace time: not a fold (" + reason)
    assert run.node_tables() == {} and _traces(mod) == 3


def test_mutual_recursion_and_a_missing_clause_are_named():
    mutual = rl.parse(LIST + """
def @even(%xs: List[Tensor[(2), float64]]) -> Tensor[(2), float64] {
  match (%xs) { Nil => zeros(shape=[2], dtype="float64"),
                Cons(%x, %rest) => { let %h = @odd(%rest); %h + %x } }
}
def @odd(%xs: List[Tensor[(2), float64]]) -> Tensor[(2), float64] {
  match (%xs) { Nil => zeros(shape=[2], dtype="float64"),
                Cons(%x, %rest) => { let %h = @even(%rest); %h * %x } }
}
def @main(%xs: List[Tensor[(2), float64]]) -> float64 { sum(@even(%xs)) }
""")
    text = rl.compile(mutual, backend="jax").explain()
    assert "@even: unrolled at trace time: not a fold: it is mutually recursive (a function " \
           "it calls calls it again)" in text
    wildcard = rl.parse(LIST + """
def @read(%xs: List[Tensor[(2), float64]]) -> Tensor[(2), float64] {
  match (%xs) { Cons(%x, %rest) => { let %h = @read(%rest); %h + %x },
                _ => zeros(shape=[2], dtype="float64") }
}
def @main(%xs: List[Tensor[(2), float64]]) -> float64 { sum(@read(%xs)) }
""")
    assert "@read: unrolled at trace time: not a fold (clause _: its pattern is not a " \
           "constructor with a variable or _ for each field)" in \
           rl.compile(wildcard, backend="jax").explain()


def test_a_structure_main_uses_otherwise_or_of_closures_unrolls():
    other = rl.parse(LIST + """
def @read(%xs: List[Tensor[(2), float64]]) -> Tensor[(2), float64] {
  match (%xs) { Nil => zeros(shape=[2], dtype="float64"),
                Cons(%x, %rest) => { let %h = @read(%rest); %h + %x } }
}
def @main(%xs: List[Tensor[(2), float64]]) -> float64 {
  let %first = match (%xs) { Cons(%x, _) => sum(%x), Nil => 0f64 };
  sum(@read(%xs)) + %first
}
""")
    lines = rl.compile(other, backend="jax").explain().splitlines()
    assert lines == ["parameter %xs: List[Tensor[(2), float64]]: unrolled, one trace per "
                     "structure: @main uses it other than as the argument a fold matches on",
                     "@read: a fold over List[Tensor[(2), float64]]"]
    closures = rl.parse(LIST + """
def @apply(%fs: List[fn (float64) -> float64], %x: float64) -> float64 {
  match (%fs) { Nil => %x, Cons(%f, %rest) => { let %y = @apply(%rest, %x); %f(%y) } }
}
def @main(%fs: List[fn (float64) -> float64]) -> float64 { @apply(%fs, 1f64) }
""")
    text = rl.compile(closures, backend="jax").explain()
    assert "parameter %fs: List[fn (float64) -> float64]: unrolled, one trace per structure: a " \
           "node table holds tensors and children, and List[fn (float64) -> float64] has a " \
           "field of type fn (float64) -> float64" in text
    assert "@apply: unrolled at trace time: not a fold: clause Cons: a field of type fn " \
           "(float64) -> float64 (a fold's fields are tensors, tuples of them, references to " \
           "them, or children)" in text


def test_loops_and_programs_without_recursion():
    loop = rl.parse("""
def @shrink(%x: Tensor[(2), float64]) -> Tensor[(2), float64] {
  if (sum(%x * %x) > 0.01f64) { @shrink(%x * 0.5f64) } else { %x }
}
def @main(%x: Tensor[(2), float64]) -> float64 { sum(@shrink(%x)) }
""")
    assert rl.compile(loop, backend="jax").explain() == \
        "@shrink: a while loop where it is called with traced arguments (a tail recursion)"
    x = rl.var("x", shape=(2,), dtype="float64")
    assert rl.compile(rl.Function([x], x * x), backend="jax").explain() == \
        "no recursion: the program is traced as it is"


def test_explain_lists_only_the_functions_the_program_calls():
    # an unused recursive global (as the prelude brings many) is no part of the program
    mod = rl.parse(LIST + """
def @length(%xs: List[Tensor[(2), float64]]) -> int32 {
  match (%xs) { Nil => 0, Cons(_, %rest) => 1 + @length(%rest) }
}
def @read(%W: Tensor[(2, 2), float64], %xs: List[Tensor[(2), float64]]) -> Tensor[(2), float64] {
  match (%xs) {
    Nil => zeros(shape=[2], dtype="float64"),
    Cons(%x, %rest) => { let %h = @read(%W, %rest); tanh(matmul(%W, %h) + %x) }
  }
}
""" + MAIN)
    lines = rl.compile(mod, backend="jax").explain().splitlines()
    assert lines == rl.compile(FOLD, backend="jax").explain().splitlines()
    assert not any("@length" in line for line in lines)
