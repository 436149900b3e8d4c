"""Stage 6, build: runs the stages for each spec and writes what they produce.

``pipeline`` drives spec -> derivatives -> plan -> source; ``accuracy`` measures the generated
Functions against exact arithmetic (the oracle ``build --strict`` and the tests' reference domain
read); ``memory`` bounds what a Function saves for backward; ``write`` writes atomically and tells
a stale file from a fresh one.
"""
