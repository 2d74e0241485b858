#!/usr/bin/env bash
# Set up ggml-core in a virtual environment: core and every plugin, built as wheels and installed from them.
#
#   scripts/setup.sh            core + plugins (+ PoCL, the OpenCL platform for the CPU, when run as root)
#   scripts/setup.sh --test     the same, plus the test tools and the optional ggml reference library
#
# Environment: VENV (default .venv), PYTHON (default python3), GGML_NO_APT=1 to skip apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
TEST=0
[ "${1:-}" = "--test" ] && TEST=1

say() { printf '[setup] %s\n' "$*" >&2; }

# Quiet unless something is wrong: the tools' output goes to a log, shown (its end) only when a step fails.
LOG=${GGML_SETUP_LOG:-${TMPDIR:-/tmp}/ggml-core-setup.log}
: >"$LOG"
quiet() {
    printf '\n$ %s\n' "$*" >>"$LOG"
    if ! "$@" >>"$LOG" 2>&1; then
        say "failed: $* (full log: $LOG); its last lines:"
        tail -n 30 "$LOG" >&2
        exit 1
    fi
}

# 1. PoCL: OpenCL on the CPU, so the OpenCL plugin has a device everywhere (Debian/Ubuntu, as root).
if [ -z "${GGML_NO_APT:-}" ] && ! ls /etc/OpenCL/vendors/*.icd >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing PoCL (OpenCL for the CPU) with apt-get"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            pocl-opencl-icd clinfo; } >>"$LOG" 2>&1 || say "PoCL install failed (see $LOG); OpenCL tests will skip"
    else
        say "no OpenCL platform and not root: OpenCL devices will be absent (install pocl-opencl-icd to get one)"
    fi
fi

# 1b. Mesa's Vulkan drivers (lavapipe: Vulkan on the CPU), so the WebGPU plugin has an adapter everywhere.
if [ -z "${GGML_NO_APT:-}" ] && ! ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing mesa-vulkan-drivers (lavapipe, Vulkan for the CPU) with apt-get"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            mesa-vulkan-drivers libvulkan1; } >>"$LOG" 2>&1 \
            || say "Vulkan driver install failed (see $LOG); WebGPU tests will skip"
    else
        say "no Vulkan driver and not root: WebGPU devices will be absent (install mesa-vulkan-drivers to get one)"
    fi
fi

# 2. The virtual environment.
if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV"
    quiet "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
quiet "${PIP[@]}" install --upgrade pip wheel "setuptools>=77"

# 3. Build every package as a wheel, then install from the wheels (what users get from an index).
DIST=${DIST:-build/dist}
rm -rf "$DIST"
mkdir -p "$DIST"
PACKAGES=(.)
for p in plugins/*/; do
    [ -f "$p/pyproject.toml" ] && PACKAGES+=("${p%/}")
done
say "building wheels: ${PACKAGES[*]}"
quiet "${PIP[@]}" wheel --no-deps --no-build-isolation -w "$DIST" "${PACKAGES[@]}"
# setuptools leaves build/ and *.egg-info beside each source tree: remove them, they shadow nothing but confuse readers
for p in "${PACKAGES[@]}"; do
    rm -rf "$p/build/lib" "$p/build/bdist."* "$p"/*.egg-info
done

WHEELS=()
REQS=()
CUDA_WHEEL=""
for w in "$DIST"/*.whl; do
    case "$(basename "$w")" in
        ggml_cuda-*) CUDA_WHEEL=$w ;;
        *) WHEELS+=("$w"); REQS+=("$w") ;;
    esac
done
say "installing ${#WHEELS[@]} wheels with their dependencies (numpy, pluggy, gguf, numba, pyopencl, ...)"
quiet "${PIP[@]}" install "${REQS[@]}"
quiet "${PIP[@]}" install --force-reinstall --no-deps "${WHEELS[@]}"
if [ -n "$CUDA_WHEEL" ]; then
    # pycuda builds only where the NVIDIA driver is present; elsewhere the plugin reports "no devices" with the reason
    if command -v nvidia-smi >/dev/null && nvidia-smi >/dev/null 2>&1; then
        "${PIP[@]}" install "$CUDA_WHEEL" >>"$LOG" 2>&1 \
            || say "pycuda did not build (see $LOG); the CUDA plugin will report why it has no devices"
    fi
    quiet "${PIP[@]}" install --force-reinstall --no-deps "$CUDA_WHEEL"
fi

# 4. Test tools, and ggml itself (C, through ggml-python) as an optional independent reference.
if [ "$TEST" = 1 ]; then
    say "installing test tools"
    quiet "${PIP[@]}" install pytest hypothesis ruff mypy
    if ! "$VENV/bin/python" -c "import ggml" 2>/dev/null; then
        say "building the ggml reference library (ggml-python, about 30 s; optional)"
        "${PIP[@]}" install "ggml-python==0.0.45" >>"$LOG" 2>&1 \
            || say "ggml-python did not build (see $LOG); the tests that use it will skip"
    fi
fi
say "done: $("$VENV/bin/ggml-core" --version)"
