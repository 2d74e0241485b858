// Elementwise kernels: binary ops with ggml's repeat-broadcasting, unary math (UNARY sub-ops, SQR, SQRT, LOG,
// SIN, COS, SCALE, CLAMP, LEAKY_RELU), GLU and DIAG_MASK_*.
//
// Launch geometry (all kernels here): blockIdx.y walks rows (ne[1]*ne[2]*ne[3], grid-stride), blockIdx.x and
// threadIdx.x walk ne[0] (grid-stride), so the row index is split once per row, not once per element.
#include "common.cuh"

// binary op codes (ggml op ids)
#define B_ADD 2
#define B_ADD1 4
#define B_SUB 6
#define B_MUL 7
#define B_DIV 8

// unary op codes: 0..21 are ggml's UNARY sub-ops; the others are ggml ops with their own id + 1000
#define U_ABS 0
#define U_SGN 1
#define U_NEG 2
#define U_STEP 3
#define U_TANH 4
#define U_ELU 5
#define U_RELU 6
#define U_SIGMOID 7
#define U_GELU 8
#define U_GELU_QUICK 9
#define U_SILU 10
#define U_HARDSWISH 11
#define U_HARDSIGMOID 12
#define U_EXP 13
#define U_EXPM1 14
#define U_SOFTPLUS 15
#define U_GELU_ERF 16
#define U_XIELU 17
#define U_FLOOR 18
#define U_CEIL 19
#define U_ROUND 20
#define U_TRUNC 21
#define U_SQR 1009
#define U_SQRT 1010
#define U_LOG 1011
#define U_SIN 1012
#define U_COS 1013
#define U_SCALE 1032
#define U_CLAMP 1050
#define U_LEAKY_RELU 1071

// GLU op codes (ggml_glu_op)
#define G_REGLU 0
#define G_GEGLU 1
#define G_SWIGLU 2
#define G_SWIGLU_OAI 3
#define G_GEGLU_ERF 4
#define G_GEGLU_QUICK 5

// ggml_gelu_f32 as compiled: float steps, 1 + (0.044715*x)*x fused into one multiply-add
__device__ __forceinline__ float gelu_tanh_f32(float x) {
    const float c = 0.79788456080286535588f, a = 0.044715f;
    const float inner = fma_rn(fmul_rn(a, x), x, 1.0f);
    const float t = tanhf(fmul_rn(fmul_rn(c, x), inner));
    return fmul_rn(fmul_rn(0.5f, x), fadd_rn(1.0f, t));
}

// ggml's CPU GELU: an f16 table of gelu at f16(x); on f32 input x <= -10 gives 0 and x >= 10 gives x
__device__ __forceinline__ float gelu_ggml(float x, int f16_input) {
    if (!f16_input) {
        if (x <= -10.0f) return 0.0f;
        if (x >= 10.0f) return x;
    }
    return round_to_f16(gelu_tanh_f32(round_to_f16(x)));
}

// ggml's CPU GELU_QUICK: the f16 table for every x
__device__ __forceinline__ float gelu_quick_ggml(float x) {
    const float h = round_to_f16(x);
    return round_to_f16(fmul_rn(h, fdiv_rn(1.0f, fadd_rn(1.0f, expf(fmul_rn(-1.702f, h))))));
}

__device__ __forceinline__ float gelu_erf_f32(float x) {
    return fmul_rn(fmul_rn(0.5f, x), fadd_rn(1.0f, erff(fmul_rn(x, 0.70710678118654752440f))));
}

__device__ __forceinline__ float silu_f32(float x) { return fdiv_rn(x, fadd_rn(1.0f, expf(-x))); }

__device__ __forceinline__ float hardsigmoid_f32(float x) {
    return fminf(1.0f, fmaxf(0.0f, fdiv_rn(fadd_rn(x, 3.0f), 6.0f)));
}

// C's round(): half away from zero
__device__ __forceinline__ float round_half_away(float x) {
    const float t = truncf(x);
    return fabsf(x - t) >= 0.5f ? t + copysignf(1.0f, x) : t;
}

