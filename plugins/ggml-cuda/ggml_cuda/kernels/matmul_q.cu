// Quantized MUL_MAT for few columns (N <= 8): activations are first quantized to ggml's dot type, then one warp
// per weight row computes integer dot products (dp4a) block by block.
//
//   k_quantize_act  f32/f16 activations -> int8 quants + scales. mode 32: ggml-cpu's Q8_0/Q8_1 rounding (blocks
//                   of 32, d = amax/127 and s = d*sum(q) both rounded to f16), used for the 32-element weight types;
//                   mode 256: ggml's Q8_K (blocks of 256, d = 1/(-127/max) in float), used for the K-quants.
//   k_mv_<type>     weights x quantized activations. Each warp stages a chunk of its weight row in shared memory
//                   with wide, coalesced loads; then each lane takes one 32-element unit (a legacy block, or one
//                   eighth of a K-quant super-block) and all activation columns.
#include "matmul.cuh"

#define MVQ_ROWS 4
#define MVQ_MAX_COLS 8
#define MVQ_CHUNK 1152  // bytes of weights staged per warp: 32 legacy blocks or 4 super-blocks (Q8_0: 1088)

// ---- ggml's activation rounding, per element (shared by the kernel and tests/host_harness.cu) ----------------

// Q8_0 / Q8_1 as ggml-cpu's x86 quantize_row_q8_0/q8_1 (what the CPU plugin reproduces): d = amax / 127,
// q = x * (127 / amax) rounded half to even (_mm256_round_ps); the reference quantizer's 1/d and roundf differ
GGML_HD float act32_inverse(float amax, float* d) {
    *d = fdiv_rn(amax, 127.0f);
    return amax != 0.0f ? fdiv_rn(127.0f, amax) : 0.0f;
}

GGML_HD int act32_quant(float x, float id) { return (int)(int8_t)f2i_rn(fmul_rn(x, id)); }

// the scales kept for the dot products: f16(d) and f16(sum(q) * d), widened to float
GGML_HD void act32_scales(float d, float qsum, float* dx, float* sx) {
    *dx = round_to_f16(d);
    *sx = round_to_f16(fmul_rn(qsum, d));
}

// Q8_K: iscale = -127 / max (max: the signed value of largest magnitude, first on ties), q = min(127, rne(iscale x))
GGML_HD float act256_iscale(float vmax) { return fdiv_rn(-127.0f, vmax); }

GGML_HD int act256_quant(float x, float iscale) { return min(127, f2i_rn(fmul_rn(iscale, x))); }

GGML_HD float act256_scale(float iscale) { return fdiv_rn(1.0f, iscale); }

// grid: ceil(n_blocks / 8) blocks of 256 threads, one warp per activation block
extern "C" __global__ void k_quantize_act(const char* b, char* qx, char* dx, char* sx, TDesc db, int tb, int mode,
                                          long long n_blocks) {
    const int lane = threadIdx.x & 31;
    const long long blk = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (blk >= n_blocks) return;
    const long long K = db.ne[0], qk = mode, per_row = K / qk;
    const long long row = blk / per_row, jb = blk % per_row;
    long long i1, i2, i3;
    split_row(db, row, i1, i2, i3);
    const char* src = b + i1 * db.nb[1] + i2 * db.nb[2] + i3 * db.nb[3];
    int8_t* q = (int8_t*)qx + row * K + jb * qk;
    if (mode == 32) {
        const float x = load_elem(src + (jb * 32 + lane) * db.nb[0], tb);
        float d;
        const float id = act32_inverse(warp_max(fabsf(x)), &d);
        const int qi = act32_quant(x, id);
        q[lane] = (int8_t)qi;
        const float sum = warp_sum((float)qi);  // exact: |sum| <= 32 * 128
        if (lane == 0) act32_scales(d, sum, (float*)dx + blk, (float*)sx + blk);
        return;
    }
    // mode 256: 8 values per lane; the signed value of largest magnitude, first index on ties
    float v[8];
    float best = 0.0f;
    int best_i = 0x7fffffff;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int i = lane * 8 + j;
        v[j] = load_elem(src + (jb * 256 + i) * db.nb[0], tb);
        if (fabsf(v[j]) > best) {
            best = fabsf(v[j]);
            best_i = i;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ob = __shfl_xor_sync(0xffffffffu, best, o);
        const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
        if (ob > best || (ob == best && oi < best_i)) {
            best = ob;
            best_i = oi;
        }
    }
    float* dk = (float*)dx;
    if (best == 0.0f) {
#pragma unroll
        for (int j = 0; j < 8; ++j) q[lane * 8 + j] = 0;
        if (lane == 0) dk[blk] = 0.0f;
        return;
    }
    const float vmax = __shfl_sync(0xffffffffu, v[best_i % 8], best_i / 8);
    const float iscale = act256_iscale(vmax);
#pragma unroll
    for (int j = 0; j < 8; ++j) q[lane * 8 + j] = (int8_t)act256_quant(v[j], iscale);
    if (lane == 0) dk[blk] = act256_scale(iscale);
}

