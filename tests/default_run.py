"""What the default run (`python -m pytest`, `-m "not slow"`) leaves to `-m slow` by its measured
cost: the cases of a family past the one the default run keeps (issue 28: the default run had
grown to about 9 minutes of CPU on the 2-core machine under load, 5,290 tests; notes/testing.md
has the measurements).

Per file, each entry is a test's name, with or without its parametrization (without: every
case; ending inside the brackets: the cases whose ids start so); tests/conftest.py marks the
tests it names `slow`, so CI's `-m slow` run still runs every one. The figure is the
test's CPU seconds in the default run measured before the move (2026-12-03, the machine loaded:
about 2x an idle machine's); the comment names the case of the same path the default run keeps.
A test marked slow in its own file needs no entry here: this table is for cases whose cost was
found by measuring the whole run, kept in one place so that the next measurement can see them.
"""

# a file named twice would keep only its second entry: a test below checks there is none
LEFT_TO_SLOW = {
    # the fuzzer of compiled loops: the right folds stay (6.2 s)
    "tests/fuzz/test_dynamic_loops.py": {
        "test_random_programs_value_and_gradient_one_compilation[left]": 11.7,
        # the state-keeping descents of test_jax_dynamic_tail.py stay (measured 2026-12-03,
        # second round, 5,867 tests; a property test: CI's -m slow run had it already)
        "test_random_state_keeping_loops_value_and_gradient_one_compilation": 7.2,
        # test_jax_dynamic_nested.py's gradients of nested loops and loops under ifs, and this
        # fuzzer's value cases of both shapes, stay (property tests, as the one above)
        "test_random_nested_loops_and_loops_under_ifs_gradient_one_compilation": 22.9,
        "test_random_programs_value_and_gradient_one_compilation[loop]": 6.9,
        "test_random_programs_gradient_under_vmap": 8.9,
    },
    # RNN loops: lengths 1-200 and the padded reference stay
    "tests/backend/test_jax_dynamic_rnn.py": {
        "test_rnn_per_sequence_gradients_under_vmap_one_trace": 6.6,
        "test_rnn_with_an_empty_base_case_under_vmap_one_trace": 3.7,
        "test_rnn_over_a_list_of_vectors_gradient_is_one_loop": 3.4,
        "test_rnn_with_an_empty_base_case_gradient_is_one_loop": 1.6,
    },
    # tree and list folds: the list fold, default capacity buckets stay
    "tests/backend/test_jax_dynamic.py": {
        "test_two_folds_of_one_tree_chain_their_backward_loops": 5.7,
        "test_value_and_grad_one_compilation_same_gradients[6]": 5.5,
        "test_batched_loops_run_the_capacity_and_padding_rows_leave_no_nan": 2.7,
    },
    # folds of vectors: a tree of vectors (unbatched) and a left fold of every length stay
    "tests/backend/test_jax_dynamic_folds.py": {
        "test_leaves_that_write_no_backpropagator_are_skipped_by_the_backward_loop": 5.1,
        "test_a_list_of_vectors_weight_gradient_under_vmap_is_one_trace": 3.6,
        "test_a_left_folds_gradient_from_a_constant_state_is_one_loop": 3.0,
        "test_a_left_folds_weight_gradient_from_a_constant_state_under_vmap_is_one_trace": 2.8,
        "test_a_tree_of_vectors_gradient_is_one_loop[True]": 2.8,
        "test_a_long_list_of_vectors_gradient_is_a_loop_not_an_unrolled_trace": 2.0,
        "test_a_left_fold_and_a_right_fold_of_one_list_and_rl_vmap": 1.6,
    },
    "tests/backend/test_jax_dynamic_rows_speed.py": {
        "test_the_treelstm_gradient_leaves_its_own_slots_unwritten": 4.2,
    },
    # traced-condition loops: float64 trip counts, a weight gradient of a vector stay
    "tests/backend/test_jax_dynamic_tail.py": {
        "test_the_loops_hessian_is_one_compilation_for_every_trip_count": 4.0,
        "test_a_gradient_loop_past_its_step_capacity_is_an_evaluation_error": 2.2,
        "test_a_loop_whose_step_uses_a_weight_gradient_for_the_weight_too[matrix]": 1.8,
        "test_traced_condition_loop_gradient_is_one_compilation_for_every_trip_count[float32": 1.8,
        "test_a_loop_carrying_two_tensors_gradient_one_compilation": 1.7,
        "test_the_loop_gradient_under_vmap_one_trace": 1.6,
    },
    # batches: rl.vmap over trees of every size stays; sharding runs under -m slow only
    "tests/backend/test_vmap_devices.py": {
        "test_the_batch_is_sharded_over_four_simulated_cpu_devices": 4.1,
    },
    "tests/backend/test_vmap_trees.py": {
        "test_per_example_gradients_over_trees": 3.7,
    },
    "tests/backend/test_jax_settle.py": {
        "test_dense_hit_rows_give_the_interpreters_gradient_for_every_tree_size": 4.0,
        "test_an_embeddings_gradient_through_a_matmul[%W * %s]": 1.6,
    },
    "tests/backend/test_jax_deep_values.py": {
        "test_gradient_with_a_long_list_argument": 2.8,
        "test_codec_of_a_long_list_is_iterative": 2.3,
    },
    "tests/backend/test_jax.py": {
        "test_deep_static_recursion": 1.9,
    },
    "tests/backend/test_jax_random.py": {
        "test_random_gradients_agree": 1.8,     # fuzz/ does too
    },
    "tests/backend/test_integer_semantics.py": {
        "test_backends_agree_on_edge_values": 3.4,
    },
    # Newton's XLA loop: the same iterates as the host loop, one call per accepted step stay
    "tests/optim/test_newton_device.py": {
        "test_xla_loop_stops_like_the_host_loop": 4.1,
        "test_warm_up_compiles_everything_a_run_calls": 3.3,
        "test_nan_at_the_start_and_after_a_step": 2.4,
        "test_xla_loop_takes_the_stepwise_loops_iterates[rosenbrock4]": 2.3,
        "test_unwatched_newton_is_one_call_line_searches_included": 1.9,
        "test_rosenbrock_full_steps_stay_in_xla": 1.8,
        "test_minimize_counts_one_evaluation_per_accepted_step": 1.6,
        "test_xla_loop_meets_an_indefinite_hessian": 1.2,
    },
    "tests/optim/test_minimize.py": {
        "test_list_variable_with_integer_leaves_fixed": 2.2,
        "test_deeply_nested_objective_module[400]": 1.7,
    },
    "tests/optim/test_auto_backend.py": {
        "test_the_budget_adds_up_across_calls": 2.3,
    },
    "tests/optim/test_examples.py": {
        "test_layers_example_newton_agrees_with_trust_ncg": 1.6,
    },
    # checkpointing: the recompute counts and sqrt memory of foldr stay
    "tests/ir/passes/test_checkpoint.py": {
        "test_live_memory_grows_as_the_schedule_says": 4.1,
        "test_chain_of_1000_same_gradient[sqrt]": 1.6,
        "test_list_loop_revolve_memory_grows_as_log": 1.3,
        "test_list_loop_revolve_recompute_count_and_split": 1.2,
        "test_list_loop_of_1000_same_gradient": 1.0,
        "test_list_loop_revolve_vjp_and_grad": 0.9,
    },
    "tests/ir/passes/test_checkpoint_foldr.py": {
        "test_foldr_grad_value_and_grad_vjp": 2.7,
        "test_foldr_of_1000_same_gradient": 0.7,
    },
    "tests/ir/passes/test_checkpoint_api.py": {
        "test_vjp_with_checkpoint_keeps_little": 1.9,
        "test_grad_and_value_and_grad_with_checkpoint[revolve-argnums2]": 1.0,
        "test_vjp_with_checkpoint[revolve]": 0.6,
    },
    # random programs through the passes: each pass's "keeps the values" property stays
    "tests/ir/passes/test_types_kept.py": {
        "test_the_passes_keep_the_types_of_random_programs": 3.3,
    },
    "tests/ir/passes/test_properties.py": {
        "test_optimized_programs_differentiate_to_the_same_gradient": 2.8,
    },
    "tests/ir/passes/test_pipeline.py": {
        "test_optimized_random_programs_and_their_gradients_differentiate_again": 2.5,
    },
    "tests/ir/passes/test_partial_eval.py": {
        "test_partially_evaluated_programs_differentiate_to_the_same_gradient": 1.3,
        "test_long_let_chains[2000]": 1.7,
    },
    "tests/ir/passes/test_simplify.py": {
        "test_simplified_programs_differentiate_to_the_same_gradient": 1.2,
    },
    "tests/ir/passes/test_cse.py": {
        "test_cse_output_differentiates_to_the_same_gradient": 1.4,
    },
    "tests/ir/passes/test_inline.py": {
        "test_inlined_random_programs_differentiate_to_the_same_gradient": 1.2,
        "test_long_let_chains[2000]": 1.6,
    },
    "tests/ir/passes/test_merge_matmul.py": {
        "test_a_long_let_chain[5000]": 1.5,
    },
    # deep and long inputs: the parser's flat chains at their default size stay
    "tests/ir/test_parser.py": {
        "test_long_statement_sequence_and_long_flat_infix_chain": 3.5,
    },
    "tests/ir/test_typecheck.py": {
        "test_deep_non_let_nesting[1500]": 2.1,
    },
    "tests/fuzz/test_parse_fuzz.py": {
        "test_flat_chains_are_loops_not_nesting": 2.3,
        "test_deep_nesting_parses_or_raises_parse_error[matches-1200]": 1.3,
        "test_deep_nesting_parses_or_raises_parse_error[ref types-1200]": 0.8,
        "test_deep_nesting_parses_or_raises_parse_error[negations-1200]": 1.2,
        "test_deep_nesting_parses_or_raises_parse_error[closures-1200]": 1.1,
    },
    # AD: the nested closure (fn) case and the local recursion's gradients stay
    "tests/ad/test_nesting_cost.py": {
        "test_deeply_nested_gradient_and_jvp_values[if]": 4.0,
    },
    "tests/ad/test_local_recursion.py": {
        "test_hessian_and_hvp_against_finite_differences_and_globals[nested]": 1.9,
        "test_grad_of_grad_against_finite_differences_and_globals[nested]": 1.0,   # [nat] stays
        "test_grad_of_grad_against_finite_differences_and_globals[list]": 0.6,
        "test_jvp_of_jvp_second_directional_derivative[nested]": 1.0,
    },
    "tests/ops/test_relay_ops_vs_jax.py": {
        "test_conv_pool_gradients_on_drawn_shapes": 2.7,
    },
    # measured again after the session's other work landed (5,800 tests): new families
    "tests/interop/test_interop_examples.py": {
        "test_the_interop_example_runs_and_its_checks_hold": 15.1,   # test_to_jax/torch stay
    },
    "tests/interop/test_jaxpr.py": {
        "test_drawn_jax_programs_agree_in_value_and_gradient": 8.1,  # the named programs stay
    },
    "tests/interop/test_scaling.py": {
        "test_sharded_over_simulated_devices_equals_one_device": 4.2,
    },
    "tests/interop/test_to_jax.py": {
        "test_round_trip_equals_the_jax_function[scan_rnn]": 1.8,   # [mlp] stays
    },
    "tests/ir/passes/test_relay_passes.py": {
        "test_the_relay_form_passes_keep_the_values_of_random_programs": 6.3,
    },
    "tests/ops/test_math_ops_vs_jax.py": {   # [elementwise] stays
        "test_values_gradients_and_second_order_match_jax[reductions_scans]": 3.8,
        "test_values_gradients_and_second_order_match_jax[special]": 3.6,
        "test_values_gradients_and_second_order_match_jax[einsum_scatter]": 2.0,
    },
    "tests/gradbench/test_evals.py": {
        "test_gmm": 3.1,                     # hello, lse, llsq, kmeans, ode stay
        "test_ba": 4.2,                      # second round (5,867 tests)
        "test_det": 2.2,
    },
}


def leaves_to_slow(nodeid):
    """Whether the default run leaves the test `nodeid` (`tests/x.py::test_y[case]`) to
    `-m slow`."""
    path, _, name = nodeid.partition("::")
    entries = LEFT_TO_SLOW.get(path)
    if not entries:
        return False
    if name in entries or name.split("[", 1)[0] in entries:
        return True
    return any(name.startswith(key) for key in entries if "[" in key and not key.endswith("]"))
