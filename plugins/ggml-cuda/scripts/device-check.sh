#!/usr/bin/env bash
# The GPU check of ggml-cuda in one command, under 8 minutes; fails loudly, never hangs (every step has a limit).
#
# Run from the repository root on a machine with an NVIDIA GPU, its driver, CUDA's nvcc, Python 3.12 and CuPy, with
# the wheels that scripts/prepare-wheels.sh puts in .whl/cuda (see docs/cuda.md) carried along. With the device tool:
#
#     run(command="bash plugins/ggml-cuda/scripts/device-check.sh", carry=[".whl/cuda"], timeout_s=540)
#
# Steps: environment → install the carried wheels and this tree into a /tmp target (pycuda from its prebuilt wheel,
# or built from the carried sdist) → compile every kernel for the device's architecture (in parallel) →
# `ggml-core devices --check` → pytest plugins/ggml-cuda/tests (GPU tests and the conformance suite against the CPU plugin
# included) → benchmarks/bench_cuda.py → $OUT/summary.txt (written last, also printed).
#
# Environment: OUT (results folder; default ./out/device-check), PYTHON (default python3), GGML_CUDA_WHEELS
# (default .whl/cuda), GGML_CUDA_CHECK_BUDGET (seconds for everything, default 470).
set -uo pipefail

OUT="${OUT:-$PWD/out/device-check}"
PY="${PYTHON:-python3}"
WHEELS="${GGML_CUDA_WHEELS:-.whl/cuda}"
SITE="${GGML_CUDA_SITE:-/tmp/ggml-cuda-site}"
BUDGET="${GGML_CUDA_CHECK_BUDGET:-470}"
T0=$(date +%s)
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=pycuda-build.sh
. "$HERE/pycuda-build.sh"

mkdir -p "$OUT"
LOG="$OUT/device-check.log"
STEPS="$OUT/steps.tsv"
: >"$LOG"
printf "step\tresult\tseconds\n" >"$STEPS"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export GGML_CUDA_CACHE_DIR="${GGML_CUDA_CACHE_DIR:-/tmp/ggml-cuda-kernel-cache}"
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
export OUT PY WHEELS SITE LOG

elapsed() { echo $(($(date +%s) - T0)); }
left() { echo $((BUDGET - $(elapsed))); }
say() { echo "[device-check +$(elapsed)s] $*" | tee -a "$LOG"; }

# step NAME MAX_SECONDS FUNCTION: run a function of this script in a child bash with a hard limit (never more
# than the budget left), its output in the log; records the result
step() {
    local name=$1 max=$2
    shift 2
    local rem
    rem=$(left)
    if ((rem < 15)); then
        printf "%s\tSKIPPED (out of time)\t0\n" "$name" >>"$STEPS"
        say "skip $name: the ${BUDGET}s budget is spent"
        return 99
    fi
    ((max > rem)) && max=$rem
    say "== $name (limit ${max}s)"
    local s rc res
    s=$(date +%s)
    timeout --kill-after=10 "$max" bash -c "$1" >>"$LOG" 2>&1
    rc=$?
    if ((rc == 124 || rc == 137)); then
        res="TIMEOUT after ${max}s"
    elif ((rc != 0)); then
        res="FAILED (exit $rc)"
    else
        res="OK"
    fi
    printf "%s\t%s\t%s\n" "$name" "$res" "$(($(date +%s) - s))" >>"$STEPS"
    say "   $name: $res"
    return $rc
}

environment() {
    echo "date: $(date -u +%FT%TZ)"
    nvidia-smi -L || true
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv || true
    command -v nvcc && nvcc --version | tail -2
    "$PY" --version
    "$PY" -c "import numpy, sys; print('numpy', numpy.__version__); print(sys.executable)"
    "$PY" -c "import cupy; print('cupy', cupy.__version__)" || echo "cupy: missing (no cuBLAS baseline)"
    ls -la "$WHEELS" "$WHEELS/sdist" || true
}

install_tree() {
    rm -rf "$SITE" && mkdir -p "$SITE" || return 1
    local deps=()
    for name in pytools platformdirs mako siphash24 gguf; do
        for f in "$WHEELS"/"$name"-*.whl; do [ -e "$f" ] && deps+=("$f"); done
    done
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "${deps[@]}" || return 1
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --no-build-isolation --target "$SITE" \
        . plugins/ggml-cpu plugins/ggml-cuda
}

pycuda_works() {
    "$PY" -c "import pycuda, pycuda.driver as c; c.init(); print('pycuda', pycuda.VERSION_TEXT, 'CUDA', c.get_version(), \
'driver', c.get_driver_version(), 'devices', c.Device.count(), c.Device(0).name())"
}

