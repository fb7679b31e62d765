"""GradBench's jax tool with its timed region waiting for the result: `python jax_blocking.py
GRADBENCH_DIR`. The tool as shipped times `jitted(input)`, which returns as soon as XLA has the
work queued (jax dispatches asynchronously), so its timings are dispatch times; here
gradbench.wrap.multiple_runs is wrapped so that each timed call ends with
jax.block_until_ready, as relayish's tool times. Nothing else of the tool changes."""
import os
import runpy
import sys


def main():
    gradbench_dir = os.path.abspath(sys.argv.pop(1))
    tool_dir = os.path.join(gradbench_dir, "python", "gradbench", "gradbench", "tools", "jax")
    sys.path.insert(0, tool_dir)
    import jax
    from gradbench import wrap
    shipped = wrap.multiple_runs

    def blocking(**options):
        def decorator(function):
            return shipped(**options)(lambda value: jax.block_until_ready(function(value)))
        return decorator
    wrap.multiple_runs = blocking
    runpy.run_path(os.path.join(tool_dir, "run.py"), run_name="__main__")


if __name__ == "__main__":
    main()
