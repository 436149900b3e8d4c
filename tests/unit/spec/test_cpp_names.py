"""The names a cpp: true spec cannot give a value (codegen/spec/cpp_names.py): refused on the cpp
line, and the list of macros complete for the headers the op includes on this machine."""

from __future__ import annotations

import shutil

import pytest
from helpers import build_spec

from codegen.errors import SpecErrors
from codegen.spec.cpp_names import CPP_RESERVED, MACROS


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler to run the preprocessor")
def test_the_op_headers_define_no_object_like_macro_outside_the_list():
    """A newer torch or C library may define more: rerun tools/cpp_macros.py into cpp_names.py."""
    from tools.cpp_macros import object_like_macros

    defined = set(object_like_macros())
    assert {"NAN", "EOF", "stdin", "M_PI", "C10_API"} <= defined  # the preprocessor really ran
    assert sorted(defined - MACROS) == []


@pytest.mark.parametrize(("name", "what"), [
    ("NAN", "a macro of the C++ headers the op includes"), ("stdin", "a macro of the C++ headers the op includes"),
    ("true", "a C++ keyword"), ("Tensor", "a type the op's C++ source names"),
])
def test_a_value_named_as_cpp_defines_it_is_refused_on_the_cpp_line(tmp_path, name, what):
    with pytest.raises(SpecErrors) as refused:
        build_spec(tmp_path, name="named", expr=f"x * {name}", inputs=["x"], params={name: 2.0}, order=2, cpp=True)
    assert f"cpp: true cannot name a value '{name}': it is {what}; rename it" in str(refused.value)


def test_the_names_stay_free_without_cpp(tmp_path):
    module = build_spec(tmp_path, name="free", expr="x * NAN + stdin", inputs=["x", "stdin"],
                        params={"NAN": 2.0}, order=1)
    assert module.free is not None and "NAN" in CPP_RESERVED
