"""Random programs of the shapes relayish/backend/jax/dynamic_rule.py compiles as ONE loop
(issue 17), as text, with inputs of random structure: the generator of
tests/fuzz/test_dynamic_loops.py.

    program = draw(programs(kind))       # "right", "left", "loop", "nested", "under_if",
                                         # "keeping", "fold_loop"
    args = program.inputs(rng, size)     # weights (w, W, E) and a structure of `size` nodes

Every program has the weights `%w: (3)`, `%W: (3, 3)`, `%E: (5, 3)` (an embedding read through
int32 word fields, `take(%E, %i, axis=0)`) as its first parameters and one structure: a list or
a random tree ADT of 2-3 constructors (folded by a right fold, or walked by a left fold with an
accumulator), or a vector iterated by a traced-condition loop (alone, with an inner loop in
each step: `nested`, two of them in the branches of a traced if: `under_if`, or one whose
iterations keep x when a traced test fails: `keeping`; a right fold whose clauses run such a
loop: `fold_loop`). Programs are type-correct by
construction. Clause bodies are small random expressions over the recursive results, the
fields and the weights; each clause result is squashed (tanh, sin, sigmoid) so that values
stay in range over 20 nodes or 30 trips, and a traced `if` compares sums offset by 0.3701 (as
tests/strategies.py's offset_comparisons) so that no condition is a tie a last-ulp difference
between numpy and XLA could flip.
"""
import numpy as np
from hypothesis import strategies as st

import relayish as rl

VEC = "Tensor[(3), float64]"
WEIGHT_PARAMS = [f"%w: {VEC}", "%W: Tensor[(3, 3), float64]", "%E: Tensor[(5, 3), float64]"]
WEIGHTS = ", ".join(WEIGHT_PARAMS)
WEIGHT_ARGS = ["%w", "%W", "%E"]
FIELD_TYPES = {"t": VEC, "i": "int32"}         # "c": a child, of the ADT's own type
LIST = [[], ["t", "c"]]                        # Nil, Cons(Tensor, L)
SQUASH = ("tanh", "sin", "sigmoid")
COMPARE = (">", "<", ">=", "<=")
OFFSET = "0.3701f64"
LOSSES = ("sum(%h)", "sum(%h * %h)", "sum(%h * %w)", "sum(matmul(%W, %h))")


class Program:
    """A generated program: its text, its kind, the ADT's constructors (field kinds by tag;
    None for a loop), whether @main takes an initial state %h0 after the weights and whether
    the gradient is also taken with respect to the structure (reverse AD's lifted ADT)."""

    def __init__(self, text, kind, ctors, h0=False, data_grad=False):
        self.text, self.kind, self.ctors, self.h0 = text, kind, ctors, h0
        self.data_grad = data_grad
        self.mod = None

    def module(self):
        if self.mod is None:
            self.mod = rl.infer_type(rl.parse(self.text))
        return self.mod

    def weights(self, rng):
        return [rng.normal(size=3), rng.normal(size=(3, 3)) * 0.5, rng.normal(size=(5, 3))]

    def structure(self, rng, size):
        """The last argument: a structure of `size` nodes (a list of size - 1 elements), or
        for a loop a vector whose trip count grows with size (0 for size 0)."""
        if self.kind == "loop":     # |x|^2 from about 1e-8 (no trip) to 1 (some 30 trips)
            return rng.normal(size=3) * 10.0 ** (-4 + size * 0.13)
        return ctor_value(self.module(), self.ctors, rng, size)

    def inputs(self, rng, size):
        state = [rng.normal(size=3)] if self.h0 else []
        return self.weights(rng) + state + [self.structure(rng, size)]

    @property
    def argnums(self):
        """The gradient's arguments: the weights (and the initial state, the loop's vector,
        the structure where data_grad is set)."""
        return tuple(range(3 + self.h0 + (self.kind == "loop" or self.data_grad)))


