#!/usr/bin/env bash
# The GPU check of issue #4, in one command, on a machine with an NVIDIA GPU:
#
#     bash tools/gpu_check.sh            # from the repository root; results in $OUT (default gpu-results/)
#
# 1. `fusegen bench --device cuda --ops add_reduce_sum` (the issue's targets: 4096x4096 float32, both
#    axes, every fusegen CUDA backend at >= 80% of the copy-kernel bandwidth and faster than eager
#    torch and CuPy);
# 2. the CUDA test suite on the GPU (FUSEGEN_CUDA_TESTS=1 pytest tests/cuda) and the CUDA codegen tests;
# 3. `fusegen bench --device cuda` over every reference op.
#
# Nothing is installed: fusegen runs from this checkout through PYTHONPATH (it needs numpy, numba,
# numba-cuda and jinja2; torch, CuPy, JAX and matplotlib are used where present). Each step has a
# time limit (seconds: GPU_CHECK_BENCH1_S, GPU_CHECK_TESTS_S, GPU_CHECK_BENCH_S; 150 + 240 + 180 by
# default, under 10 minutes in all) and writes its log even when it fails or times out. Every file
# goes under $OUT: env.txt (the machine), *.log, *.json, *.md (and *.png with matplotlib), summary.txt.
# The exit status is 0 only when every step passed.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-gpu-results}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false   # JAX would otherwise take 75% of the GPU's memory
PY="${PYTHON:-python3}"

# nvcc for the aot-cuda backend: on PATH, in a CUDA install, or in a pip wheel (nvidia-cuda-nvcc)
if ! command -v nvcc >/dev/null 2>&1 && [ -z "${FUSEGEN_NVCC:-}" ]; then
    found=$("$PY" - <<'PYEOF' 2>/dev/null
import glob, os, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
cands = glob.glob("/usr/local/cuda*/bin/nvcc") + [p for d in dirs for p in glob.glob(f"{d}/nvidia/**/bin/nvcc", recursive=True)]
print(next((p for p in cands if os.access(p, os.X_OK)), ""))
PYEOF
)
    if [ -n "$found" ]; then export FUSEGEN_NVCC="$found" PATH="$(dirname "$found"):$PATH"; fi
fi

{
    echo "== $(date -u +%FT%TZ) $(hostname)"
    nvidia-smi 2>&1 || echo "nvidia-smi: not available"
    echo "== python: $("$PY" -V 2>&1)"
    "$PY" -m pip list 2>/dev/null | grep -i -E '^(numpy|numba|numba-cuda|cuda-|nvidia-|torch|cupy|jax|jaxlib|jinja2|pytest|hypothesis|matplotlib)' \
        || echo "pip list: not available"
    echo "== nvcc: ${FUSEGEN_NVCC:-$(command -v nvcc || echo none)}"
    "${FUSEGEN_NVCC:-nvcc}" --version 2>&1 | tail -2
    echo "== g++: $(g++ --version 2>&1 | head -1)"
    "$PY" -c 'import fusegen, numba; from numba import cuda; print("fusegen", fusegen.__file__); print("numba", numba.__version__, "cuda.is_available():", cuda.is_available()); cuda.detect()' 2>&1
} > "$OUT/env.txt" 2>&1

status=0
declare -a lines
step() {  # step NAME LIMIT_S COMMAND...: run with a time limit, log to $OUT/NAME.log, remember the outcome
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS
    timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || status=1
    local what="exit $rc"; [ $rc -eq 124 ] && what="timed out after ${limit}s"
    lines+=("$name: $what in $((SECONDS - t0))s")
    echo "${lines[-1]}"
}

png_for() {  # --png PATH where matplotlib is installed (fusegen refuses an explicit --png without it)
    if "$PY" -c 'import matplotlib' >/dev/null 2>&1; then echo "--png $1"; else echo "--png="; fi
}

# 1. the issue's op first, so its numbers exist whatever happens later
step bench-add_reduce_sum "${GPU_CHECK_BENCH1_S:-150}" "$PY" -m fusegen.cli bench --device cuda --ops add_reduce_sum \
    --progress plain --json "$OUT/bench-cuda-add_reduce_sum.json" --markdown "$OUT/bench-cuda-add_reduce_sum.md" \
    $(png_for "$OUT/bench-cuda-add_reduce_sum.png")

# 2. the CUDA tests on the GPU (xdist where installed; modules whose optional imports are missing are reported, not fatal)
if "$PY" -c 'import xdist' >/dev/null 2>&1; then par=(-n 8); else par=(-o "addopts=-q"); fi
export FUSEGEN_CUDA_TESTS=1
step tests "${GPU_CHECK_TESTS_S:-240}" "$PY" -m pytest tests/cuda tests/test_cuda_codegen.py \
    "${par[@]}" -q -rs -p no:cacheprovider --continue-on-collection-errors --junitxml="$OUT/tests.xml"

unset FUSEGEN_CUDA_TESTS

# 3. every reference op
step bench-all "${GPU_CHECK_BENCH_S:-180}" "$PY" -m fusegen.cli bench --device cuda --progress plain \
    --json "$OUT/bench-cuda.json" --markdown "$OUT/bench-cuda.md" $(png_for "$OUT/bench-cuda.png")

{
    printf '%s\n' "${lines[@]}"
    echo "== tests"; tail -3 "$OUT/tests.log"
    for log in bench-add_reduce_sum bench-all; do
        echo "== $log"; grep -E '^(targets|  missed|warning|skipped)|FAIL' "$OUT/$log.log"
    done
} > "$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt"
exit $status
