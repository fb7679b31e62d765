"""From a relayish objective to the callables the methods use.

The variable may be a tensor or any structure of tensors (tuples, ADT values such as prelude
Lists). Its float tensors are flattened into one float64 vector; integer and bool leaves stay
fixed. When the variable is not already a float64 vector, the objective is wrapped in a
relayish function of the flat vector,

    fn(%x: Tensor[(n), float64]) { f(<the structure rebuilt from slices of %x>, args...) }

so that gradients, Hessians and Hessian-vector products are always taken of a function of one
vector, and the derived programs (gradient, Hessian, HVP) are built once and compiled once.
"""
from __future__ import annotations

import math
import sys
import time

import numpy as np

from relayish.errors import CompileError, RelayishError
from relayish.ir.expr import Call, Function, GlobalVar, Let, Tuple, TupleGetItem, Var, const
from relayish.ir.module import Module
from relayish.ir.types import TensorType, TupleType, TypeCall, substitute
from relayish.ir.visitor import ExprMutator, ExprVisitor, run_deep
from relayish.backend.values import ConstructorValue
from relayish.ops import api as ops


# ---- the variable's structure ---------------------------------------------------------------

class Leaf:
    """A float tensor of the variable: flat[offset:offset+size] reshaped."""

    def __init__(self, offset, shape, dtype):
        self.offset, self.shape, self.dtype = offset, tuple(shape), dtype
        self.size = int(np.prod(self.shape, dtype=np.int64))

    def expr(self, flat, n):
        e = flat
        if not (self.offset == 0 and self.size == n and self.shape == (n,)):
            e = ops.strided_slice(flat, [self.offset], [self.offset + self.size])
            if self.shape != (self.size,):
                e = ops.reshape(e, self.shape)
        if self.dtype != "float64":
            e = ops.cast(e, self.dtype)
        return e

    def value(self, flat):
        return np.asarray(flat[self.offset:self.offset + self.size].reshape(self.shape),
                          dtype=self.dtype)


class Fixed:
    """A leaf that is not optimized (integer or bool tensor): kept as given."""

    def __init__(self, value):
        self.value_ = value

    def expr(self, flat, n):
        return const(self.value_)

    def value(self, flat):
        return self.value_


class TupleSpec:
    def __init__(self, parts):
        self.parts = parts

    def expr(self, flat, n):
        return Tuple([p.expr(flat, n) for p in self.parts])

    def value(self, flat):
        return tuple(p.value(flat) for p in self.parts)


class CtorSpec:
    """An ADT value; `as_list` when the user gave a Python list for a prelude List."""

    def __init__(self, ctor, parts, as_list=False):
        self.ctor, self.parts, self.as_list = ctor, parts, as_list

    def expr(self, flat, n):
        return Call(self.ctor, [p.expr(flat, n) for p in self.parts])

    def value(self, flat):
        v = ConstructorValue(self.ctor, [p.value(flat) for p in self.parts])
        if self.as_list:
            from relayish.backend.values import from_list_value
            return from_list_value(v)
        return v


def build_spec(t, x0, mod, offset=0, what="x0"):
    """(spec, leaves' flat values, new offset) for the value x0 of the parameter type t."""
    if isinstance(t, TensorType):
        try:
            arr = np.asarray(x0)
            if arr.dtype == object:
                raise ValueError
            arr = arr.astype(np.float64 if t.is_float else t.dtype)
        except (TypeError, ValueError):
            raise RelayishError(f"{what} must be a tensor of type {t} (a number or nested list of "
                                f"numbers), got {_shown(x0)}") from None
        if arr.shape != t.shape:
            raise RelayishError(f"{what} has shape {arr.shape}, but the objective's variable has "
                                f"type {t} (shape {t.shape})")
        if not t.is_float:
            return Fixed(arr.astype(t.dtype)), [], offset
        leaf = Leaf(offset, t.shape, t.dtype)
        return leaf, [arr.reshape(-1)], offset + leaf.size
    if isinstance(t, TupleType):
        if not isinstance(x0, (tuple, list)) or len(x0) != len(t.fields):
            raise RelayishError(f"{what} must be a tuple of {len(t.fields)} values for the "
                                f"variable of type {t}, got {_shown(x0)}")
        parts, flats = [], []
        for k, (ft, item) in enumerate(zip(t.fields, x0)):
            spec, fl, offset = build_spec(ft, item, mod, offset, f"{what}[{k}]")
            parts.append(spec)
            flats.extend(fl)
        return TupleSpec(parts), flats, offset
    if isinstance(t, TypeCall):
        as_list = False
        if isinstance(x0, (list, tuple)) and t.func.name == "List" and mod is not None:
            from relayish.backend.values import list_value
            x0, as_list = list_value(mod, list(x0)), True
        if not isinstance(x0, ConstructorValue):
            raise RelayishError(f"{what} must be a value of type {t} (an rl.ConstructorValue"
                                f"{' or a Python list' if t.func.name == 'List' else ''}), "
                                f"got {_shown(x0)}")
        return _ctor_spec(t, x0, mod, offset, what, as_list)
    raise RelayishError(f"cannot optimize over a variable of type {t}: the variable must be a "
                        "float tensor or a structure (tuple, ADT) of tensors")