def ctor_value(mod, ctors, rng, size):
    """A value of the ADT with about `size` nodes (exactly, where the constructors' child
    counts allow): a constructor without children at the bottom, random splits above."""
    names = _ctor_names(ctors)
    constructors = [mod.get_constructor(n) for n in names]
    base = [j for j, fs in enumerate(ctors) if "c" not in fs]

    def build(n):
        fits = [j for j, fs in enumerate(ctors) if 0 < fs.count("c") <= n - 1]
        j = int(rng.choice(fits if fits else base))
        k = ctors[j].count("c")
        parts = []
        if k:
            cuts = sorted(rng.choice(np.arange(1, n - 1), k - 1, replace=False)) if k > 1 else []
            parts = list(np.diff([0, *cuts, n - 1]))
        fields = []
        for kind in ctors[j]:
            if kind == "t":
                fields.append(rng.normal(size=3))
            elif kind == "i":
                fields.append(np.int32(rng.integers(5)))
            else:
                fields.append(build(int(parts.pop(0))))
        return rl.ConstructorValue(constructors[j], fields)
    return build(max(size, 1))


def _ctor_names(ctors):
    return ["Nil", "Cons"] if ctors == LIST else [f"K{j}" for j in range(len(ctors))]


def adt_text(ctors):
    name = "L" if ctors == LIST else "T"
    parts = []
    for ctor, fields in zip(_ctor_names(ctors), ctors):
        types = [FIELD_TYPES.get(f, name) for f in fields]
        parts.append(f"{ctor}({', '.join(types)})" if types else ctor)
    return name, f"type {name} {{ {', '.join(parts)} }}\n"


class Clauses:
    """Draws clause bodies: let-chains of small vector expressions over a scope (a list of
    vector-valued texts) that grows with each let."""

    def __init__(self, draw, let_ifs):
        self.draw, self.let_ifs, self.count = draw, let_ifs, 0
        self.favored = []      # the recursive results or the state: an atom is one half the time

    def pick(self, options):
        return self.draw(st.sampled_from(options))

    def fresh(self, stem):
        self.count += 1
        return f"%{stem}{self.count}"

    def vector(self, scope, depth=2):
        form = self.pick(("atom", "atom", "unary", "binary", "binary", "matmul", "scale")
                         if depth else ("atom",))
        sub = lambda: self.vector(scope, depth - 1)   # noqa: E731
        if form == "atom":
            favored = [v for v in self.favored if v in scope]
            return self.pick(favored if favored and self.draw(st.booleans()) else scope)
        if form == "unary":
            return f"{self.pick(SQUASH)}({sub()})"
        if form == "binary":
            return f"({sub()} {self.pick(('+', '-', '*'))} {sub()})"
        if form == "matmul":
            return f"matmul(%W, {sub()})"
        return f"({sub()} * {self.pick(('0.5f64', '-1.5f64', '2f64'))})"

    def exit(self, scope, state, depth=2):
        """A vector expression, never a bare weight or field (`state` may be): reverse AD's
        output of a recursion whose exit returns a value it did not make unchanged is a
        CompileError on jax (the strict xfail test_an_exit_returning_a_value_unchanged of
        test_dynamic_loops.py)."""
        v = self.vector(scope, depth)
        return f"sin({v})" if v.startswith("%") and v != state else v

    def squashed(self, scope):
        return f"{self.pick(SQUASH)}({self.vector(scope)})"

    def condition(self, scope):
        return (f"sum({self.vector(scope, 1)}) + {OFFSET} {self.pick(COMPARE)} "
                f"sum({self.vector(scope, 1)})")

    def lets(self, scope, most=2):
        """0-`most` `let %vK = ...;` lines, each adding its variable to `scope`; a traced if
        among them when let_ifs is set."""
        lines = []
        for _ in range(self.draw(st.integers(0, most))):
            v = self.fresh("v")
            if self.let_ifs and self.draw(st.integers(0, 2)) == 0:
                rhs = (f"if ({self.condition(scope)}) {{ {self.vector(scope, 1)} }} "
                       f"else {{ {self.vector(scope, 1)} }}")
            else:
                rhs = self.vector(scope)
            lines.append(f"let {v} = {rhs};")
            scope.append(v)
        return lines

    def result(self, scope):
        """A clause's result: squashed, or a traced if of two squashed branches."""
        if self.draw(st.integers(0, 3)) == 0:
            return (f"if ({self.condition(scope)}) {{ {self.squashed(scope)} }} "
                    f"else {{ {self.squashed(scope)} }}")
        return self.squashed(scope)


