"""The native build cache: compile a kernel source once, reuse the library forever.

``build_library`` mirrors MindSpore's auto-compile rule (a path ending in ``.cc``
or ``.cpp`` is compiled with g++, ``.cu`` with nvcc, anything else is a library
path) but writes into a content-addressed cache instead of ``./custom_kernel_meta``.

Cache layout: ``<cache_dir()>/v<BUILD_FORMAT_VERSION>/<key>/`` holds ``lib<stem>.so``
and ``build.json`` (size, sha256, command).  An entry is built in a private temp
directory beside it and published with one ``os.rename`` of the directory, so a
reader sees either nothing or a complete entry, and concurrent builders of the
same key all succeed (the first rename wins; the others use the winner's entry).
An entry whose library no longer matches its sidecar (truncated, edited) is
moved aside and rebuilt.

Whitelist rule (``FUSEGEN_AOT_WHITELIST``, else ``MS_CUSTOM_AOT_WHITE_LIST``;
``os.pathsep``-separated directories): the path the *user* gives, a source or a
library, must lie inside one of the directory trees after ``realpath``, so
symlinks and ``..`` cannot get around it.  A library fusegen compiles from an
accepted source is that source's artifact and is accepted without a second check
(the cache directory need not be whitelisted); fusegen's own host shims are
fusegen's code and are never checked.  Headers a source includes are not checked:
they are part of the source the user chose to compile.

Linux only: libraries are validated as ELF shared objects.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from ..cache import cache_dir, source_key_text
from ..emitters.common import CUDA_DEFAULT_ARCHS, HEADER_PATH
from ..errors import CompileError, LibraryError
from .elf import check_shared_library, dynamic_symbols, has_cuda_code, needed_libraries  # noqa: F401  (build's face)

__all__ = ["BUILD_FORMAT_VERSION", "HEADER_PATH", "MINDSPORE_CPU_FLAGS", "CUDA_DEFAULT_ARCHS", "cache_dir",
           "default_cpp_flags", "default_cuda_flags", "cuda_gencode_flags", "build_library", "aot_whitelist",
           "check_whitelist", "check_shared_library", "dynamic_symbols", "has_cuda_code", "needed_libraries",
           "local_includes", "compile_cached"]

#: Bump when the cache layout or anything else that changes the artifact for
#: identical inputs changes; it is part of every key.
BUILD_FORMAT_VERSION = 1

#: fusegen's ``custom_aot_extra.h`` (``HEADER_PATH``): ``build_library`` puts its folder on every
#: build's include path *after* the source's own folder (as MindSpore puts its own header there),
#: so a source that includes ``"custom_aot_extra.h"`` builds without a copy beside it, and a header
#: shipped beside the source still wins.

#: MindSpore's own CPU auto-compile flags (no -O, as MindSpore does); the
#: ``-I<source dir>`` it adds is appended to every build by ``build_library``.
MINDSPORE_CPU_FLAGS: tuple[str, ...] = ("-std=c++17", "--shared", "-fPIC", "-D_GLIBCXX_USE_CXX11_ABI=0")

_CPP_SUFFIXES = {".cc", ".cpp"}
_CUDA_SUFFIXES = {".cu"}
_INCLUDE_RE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*([<"])([^">\r\n]+)[">]', re.MULTILINE)

# Per-process memo of slow facts (compiler --version, probes, validated entries).
_memo: dict[tuple, object] = {}
_memo_lock = threading.Lock()


def _memoized(key: tuple, compute):
    with _memo_lock:
        if key in _memo:
            return _memo[key]
    value = compute()
    with _memo_lock:
        return _memo.setdefault(key, value)


def _resolve_compiler(compiler: str | None, suffix: str) -> str:
    if compiler is None:
        cuda = suffix in _CUDA_SUFFIXES
        compiler = os.environ.get("FUSEGEN_NVCC" if cuda else "FUSEGEN_CXX") or ("nvcc" if cuda else "g++")
    found = shutil.which(compiler)
    if found is None:
        raise CompileError(f"compiler {compiler!r} not found (not on PATH and not an executable path); "
                           "install it or pass compiler=...", [compiler])
    return found  # not realpath'd: ccache-style wrappers dispatch on the name they are run as


def _on_disk(kind: str, compiler: str, compute, machine: bool = False) -> str:
    """A fact about ``compiler`` (its ``--version``, what ``-march=native`` means) kept in the cache
    across processes: asking the compiler costs a warm start 5-10 ms a question, a quarter of
    loading a built kernel. The key is the compiler's path, the file it resolves to and that
    file's size, modification time and inode (an upgrade replaces it), and with ``machine`` the
    CPU's identity (a cache shared between machines). Unreadable or unwritable: computed."""
    def fact() -> str:
        try:
            real = os.path.realpath(compiler)
            st = os.stat(real)
            stamp = f"{kind}|{compiler}|{real}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}"
            if machine:
                stamp += "|" + _cpu_identity()
        except OSError:
            return compute()
        path = cache_dir() / "facts" / (hashlib.sha256(stamp.encode()).hexdigest()[:24] + ".txt")
        try:
            return path.read_text()
        except OSError:
            pass
        value = compute()
        try:
            _atomic_write(path, value.encode())
        except OSError:
            pass
        return value
    return _memoized((kind, compiler), fact)