def _ctor_spec(t, x0, mod, offset, what, as_list):
    # Lists are long: walk the spine with a loop, recursing only into the items.
    specs, flats, node = [], [], x0
    chain = []
    while True:
        ctor = node.constructor
        data = ctor.type_data
        if data is None or data.header.name != t.func.name:
            raise RelayishError(f"{what} must be a value of type {t}, got a {ctor.name_hint} value")
        subst = dict(zip(data.type_vars, t.args))
        inputs = [substitute(i, subst) for i in ctor.inputs]
        if len(inputs) != len(node.fields):
            raise RelayishError(f"{what}: {ctor.name_hint} takes {len(inputs)} fields, "
                                f"the value has {len(node.fields)}")
        parts, tail = [], None
        for k, (it, field) in enumerate(zip(inputs, node.fields)):
            if (k == len(inputs) - 1 and isinstance(it, TypeCall) and it == t
                    and isinstance(field, ConstructorValue)):
                tail = field
                parts.append(None)
                continue
            spec, fl, offset = build_spec(it, field, mod, offset, f"{what}.{ctor.name_hint}[{k}]")
            parts.append(spec)
            flats.extend(fl)
        chain.append((ctor, parts))
        if tail is None:
            break
        node = tail
    spec = None
    for ctor, parts in reversed(chain):
        if parts and parts[-1] is None:
            parts[-1] = spec
        spec = CtorSpec(ctor, parts)
    spec.as_list = as_list
    return spec, flats, offset


def _shown(value, limit=60):
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ---- the objective as a function of one flat vector -----------------------------------------

class _RenameGlobal(ExprMutator):
    def __init__(self, old, new):
        super().__init__()
        self.old, self.new = old, new

    def visit_GlobalVar(self, e):
        return GlobalVar(self.new) if e.name_hint == self.old else e


def _fresh_name(mod, base):
    name, k = base, 1
    while name in mod:
        k += 1
        name = f"{base}{k}"
    return name


