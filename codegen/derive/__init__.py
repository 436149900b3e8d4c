"""Stage 3, derive: a parsed expression -> its derivatives, exact and safe to evaluate.

``symbolic`` differentiates and forms the vector-Jacobian products; ``rewrite`` and ``series`` put
the formulas in forms that keep their bits (stable tails, removable singularities); ``branches``
guards piecewise formulas so that no order evaluates a branch it does not take; ``underflow`` cuts
flat exponentials; ``domain`` checks the spec's domain; ``param_values`` picks the params' other
test values. Each spec's derivatives are derived once and handed down to the plan.
"""
