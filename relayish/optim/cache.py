"""The problems (derived programs, compiled) of minimize's last calls, reused across calls."""
from __future__ import annotations

from relayish.optim.backends import AUTO, AutoProblem
from relayish.optim.problem import RelayishProblem


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
        build = AutoProblem if backend == AUTO else RelayishProblem
        problem = build(obj, n, method, backend, device, hessian)
        PROBLEMS.put(obj, options, problem)
    return problem
