"""Checkpointed reverse mode for a loop over a list or a Nat: `rl.gradient(mod, checkpoint=k)`
where `@main` is a tail recursion (a foldl) over one of its parameters:

    def @main(%xs: List[T], %s: S1, .., %w: C1, ..) -> R {
      match (%xs) {
        Cons(%h, %t) => @main(%t, <new %s, ..>, %w, ..),    // %w passed on unchanged
        Nil => <result of %s, .., %w, ..>
      }
    }

(any ADT with one constructor without fields and one with a field of the ADT itself: Nat's
`S(%m) => @main(%m, ..)` too). The parameters passed on unchanged (C) and the ones the loop
changes (S) are tensors or tuples of tensors. Without checkpointing, the gradient of n
iterations keeps n iterations' values in the backpropagator closure chain. With checkpoint=k
the output module runs:

    forward   @ck_fwd: the loop, plain, k iterations at a time (@ck_run over @ck_take(l, k));
              before each chunk it pushes (the list there, the state there) on a stack
              (type ck_stack): n / k entries, the list entries sharing the input's cells
    result    the gradient of the Nil clause's value at the last state (rl.gradient's seed)
    backward  @ck_back pops the stack: the vjp of @ck_run from that entry's state over the
              entry's k elements gives the cotangent of the state before it, of those k
              elements (appended in front of the list's gradient so far) and of C (summed)

so the backward pass keeps n / k states and one chunk's tape: k = sqrt(n) keeps O(sqrt n), and
each iteration runs twice (once plain, once in its chunk's vjp). The output is an ordinary
module (type-checks, prints, parses, differentiates again); its gradient values and type are
rl.gradient's. rl.vjp(mod, checkpoint=k): the same forward, then (the result, a
backpropagator) whose calls run @ck_back from the vjp of the Nil clause's value (the closure
holds the stack; each call pops its own copy of it). checkpoint="sqrt": k = ceil(sqrt(n)),
n found by one more walk down the list when the program runs (@ck_sqrt_len; k is an argument
of the driver functions).

checkpoint="revolve" or ("revolve", s): Griewank's binomial schedule over the n iterations, its
splits computed when the program runs (@ck_mid: ir/passes/checkpoint.py's split in int32; s =
ceil(log2 n) + 1 by default). @ck_main runs the loop once for the final state (the result's
seed), then @ck_rev(l, s.., m, snapshots, g, ..) reverses m iterations: a leaf is one
iteration's vjp; otherwise it advances to mid (@ck_run over @ck_take(l, mid)), reverses the
rest with one snapshot fewer while its frame keeps the state (the snapshot), and the first
part by a tail call. O(s) states at once; each iteration runs at most t + 2 times.

The helpers are written as relayish text (types printed by their printer) and the module is
parsed back with them: the user's ADT definitions come through the same text.
"""
from __future__ import annotations

from relayish.errors import GradientError
from relayish.ir.analysis import free_vars
from relayish.ir.expr import (Call, Clause, Function, GlobalVar, Match, PatternConstructor,
                              PatternVar, Tuple)
from relayish.ir.module import Module
from relayish.ir.types import TupleType, is_tensor_tree
from relayish.ir.visitor import ExprMutator, let_chain

__all__ = ["checkpointed_loop_gradient", "checkpointed_loop_vjp"]


def checkpointed_loop_gradient(mod, k, vjp, gradient):
    """The checkpointed gradient Module of a type-checked Module whose @main is a loop (module
    text); `vjp`, `gradient`: the AD entry points (api.py's)."""
    return _program(mod, k, vjp, gradient, False)


def checkpointed_loop_vjp(mod, k, vjp, gradient):
    """The checkpointed vjp Module (rl.vjp's type and values) of a Module whose @main is a
    loop: the forward pushes the stack as above and returns (the result, a backpropagator
    holding the stack) whose every call pops a copy of it (the stack is an immutable list)."""
    return _program(mod, k, vjp, gradient, True)


