"""Differential fuzzing of the recording front end against PyTorch (issue 25).

A random training program -- elementwise ops with broadcasting, Python scalars, reductions,
indexing, regions under no_grad, in-place updates of the parameters under no_grad before and
after their uses, requires_grad toggles, data buffers refilled between steps -- is run for a
few steps by relayish.eager and by PyTorch, in float64. Each step ends in one of: backward()
(once, or twice: accumulation), re.grad / torch.autograd.grad with respect to a subset of
parameters and intermediate values (dependent targets: total derivatives), or a gradient of a
gradient (create_graph). Every value, gradient, requires_grad and is_leaf must agree. The
steps repeat one structure, so from the second step on relayish runs its cached, compiled
program: the cache hit is compared too.

Programs that PyTorch refuses (an in-place update of a value its backward saved) are drawn
again. Skips without torch (not a `test` dependency; CI installs the `bench` extra).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from fuzzing import bounded, fuzz_settings

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")

from relayish import eager as re  # noqa: E402

STEPS = 3
TOL = dict(rtol=1e-9, atol=1e-10)


# ---- one program, two libraries -----------------------------------------------------------

def _index(v, which):
    return v[0] if which == "first" else v[..., ::2] if which == "step" else v[1:]


class Torch:
    """The library calls the program makes, on PyTorch tensors."""
    name = "torch"

    @staticmethod
    def tensor(a, requires_grad=False):
        return torch.tensor(a, dtype=torch.float64, requires_grad=requires_grad)

    no_grad = staticmethod(torch.no_grad)
    tanh, sin, exp = torch.tanh, torch.sin, torch.exp

    @staticmethod
    def sum(t, axis, keepdims):
        return t.sum() if axis is None else t.sum(dim=axis, keepdim=keepdims)

    @staticmethod
    def index(t, which):
        # a copy: relayish has no views (docs/eager.md), and a view made under no_grad of a
        # tensor requiring gradients is torch's own kind of leaf
        return _index(t, which).clone()

    @staticmethod
    def grad(y, wrt, create_graph=False):
        if not y.requires_grad:                      # torch refuses; the gradient is zero
            return [torch.zeros_like(w) for w in wrt]
        return list(torch.autograd.grad(y, wrt, create_graph=create_graph, allow_unused=True,
                                        materialize_grads=True))

    @staticmethod
    def backward(y, again):
        y.backward(retain_graph=again)
        if again:
            y.backward()

    @staticmethod
    def value(t):
        return t.detach().numpy().copy()


class Eager:
    """The same calls on relayish.eager."""
    name = "relayish"

    @staticmethod
    def tensor(a, requires_grad=False):
        return re.tensor(a, requires_grad=requires_grad)

    no_grad = staticmethod(re.no_grad)
    tanh, sin, exp = re.tanh, re.sin, re.exp

    @staticmethod
    def sum(t, axis, keepdims):
        return t.sum() if axis is None else t.sum(axis=axis, keepdims=keepdims)

    @staticmethod
    def index(t, which):
        return _index(t, which)

    @staticmethod
    def grad(y, wrt, create_graph=False):
        return re.grad(y, wrt=wrt)       # recorded: differentiable again, as create_graph

    @staticmethod
    def backward(y, again):
        y.backward()
        if again:
            y.backward()

    @staticmethod
    def value(t):
        return np.array(np.asarray(t), dtype=np.float64)


def _broadcast(*shapes):
    """The broadcast shape, or None where the shapes do not broadcast."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


