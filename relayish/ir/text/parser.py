from relayish.errors import RelayishError


def parse(text, filename=None):
    raise RelayishError("the parser is not implemented yet")


def parse_expr(text, filename=None):
    raise RelayishError("the parser is not implemented yet")
