"""The binary TreeLSTM of Tai et al. (2015) in relayish text, with random parse-tree-shaped data.

    python examples/treelstm.py [--trees 5] [--seed 0]

A sentence is a binary tree of word indices (`type WTree { WLeaf(int32), WNode(WTree, WTree) }`).
A leaf embeds its word (`take(%E, %w, axis=0)`, the embedding lookup) and runs the leaf cell
(input, output and update gates from one matmul); an internal node runs the binary cell on its
children's (h, c) (input gate, one forget gate per child, output and update gates, one matmul
over concat(h_left, h_right)). @main scores the root's h with a linear classifier and returns
the cross-entropy of the sentence's label. rl.grad differentiates @main, following the recursion
over the tree, into ONE relayish program evaluated for every tree shape (no retracing).
benchmarks/treelstm.py times it against PyTorch, HIPS autograd and jax; tests/ad/test_treelstm.py
checks its gradient against jax.
"""
import argparse

import numpy as np

import relayish as rl

# Dimensions of the Tai et al. sentiment model (benchmarks/treelstm.py uses these).
VOCAB, EMBED, HIDDEN, CLASSES = 1000, 300, 150, 5

TEXT = """
type WTree {{ WLeaf(int32), WNode(WTree, WTree) }}

// (h, c) of the tree %t
def @cell(%E: Tensor[({V}, {D}), {F}], %Wl: Tensor[({H3}, {D}), {F}], %bl: Tensor[({H3}), {F}],
          %U: Tensor[({H5}, {H2}), {F}], %bn: Tensor[({H5}), {F}], %t: WTree)
          -> (Tensor[({H}), {F}], Tensor[({H}), {F}]) {{
  match (%t) {{
    WLeaf(%w) => {{
      let %x = take(%E, %w, axis=0);
      let %g = split(matmul(%Wl, %x) + %bl, indices_or_sections=3);
      let %c = sigmoid(%g.0) * tanh(%g.2);
      (sigmoid(%g.1) * tanh(%c), %c)
    }},
    WNode(%l, %r) => {{
      let %left = @cell(%E, %Wl, %bl, %U, %bn, %l);
      let %right = @cell(%E, %Wl, %bl, %U, %bn, %r);
      let %z = matmul(%U, concatenate((%left.0, %right.0), axis=0)) + %bn;
      let %g = split(%z, indices_or_sections=5);
      let %c = sigmoid(%g.0) * tanh(%g.4) + sigmoid(%g.1) * %left.1 + sigmoid(%g.2) * %right.1;
      (sigmoid(%g.3) * tanh(%c), %c)
    }}
  }}
}}

// the cross-entropy of the label %y given the root's h
def @main(%E: Tensor[({V}, {D}), {F}], %Wl: Tensor[({H3}, {D}), {F}], %bl: Tensor[({H3}), {F}],
          %U: Tensor[({H5}, {H2}), {F}], %bn: Tensor[({H5}), {F}],
          %Wo: Tensor[({K}, {H}), {F}], %bo: Tensor[({K}), {F}], %t: WTree, %y: int32) -> {F} {{
  let %h = @cell(%E, %Wl, %bl, %U, %bn, %t).0;
  -take(log_softmax(matmul(%Wo, %h) + %bo), %y)
}}
"""

PARAMS = ("E", "Wl", "bl", "U", "bn", "Wo", "bo")

# The same model written as the paper writes it, one weight matrix per gate and per child
# (`matmul(%Wli, %x)`, `matmul(%Uli, %hl)`, ...): 3 matmuls at a leaf, 10 at a node instead of
# 1 and 1. rl.passes.merge_matmul turns it back into stacked matmuls (benchmarks/treelstm.py
# times both). Gate order as above: leaf i, o, u; node i, fl, fr, o, u.
LEAF_GATES, NODE_GATES = ("i", "o", "u"), ("i", "fl", "fr", "o", "u")
GATE_PARAMS = (("E",) + tuple(f"Wl{g}" for g in LEAF_GATES)
               + tuple(f"bl{g}" for g in LEAF_GATES)
               + tuple(f"Ul{g}" for g in NODE_GATES) + tuple(f"Ur{g}" for g in NODE_GATES)
               + tuple(f"bn{g}" for g in NODE_GATES) + ("Wo", "bo"))

