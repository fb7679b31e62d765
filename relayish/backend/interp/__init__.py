"""The reference interpreter: numpy semantics for every construct, at any recursion depth.

    from relayish.backend.interp.api import evaluate     # rl.evaluate
    evaluate(f_or_mod, *args) -> value

Scheme. Each Function is COMPILED once (cached per Function object, or per Module) into a
`Code`: a frame layout and a graph of basic blocks. A block is a tuple of straight-line *steps*
followed by one *terminator*:

    step(slots)       a Python closure doing one thing with precomputed slot indices:
                      `slots[3] = impl(numpy, slots[1], slots[2])` for an op call, tuples,
                      projections, refs, constructor values, closure creation
    terminator        JUMP | BRANCH (If) | MATCH | CALL | TAILCALL | RETURN

A frame is a flat Python list of slots: [params..., captured values..., locals/constants...];
constants and globals are written into the frame's template at compile time, so reading them
costs nothing at run time. Vars are compiled away into slot indices (each slot is written at
most once per frame: there are no backward jumps, so `let y = x` just aliases x's slot).

IR calls never recurse in Python: CALL pushes (caller slots, return block) on an explicit list
and jumps to the callee's entry block; RETURN pops; TAILCALL replaces the frame. A 20,000-deep
non-tail recursion is a 20,000-long Python list. The compiler walks let-chains (and else-if and
tail chains) with loops and runs under `run_deep` as the safety net for other deep nesting.

Modules (each imports only those above it):

    code.py       Code, Block, Step: the compiled form (and what a debugger reads of it)
    run.py        the machine (execute) and the interpreter's closures (InterpreterClosure)
    closures.py   other function values (Python callables, constructors) and argument hooks
    steps.py      the step builders (op calls, tuples, refs, in-place accumulation, closures)
    compiler.py   Program and FunctionCompiler: Function -> Code
    modes.py      the debug modes' compile options (debug_nans's checking step wrapper)
    api.py        evaluate and the compile caches

What is not interpreter-specific (type checking, argument conversion, error texts, patterns)
is relayish/backend/runtime/, shared with the other backends.

Why not a tree-walking evaluator: re-dispatching on node types costs several Python calls per
node on every execution; here a let-bound op call costs one closure call plus the op's impl.
Why not plain nested closures (eval = closure(env)): IR calls would then be Python calls, and
deep recursion would overflow the Python stack.
"""
