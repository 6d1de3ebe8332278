"""C++ names for what the user named in Python: an attribute's member in the generated structs."""
from __future__ import annotations

#: C++ keywords, alternative tokens and the C library's macros that are valid Python names: an
#: attribute so named is the member ``name_`` in the generated structs (its ABI and FFI name, a
#: string, stays ``name``)
CPP_KEYWORDS = frozenset("""alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t
char16_t char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
co_return co_yield decltype default delete do double dynamic_cast else enum explicit export extern false
float for friend goto if inline int long mutable namespace new noexcept not not_eq nullptr operator or
or_eq private protected public register reinterpret_cast requires return short signed sizeof static
static_assert static_cast struct switch template this thread_local throw true try typedef typeid typename
union unsigned using virtual void volatile wchar_t while xor xor_eq
assert errno NULL EOF INFINITY NAN HUGE_VAL stdin stdout stderr offsetof unix linux""".split())   # (and macros)


def member(name: str) -> str:
    """The C++ member an attribute is in the generated structs (``a.<member>``)."""
    return name + "_" if name in CPP_KEYWORDS or name.startswith("__") else name
