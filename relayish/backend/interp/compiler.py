"""The compiler: each Function becomes a Code (code.py) of basic blocks over frame slots.

    program = Program(mod)                    # the module's globals, compiled on demand
    code = program.compile_function(func, "fn"); program.drain()

`FunctionCompiler.visit(e)` emits the steps computing `e` into the current block and returns the
slot holding its value; tail positions (`compile_tail`) end blocks with TAILCALL / RETURN, and
If / Match / calls open new blocks. Vars are compiled away into slot indices: each slot is
written at most once per frame (there are no backward jumps), so `let y = x` aliases x's slot,
constants and globals live in the frame template, and a projection of a tuple built in the
same frame is its field's slot. The compiler does not memoize: a node shared by two branches is
computed on each path, and an effectful node (`!r`) shared at two places runs twice.

Let-chains, else-if chains and last match clauses in tail position are loops; other deep
nesting runs under run_deep (api.py). What a fn literal captures comes from one FreeVars table
per Program (a walk per literal was quadratic in the nesting depth of closures).
Every step records its node and slot (code.Step) and every slot the name of its Var
(Code.slot_names), for a debugger.
"""
from __future__ import annotations

from operator import itemgetter

from relayish.errors import EvaluationError
from relayish.ir.expr import (Call, Constant, Constructor, Function, If, Let, Match,
                              PatternConstructor, PatternVar, PatternWildcard, RefRead, Var)
from relayish.ir.op import Op, get_op
from relayish.ir.types import TensorType
from relayish.ir.analysis import FreeVars
from relayish.ir.visitor import ExprFunctor
from relayish.ops._common import static_type
from relayish.backend.values import ConstructorValue
from relayish.backend.runtime.args import Parameters
from relayish.backend.runtime.bindings import compile_pattern, same_constructor
from relayish.backend.runtime.describe import node_text
from relayish.backend.interp.code import (BRANCH, CALL, JUMP, MATCH, RETURN, TAILCALL, Block,
                                          Code, Step)
from relayish.backend.interp.run import InterpreterClosure
from relayish.backend.interp.closures import ConstructorClosure, value_checker
from relayish.backend.interp.steps import (accumulate_step, closure_step, constructor_step,
                                           getitem_step, move_step, op_step,
                                           outer_accumulate_step, ref_create_step,
                                           ref_read_step, ref_write_step, shared_zeros,
                                           take_accumulate_step, tuple_step)

__all__ = ["Program", "FunctionCompiler"]

MAX_EXTRA_CAPTURES = 16            # tuple fields a closure may capture besides its free vars


class Program:
    """The compile context of one evaluation target: the module's globals as closures.

    The debug modes choose their steps here, at compile time, so the plain machine pays
    nothing for them: `poison=True` (debug_alloc) keeps the fused accumulation steps but never
    adds in place: the array the reference owned is filled with NaN instead, and `ref(zeros)`
    allocates; `wrap_step(info) -> step`, when given, replaces each step the compiler emits
    (info is its code.Step record: debug_nans's check, modes.py; the debugger's log of
    reference writes, debug/program.py). `defer`: the deferred outer products (deferred.py);
    by default on unless a debug mode is (debug_nans checks each value written; the debugger
    asks for them and settles them whenever it pauses)."""

    def __init__(self, mod, poison=False, wrap_step=None, defer=None):
        self.mod = mod
        self.poison = poison
        self.wrap_step = wrap_step
        self.defer = (not poison and wrap_step is None) if defer is None else defer
        self.globals = {}       # name -> InterpreterClosure (its Code filled by drain())
        self.pending = []
        # what each fn literal captures, found in one walk of the outermost function that holds
        # it (a walk per literal was quadratic in the nesting depth of closures)
        self.free_vars = FreeVars()

    def global_closure(self, gv):
        name = gv.name_hint
        clo = self.globals.get(name)
        if clo is None:
            if self.mod is None or name not in self.mod:
                where = "no module was given" if self.mod is None else "the module does not define it"
                raise EvaluationError(f"the program refers to the global @{name}, but {where}")
            func = self.mod[name]
            code = Code("@" + name, func)
            clo = InterpreterClosure(code, ())
            self.globals[name] = clo
            self.pending.append((code, func))
        return clo

    def compile_function(self, func, name, captures=(), ncaptures=None, tuple_fields=None):
        code = Code(name, func)
        FunctionCompiler(self, code, func.params, captures, ncaptures,
                          tuple_fields).compile_body(func.body)
        return code

    def drain(self):
        while self.pending:
            code, func = self.pending.pop()
            FunctionCompiler(self, code, func.params, ()).compile_body(func.body)