def flat_objective(f, x0, args=()):
    """(objective over a float64 vector — a Function or a Module —, spec, flat x0)."""
    from relayish.ir.typecheck import infer_type
    if not isinstance(f, (Function, Module)):
        raise RelayishError(f"minimize takes a relayish Function or Module (with @main), got "
                            f"{type(f).__name__}")
    checked = infer_type(f)
    mod = checked if isinstance(checked, Module) else None
    main = checked["main"] if mod is not None else checked
    ftype = main.checked_type
    where = "@main" if mod is not None else "the objective"
    if not ftype.arg_types:
        raise RelayishError(f"{where} has no parameter to minimize over")
    ret = ftype.ret_type
    if not (isinstance(ret, TensorType) and ret.is_float and ret.shape == ()):
        raise RelayishError(f"the objective must return a float scalar (Tensor[(), float64] or "
                            f"float32); {where} returns {ret}")
    args = tuple(args)
    if len(args) != len(ftype.arg_types) - 1:
        fixed = len(ftype.arg_types) - 1
        raise RelayishError(f"{where} takes the variable and {fixed} fixed argument(s), but "
                            f"args= gives {len(args)}")
    spec, flats, n = build_spec(ftype.arg_types[0], x0, mod)
    if n == 0:
        raise RelayishError(f"the variable of type {ftype.arg_types[0]} has no float tensor to "
                            "optimize")
    x_flat = np.concatenate(flats).astype(np.float64) if flats else np.zeros(0)
    fixed = []
    for k, (t, a) in enumerate(zip(ftype.arg_types[1:], args)):
        if not isinstance(t, TensorType):
            raise RelayishError(f"args[{k}]: fixed arguments must be tensors; the parameter has "
                                f"type {t}")
        try:
            arr = np.asarray(a, dtype=t.dtype)
        except (TypeError, ValueError):
            raise RelayishError(f"args[{k}] must be a tensor of type {t}, got {_shown(a)}") from None
        if arr.shape != t.shape:
            raise RelayishError(f"args[{k}] has shape {arr.shape}, the parameter has type {t}")
        fixed.append(const(arr))
    direct = (isinstance(spec, Leaf) and spec.dtype == "float64" and spec.shape == (n,)
              and not fixed)
    if direct:
        return checked, spec, x_flat
    flat = Var("x", TensorType((n,), "float64"))
    structured = spec.expr(flat, n)
    if mod is None:
        return Function([flat], Call(checked, [structured] + fixed)), spec, x_flat
    new = mod.copy()
    inner = _fresh_name(new, "objective")
    # the mutator recurses down nested calls: under the deep-run guard, as the AD and backends
    body = run_deep(_RenameGlobal("main", inner).visit, main)
    new[inner] = body
    new["main"] = Function([flat], Call(GlobalVar(inner), [structured] + fixed))
    return new, spec, x_flat


# ---- derived programs and their compiled callables ------------------------------------------

def _gradient(obj):
    from relayish.ad import api
    return api.gradient(obj)


# "auto": forward over reverse where Newton's device path vmaps it (jax, cpu), reverse over
# reverse elsewhere (cheaper on the interpreter and to derive: notes/ad.md, notes/optim.md)
HESSIANS = ("auto", "forward", "reverse")


def _hessian(obj, mode="forward"):
    """The Hessian program: forward-over-reverse (n HVPs) or rl.hessian (reverse-over-reverse)."""
    if mode == "reverse":
        from relayish.ad import api
        return api.hessian(obj)
    from relayish.ad.forward import hessian_forward
    return hessian_forward(obj)


def _hvp(obj):
    from relayish.ad.forward import hvp_forward_over_reverse
    return hvp_forward_over_reverse(obj)


def _fused_value_grad_hess(obj, g_prog, mode="forward"):
    """fn(x) -> (f, g, H) in one program (one compiled call per Newton iteration); g_prog is
    the gradient program of obj."""
    h_prog = _hessian(obj, mode)
    if not (isinstance(g_prog, Function) and isinstance(h_prog, Function)):
        return None
    x = Var("x", g_prog.params[0].type_annotation)
    vg, h = Var("vg", None), Var("h", None)
    body = Let(vg, Call(g_prog, [x]), Let(h, Call(h_prog, [x]),
               Tuple([TupleGetItem(vg, 0), TupleGetItem(TupleGetItem(vg, 1), 0), h])))
    return Function([x], body)


def _jvp_of_gradient(gradient):
    from relayish.ad.forward import jvp
    return jvp(gradient)


def _batched_value_grad_hess(jg_run, fun_run, n):
    """DeviceNewton for fn(x) -> (f, g, H, p) as one jitted jax computation, or None.

    jg_run is the compiled relayish program jvp(gradient(f)) : (x, v) -> ((f, (g,)), (_, (H v,))),
    forward over reverse; `jg_run.jax_function()` is its pure jax function. vmapped over the n
    basis vectors it gives the rows of H, while its primal half (f, g) does not depend on v and
    stays unbatched: one pass computes f, g and H (the batched form of hessian_forward's n HVPs;
    jax.hessian batches its HVPs the same way). p is the Newton direction when H is positive
    definite (NaN from the Cholesky otherwise: then the optimizer falls back to its modified
    Cholesky on H). fun_run is the compiled objective, for the line search in XLA.
    """
    try:
        jg = jg_run.jax_function()
        fun = fun_run.jax_function()
    except CompileError:
        # jax_function's documented refusal: a parameter or result that is not tensors (the
        # compiled Hessian program handles those); other failures are real and surface
        return None
    except RelayishError:
        raise
    except Exception as e:  # noqa: BLE001 - a failure outside relayish's errors is a bug: say so
        raise _batching_failed("the compiled program's jax function", e) from e
    if not (jg_run.uses_x64 and fun_run.uses_x64):
        return None
    device = DeviceNewton(jg, fun, n)
    try:
        device.check()
    except NotImplementedError:
        # jax has no batching rule for a primitive the program uses ("Batching rule for ... not
        # implemented"): vmap cannot batch it, so the Hessian's n HVPs run as separate calls
        return None
    except RelayishError:
        raise
    except Exception as e:  # noqa: BLE001 - any other failure is a bug: say so
        raise _batching_failed("jax.vmap of the forward-over-reverse program", e) from e
    return device


