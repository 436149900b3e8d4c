"""The expression language's names (contract section 1), without SymPy.

Spec validation needs only the names; ``expr.py`` maps them to SymPy objects. Keeping them apart
lets a build whose generated files are up to date finish without importing SymPy.
"""

FUNCTION_ARITY = {
    "exp": 1, "log": 1, "log1p": 1, "expm1": 1, "sqrt": 1,
    "sin": 1, "cos": 1, "tan": 1, "asin": 1, "acos": 1, "atan": 1, "atan2": 2,
    "sinh": 1, "cosh": 1, "tanh": 1, "asinh": 1, "acosh": 1, "atanh": 1,
    "erf": 1, "erfc": 1, "sigmoid": 1, "softplus": 1, "abs": 1,
}
CONSTANT_NAMES = ("pi", "E")
