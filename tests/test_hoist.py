"""Row-constant lines of the emitted CPU loops (fusegen.emitters.hoist): which expressions are
constant over a row (text only, no compiler), and what the emitted source of an embedding does
with them: the gathered row read through a chunk view, its index checked once per row. The
numbers are checked by tests/test_gathers_fast_cpp.py and tests/test_gathers_emitted.py."""
from __future__ import annotations

import re

import pytest

import fusegen as fg
from fusegen.emitters.hoist import constant_text, row_constant_names, split_lines
from fusegen.examples import embedding_layer_norm


@pytest.mark.parametrize("expr, known, constant", [
    ("int64_t(int64_t(rc1))", set(), True),
    ("tg2_0r < 0 ? tg2_0r + gn2 : tg2_0r", {"tg2_0r"}, True),
    ("std::min(std::max(tg2_0a, int64_t(0)), gn2 - 1)", {"tg2_0a"}, True),
    ("fg::rsqrt(rc3 + float(a.eps)) * 1.0e-5f", set(), True),
    ("std::numeric_limits<float>::infinity()", set(), True),
    ("static_cast<float>(rc2)", set(), True),
    # what changes along the inner loop: the index, a view's element, an unknown name
    ("float((p0 + tg2_0 * gs[0])[c[0] + i * B.istr[0]])", {"tg2_0"}, False),
    ("float(v0[ii]) * 2.0f", set(), False),
    ("rc1 ? i : 0", set(), False),          # a ternary's branch is read
    ("i<nc", set(), False),                 # a comparison without spaces is not a template
    ("B->inner + l", set(), False),
    ("t7 + rc1", set(), False),             # t7 not known to be constant
])
def test_constant_text(expr, known, constant):
    assert constant_text(expr, known) is constant


def test_lines_split_in_order_and_dependencies_follow():
    lines = ["const auto t0 = int64_t(rc1);", "const auto t1 = float(v0[ii]);", "const auto t2 = t0 + gn2;",
             "const auto t3 = t1 * t2;", "const auto t4 = t3 + t2;"]
    hoisted, rest, names = split_lines(lines)
    assert hoisted == [lines[0], lines[2]]
    assert rest == [lines[1], lines[3], lines[4]]
    assert names == {"t0", "t2"}
    assert row_constant_names([("t0", "rc1 * 2"), ("t1", "v0[ii]"), ("t2", "t0 + t1")]) == {"t0"}


def test_an_embedding_reads_its_gathered_row_through_a_chunk_view():
    src = fg.emit(embedding_layer_norm, abi="mindspore-aot", dtypes="float32,int64,float32,float32").files
    text = next(v for k, v in src.items() if k.endswith(".cc"))
    assert text.count("// a gathered row") >= 3           # mean, variance and output stages
    assert text.count("(a row's gathered index: checked once)") >= 3
    # the invariant branch computes rsqrt(var + eps) once per row, not per element
    assert re.search(r"std::sqrt\(t\d+\)\);  // \(constant over the row", text)