def _batching_failed(what, e):
    return CompileError(f"Newton's batched Hessian failed ({what}): {type(e).__name__}: {e}\n"
                        "(this is a bug in relayish; pass hessian=\"reverse\" to build the "
                        "Hessian as a relayish program instead)")


class DeviceNewton:
    """Newton's compiled evaluations, with the iterate kept on the device (jax arrays).

    * `loop(...) -> device_loop.LoopState`: Newton's iterations, Armijo line search included,
      back to back as one XLA computation, returning when an iteration needs the modified
      Cholesky (on the host) or the run stops — used when nothing watches the iterations
      (methods._run_newton_in_xla);
    * for the Python loop that reports each iteration (methods._newton_device_loop):
      `at(x) -> (x, g, H, p, stats)`: f, g, H and the direction p at x, in one call, and
      `trial(x, p) -> (x + p, g, p', stats)`: the same at the full step x + p, without H (an
      output less; `at` gives it when the modified Cholesky needs it) — when Armijo accepts the
      step (the usual case) this one compiled call is the whole iteration. stats is one small
      float64 vector [f, |g|, g.p', all(isfinite(g)), all(isfinite(p'))], the only thing that
      loop reads back per iteration (one transfer).
    Call at and trial inside `with dev.context():` (float64: jax.enable_x64, entered once per
    loop); `loop` enters it itself. Each is compiled on first use (`warm_up` does it ahead of
    the iterations).
    """

    def __init__(self, jg, fun, n):
        import jax
        import jax.numpy as jnp
        from jax.scipy.linalg import cho_solve
        from relayish.optim.device_loop import build_newton_loop
        eye = np.eye(n)
        self.n = n

        def evaluate(x):
            (f, (g,)), (_, (H,)) = jax.vmap(lambda e: jg(x, e),
                                            out_axes=((None, (None,)), (0, (0,))))(eye)
            f, g, H = (jnp.asarray(v, jnp.float64) for v in (f, g, H))
            L = jnp.linalg.cholesky(0.5 * (H + H.T))
            return f, g, H, -cho_solve((L, True), g)

        def objective(x):
            return jnp.asarray(fun(x), jnp.float64)

        def at(x):
            f, g, H, p = evaluate(x)
            stats = jnp.stack([f, jnp.sqrt(jnp.sum(g * g)), jnp.dot(g, p),
                               jnp.all(jnp.isfinite(g)).astype(f.dtype),
                               jnp.all(jnp.isfinite(p)).astype(f.dtype)])
            return x, g, H, p, stats

        def trial(x, p):
            x, g, _, p, stats = at(x + p)
            return x, g, p, stats
        self._at = jax.jit(at)
        self._trial = jax.jit(trial)
        self._loop = build_newton_loop(evaluate, objective, n)
        self.context = lambda: jax.enable_x64(True)
        self._traced = (evaluate, objective)

    def check(self):
        """Trace (not compile) the vmapped evaluation and the objective: fails early where
        batching does not go."""
        import jax
        import jax.numpy as jnp
        with self.context():
            for fn in self._traced:
                jax.eval_shape(fn, jax.ShapeDtypeStruct((self.n,), jnp.float64))

    def warm_up(self, x, stepwise, max_iter=0):
        """Compile (and run once at x) what the coming loop uses: at and trial for the
        stepwise loop, else the XLA loop for max_iter's history size."""
        from relayish.optim import device_loop
        with self.context():
            if stepwise:
                self.at(x)
                self.trial(x, x)
            else:
                self.loop(x, device_loop.START, x, 0.0, 0, capacity_for=max_iter)

    def loop(self, z, mode, x, tol, max_iter, step=np.nan, f=np.nan, g=None, p=None, k=0,
             capacity_for=0):
        """One call of the XLA loop (device_loop.build_newton_loop) -> device_loop.LoopState."""
        zeros = np.zeros(self.n)
        with self.context():
            return self._loop(z, mode, step, x, f, zeros if g is None else g,
                              zeros if p is None else p, k, tol, max_iter,
                              capacity_for=capacity_for)

    def at(self, x):
        return self._at(x)

    def trial(self, x, p):
        return self._trial(x, p)

    def to_device(self, v):
        import jax
        return jax.device_put(np.asarray(v, dtype=np.float64))


