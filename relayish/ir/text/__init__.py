"""The text format: lexer, parser, printer and the formatter (format_text, which keeps comments).

`format_source` is format_text under the name the command line looks for.
"""


def __getattr__(name):
    # lazily: the parser imports the IR modules, which import this package's modules lazily
    if name in ("format_text", "format_source"):
        from relayish.ir.text.format import format_text
        return format_text
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