// ---- one 32-element unit of each weight type against 32 int8 activations -----------------------------------

// 4 bytes from a 2-byte aligned address
GGML_HD int ld32(const uint8_t* p) {
    return (int)((uint32_t)load_u16(p) | ((uint32_t)load_u16(p + 2) << 16));
}

GGML_HD int spread_bits4(uint32_t x4) {  // bit i of x4 -> bit 4 of byte i
    return (int)(((x4 & 1u) << 4) | ((x4 & 2u) << 11) | ((x4 & 4u) << 18) | ((x4 & 8u) << 25));
}

// sum over the unit of q_w * q_x (with ggml's offsets applied) times the scales; x: 8 ints of activations
GGML_HD float dot_unit(int type, const uint8_t* blk, int s, const int* x, float dxv, float sxv) {
    int sumx = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) sumx = dp4a(0x01010101, x[k], sumx);
    switch (type) {
        case GT_Q4_0: case GT_Q4_1: {
            const int off = type == GT_Q4_0 ? 2 : 4;
            int sumi = 0;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int w = ld32(blk + off + 4 * k);
                sumi = dp4a(w & 0x0F0F0F0F, x[k], sumi);
                sumi = dp4a((w >> 4) & 0x0F0F0F0F, x[4 + k], sumi);
            }
            const float d = f16_bits_to_f32(load_u16(blk));
            if (type == GT_Q4_0) return d * dxv * (float)(sumi - 8 * sumx);
            return d * dxv * (float)sumi + f16_bits_to_f32(load_u16(blk + 2)) * sxv;
        }
        case GT_Q5_0: case GT_Q5_1: {
            const bool one = type == GT_Q5_1;
            const uint32_t qh = (uint32_t)ld32(blk + (one ? 4 : 2));
            const uint8_t* qs = blk + (one ? 8 : 6);
            int sumi = 0;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int w = ld32(qs + 4 * k);
                const int lo = (w & 0x0F0F0F0F) | spread_bits4((qh >> (4 * k)) & 0xF);
                const int hi = ((w >> 4) & 0x0F0F0F0F) | spread_bits4((qh >> (16 + 4 * k)) & 0xF);
                sumi = dp4a(lo, x[k], sumi);
                sumi = dp4a(hi, x[4 + k], sumi);
            }
            const float d = f16_bits_to_f32(load_u16(blk));
            if (!one) return d * dxv * (float)(sumi - 16 * sumx);
            return d * dxv * (float)sumi + f16_bits_to_f32(load_u16(blk + 2)) * sxv;
        }
        case GT_Q8_0: {
            int sumi = 0;
#pragma unroll
            for (int k = 0; k < 8; ++k) sumi = dp4a(ld32(blk + 2 + 4 * k), x[k], sumi);
            return f16_bits_to_f32(load_u16(blk)) * dxv * (float)sumi;
        }
        case GT_Q4_K: case GT_Q5_K: {
            const bool five = type == GT_Q5_K;
            const uint8_t* qs = blk + (five ? 48 : 16) + 32 * (s / 2);
            int sumi = 0;
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                int q = (ld32(qs + 4 * k) >> (4 * (s & 1))) & 0x0F0F0F0F;
                if (five) q |= ((ld32(blk + 16 + 4 * k) >> s) & 0x01010101) << 4;
                sumi = dp4a(q, x[k], sumi);
            }
            int sc, m;
            kq_scale_min(s, blk + 4, sc, m);
            const float d = f16_bits_to_f32(load_u16(blk)), dmin = f16_bits_to_f32(load_u16(blk + 2));
            return dxv * (d * (float)sc * (float)sumi - dmin * (float)m * (float)sumx);
        }
        case GT_Q6_K: {
            const int h = s / 4, g = s % 4;
            const uint8_t* ql = blk + 64 * h + (g & 1) * 32;
            const uint8_t* qh = blk + 128 + 32 * h;
            int sum0 = 0, sum1 = 0;
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int q = ((ld32(ql + 4 * k) >> (4 * (g >> 1))) & 0x0F0F0F0F) |
                              (((ld32(qh + 4 * k) >> (2 * g)) & 0x03030303) << 4);
                const int qs = vsub4(q, 0x20202020);  // q - 32 per byte, as signed int8
                if (k < 4) sum0 = dp4a(qs, x[k], sum0);
                else sum1 = dp4a(qs, x[k], sum1);
            }
            const int sc0 = (int8_t)blk[192 + 8 * h + 2 * g], sc1 = (int8_t)blk[192 + 8 * h + 2 * g + 1];
            return dxv * f16_bits_to_f32(load_u16(blk + 208)) * (float)(sc0 * sum0 + sc1 * sum1);
        }
        case GT_Q2_K: {
            const int h = s / 4, g = s % 4;
            const uint8_t* qs = blk + 16 + 32 * h;
            int sq0 = 0, sq1 = 0, sx0 = 0, sx1 = 0;
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int q = (ld32(qs + 4 * k) >> (2 * g)) & 0x03030303;
                if (k < 4) {
                    sq0 = dp4a(q, x[k], sq0);
                    sx0 = dp4a(0x01010101, x[k], sx0);
                } else {
                    sq1 = dp4a(q, x[k], sq1);
                    sx1 = dp4a(0x01010101, x[k], sx1);
                }
            }
            const int sc0 = blk[8 * h + 2 * g], sc1 = blk[8 * h + 2 * g + 1];
            const float d = f16_bits_to_f32(load_u16(blk + 80)), dmin = f16_bits_to_f32(load_u16(blk + 82));
            return dxv * (d * (float)((sc0 & 0xF) * sq0 + (sc1 & 0xF) * sq1) -
                          dmin * (float)((sc0 >> 4) * sx0 + (sc1 >> 4) * sx1));
        }
        case GT_Q3_K: {
            const int h = s / 4, g = s % 4;
            const uint8_t* qs = blk + 32 + 32 * h;
            int sum0 = 0, sum1 = 0;
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int q2 = (ld32(qs + 4 * k) >> (2 * g)) & 0x03030303;
                const int hb = (ld32(blk + 4 * k) >> (4 * h + g)) & 0x01010101;
                const int q = vsub4(q2, (hb ^ 0x01010101) << 2);
                if (k < 4) sum0 = dp4a(q, x[k], sum0);
                else sum1 = dp4a(q, x[k], sum1);
            }
            const int sc0 = q3k_scale(blk + 96, 8 * h + 2 * g), sc1 = q3k_scale(blk + 96, 8 * h + 2 * g + 1);
            return dxv * f16_bits_to_f32(load_u16(blk + 108)) * (float)(sc0 * sum0 + sc1 * sum1);
        }
        default: return 0.0f;
    }
}

