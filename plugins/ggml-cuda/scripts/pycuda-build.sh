# Shell functions that build pycuda from its sdist, sourced by prepare-wheels.sh (here, against a stub driver) and
# device-check.sh (on the GPU machine, against the real one).

# the CUDA toolkit root: the first of $CUDA_HOME, nvcc's own folder (nvcc may be a wrapper script), /usr/local/cuda
# that holds include/cuda.h
cuda_toolkit_root() {
    local c
    for c in "${CUDA_HOME:-}" "$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")" \
        "$(nvcc -v --version 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)" /usr/local/cuda; do
        [ -n "$c" ] && [ -f "$c/include/cuda.h" ] && { echo "$c"; return 0; }
    done
    return 1
}

# pycuda_siteconf SRC CUDA_ROOT LIBDIR: pycuda's build configuration in SRC/siteconf.py: the toolkit at CUDA_ROOT,
# the driver library (libcuda.so) in LIBDIR, no OpenGL and no curand (the plugin needs neither)
pycuda_siteconf() {
    cat >"$1/siteconf.py" <<EOF
BOOST_INC_DIR = []
BOOST_LIB_DIR = []
BOOST_COMPILER = "gcc"
USE_SHIPPED_BOOST = True
BOOST_PYTHON_LIBNAME = []
BOOST_THREAD_LIBNAME = []
CUDA_TRACE = False
CUDA_ROOT = "$2"
CUDA_ENABLE_GL = False
CUDA_ENABLE_CURAND = False
CUDADRV_LIB_DIR = ["$3"]
CUDADRV_LIBNAME = ["cuda"]
CUDART_LIB_DIR = []
CUDART_LIBNAME = []
CXXFLAGS = []
LDFLAGS = []
EOF
}
