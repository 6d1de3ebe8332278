"""What the CPU contributes to a kernel call: its arguments are NumPy arrays (anything else is
converted with ``np.asarray``), and its outputs are NumPy arrays, allocated or checked when the
caller gives ``out=``.

Non-contiguous inputs are *copied* to C order by the runner (one extra pass; say
``np.ascontiguousarray`` yourself to pay it once).
"""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError, DTypeError, ShapeError
from ..native import fastcall
from .call import check_count, signature_key


class HostArguments:
    """The CPU's view of a call's arguments: arrays and the signature key (no stream: a
    ``stream=`` stays among the attributes, where binding refuses it)."""

    def arguments(self, kernel, arrays, attrs: dict):
        """Inputs as arrays (count checked), the signature key the fast path looks up (None
        when an attribute value is unhashable: such calls are prepared every time, not cached),
        and the stream (None)."""
        arrs, key = call_signature(kernel, arrays, attrs)
        return arrs, key, None


HOST = HostArguments()


def call_signature(kernel, arrays, attrs: dict):
    """The slow path's view of a call: inputs as arrays (count checked) and the signature key
    the fast path looks up; the key is None when an attribute value is unhashable (a list)."""
    check_count(kernel.op, arrays)
    arrs = [a if type(a) is np.ndarray else np.asarray(a) for a in arrays]
    # a byte order other than the machine's ('>f4' here): its values in native order, a copy as
    # for any input the kernels cannot read in place
    arrs = [a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("=")) for a in arrs]
    return arrs, signature_key(kernel, arrs, attrs)


def host_outputs(name: str, out, shapes, dtypes, reg_dtypes) -> list:
    """Arrays for the kernel to write: the caller's ``out=`` arrays where they can be written
    directly (checked for count, shape, dtype and writability first), fresh ones otherwise
    (``reg_dtypes``: what the kernel writes, e.g. float32 for a float16 output)."""
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(outs) != len(shapes):
        raise ArgumentError(f"op {name}: out= needs {len(shapes)} arrays, got {len(outs)}")
    res = []
    for k, (o, s, d, r) in enumerate(zip(outs, shapes, dtypes, reg_dtypes)):
        if o is None and isinstance(out, (tuple, list)):   # NumPy's ufuncs: None in out= is allocated
            res.append(fastcall.empty(s, r))
            continue
        if not isinstance(o, np.ndarray):
            raise ArgumentError(f"op {name}: out[{k}] must be a numpy array, got {type(o).__name__}")
        if o.shape != tuple(s):
            raise ShapeError(f"op {name}: out[{k}] must have shape {tuple(s)}, got {o.shape}")
        if o.dtype != d:
            raise DTypeError(f"op {name}: out[{k}] must have dtype {d}, got {o.dtype}")
        if not o.flags.writeable:
            raise ArgumentError(f"op {name}: out[{k}] is read-only")
        flags = o.flags
        direct = flags.c_contiguous and flags.aligned and r == d  # what the compiled code is typed for
        res.append(o if direct else fastcall.empty(s, r))   # (64-byte aligned where large)
    return res


def finish(outs, out, dtypes, multi: bool):
    """What the call returns: the caller's ``out=`` arrays (written back where the kernel wrote
    elsewhere), or the results in their dtypes."""
    given = (list(out) if isinstance(out, (tuple, list)) else [out]) if out is not None else None
    results = []
    for k, (o, d) in enumerate(zip(outs, dtypes)):
        if given is not None and given[k] is not None:
            if given[k] is not o:
                np.copyto(given[k], o, casting="unsafe")
            results.append(given[k])
        else:
            results.append(o if o.dtype == d else o.astype(d))
    return tuple(results) if multi else results[0]