GATES_TEXT = """
type WTree {{ WLeaf(int32), WNode(WTree, WTree) }}

def @cell({cell_params}, %t: WTree) -> (Tensor[({H}), {F}], Tensor[({H}), {F}]) {{
  match (%t) {{
    WLeaf(%w) => {{
      let %x = take(%E, %w, axis=0);
      let %c = sigmoid(matmul(%Wli, %x) + %bli) * tanh(matmul(%Wlu, %x) + %blu);
      (sigmoid(matmul(%Wlo, %x) + %blo) * tanh(%c), %c)
    }},
    WNode(%l, %r) => {{
      let %left = @cell({cell_args}, %l);
      let %right = @cell({cell_args}, %r);
      let %hl = %left.0;
      let %hr = %right.0;
      let %c = {gate_i} * tanh({pre_u}) + {gate_fl} * %left.1 + {gate_fr} * %right.1;
      ({gate_o} * tanh(%c), %c)
    }}
  }}
}}

def @main({cell_params}, %Wo: Tensor[({K}, {H}), {F}], %bo: Tensor[({K}), {F}], %t: WTree,
          %y: int32) -> {F} {{
  let %h = @cell({cell_args}, %t).0;
  -take(log_softmax(matmul(%Wo, %h) + %bo), %y)
}}
"""


def treelstm_text(vocab=VOCAB, embed=EMBED, hidden=HIDDEN, classes=CLASSES, dtype="float32"):
    """The model's relayish text for these dimensions."""
    return TEXT.format(V=vocab, D=embed, H=hidden, H2=2 * hidden, H3=3 * hidden, H5=5 * hidden,
                       K=classes, F=dtype)


def treelstm_gates_text(vocab=VOCAB, embed=EMBED, hidden=HIDDEN, classes=CLASSES,
                        dtype="float32"):
    """The per-gate model's relayish text (GATES_TEXT) for these dimensions."""
    shapes = {"E": (vocab, embed)}
    shapes.update({f"Wl{g}": (hidden, embed) for g in LEAF_GATES})
    shapes.update({f"bl{g}": (hidden,) for g in LEAF_GATES})
    shapes.update({f"U{side}{g}": (hidden, hidden) for side in "lr" for g in NODE_GATES})
    shapes.update({f"bn{g}": (hidden,) for g in NODE_GATES})

    def tensor(shape):
        return f"Tensor[({', '.join(map(str, shape))}), {dtype}]"

    def pre(g):
        return f"matmul(%Ul{g}, %hl) + matmul(%Ur{g}, %hr) + %bn{g}"
    names = GATE_PARAMS[:-2]
    return GATES_TEXT.format(
        cell_params=", ".join(f"%{n}: {tensor(shapes[n])}" for n in names),
        cell_args=", ".join(f"%{n}" for n in names), H=hidden, K=classes, F=dtype,
        pre_u=pre("u"), **{f"gate_{g}": f"sigmoid({pre(g)})" for g in ("i", "fl", "fr", "o")})


def treelstm_gates_module(**dims):
    """The parsed, type-checked per-gate module (GATES_TEXT)."""
    return rl.infer_type(rl.parse(treelstm_gates_text(**dims)))


def to_gate_params(params):
    """(E, Wl, bl, U, bn, Wo, bo) as the per-gate model's parameters (GATE_PARAMS): the same
    numbers, cut into one block per gate (and per child), so both models compute one loss."""
    E, Wl, bl, U, bn, Wo, bo = params
    h = U.shape[1] // 2
    rows = [slice(k * h, (k + 1) * h) for k in range(5)]
    return ((E,) + tuple(Wl[r] for r in rows[:3]) + tuple(bl[r] for r in rows[:3])
            + tuple(U[r, :h] for r in rows) + tuple(U[r, h:] for r in rows)
            + tuple(bn[r] for r in rows) + (Wo, bo))


