"""The IR's parts: nodes, tracing, rules, text form, the fg. functions, gradients and write-request
rewrites. ``fusegen.ir`` is the face that re-exports their public names."""