class ProblemCache:
    """The problems (derived programs, compiled) of the last few minimize calls.

    Calling minimize again on the same objective — the same program up to variable names, the
    same fixed args, checked with structural_equal — with the same options reuses AD, tracing
    and compilation, so multi-start runs pay the setup once. An entry is dropped when an op,
    gradient or tangent rule is registered after it was built (op.registry_generation).
    """

    def __init__(self, size=4):
        self.size = size
        self.entries = []          # (objective, options, problem), most recent first

    def get(self, obj, options):
        from relayish.ir.structural import structural_equal
        for i, (cached_obj, cached_options, problem) in enumerate(self.entries):
            if cached_options == options and structural_equal(cached_obj, obj):
                self.entries.insert(0, self.entries.pop(i))
                problem.reset_counts()
                return problem
        return None

    def put(self, obj, options, problem):
        self.entries.insert(0, (obj, options, problem))
        del self.entries[self.size:]


PROBLEMS = ProblemCache()


def relayish_problem(obj, n, method, backend="jax", device="cpu", hessian="auto"):
    """RelayishProblem(...) (AutoProblem for backend="auto"), or the cached one built for the
    same objective and options."""
    from relayish.ir.op import registry_generation
    options = (n, method, backend, device, hessian, registry_generation())
    problem = PROBLEMS.get(obj, options)
    if problem is None:
        build = AutoProblem if backend == "auto" else RelayishProblem
        problem = build(obj, n, method, backend, device, hessian)
        PROBLEMS.put(obj, options, problem)
    return problem


# ---- backend="auto": interpret, compile when the interpreter has spent what compiling costs --

# The modelled CPU seconds of the jax backend's setup (AD of its programs, tracing, XLA
# compilation, warm-up) on the 2-core development machine, from fits to measurements of
# RelayishProblem(..., "jax") + warm_up against the number of op calls in the gradient program
# (notes/optim.md, "backend='auto'"): (fixed seconds, seconds per gradient op call).
COMPILE_COST = {
    "newton": (0.85, 1.2e-3),        # the XLA loop around the vmapped (f, g, H, p) evaluation
    "newton-cg": (0.25, 0.75e-3),    # objective, gradient and HVP programs
    "trust-ncg": (0.25, 0.75e-3),
    "bfgs": (0.12, 0.35e-3),         # objective and gradient programs
    "gd": (0.12, 0.35e-3),
}
JAX_IMPORT_COST = 0.45      # `import jax` (once per process)
JAX_FIRST_COMPILE_COST = 0.5    # XLA:CPU's first compilation in a process (client, LLVM setup)


class _CallCounter(ExprVisitor):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def visit_Call(self, e):
        self.calls += 1
        super().visit_Call(e)


def op_calls(prog):
    """The number of calls in a Function or Module (every function of it): the size measure of
    the compile-cost model."""
    counter = _CallCounter()
    for fn in ([prog[name] for name in prog.functions] if isinstance(prog, Module) else [prog]):
        run_deep(counter.visit, fn)
    return counter.calls


def compile_cost(method, gradient_calls):
    """Modelled CPU seconds for the jax backend to get this problem ready (COMPILE_COST), plus
    jax's one-time costs when this process has not paid them yet."""
    fixed, per_call = COMPILE_COST[method]
    cost = fixed + per_call * gradient_calls
    if "jax" not in sys.modules:
        cost += JAX_IMPORT_COST
    if not RelayishProblem.jax_started:
        cost += JAX_FIRST_COMPILE_COST
    return cost