def _program(mod, k, vjp, gradient, as_vjp):
    from relayish.ir.text.parser import parse
    from relayish.ir.text.printer import astext
    check_chunk(k)
    loop = _Loop(mod)
    src = mod.copy()
    src["ck_run"] = loop.run_function()
    src["ck_result"] = loop.result_function()
    lists, driver = loop.helpers(k, as_vjp)
    first = parse(astext(src) + "\n" + lists)     # the user's types, @ck_run, the list helpers
    run_mod = _without(first, "main")
    run_mod["main"] = first["ck_run"]
    derived = vjp(run_mod)
    out = _without(derived, "main")
    out["ck_vjp_run"] = derived["main"]            # nothing calls a vjp entry: a plain rename
    if as_vjp and not is_tensor_tree(mod["main"].checked_type.ret_type):
        raise GradientError(f"vjp needs a function returning tensors or tuples of tensors; "
                            f"this loop returns {mod['main'].checked_type.ret_type}")
    result_grad = (vjp if as_vjp else gradient)(first["ck_result"])
    if isinstance(result_grad, Module):
        raise GradientError("checkpoint=: the loop's result needs a module to differentiate")
    out["ck_result_vjp" if as_vjp else "ck_result_grad"] = result_grad
    for gv, func in first.functions.items():
        if gv.name_hint in HELPERS:
            out[gv] = func
    second = parse(astext(out) + "\n" + driver)
    final = _without(second, "ck_main")
    final["main"] = second["ck_main"]
    return final


def check_chunk(k):
    """A loop's `checkpoint=`: a positive int k, "sqrt" (k = ceil(sqrt(n)) for the list's
    length n, found when the program runs: one more walk down the list), or "revolve" /
    ("revolve", s) (a tail loop: the binomial schedule, its splits computed at run time)."""
    if revolve_snapshots(k) is not False:
        return
    if k != "sqrt" and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
        raise GradientError(f"checkpoint= for a loop over a list or Nat takes a positive int k "
                            f"(iterations a chunk), \"sqrt\", \"revolve\" or (\"revolve\", "
                            f"snapshots); got {k!r}")


def revolve_snapshots(spec):
    """None for "revolve" (s = ceil(log2 n) + 1 at run time), s for ("revolve", s), False
    for any other value."""
    if spec == "revolve" and isinstance(spec, str):
        return None
    if isinstance(spec, tuple) and len(spec) == 2 and spec[0] == "revolve" and \
            isinstance(spec[1], int) and not isinstance(spec[1], bool) and spec[1] >= 1:
        return spec[1]
    return False


def chunk_text(k, lst) -> str:
    """The text of k for the list `lst` (text): the int, or ceil(sqrt(length)) computed."""
    return str(k) if k != "sqrt" else f"@ck_sqrt_len({lst})"


def _without(mod, name) -> Module:
    out = Module()
    for data in mod.type_definitions.values():
        out.add_type(data)
    for gv, func in mod.functions.items():
        if gv.name_hint != name:
            out[gv] = func
    return out


