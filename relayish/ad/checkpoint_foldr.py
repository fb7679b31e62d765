"""Checkpointed reverse mode for a recursion over a list that is not a tail call (a foldr):
`rl.gradient(mod, checkpoint=k)` (and rl.grad, rl.value_and_grad, rl.vjp) where

    def @main(%xs: List[T], %w: C1, ..) -> R {
      match (%xs) {
        Cons(%h, %t) => <g of %h, @main(%t, %w, ..), %w, ..>,    // one call, not in a closure
        Nil => <init of %w, ..>
      }
    }

the commonest way to write a recursion over a list (any ADT with one constructor without fields
and one with a recursive field: Nat's `S(%m) => g(@main(%m, ..))` too). The other parameters C
are passed on unchanged and are tensors or tuples of tensors, and so is R. The values are

    r_n = init(w),  r_i = g(h_i, r_{i+1}, w),  the result r_0

computed from the end of the list. Without checkpointing the recursion holds n frames and the
gradient's backpropagator chain holds every r_i and every g's tape. With checkpoint=k:

    split     @ck_split walks the list once: the sublists at 0, k, 2k, .. on a stack (n / k
              entries, sharing the input's cells), the last one on top
    forward   @ck_fwd pops them, last first: r_in for that chunk (init(w) for the last), pushes
              (the sublist, r_in) on a second stack (ck_stack) and runs @ck_run, the user's
              recursion over @ck_take(sublist, k) with its Nil clause giving r_in (k frames),
              to the chunk's r_out, the next chunk's r_in
    result    r_0, seeded as rl.gradient does (the gradient of the identity on R) or by rl.vjp's
              cotangent
    backward  @ck_back pops ck_stack, the first chunk first: the vjp of @ck_run over that chunk
              from its r_in gives the cotangents of its k elements (pushed on a third stack), of
              r_in (the next chunk's r_out cotangent) and of C (summed); the last chunk's r_in
              cotangent goes through init's vjp; @ck_concat joins the chunks' element gradients
              in O(n)

so the program keeps n / k (sublist, r_in) pairs, one chunk's frames and one chunk's tape:
O(sqrt n) at k = sqrt n, and each g runs twice (once plain, once in its chunk's vjp). The
output is an ordinary module, written as relayish text and parsed with the user's module (as
checkpoint_loop.py, whose list helpers it shares); its values and type are the plain
transform's. A tail recursion goes to checkpoint_loop.py (`checkpointed_module` picks).
"""
from __future__ import annotations

from relayish.errors import GradientError
from relayish.ir.analysis import free_vars, walk
from relayish.ir.expr import (Call, Clause, Function, GlobalVar, Match, PatternConstructor,
                              PatternVar, Var)
from relayish.ir.module import Module
from relayish.ir.types import is_tensor_tree
from relayish.ir.visitor import let_chain
from relayish.ad.checkpoint_loop import (HELPERS, Replace, _is_adt, _program as tail_program,
                                         _tup, _walk_calls, _without, add_text, check_chunk,
                                         chunk_text, list_helpers, reads_rest, rest_read_reason,
                                         revolve_snapshots, zeros_text)

__all__ = ["checkpointed_module"]


def checkpointed_module(mod, k, as_vjp, vjp, gradient):
    """The checkpointed gradient (or vjp, `as_vjp`) Module of a type-checked Module whose @main
    is a recursion over a list or Nat: a tail recursion (checkpoint_loop.py) or a foldr (here).
    `vjp`, `gradient`: the AD entry points (api.py's)."""
    check_chunk(k)
    if not _is_foldr(mod["main"]):
        return tail_program(mod, k, vjp, gradient, as_vjp)
    if revolve_snapshots(k) is not False:
        raise GradientError(f"checkpoint={k!r}: the binomial schedule is for let-chains and tail "
                            "recursions; a foldr's steps run from the list's end, which a "
                            "chunk of it cannot reach backwards: pass k or \"sqrt\"")
    return _program(_Foldr(mod), mod, k, vjp, gradient, as_vjp)


def _is_foldr(main) -> bool:
    """A match whose recursive clause calls @main, but not as its last expression."""
    body = main.body
    if not isinstance(body, Match):
        return False
    for clause in body.clauses:
        calls = _walk_calls(clause.rhs)
        if calls:
            _, last = let_chain(clause.rhs)
            return not any(last is c for c in calls)
    return False


