"""``Call``: what a kernel keeps per input signature. The kernel (``rt.kernel``) fills the part
every backend shares; each executor extends it with what its runner needs."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Call:
    """What every call with one input signature needs; executors add their own fields."""

    out_shapes: tuple
    out_dtypes: tuple          # what the caller gets (NumPy dtypes)
    attr_values: dict
    run: object = None         # the runner the executor made: run(arrays, out, stream=None)
