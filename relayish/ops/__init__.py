"""The primitives, one module per family; importing this package fills the registry."""
