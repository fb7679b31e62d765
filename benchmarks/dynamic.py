"""Programs beyond trees on the jax backend's dynamic path (issue 17, "Measure"): an RNN over
variable-length sequences and a traced-condition loop, each ONE compilation, against the
interpreter, PyTorch eager and jax.jit.

    python benchmarks/dynamic.py [--seqs 100] [--rounds 3] [--seed 0] [--quick]

* The RNN: an Elman cell over a sequence of word indices, written as a right fold over the list
  (`@rnn(xs) = match xs { Step(w, rest) => cell(@rnn(rest), w), Last(w) => cell(0, w) }`), a
  classifier's cross-entropy on the final state; value_and_grad w.r.t. all 6 parameters.
  Embedding 64, hidden 128, vocabulary 1000, 5 classes, float32, --seqs sequences of 5-100
  words. The sequence type has no empty sequence: the fold's AD output with an empty base case
  (`Nil => h0`, where no backpropagator is written) is not a loop yet (a CompileError naming
  @rnn_ad; tests/backend/test_jax_dynamic_rnn.py pins it).
  - relayish jax, one program: rl.compile(vg, backend="jax", capacity={"nodes": 128}); its
    first call (trace + XLA) is the compile time of the whole data set; sequences passed as
    node tables encoded before timing (as a data loader would).
  - relayish interpreter: the same value_and_grad program, one call per sequence.
  - PyTorch eager CPU (the `bench` extra, torch==2.13.0): the same loop, loss.backward().
  - jax.jit per length: jax.value_and_grad of a Python loop over the words, jitted; one
    compilation per distinct length. Its compile time is measured for a few lengths and summed
    over the data set's distinct lengths (fitted linearly in the length).
* The traced-condition loop: `@loop(x) = if sum(x * x) > eps { @loop(step(x)) } else { x }` over
  a float32[256] vector, 0-40 iterations depending on the input; relayish jax (one while loop)
  against jax.jit of jax.lax.while_loop written by hand.

Times: one thread (XLA, BLAS and torch), CPU time of the process, the competitors interleaved
sequence by sequence, best of --rounds; ms per item and ratios. Values and gradients are
checked between the implementations before timing.
"""
import os

if __name__ == "__main__":      # one thread everywhere, before numpy/jax/torch are imported
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_cpu_multi_thread_eigen=false"
                               " intra_op_parallelism_threads=1").strip()

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import relayish as rl  # noqa: E402

RNN_TEXT = """
type Seq {{ Last(int32), Step(int32, Seq) }}

def @rnn(%E: Tensor[({V}, {D}), {F}], %W: Tensor[({H}, {H}), {F}], %U: Tensor[({H}, {D}), {F}],
         %b: Tensor[({H}), {F}], %xs: Seq) -> Tensor[({H}), {F}] {{
  match (%xs) {{
    Last(%w) => tanh(matmul(%U, take(%E, %w, axis=0)) + %b),
    Step(%w, %rest) => {{
      let %h = @rnn(%E, %W, %U, %b, %rest);
      tanh(matmul(%W, %h) + matmul(%U, take(%E, %w, axis=0)) + %b)
    }}
  }}
}}

def @main(%E: Tensor[({V}, {D}), {F}], %W: Tensor[({H}, {H}), {F}], %U: Tensor[({H}, {D}), {F}],
          %b: Tensor[({H}), {F}], %Wo: Tensor[({K}, {H}), {F}], %bo: Tensor[({K}), {F}],
          %xs: Seq, %y: int32) -> {F} {{
  let %h = @rnn(%E, %W, %U, %b, %xs);
  -take(log_softmax(matmul(%Wo, %h) + %bo), %y)
}}
"""

LOOP_TEXT = """
def @loop(%x: Tensor[({N}), {F}], %eps: {F}) -> Tensor[({N}), {F}] {{
  if (sum(%x * %x) > %eps) {{ @loop(%x * 0.7{s} + sin(%x) * 0.05{s}, %eps) }} else {{ %x }}
}}
def @main(%x: Tensor[({N}), {F}]) -> {R} {{ {body} }}
"""


def rnn_module(vocab, embed, hidden, classes, dtype="float32"):
    """The parsed, type-checked RNN module (@rnn, @main, type Seq)."""
    return rl.infer_type(rl.parse(RNN_TEXT.format(V=vocab, D=embed, H=hidden, K=classes,
                                                  F=dtype)))


def loop_module(n, dtype="float32", summed=False):
    """The traced-condition loop: x <- 0.7 x + 0.05 sin(x) while |x|^2 > 0.001; @main returns
    the final x, or its sum (a scalar to differentiate) when `summed`."""
    suffix = {"float32": "f", "float64": "f64"}[dtype]
    call = f"@loop(%x, 0.001{suffix})"
    result, body = (dtype, f"sum({call})") if summed else (f"Tensor[({n}), {dtype}]", call)
    return rl.infer_type(rl.parse(LOOP_TEXT.format(N=n, F=dtype, s=suffix, R=result,
                                                   body=body)))


def rnn_params(rng, vocab, embed, hidden, classes, dtype="float32"):
    """(E, W, U, b, Wo, bo), scaled so the state neither saturates nor vanishes."""
    shapes = [(vocab, embed), (hidden, hidden), (hidden, embed), (hidden,), (classes, hidden),
              (classes,)]
    return tuple((rng.normal(size=s) / np.sqrt(s[-1] if len(s) == 2 else 1) *
                  (0.5 if len(s) == 2 else 0.1)).astype(dtype) for s in shapes)


def to_seq(mod, words):
    """A non-empty list of word indices as a relayish Seq value (first word outermost)."""
    last, step = mod.get_constructor("Last"), mod.get_constructor("Step")
    value = rl.ConstructorValue(last, [np.int32(words[-1])])
    for w in reversed(words[:-1]):
        value = rl.ConstructorValue(step, [np.int32(w), value])
    return value


def rnn_loss_jax(params, words, y):
    """The same loss as @main in jax, a Python loop over the words from the last to the first
    (the fold's order: the innermost call is the last word)."""
    import jax.numpy as jnp
    E, W, U, b, Wo, bo = params
    h = jnp.tanh(U @ E[words[-1]] + b)
    for w in reversed(words[:-1]):
        h = jnp.tanh(W @ h + U @ E[w] + b)
    logits = Wo @ h + bo
    return -(logits - jnp.log(jnp.sum(jnp.exp(logits - jnp.max(logits)))) - jnp.max(logits))[y]