def _cpu_identity() -> str:
    """The CPU's model and feature flags (what -march=native resolves from), or the machine type."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [line for line in f if line.startswith(("model name", "flags"))][:2]
        return "".join(lines) or os.uname().machine
    except OSError:
        return os.uname().machine


def _compiler_version(compiler: str) -> str:
    def run() -> str:
        proc = subprocess.run([compiler, "--version"], capture_output=True, text=True)
        return proc.stdout + proc.stderr
    return _on_disk("version", compiler, run)


def _openmp_supported(compiler: str) -> bool:
    """Probe once per compiler; the answer is kept in memory and on disk, since
    the probe costs a compile and the default flags (hence every key) depend on it."""
    def probe() -> bool:
        tag = hashlib.sha256((compiler + _compiler_version(compiler)).encode()).hexdigest()[:16]
        marker = cache_dir() / f"probe-openmp-{tag}"
        try:
            return marker.read_text().strip() == "1"
        except OSError:
            pass
        with tempfile.TemporaryDirectory(prefix="fusegen-probe-") as tmp:
            src = Path(tmp, "probe.cc")
            src.write_text('#include <omp.h>\nextern "C" int fusegen_probe() { return omp_get_max_threads(); }\n')
            cmd = [compiler, "-fopenmp", "-fPIC", "-shared", "-o", str(Path(tmp, "probe.so")), str(src)]
            ok = subprocess.run(cmd, capture_output=True).returncode == 0
        try:
            _atomic_write(marker, b"1" if ok else b"0")
        except OSError:
            pass  # an unwritable cache only costs a probe per process
        return ok
    return _memoized(("openmp", compiler), probe)


def default_cpp_flags(compiler: str | None = None) -> list[str]:
    """fusegen's fast C++ flags (``-O3 -march=native``, OpenMP when the compiler has it).

    ``-fno-math-errno``: no kernel reads ``errno``, and a ``sqrt`` that may set it can be
    neither vectorized nor hoisted (layer_norm's and rms_norm's ``rsqrt`` per element: 2x).
    Results are unchanged: this is not ``-ffast-math``."""
    flags = ["-std=c++17", "-O3", "-march=native", "-fno-math-errno", "-fPIC", "-shared"]
    if _openmp_supported(_resolve_compiler(compiler, ".cc")):
        flags.append("-fopenmp")
    flags.append("-D_GLIBCXX_USE_CXX11_ABI=0")
    return flags


def cuda_gencode_flags() -> list[str]:
    """``-gencode`` flags for the GPUs ``nvidia-smi`` reports, else for ``CUDA_DEFAULT_ARCHS``."""
    def detect() -> list[str]:
        try:
            proc = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                                  capture_output=True, text=True, timeout=20)
            caps = sorted({line.strip().replace(".", "") for line in proc.stdout.splitlines()
                           if re.fullmatch(r"\d+\.\d+", line.strip())}) if proc.returncode == 0 else []
        except (OSError, subprocess.SubprocessError):
            caps = []
        archs = caps or list(CUDA_DEFAULT_ARCHS)
        flags = []
        for arch in archs:
            flags += ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]
        return flags + ["-gencode", f"arch=compute_{archs[-1]},code=compute_{archs[-1]}"]
    return list(_memoized(("gencode",), detect))


def default_cuda_flags(fast_math: bool = True) -> list[str]:
    """nvcc flags for a ``.cu`` source: MindSpore's GPU flags with this machine's architectures.

    ``fast_math=False`` drops ``--use_fast_math`` (approximate exp/division, denormals flushed):
    ``fg.compile(op, backend="aot", device="cuda")`` uses that, so its results agree with NumPy
    as closely as every other backend's.
    """
    return ["--shared", "-Xcompiler", "-fPIC", "-O3", *(["--use_fast_math"] if fast_math else []),
            "--expt-relaxed-constexpr", "-D_GLIBCXX_USE_CXX11_ABI=0", *cuda_gencode_flags()]


# --------------------------------------------------------------------------- whitelist

def aot_whitelist() -> tuple[str, list[str]] | None:
    """``(variable, realpath'd directories)`` of the active whitelist, or None when unset.

    ``FUSEGEN_AOT_WHITELIST`` wins over MindSpore's ``MS_CUSTOM_AOT_WHITE_LIST``.
    """
    for var in ("FUSEGEN_AOT_WHITELIST", "MS_CUSTOM_AOT_WHITE_LIST"):
        dirs = [os.path.realpath(os.path.expanduser(d)) for d in os.environ.get(var, "").split(os.pathsep)
                if d.strip()]
        if dirs:
            return var, dirs
    return None


def check_whitelist(path: str | os.PathLike) -> None:
    """Raise ``LibraryError`` if a whitelist is set and ``path`` (after realpath) is outside it."""
    active = aot_whitelist()
    if active is None:
        return
    var, dirs = active
    real = os.path.realpath(path)
    if not any(real == d or real.startswith(d.rstrip(os.sep) + os.sep) for d in dirs):
        raise LibraryError(f"{os.fspath(path)!r} (resolves to {real!r}) is outside the AOT whitelist "
                           f"{var}={os.pathsep.join(dirs)!r}; refusing to load it")


# --------------------------------------------------------------------------- cache key

def _include_dirs(flags: list[str]) -> tuple[list[Path], list[Path]]:
    """(-iquote dirs, -I dirs) named in ``flags``, in order."""
    quote, angle = [], []
    it = iter(flags)
    for flag in it:
        for prefix, bucket in (("-iquote", quote), ("-I", angle), ("--include-path", angle)):
            if flag.startswith(prefix):
                rest = flag[len(prefix):].lstrip("=")
                value = rest if rest else next(it, "")
                if value:
                    bucket.append(Path(value))
                break
    return quote, angle


def _implicit_include_dirs(source: Path) -> list[Path]:
    """The include folders every build gets after the caller's flags: the source's own, then the
    one holding fusegen's ``custom_aot_extra.h`` (the header MindSpore's build would supply)."""
    return [source.parent, HEADER_PATH.parent]


def local_includes(source: str | os.PathLike, flags: list[str] = ()) -> list[tuple[str, Path | None]]:
    """Headers ``source`` includes, recursively, that resolve outside the system dirs.

    Returns ``(spelling, path or None)`` pairs; None marks a quoted include that
    resolved nowhere local (its spelling still goes into the key, so creating it
    later changes the key).  ``#include MACRO`` is not followed.
    """
    source = Path(source)
    quote_dirs, angle_dirs = _include_dirs(list(flags))
    angle_dirs = angle_dirs + _implicit_include_dirs(source)  # what build_library always adds
    found: list[tuple[str, Path | None]] = []
    seen: set[Path] = set()
    pending = [source]
    while pending:
        current = pending.pop()
        try:
            text = current.read_bytes()
        except OSError:
            continue
        for kind, name_b in _INCLUDE_RE.findall(text):
            name = name_b.decode("utf-8", "replace")
            dirs = ([current.parent] + quote_dirs if kind == b'"' else []) + angle_dirs
            hit = next((d / name for d in dirs if (d / name).is_file()), None)
            if hit is None:
                if kind == b'"':
                    found.append((name, None))
                continue
            hit = hit.resolve()
            if hit not in seen:
                seen.add(hit)
                found.append((name, hit))
                pending.append(hit)
    return found


def _native_arch(compiler: str) -> str:
    """What -march=native means here, so a cache shared between machines stays correct."""
    def query() -> str:
        proc = subprocess.run([compiler, "-march=native", "-Q", "--help=target"], capture_output=True, text=True)
        if proc.returncode == 0:
            return proc.stdout
        try:
            return next(line for line in open("/proc/cpuinfo") if line.startswith("flags"))
        except (OSError, StopIteration):
            return os.uname().machine
    return _on_disk("native", compiler, query, machine=True)


def _cache_key(source: Path, compiler: str, flags: list[str]) -> str:
    h = hashlib.sha256()
    def part(label: str, value: bytes) -> None:
        h.update(f"{label}:{len(value)}:".encode())
        h.update(value)
    part("format", str(BUILD_FORMAT_VERSION).encode())
    part("suffix", source.suffix.encode())
    part("source", source_key_text(source.read_bytes()))
    for name, header in local_includes(source, flags):
        part("include", name.encode())
        part("header", header.read_bytes() if header else b"<missing>")
    part("compiler", compiler.encode())
    part("version", _compiler_version(compiler).encode())
    part("flags", "\0".join(flags).encode())
    if any("=native" in f for f in flags):  # -march=native (g++) or -arch=native (nvcc)
        native = " ".join(cuda_gencode_flags()) if source.suffix in _CUDA_SUFFIXES else _native_arch(compiler)
        part("native", native.encode())
    return h.hexdigest()[:32]


# --------------------------------------------------------------------------- cache entries

def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _valid_entry(entry: Path) -> Path | None:
    """The entry's library if it matches its sidecar, else None."""
    try:
        meta = json.loads((entry / "build.json").read_text())
        lib = entry / meta["library"]
        st = lib.stat()
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if st.st_size != meta.get("size"):
        return None
    stamp = ("valid", str(lib), st.st_size, st.st_mtime_ns, st.st_ino)
    with _memo_lock:
        if stamp in _memo:
            return lib
    if _sha256(lib) != meta.get("sha256"):
        return None
    with _memo_lock:
        _memo[stamp] = True
    return lib


