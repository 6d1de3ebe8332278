"""Tests of fusegen.abi_emit: the MindSpore-AOT C++ sources fusegen generates.

Layer (a): the ``Emitted`` object and the text, without a compiler.
Layer (b): the generated source, checked with targeted regex/substring asserts (no golden files),
and compiled warning-free with ``-Wall -Wextra -Werror`` under MindSpore's auto-compile flags and
under fusegen's own flags, for every reference op.

Running the generated code (numerics, error codes, InferShape/InferType) is tests/test_aot_backend.py.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fusegen as fg
import fusegen.examples as ex
from fusegen.native import build
from fusegen.abi_emit import ERROR_CODES, ERRORS, HEADER_NAME, Emitted, c_name, emit, error_table
from fusegen.native.aot_kernel import TYPE_IDS, detect_string_abi
from fusegen.errors import CompileError

from conftest import strict_cpp_flags
from _optional import needs_gxx
from fusegen.plan import build_plan

REPO = Path(__file__).resolve().parents[1]
OPS = {op.name: op for op in ex.REFERENCE_OPS}
FLOATS = ("float16", "float32", "float64")
#: The dtype combinations emitted (and, in test_aot_backend.py, compiled) per reference op: every
#: float dtype, plus an integer combination where NumPy's semantics are defined for the op.
DTYPES = {name: FLOATS for name in OPS}
DTYPES["add_reduce_sum"] = FLOATS + (("int32", "int32"),)
DTYPES["add_mul_div"] = FLOATS + (("int32", "int32"),)

#: Reference ops whose plan reads a reduction result in a later stage (so Init sizes workspaces).
WORKSPACE_OPS = {"softmax": 2, "layer_norm": 2, "rms_norm": 1}


@fg.op
def centered(x, *, axis: int, scale: float):
    """A reduction that a later stage reads but that is no output: it needs a workspace."""
    return (x - fg.max(x, axis=axis, keep_dims=True)) * scale


@fg.op
def sum_axes(x, *, axes: list[int] = [0, -1], keep_dims: bool = False):  # noqa: B006 (traced once)
    """A list[int] attribute as the reduction axes, and a constant-axes reduction."""
    return fg.sum(x, axis=axes, keep_dims=keep_dims), fg.min(x, axis=(0,), keep_dims=True)


@pytest.fixture(scope="module")
def emitted() -> dict[str, Emitted]:
    return {name: emit(op, dtypes=list(DTYPES[name])) for name, op in OPS.items()}


def header_comment(source: str) -> str:
    """The leading ``//`` comment block of a generated file, without the comment markers."""
    lines = []
    for line in source.splitlines():
        if not line.startswith("//"):
            break
        lines.append(line[3:] if line.startswith("// ") else line[2:])
    return "\n".join(lines)


def function_body(source: str, signature_regex: str) -> str:
    """The text of the function whose signature matches, up to its closing brace at column 0."""
    m = re.search(signature_regex + r"[^{]*\{\n(.*?)\n\}\n", source, re.S)
    assert m, f"no function matching {signature_regex!r}"
    return m.group(1)


# =============================================================================================
# (a) The Emitted object and emit()'s arguments
# =============================================================================================

def test_emitted_files_symbol_and_paths(tmp_path):
    e = emit(ex.add_reduce_sum)
    assert set(e.files) == {"add_reduce_sum.cc", HEADER_NAME}
    assert (e.main, e.symbol) == ("add_reduce_sum.cc", "AddReduceSum")
    assert e.source is e.files["add_reduce_sum.cc"]
    assert e.files[HEADER_NAME] == build.HEADER_PATH.read_text()  # the header ships beside the source
    assert e.dtypes == [(d, d) for d in FLOATS]  # default: every float dtype, all inputs alike
    paths = e.write(tmp_path / "out")
    assert sorted(p.name for p in paths) == sorted(e.files)
    for p in paths:
        assert p.read_text() == e.files[p.name]
    assert sorted(q.name for q in (tmp_path / "out").iterdir()) == sorted(e.files)  # no temp files left
    assert e.func(tmp_path / "out") == f"{tmp_path / 'out' / 'add_reduce_sum.cc'}:AddReduceSum"
    e.write(tmp_path / "out")  # rewriting over existing files works


@pytest.mark.parametrize("name,symbol", [("add_reduce_sum", "AddReduceSum"), ("add_mul_div", "AddMulDiv"),
                                         ("smooth_l1", "SmoothL1"), ("rms_norm", "RmsNorm"),
                                         ("bias_gelu", "BiasGelu"), ("_x__y", "XY"), ("", "FusedOp")])
