// ggml-opencl: elementwise kernels. One work-item per destination element over the NDRange
// (ne0, ne1, ne2 * ne3); every operand is addressed through its own strides, so views and
// ggml's repeat-broadcasting (index modulo the operand's extent) need no copies.

// codes of the map kernel: UNARY sub-ops keep ggml's numbering (enum ggml_unary_op), other ops from 100 on
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
#define M_SQR 100
#define M_SQRT 101
#define M_LOG 102
#define M_SIN 103
#define M_COS 104
#define M_SCALE 105
#define M_CLAMP 106
#define M_LEAKY_RELU 107

inline float gelu_tanh(float x) {
    const float c = 0.7978845608028654f, a = 0.044715f;
    return 0.5f * x * (1.0f + tanh(c * x * (1.0f + a * x * x)));
}

// ggml's CPU GELU: an f16 table of f16(gelu(f16 x)); exact outside (-10, 10)
inline float gelu_ggml(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    return round_f16(gelu_tanh(round_f16(x)));
}

// ggml's CPU GELU_QUICK: the f16 table for every x
inline float gelu_quick_ggml(float x) {
    const float h = round_f16(x);
    return round_f16(h * (1.0f / (1.0f + exp(-1.702f * h))));
}

inline float gelu_erf(float x) { return 0.5f * x * (1.0f + erf(x * 0.70710678118654752f)); }

inline float silu(float x) { return x / (1.0f + exp(-x)); }

inline float hardsigmoid(float x) { return fmin(1.0f, fmax(0.0f, (x + 3.0f) / 6.0f)); }

// p: the op's float parameters (SCALE: s, b; CLAMP: min, max; LEAKY_RELU: slope; XIELU: alpha_n, alpha_p, beta, eps)
inline float apply_map(int op, float x, float4 p) {
    const float p0 = p.s0, p1 = p.s1;
    switch (op) {
        case U_ABS: return fabs(x);
        case U_SGN: return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x);
        case U_NEG: return -x;
        case U_STEP: return x > 0.0f ? 1.0f : 0.0f;
        case U_TANH: return tanh(x);
        case U_ELU: return x > 0.0f ? x : expm1(x);
        case U_RELU: return x > 0.0f ? x : 0.0f;
        case U_SIGMOID: return 1.0f / (1.0f + exp(-x));
        case U_GELU: return gelu_ggml(x);
        case U_GELU_QUICK: return gelu_quick_ggml(x);
        case U_SILU: return silu(x);
        case U_HARDSWISH: return x * hardsigmoid(x);
        case U_HARDSIGMOID: return hardsigmoid(x);
        case U_EXP: return exp(x);
        case U_EXPM1: return expm1(x);
        case U_SOFTPLUS: return x > 20.0f ? x : log(1.0f + exp(x));
        case U_GELU_ERF: return gelu_erf(x);
        case U_XIELU: return x > 0.0f ? p.s1 * x * x + p.s2 * x : (expm1(fmin(x, p.s3)) - x) * p.s0 + p.s2 * x;
        case U_FLOOR: return floor(x);
        case U_CEIL: return ceil(x);
        case U_ROUND: return round(x);
        case U_TRUNC: return trunc(x);
        case M_SQR: return x * x;
        case M_SQRT: return sqrt(x);
        case M_LOG: return log(x);
        case M_SIN: return sin(x);
        case M_COS: return cos(x);
        case M_SCALE: return p1 == 0.0f ? x * p0 : x * p0 + p1;
        case M_CLAMP: return x < p0 ? p0 : (x > p1 ? p1 : x);
        case M_LEAKY_RELU: return x > 0.0f ? x : p0 * x;
        default: return x;
    }
}

// dst = f(src), same shape, any strides, f32/f16/bf16 in and out
kernel void k_map(int op, float4 p, TENSOR(a), int a_t, TENSOR(d), int d_t, long n) {
    ITEM4(d_ne, n)
    const float x = load_f(AT(a, i0, i1, i2, i3), a_t);
    store_f(AT(d, i0, i1, i2, i3), d_t, apply_map(op, x, p));
}

