// Shared definitions for the ggml-cuda kernels: tensor descriptors, type ids, element loads/stores, reductions.
//
// Every kernel is `extern "C"` so that the host finds it by its plain name. A tensor reaches a kernel as a raw
// byte pointer plus a TDesc passed by value (ggml's ne[4] element counts and nb[4] byte strides, ne[0] fastest).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

// Helpers marked GGML_HD also compile for the host, so that tests/host_harness.cu can check the block formats,
// quantizers and dot products on a machine without a GPU. The wrappers below are the exact-rounding intrinsics
// on the device and their plain (non-contracted) equivalents on the host.
#define GGML_HD __host__ __device__ __forceinline__

GGML_HD float fmul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

GGML_HD float fadd_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

GGML_HD float fsub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

GGML_HD float fdiv_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

GGML_HD float fma_rn(float a, float b, float c) {
#ifdef __CUDA_ARCH__
    return __fmaf_rn(a, b, c);
#else
    return fmaf(a, b, c);
#endif
}

// round to nearest, ties to even
GGML_HD int f2i_rn(float x) {
#ifdef __CUDA_ARCH__
    return __float2int_rn(x);
#else
    return (int)nearbyintf(x);
#endif
}

// sum of the four signed byte products of a and b, plus c
GGML_HD int dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int k = 0; k < 4; ++k) c += (int)(int8_t)(a >> (8 * k)) * (int)(int8_t)(b >> (8 * k));
    return c;
#endif
}

// per-byte a - b (modulo 256)
GGML_HD int vsub4(int a, int b) {
#ifdef __CUDA_ARCH__
    return (int)__vsub4((unsigned)a, (unsigned)b);
#else
    unsigned r = 0;
    for (int k = 0; k < 4; ++k) r |= ((((unsigned)a >> (8 * k)) - ((unsigned)b >> (8 * k))) & 0xFFu) << (8 * k);
    return (int)r;
#endif
}

GGML_HD float bits_to_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

GGML_HD uint32_t f32_to_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}

struct TDesc {
    long long ne[4];
    long long nb[4];
};

// ggml type ids (enum ggml_type)
#define GT_F32 0
#define GT_F16 1
#define GT_Q4_0 2
#define GT_Q4_1 3
#define GT_Q5_0 6
#define GT_Q5_1 7
#define GT_Q8_0 8
#define GT_Q8_1 9
#define GT_Q2_K 10
#define GT_Q3_K 11
#define GT_Q4_K 12
#define GT_Q5_K 13
#define GT_Q6_K 14
#define GT_IQ4_NL 20
#define GT_I8 24
#define GT_I16 25
#define GT_I32 26
#define GT_I64 27
#define GT_BF16 30

// status bits a kernel may raise in the backend's status word (checked at synchronize)
#define STATUS_BAD_ROW_INDEX 1u

GGML_HD float bf16_bits_to_f32(uint16_t h) { return bits_to_f32(((uint32_t)h) << 16); }

// ggml's f32 -> bf16: round to nearest even; a NaN keeps its top 16 bits with the quiet bit forced
GGML_HD uint16_t f32_to_bf16_bits(float f) {
    const uint32_t u = f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t)((u >> 16) | 64u);
    }
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

// ggml's f32 -> f16: round to nearest even, overflow to inf, NaN to the canonical 0x7e00 (sign kept)
GGML_HD uint16_t f32_to_f16_bits(float f) {
    const uint32_t u = f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u);
    }
    return __half_as_ushort(__float2half_rn(f));
}

GGML_HD float f16_bits_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }

GGML_HD float round_to_f16(float f) { return f16_bits_to_f32(f32_to_f16_bits(f)); }

GGML_HD float round_to_bf16(float f) { return bf16_bits_to_f32(f32_to_bf16_bits(f)); }

GGML_HD uint16_t load_u16(const void* p) { return *(const uint16_t*)p; }

// an element of a plain (non-quantized) type as float
GGML_HD float load_elem(const char* p, int type) {
    switch (type) {
        case GT_F32: return *(const float*)p;
        case GT_F16: return f16_bits_to_f32(load_u16(p));
        case GT_BF16: return bf16_bits_to_f32(load_u16(p));
        case GT_I8: return (float)*(const int8_t*)p;
        case GT_I16: return (float)*(const int16_t*)p;
        case GT_I32: return (float)*(const int32_t*)p;
        case GT_I64: return (float)*(const long long*)p;
        default: return 0.0f;
    }
}

// store a float into an element of f32, f16, bf16 (converting as ggml does) or i32 (truncating toward zero)
GGML_HD void store_elem(char* p, int type, float v) {
    switch (type) {
        case GT_F32: *(float*)p = v; break;
        case GT_F16: *(uint16_t*)p = f32_to_f16_bits(v); break;
        case GT_BF16: *(uint16_t*)p = f32_to_bf16_bits(v); break;
        case GT_I32: *(int*)p = (int)truncf(v); break;
        default: break;
    }
}

// byte offset of element (i0, i1, i2, i3)
__device__ __forceinline__ long long offset4(const TDesc& d, long long i0, long long i1, long long i2, long long i3) {
    return i0 * d.nb[0] + i1 * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3];
}

// split a row number (over ne[1], ne[2], ne[3]) into its indices
__device__ __forceinline__ void split_row(const TDesc& d, long long row, long long& i1, long long& i2, long long& i3) {
    i1 = row % d.ne[1];
    const long long r = row / d.ne[1];
    i2 = r % d.ne[2];
    i3 = r / d.ne[2];
}

// split a flat element number (logical order, ne[0] fastest) into its indices
__device__ __forceinline__ void split_flat(const TDesc& d, long long i, long long& i0, long long& i1, long long& i2,
                                           long long& i3) {
    i0 = i % d.ne[0];
    split_row(d, i / d.ne[0], i1, i2, i3);
}

__device__ __forceinline__ long long nrows_of(const TDesc& d) { return d.ne[1] * d.ne[2] * d.ne[3]; }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// block-wide sum of a double; every thread gets the result (blockDim.x a multiple of 32, at most 1024)
__device__ __forceinline__ double block_sum_d(double v, double* shared32) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) shared32[warp] = v;
    __syncthreads();
    v = lane < nwarps ? shared32[lane] : 0.0;
    return warp_sum_d(v);
}

__device__ __forceinline__ float block_sum(float v, float* shared32) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) shared32[warp] = v;
    __syncthreads();
    v = lane < nwarps ? shared32[lane] : 0.0f;
    return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* shared32) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) shared32[warp] = v;
    __syncthreads();
    v = lane < nwarps ? shared32[lane] : -INFINITY;
    return warp_max(v);
}

// ggml's ALiBi slope of head h (1 when max_bias is 0)
__device__ __forceinline__ float alibi_slope(float max_bias, int h, int n_head_log2, float m0, float m1) {
    if (max_bias <= 0.0f) return 1.0f;
    return h < n_head_log2 ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - n_head_log2) + 1));
}
