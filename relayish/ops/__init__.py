"""The primitives, one module per family; importing this package fills the registry.

elementwise (arithmetic, unary math, where, zeros/ones/cast), compare (comparisons, logic),
reduce (sum, mean, max, min), shape (transpose, reshape, broadcasting, concatenate, stack,
take and their internal helpers), nn (matmul, softmax, log_softmax), layers (Relay's nn.*: dense,
conv2d, pooling, layer_norm, ...), tensor (clip, split, squeeze, full, one_hot, argmax, erf,
cumsum, gather, scatter_add), special (lgamma, digamma, polygamma, multigammaln),
einsum. api.py builds calls.
"""
from relayish.ops import compare, elementwise, nn, reduce, shape  # noqa: F401
from relayish.ops import layers, tensor  # noqa: F401  Relay's nn.* and tensor operators
from relayish.ops import einsum, special  # noqa: F401  einsum; lgamma, digamma, ...