install_pycuda() {
    local whl
    whl=$(ls "$WHEELS"/pycuda-*-cp3*.whl 2>/dev/null | head -1)
    if [ -n "$whl" ]; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$whl" && pycuda_works &&
            echo "pycuda: the prebuilt wheel $whl works" && return 0
        echo "pycuda: the prebuilt wheel does not work here; building the sdist"
        rm -rf "$SITE"/pycuda "$SITE"/pycuda-*.dist-info
    fi
    build_pycuda_sdist && pycuda_works
}

build_pycuda_sdist() {
    local sdist src libdir real cuda_root
    sdist=$(ls "$WHEELS"/sdist/pycuda-*.tar.gz 2>/dev/null | head -1)
    [ -n "$sdist" ] || { echo "no pycuda sdist in $WHEELS/sdist"; return 1; }
    src=/tmp/pycuda-build && rm -rf "$src" && mkdir -p "$src" && tar xzf "$sdist" -C "$src" || return 1
    src=$(ls -d "$src"/pycuda-*/ | head -1)
    # link against the real driver (pycuda needs -lcuda; curand is not needed by the plugin)
    libdir=/tmp/pycuda-libcuda && mkdir -p "$libdir"
    real=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}')
    [ -n "$real" ] || real=$(ls /usr/local/nvidia/lib64/libcuda.so.1 /usr/lib/x86_64-linux-gnu/libcuda.so.1 2>/dev/null | head -1)
    [ -n "$real" ] || { echo "libcuda.so.1 not found"; return 1; }
    ln -sf "$real" "$libdir/libcuda.so"
    cuda_root=$(cuda_toolkit_root) || { echo "cuda.h not found (set CUDA_HOME)"; return 1; }
    pycuda_siteconf "$src" "$cuda_root" "$libdir"
    (cd "$src" && "$PY" -m pip wheel -q --no-deps --no-build-isolation --no-cache-dir -w /tmp/pycuda-wheel .) &&
        "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" /tmp/pycuda-wheel/pycuda-*.whl
}

devices() {
    "$PY" -m ggml_core.cli plugins
    "$PY" -m ggml_core.cli devices --check
}

precompile() {
    local arch
    arch=$("$PY" -c "import ggml_core as g; print(g.get_device('CUDA0').arch)") || return 1
    echo "kernel architecture: $arch" >>"$OUT/env.txt"
    "$PY" -m ggml_cuda._compile --arch "$arch" --jobs "$(nproc)"
}

run_tests() {
    local extra=()
    "$PY" -c "import pytest_timeout" 2>/dev/null && extra+=(--timeout=120)
    "$PY" -c "import xdist" 2>/dev/null && extra+=(-n 4)
    "$PY" -m pytest plugins/ggml-cuda/tests -q -rfE -p no:cacheprovider --junitxml="$OUT/pytest.xml" \
        -o junit_family=xunit2 "${extra[@]}"
}

run_bench() {
    "$PY" benchmarks/bench_cuda.py --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.txt"
}

# ---------------------------------------------------------------------------------------------------------- main
export -f cuda_toolkit_root pycuda_siteconf environment install_tree pycuda_works install_pycuda build_pycuda_sdist devices precompile run_tests run_bench
say "ggml-cuda device check: budget ${BUDGET}s, results in $OUT"
step "environment" 30 'environment | tee "$OUT/env.txt"'
ok=1
step "install this tree and the wheels" 120 install_tree || ok=0
if ((ok)) && step "pycuda (prebuilt wheel, else the sdist)" 240 install_pycuda; then
    step "compile every kernel for the device" 120 precompile
    step "ggml-core plugins / devices --check" 60 devices
    # keep ~150 s for the benchmarks
    tests_max=$(($(left) - 150))
    ((tests_max < 60)) && tests_max=60
    step "pytest plugins/ggml-cuda/tests (GPU + conformance)" "$tests_max" run_tests
    step "benchmarks/bench_cuda.py" 170 run_bench
else
    say "pycuda or the install is not usable: nothing can run on the GPU (see $LOG)"
fi
"$PY" "$HERE/device_check_summary.py" "$OUT" "$STEPS" >"$OUT/summary.txt" 2>>"$LOG" ||
    { echo "summary failed; steps:"; cat "$STEPS"; } >"$OUT/summary.txt"
cat "$OUT/summary.txt"
say "done in $(elapsed)s"
awk -F'\t' 'NR > 1 && $2 != "OK" { bad = 1 } END { exit bad }' "$STEPS"
