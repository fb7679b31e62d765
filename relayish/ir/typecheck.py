from relayish.errors import RelayishError


def infer_type(node, mod=None):
    raise RelayishError("type inference is not implemented yet")


def typeof(expr, mod=None):
    raise RelayishError("type inference is not implemented yet")