class AutoProblem:
    """backend="auto": run on the interpreter, compile with jax once the interpreter's
    evaluations have cost what compiling is expected to cost (the ski-rental rule).

    How many iterations a run takes is not known before it runs, and an interpreted
    evaluation's cost is best known by doing one. So the problem starts interpreted (no jax
    import, no compilation) and adds up the CPU time of its interpreted evaluations, across
    calls of minimize that reuse it from the cache (multi-start); when that exceeds the
    modelled setup cost of the jax backend (compile_cost: program size and method), it builds
    the jax problem and every later evaluation is compiled — mid-run, under the running method
    (the methods only see fun / value_and_grad / value_grad_hess / hvp, so their state carries
    over), and from the start of later calls (then Newton runs its XLA loop). This never costs
    more than about twice the better of the two choices made in hindsight (plus one
    evaluation and the model's error). A CompileError while compiling (a program the jax
    backend refuses) keeps the problem on the interpreter. device="gpu" is compiled at once.
    """

    def __init__(self, obj, n, method, backend="auto", device="cpu", hessian="auto"):
        self.obj, self.n, self.method = obj, n, method
        self.device, self.hessian = device, hessian
        self.nfev = self.ngev = self.nhev = 0
        self.interpreted = RelayishProblem(obj, n, method, "interpreter", device, hessian)
        self.budget = compile_cost(method, op_calls(self.interpreted.gradient))
        self.spent = 0.0            # CPU seconds of interpreted evaluations so far
        self.compiled = None        # the jax RelayishProblem, once built
        self.compile_error = None   # why the jax backend refused the problem, if it did
        if device != "cpu":
            self._switch(None)

    @property
    def backend(self):
        return "jax" if self.compiled is not None else "interpreter"

    def reset_counts(self):
        self.nfev = self.ngev = self.nhev = 0
        for problem in (self.interpreted, self.compiled):
            if problem is not None:
                problem.reset_counts()

    def _switch(self, x):
        """Build the jax problem; at x, compile (and run once) what the rest of the run calls,
        so that a program the jax backend refuses is found here and keeps the interpreter."""
        try:
            compiled = RelayishProblem(self.obj, self.n, self.method, "jax", self.device,
                                       self.hessian, gradient=self.interpreted.gradient)
            if x is not None:
                # the running method calls it step by step (Newton: `at`, plus `trial`, which
                # only the stepwise loop uses: a small waste for one code path)
                compiled.warm_up(x, watched=True)
        except CompileError as e:
            if self.device != "cpu":
                raise
            self.compile_error = e
            return
        self.compiled = compiled

    def _evaluate(self, name, *args):
        if self.compiled is not None:
            return getattr(self.compiled, name)(*args)
        start = time.process_time()
        out = getattr(self.interpreted, name)(*args)
        self.spent += time.process_time() - start
        if self.spent > self.budget and self.compile_error is None:
            self._switch(args[0])
        return out

    def fun(self, x):
        self.nfev += 1
        return self._evaluate("fun", x)

    def value_and_grad(self, x):
        self.nfev += 1
        self.ngev += 1
        return self._evaluate("value_and_grad", x)

    def value_grad_hess(self, x):
        self.nfev += 1
        self.ngev += 1
        self.nhev += 1
        return self._evaluate("value_grad_hess", x)

    def hvp(self, x, v):
        self.nhev += 1
        return self._evaluate("hvp", x, v)