def treelstm_module(**dims):
    """The parsed, type-checked module (@cell, @main, type WTree)."""
    return rl.infer_type(rl.parse(treelstm_text(**dims)))


def init_params(rng, vocab=VOCAB, embed=EMBED, hidden=HIDDEN, classes=CLASSES, dtype="float32"):
    """(E, Wl, bl, U, bn, Wo, bo) with small random values."""
    def w(*shape, scale):
        return (rng.normal(size=shape) * scale).astype(dtype)
    return (w(vocab, embed, scale=0.1), w(3 * hidden, embed, scale=embed ** -0.5),
            w(3 * hidden, scale=0.1), w(5 * hidden, 2 * hidden, scale=(2 * hidden) ** -0.5),
            w(5 * hidden, scale=0.1), w(classes, hidden, scale=hidden ** -0.5),
            w(classes, scale=0.1))


def random_tree(rng, leaves, vocab=VOCAB):
    """A random binary tree with `leaves` leaves: nested Python pairs of word indices."""
    if leaves == 1:
        return int(rng.integers(vocab))
    k = int(rng.integers(1, leaves))
    return (random_tree(rng, k, vocab), random_tree(rng, leaves - k, vocab))


def to_value(mod, tree):
    """The nested pairs as a relayish WTree value (built with a loop: trees may be deep)."""
    leaf, node = mod.get_constructor("WLeaf"), mod.get_constructor("WNode")
    done, work = [], [(tree, False)]
    while work:
        t, children_done = work.pop()
        if not isinstance(t, tuple):
            done.append(rl.ConstructorValue(leaf, [np.int32(t)]))
        elif children_done:
            r = done.pop()
            done.append(rl.ConstructorValue(node, [done.pop(), r]))
        else:
            work += [(t, True), (t[1], False), (t[0], False)]
    return done[0]


def reference_loss(xp, params, tree, label):
    """The same model written with an array module `xp` (jax.numpy, autograd.numpy, numpy),
    recursing in Python over the nested pairs: the oracle of the tests and the benchmark."""
    E, Wl, bl, U, bn, Wo, bo = params

    def sigmoid(z):
        return 1 / (1 + xp.exp(-z))

    def cell(t):
        if not isinstance(t, tuple):
            i, o, u = xp.split(Wl @ E[t] + bl, 3)
            c = sigmoid(i) * xp.tanh(u)
            return sigmoid(o) * xp.tanh(c), c
        (hl, cl), (hr, cr) = cell(t[0]), cell(t[1])
        i, fl, fr, o, u = xp.split(U @ xp.concatenate([hl, hr]) + bn, 5)
        c = sigmoid(i) * xp.tanh(u) + sigmoid(fl) * cl + sigmoid(fr) * cr
        return sigmoid(o) * xp.tanh(c), c

    logits = Wo @ cell(tree)[0] + bo
    m = xp.max(logits)
    return m + xp.log(xp.sum(xp.exp(logits - m))) - logits[label]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    mod = treelstm_module()
    params = init_params(rng)
    grad = rl.grad(mod, argnums=tuple(range(len(PARAMS))))
    for k in range(args.trees):
        tree = to_value(mod, random_tree(rng, int(rng.integers(5, 41))))
        label = np.int32(rng.integers(CLASSES))
        loss = rl.evaluate(mod, *params, tree, label)
        grads = rl.evaluate(grad, *params, tree, label)
        norms = "  ".join(f"|d{n}| {np.linalg.norm(g):.4f}" for n, g in zip(PARAMS, grads))
        print(f"tree {k}: loss {float(loss):.4f}  {norms}")


if __name__ == "__main__":
    main()
