from relayish.errors import RelayishError


class Prelude:
    def __init__(self, mod=None):
        raise RelayishError("the prelude is not implemented yet")