// p0..p3: SCALE (s, b), CLAMP (min, max), LEAKY_RELU (slope), XIELU (alpha_n, alpha_p, beta, eps);
// comparisons follow C's ternaries (NaN maps to 0 in RELU/STEP/SGN/LEAKY_RELU, to max in CLAMP)
__device__ __forceinline__ float unary_op(int op, float x, float p0, float p1, float p2, float p3, int f16_input) {
    switch (op) {
        case U_ABS: return fabsf(x);
        case U_SGN: return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);
        case U_NEG: return -x;
        case U_STEP: return x > 0.0f ? 1.0f : 0.0f;
        case U_TANH: return tanhf(x);
        case U_ELU: return x > 0.0f ? x : expm1f(x);
        case U_RELU: return x > 0.0f ? x : 0.0f;
        case U_SIGMOID: return fdiv_rn(1.0f, fadd_rn(1.0f, expf(-x)));
        case U_GELU: return gelu_ggml(x, f16_input);
        case U_GELU_QUICK: return gelu_quick_ggml(x);
        case U_GELU_ERF: return gelu_erf_f32(x);
        case U_SILU: return silu_f32(x);
        case U_HARDSWISH: return fmul_rn(x, hardsigmoid_f32(x));
        case U_HARDSIGMOID: return hardsigmoid_f32(x);
        case U_EXP: return expf(x);
        case U_EXPM1: return fsub_rn(expf(x), 1.0f);
        case U_SOFTPLUS: return x > 20.0f ? x : logf(fadd_rn(1.0f, expf(x)));
        case U_XIELU: {
            const float beta_x = fmul_rn(p2, x);
            if (x > 0.0f) return fadd_rn(fmul_rn(fmul_rn(p1, x), x), beta_x);
            return fadd_rn(fmul_rn(fsub_rn(expm1f(fminf(x, p3)), x), p0), beta_x);
        }
        case U_FLOOR: return floorf(x);
        case U_CEIL: return ceilf(x);
        case U_ROUND: return round_half_away(x);
        case U_TRUNC: return truncf(x);
        case U_SQR: return fmul_rn(x, x);
        case U_SQRT: return sqrtf(x);
        case U_LOG: return logf(x);
        case U_SIN: return sinf(x);
        case U_COS: return cosf(x);
        case U_SCALE: return p1 == 0.0f ? fmul_rn(x, p0) : fma_rn(x, p0, p1);
        case U_CLAMP: {
            const float t = x < p1 ? x : p1;
            return t > p0 ? t : p0;
        }
        case U_LEAKY_RELU: return fadd_rn(x > 0.0f ? x : 0.0f, fmul_rn(p0, x < 0.0f ? x : 0.0f));
        default: return x;
    }
}

__device__ __forceinline__ float binary_op(int op, float a, float b) {
    switch (op) {
        case B_ADD: case B_ADD1: return fadd_rn(a, b);
        case B_SUB: return fsub_rn(a, b);
        case B_MUL: return fmul_rn(a, b);
        case B_DIV: return fdiv_rn(a, b);
        default: return a;
    }
}

// d = op(a, b repeated over a); a, b, d any of f32/f16/bf16
extern "C" __global__ void k_binary(const char* a, const char* b, char* d, TDesc da, TDesc db, TDesc dd, int ta, int tb,
                                    int td, int op) {
    const long long nrows = nrows_of(dd);
    for (long long row = blockIdx.y; row < nrows; row += gridDim.y) {
        long long i1, i2, i3;
        split_row(dd, row, i1, i2, i3);
        const char* arow = a + i1 * da.nb[1] + i2 * da.nb[2] + i3 * da.nb[3];
        const char* brow = b + (i1 % db.ne[1]) * db.nb[1] + (i2 % db.ne[2]) * db.nb[2] + (i3 % db.ne[3]) * db.nb[3];
        char* drow = d + i1 * dd.nb[1] + i2 * dd.nb[2] + i3 * dd.nb[3];
        const bool same0 = db.ne[0] == dd.ne[0];
        for (long long i0 = blockIdx.x * (long long)blockDim.x + threadIdx.x; i0 < dd.ne[0];
             i0 += (long long)gridDim.x * blockDim.x) {
            const long long j0 = same0 ? i0 : i0 % db.ne[0];
            const float x = load_elem(arow + i0 * da.nb[0], ta);
            const float y = load_elem(brow + j0 * db.nb[0], tb);
            store_elem(drow + i0 * dd.nb[0], td, binary_op(op, x, y));
        }
    }
}

