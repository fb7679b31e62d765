"""Newton-style optimizers over relayish objectives: rl.optim.minimize.

Methods: "newton", "newton-cg", "trust-ncg", "bfgs", "gd" (see minimize's docstring).
"""
from relayish.optim.methods import METHODS
from relayish.optim.minimize import OptimizeResult, minimize, minimize_callables

__all__ = ["minimize", "minimize_callables", "OptimizeResult", "METHODS"]
