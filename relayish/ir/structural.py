from relayish.errors import RelayishError


def structural_equal(a, b, map_free_vars=False):
    raise RelayishError("structural equality is not implemented yet")


def assert_structural_equal(a, b, map_free_vars=False):
    raise RelayishError("structural equality is not implemented yet")