class FunctionCompiler(ExprFunctor):
    """Compiles one function body into the blocks of `code`.

    `visit(e)` emits the code computing `e` into the current block and returns the slot holding
    its value. It does NOT memoize: a node shared by two branches must be computed on each path,
    and an effectful node (`!r`) shared at two places must run twice.
    """

    def __init__(self, program, code, params, captures, ncaptures=None, tuple_fields=None):
        """`captures`: the captured Vars, then (up to `ncaptures`) captured tuple fields that
        `tuple_fields` ({capture index: [capture indices of its fields]}) describes."""
        super().__init__()
        self.program = program
        self.code = code
        self.env = {}                    # id(Var) -> slot
        self.template = []               # initial frame contents
        self.atoms = {}                  # id(Constant/GlobalVar/...) -> slot holding its value
        self.keep = []                   # keeps nodes keyed by id alive while compiling
        self.tuple_fields = {}           # slot of a tuple built in this frame -> its field slots
        self.names = []                  # per slot: the name_hint of its Var (Code.slot_names)
        # outer products `let %v = expand_dims(g, axis=-1) * x` not computed where bound: a
        # gradient accumulation `r := !r + %v` defers them (outer_accumulate_step); any other
        # use computes them there (materialize). Program.defer says when.
        self.defers = self.program.defer
        self.lazy = {}                   # id(Var) -> (its value, g, x)
        self.lazy_slots = {}             # (id(Var), id(block)) -> slot computed in that block
        # `let %v = !%r` whose step an accumulation `r := %v + g` may make redundant (_Read);
        # kept as written under a debug mode's wrap_step (the debugger shows every binding)
        self.fuse_reads = self.program.wrap_step is None
        self.reads = {}                  # id(Var) -> its _Read (the Var is not in env)
        self.read_records = []           # every _Read of this function, in compile order
        self.writes = 0                  # reference writes emitted so far (any reference)
        for p in params:
            self.env[id(p)] = self.new_slot(name=p.name_hint)
        for v in captures:
            self.env[id(v)] = self.new_slot(name=v.name_hint)
        ncaptures = len(captures) if ncaptures is None else ncaptures
        while len(self.template) < len(params) + ncaptures:
            self.new_slot()
        base = len(params)
        for i, fields in (tuple_fields or {}).items():
            self.tuple_fields[base + i] = [base + j for j in fields]
        code.nparams = len(params)
        code.ncaptures = ncaptures
        code.params = Parameters(code.name, params, value_checker())
        self.block = code.entry = Block(code)

    # ---- helpers -----------------------------------------------------------------------------
    def visit(self, expr):
        cls = expr.__class__
        if cls is Var:                      # the commonest operands, without dispatch
            slot = self.env.get(id(expr))
            return self.visit_Var(expr) if slot is None else slot
        if cls is Constant:
            slot = self.atoms.get(id(expr))
            return self.visit_Constant(expr) if slot is None else slot
        return self.dispatch(expr)

    def new_slot(self, value=None, name=None):
        self.template.append(value)
        self.names.append(name)
        return len(self.template) - 1

    def atom_slot(self, node, value):
        slot = self.atoms.get(id(node))
        if slot is None:
            slot = self.atoms[id(node)] = self.new_slot(value)
            self.keep.append(node)
        return slot

    def emit(self, step, node, dst, srcs=()):
        """Append `step` (computing `node` into slot `dst` from the slots `srcs`) to the current
        block (wrapped by the program's debug mode, if any)."""
        block = self.block
        info = Step(step, node, dst, block, tuple(srcs))
        if self.program.wrap_step is not None:
            step = info.fn = self.program.wrap_step(info)
        block.steps.append(step)
        block.info.append(info)

    def new_block(self):
        return Block(self.code)

    def end_block(self, kind, node, **fields):
        block = self.block
        block.kind = kind
        block.node = node
        for name, value in fields.items():
            setattr(block, name, value)
        if len(block.args) >= 2:
            block.gather = itemgetter(*block.args)

    def compile_body(self, body):
        self.compile_tail(body)
        drop_fused_reads(self.read_records)
        code = self.code
        start = code.nparams + code.ncaptures
        code.rest = self.template[start:]
        code.nslots = len(self.template)
        code.slot_names = self.names
        seal(code)

    # ---- bindings ------------------------------------------------------------------------------
    def bind(self, var, value):
        if isinstance(value, Function):
            slot = self.env[id(var)] = self.new_slot()     # before compiling: it may recurse
            self.compile_closure(value, slot, "%" + var.name_hint)
        elif self.defers and (outer := outer_product(value)) is not None:
            self.lazy[id(var)] = (value, *outer)
            self.keep.append(var)
            return
        elif self.fuse_reads and value.__class__ is RefRead and value.ref.__class__ is Var:
            read = self.reads[id(var)] = self.track_read(value)
            slot = read.slot
        else:
            slot = self.env[id(var)] = self.visit(value)
        if self.names[slot] is None:
            self.names[slot] = var.name_hint
        self.keep.append(var)

    def compile_closure(self, func, dst, name="fn"):
        captures = self.program.free_vars(func)
        srcs = [self.visit_Var(v) for v in captures]
        # A captured tuple built in this frame also passes its fields, so that projections of it
        # inside the closure (the backpropagators of reverse AD read `%d.1`) cost nothing.
        inner_fields = {}
        i = 0
        while i < len(srcs) and len(srcs) <= len(captures) + MAX_EXTRA_CAPTURES:
            fields = self.tuple_fields.get(srcs[i])
            if fields is not None and len(fields) <= MAX_EXTRA_CAPTURES:
                inner_fields[i] = list(range(len(srcs), len(srcs) + len(fields)))
                srcs.extend(fields)
            i += 1
        code = self.program.compile_function(func, name, captures, len(srcs), inner_fields)
        self.emit(closure_step(code, dst, srcs), func, dst)

    # ---- tail position: a loop down let-chains, else-branches and last match clauses -----------
    def compile_tail(self, e):
        while True:
            if isinstance(e, Let):
                self.bind(e.var, e.value)
                e = e.body
            elif isinstance(e, If):
                cond = self.visit(e.cond)
                then_b, else_b = self.new_block(), self.new_block()
                self.end_block(BRANCH, e, src=cond, target=then_b, other=else_b)
                self.block = then_b
                self.compile_tail(e.true_branch)
                self.block = else_b
                e = e.false_branch
            elif isinstance(e, Match) and e.clauses:
                heads = self.compile_match_head(e)
                for clause, (block, bindings) in list(zip(e.clauses, heads))[:-1]:
                    self.block = block
                    self.env.update(bindings)
                    self.compile_tail(clause.rhs)
                self.block, bindings = heads[-1]
                self.env.update(bindings)
                e = e.clauses[-1].rhs
            elif isinstance(e, Call) and not isinstance(e.op, (Op, Constructor)):
                fn = self.visit(e.op)
                args = tuple(self.visit(a) for a in e.args)
                self.end_block(TAILCALL, e, src=fn, args=args)
                return
            else:
                self.end_block(RETURN, e, src=self.visit(e))
                return

    def compile_match_head(self, e):
        """MATCH on the data; returns one (block, bindings) per clause.

        The same Var may be bound by the patterns of two clauses; each clause body is compiled
        with its own pattern's slots (`self.env.update(bindings)` before it).
        """
        data = self.visit(e.data)
        clauses, heads = [], []
        for clause in e.clauses:
            bindings = {}

            def bind(var, bindings=bindings):
                slot = bindings[id(var)] = self.new_slot(name=var.name_hint)
                self.keep.append(var)
                return slot
            matcher = flat_matcher(clause.lhs, bind) or compile_pattern(clause.lhs, bind)
            block = self.new_block()
            clauses.append((matcher, block))
            heads.append((block, bindings))
        self.end_block(MATCH, e, src=data, clauses=tuple(clauses))
        return heads

    # ---- value position ------------------------------------------------------------------------
    def visit_Var(self, e):
        slot = self.env.get(id(e))
        if slot is None:
            read = self.reads.get(id(e))
            if read is not None:
                read.uses += 1
                return read.slot
            if id(e) in self.lazy:
                return self.materialize(e)
            raise EvaluationError(f"free variable %{e.name_hint} in {self.code.name}: "
                                  "evaluate needs a closed program")
        return slot

    def materialize(self, var):
        """The slot of a deferred outer product's value, computed in the current block (once
        per block: a block does not see what a sibling branch computed)."""
        key = (id(var), id(self.block))
        slot = self.lazy_slots.get(key)
        if slot is None:
            slot = self.lazy_slots[key] = self.visit(self.lazy[id(var)][0])
            if self.names[slot] is None:
                self.names[slot] = var.name_hint
        return slot

    def visit_GlobalVar(self, e):
        return self.atom_slot(e, self.program.global_closure(e))

    def visit_Constant(self, e):
        return self.atom_slot(e, e.data)

    def visit_Constructor(self, e):
        # as the type checker has it: a bare nullary constructor is a value (`Nil`), any other
        # constructor used as a value is a function
        if not e.inputs:
            return self.atom_slot(e, ConstructorValue(e, []))
        return self.atom_slot(e, ConstructorClosure(e))

    def visit_Tuple(self, e):
        srcs = [self.visit(f) for f in e.fields]
        if not srcs:
            return self.atom_slot(e, ())
        dst = self.new_slot()
        self.emit(tuple_step(e, dst, srcs), e, dst, srcs)
        self.tuple_fields[dst] = srcs
        return dst

    def visit_TupleGetItem(self, e):
        src = self.visit(e.tuple_value)
        fields = self.tuple_fields.get(src)
        if fields is not None and 0 <= e.index < len(fields):
            # a projection of a tuple built in this frame is its field's slot: slots are written
            # once per frame and the tuple's step dominates every use of its variable
            return fields[e.index]
        dst = self.new_slot()
        self.emit(getitem_step(e, dst, src, e.index), e, dst)
        return dst

    def visit_Function(self, e):
        dst = self.new_slot()
        self.compile_closure(e, dst)
        return dst

    def visit_Call(self, e):
        op = e.op
        if isinstance(op, Op):
            srcs = [self.visit(a) for a in e.args]
            dst = self.new_slot()
            self.emit(op_step(e, dst, srcs), e, dst, srcs)
            return dst
        if isinstance(op, Constructor):
            if len(e.args) != len(op.inputs):
                raise EvaluationError(f"constructor {op.name_hint} takes {len(op.inputs)} field(s), "
                                      f"got {len(e.args)} in {node_text(e)}")
            srcs = [self.visit(a) for a in e.args]
            dst = self.new_slot()
            self.emit(constructor_step(op, dst, srcs), e, dst, srcs)
            return dst
        fn = self.visit(op)
        args = tuple(self.visit(a) for a in e.args)
        dst = self.new_slot()
        after = self.new_block()
        self.end_block(CALL, e, src=fn, args=args, dst=dst, target=after)
        self.block = after
        return dst

    def visit_Let(self, e):
        while isinstance(e, Let):
            self.bind(e.var, e.value)
            e = e.body
        return self.visit(e)

    def visit_If(self, e):
        cond = self.visit(e.cond)
        dst = self.new_slot()
        then_b, else_b, join = self.new_block(), self.new_block(), self.new_block()
        self.end_block(BRANCH, e, src=cond, target=then_b, other=else_b)
        for block, branch in ((then_b, e.true_branch), (else_b, e.false_branch)):
            self.block = block
            self.emit(move_step(dst, self.visit(branch)), e, dst)
            self.end_block(JUMP, e, target=join)
        self.block = join
        return dst

    def visit_Match(self, e):
        dst = self.new_slot()
        join = self.new_block()
        heads = self.compile_match_head(e)
        for clause, (block, bindings) in zip(e.clauses, heads):
            self.block = block
            self.env.update(bindings)
            self.emit(move_step(dst, self.visit(clause.rhs)), e, dst)
            self.end_block(JUMP, e, target=join)
        self.block = join
        return dst

    def visit_RefCreate(self, e):
        v = e.value
        if (not self.program.poison and isinstance(v, Call)
                and isinstance(v.op, Op)
                and v.op.fills_zeros and not v.args
                and v.op.numpy_fast(v.attrs) is not None):     # (not while a user's impl runs)
            # `ref(zeros(..))` (reverse AD's fresh gradient references): the shared read-only
            # zero tensor, so that the first accumulation into it can be a plain write
            dst = self.new_slot()
            self.emit(ref_create_step(dst, self.atom_slot(
                e, shared_zeros(v.attrs["shape"], v.attrs["dtype"]))), e, dst)
            return dst
        src = self.visit(e.value)
        dst = self.new_slot()
        self.emit(ref_create_step(dst, src), e, dst)
        return dst

    def visit_RefRead(self, e):
        src = self.visit(e.ref)
        dst = self.new_slot()
        self.emit(ref_read_step(e, dst, src), e, dst)
        return dst

    def visit_RefWrite(self, e):
        dst = self.accumulate_step(e)
        if dst is None:
            ref = self.visit(e.ref)
            src = self.visit(e.value)
            dst = self.new_slot()
            self.emit(ref_write_step(e, dst, ref, src), e, dst, (ref, src))
        self.writes += 1
        return dst

    def track_read(self, e):
        """Emit the read `!%r` (e) and return its _Read: an accumulation into %r before any
        reference write may read %r itself instead (accumulate_step)."""
        slot = self.visit_RefRead(e)
        read = _Read(slot, e.ref, self.block, self.writes, self.block.info[-1])
        self.read_records.append(read)
        return read

    def accumulate_step(self, e):
        """`r := !r + g` (reverse AD's gradient accumulation, r a variable) as one step instead
        of a read, an add and a write; None (nothing emitted) where it does not apply.

        The read may be inline or a `let %v = !r` before it (what the passes' A-normal form
        leaves), fused when no reference was written since in the same block: the fused step
        reads r itself, and the let's step goes when nothing else uses %v (drop_fused_reads).
        g: an atom; a deferred outer product, bound (bind) or inline (outer_accumulate_step);
        `take_backward(..)` of atoms (take_accumulate_step); any other expression, which is
        evaluated first (an inline read is then a step of its own before it, so that g sees
        the reference as the program has it)."""
        v, ref_expr = e.value, e.ref
        if not (isinstance(v, Call) and isinstance(v.op, Op) and v.op.accumulates
                and len(v.args) == 2 and ref_expr.__class__ is Var):
            return None
        first, g = v.args
        read = None
        if first.__class__ is Var:
            read = self.reads.get(id(first))
            if read is None or read.ref is not ref_expr:
                return None
        elif not (first.__class__ is RefRead and first.ref is ref_expr):
            return None
        t = getattr(v, "_checked_type", None)
        fused = self.outer_accumulation(e, t, g) or self.take_accumulation(e, t, g)
        src = None
        if fused is None:
            add = v.op.numpy_fast(v.attrs, t if isinstance(t, TensorType) else None)
            if add is None or (read is None and not self.fuse_reads
                               and not isinstance(g, (Var, Constant))):
                return None
            if read is None and not isinstance(g, (Var, Constant)):
                read = self.track_read(first)
            src = self.visit(g)
            tg = static_type(g)
            overwrite = (isinstance(t, TensorType) and isinstance(tg, TensorType)
                         and tg.shape == t.shape and tg.dtype == t.dtype)
            never_scalar = isinstance(t, TensorType) and len(t.shape) >= 1

            def fused(ref, dst):
                return (accumulate_step(e, v, dst, ref, src, add, never_scalar, overwrite,
                                        self.program.poison), (ref, src))
        if read is not None and (read.block is not self.block or read.writes != self.writes):
            # a reference was written (or control left the block) since the read: add its value
            read.uses += 1
            if src is None:
                src = self.visit(g)
            total = self.new_slot()
            self.emit(op_step(v, total, [read.slot, src]), v, total, (read.slot, src))
            ref = self.visit(ref_expr)
            dst = self.new_slot()
            self.emit(ref_write_step(e, dst, ref, total), e, dst, (ref, total))
            return dst
        if read is not None:
            read.fused = True
        ref = self.visit(ref_expr)
        dst = self.new_slot()
        step, srcs = fused(ref, dst)
        self.emit(step, e, dst, srcs)
        return dst

    def outer_accumulation(self, e, t, g):
        """For `r := !r + g` with g a deferred outer product of r's type, bound (`let %g =
        expand_dims(..) * x`) or inline: `fused(ref, dst) -> (step, srcs)`, which records the
        pair of vectors on r (steps.outer_accumulate_step). None for anything else."""
        if not self.defers:
            return None
        if g.__class__ is Var:
            lazy = self.lazy.get(id(g))
            if lazy is None or id(g) in self.env:
                return None
            value, gv, xv = lazy
        elif (outer := outer_product(g)) is not None:
            value, (gv, xv) = g, outer
        else:
            return None
        if t != getattr(value, "_checked_type", None):
            return None

        def fused(ref, dst):
            gs, xs = self.visit(gv), self.visit(xv)
            return outer_accumulate_step(e, dst, ref, gs, xs), (ref, gs, xs)
        return fused

    def take_accumulation(self, e, t, tb):
        """For `r := !r + take_backward(g, idx, like)` (reverse AD's gradient of take, left
        inline by the transform) with atoms as arguments and one float type throughout:
        `fused(ref, dst) -> (step, srcs)`, one in-place scatter-add step. None for anything
        else."""
        if not (isinstance(tb, Call) and isinstance(tb.op, Op) and tb.op.scatters_rows
                and all(isinstance(a, (Var, Constant)) for a in tb.args)):
            return None
        tt = getattr(tb, "_checked_type", None)
        tl, tg = static_type(tb.args[2]), static_type(tb.args[0])
        if not (isinstance(t, TensorType) and t == tt and t == tl and t.dtype.startswith("float")
                and isinstance(tg, TensorType) and tg.dtype == t.dtype):
            return None
        axis = tb.attrs["axis"]

        def fused(ref, dst):
            gs, ids = self.visit(tb.args[0]), self.visit(tb.args[1])
            return (take_accumulate_step(e, dst, ref, gs, ids,
                                         None if axis is None else axis % len(t.shape),
                                         self.program.poison), (ref, gs, ids))
        return fused