// d = f(a) elementwise with up to two float parameters; a, d f32/f16/bf16 (any strides, same shape)
extern "C" __global__ void k_unary(const char* a, char* d, TDesc da, TDesc dd, int ta, int td, int op, float p0,
                                   float p1, float p2, float p3) {
    const long long nrows = nrows_of(dd);
    for (long long row = blockIdx.y; row < nrows; row += gridDim.y) {
        long long i1, i2, i3;
        split_row(dd, row, i1, i2, i3);
        const char* arow = a + i1 * da.nb[1] + i2 * da.nb[2] + i3 * da.nb[3];
        char* drow = d + i1 * dd.nb[1] + i2 * dd.nb[2] + i3 * dd.nb[3];
        for (long long i0 = blockIdx.x * (long long)blockDim.x + threadIdx.x; i0 < dd.ne[0];
             i0 += (long long)gridDim.x * blockDim.x) {
            store_elem(drow + i0 * dd.nb[0], td, unary_op(op, load_elem(arow + i0 * da.nb[0], ta), p0, p1, p2, p3, ta == GT_F16));
        }
    }
}

__device__ __forceinline__ float glu_act(int op, float x, int f16_input) {
    switch (op) {
        case G_REGLU: return x > 0.0f ? x : 0.0f;
        case G_GEGLU: return gelu_ggml(x, f16_input);
        case G_SWIGLU: return silu_f32(x);
        case G_GEGLU_ERF: return gelu_erf_f32(x);
        case G_GEGLU_QUICK: return gelu_quick_ggml(x);
        default: return x;
    }
}

// d = act(x) * g; for the fused form x and g are the two halves of one tensor (the host passes both pointers).
// SWIGLU_OAI (alpha, limit): x = min(x, limit), g = clamp(g, -limit, limit), d = x / (1 + exp(-alpha x)) * (g + 1)
extern "C" __global__ void k_glu(const char* x, const char* g, char* d, TDesc dx, TDesc dg, TDesc dd, int type, int op,
                                 float alpha, float limit) {
    const long long nrows = nrows_of(dd);
    for (long long row = blockIdx.y; row < nrows; row += gridDim.y) {
        long long i1, i2, i3;
        split_row(dd, row, i1, i2, i3);
        const char* xrow = x + i1 * dx.nb[1] + i2 * dx.nb[2] + i3 * dx.nb[3];
        const char* grow = g + i1 * dg.nb[1] + i2 * dg.nb[2] + i3 * dg.nb[3];
        char* drow = d + i1 * dd.nb[1] + i2 * dd.nb[2] + i3 * dd.nb[3];
        for (long long i0 = blockIdx.x * (long long)blockDim.x + threadIdx.x; i0 < dd.ne[0];
             i0 += (long long)gridDim.x * blockDim.x) {
            const float xv = load_elem(xrow + i0 * dx.nb[0], type);
            const float gv = load_elem(grow + i0 * dg.nb[0], type);
            float out;
            if (op == G_SWIGLU_OAI) {
                const float xc = fminf(xv, limit), gc = fminf(fmaxf(gv, -limit), limit);
                const float e = expf(fmul_rn(alpha, -xc));
                out = fmul_rn(fdiv_rn(xc, fadd_rn(1.0f, e)), fadd_rn(gc, 1.0f));
            } else {
                out = fmul_rn(glu_act(op, xv, type == GT_F16), gv);
            }
            store_elem(drow + i0 * dd.nb[0], type, out);
        }
    }
}

// DIAG_MASK_INF / DIAG_MASK_ZERO: element (i0, i1) with i0 > n_past + i1 becomes `value`, others are copied
extern "C" __global__ void k_diag_mask(const char* a, char* d, TDesc da, TDesc dd, int type, int n_past, float value) {
    const long long nrows = nrows_of(dd);
    for (long long row = blockIdx.y; row < nrows; row += gridDim.y) {
        long long i1, i2, i3;
        split_row(dd, row, i1, i2, i3);
        const char* arow = a + i1 * da.nb[1] + i2 * da.nb[2] + i3 * da.nb[3];
        char* drow = d + i1 * dd.nb[1] + i2 * dd.nb[2] + i3 * dd.nb[3];
        for (long long i0 = blockIdx.x * (long long)blockDim.x + threadIdx.x; i0 < dd.ne[0];
             i0 += (long long)gridDim.x * blockDim.x) {
            const float v = i0 > n_past + i1 ? value : load_elem(arow + i0 * da.nb[0], type);
            store_elem(drow + i0 * dd.nb[0], type, v);
        }
    }
}