class _Loop:
    """The shape of @main (module text), or a GradientError naming what does not fit."""

    def __init__(self, mod):
        main = mod["main"]
        self.main = main
        body = main.body
        if not isinstance(body, Match) or len(body.clauses) != 2 or \
                not any(body.data is p for p in main.params):
            raise self.refuse("its body is not a match on one of its parameters with two clauses")
        self.li = next(i for i, p in enumerate(main.params) if body.data is p)
        step = base = None
        for clause in body.clauses:
            if _walk_calls(clause.rhs):
                step = clause
            else:
                base = clause
        if step is None or base is None:
            raise self.refuse("one clause must end the loop and the other call @main")
        if not (isinstance(base.lhs, PatternConstructor) and not base.lhs.patterns and
                isinstance(step.lhs, PatternConstructor)):
            raise self.refuse("the clauses must match the two constructors of its ADT")
        self.base_ctor, self.step_ctor = base.lhs.constructor, step.lhs.constructor
        self.base, self.step = base, step
        _, call = let_chain(step.rhs)          # the clause may bind values before the call
        if not (isinstance(call, Call) and isinstance(call.op, GlobalVar) and
                call.op.name_hint == "main") or len(_walk_calls(step.rhs)) != 1:
            raise self.refuse("the recursive clause must be a tail call @main(..) and its "
                              "only call of @main")
        tail_field = None
        for i, sub in enumerate(step.lhs.patterns):
            if isinstance(sub, PatternVar) and call.args[self.li] is sub.var:
                tail_field = i
        if tail_field is None or not _is_adt(self.step_ctor.inputs[tail_field],
                                             self.step_ctor.belong_to):
            raise self.refuse("the recursive call must pass the rest of the list (the "
                              "constructor's recursive field) in the loop parameter's place")
        self.tail_field = tail_field
        if reads_rest(step.rhs, call, self.li, step.lhs.patterns[tail_field].var):
            raise self.refuse(rest_read_reason())
        self.changing, self.fixed = [], []
        for i, (p, a) in enumerate(zip(main.params, call.args)):
            if i == self.li:
                continue
            if not is_tensor_tree(p.checked_type):
                raise GradientError(
                    f"checkpoint=: the loop's parameter %{p.name_hint} has type "
                    f"{p.checked_type}; the other parameters must be tensors or tuples of them")
            (self.fixed if a is p else self.changing).append(i)
        if any(v is main.params[self.li] for v in free_vars(base.rhs)):
            raise self.refuse("its result must not read the list")
        self.call = call

    def refuse(self, why):
        return GradientError(f"checkpoint= with a Module differentiates a loop: @main must be a "
                             f"tail recursion over a list or Nat parameter (ad/checkpoint_loop"
                             f".py); {why}")

    # ---- the IR pieces ---------------------------------------------------------------------

    def run_function(self):
        """@ck_run: @main with its result the tuple of the changing parameters."""
        params = self.main.params
        state = Tuple([params[i] for i in self.changing])
        rhs = _Retarget().visit(self.step.rhs)
        return Function(list(params), Match(params[self.li], [
            Clause(self.step.lhs, rhs), Clause(self.base.lhs, state)]))

    def result_function(self):
        """@ck_result(%s.., %w..): the Nil clause's value."""
        params = self.main.params
        keep = [params[i] for i in self.changing + self.fixed]
        return Function(keep, self.base.rhs)

    # ---- the helpers, as text --------------------------------------------------------------

    def helpers(self, k, as_vjp=False):
        """(the list helpers @ck_take, @ck_drop, @ck_append and type ck_stack; the driver
        @ck_fwd, @ck_back, @ck_main: rl.gradient's, or rl.vjp's when `as_vjp`), as relayish
        text."""
        params = self.main.params
        types = [str(p.checked_type) for p in params]
        lt = types[self.li]
        ch, fx = self.changing, self.fixed
        ns, nf = len(ch), len(fx)
        st = _tup([types[j] for j in ch])
        ft = _tup([types[j] for j in fx])
        bc = self.base_ctor.name_hint

        def ordered(l, s, c):
            """@main's argument order from the list, state and fixed parts."""
            args = [None] * len(params)
            args[self.li] = l
            for i, j in enumerate(ch):
                args[j] = s[i]
            for i, j in enumerate(fx):
                args[j] = c[i]
            return ", ".join(args)

        def proj(t, idx):
            return [f"{t}.{i}" for i in idx]
        sv = [f"%s{i}" for i in range(ns)]
        cv = [f"%c{i}" for i in range(nf)]
        sparams = "".join(f", {v}: {types[j]}" for v, j in zip(sv, ch))
        cparams = "".join(f", {v}: {types[j]}" for v, j in zip(cv, fx))
        cargs = "".join(", " + v for v in cv)
        take = "@ck_take(%l, %k)"
        lists = f"""
type ck_stack {{ ck_push({lt}, {st}, ck_stack), ck_bottom }}
""" + list_helpers(self.step_ctor, self.tail_field, self.base_ctor, lt)
        x = [f"%{p.name_hint}" for p in params]
        if len(set(x)) < len(x) or set(x) & {"%f", "%y", "%b", "%d", "%ct", "%k", "%sn", "%fs"}:
            x = [f"%x{i}" for i in range(len(params))]     # the names would clash
        grads = [None] * len(params)
        grads[self.li] = "%b.0"
        for i, j in enumerate(ch):
            grads[j] = f"%b.1.{i}"
        for i, j in enumerate(fx):
            grads[j] = f"%b.2.{i}"
        dt = _tup(types)              # what @ck_run's vjp gives back: @main's parameter order
        dl = f"%d.{self.li}"
        ds = [f"%d.{j}" for j in ch]
        dc = [f"%d.{j}" for j in fx]
        snaps = revolve_snapshots(k)
        if snaps is not False:
            names = dict(lt=lt, st=st, ft=ft, dt=dt, dl=dl, ds=ds, dc=dc, sv=sv, cv=cv,
                         sparams=sparams,
                         cparams=cparams, cargs=cargs, ordered=ordered, proj=proj, x=x)
            return lists, self._revolve_driver(snaps, as_vjp, names)
        driver = f"""
def @ck_fwd(%l: {lt}{sparams}{cparams}, %k: int32, %acc: ck_stack) -> ({st}, ck_stack) {{
  match (%l) {{
    {bc} => ({_tup(sv)}, %acc),
    _ => @ck_fwd_chunk(%l, @ck_run({ordered(take, sv, cv)}){cargs}, %k,
                       ck_push(%l, {_tup(sv)}, %acc))
  }}
}}

def @ck_fwd_chunk(%l: {lt}, %n: {st}{cparams}, %k: int32, %acc: ck_stack) -> ({st}, ck_stack) {{
  @ck_fwd(@ck_drop(%l, %k){"".join(", " + v for v in proj("%n", range(ns)))}{cargs}, %k, %acc)
}}

def @ck_back(%stack: ck_stack{cparams}, %k: int32, %g: {st}, %gc: {ft}, %gl: {lt})
    -> ({lt}, {st}, {ft}) {{
  match (%stack) {{
    ck_push(%l, %s, %rest) => @ck_back_chunk(%rest{cargs}, %k, %gc, %gl,
        @ck_vjp_run({ordered(take, proj("%s", range(ns)), cv)}).1(%g)),
    ck_bottom => (%gl, %g, %gc)
  }}
}}

def @ck_back_chunk(%rest: ck_stack{cparams}, %k: int32, %gc: {ft}, %gl: {lt}, %d: {dt})
    -> ({lt}, {st}, {ft}) {{
  @ck_back(%rest{cargs}, %k, {_tup(ds)},
           {_tup([add_text(f"%gc.{i}", dc[i], params[j].checked_type)
                  for i, j in enumerate(fx)])}, @ck_append({dl}, %gl))
}}

"""
        fwd = f"""let %k = {chunk_text(k, x[self.li])};
  let %f = @ck_fwd({ordered_main(x, self.li, ch, fx)}, %k, ck_bottom());"""
        res = ", ".join(proj("%f.0", range(ns)) + [x[j] for j in fx])

        def back(d):
            return f"""let %b = @ck_back(%f.1{"".join(", " + x[j] for j in fx)}, %k, \
{_tup(proj(d, range(ns)))}, {_tup(proj(d, range(ns, ns + nf)))}, {bc}());"""
        head = f"""def @ck_main({", ".join(f"{v}: {t}" for v, t in zip(x, types))})"""
        if as_vjp:
            rt = self.main.checked_type.ret_type
            driver += f"""
{head} {{
  {fwd}
  let %y = @ck_result_vjp({res});
  (%y.0, fn (%ct: {rt}) {{
    let %d = %y.1(%ct);
    {back("%d")}
    {_tup(grads)}
  }})
}}
"""
        else:
            driver += f"""
{head} {{
  {fwd}
  let %y = @ck_result_grad({res});
  {back("%y.1")}
  (%y.0, {_tup(grads)})
}}
"""
        return lists, driver

    def _revolve_driver(self, snaps, as_vjp, v):
        """@ck_rev(l, s.., c.., m, snapshots, g, gl, gc): the reversal of the m iterations from
        list l and state s (Griewank's binomial schedule, its split @ck_mid computed at run
        time): a leaf is one iteration's vjp; otherwise advance to mid (@ck_run over mid
        elements), reverse [mid, m) with one snapshot fewer (this frame keeps s: the
        snapshot), then [0, mid) by a tail call. @ck_main runs the loop once for the final
        state (the result's seed), then @ck_rev over the whole list."""
        params = self.main.params
        ch, fx = self.changing, self.fixed
        ns, nf = len(ch), len(fx)
        lt, st, ft, dt, sv, cv, x = (v[n] for n in ("lt", "st", "ft", "dt", "sv", "cv", "x"))
        ordered, proj, cargs = v["ordered"], v["proj"], v["cargs"]
        bc = self.base_ctor.name_hint
        svargs = "".join(", " + a for a in sv)
        nstate = "".join(", " + a for a in proj("%n", range(ns)))
        summed = _tup([add_text(f"%gc.{i}", v["dc"][i], params[j].checked_type)
                       for i, j in enumerate(fx)])
        text = SCHEDULE_TEXT + f"""
def @ck_rev(%l: {lt}{v["sparams"]}{v["cparams"]}, %m: int32, %sn: int32, %g: {st}, %gl: {lt},
            %gc: {ft}) -> ({st}, {lt}, {ft}) {{
  if (%m == 0) {{ (%g, %gl, %gc) }} else {{
    if (%m == 1) {{
      @ck_rev_leaf(%gl, %gc, @ck_vjp_run({ordered("@ck_take(%l, 1)", sv, cv)}).1(%g))
    }} else {{
      let %mid = @ck_mid(%m, %sn);
      let %n = @ck_run({ordered("@ck_take(%l, %mid)", sv, cv)});
      let %r = @ck_rev(@ck_drop(%l, %mid){nstate}{cargs}, %m - %mid, maximum(%sn - 1, 1),
                       %g, %gl, %gc);
      @ck_rev(%l{svargs}{cargs}, %mid, %sn, %r.0, %r.1, %r.2)
    }}
  }}
}}

def @ck_rev_leaf(%gl: {lt}, %gc: {ft}, %d: {dt}) -> ({st}, {lt}, {ft}) {{
  ({_tup(v["ds"])}, @ck_append({v["dl"]}, %gl), {summed})
}}
"""
        xl = x[self.li]
        sn = (f"{snaps}" if snaps is not None else
              f"if (%k > 1) {{ maximum(@ck_log2(%k, 1, 0), 1) + 1 }} else {{ 1 }}")
        res = ", ".join(proj("%fs", range(ns)) + [x[j] for j in fx])
        fwd = f"""let %k = @ck_len({xl}, 0);
  let %sn = {sn};
  let %fs = @ck_run({", ".join(x)});"""

        def back(d):
            return f"""let %b = @ck_rev({ordered_main(x, self.li, ch, fx)}, %k, %sn,
      {_tup(proj(d, range(ns)))}, {bc}(), {_tup(proj(d, range(ns, ns + nf)))});"""
        grads = [None] * len(params)
        grads[self.li] = "%b.1"
        for i, j in enumerate(ch):
            grads[j] = f"%b.0.{i}"
        for i, j in enumerate(fx):
            grads[j] = f"%b.2.{i}"
        head = f"""def @ck_main({", ".join(f"{a}: {p.checked_type}" for a, p in zip(x, params))})"""
        if as_vjp:
            return text + f"""
{head} {{
  {fwd}
  let %y = @ck_result_vjp({res});
  (%y.0, fn (%ct: {self.main.checked_type.ret_type}) {{
    let %d = %y.1(%ct);
    {back("%d")}
    {_tup(grads)}
  }})
}}
"""
        return text + f"""
{head} {{
  {fwd}
  let %y = @ck_result_grad({res});
  {back("%y.1")}
  (%y.0, {_tup(grads)})
}}
"""