def _run_compiler(command: list[str], source: Path) -> None:
    try:
        proc = subprocess.run(command, capture_output=True, text=True)
    except OSError as exc:
        raise CompileError(f"cannot run compiler {command[0]!r}: {exc}", command) from None
    if proc.returncode != 0:
        raise CompileError(f"compiling {source} failed (exit code {proc.returncode})", command,
                           (proc.stdout + proc.stderr).strip())


def compile_cached(source: Path, flags: list[str] | None, compiler: str | None) -> Path:
    """Compile ``source`` (no whitelist check) or return the cached library."""
    compiler = _resolve_compiler(compiler, source.suffix)
    if flags is None:
        flags = default_cuda_flags() if source.suffix in _CUDA_SUFFIXES else default_cpp_flags(compiler)
    flags = list(flags)
    if "-shared" not in flags and "--shared" not in flags:
        flags.append("-shared")  # without it the "library" would be an executable
    key = _cache_key(source, compiler, flags)
    root = cache_dir() / f"v{BUILD_FORMAT_VERSION}"
    entry = root / key
    lib = _valid_entry(entry)
    if lib is not None:
        return lib
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key[:8]}-", dir=root))
    except OSError as exc:
        raise CompileError(f"cannot write to the build cache {root}: {exc}") from None
    try:
        out = tmp / f"lib{source.stem}.so"
        command = [compiler, *flags, *(f"-I{d}" for d in _implicit_include_dirs(source)), "-o", str(out),
                   str(source)]
        _run_compiler(command, source)
        check_shared_library(out)
        meta = {"format": BUILD_FORMAT_VERSION, "library": out.name, "size": out.stat().st_size,
                "sha256": _sha256(out), "source": str(source), "command": command}
        (tmp / "build.json").write_text(json.dumps(meta, indent=1))
        for _ in range(8):
            try:
                os.rename(tmp, entry)  # atomic publish of the complete directory
                return entry / out.name
            except OSError:
                lib = _valid_entry(entry)
                if lib is not None:  # another process published the same key first
                    return lib
                try:  # a corrupt entry: move it aside (atomically) and retry
                    os.rename(entry, tempfile.mkdtemp(prefix=".trash-", dir=root) + "/old")
                except OSError:
                    pass
        raise CompileError(f"could not publish the build of {source} into {entry}", command)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        for trash in root.glob(".trash-*"):
            shutil.rmtree(trash, ignore_errors=True)