class _Read:
    """A read `!%r` whose step a fused accumulation into %r may make redundant: its slot, the
    reference's Var, the block and the count of reference writes when it was emitted, its Step
    record, the uses of its value (other than fused accumulations) and whether one fused."""

    __slots__ = ("slot", "ref", "block", "writes", "info", "uses", "fused")

    def __init__(self, slot, ref, block, writes, info):
        self.slot, self.ref, self.block, self.writes, self.info = slot, ref, block, writes, info
        self.uses = 0
        self.fused = False


def drop_fused_reads(reads):
    """Remove the steps of reads that only fused accumulations used (they read the reference
    themselves, before any write to it): one filter per block that has any."""
    drop = {}
    for read in reads:
        if read.fused and read.uses == 0:
            drop.setdefault(id(read.block), (read.block, set()))[1].add(id(read.info))
    for block, gone in drop.values():
        keep = [k for k, info in enumerate(block.info) if id(info) not in gone]
        block.steps = [block.steps[k] for k in keep]
        block.info = [block.info[k] for k in keep]


def flat_matcher(p, bind):
    """The matcher of a constructor pattern whose fields are variables or `_` (`Node(%l, %r)`,
    the commonest clause), binding the fields straight into their slots: runtime.bindings'
    general matcher calls one more function per field. None for any other pattern (and for a
    wrong number of fields, which compile_pattern reports)."""
    if not (isinstance(p, PatternConstructor) and len(p.patterns) == len(p.constructor.inputs)
            and all(isinstance(q, (PatternVar, PatternWildcard)) for q in p.patterns)):
        return None
    ctor = p.constructor
    tag = ctor.tag
    binds = [(i, bind(q.var)) for i, q in enumerate(p.patterns) if isinstance(q, PatternVar)]
    if len(binds) == 2:
        (i, a), (j, b) = binds

        def match(v, s):
            c = v.constructor
            if c is not ctor and (c.tag != tag or not same_constructor(c, ctor)):
                return False
            f = v.fields
            s[a] = f[i]
            s[b] = f[j]
            return True
    elif len(binds) == 1:
        (i, a), = binds

        def match(v, s):
            c = v.constructor
            if c is not ctor and (c.tag != tag or not same_constructor(c, ctor)):
                return False
            s[a] = v.fields[i]
            return True
    else:
        def match(v, s):
            c = v.constructor
            if c is not ctor and (c.tag != tag or not same_constructor(c, ctor)):
                return False
            f = v.fields
            for i, a in binds:
                s[a] = f[i]
            return True
    return match