def _field_scope(fields, names):
    """The vector texts a clause's fields give: a tensor field, or its word's embedding row."""
    return [n if f == "t" else f"take(%E, {n}, axis=0)"
            for f, n in zip(fields, names) if f != "c"]


def _pattern(ctor, names):
    return f"{ctor}({', '.join(names)})" if names else ctor


@st.composite
def adts(draw):
    """A list, or a tree ADT of 2-3 constructors: one or two without children (fields: tensors
    and int32 words), the others with 1-2 children among 0-2 such fields."""
    if draw(st.booleans()):
        return LIST
    n = draw(st.integers(2, 3))
    bases = draw(st.integers(1, n - 1))
    ctors = []
    for j in range(n):
        fields = draw(st.lists(st.sampled_from(("t", "i")), max_size=2))
        if j >= bases:
            fields += ["c"] * draw(st.integers(1, 2))
            fields = draw(st.permutations(fields))
        ctors.append(list(fields))
    return ctors


def _call(name, position, argument):
    args = [*WEIGHT_ARGS]
    args.insert(position, argument)
    return f"@{name}({', '.join(args)})"


@st.composite
def right_folds(draw, let_ifs=True, pre_lets=True, data_grad=True, inner=False):
    """`@f(weights, %t)` (the ADT parameter at a random position among the weights), one clause
    per constructor: its recursive calls in a random order, pure lets, a squashed result.
    @main folds the structure once, or twice with other weights (two loops, two backward
    loops chained). With `inner`, each clause with children then runs `@inner`, a traced-
    condition loop, from a squashed vector of its scope: a loop in a fold's clause."""
    ctors = draw(adts())
    adt, type_text = adt_text(ctors)
    gen = Clauses(draw, let_ifs)
    position = draw(st.integers(0, 3))
    params = [*WEIGHT_PARAMS]
    params.insert(position, f"%t: {adt}")
    clauses = []
    for ctor, fields in zip(_ctor_names(ctors), ctors):
        names = [gen.fresh("f") for _ in fields]
        scope = ["%w", *_field_scope(fields, names)]
        # a pure let may come before the calls (reverse AD's output of such a clause is not a
        # fold: its gradient unrolls, one trace per shape)
        lines = gen.lets(scope, most=1) if pre_lets and draw(st.integers(0, 3)) == 0 else []
        children = [n for f, n in zip(fields, names) if f == "c"]
        for child in draw(st.permutations(children)):
            r = gen.fresh("r")
            gen.favored.append(r)
            lines.append(f"let {r} = {_call('f', position, child)};")
            scope.append(r)
        if inner and children:
            lines.append(f"let %s = @inner({', '.join(WEIGHT_ARGS)}, {gen.squashed(scope)});")
            scope.append("%s")
            gen.favored.append("%s")
        lines += gen.lets(scope)
        body = " ".join([*lines, gen.result(scope)])
        clauses.append(f"    {_pattern(ctor, names)} => {{ {body} }}")
    fold = _call("f", position, "%t")
    if draw(st.integers(0, 3)) == 0:      # two folds of one structure, with other weights
        fold = f"{fold} * {fold.replace('%w', '(%w * 0.5f64)').replace('%W', 'sin(%W)')}"
    text = (type_text + (_loop_text(draw, "inner") if inner else "")
            + f"def @f({', '.join(params)}) -> {VEC} {{\n  match (%t) {{\n"
            + ",\n".join(clauses) + "\n  }\n}\n"
            + f"def @main({WEIGHTS}, %t: {adt}) -> float64 {{\n"
            + f"  let %h = {fold}; {draw(st.sampled_from(LOSSES))}\n}}\n")
    return Program(text, "right", ctors, data_grad=data_grad and draw(st.booleans()))


