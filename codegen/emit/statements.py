"""Statements as the walks shared by the Python and C++ emitters write them (functions.py's
``accumulation_lines``): one spelling per language, mixed into its printer.
"""

from __future__ import annotations


class _Statements:
    """The spellings each language sets as data (``ASSIGN``, ``COMMENT``), and its sums' logic."""

    ASSIGN: str  # "{name} ... {code}"
    COMMENT: str  # "... {text}"

    @classmethod
    def assign(cls, name: str, code: str) -> str:
        return cls.ASSIGN.format(name=name, code=code)

    @classmethod
    def comment(cls, text: str) -> str:
        return cls.COMMENT.format(text=text)


class PythonStatements(_Statements):
    """Lines of a generated Python Function (the runtime's ``_accumulate`` adds a gradient)."""

    ASSIGN = "{name} = {code}"
    COMMENT = "# {text}"

    @staticmethod
    def sum_present(total: str, products) -> list[str]:
        """``total`` = the sum of each ``(cotangent, product)``'s product whose cotangent is not None."""
        lines = []
        for position, (cotangent, product) in enumerate(products):
            if position == 0:
                lines.append(f"{total} = None if {cotangent} is None else {product}")
            else:
                lines += [f"if {cotangent} is not None:", f"    {total} = _accumulate({total}, {product})"]
        return lines

    @staticmethod
    def add_present(total: str, part: str, total_has_terms: bool) -> list[str]:
        """``total`` += ``part`` where ``part`` is not None (``total`` is None where it has no terms)."""
        if not total_has_terms:
            return [f"{total} = {part}"]
        return [f"if {part} is not None:", f"    {total} = _accumulate({total}, {part})"]


class CppStatements(_Statements):
    """Lines of a generated C++ Function (the template's ``_accumulate`` adds to an undefined tensor)."""

    ASSIGN = "auto {name} = {code};"
    COMMENT = "// {text}"

    @staticmethod
    def sum_present(total: str, products) -> list[str]:
        """Undefined where no cotangent is defined."""
        return [f"Tensor {total};",
                *(f"if ({cotangent}.defined()) {total} = _accumulate({total}, {product});" for cotangent, product in products)]

    @staticmethod
    def add_present(total: str, part: str, total_has_terms: bool) -> list[str]:
        return [f"{total} = _accumulate({total}, {part});"]
