"""Where fusegen keeps what it generates and builds: one cache directory, shared by the
generated Python sources (Numba's on-disk cache lives beside them), the emitted C++ sources and
the native build cache (``fusegen.native.build``), how that cache reads a source (``source_key_text``),
and the stamp of fusegen's own code that keys caches of generated code (``code_stamp``)."""
from __future__ import annotations

import functools
import hashlib
import os
import re
from pathlib import Path


def cache_dir() -> Path:
    """The cache root: ``$FUSEGEN_CACHE_DIR``, else ``$XDG_CACHE_HOME/fusegen``, else ``~/.cache/fusegen``."""
    explicit = os.environ.get("FUSEGEN_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "fusegen"


# A source location at the end of a // comment line, as fusegen's emitted headers and text forms
# carry them ("//     %3 = add %1, %2      # model.py:17"). Comments do not reach the library.
_LOCATION_COMMENT = re.compile(rb"^(\s*//.*?)\s*# [^\s#]+\.py:\d+[ \t]*$", re.M)


def source_key_text(text: bytes) -> bytes:
    """The source as the build cache keys it: location comments dropped, so an op moved within its
    file (or to another) reuses its library; the shipped file keeps them."""
    return _LOCATION_COMMENT.sub(rb"\1", text)


@functools.cache
def code_stamp() -> str:
    """A digest of the installed fusegen's code (every ``.py``, template and header in the package:
    path, size and modification time, as Python's own bytecode cache judges staleness; reading and
    hashing the 1.3 MB would cost a warm start 10 ms). Keys of caches that skip generating code
    (``rt.aot``'s emission index) include it, so another fusegen version generates afresh."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".py", ".j2", ".h")):
                st = os.stat(os.path.join(dirpath, name))
                h.update(f"{os.path.relpath(os.path.join(dirpath, name), root)}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:32]