def draw_program(rng):
    """A program as plain data: the parameters' shapes, the data buffers' shapes, the body's
    statements (indices into the values list), the ending, and the per-step toggles."""
    base = [(3,), (2, 3)][rng.integers(2)]
    choices = [base, base[-1:], ()] + ([(1, 3), (2, 1)] if len(base) == 2 else [])
    params = [base] + [choices[rng.integers(len(choices))] for _ in range(2)]
    buffers = [choices[rng.integers(len(choices))] for _ in range(2)]
    shapes = params + buffers                      # the values list starts with these
    grad_mode = True
    body = []
    for _ in range(rng.integers(4, 10)):
        kind = rng.choice(["bin", "bin", "un", "scalar", "reduce", "index", "nograd",
                           "inplace"])
        i = int(rng.integers(len(shapes)))
        if kind == "bin":
            fits = [k for k, t in enumerate(shapes) if _broadcast(shapes[i], t) is not None]
            j = int(rng.choice(fits))
            body.append(("bin", str(rng.choice(["add", "sub", "mul", "div"])), i, j))
            shapes.append(_broadcast(shapes[i], shapes[j]))
        elif kind == "un":
            body.append(("un", str(rng.choice(["tanh", "sin", "exp_tanh"])), i))
            shapes.append(shapes[i])
        elif kind == "scalar":
            body.append(("scalar", str(rng.choice(["mul", "add", "rsub"])), i,
                         float(np.round(rng.normal(), 2))))
            shapes.append(shapes[i])
        elif kind == "reduce":
            if shapes[i] == () or rng.random() < 0.4:
                body.append(("reduce", i, None, False))
                shapes.append(())
            else:
                axis = int(rng.integers(len(shapes[i])))
                keep = bool(rng.random() < 0.5)
                body.append(("reduce", i, axis, keep))
                shapes.append(tuple(1 if a == axis else d for a, d in enumerate(shapes[i])
                                    if keep or a != axis))
        elif kind == "index":
            if shapes[i] == ():
                continue
            which = str(rng.choice(["first", "step", "tail"] if shapes[i][0] > 1
                                   else ["first", "step"]))
            body.append(("index", which, i))
            s = shapes[i]
            shapes.append(s[1:] if which == "first" else
                          s[:-1] + ((s[-1] + 1) // 2,) if which == "step" else
                          (s[0] - 1,) + s[1:])
        elif kind == "nograd":
            grad_mode = not grad_mode
            body.append(("mode", grad_mode))
        else:                                        # an in-place update of a parameter
            p = int(rng.integers(len(params)))
            same = [k for k, s in enumerate(shapes) if _broadcast(s, params[p]) == params[p]]
            body.append(("inplace", p, str(rng.choice(["sub", "mul"])), int(rng.choice(same)),
                         float(np.round(rng.uniform(0.1, 0.9), 2))))
    if not grad_mode:
        body.append(("mode", True))
    n = len(shapes)
    loss_terms = [(int(k), float(np.round(rng.normal(), 2)))
                  for k in rng.choice(n, size=min(3, n), replace=False)]
    ending = str(rng.choice(["backward", "backward_twice", "grad", "grad_of_grad"]))
    # wrt for "grad": some parameters and some intermediates (checked to require gradients)
    wrt = sorted({int(k) for k in rng.choice(n, size=min(3, n), replace=False)})
    toggles = [[(p, bool(rng.random() < 0.6)) for p in (1, 2) if rng.random() < 0.3]
               for _ in range(STEPS)]
    reset = bool(rng.random() < 0.5)
    fills = [[rng.normal(size=s) for s in buffers] for _ in range(STEPS)]
    init = [rng.normal(size=s) for s in params]
    return dict(params=params, buffers=buffers, body=body, loss_terms=loss_terms,
                ending=ending, wrt=wrt, toggles=toggles, reset=reset, fills=fills, init=init)


def run_program(lib, prog):
    """Run `prog` on `lib` (Torch or Eager): a list of what it observed, step by step."""
    params = [lib.tensor(a, requires_grad=True) for a in prog["init"]]
    buffers = [np.zeros(s) for s in prog["buffers"]]
    seen = []
    for step in range(STEPS):
        for p, flag in prog["toggles"][step]:
            params[p].requires_grad_(flag)
        for buf, fill in zip(buffers, prog["fills"][step]):
            buf[...] = fill                           # refilled: what was recorded keeps its data
        vals = list(params) + [lib.tensor(b) for b in buffers]
        ctx = None
        for stmt in prog["body"]:
            vals.append(None)
            kind = stmt[0]
            if kind == "mode":
                vals.pop()
                if not stmt[1]:
                    ctx = lib.no_grad()
                    ctx.__enter__()
                elif ctx is not None:
                    ctx.__exit__(None, None, None)
                    ctx = None
            elif kind == "bin":
                _, op, i, j = stmt
                a, b = vals[i], vals[j]
                vals[-1] = (a + b if op == "add" else a - b if op == "sub" else
                            a * b if op == "mul" else a / (b * b + 1.0))
            elif kind == "un":
                _, f, i = stmt
                vals[-1] = lib.exp(lib.tanh(vals[i])) if f == "exp_tanh" else \
                    getattr(lib, f)(vals[i])
            elif kind == "scalar":
                _, op, i, c = stmt
                vals[-1] = vals[i] * c if op == "mul" else vals[i] + c if op == "add" else \
                    c - vals[i]
            elif kind == "reduce":
                _, i, axis, keep = stmt
                vals[-1] = lib.sum(vals[i], axis, keep)
            elif kind == "index":
                _, which, i = stmt
                vals[-1] = lib.index(vals[i], which)
            else:
                vals.pop()
                _, p, op, k, c = stmt
                with lib.no_grad():
                    if op == "sub":
                        params[p] -= c * vals[k]
                    else:
                        params[p] *= c
        loss = params[0].sum() * 0.0 + (params[0] * params[0]).sum() * 0.1
        for k, c in prog["loss_terms"]:
            loss = loss + lib.sum(vals[k], None, False) * c
        observed = {"requires_grad": [bool(v.requires_grad) for v in vals],
                    "is_leaf": [bool(v.is_leaf) for v in vals]}
        ending = prog["ending"]
        updates = []
        if ending in ("backward", "backward_twice"):
            if loss.requires_grad:
                lib.backward(loss, ending == "backward_twice")
            observed["grads"] = [None if p.grad is None else lib.value(p.grad) for p in params]
            updates = [(p, p.grad) for p in params if p.grad is not None]
        elif ending == "grad":
            wrt = [vals[k] for k in prog["wrt"] if vals[k].requires_grad]
            if wrt:
                grads = lib.grad(loss, wrt)
                observed["grads"] = [lib.value(g) for g in grads]
                updates = [(params[k], g) for k, g in zip(prog["wrt"], grads) if k < 3]
        else:
            if params[0].requires_grad:
                (g,) = lib.grad(loss, [params[0]], create_graph=True)
                (h,) = lib.grad((g * g).sum(), [params[0]])
                observed["grads"] = [lib.value(g), lib.value(h)]
        with lib.no_grad():
            for p, g in updates:
                if p.requires_grad:
                    p -= 0.1 * g
        if prog["reset"]:
            for p in params:
                p.grad = None
        observed["loss"] = float(lib.value(loss))
        observed["values"] = [lib.value(v) for v in vals]
        observed["params"] = [lib.value(p) for p in params]
        seen.append(observed)
    return seen


def _compare(mine, theirs, where="step"):
    assert len(mine) == len(theirs)
    for step, (a, b) in enumerate(zip(mine, theirs)):
        assert a.keys() == b.keys(), (step, a.keys(), b.keys())
        for key in a:
            x, y = a[key], b[key]
            if isinstance(x, list):
                assert len(x) == len(y), (step, key)
                for i, (u, v) in enumerate(zip(x, y)):
                    if u is None or v is None or isinstance(u, bool):
                        assert u is v or u == v, (step, key, i, u, v)
                    else:
                        np.testing.assert_allclose(u, v, **TOL, err_msg=f"step {step} {key} {i}")
            else:
                np.testing.assert_allclose(x, y, **TOL, err_msg=f"step {step} {key}")


def _torch_refuses(prog):
    try:
        return run_program(Torch, prog), False
    except RuntimeError as e:
        if "inplace" in str(e):                    # a saved value updated in place
            return None, True
        raise


@pytest.fixture(autouse=True)
def _x64():
    re.run()
    with jax.enable_x64(True):
        yield
    re.run()


@fuzz_settings("eager_vs_torch")
@given(st.integers(0, 2**32 - 1))
def test_eager_matches_torch(seed):
    rng = np.random.default_rng(seed)
    for _ in range(20):
        prog = draw_program(rng)
        want, refused = _torch_refuses(prog)
        if not refused:
            break
    else:
        return
    with bounded(f"eager program of seed {seed}", seconds=60):
        got = run_program(Eager, prog)
    _compare(got, want)


def test_the_fuzzer_sees_each_feature():
    """The drawn programs hold what the fuzzer claims to test (over a fixed set of seeds)."""
    kinds = set()
    endings = set()
    for seed in range(60):
        prog = draw_program(np.random.default_rng(seed))
        kinds |= {s[0] for s in prog["body"]}
        kinds |= {"toggle"} if any(prog["toggles"]) else set()
        endings.add(prog["ending"])
    assert kinds >= {"bin", "un", "scalar", "reduce", "index", "mode", "inplace", "toggle"}
    assert endings == {"backward", "backward_twice", "grad", "grad_of_grad"}


def test_known_program_matches_torch():
    """One fixed program through every path (the issue's findings 1, 3 and 4 in one step)."""
    prog = dict(params=[(3,), (3,), ()], buffers=[(3,), ()],
                body=[("scalar", "mul", 0, 2.0), ("mode", False), ("inplace", 0, "sub", 3, 0.5),
                      ("bin", "mul", 0, 1), ("mode", True), ("bin", "add", 5, 0),
                      ("un", "tanh", 7), ("bin", "mul", 8, 4)],
                loss_terms=[(8, 1.0), (9, 0.5)], ending="grad", wrt=[0, 5, 8],
                toggles=[[], [(1, False)], [(1, True)]], reset=True,
                fills=[[np.arange(3.0), np.array(2.0)]] * STEPS,
                init=[np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0]), np.array(1.5)])
    want, refused = _torch_refuses(prog)
    assert not refused
    re.clear_cache()
    _compare(run_program(Eager, prog), want)
    stats = re.stats()
    assert stats["hits"] > 0 and stats["compiles"] > 0      # the repeated step compiled
