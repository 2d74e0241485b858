#!/usr/bin/env bash
# Prepare .whl/cuda/ for device-check.sh on a machine WITH network access but without a GPU (run from the repo root).
#
#   bash plugins/ggml-cuda/scripts/prepare-wheels.sh [PYTHON3.12]
#
# - downloads pycuda's sdist (.whl/cuda/sdist/) and the cp312 / pure-Python wheels the GPU image lacks
#   (pytools, platformdirs, mako, siphash24, gguf);
# - builds a cp312 pycuda wheel with the given Python 3.12 (default: ~/.pyenv/versions/3.12*/bin/python) against a
#   stub libcuda.so that exports pycuda's driver symbols (soname libcuda.so.1), without curand. The wheel needs the
#   real libcuda.so.1 at run time; device-check.sh falls back to building the sdist on the GPU machine if it does
#   not import there.
# The folder is ignored by git (.gitignore: /.whl/); carry it with the run: carry=[".whl/cuda"].
set -euo pipefail

DEST=.whl/cuda
PY312="${1:-$(ls -d ~/.pyenv/versions/3.12*/bin/python 2>/dev/null | tail -1)}"
[ -x "$PY312" ] || { echo "need a Python 3.12 interpreter (argument 1)"; exit 2; }
command -v nvcc >/dev/null || { echo "need nvcc (the CUDA toolkit's headers)"; exit 2; }
mkdir -p "$DEST/sdist"
grep -qs '^/.whl/' .gitignore .git/info/exclude || echo "/.whl/" >>.git/info/exclude

# shellcheck source=pycuda-build.sh
. "$(dirname "${BASH_SOURCE[0]}")/pycuda-build.sh"
CUDA_TOOLKIT=$(cuda_toolkit_root) || { echo "cuda.h not found (set CUDA_HOME)"; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY312" -m venv "$work/venv"
"$work/venv/bin/pip" install -q numpy setuptools wheel
"$work/venv/bin/pip" download -q --no-deps --no-binary :all: --no-build-isolation -d "$DEST/sdist" pycuda
"$work/venv/bin/pip" download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$DEST" pytools platformdirs mako siphash24 gguf
tar xzf "$DEST"/sdist/pycuda-*.tar.gz -C "$work"
src=$(ls -d "$work"/pycuda-*/ | head -1)
# a first build (with an empty stub) tells which cu* symbols pycuda's _driver needs
mkdir -p "$work/stub"
echo 'void ggml_cuda_stub(void) {}' >"$work/stub/stub.c"
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$work/stub/libcuda.so" "$work/stub/stub.c"
pycuda_siteconf "$src" "$CUDA_TOOLKIT" "$work/stub"
(cd "$src" && "$work/venv/bin/pip" wheel -q --no-deps --no-build-isolation -w "$work/first" .)
(cd "$work" && mkdir x && cd x && unzip -q "$work"/first/pycuda-*.whl)
nm -D --undefined-only "$work"/x/pycuda/_driver*.so | awk '{print $2}' | grep -E '^cu[A-Z]' | sort -u |
    awk '{print "void " $1 "(void) {}"}' >"$work/stub/stub.c"
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$work/stub/libcuda.so" "$work/stub/stub.c"
# the real build: libcuda.so.1 is now a needed library of _driver (the stub exports what it uses)
rm -rf "$src/build"
(cd "$src" && "$work/venv/bin/pip" wheel -q --no-deps --no-build-isolation -w "$work/final" .)
rm -f "$DEST"/pycuda-*.whl
cp "$work"/final/pycuda-*.whl "$DEST/"
(cd "$work" && rm -rf y && mkdir y && cd y && unzip -q "$work"/final/pycuda-*.whl &&
    readelf -d pycuda/_driver*.so | grep -q 'libcuda.so.1') || { echo "the wheel does not link libcuda.so.1"; exit 1; }
ls -la "$DEST" "$DEST/sdist"
