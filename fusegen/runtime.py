"""The runtime's face: ``compile`` (``fg.compile``) and the one ``Kernel`` every backend and device
runs through, re-exported from ``fusegen.rt`` with the policies the emitted C++ mirrors:

* ``rt.kernel``: ``Kernel`` (the signature cache, validation, inference, dispatch) and
  ``default_kernel`` (what ``op(*arrays)`` runs);
* ``rt.cpu``, ``rt.cuda``: what each device contributes (arguments, allocation);
* ``rt.numba_cpu``, ``rt.numba_cuda``, ``rt.aot``: each backend's executor; ``rt.policy``: the
  Numba CPU thread policy (``choose_tile``, ``split_count``), which the emitted C++ copies;
* ``rt.requests``: write requests; ``rt.engine``: ``fg.Engine``.
"""
from __future__ import annotations

from .rt.cpu import call_signature  # noqa: F401
from .rt.kernel import Kernel, compile, default_kernel, run_eagerly  # noqa: F401
from .rt.policy import PARALLEL_THRESHOLD, choose_tile, num_threads, split_count  # noqa: F401

_num_threads = num_threads  # (the name tests of the thread policy use)
