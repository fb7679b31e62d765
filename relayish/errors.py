"""The errors relayish raises. Every user mistake surfaces as a RelayishError subclass."""


class RelayishError(Exception):
    """Base of every error relayish reports to its users."""


class ParseError(RelayishError):
    """Malformed program text. Carries the 1-based line and column and shows a caret.

    `.snippet` is the part of the source line to show (at most WINDOW columns around the
    column, so a 250 KB line shows 80 characters) and a caret under the column, as two lines
    indented by two spaces; `.excerpt` and `.excerpt_column` are that part and the caret's
    1-based column in it. `.source_line` is the whole line.
    """

    WINDOW = 80

    def __init__(self, message, line=0, column=0, source_line=None, filename=None):
        self.message = message
        self.line = line
        self.column = column
        self.source_line = source_line
        self.filename = filename
        self.excerpt, self.excerpt_column = source_line, column
        if source_line is not None and len(source_line) > self.WINDOW:
            lo = min(max(0, column - 1 - self.WINDOW // 2), len(source_line) - self.WINDOW)
            lo = max(lo, 0)
            self.excerpt = source_line[lo:lo + self.WINDOW]
            self.excerpt_column = column - lo
        super().__init__(self._render())

    @property
    def snippet(self) -> str:
        if self.excerpt is None:
            return ""
        return "  " + self.excerpt + "\n  " + " " * max(self.excerpt_column - 1, 0) + "^"

    def _render(self):
        where = f"{self.filename or '<text>'}:{self.line}:{self.column}: "
        text = where + self.message
        if self.excerpt is not None:
            text += "\n" + self.snippet
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


def did_you_mean(word, candidates, prefix=""):
    """" (did you mean %tanh?)" when one of `candidates` is close to `word` (difflib's
    ratio, as Python's own NameError suggestions), else "". `prefix` goes before the name
    shown (`%` for a variable)."""
    import difflib
    close = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=3, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(prefix + c for c in close) + "?)"
