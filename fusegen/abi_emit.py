"""The C++ emitters' face: ``emit`` (``fg.emit``) picks the emitter for an ABI and a device, and
the emitters' public names are re-exported here from ``fusegen.emitters``:

* ``emitters.mindspore_cpu``: the MindSpore-AOT ``.cc``;
* ``emitters.cuda``: the MindSpore-AOT ``.cu``;
* ``emitters.xla``: XLA typed-FFI handlers (``.cc`` and ``.cu``) around the same stage code;
* ``emitters.common``: what they share (tables, the templates' plain data, ``Emitted``).
"""
from __future__ import annotations

from .emitters.common import (  # noqa: F401
    CUDA_DEFAULT_ARCHS, ERROR_CODES, ERRORS, HEADER_NAME, HEADER_PATH, TEMPLATES, TYPE_IDS, Emitted, c_name,
    default_dtypes, error_table, parse_dtypes, scan_form, template_data,
)
from .emitters.cuda import emit_cuda
from .emitters.mindspore_cpu import emit_cpu
from .emitters.xla import FFI_ATTRS, FFI_DTYPES, XlaEmitted, emit_xla, legacy_opaque, workspace_bytes  # noqa: F401
from .ir import OpDef


def emit(op: OpDef, abi: str = "mindspore-aot", device: str = "cpu", dtypes=None,
         dynamic_workspace: str = "kernel", ranks=None, shapes=None) -> Emitted:
    """Generate the files a user ships for ``op``.

    ``dtypes``: the dtype combinations to support — a dtype name (all inputs), a list of
    names (one combination per name, all inputs alike), or a list of per-input tuples.
    Default: every float dtype.
    ``dynamic_workspace``: what ``NameInit`` does when a workspace size depends on a dim it
    sees as unknown (-1): ``"kernel"`` (default) asks for no workspace and lets the kernel
    own and grow its scratch, so the op runs under MindSpore's dynamic shapes;
    ``"error"`` returns ``FG_ERR_DYNAMIC_WORKSPACE`` instead.
    ``ranks``/``shapes``: for an op traced per input rank or shape (one whose Python branches on
    ``x.ndim`` or on a dim), the input ranks or shapes to emit its specialization for; the
    kernel then checks them at each call (``FG_ERR_RANK``/``FG_ERR_OUT_SHAPE``). Without them
    such an op is a ``TraceError`` naming the line that needed them.
    """
    if dynamic_workspace not in ("kernel", "error"):
        raise ValueError(f"dynamic_workspace must be 'kernel' or 'error', got {dynamic_workspace!r}")
    if not isinstance(op, OpDef):
        raise TypeError(f"fusegen.emit expects an @fusegen.op, got {type(op).__name__}")
    if abi == "xla-ffi":  # XLA typed-FFI handlers around the same loops
        return emit_xla(op, device=device, dtypes=dtypes, ranks=ranks, shapes=shapes)
    if abi != "mindspore-aot":
        raise NotImplementedError(f"abi={abi!r} is not available: use 'mindspore-aot' or 'xla-ffi'")
    if device == "cuda":  # the .cu: same tables and entry points, CUDA kernels
        return emit_cuda(op, dtypes=dtypes, dynamic_workspace=dynamic_workspace, ranks=ranks, shapes=shapes)
    if device != "cpu":
        raise NotImplementedError(f"device={device!r} is not available: use 'cpu' or 'cuda'")
    return emit_cpu(op, dtypes=dtypes, dynamic_workspace=dynamic_workspace, ranks=ranks, shapes=shapes)
