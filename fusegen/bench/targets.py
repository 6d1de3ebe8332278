"""What each bench case is held to: the speed targets of the issues that asked for the op.

Each reference op has its issue's multiple of the bandwidth bound (``ISSUE_BOUNDS``), and the
issues say a target holds *for every backend*: on the CPU every fusegen backend, called the way
a user calls it by default (fresh outputs: ``kernel(*arrays)``), must be within it, so a case is
judged on the slowest of those (``JUDGED_CPU``). The ``out=`` and in-place columns are reported
beside them, not judged. The time per call at the small shape has one limit per backend
(issue #19: the Numba backend 1.5 us, the AOT backend 2 us, the XLA handler no slower than
``jax.jit`` of the same NumPy code measured in the same round). Whether fusegen is ahead of the
other methods is judged on fusegen's best method (the one a user would pick).

``harness.finish_case`` calls ``judge``; ``report`` words the result.
"""
from __future__ import annotations

from dataclasses import dataclass

#: op -> (its issue, the largest median / bound it may have at the large shapes). Ops missing
#: here are held to ``DEFAULT_BOUND`` (the first bench's target).
ISSUE_BOUNDS: dict[str, tuple[int | None, float]] = {
    # the first reference ops (memory-bound; the first bench's target, no issue of their own)
    "add_reduce_sum": (None, 1.2), "add_mul_div": (None, 1.2), "smooth_l1": (None, 1.2),
    # issue #16: layout ops
    "transpose_add": (16, 1.5), "rope": (16, 1.2), "heads_split": (16, 1.3), "causal_softmax": (16, 1.5),
    "swiglu": (16, 1.2), "group_norm": (16, 1.3),
    # issue #17: gathers, arg-reductions and scans
    "cross_entropy": (17, 1.15), "cross_entropy_grad": (17, 1.3), "accuracy": (17, 1.15),
    "embedding_layer_norm": (17, 1.3), "cumsum_last": (17, 1.5), "cumsum_first": (17, 1.3),
    # issue #18: the elementwise surface and random numbers
    "dropout_add_layer_norm": (18, 1.3), "quantize_int8": (18, 1.15), "dequantize": (18, 1.15),
    "softplus": (18, 1.3), "silu": (18, 1.3), "mish": (18, 1.3), "gelu": (18, 1.3),
    # issue #19: performance II (transcendental-heavy ops, softmax, norms, adam), however written
    "softmax": (19, 1.3), "user_softmax": (19, 1.3), "log_softmax": (19, 1.3), "bias_gelu": (19, 1.3),
    "user_bias_gelu_tanh": (19, 1.3), "sigmoid": (19, 1.3), "layer_norm": (19, 1.15),
    "user_layer_norm": (19, 1.15), "rms_norm": (19, 1.15), "adam_step": (19, 1.2),
}
DEFAULT_BOUND = 1.2

#: The CPU methods a large case is judged on: every fusegen backend with fresh outputs.
JUDGED_CPU = ("numba-cpu", "aot-cpu", "fg-jax-cpu")
#: Issue #19's limits on the time per call at the small shape, per fusegen method: seconds, or
#: the name of the method whose median (same case, same rounds) is the limit.
PER_CALL_CPU: dict[str, float | str] = {"numba-cpu": 1.5e-6, "aot-cpu": 2e-6, "fg-jax-cpu": "jax-cpu"}


@dataclass(frozen=True)
class Targets:
    """What the cases of a run are held to. Large cases: the judged fusegen median at most the
    op's multiple of the bound (``ISSUE_BOUNDS`` when ``per_op``, else ``bound_ratio``); small
    cases: each judged method within its ``per_call`` limit (a number of seconds, or a method's
    name); both: fusegen's best method (or with ``every_fusegen`` its slowest) faster than the
    fastest of ``ahead_of`` (None: of every other method). ``judged``: the fusegen methods every
    one of which must meet the bound (empty: the best fusegen method; with ``every_fusegen``
    its slowest)."""

    bound_ratio: float
    per_call_s: float | None
    every_fusegen: bool = False
    ahead_of: tuple[str, ...] | None = None
    ahead_label: str = "best fusegen vs best other"   # the report's column for the "ahead" margin
    per_op: bool = False
    judged: tuple[str, ...] = ()
    per_call: tuple[tuple[str, float | str], ...] = ()

    def bound_for(self, op: str) -> tuple[int | None, float]:
        """(issue or None, the multiple of the bound) an op is held to."""
        return ISSUE_BOUNDS.get(op, (None, self.bound_ratio)) if self.per_op else (None, self.bound_ratio)

    def as_json(self) -> dict:
        return {"bound_ratio": self.bound_ratio, "per_call_s": self.per_call_s,
                "every_fusegen": self.every_fusegen, "ahead_of": list(self.ahead_of) if self.ahead_of else None,
                "ahead_label": self.ahead_label,
                "per_op": {op: {"issue": i, "bound_ratio": r} for op, (i, r) in ISSUE_BOUNDS.items()}
                if self.per_op else None,
                "judged": list(self.judged) or None, "per_call": dict(self.per_call) or None}


CPU_TARGETS = Targets(DEFAULT_BOUND, None, per_op=True, judged=JUDGED_CPU, per_call=tuple(PER_CALL_CPU.items()),
                      ahead_label="best fusegen vs best other")


def judge(doc: dict, timed: dict, fg: dict, others: dict, bound: float, targets: Targets) -> None:
    """Fill ``doc["targets"]`` of a measured case: ``timed`` every method with a median, ``fg``
    and ``others`` the fusegen and the other methods among them (fallbacks left out)."""
    def fastest(entries: dict, slowest: bool = False) -> str | None:
        return (max if slowest else min)(entries, key=lambda n: entries[n]["median_s"]) if entries else None

    doc["targets"] = {}
    best = fastest(fg, slowest=targets.every_fusegen)
    if best is None:
        return
    if doc["size"] == "large":
        issue, limit = targets.bound_for(doc["op"])
        each = {n: fg[n]["median_s"] / bound for n in targets.judged if n in fg}
        judged = max(each, key=each.get) if each else best
        value = fg[judged]["median_s"] / bound
        doc["targets"]["bound"] = {"limit": limit, "value": value, "met": value <= limit, "method": judged,
                                   "issue": issue, "each": each or None}
    else:
        limits = {}
        for name, lim in targets.per_call:
            seconds = timed.get(lim, {}).get("median_s") if isinstance(lim, str) else lim
            if name in fg and seconds:
                limits[name] = (seconds, lim if isinstance(lim, str) else None)
        if not limits and targets.per_call_s is not None:
            limits = {best: (targets.per_call_s, None)}
        if limits:
            worst = max(limits, key=lambda n: fg[n]["median_s"] / limits[n][0])
            seconds, rival = limits[worst]
            doc["targets"]["per_call"] = {"limit_s": seconds, "value_s": fg[worst]["median_s"],
                                          "met": fg[worst]["median_s"] <= seconds, "method": worst,
                                          "limit_method": rival}
    rival = fastest({n: e for n, e in others.items() if targets.ahead_of is None or n in targets.ahead_of})
    if rival is not None:
        # > 1: fusegen's best (or judged) method is that many times faster than the fastest rival
        margin = timed[rival]["median_s"] / fg[best]["median_s"]
        doc["targets"]["ahead"] = {"value": margin, "other": rival, "met": margin > 1.0, "method": best}


__all__ = ["ISSUE_BOUNDS", "DEFAULT_BOUND", "JUDGED_CPU", "PER_CALL_CPU", "Targets", "CPU_TARGETS", "judge"]