// grid (ceil(M / MVQ_ROWS), b2*b3), block 32*MVQ_ROWS. qx/dx/sx from k_quantize_act over src1 (rows in src1's
// logical order); vec: the widest power-of-two byte width (2..16) that divides every staged chunk's address.
// One kernel per weight type (k_mv_q4_0, ..., k_mv_q6_k): the type is a compile-time constant of the inner loop.
template <int TA>
__device__ __forceinline__ void mv_q(const char* a, const char* qx, const char* dx, const char* sx, char* d,
                                     const char* ids, unsigned int* status, const TDesc& da, const TDesc& db,
                                     const TDesc& dd, const TDesc& di, int ncols, int vec, int n_used) {
    __shared__ __align__(16) uint8_t stage[MVQ_ROWS][MVQ_CHUNK];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long m = (long long)blockIdx.x * MVQ_ROWS + warp;
    if (m >= da.ne[1]) return;
    const char* abase;
    long long bcol, dcol, act_row0;  // bcol unused: activations come quantized, by row
    if (!mv_bases(a, ids, status, da, db, dd, di, n_used, abase, bcol, dcol, act_row0)) return;
    const uint8_t* arow = (const uint8_t*)abase + m * da.nb[1];
    const long long K = da.ne[0];
    constexpr int qk = (TA == GT_Q2_K || TA == GT_Q3_K || TA == GT_Q4_K || TA == GT_Q5_K || TA == GT_Q6_K) ? 256 : 32;
    constexpr bool kquant = qk == 256;
    constexpr int per_chunk = kquant ? 4 : 32;  // weight blocks per chunk
    const int bsize = qsize_of(TA);
    const long long nblocks = K / qk;
    uint8_t* buf = stage[warp];
    float acc[MVQ_MAX_COLS];
#pragma unroll
    for (int c = 0; c < MVQ_MAX_COLS; ++c) acc[c] = 0.0f;

    for (long long b0 = 0; b0 < nblocks; b0 += per_chunk) {
        const int nb = (int)min((long long)per_chunk, nblocks - b0);
        const int bytes = nb * bsize;
        const uint8_t* src = arow + b0 * bsize;
        const int main_bytes = bytes - bytes % vec;
        switch (vec) {
            case 16: for (int i = lane * 16; i < main_bytes; i += 512) *(uint4*)(buf + i) = *(const uint4*)(src + i); break;
            case 8: for (int i = lane * 8; i < main_bytes; i += 256) *(uint2*)(buf + i) = *(const uint2*)(src + i); break;
            case 4: for (int i = lane * 4; i < main_bytes; i += 128) *(uint32_t*)(buf + i) = *(const uint32_t*)(src + i); break;
            default: for (int i = lane * 2; i < main_bytes; i += 64) *(uint16_t*)(buf + i) = *(const uint16_t*)(src + i); break;
        }
        for (int i = main_bytes + lane; i < bytes; i += 32) buf[i] = src[i];
        __syncwarp();
        const int unit_blk = kquant ? lane / 8 : lane, s = kquant ? lane % 8 : 0;
        if (unit_blk < nb) {
            const long long e0 = (b0 + unit_blk) * qk + (long long)s * 32;  // first element of the unit
            const uint8_t* blk = buf + unit_blk * bsize;
#pragma unroll
            for (int c = 0; c < MVQ_MAX_COLS; ++c) {
                if (c >= ncols) break;
                const long long r = act_row0 + c;
                const int* xq = (const int*)((const int8_t*)qx + r * K + e0);
                int xv[8];
#pragma unroll
                for (int k = 0; k < 8; ++k) xv[k] = xq[k];
                const long long ab = r * (K / (kquant ? 256 : 32)) + e0 / (kquant ? 256 : 32);
                const float dxv = ((const float*)dx)[ab];
                const float sxv = kquant ? 0.0f : ((const float*)sx)[ab];
                acc[c] += dot_unit(TA, blk, s, xv, dxv, sxv);
            }
        }
        __syncwarp();
    }
#pragma unroll
    for (int c = 0; c < MVQ_MAX_COLS; ++c) {
        if (c >= ncols) break;
        const float v = warp_sum(acc[c]);
        if (lane == 0) *(float*)(d + dcol + m * dd.nb[0] + c * dd.nb[1]) = v;
    }
}