def _program(loop, mod, k, vjp, gradient, as_vjp):
    from relayish.ir.text.parser import parse
    from relayish.ir.text.printer import astext
    src = mod.copy()
    src["ck_run"] = loop.run_function()
    src["ck_init"] = loop.init_function()
    first = parse(astext(src) + "\n" + loop.list_text())
    run_mod = _without(first, "main")
    run_mod["main"] = first["ck_run"]
    derived = vjp(run_mod)
    out = _without(derived, "main")
    out["ck_vjp_run"] = derived["main"]            # nothing calls a vjp entry: a plain rename
    for name, func in (("ck_init_vjp", vjp(first["ck_init"])),
                       ("ck_seed", None if as_vjp else gradient(loop.seed_function()))):
        if isinstance(func, Module):
            raise GradientError("checkpoint=: the recursion's Nil clause needs a module to "
                                "differentiate (it calls a global)")
        if func is not None:
            out[name] = func
    for gv, func in first.functions.items():
        if gv.name_hint in HELPERS + ("ck_run",):
            out[gv] = func
    second = parse(astext(out) + "\n" + loop.driver_text(k, as_vjp))
    final = _without(second, "ck_main")
    final["main"] = second["ck_main"]
    return final


class _Foldr:
    """The shape of a foldr @main (module text), or a GradientError naming what does not fit."""

    def __init__(self, mod):
        self.main = main = mod["main"]
        body = main.body
        if len(body.clauses) != 2 or not any(body.data is p for p in main.params):
            raise self.refuse("its body must be a match on one of its parameters with two "
                              "clauses")
        self.li = next(i for i, p in enumerate(main.params) if body.data is p)
        step, base = sorted(body.clauses, key=lambda c: not _walk_calls(c.rhs))
        if _walk_calls(base.rhs):
            raise self.refuse("one clause must end the recursion (call no @main)")
        if not (isinstance(base.lhs, PatternConstructor) and not base.lhs.patterns and
                isinstance(step.lhs, PatternConstructor)):
            raise self.refuse("the clauses must match the two constructors of its ADT")
        self.step_ctor, self.base_ctor = step.lhs.constructor, base.lhs.constructor
        self.step, self.base = step, base
        calls = _walk_calls(step.rhs)
        if len(calls) != 1:
            raise self.refuse(f"the recursive clause calls @main {len(calls)} times; once")
        self.call = call = calls[0]
        for node in walk(step.rhs):
            if isinstance(node, Function) and any(c is call for c in _walk_calls(node.body)):
                raise self.refuse("the recursive call is inside a closure")
        tail = None
        for i, sub in enumerate(step.lhs.patterns):
            if isinstance(sub, PatternVar) and call.args[self.li] is sub.var:
                tail = i
        if tail is None or not _is_adt(self.step_ctor.inputs[tail], self.step_ctor.belong_to):
            raise self.refuse("the recursive call must pass the rest of the list (the "
                              "constructor's recursive field) in the list parameter's place")
        self.tail_field = tail
        if reads_rest(step.rhs, call, self.li, step.lhs.patterns[tail].var):
            raise self.refuse(rest_read_reason())
        self.fixed = [i for i in range(len(main.params)) if i != self.li]
        for i in self.fixed:
            p = main.params[i]
            if call.args[i] is not p:
                raise self.refuse(f"the recursive call changes %{p.name_hint}; a foldr passes "
                                  "its other parameters on unchanged (a tail recursion may "
                                  "change them)")
            if not is_tensor_tree(p.checked_type):
                raise GradientError(
                    f"checkpoint=: the recursion's parameter %{p.name_hint} has type "
                    f"{p.checked_type}; the other parameters must be tensors or tuples of them")
        self.ret = main.checked_type.ret_type
        if not is_tensor_tree(self.ret):
            raise GradientError(f"checkpoint=: the recursion returns {self.ret}; a foldr's "
                                "result must be a tensor or a tuple of tensors (it is the "
                                "state kept every k elements)")
        if any(v is main.params[self.li] for v in free_vars(base.rhs)):
            raise self.refuse("its Nil clause must not read the list")

    def refuse(self, why):
        return GradientError(f"checkpoint= with a Module differentiates a recursion over a list "
                             f"or Nat (a tail recursion or a foldr, ad/checkpoint_foldr.py); "
                             f"@main does not fit: {why}")

    # ---- the IR pieces ---------------------------------------------------------------------

    def run_function(self):
        """@ck_run(%l, %r, %w..): the recursion with %r for its Nil clause's value."""
        params = list(self.main.params)
        r = Var("r", self.ret)
        run_params = [params[self.li], r] + [params[i] for i in self.fixed]
        again = Call(GlobalVar("ck_run"), [self.call.args[self.li], r] +
                     [params[i] for i in self.fixed])
        rhs = Replace(self.call, again).visit(self.step.rhs)
        return Function(run_params, Match(params[self.li], [
            Clause(self.step.lhs, rhs), Clause(self.base.lhs, r)]), self.ret)

    def init_function(self):
        """@ck_init(%w..): the Nil clause's value."""
        return Function([self.main.params[i] for i in self.fixed], self.base.rhs)

    def seed_function(self):
        """fn (%r: R) { %r }: its gradient is rl.gradient's seed of R."""
        r = Var("r", self.ret)
        return Function([r], r)

    # ---- the helpers, as text --------------------------------------------------------------

    def list_text(self) -> str:
        lt = str(self.main.params[self.li].checked_type)
        return list_helpers(self.step_ctor, self.tail_field, self.base_ctor, lt)

    def driver_text(self, k, as_vjp) -> str:
        params = self.main.params
        lt, rt = str(params[self.li].checked_type), str(self.ret)
        ctypes = [params[i].checked_type for i in self.fixed]
        nf = len(ctypes)
        ft = _tup([str(t) for t in ctypes])
        cv = [f"%c{i}" for i in range(nf)]
        cparams = "".join(f", {v}: {t}" for v, t in zip(cv, ctypes))
        cargs = "".join(", " + v for v in cv)
        bc = self.base_ctor.name_hint
        x = [f"%x{i}" for i in range(len(params))]
        xl, xc = x[self.li], [x[i] for i in self.fixed]
        xcargs = "".join(", " + v for v in xc)
        zeros = _tup([zeros_text(v, t) for v, t in zip(xc, ctypes)])
        summed = _tup([add_text(f"%gc.{i}", f"%d.{2 + i}", t) for i, t in enumerate(ctypes)])
        grads = [None] * len(params)
        grads[self.li] = f"@ck_concat(%b.0, {bc}())"
        for i, (j, t) in enumerate(zip(self.fixed, ctypes)):
            grads[j] = add_text(f"%b.2.{i}", f"%e.{i}", t)
        dt = _tup([lt, rt] + [str(t) for t in ctypes])          # what @ck_run's vjp gives
        text = f"""
type ck_lists {{ ck_lcons({lt}, ck_lists), ck_lnil }}
type ck_stack {{ ck_push({lt}, {rt}, ck_stack), ck_bottom }}
type ck_glist {{ ck_gcons({lt}, ck_glist), ck_gnil }}

def @ck_split(%l: {lt}, %k: int32, %acc: ck_lists) -> ck_lists {{
  match (%l) {{ {bc} => %acc, _ => @ck_split(@ck_drop(%l, %k), %k, ck_lcons(%l, %acc)) }}
}}

def @ck_fwd(%ls: ck_lists, %r: {rt}{cparams}, %k: int32, %acc: ck_stack) -> ({rt}, ck_stack) {{
  match (%ls) {{
    ck_lcons(%l, %rest) =>
      @ck_fwd(%rest, @ck_run(@ck_take(%l, %k), %r{cargs}){cargs}, %k, ck_push(%l, %r, %acc)),
    ck_lnil => (%r, %acc)
  }}
}}

def @ck_back(%stack: ck_stack{cparams}, %k: int32, %g: {rt}, %gc: {ft}, %gl: ck_glist)
    -> (ck_glist, {rt}, {ft}) {{
  match (%stack) {{
    ck_push(%l, %r, %rest) => @ck_back_chunk(%rest{cargs}, %k, %gc, %gl,
        @ck_vjp_run(@ck_take(%l, %k), %r{cargs}).1(%g)),
    ck_bottom => (%gl, %g, %gc)
  }}
}}

def @ck_back_chunk(%rest: ck_stack{cparams}, %k: int32, %gc: {ft}, %gl: ck_glist, %d: {dt})
    -> (ck_glist, {rt}, {ft}) {{
  @ck_back(%rest{cargs}, %k, %d.1, {summed}, ck_gcons(%d.0, %gl))
}}

def @ck_concat(%gl: ck_glist, %acc: {lt}) -> {lt} {{
  match (%gl) {{ ck_gcons(%d, %rest) => @ck_concat(%rest, @ck_append(%d, %acc)), ck_gnil => %acc }}
}}
"""
        head = f"""def @ck_main({", ".join(f"{v}: {params[i].checked_type}"
                                          for i, v in enumerate(x))})"""
        fwd = f"""let %k = {chunk_text(k, xl)};
  let %i = @ck_init_vjp({", ".join(xc)});
  let %f = @ck_fwd(@ck_split({xl}, %k, ck_lnil()), %i.0{xcargs}, %k, ck_bottom());"""

        def back(g):
            return f"""let %b = @ck_back(%f.1{xcargs}, %k, {g}, {zeros}, ck_gnil());
    let %e = %i.1(%b.1);"""
        if as_vjp:
            return text + f"""
{head} {{
  {fwd}
  (%f.0, fn (%ct: {rt}) {{
    {back("%ct")}
    {_tup(grads)}
  }})
}}
"""
        return text + f"""
{head} {{
  {fwd}
  let %y = @ck_seed(%f.0);
  {back("%y.1.0")}
  (%y.0, {_tup(grads)})
}}
"""