HELPERS = ("ck_take", "ck_drop", "ck_append", "ck_len", "ck_sqrt_len")


def zeros_text(expr, t) -> str:
    """Text of zeros of type t (a tensor or a tuple of them) shaped like `expr`."""
    if isinstance(t, TupleType):
        return _tup([zeros_text(f"{expr}.{i}", f) for i, f in enumerate(t.fields)])
    return f"zeros_like({expr})"


def add_text(a, b, t) -> str:
    """Text of a + b for values of type t (a tensor or a tuple of them)."""
    if isinstance(t, TupleType):
        return _tup([add_text(f"{a}.{i}", f"{b}.{i}", f) for i, f in enumerate(t.fields)])
    return f"{a} + {b}"


def list_helpers(step_ctor, tail_field, base_ctor, lt) -> str:
    """@ck_take(%l, %k), @ck_drop(%l, %k), @ck_append(%a, %b), @ck_len(%l, %n) and
    @ck_sqrt_len(%l) (ceil(sqrt(length)), at least 1) for the list type `lt` (text; any ADT
    whose `step_ctor` has the recursive field `tail_field`: a List, a Nat)."""
    sc, bc = step_ctor.name_hint, base_ctor.name_hint
    fields = [f"%f{i}" for i in range(len(step_ctor.inputs))]
    fields[tail_field] = "%t"
    pat = f"{sc}({', '.join(fields)})"

    def rebuilt(tail):
        return f"{sc}({', '.join(tail if f == '%t' else f for f in fields)})"
    return f"""
def @ck_take(%l: {lt}, %k: int32) -> {lt} {{
  if (%k > 0) {{ match (%l) {{ {pat} => {rebuilt("@ck_take(%t, %k - 1)")}, {bc} => {bc}() }} }}
  else {{ {bc}() }}
}}

def @ck_drop(%l: {lt}, %k: int32) -> {lt} {{
  if (%k > 0) {{ match (%l) {{ {pat} => @ck_drop(%t, %k - 1), {bc} => {bc}() }} }} else {{ %l }}
}}

def @ck_append(%a: {lt}, %b: {lt}) -> {lt} {{
  match (%a) {{ {pat} => {rebuilt("@ck_append(%t, %b)")}, {bc} => %b }}
}}

def @ck_len(%l: {lt}, %n: int32) -> int32 {{
  match (%l) {{ {pat} => @ck_len(%t, %n + 1), {bc} => %n }}
}}

def @ck_sqrt_len(%l: {lt}) -> int32 {{
  cast(sqrt(cast(maximum(@ck_len(%l, 0) - 1, 0), dtype="float64")), dtype="int32") + 1
}}
"""