def test_c_name(name, symbol):
    assert c_name(name) == symbol


def test_emit_is_deterministic_so_the_content_cache_can_key_on_it():
    for op in (ex.softmax, ex.add_mul_div):
        assert emit(op).source == emit(op).source


def test_error_table_matches_errors():
    e = emit(ex.softmax, dtypes="float32")
    assert e.error_table == error_table("Softmax")
    assert list(ERROR_CODES) == [n for n, _ in ERRORS] and ERROR_CODES["FG_OK"] == 0
    assert len(set(ERROR_CODES.values())) == len(ERRORS)
    assert e.error_table[ERROR_CODES["FG_ERR_NOT_INITIALIZED"]].startswith("FG_ERR_NOT_INITIALIZED: ")
    assert "SoftmaxInit" in e.error_table[ERROR_CODES["FG_ERR_NOT_INITIALIZED"]]  # <Name> is substituted
    assert not any("<Name>" in text for text in e.error_table.values())


@pytest.mark.parametrize("spec,combos", [
    ("float32", [("float32", "float32")]),
    ("float32,int32", [("float32", "int32")]),
    (["float64", ("int32", "int32"), "float64"], [("float64", "float64"), ("int32", "int32")]),  # deduplicated
    ([fg.DTYPES["float16"]], [("float16", "float16")]),
])
def test_dtype_combinations(spec, combos):
    e = emit(ex.add_mul_div, dtypes=spec)
    assert e.dtypes == combos
    header = header_comment(e.source)
    for combo in combos:
        assert f"({', '.join(combo)}) -> (" in header


def test_emit_rejects_bad_arguments():
    with pytest.raises(TypeError, match="@fusegen.op"):
        emit(lambda x: x)
    with pytest.raises(NotImplementedError, match="tvm-ffi"):
        emit(ex.softmax, abi="tvm-ffi")
    with pytest.raises(NotImplementedError, match="tpu"):
        emit(ex.softmax, device="tpu")
    with pytest.raises(ValueError, match="3 entries"):
        emit(ex.add_mul_div, dtypes=[("float32", "float32", "float32")])
    with pytest.raises(fg.DTypeError):
        emit(ex.softmax, dtypes="complex64")


@fg.op
def relu_op(x):
    return fg.relu(x)


def test_emit_refuses_a_dtype_the_op_does_not_define():
    with pytest.raises(fg.DTypeError, match="relu is not defined for bool"):
        emit(relu_op, dtypes="bool")


def test_public_lazy_attributes():
    assert fg.emit is emit
    assert fg.AotKernel.__name__ == "AotKernel"


def test_examples_reachable_as_a_package_attribute():
    code = "import fusegen as fg; print(len(fg.examples.REFERENCE_OPS))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "7", proc.stderr[-500:]


# =============================================================================================
# (b) The generated source
# =============================================================================================

@pytest.mark.parametrize("name", list(OPS))
def test_header_comment(emitted, name):
    op, e = OPS[name], emitted[name]
    Name = c_name(name)
    header = header_comment(e.source)
    # what generated it, from which op, and the op's traced text, line for line
    assert re.search(rf"^{name}\.cc: generated by fusegen {re.escape(fg.__version__)} from the fused op `{name}`",
                     header, re.M)
    for line in op.text().splitlines():
        assert f"\n  {line}\n" in header, f"op text line missing from the header: {line!r}"
    # how to build it: fusegen's flags, and MindSpore's auto-compile
    assert re.search(rf"^  g\+\+ -std=c\+\+17 -O3 .*-shared -fPIC -D_GLIBCXX_USE_CXX11_ABI=0 -I\. "
                     rf"-o {name}\.so {name}\.cc$", header, re.M)
    assert "g++ -std=c++17 --shared -fPIC -D_GLIBCXX_USE_CXX11_ABI=0 -I<dir>" in header
    # the exact MindSpore registration and call, naming every input, output and attribute
    reg = re.search(r'^  reg = \(CustomRegOp\("(\w+)"\)\n(.*?)\n +\.get_op_info\(\)\)$', header, re.S | re.M)
    assert reg and reg.group(1) == name
    calls = [c.strip() for c in reg.group(2).splitlines()]
    want = [f'.input({i}, "{n}")' for i, n in enumerate(op.inputs)]
    want += [f'.output({k}, "out{k}")' for k in range(len(op.graph.outputs))]
    want += [".dtype_format(" + ", ".join(["DataType.None_None"] * (len(op.inputs) + len(op.graph.outputs))) + ")"]
    want += [f'.attr("{a}", "required", "all", value={s.default!r})' for a, s in op.attrs.items()]
    want += ['.target("CPU")']
    assert calls == want
    assert re.search(rf'^  {name} = ops\.Custom\("\./{name}\.cc:{Name}", out_shape=None, out_dtype=None, '
                     rf'func_type="aot",\n +reg_info=reg\)$', header, re.M)
    # attributes with their types and defaults, and the error codes
    for a, s in op.attrs.items():
        assert f"\n  {a}: {s.type.value} = {s.default!r}\n" in header
    for code, (n, _) in enumerate(ERRORS):
        assert f"\n  {code}  {n}: " in header