def outer_product(value):
    """(g, x) when `value` is `expand_dims(g, axis=-1) * x` with g, x float vectors (Vars or
    constants) of one dtype (reverse AD's gradient of matmul(W, x) w.r.t. W); else None."""
    if not (isinstance(value, Call) and value.op is get_op("multiply") and len(value.args) == 2):
        return None
    col, x = value.args
    if not (isinstance(col, Call) and col.op is get_op("expand_dims") and len(col.args) == 1
            and isinstance(col.args[0], (Var, Constant)) and isinstance(x, (Var, Constant))):
        return None
    g = col.args[0]
    t, tc = getattr(value, "_checked_type", None), getattr(col, "_checked_type", None)
    tg, tx = static_type(g), static_type(x)
    if not all(isinstance(a, TensorType) for a in (t, tc, tg, tx)):
        return None
    if not (len(tg.shape) == 1 and len(tx.shape) == 1 and tc.shape == (tg.shape[0], 1)
            and t.shape == (tg.shape[0], tx.shape[0]) and t.dtype.startswith("float")
            and tg.dtype == tx.dtype == tc.dtype == t.dtype):
        return None
    return g, x


def seal(code):
    """Turn every block's step lists into tuples (faster to iterate)."""
    for block in code.blocks:
        block.steps = tuple(block.steps)
        block.info = tuple(block.info)