// contiguous f32 map, 4 values per work-item (n4 = n / 4; the tail goes through k_map)
kernel void k_map_f32x4(int op, float4 p, global const uchar* a_p, ulong a_o, global uchar* d_p, ulong d_o, long n4) {
    const long i = get_global_id(0);
    if (i >= n4) return;
    global const float* a = (global const float*)(a_p + a_o);
    global float* d = (global float*)(d_p + d_o);
    float4 x = vload4(i, a);
    float4 y = (float4)(apply_map(op, x.s0, p), apply_map(op, x.s1, p), apply_map(op, x.s2, p), apply_map(op, x.s3, p));
    vstore4(y, i, d);
}

#define B_ADD 0
#define B_SUB 1
#define B_MUL 2
#define B_DIV 3

inline float apply_binary(int op, float x, float y) {
    switch (op) {
        case B_ADD: return x + y;
        case B_SUB: return x - y;
        case B_MUL: return x * y;
        default: return x / y;
    }
}

// dst = a (op) repeat(b): b's index is the destination index modulo b's extent in every dimension
kernel void k_binary(int op, TENSOR(a), int a_t, TENSOR(b), int b_t, TENSOR(d), int d_t, long n) {
    ITEM4(d_ne, n)
    const float x = load_f(AT(a, i0, i1, i2, i3), a_t);
    const float y = load_f(AT(b, i0 % b_ne.s0, i1 % b_ne.s1, i2 % b_ne.s2, i3 % b_ne.s3), b_t);
    store_f(AT(d, i0, i1, i2, i3), d_t, apply_binary(op, x, y));
}

// all three contiguous f32; b holds nb_ elements repeated along a (nb_ divides n, multiple of 4 or equal)
kernel void k_binary_f32x4(int op, global const uchar* a_p, ulong a_o, global const uchar* b_p, ulong b_o, int b_n4,
                           global uchar* d_p, ulong d_o, long n4) {
    const long i = get_global_id(0);
    if (i >= n4) return;
    const float4 x = vload4(i, (global const float*)(a_p + a_o));
    const float4 y = vload4((int)(i % b_n4), (global const float*)(b_p + b_o));
    float4 r;
    switch (op) {
        case B_ADD: r = x + y; break;
        case B_SUB: r = x - y; break;
        case B_MUL: r = x * y; break;
        default: r = x / y; break;
    }
    vstore4(r, i, (global float*)(d_p + d_o));
}

// GLU: dst = act(x) * g; x and g are two views (halves of one row for the fused form, or two tensors)
#define G_REGLU 0
#define G_GEGLU 1
#define G_SWIGLU 2
#define G_SWIGLU_OAI 3
#define G_GEGLU_ERF 4
#define G_GEGLU_QUICK 5

// alpha, limit: SWIGLU_OAI's parameters
kernel void k_glu(int op, float alpha, float limit, TENSOR(x), TENSOR(g), int t, TENSOR(d), long n) {
    ITEM4(d_ne, n)
    float v = load_f(AT(x, i0, i1, i2, i3), t);
    float gate = load_f(AT(g, i0, i1, i2, i3), t);
    float a;
    if (op == G_SWIGLU_OAI) {
        v = fmin(v, limit);
        gate = clamp(gate, -limit, limit);
        store_f(AT(d, i0, i1, i2, i3), t, v / (1.0f + exp(alpha * -v)) * (gate + 1.0f));
        return;
    }
    switch (op) {
        case G_REGLU: a = v > 0.0f ? v : 0.0f; break;
        case G_GEGLU: a = gelu_ggml(v); break;
        case G_SWIGLU: a = silu(v); break;
        case G_GEGLU_ERF: a = gelu_erf(v); break;
        default: a = gelu_quick_ggml(v); break;
    }
    store_f(AT(d, i0, i1, i2, i3), t, a * gate);
}

// ADD_ID: dst(i0, i1, i2) = a(i0, i1, i2) + b(i0, ids(i1, i2)); a bad id adds nothing and is reported
kernel void k_add_id(TENSOR(a), TENSOR(b), TENSOR(ids), TENSOR(d), global int* err, int code, long n) {
    ITEM4(d_ne, n)
    const int r = *(global const int*)AT(ids, i1, i2, 0, 0);
    float v = *(global const float*)AT(a, i0, i1, i2, i3);
    if (r < 0 || r >= b_ne.s1) {
        if (i0 == 0) report_error(err, code);
    } else {
        v += *(global const float*)AT(b, i0, r, 0, 0);
    }
    *(global float*)AT(d, i0, i1, i2, i3) = v;
}