def test_header_comment_of_required_attributes():
    header = header_comment(emit(centered, dtypes="float32").source)
    assert '.attr("axis", "required", "all", value=...)' in header
    assert '.attr("scale", "required", "all", value=...)' in header
    assert "\n  axis: int (required)\n" in header and "\n  scale: float (required)\n" in header


@pytest.mark.parametrize("name", list(OPS))
def test_exported_symbols_and_signatures(emitted, name):
    src, Name = emitted[name].source, c_name(name)
    multi = len(OPS[name].graph.outputs) > 1
    shape_t = "std::vector<std::vector<int64_t>>" if multi else "std::vector<int64_t>"
    type_t = "std::vector<TypeId>" if multi else "TypeId"
    exported = re.findall(r'^extern "C" (.+?)\b(\w+)\(', src, re.M)
    assert {sym: ret.strip() for ret, sym in exported} == {
        Name: "int", f"{Name}Init": "int", f"{Name}InferShape": shape_t, f"{Name}InferType": type_t,
        f"{Name}ErrorString": "const char *", f"{Name}OpInfo": "const char *"}
    assert re.search(rf'^extern "C" int {Name}\(int nparam, void \*\*params, int \*ndims, int64_t \*\*shapes, '
                     rf'const char \*\*dtypes,\s+void \*stream, void \*extra\)', src, re.M)
    assert f'extern "C" int {Name}Init(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra)' in src
    assert f'extern "C" {shape_t} {Name}InferShape(int *ndims, int64_t **shapes, AotExtra *extra)' in src
    assert f'extern "C" {type_t} {Name}InferType(std::vector<TypeId> inputs, AotExtra *extra)' in src
    assert f'extern "C" const char *{Name}ErrorString(int code)' in src
    assert '#include "custom_aot_extra.h"' in src


@pytest.mark.parametrize("name", list(OPS))
def test_optimize_pragma_is_guarded_and_comes_first(emitted, name):
    src = emitted[name].source
    m = re.search(r'^#if defined\(__GNUC__\) && !defined\(__OPTIMIZE__\)[^\n]*\n(?://[^\n]*\n)*'
                  r'#pragma GCC optimize\("O3"\)\n#endif$', src, re.M)
    assert m, "the O3 pragma must only apply when the compiler was given no -O flag"
    assert src.count('#pragma GCC optimize') == 1
    assert m.start() < src.index("#include"), "the pragma must precede every function, the runtime's included"


@pytest.mark.parametrize("name", list(OPS))
def test_attributes_are_read_in_init_into_kernel_data(emitted, name):
    op, src, Name = OPS[name], emitted[name].source, c_name(name)
    # attributes live in an AotKernelData subclass, as its AttrValues base (a plan cache's key)
    assert re.search(rf"struct {Name}Data final : public AotKernelData, public AttrValues \{{", src)
    data = re.search(r"struct AttrValues \{\n(.*?)\n\};", src, re.S)
    assert data, "the attribute values' struct"
    init = function_body(src, rf'extern "C" int {Name}Init\(')
    assert "extra->SetKernelData(data)" in init and "read_attrs(extra, data)" in init
    assert f"new {Name}Data()" in init
    for a, s in op.attrs.items():
        # a float attribute is kept as double: fusegen's host passes its float64 bits as well
        member = "double" if s.type.cpp == "float" else s.type.cpp
        assert re.search(rf"^  {re.escape(member)} {a} = ", data.group(1), re.M), f"member {a}"
        assert f'a->{a} = extra->Attr<{s.type.cpp}>("{a}");' in src
        assert f'extra->HasAttr("{a}")' in src
    # the main function reads them from the kernel data, never from `extra` again
    main = function_body(src, rf'extern "C" int {Name}\(')
    assert "KernelData()" in main and "Attr<" not in main