SCHEDULE_TEXT = """
def @ck_comb(%n: int32, %k: int32) -> int32 {
  @ck_comb_loop(%n, minimum(%k, %n - %k), 0, 1)
}

def @ck_comb_loop(%n: int32, %k: int32, %i: int32, %r: int32) -> int32 {
  if (%i < %k) { @ck_comb_loop(%n, %k, %i + 1, %r * (%n - %i) / (%i + 1)) } else { %r }
}

def @ck_reps(%m: int32, %s: int32, %t: int32) -> int32 {
  if (@ck_comb(%s + %t, %s) < %m) { @ck_reps(%m, %s, %t + 1) } else { %t }
}

def @ck_mid(%m: int32, %s: int32) -> int32 {
  if (%s >= %m) { 1 } else {
    if (%s == 1) { %m - 1 } else {
      let %t = @ck_reps(%m, %s, 1);
      minimum(minimum(@ck_comb(%s + %t - 1, %s), %m - @ck_comb(%s + %t - 2, %s - 1)), %m - 1)
    }
  }
}

def @ck_log2(%n: int32, %p: int32, %e: int32) -> int32 {
  if (%p < %n) { @ck_log2(%n, %p * 2, %e + 1) } else { %e }
}
"""
"""The binomial schedule's split at run time (ir/passes/checkpoint.py's `_split`, in int32):
@ck_mid(m, s) is where a range of m steps reversed with s snapshots takes its next one;
@ck_log2(n, 1, 0) = ceil(log2 n). Binomials are built as C(n, i + 1) = C(n, i) (n - i) /
(i + 1) over the smaller of k and n - k: exact in int32 while m * (s + t) < 2^31."""


