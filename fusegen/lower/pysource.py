"""Generated Python source -> an imported module, through a content-addressed file.

Both Numba backends generate Python. Writing it to a real file (named by the hash of its
text) keeps it readable and lets Numba's ``cache=True`` work: Numba cannot cache
functions defined in ``<string>`` (numba/numba#3501) and keys its cache by the file.
Whatever must invalidate that cache (fusegen and Numba versions, JIT options) therefore
belongs in the source text itself.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading

from ..cache import cache_dir

_lock = threading.Lock()
_modules: dict[str, object] = {}

# Python spellings shared by the generated sources: NumPy's NaN-propagating maximum/minimum
# and the accumulator update of each reduction kind.
NAN_HELPERS = '''\


def _fmax(a, b):  # NumPy's maximum: NaN wins
    return a if (a > b or a != a) else b


def _fmin(a, b):
    return a if (a < b or a != a) else b

'''


def combine(kind: str, acc: str, v: str) -> str:
    """The statement that folds value ``v`` into accumulator ``acc`` for a reduction kind."""
    if kind in ("sum", "mean"):
        return f"{acc} += {v}"
    if kind == "prod":
        return f"{acc} *= {v}"
    return f"{acc} = _fmax({acc}, {v})" if kind == "max" else f"{acc} = _fmin({acc}, {v})"


def source_dir(sub: str) -> str:
    d = os.path.join(cache_dir(), sub)
    os.makedirs(d, exist_ok=True)
    return d


def import_source(src: str, sub: str, prefix: str, setup=None, key_extra: str = ""):
    """Write ``src`` to ``<cache>/<sub>/<prefix>_<hash>.py`` (atomically: concurrent processes
    write identical bytes) and import it once per process. ``setup(module)`` runs right
    after the import, under the lock (e.g. to wrap functions in ``njit``); ``key_extra``
    distinguishes in-process variants of one file (the file itself is keyed by ``src``)."""
    file_digest = hashlib.sha256(src.encode()).hexdigest()[:20]
    modname = f"{prefix}_{hashlib.sha256((src + key_extra).encode()).hexdigest()[:20]}"
    with _lock:
        mod = _modules.get(modname)
        if mod is None:
            path = os.path.join(source_dir(sub), f"{prefix}_{file_digest}.py")
            if not os.path.exists(path):
                tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
                with open(tmp, "w") as f:
                    f.write(src)
                os.replace(tmp, path)
            spec = importlib.util.spec_from_file_location(modname, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[modname] = mod
            spec.loader.exec_module(mod)
            if setup is not None:
                setup(mod)
            _modules[modname] = mod
    return mod