@st.composite
def left_folds(draw, let_ifs=True, data_grad=True):
    """`@walk(weights, %h, %t)`: each constructor with children goes on with one child (or
    picks one by a traced if), with a squashed new state, or stops early by a traced if; one
    without children returns an expression of the state. The initial state is a constant
    (then no traced if), tanh(%w) or a parameter %h0."""
    ctors = draw(adts())
    adt, type_text = adt_text(ctors)
    gen = Clauses(draw, let_ifs)
    gen.favored = ["%h"]
    init = draw(st.sampled_from(('zeros(shape=[3], dtype="float64")', "tanh(%w)", "%h0")))
    clauses = []

    def walk(state, child):
        return f"@walk({', '.join(WEIGHT_ARGS)}, {state}, {child})"
    for ctor, fields in zip(_ctor_names(ctors), ctors):
        names = [gen.fresh("f") for _ in fields]
        scope = ["%h", "%w", *_field_scope(fields, names)]
        lines = gen.lets(scope)
        children = [n for f, n in zip(fields, names) if f == "c"]
        if not children:
            body = gen.exit(scope, "%h")
        else:
            step = gen.fresh("n")
            lines.append(f"let {step} = {gen.squashed(scope)};")
            go = walk(step, draw(st.sampled_from(children)))
            # from a constant state, a traced if in the walk's gradient fails to trace (the
            # strict xfail test_a_left_fold_from_a_constant_state_with_a_traced_if)
            choice = 0 if init.startswith("zeros") else draw(st.integers(0, 2))
            if choice == 1:          # pick the child by a traced condition
                other = walk(gen.squashed(scope), draw(st.sampled_from(children)))
                body = f"if ({gen.condition(scope)}) {{ {go} }} else {{ {other} }}"
            elif choice == 2:        # stop early
                body = f"if ({gen.condition(scope)}) {{ {go} }} else {{ {gen.exit(scope, '%h')} }}"
            else:
                body = go
        clauses.append(f"    {_pattern(ctor, names)} => {{ {' '.join([*lines, body])} }}")
    h0 = init == "%h0"
    params = WEIGHTS + (f", %h0: {VEC}" if h0 else "")
    text = (type_text + f"def @walk({WEIGHTS}, %h: {VEC}, %t: {adt}) -> {VEC} {{\n"
            + "  match (%t) {\n" + ",\n".join(clauses) + "\n  }\n}\n"
            + f"def @main({params}, %t: {adt}) -> float64 {{\n"
            + f"  let %h = {walk(init, '%t')}; {draw(st.sampled_from(LOSSES))}\n}}\n")
    return Program(text, "left", ctors, h0=h0, data_grad=data_grad and draw(st.booleans()))


@st.composite
def tail_loops(draw, let_ifs=True):
    """`@loop(weights, %x) = if |x|^2 > 1e-6 { @loop(step) } else { exit }` where the step
    shrinks x by a factor in [0.4, 0.8] (a random expression through a sigmoid) plus a random
    term no larger than 0.05 |x|: every input stops, after more trips the larger it is. The
    inputs are small (|x| < 2): a sin(4 x^2) of a large x makes the gradient so ill-conditioned
    (|dloss/dx| ~ 1e4 over a dozen trips) that numpy's and XLA's last-ulp differences grow
    past rtol 1e-9 (the compiled program then agrees with jax.grad of the unrolled loop)."""
    text = _loop_text(draw, "loop", let_ifs=let_ifs)
    text += (f"def @main({WEIGHTS}, %x: {VEC}) -> float64 {{\n"
             f"  let %h = @loop({', '.join(WEIGHT_ARGS)}, %x); "
             f"{draw(st.sampled_from(LOSSES))}\n}}\n")
    return Program(text, "loop", None)


def _loop_scope(draw, let_ifs=False):
    """(clause drawer, scope) of a loop's body over %x: x (favored), w and an embedding row."""
    gen = Clauses(draw, let_ifs)
    gen.favored = ["%x"]
    word = draw(st.integers(0, 4))
    return gen, ["%x", "%w", f"take(%E, {word}, axis=0)"]


def _shrinking_step(gen, scope):
    """x times a factor in [0.4, 0.8] plus a term no larger than 0.05 |x| (tail_loops)."""
    return (f"%x * (0.4f64 + 0.4f64 * sigmoid({gen.vector(scope)})) "
            f"+ sin(%x) * (0.05f64 * {gen.squashed(scope)})")