def build_library(source_or_lib: str | os.PathLike, *, flags: list[str] | None = None,
                  compiler: str | None = None) -> Path:
    """Return a loadable shared library for ``source_or_lib``.

    ``.cc``/``.cpp`` are compiled with g++ and ``.cu`` with nvcc (``flags=None``
    means ``default_cpp_flags()`` / ``default_cuda_flags()``; given flags replace
    them, ``-shared`` is added if missing, and ``-I<source dir>`` then ``-I<the folder of
    fusegen's custom_aot_extra.h>`` always are: a source's own header wins; one string is split
    as a shell splits it: ``"-O3 -march=native"``).  Any
    other path is taken as a library and returned after checks.  The whitelist is
    applied to the path given (see the module docstring).  Raises ``CompileError``
    when the compiler fails or is missing, ``LibraryError`` for a missing file, a
    whitelist refusal, or a file that is not a shared library.
    """
    if isinstance(flags, str):   # (a list of its characters reached g++: "-O3" as "-", "O", "3")
        flags = shlex.split(flags)
    path = Path(source_or_lib).expanduser()
    if not path.is_file():
        raise LibraryError(f"{os.fspath(source_or_lib)!r}: no such file")
    check_whitelist(path)
    real = Path(os.path.realpath(path))
    if real.suffix in _CPP_SUFFIXES | _CUDA_SUFFIXES or path.suffix in _CPP_SUFFIXES | _CUDA_SUFFIXES:
        return compile_cached(real, flags, compiler)
    check_shared_library(real)
    return real
