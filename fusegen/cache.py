"""Where fusegen keeps what it generates and builds: one cache directory, shared by the
generated Python sources (Numba's on-disk cache lives beside them), the emitted C++ sources and
the native build cache (``fusegen.native.build``), and how that cache reads a source (``source_key_text``)."""
from __future__ import annotations

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