def _loop_text(draw, name, inner=None, let_ifs=False):
    """A traced-condition loop `@name(weights, %x)` (tail_loops); with `inner` (the name of
    another such loop) its step first runs that loop from a vector made of %x, whose result
    joins the step's scope: a loop inside a loop."""
    gen, scope = _loop_scope(draw, let_ifs)
    lines = []
    if inner is not None:
        start = gen.pick(("%x", "tanh(%x)", "(%x * 1.5f64)", "sin(%x * %w)"))
        lines.append(f"let %s = @{inner}({', '.join(WEIGHT_ARGS)}, {start});")
        scope.append("%s")
        gen.favored.append("%s")
    lines += gen.lets(scope)
    step = _shrinking_step(gen, scope)
    exit_ = gen.exit(["%x", "%w"], "%x", depth=1)
    call = f"@{name}({', '.join(WEIGHT_ARGS)}, "
    return (f"def @{name}({WEIGHTS}, %x: {VEC}) -> {VEC} {{\n"
            f"  if (sum(%x * %x) > 1e-6f64) {{ {' '.join(lines)} {call}{step}) }}\n"
            f"  else {{ {exit_} }}\n}}\n")


@st.composite
def nested_loops(draw):
    """@loop's every step runs @inner, a traced-condition loop of its own, to its end (trips of
    both vary with the input): a nested while loop."""
    text = _loop_text(draw, "inner") + _loop_text(draw, "loop", inner="inner")
    text += (f"def @main({WEIGHTS}, %x: {VEC}) -> float64 {{\n"
             f"  let %h = @loop({', '.join(WEIGHT_ARGS)}, %x); "
             f"{draw(st.sampled_from(LOSSES))}\n}}\n")
    return Program(text, "loop", None)


@st.composite
def loops_under_ifs(draw):
    """@main runs @loop or @other, two traced-condition loops, in the branches of a traced if
    (each loop a while loop inside a branch of the switch)."""
    gen = Clauses(draw, False)
    scope = ["%x", "%w"]
    text = _loop_text(draw, "loop") + _loop_text(draw, "other")
    branches = [f"{{ let %h = @{name}({', '.join(WEIGHT_ARGS)}, {gen.vector(scope, 1)}); "
                f"{draw(st.sampled_from(LOSSES))} }}" for name in ("loop", "other")]
    text += (f"def @main({WEIGHTS}, %x: {VEC}) -> float64 {{\n"
             f"  if ({gen.condition(scope)}) {branches[0]} else {branches[1]}\n}}\n")
    return Program(text, "loop", None)


@st.composite
def keeping_loops(draw):
    """A state-keeping loop: each iteration computes a step %y of x (tail_loops' shrinking
    step) and goes on with it when a random traced comparison holds, else keeps x and halves
    %s; it stops when |x|^2 <= 1e-6 or %s <= 0.01 (at most 7 kept iterations in a row)."""
    gen, scope = _loop_scope(draw)
    lines = gen.lets(scope)
    lines.append(f"let %y = {_shrinking_step(gen, scope)};")
    scope.append("%y")
    exit_ = gen.exit(["%x", "%w"], "%x", depth=1)
    call = f"@loop({', '.join(WEIGHT_ARGS)}, "
    text = (f"def @loop({WEIGHTS}, %x: {VEC}, %s: float64) -> {VEC} {{\n"
            f"  if (logical_and(sum(%x * %x) > 1e-6f64, %s > 0.01f64)) {{ {' '.join(lines)}\n"
            f"    if ({gen.condition(scope)}) {{ {call}%y, %s) }}\n"
            f"    else {{ {call}%x, %s * 0.5f64) }}\n"
            f"  }} else {{ {exit_} }}\n}}\n"
            f"def @main({WEIGHTS}, %x: {VEC}) -> float64 {{\n"
            f"  let %h = {call}%x, 1f64); {draw(st.sampled_from(LOSSES))}\n}}\n")
    return Program(text, "loop", None)


def programs(kind, **options):
    """The strategy of programs of `kind` ("right", "left", "loop"); options: let_ifs (a traced
    if bound by a let, not only as a clause's result), pre_lets (right folds: pure lets before
    the recursive calls), data_grad (folds: sometimes the gradient for the structure too)."""
    return {"right": right_folds, "left": left_folds, "loop": tail_loops,
            "nested": nested_loops, "under_if": loops_under_ifs,
            "fold_loop": lambda **o: right_folds(inner=True, pre_lets=False, **o),
            "keeping": keeping_loops}[kind](**options)
