"""Every operator as a Python function building a call (rl.add, rl.op.sum, ...)."""
__all__ = []