def test_required_attributes_fail_init_when_missing():
    src = emit(centered, dtypes="float32").source
    for a, cpp in (("axis", "int64_t"), ("scale", "float")):
        # (a float attribute's float64 bits, where the host gives them, may follow the read)
        assert re.search(rf'extra->HasAttr\("{a}"\)\) \{{\n\s+a->{a} = extra->Attr<{cpp}>\("{a}"\);\n'
                         rf'(?:\s+//[^\n]*\n\s+if \(extra->HasAttr\("{a}:f64"\)\)[^\n]*\n)?\s+\}} '
                         rf'else \{{\n\s+return fg::FG_ERR_ATTR;', src)


def test_list_attribute_axes_and_constant_axes():
    src = emit(sum_axes, dtypes="float32").source
    assert 'a->axes = extra->Attr<std::vector<int64_t>>("axes");' in src
    assert "std::vector<int64_t> axes = {INT64_C(0), INT64_C(-1)};" in src  # the default
    assert "fg::reduce(s->node[0], a.axes.data(), int(a.axes.size()), false, a.keep_dims," in src
    assert re.search(r"const int64_t axes\[\] = \{0\};\n\s+"
                     r"FG_TRY\(fg::reduce\(s->node\[0\], axes, 1, false, true,", src)


@pytest.mark.parametrize("name", list(OPS))
def test_workspaces_are_declared_only_where_needed(emitted, name):
    src = emitted[name].source
    n_ws = WORKSPACE_OPS.get(name, 0)
    assert n_ws == len(build_plan(OPS[name]).buffers)
    assert f"constexpr int kWorkspaces = {n_ws};" in src
    header = header_comment(src)
    assert ("Workspaces: none" in header) == (n_ws == 0)
    assert "SetWorkSpace" not in function_body(src, rf'extern "C" int {c_name(name)}\(')
    init = function_body(src, rf'extern "C" int {c_name(name)}Init\(')
    assert init.count("extra->SetWorkSpace(") == 1
    if n_ws:
        assert "own_workspace = true" in init and "data->workspace.push_back(" in init
        strict = fg.emit(OPS[name], dtypes="float32", dynamic_workspace="error").source
        assert "return fg::FG_ERR_DYNAMIC_WORKSPACE;" in function_body(strict, rf'extern "C" int {c_name(name)}Init\(')
    else:
        assert "push_back" not in init  # Init sets an empty workspace list


def test_a_reduction_read_by_a_later_stage_gets_a_workspace():
    # x - max(x): the max is no output, but the subtraction pass reads it
    e = emit(centered, dtypes=["float32", "float64"])
    assert "constexpr int kWorkspaces = 1;" in e.source
    assert re.search(r"^Workspaces: 1 ", header_comment(e.source), re.M)
    # sized in the accumulation dtype of each combination
    assert re.search(r"kWorkspaceItemsize\[\]\[kWorkspaces \+ 1\] = \{\n\s+\{4, 0\},\n\s+\{8, 0\},\n\};", e.source)


@pytest.mark.parametrize("name", list(OPS))
def test_dtype_tables(emitted, name):
    op, src = OPS[name], emitted[name].source
    for combo in emitted[name].dtypes:
        outs = [d.name for d in fg.infer(op, combo, [(2,) * 2] * len(combo), op.bind_attrs({})).out_dtypes]
        strings = ", ".join(f'"{d}"' for d in (*combo, *outs))
        assert "{" + strings + "}," in src, "match_combo's table: input then output dtype strings"
        ids_in = ", ".join(str(TYPE_IDS[d]) for d in combo)
        ids_out = ", ".join(str(TYPE_IDS[d]) for d in outs)
        assert "{" + ids_in + ", 0}," in src and "{" + ids_out + "}," in src, "InferType's TypeId tables"
        assert f"namespace k_{'_'.join(combo)} {{" in src
    assert "_Float16" in src  # float16 storage, computed in float registers
    assert re.search(r"(?:FG_INLINE|inline) float s\d+_\w+\(float v0", src)


def test_integer_combination_code():
    src = emit(ex.add_mul_div, dtypes=[("int32", "int32")]).source
    assert '{"int32", "int32", "int32", "int32", "float64"},' in src  # x / y is true division
    assert "{34, 34, 44}," in src
    assert "const int32_t *p0 = static_cast<const int32_t *>(ptr[0]);" in src