def ordered_main(x, li, ch, fx) -> str:
    return ", ".join([x[li]] + [x[j] for j in ch] + [x[j] for j in fx])


def _is_adt(t, header) -> bool:
    return t is header or t == header or getattr(t, "func", None) == header


def _tup(items) -> str:
    """Tuple text; one field gets its trailing comma, none is ()."""
    if len(items) == 1:
        return f"({items[0]},)"
    return f"({', '.join(items)})"




def _walk_calls(expr) -> list:
    from relayish.ir.analysis import walk
    return [n for n in walk(expr) if isinstance(n, Call) and isinstance(n.op, GlobalVar)
            and n.op.name_hint == "main"]


def reads_rest(rhs, call, li, tail) -> bool:
    """Whether the recursive clause `rhs` reads the rest of the list `tail` other than as the
    list argument (index li) of the recursive `call`. A chunk runs the recursion over
    @ck_take(l, k), whose last cell's rest is Nil, not the real rest: such a read would see
    the cut."""
    stripped = Call(call.op, [a for i, a in enumerate(call.args) if i != li])
    return any(v is tail for v in free_vars(Replace(call, stripped).visit(rhs)))


def rest_read_reason() -> str:
    return ("the recursive clause reads the rest of the list other than by passing it to "
            "@main (a chunk of k elements would see its end as the list's)")


class Replace(ExprMutator):
    """One node, by identity, replaced."""

    def __init__(self, target, new):
        super().__init__()
        self.target, self.new = target, new

    def visit_Call(self, e):
        if e is self.target:
            return self.new
        return super().visit_Call(e)


class _Retarget(ExprMutator):
    """@main -> @ck_run."""

    def visit_GlobalVar(self, e):
        return GlobalVar("ck_run") if e.name_hint == "main" else e