#define MV_Q_KERNEL(NAME, TYPE)                                                                                  \
    extern "C" __global__ void __launch_bounds__(32 * MVQ_ROWS)                                                  \
        NAME(const char* a, const char* qx, const char* dx, const char* sx, char* d, const char* ids,             \
             unsigned int* status, TDesc da, TDesc db, TDesc dd, TDesc di, int ncols, int vec, int n_used) {      \
        mv_q<TYPE>(a, qx, dx, sx, d, ids, status, da, db, dd, di, ncols, vec, n_used);                           \
    }

MV_Q_KERNEL(k_mv_q4_0, GT_Q4_0)
MV_Q_KERNEL(k_mv_q4_1, GT_Q4_1)
MV_Q_KERNEL(k_mv_q5_0, GT_Q5_0)
MV_Q_KERNEL(k_mv_q5_1, GT_Q5_1)
MV_Q_KERNEL(k_mv_q8_0, GT_Q8_0)
MV_Q_KERNEL(k_mv_q2_k, GT_Q2_K)
MV_Q_KERNEL(k_mv_q3_k, GT_Q3_K)
MV_Q_KERNEL(k_mv_q4_k, GT_Q4_K)
MV_Q_KERNEL(k_mv_q5_k, GT_Q5_K)
MV_Q_KERNEL(k_mv_q6_k, GT_Q6_K)
