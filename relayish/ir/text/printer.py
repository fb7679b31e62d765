from relayish.errors import RelayishError


def astext(node, **kwargs):
    raise RelayishError("the printer is not implemented yet")


def type_text(t):
    return repr(t)
