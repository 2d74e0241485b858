// ggml-opencl: helpers shared by every kernel (prepended to each program).
//
// Tensors reach kernels as (data buffer, byte offset, ne, nb) so that any view, stride or broadcast is
// addressed directly: no sub-buffers, no alignment rules beyond the element's own.
// f16 is *storage only* (vload_half / vstore_half_rte), so no kernel needs cl_khr_fp16.

#pragma OPENCL FP_CONTRACT OFF

// ggml type ids (enum ggml_type)
#define T_F32 0
#define T_F16 1
#define T_Q4_0 2
#define T_Q4_1 3
#define T_Q5_0 6
#define T_Q5_1 7
#define T_Q8_0 8
#define T_Q8_1 9
#define T_Q2_K 10
#define T_Q3_K 11
#define T_Q4_K 12
#define T_Q5_K 13
#define T_Q6_K 14
#define T_Q8_K 15
#define T_IQ4_NL 20
#define T_IQ4_XS 23
#define T_I8 24
#define T_I16 25
#define T_I32 26
#define T_I64 27
#define T_BF16 30
#define T_TQ1_0 34
#define T_TQ2_0 35
#define T_MXFP4 39
#define T_NVFP4 40
#define T_Q1_0 41

// a tensor argument and the address of element (i0, i1, i2, i3)
#define TENSOR(x) global uchar* x##_p, ulong x##_o, int4 x##_ne, long4 x##_nb
#define AT(x, i0, i1, i2, i3) \
    (x##_p + x##_o + (long)(i0) * x##_nb.s0 + (long)(i1) * x##_nb.s1 + (long)(i2) * x##_nb.s2 + (long)(i3) * x##_nb.s3)

// flat element index <-> 4-d index (ne[0] fastest)
inline void unflat(long e, int4 ne, int* i0, int* i1, int* i2, int* i3) {
    *i0 = (int)(e % ne.s0); e /= ne.s0;
    *i1 = (int)(e % ne.s1); e /= ne.s1;
    *i2 = (int)(e % ne.s2);
    *i3 = (int)(e / ne.s2);
}

inline long flat(int i0, int i1, int i2, int i3, int4 ne) {
    return (((long)i3 * ne.s2 + i2) * ne.s1 + i1) * ne.s0 + i0;
}

// 1-d launches: work-item e of n (the global size is rounded up to the work-group size) maps to (i0, i1, i2, i3) of ne
#define ITEM4(ne, n)                     \
    const long e_ = get_global_id(0);    \
    if (e_ >= (n)) return;               \
    int i0, i1, i2, i3;                  \
    unflat(e_, ne, &i0, &i1, &i2, &i3);

// record the first error of a launch (index out of range...) for the host to report; never write out of bounds
inline void report_error(global int* err, int code) { atomic_cmpxchg(err, 0, code); }

inline float f16_bits(ushort h) { return vload_half(0, (private const half*)&h); }

// x rounded to the nearest f16 value (ties to even), overflow to inf, in float arithmetic: adding and removing
// 2^(e+13) leaves the 11 significant bits of an f16 (ulp 2^-24 below the normal range)
inline float round_f16(float x) {
    const float ax = fabs(x);
    if (!(ax < 65520.0f)) return ax == ax ? copysign(INFINITY, x) : x;
    const uint e = as_uint(ax) & 0x7f800000u;
    const float c = e < (113u << 23) ? 0.5f : as_float(e + (13u << 23));
    return copysign((ax + c) - c, x);
}

inline float bf16_bits(ushort b) { return as_float((uint)b << 16); }

inline ushort to_bf16(float f) {
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 64u);  // NaN: keep it quiet
    return (ushort)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

// little-endian reads at any byte alignment (quantized blocks have odd sizes)
inline ushort rd_u16(global const uchar* p) { return (ushort)(p[0] | (p[1] << 8)); }
inline uint rd_u32(global const uchar* p) { return (uint)p[0] | ((uint)p[1] << 8) | ((uint)p[2] << 16) | ((uint)p[3] << 24); }
inline float rd_f16(global const uchar* p) { return f16_bits(rd_u16(p)); }

inline float load_f(global const uchar* p, int t) {
    switch (t) {
        case T_F32: return *(global const float*)p;
        case T_F16: return vload_half(0, (global const half*)p);
        case T_BF16: return bf16_bits(*(global const ushort*)p);
        case T_I32: return (float)*(global const int*)p;
        case T_I16: return (float)*(global const short*)p;
        case T_I8: return (float)*(global const char*)p;
        default: return 0.0f;
    }
}

inline void store_f(global uchar* p, int t, float v) {
    switch (t) {
        case T_F32: *(global float*)p = v; break;
        case T_F16: vstore_half_rte(v, 0, (global half*)p); break;
        case T_BF16: *(global ushort*)p = to_bf16(v); break;
        default: break;
    }
}

inline long load_i(global const uchar* p, int t) {
    switch (t) {
        case T_I32: return *(global const int*)p;
        case T_I64: return *(global const long*)p;
        case T_I16: return *(global const short*)p;
        case T_I8: return *(global const char*)p;
        default: return 0;
    }
}

inline void store_i(global uchar* p, int t, long v) {
    switch (t) {
        case T_I32: *(global int*)p = (int)v; break;
        case T_I64: *(global long*)p = v; break;
        case T_I16: *(global short*)p = (short)v; break;
        case T_I8: *(global char*)p = (char)v; break;
        default: break;
    }
}

// tree reduction over a work-group of LS (a power of two) items; scratch holds LS floats
inline float group_sum(float v, local float* scratch) {
    const int lid = get_local_id(0), ls = get_local_size(0);
    if (ls == 1) return v;
    barrier(CLK_LOCAL_MEM_FENCE);
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = ls / 2; s > 0; s >>= 1) {
        if (lid < s) scratch[lid] += scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return scratch[0];
}

inline float group_max(float v, local float* scratch) {
    const int lid = get_local_id(0), ls = get_local_size(0);
    if (ls == 1) return v;
    barrier(CLK_LOCAL_MEM_FENCE);
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = ls / 2; s > 0; s >>= 1) {
        if (lid < s) scratch[lid] = fmax(scratch[lid], scratch[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return scratch[0];
}
