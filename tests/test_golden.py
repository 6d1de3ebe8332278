"""Golden check: the text every generator emits for a fixed set of ops, byte for byte.

Written before the architecture issue (#15) moved fusegen's modules around, and kept after it:
a restructuring must not change a single emitted byte. Covered: every reference op of
``fusegen/examples.py`` plus some gradients, a write-request variant, integer and mixed dtype
combinations and an op with every attribute kind, through the four C++ emitters (MindSpore
``.cc`` and ``.cu``, XLA FFI ``.cc`` and ``.cu``), and the Numba CPU and numba-cuda Python
sources of some signatures (generated, not compiled).

A change that *means* to change the emitted text regenerates the files and shows the diff:

    python tests/test_golden.py            # rewrites tests/golden/

Two tokens depend on the environment, not on fusegen, and are normalized in the Numba
preludes: the numba version and the digest of ``fusegen/vmath.py`` (its effect on the C++ is
the vmath code itself, which stays in the text).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "golden"


def _ops():
    import fusegen as fg
    import fusegen.examples as ex

    @fg.op
    def every_attr(x, y, *, axes: list[int] = [0], scale: float = 2.0, keep: bool = True,  # noqa: B006
                   shift: int = 3, tag: str = "t", rows: list[list[int]] = [[1]]):  # noqa: B006
        z = fg.maximum(x * scale, y) - shift
        m = fg.max(z, axis=axes, keep_dims=keep)
        return fg.where(z > m, fg.relu(z), fg.sigmoid(y)).astype("float64"), fg.mean(z.astype("int32"), axis=None)

    ops = {op.name: (op, None) for op in ex.REFERENCE_OPS}
    ops["add_reduce_sum_grad"] = (fg.grad(ex.add_reduce_sum), "float32")
    ops["softmax_grad"] = (fg.grad(ex.softmax), "float32")
    ops["layer_norm_grad"] = (fg.grad(ex.layer_norm), "float64")
    ops["rms_norm_grad"] = (fg.grad(ex.rms_norm, wrt="x"), "float16")
    ops["add_mul_div_asw"] = (ex.add_mul_div.with_requests(accumulate=[0], skip=[2]), "float32")
    ops["add_reduce_sum_int"] = (ex.add_reduce_sum, ["int32", "int8,int16", "uint8,uint8", "bool"])
    ops["add_mul_div_mixed"] = (ex.add_mul_div, ["float16,int32", "int64,float32"])
    ops["every_attr"] = (every_attr, ["float32", "float16,float64"])
    ops["cross_entropy"] = (ex.cross_entropy, "float32,int64")   # a gather (#17): CPU sources only so far
    return ops


def emitted_files() -> dict[str, str]:
    """relative path -> text, for every file the C++ emitters write."""
    import fusegen as fg
    out = {}
    for key, (op, dtypes) in _ops().items():
        targets = [("mindspore-cpu", dict(abi="mindspore-aot", device="cpu")),
                   ("mindspore-cuda", dict(abi="mindspore-aot", device="cuda")),
                   ("xla-cpu", dict(abi="xla-ffi", device="cpu")),
                   ("xla-cuda", dict(abi="xla-ffi", device="cuda"))]
        for folder, kw in targets:
            if folder.startswith("xla") and key == "every_attr":
                continue  # list[list[int]] is no XLA FFI attribute
            e = fg.emit(op, dtypes=dtypes, **kw)
            for name, text in e.files.items():
                out[f"{folder}/{key}/{name}" if name == e.main else f"{name}"] = text
    return out


def numba_sources() -> dict[str, str]:
    """relative path -> text, for the Numba CPU and numba-cuda sources of some signatures."""
    import fusegen as fg
    import fusegen.examples as ex
    from fusegen import lower_cpu, lower_cuda
    from fusegen.lower.cpu_kept import shared_counts
    from fusegen.plan import build_plan, schedule

    cases = [  # (name, op, dtypes, shapes, attrs, parallel, split)
        ("add_reduce_sum_row", ex.add_reduce_sum, ["float32"] * 2, [(3, 4)] * 2, dict(axis=1), False, False),
        ("add_reduce_sum_col", ex.add_reduce_sum, ["float32"] * 2, [(3, 4)] * 2, dict(axis=0), False, False),
        ("add_reduce_sum_split", ex.add_reduce_sum, ["float64"] * 2, [(4096, 8), (8,)], dict(axis=0), True, True),
        ("softmax_f32", ex.softmax, ["float32"], [(4, 5)], {}, False, False),
        ("layer_norm_f16", ex.layer_norm, ["float16"], [(2, 3, 7)], dict(axis=1), True, False),
        ("add_mul_div_mixed", ex.add_mul_div, ["int32", "float16"], [(5, 1), (1, 6)], {}, False, False),
        ("rms_norm_grad", fg.grad(ex.rms_norm), ["float32"] * 3, [(4, 6), (6,), (4, 6)], {}, False, False),
        ("smooth_l1_i8", ex.smooth_l1, ["int8", "float32"], [(3, 4)] * 2, dict(sigma=0.5), False, False),
    ]
    out = {}
    for name, op, dtypes, shapes, attrs, parallel, split in cases:
        plan = build_plan(op)
        spec = fg.infer(op, dtypes, shapes, op.bind_attrs(attrs))
        runs = list(schedule(plan, spec))
        # the workspaces no other group names, as the executor passes them (lower/cpu_kept)
        single = frozenset(k for k, n in shared_counts(runs).items() if n == 1)
        for g, run in enumerate(runs):
            gk = lower_cpu.compile_group(plan, spec, run, parallel, split, single=single)
            out[f"numba-cpu/{name}.group{g}.py"] = gk.source
        # (numba-cuda plans without stored shared values: fusegen.plan.shared)
        cuda_plan = build_plan(op, share=False)
        for g, run in enumerate(schedule(cuda_plan, spec)):
            for threads, forced in ((256, None), (16, 4 if split else None)):
                launch = lower_cuda.choose_launch(cuda_plan, run, threads, forced, threads > 16, spec)
                src, _ = lower_cuda.group_source(cuda_plan, spec, run, launch)
                out[f"numba-cuda/{name}.group{g}.t{threads}.py"] = src
    return {k: _normalize(v) for k, v in out.items()}


def _normalize(src: str) -> str:
    src = re.sub(r"^# numba \S+,", "# numba <version>,", src, count=1, flags=re.M)
    return re.sub(r"^# fusegen\.(vmath|pyhelpers_numba) [0-9a-f]+ ", r"# fusegen.\1 <digest> ", src, flags=re.M)


def all_files() -> dict[str, str]:
    return {**emitted_files(), **numba_sources()}


def test_emitted_text_is_unchanged():
    files = all_files()
    on_disk = {p.relative_to(GOLDEN).as_posix() for p in GOLDEN.rglob("*") if p.is_file()}
    assert on_disk == set(files), (f"golden files missing: {sorted(set(files) - on_disk)}; "
                                   f"stale: {sorted(on_disk - set(files))} (python tests/test_golden.py)")
    changed = [name for name, text in sorted(files.items()) if (GOLDEN / name).read_text() != text]
    assert not changed, f"emitted text differs from tests/golden/ in {changed} (python tests/test_golden.py)"
    for prefix in ("mindspore-cpu/", "mindspore-cuda/", "xla-cpu/", "xla-cuda/", "numba-cpu/", "numba-cuda/"):
        assert sum(f.startswith(prefix) for f in files) >= 8, prefix


def main() -> None:
    import shutil
    files = all_files()
    shutil.rmtree(GOLDEN, ignore_errors=True)
    for name, text in files.items():
        p = GOLDEN / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    print(f"wrote {len(files)} files under {GOLDEN}", file=sys.stderr)


if __name__ == "__main__":
    main()
