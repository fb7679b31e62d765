"""The errors relayish raises. Every user mistake surfaces as a RelayishError subclass."""


class RelayishError(Exception):
    """Base of every error relayish reports to its users."""


class ParseError(RelayishError):
    """Malformed program text. Carries the 1-based line and column and shows a caret."""

    def __init__(self, message, line=0, column=0, source_line=None, filename=None):
        self.message = message
        self.line = line
        self.column = column
        self.source_line = source_line
        self.filename = filename
        super().__init__(self._render())

    def _render(self):
        where = f"{self.filename or '<text>'}:{self.line}:{self.column}: "
        text = where + self.message
        if self.source_line is not None:
            text += "\n  " + self.source_line + "\n  " + " " * max(self.column - 1, 0) + "^"
        return text


class TypeCheckError(RelayishError):
    """An ill-typed program: names the offending expression with its text.

    `.node` is that expression when known (the command line turns it into file:line:column).
    """

    node = None


class EvaluationError(RelayishError):
    """A fault while running a program (a match with no clause, a bad argument...)."""


class GradientError(RelayishError):
    """A program that cannot be differentiated (missing gradient rule, non-float output...)."""


class CompileError(RelayishError):
    """A program a backend cannot compile (e.g. unbounded recursion under jax.jit)."""
