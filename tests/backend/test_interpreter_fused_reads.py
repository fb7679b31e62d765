"""Accumulations after a separate read (relayish/backend/interp/compiler.py accumulate_step):
the passes' A-normal form leaves reverse AD's `r := !r + g` as `let %a = !r; r := %a + g`.
The compiler fuses it into one step when no reference is written in between in the same block
and drops the read's step when nothing else uses %a; the values are always the program's."""
import numpy as np
import pytest

import relayish as rl
from relayish.backend.interp import api as interp_api
from relayish.backend.interp import deferred

G = np.array([1.0, 2.0, 3.0])
H = np.array([4.0, -2.0, 0.25])
X = np.array([0.5, -1.0])


def compiled(text, *args, **options):
    mod = rl.infer_type(rl.parse(text))
    out = rl.evaluate(mod, *args, **options)
    assert not deferred.pending()
    code = None if options else interp_api._MODULE_CACHE[mod][1].code
    return out, code


def kinds(code):
    return [s.fn.__qualname__.split(".")[0] for s in code.steps]


def main(body, extra=""):
    return f"""
def @main(%g: Tensor[(3), float64], %h: Tensor[(3), float64]{extra}) {{
  let %r = ref(zeros(shape=[3], dtype="float64"));
  let %u0 = %r := !%r + %g;
  let %u1 = %r := !%r + %g;
{body}
}}"""


def test_a_read_used_only_by_the_accumulation_is_fused_and_its_step_dropped():
    out, code = compiled(main("""
  let %a = !%r;
  let %u2 = %r := %a + %h * 2f64;
  !%r"""), G, H)
    np.testing.assert_allclose(out, 2 * G + 2 * H)
    assert kinds(code).count("accumulate_step") == 3
    assert kinds(code).count("ref_read_step") == 1         # the last `!%r` only
    assert "ref_write_step" not in kinds(code)


def test_a_read_used_again_keeps_its_value_the_in_place_add_never_touches_it():
    (a, r), code = compiled(main("""
  let %a = !%r;
  let %u2 = %r := %a + %h;
  (%a, !%r)"""), G, H)
    np.testing.assert_allclose(a, 2 * G)
    np.testing.assert_allclose(r, 2 * G + H)
    assert kinds(code).count("ref_read_step") == 2


def test_a_write_between_the_read_and_the_accumulation_adds_the_value_read():
    out, code = compiled(main("""
  let %a = !%r;
  let %w = %r := %h;
  let %u2 = %r := %a + %g;
  !%r"""), G, H)
    np.testing.assert_allclose(out, 3 * G)
    assert kinds(code).count("accumulate_step") == 2


def test_a_call_between_the_read_and_the_accumulation_adds_the_value_read():
    text = main("""
  let %a = !%r;
  let %w = %f(%r, %h);
  let %u2 = %r := %a + %g;
  !%r""", extra=", %f: fn (ref(Tensor[(3), float64]), Tensor[(3), float64]) -> ()")

    def f(ref, h):
        ref.value = np.array(h)
        return ()
    out, _ = compiled(text, G, H, f)
    np.testing.assert_allclose(out, 3 * G)


def test_an_inline_read_comes_before_an_added_expression_that_writes_the_reference():
    out, code = compiled(main("""
  let %u2 = %r := !%r + (let %w = %r := %h; %g);
  !%r"""), G, H)
    np.testing.assert_allclose(out, 3 * G)
    out, code = compiled(main("""
  let %u2 = %r := !%r + %h * 2f64;
  !%r"""), G, H)
    np.testing.assert_allclose(out, 2 * G + 2 * H)
    assert kinds(code).count("ref_read_step") == 1 and "ref_write_step" not in kinds(code)


def test_a_read_in_another_branch_or_closure_is_not_fused_across():
    out, _ = compiled(main("""
  let %a = !%r;
  let %k = fn () { %r := %a + %h };
  let %w = %r := %g;
  let %u2 = %k();
  (!%r, %a)"""), G, H)
    np.testing.assert_allclose(out[0], 2 * G + H)
    np.testing.assert_allclose(out[1], 2 * G)
    text = main("""
  let %a = !%r;
  let %s = if (%c) { %r := %a + %h } else { () };
  !%r""", extra=", %c: bool")
    for c in (True, False):
        out, _ = compiled(text, G, H, np.bool_(c))
        np.testing.assert_allclose(out, 2 * G + (H if c else 0))


def test_an_inline_outer_product_after_a_read_is_deferred():
    text = """
def @main(%g: Tensor[(3), float64], %x: Tensor[(2), float64]) {
  let %r = ref(zeros(shape=[3, 2], dtype="float64"));
  let %a = !%r;
  let %u0 = %r := %a + expand_dims(%g, axis=-1) * %x;
  let %b = !%r;
  let %u1 = %r := %b + expand_dims(%g, axis=-1) * %x;
  !%r
}"""
    out, code = compiled(text, G, X)
    np.testing.assert_allclose(out, 2 * np.outer(G, X))
    assert kinds(code).count("outer_accumulate_step") == 2
    assert kinds(code).count("ref_read_step") == 1


@pytest.mark.parametrize("mode", ["debug_nans", "debug_alloc"])
def test_debug_modes_give_the_same_values(mode):
    out, _ = compiled(main("""
  let %a = !%r;
  let %u2 = %r := %a + %h * 2f64;
  (%a, !%r)"""), G, H, **{mode: True})
    np.testing.assert_allclose(out[0], 2 * G)
    np.testing.assert_allclose(out[1], 2 * G + 2 * H)


def test_the_optimized_tree_network_gradient_accumulates_in_fused_steps():
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples"))
    from tree_network import random_tree, to_value, tree_module
    mod, p = tree_module(4)
    rng = np.random.default_rng(3)
    W, b = rng.normal(size=(4, 8)), rng.normal(size=4)
    tree = to_value(p, random_tree(rng, 5, 4))
    opt = rl.grad(mod, argnums=(0, 1))
    raw = rl.grad(mod, argnums=(0, 1), optimize=False)
    for got, want in zip(rl.evaluate(opt, W, b, tree), rl.evaluate(raw, W, b, tree)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    main_code = interp_api._MODULE_CACHE[opt][1].code
    net_ad = next(c.code for c in main_code.rest if getattr(c, "code", None) is not None
                  and c.code.name == "@net_ad")
    make = next(s.fn for s in net_ad.steps if s.fn.__qualname__.startswith("closure_step"))
    backward = dict(zip(make.__code__.co_freevars,
                        (c.cell_contents for c in make.__closure__)))["code"]
    # b's, W's (deferred) and the two children's adjoints: one step each, no separate read
    assert sorted(kinds(backward)).count("accumulate_step") == 3
    assert kinds(backward).count("outer_accumulate_step") == 1
    assert kinds(backward).count("ref_read_step") == 1       # the node's own adjoint
    assert "ref_write_step" not in kinds(backward)


def test_large_accumulations_add_in_place_small_ones_store_a_new_sum():
    from relayish.backend.interp.steps import IN_PLACE_MIN_SIZE
    for n, in_place in ((8, False), (IN_PLACE_MIN_SIZE, True)):
        mod = rl.infer_type(rl.parse(f"""
def @main(%g: Tensor[({n}), float64], %r: ref(Tensor[({n}), float64])) {{
  let %u = %r := !%r + %g;
  ()
}}"""))
        r = rl.RefValue(np.zeros(n))          # only the reference holds its array
        before = id(r.value)
        rl.evaluate(mod, np.ones(n), r)
        assert (id(r.value) == before) == in_place
        np.testing.assert_array_equal(r.value, np.ones(n))
