"""The runtime the backends share: the parts of a program's meaning that do not depend on how
a backend executes it, written once.

    check.py      checked(target, mod=None) -> (mod, main): type checking, once per program,
                  with one rule for every backend; type errors (and type-checker faults)
                  propagate, nothing falls back to annotations
    describe.py   node_text, type_text, value_type_text, short: program text, types and runtime
                  values as error messages show them
    args.py       ValueChecker, Parameters: Python values checked against parameter types and
                  converted (scalars and lists to arrays, ADT values, tuples, references,
                  functions through a backend hook), iteratively, with errors naming the path
                  ("bad argument for parameter %l of @main (field 0 of Cons): expected ...")
    bindings.py   how names get values: constructor identity for matching, pattern matchers that
                  bind into frame slots (compile_pattern), pattern binding into a dict for
                  tree-walking evaluators (bind_pattern), let-chains and recursive lets
    summary.py    summarize(value): one line per runtime value (dtype[shape], min/max, NaN and
                  Inf counts) for the debugger and the debug modes' errors

A backend imports what it needs from these modules directly; nothing here knows a backend.
notes/backend-runtime.md has the contracts and how to adopt them.
"""
