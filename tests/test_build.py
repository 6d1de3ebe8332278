"""Tests of fusegen.build: compile by suffix, the content-addressed cache, the whitelist, ELF checks."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fusegen.native import build
from fusegen.errors import CompileError, LibraryError

from _optional import needs_gxx, needs_nvcc

pytestmark = needs_gxx  # (the ELF and whitelist checks read libraries g++ builds)

REPO = Path(__file__).resolve().parents[1]
SIMPLE = 'extern "C" int fg_answer() { return 42; }\n'


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    """Every test gets its own empty cache and no whitelist."""
    root = tmp_path / "cache"
    monkeypatch.setenv("FUSEGEN_CACHE_DIR", str(root))
    monkeypatch.delenv("FUSEGEN_AOT_WHITELIST", raising=False)
    monkeypatch.delenv("MS_CUSTOM_AOT_WHITE_LIST", raising=False)
    return root


@pytest.fixture
def compiles(monkeypatch) -> list[list[str]]:
    """Records every compiler invocation build.py makes."""
    calls: list[list[str]] = []
    real = build._run_compiler

    def counting(command, source):
        calls.append(command)
        return real(command, source)

    monkeypatch.setattr(build, "_run_compiler", counting)
    return calls


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def entries(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / f"v{build.BUILD_FORMAT_VERSION}").iterdir() if not p.name.startswith("."))


# --------------------------------------------------------------------------- compile and cache

def test_compiles_source_and_second_build_is_a_cache_hit(tmp_path, cache, compiles):
    src = write(tmp_path / "answer.cc", SIMPLE)
    lib = build.build_library(src)
    assert lib.is_file() and lib.parent.parent.parent == cache
    assert "fg_answer" in build.dynamic_symbols(lib)
    mtime = lib.stat().st_mtime_ns
    assert build.build_library(src) == lib
    assert len(compiles) == 1 and lib.stat().st_mtime_ns == mtime
    command = compiles[0]
    for flag in ("-O3", "-march=native", "-fPIC", "-shared", "-D_GLIBCXX_USE_CXX11_ABI=0", f"-I{src.parent}"):
        assert flag in command
    meta = json.loads((lib.parent / "build.json").read_text())
    assert meta["size"] == lib.stat().st_size and meta["command"] == command


def test_same_source_elsewhere_shares_the_entry(tmp_path, compiles):
    a = build.build_library(write(tmp_path / "a" / "k.cc", SIMPLE))
    b = build.build_library(write(tmp_path / "b" / "k.cc", SIMPLE))
    assert a == b and len(compiles) == 1


def test_flags_and_source_change_the_key(tmp_path, compiles):
    src = write(tmp_path / "k.cc", SIMPLE)
    fast = build.build_library(src)
    mindspore = build.build_library(src, flags=list(build.MINDSPORE_CPU_FLAGS))
    assert fast != mindspore and "-O3" not in compiles[1]
    src.write_text(SIMPLE + "// edited\n")
    assert build.build_library(src) not in (fast, mindspore)


def test_flags_as_one_string_are_split_as_a_shell_would(tmp_path, compiles):
    src = write(tmp_path / "k.cc", SIMPLE)
    one = build.build_library(src, flags="-O1 -fPIC -DWHY='a b'")
    assert build.build_library(src, flags=["-O1", "-fPIC", "-DWHY=a b"]) == one and len(compiles) == 1
    assert "-O1" in compiles[0] and "-DWHY=a b" in compiles[0] and "-" not in compiles[0]


def test_source_locations_in_comments_do_not_change_the_key(tmp_path, compiles):
    # emitted sources quote the op's traced text with the line each node came from: moving an
    # unchanged op down a line must not rebuild it (it did: 1.74 s against 0.25 s from the cache)
    text = ('//   %3 = add %1, %2                                # model.py:{}\n'
            'extern "C" int fg_answer() {{ return {}; }}  // # not a location.py:1 (code follows)\n')
    first = build.build_library(write(tmp_path / "a" / "k.cc", text.format(17, 42)))
    moved = write(tmp_path / "b" / "k.cc", text.format(18, 42))
    assert build.build_library(moved) == first and len(compiles) == 1
    assert moved.read_text().count("model.py:18") == 1  # the shipped file keeps its locations
    assert build.build_library(write(tmp_path / "c" / "k.cc", text.format(17, 43))) != first
    assert build.source_key_text(b"x = 1;  // # a.py:3\n") == b"x = 1;  // # a.py:3\n"  # not a comment line


def test_key_follows_included_headers_recursively(tmp_path, compiles):
    write(tmp_path / "outer.h", '#include "sub/inner.h"\n')
    inner = write(tmp_path / "sub" / "inner.h", "constexpr int kValue = 1;\n")
    src = write(tmp_path / "k.cc", '#include "outer.h"\nextern "C" int fg_value() { return kValue; }\n')
    first = build.build_library(src)
    assert build.build_library(src) == first
    inner.write_text("constexpr int kValue = 2;\n")
    second = build.build_library(src)
    assert second != first and len(compiles) == 2


def test_include_dirs_from_flags_are_followed(tmp_path):
    inc = write(tmp_path / "inc" / "cfg.h", "#define FG_VALUE 1\n")
    src = write(tmp_path / "src" / "k.cc", '#include <cfg.h>\nextern "C" int fg_value() { return FG_VALUE; }\n')
    flags = [*build.MINDSPORE_CPU_FLAGS, "-I", str(inc.parent)]
    found = [path for _, path in build.local_includes(src, flags)]
    assert found == [inc.resolve()]
    first = build.build_library(src, flags=flags)
    inc.write_text("#define FG_VALUE 2\n")
    assert build.build_library(src, flags=flags) != first


def test_truncated_cache_entry_is_rebuilt(tmp_path, compiles):
    src = write(tmp_path / "k.cc", SIMPLE)
    lib = build.build_library(src)
    size = lib.stat().st_size
    with open(lib, "r+b") as f:
        f.truncate(size // 2)
    with pytest.raises(LibraryError, match="truncated"):
        build.check_shared_library(lib)
    again = build.build_library(src)
    assert len(compiles) == 2 and again.stat().st_size == size
    build.check_shared_library(again)


def test_entry_with_damaged_sidecar_is_rebuilt(tmp_path, compiles):
    src = write(tmp_path / "k.cc", SIMPLE)
    lib = build.build_library(src)
    (lib.parent / "build.json").write_text("{not json")
    assert build.build_library(src).is_file() and len(compiles) == 2


_CONCURRENT = """
import sys
from fusegen.native import build
print(build.build_library(sys.argv[1]))
"""


def test_concurrent_builds_into_an_empty_cache(tmp_path, cache):
    src = write(tmp_path / "k.cc", SIMPLE + "int fg_pad[64];\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-c", _CONCURRENT, str(src)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [p.communicate(timeout=120) + (p.returncode,) for p in procs]
    assert all(code == 0 for _, _, code in results), results
    paths = {out.strip() for out, _, _ in results}
    assert len(paths) == 1
    [entry] = entries(cache)
    assert Path(paths.pop()).parent == entry
    build.check_shared_library(next(entry.glob("*.so")))
    assert not list((cache / f"v{build.BUILD_FORMAT_VERSION}").glob(".*"))  # no temp or trash left


# --------------------------------------------------------------------------- failures

def test_compiler_error_carries_message_and_command(tmp_path):
    src = write(tmp_path / "bad.cc", 'extern "C" int broken() { return undeclared_thing; }\n')
    with pytest.raises(CompileError) as info:
        build.build_library(src)
    err = info.value
    assert "undeclared_thing" in err.output and "undeclared_thing" in str(err)
    assert str(src) in err.command and any("g++" in part for part in err.command[:1])
    assert " ".join(err.command) in str(err)


def test_missing_compiler_is_a_clear_error(tmp_path):
    src = write(tmp_path / "k.cc", SIMPLE)
    with pytest.raises(CompileError, match="not found"):
        build.build_library(src, compiler="fusegen-no-such-compiler")


def test_missing_file(tmp_path):
    with pytest.raises(LibraryError, match="no such file"):
        build.build_library(tmp_path / "nothing.so")


def test_file_that_is_not_a_shared_library(tmp_path):
    text = write(tmp_path / "fake.so", "just text, no ELF here\n")
    with pytest.raises(LibraryError, match="not an ELF shared library"):
        build.build_library(text)
    obj = tmp_path / "obj.o"
    subprocess.run(["g++", "-c", "-o", str(obj), str(write(tmp_path / "o.cc", SIMPLE))], check=True)
    with pytest.raises(LibraryError, match="not a shared library"):
        build.build_library(obj)


def test_existing_library_is_returned_after_checks(tmp_path):
    lib = build.build_library(write(tmp_path / "k.cc", SIMPLE))
    copy = shutil.copy(lib, tmp_path / "libcopy.so")
    assert build.build_library(copy) == Path(copy).resolve()


# --------------------------------------------------------------------------- whitelist

@pytest.fixture
def libs(tmp_path) -> tuple[Path, Path]:
    """(allowed dir, a library outside it)."""
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    lib = build.build_library(write(outside / "k.cc", SIMPLE))
    return allowed, Path(shutil.copy(lib, outside / "libk.so"))


def test_whitelist_refuses_outside_and_accepts_inside(libs, monkeypatch):
    allowed, outside_lib = libs
    monkeypatch.setenv("FUSEGEN_AOT_WHITELIST", str(allowed))
    with pytest.raises(LibraryError) as info:
        build.build_library(outside_lib)
    assert str(outside_lib) in str(info.value) and str(allowed) in str(info.value)
    inside = Path(shutil.copy(outside_lib, allowed / "libk.so"))
    assert build.build_library(inside) == inside.resolve()


def test_whitelist_symlink_and_dotdot_escapes_are_refused(libs, monkeypatch):
    allowed, outside_lib = libs
    monkeypatch.setenv("FUSEGEN_AOT_WHITELIST", str(allowed))
    link = allowed / "libsneaky.so"
    link.symlink_to(outside_lib)
    with pytest.raises(LibraryError, match="outside the AOT whitelist"):
        build.build_library(link)
    with pytest.raises(LibraryError, match="outside the AOT whitelist"):
        build.build_library(allowed / ".." / "outside" / "libk.so")
    # a sibling whose name merely starts with the whitelisted dir's name
    sibling = Path(shutil.copy(outside_lib, write(allowed.parent / "allowed2" / "x", "").parent / "libk.so"))
    with pytest.raises(LibraryError):
        build.build_library(sibling)


def test_mindspore_whitelist_variable_is_honoured(libs, monkeypatch):
    allowed, outside_lib = libs
    monkeypatch.setenv("MS_CUSTOM_AOT_WHITE_LIST", str(allowed))
    with pytest.raises(LibraryError, match="MS_CUSTOM_AOT_WHITE_LIST"):
        build.build_library(outside_lib)
    # fusegen's own variable wins when both are set
    monkeypatch.setenv("FUSEGEN_AOT_WHITELIST", os.pathsep.join([str(allowed), str(outside_lib.parent)]))
    assert build.build_library(outside_lib) == outside_lib.resolve()


def test_whitelist_applies_to_the_source_not_the_cache(tmp_path, cache, monkeypatch):
    allowed = tmp_path / "allowed"
    inside = write(allowed / "k.cc", SIMPLE)
    outside = write(tmp_path / "elsewhere" / "k2.cc", SIMPLE + "// other\n")
    monkeypatch.setenv("FUSEGEN_AOT_WHITELIST", str(allowed))
    lib = build.build_library(inside)  # its artifact lives in the (non-whitelisted) cache
    assert cache in lib.parents
    with pytest.raises(LibraryError, match="outside the AOT whitelist"):
        build.build_library(outside)


# --------------------------------------------------------------------------- flags and header

def test_default_flags():
    cpp = build.default_cpp_flags()
    assert cpp[:6] == ["-std=c++17", "-O3", "-march=native", "-fno-math-errno", "-fPIC", "-shared"]
    assert cpp[-1] == "-D_GLIBCXX_USE_CXX11_ABI=0"
    assert build.MINDSPORE_CPU_FLAGS == ("-std=c++17", "--shared", "-fPIC", "-D_GLIBCXX_USE_CXX11_ABI=0")
    cuda = build.default_cuda_flags()
    assert cuda[:4] == ["--shared", "-Xcompiler", "-fPIC", "-O3"] and "--use_fast_math" in cuda
    gencodes = [cuda[i + 1] for i, flag in enumerate(cuda) if flag == "-gencode"]
    assert gencodes and all(g.startswith("arch=compute_") for g in gencodes)
    if shutil.which("nvidia-smi") is None:
        assert gencodes[0] == "arch=compute_75,code=sm_75" and gencodes[-1] == "arch=compute_90,code=compute_90"


def test_cache_dir_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSEGEN_CACHE_DIR", str(tmp_path / "explicit"))
    assert build.cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("FUSEGEN_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert build.cache_dir() == tmp_path / "xdg" / "fusegen"


@pytest.mark.parametrize("abi", [0, 1])
def test_header_compiles_warning_free(tmp_path, abi):
    src = write(tmp_path / "use.cc", '#include "custom_aot_extra.h"\nenum TypeId : int {};\n'
                'extern "C" TypeId UseInferType(std::vector<TypeId> t, AotExtra *e) {\n'
                '  return e->HasAttr("x") && e->Attr<bool>("x") ? kNumberTypeFloat32 : t.at(0);\n}\n')
    cmd = ["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
           f"-I{build.HEADER_PATH.parent}", "-fsyntax-only", str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr


@needs_nvcc
def test_cu_suffix_is_compiled_with_nvcc(tmp_path, compiles):
    src = write(tmp_path / "k.cu", '__global__ void fg_kernel(float *x) { x[threadIdx.x] += 1.0f; }\n' + SIMPLE)
    flags = ["--shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_75,code=sm_75"]
    lib = build.build_library(src, flags=flags)
    assert "fg_answer" in build.dynamic_symbols(lib) and "nvcc" in compiles[0][0]
