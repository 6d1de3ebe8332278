"""Where fusegen keeps what it generates and builds: one cache directory, shared by the
generated Python sources (Numba's on-disk cache lives beside them), the emitted C++ sources and
the native build cache (``fusegen.native.build``)."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The cache root: ``$FUSEGEN_CACHE_DIR``, else ``$XDG_CACHE_HOME/fusegen``, else ``~/.cache/fusegen``."""
    explicit = os.environ.get("FUSEGEN_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "fusegen"