@pytest.mark.parametrize("name", list(OPS))
def test_error_codes_in_source(emitted, name):
    src, Name = emitted[name].source, c_name(name)
    for code, (n, meaning) in enumerate(ERRORS):
        meaning = meaning.replace("<Name>", Name)
        assert f"  {n} = {code},  // {meaning}\n" in src
        assert f'    case {code}:\n      return "{n}: {meaning}";' in src
    assert 'return "unknown return code";' in src
    # C++ exceptions never escape the kernel's entry points
    assert "catch (...)" in function_body(src, rf'extern "C" int {Name}Init\(')
    assert "catch (...)" in function_body(src, rf'extern "C" int {Name}\(')


@pytest.mark.parametrize("name", list(OPS))
def test_no_template_residue(emitted, name):
    src = emitted[name].source
    for residue in ("{{ ", " }}", "{%", "%}", "{#", "#}"):
        assert residue not in src, f"jinja2 residue {residue!r} in the generated source"
    assert src.endswith("\n") and "\t" not in src


# =============================================================================================
# (b) Compiles warning-free: every reference op, MindSpore's flags and fusegen's
# =============================================================================================

@pytest.fixture(scope="module")
def warning_builds(emitted, tmp_path_factory):
    """Each reference op's source, written out and built with -Wall -Wextra -Werror under both flag
    sets (``conftest.strict_cpp_flags``; MindSpore's auto-compile command line: -I<source dir>),
    through the build cache (test_aot_backend.py builds the same sources with the same flags, so
    each compiles once), on first use: the default run builds only the ops it checks."""
    root = tmp_path_factory.mktemp("warnings")
    done: dict = {}

    def get(name: str, label: str):
        if (name, label) not in done:
            d = root / name
            emitted[name].write(d)
            try:
                done[(name, label)] = build.build_library(d / emitted[name].main, flags=strict_cpp_flags(label))
            except CompileError as err:  # a warning is an error here: its text names it
                done[(name, label)] = err
        return done[(name, label)]
    return get


# The default run builds two ops (a reduction with a workspace, a multi-output norm) under both
# flag sets; `pytest -m extended` builds every reference op.
_WARN_DEFAULT = ("softmax", "layer_norm")


@needs_gxx
@pytest.mark.parametrize("flags", ["mindspore", "fusegen"])
@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n in _WARN_DEFAULT else [pytest.mark.extended])
                                  for n in OPS])
def test_compiles_warning_free(warning_builds, name, flags):
    lib = warning_builds(name, flags)
    assert not isinstance(lib, CompileError), str(lib)[-4000:]
    symbols = set(build.dynamic_symbols(lib))
    Name = c_name(name)
    assert {Name, f"{Name}Init", f"{Name}InferShape", f"{Name}InferType", f"{Name}ErrorString"} <= symbols
    if flags == "mindspore":
        # MindSpore's old string ABI: a cxx11 std::string in the AotExtra calls would crash in Init
        assert not any("B5cxx11" in s or "7__cxx11" in s for s in symbols)
        assert detect_string_abi(lib) == 0


#: Ops past the reference set (layout ops, gathers, scans): each path of the emitted loops has
#: its own helpers (group_norm's pair of moment stages and the vector scan under MindSpore's
#: flags, which have no AVX-512, each caught warnings)
_MORE = {op.name: op for op in ex.LAYOUT_OPS + ex.GATHER_OPS + [ex.cumsum_last]}
_MORE_DEFAULT = ()   # (each a g++ build: all in pytest -m extended)


@needs_gxx
@pytest.mark.parametrize("name,flags", [pytest.param(n, f, marks=[] if (n, f) in _MORE_DEFAULT else [pytest.mark.extended])
                                        for n in _MORE for f in ("mindspore", "fusegen")])
def test_layout_gather_and_scan_ops_compile_warning_free(tmp_path, name, flags):
    e = emit(_MORE[name], dtypes=None)
    e.write(tmp_path)
    build.build_library(tmp_path / e.main, flags=strict_cpp_flags(flags))   # a warning is a CompileError


def test_row_invariant_reduction_results_are_hoisted_as_scalars():
    # rms_norm's output stage reads the per-row mean square (a workspace); in row mode it is
    # passed as a scalar when its stride along the row is 0, so rsqrt(ms + eps) is loop-invariant
    src = fg.emit(ex.rms_norm, dtypes="float32").source
    stage = src[src.index("// --- stage 1"):]
    assert "const bool row_const = L.ri_str[3] == 0;" in stage
    assert "w2[i] = s1_w0(v0[i], v1[i], s3, a);" in stage      # hoisted: the scalar s3
    assert "w2[i] = s1_w0(v0[i], v1[i], v3[i], a);" in stage   # the general loop stays
    # stages that read no reduction result have no such branch
    assert "row_const" not in fg.emit(ex.add_mul_div, dtypes="float32").source