class RelayishProblem:
    """The callables of methods.py, from compiled (jax) or interpreted relayish programs."""

    jax_started = False     # has a jax problem been built in this process (compile_cost)

    def __init__(self, obj, n, method, backend="jax", device="cpu", hessian="auto",
                 gradient=None):
        self.n = n
        self.backend, self.device = backend, device
        self.nfev = self.ngev = self.nhev = 0
        self._warm = set()          # what warm_up compiled: (stepwise, history capacity)
        # the gradient program (rl.gradient of obj), derived here unless given (AutoProblem)
        self.gradient = gradient = _gradient(obj) if gradient is None else gradient
        if backend == "jax":
            RelayishProblem.jax_started = True
        self._fun = self._run(obj)
        self._vg = self._run(gradient)
        self._vgh = self._hess = self._hvp = None
        # newton on jax (cpu, forward Hessian): f, g, H and the direction in one vmapped call,
        # with the iterate kept on the device (methods.run_newton uses it when present)
        self.device_newton = None
        if method == "newton":
            if backend == "jax" and hessian in ("auto", "forward") and device == "cpu":
                self.device_newton = _batched_value_grad_hess(
                    self._run(_jvp_of_gradient(gradient)), self._fun, n)
            mode = "reverse" if hessian == "auto" else hessian
            fused = (None if self.device_newton is not None
                     else _fused_value_grad_hess(obj, gradient, mode))
            if fused is not None:
                self._vgh = self._run(fused)
            elif self.device_newton is None:
                self._hess = self._run(_hessian(obj, mode))
        elif method in ("newton-cg", "trust-ncg"):
            self._hvp = self._run(_hvp(obj))

    @property
    def batched(self):
        """Newton on jax uses the vmapped (f, g, H, p) evaluation kept on the device."""
        return self.device_newton is not None

    def reset_counts(self):
        self.nfev = self.ngev = self.nhev = 0

    def count(self, calls=1):
        """Count `calls` fused (f, g, H) evaluations done through device_newton."""
        self.nfev += calls
        self.ngev += calls
        self.nhev += calls

    def warm_up(self, x, watched=True, max_iter=0):
        """Run every compiled program once at x, so that tracing and XLA compilation happen
        before the first iteration (and iteration timings measure iterations). `watched`: the
        iterations will be reported live (so Newton's device loop runs step by step);
        `max_iter`: the whole-loop program is compiled for that history size. A problem
        reused from the cache is warm already for what it ran before."""
        from relayish.optim.device_loop import history_capacity, runs_in_xla
        stepwise = not runs_in_xla(watched, max_iter)
        what = (stepwise, None if stepwise else history_capacity(max_iter))
        if what in self._warm:
            return
        self._warm.add(what)
        programs = ((self._fun, (x,)), (self._vg, (x,)), (self._vgh, (x,)),
                    (self._hess, (x,)), (self._hvp, (x, x)))
        if self.device_newton is not None:
            self.device_newton.warm_up(x, stepwise=stepwise, max_iter=max_iter)
            # the device loops call no other program, except the stepwise loop's line search,
            # which evaluates the objective (the others compile if something calls them)
            programs = ((self._fun, (x,)),) if stepwise else ()
        for fn, args in programs:
            if fn is not None:
                self._call(fn, *args)

    def _run(self, prog):
        if self.backend == "interpreter":
            from relayish.backend.interpreter import evaluate
            return lambda *a: evaluate(prog, *a)
        from relayish.backend.api import compile as rl_compile
        return rl_compile(prog, backend="jax", device=self.device)

    @staticmethod
    def _call(fn, *args):
        with np.errstate(all="ignore"):
            return fn(*args)

    def fun(self, x):
        self.nfev += 1
        return _scalar(self._call(self._fun, x))

    def value_and_grad(self, x):
        self.nfev += 1
        self.ngev += 1
        out = self._call(self._vg, x)
        return _scalar(out[0]), _vector(out[1][0], self.n)

    def value_grad_hess(self, x):
        self.nfev += 1
        self.ngev += 1
        self.nhev += 1
        p = None
        if self.device_newton is not None:
            with self.device_newton.context():
                _, g, H, p, stats = self.device_newton.at(np.asarray(x, dtype=np.float64))
            f = np.asarray(stats)[0]
            H = np.asarray(H)
        elif self._vgh is not None:
            f, g, H = self._call(self._vgh, x)
        else:
            f, g = self.value_and_grad(x)
            self.nfev -= 1
            self.ngev -= 1
            H = self._call(self._hess, x)
        if p is not None:
            p = _vector(p, self.n)
        H = np.asarray(H, dtype=np.float64).reshape(self.n, self.n)
        return _scalar(f), _vector(g, self.n), H, p

    def hvp(self, x, v):
        self.nhev += 1
        return _vector(self._call(self._hvp, x, v), self.n)


def _scalar(v):
    v = float(np.asarray(v))
    return v if not math.isnan(v) else math.nan


def _vector(v, n):
    return np.asarray(v, dtype=np.float64).reshape(n)
