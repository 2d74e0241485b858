// ggml-opencl: the MUL_MAT kernels whose shapes are tuned per device (see _tuning.py). Not part of the main
// program: _tuning.py builds this file (after common.cl, and quants.cl for k_mv) once per configuration, with
// the configuration as defines. Every configuration computes the same sums; only the order of the additions
// inside one dot product differs (float rounding), never which elements are added.
//
//  * k_gemm: C[n, m] over f32 weight panels [M/TM][K][TM] (k_pack_a) and f32 activation rows: a GEMM_TN x GEMM_TM
//    tile per work-item, TM-wide vector loads of the panel, TN broadcast activations (register blocking), K
//    unrolled by GEMM_KU. Work-group shape and TM/TN are tuned.
//  * k_mv: few activation columns (token generation). The weights are read in their own type (MV_T, a compile-time
//    constant so the decoder folds to one type) 32 values at a time, MV_R rows per work-group, MV_NC columns per
//    pass, the work-group's items (local size tuned) taking chunks in turn, 16-wide vector products, then a local
//    (work-group) reduction.

#ifndef GEMM_TM
#define GEMM_TM 8
#endif
#ifndef GEMM_TN
#define GEMM_TN 8
#endif
#ifndef GEMM_KU
#define GEMM_KU 1
#endif
#ifndef MV_R
#define MV_R 1
#endif
#ifndef MV_NC
#define MV_NC 1
#endif
#ifndef MV_LS
#define MV_LS 1
#endif
#ifndef MV_RB
#define MV_RB 1
#endif
#ifndef MV_VW
#define MV_VW 16
#endif

// the tile's TM weight rows are GEMM_TV vectors of GEMM_VW floats (TM = 32 as two float16)
#ifndef GEMM_VW
#define GEMM_VW GEMM_TM
#endif
#define GEMM_TV (GEMM_TM / GEMM_VW)

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define VT CAT(float, GEMM_VW)
#define VLOAD_T CAT(vload, GEMM_VW)
#define VSTORE_T CAT(vstore, GEMM_VW)

#ifndef MV_T
// one k step of the tile: GEMM_TV vector loads of the panel row, GEMM_TN broadcast activations
#define GEMM_STEP(kk)                                                                    \
    {                                                                                    \
        VT av[GEMM_TV];                                                                  \
        _Pragma("unroll") for (int v = 0; v < GEMM_TV; ++v) av[v] = VLOAD_T((kk) * GEMM_TV + v, ap); \
        _Pragma("unroll") for (int i = 0; i < GEMM_TN; ++i) {                            \
            const VT bk = (VT)(brow[i][kk]);                                             \
            _Pragma("unroll") for (int v = 0; v < GEMM_TV; ++v) acc[i][v] = mad(bk, av[v], acc[i][v]); \
        }                                                                                \
    }

// C[n, m_base + m] for a GEMM_TN x GEMM_TM tile per work-item. at: panels of this M chunk (Mc rows per matrix);
// b: f32 rows, element strides ldb (row), sb2, sb3; dst: f32, element strides ldd, sd2, sd3.
kernel void k_gemm(global const float* at, int K, int Mc, int Mv, int a2, int r2, int r3, global const uchar* b_p,
                   ulong b_o, long ldb, long sb2, long sb3, int N, int b2, global uchar* d_p, ulong d_o, long ldd,
                   long sd2, long sd3, int m_base) {
    const int nt = get_global_id(0) * GEMM_TN, pm = get_global_id(1), ib = get_global_id(2);
    const int i2 = ib % b2, i3 = ib / b2;
    const int mt = pm * GEMM_TM;
    if (nt >= N || mt >= Mc) return;
    global const float* ap = at + (long)((i3 / r3) * a2 + i2 / r2) * Mc * K + (long)pm * K * GEMM_TM;
    global const float* bb = (global const float*)(b_p + b_o) + i2 * sb2 + i3 * sb3;
    global const float* brow[GEMM_TN];
    VT acc[GEMM_TN][GEMM_TV];
    for (int i = 0; i < GEMM_TN; ++i) {
        brow[i] = bb + (long)min(nt + i, N - 1) * ldb;
        for (int v = 0; v < GEMM_TV; ++v) acc[i][v] = (VT)(0.0f);
    }
    int k = 0;
#if GEMM_KU > 1
    for (; k + GEMM_KU <= K; k += GEMM_KU) {
#pragma unroll
        for (int u = 0; u < GEMM_KU; ++u) GEMM_STEP(k + u)
    }
#endif
    for (; k < K; ++k) GEMM_STEP(k)
    global float* dd = (global float*)(d_p + d_o) + i2 * sd2 + i3 * sd3 + m_base + mt;
    for (int i = 0; i < GEMM_TN; ++i) {
        if (nt + i >= N) break;
        global float* out = dd + (long)(nt + i) * ldd;
        for (int v = 0; v < GEMM_TV; ++v) {
            const int m = mt + v * GEMM_VW;
            if (m + GEMM_VW <= Mv) {
                VSTORE_T(acc[i][v], 0, out + v * GEMM_VW);
            } else {
                float tmp[GEMM_VW];
                VSTORE_T(acc[i][v], 0, tmp);
                for (int j = 0; m + j < Mv && j < GEMM_VW; ++j) out[v * GEMM_VW + j] = tmp[j];
            }
        }
    }
}

#else  // MV_T: the matrix-vector kernel for weight type MV_T

inline float hsum8(float8 v) {
    const float4 b = v.lo + v.hi;
    const float2 c = b.lo + b.hi;
    return c.x + c.y;
}

inline float hsum16(float16 v) { return hsum8(v.lo + v.hi); }

// the accumulators: MV_VW (16 or 8) lanes; 8 halves the registers a row takes (AVX2 has 16 vector registers)
#if MV_VW == 16
#define MV_ACC float16
#define MV_MAD(y, x, t) mad((y), (x), (t))
#define MV_HSUM(v) hsum16(v)
#else
#define MV_ACC float8
#define MV_MAD(y, x, t) mad((y).hi, (x).hi, mad((y).lo, (x).lo, (t)))
#define MV_HSUM(v) hsum8(v)
#endif

// values [32c, 32c + 32) of a weight row as two float16 (zeros past K). The common types are decoded with vector
// operations in dq32's arithmetic (the same float products, so the same values bit for bit; shifts on int
// vectors, as x86 has no variable byte shifts); the K-quants below in pairs of chunks; the others through dq32.
inline void mv_load(global const uchar* row, long nb0, int c, int K, float16* y0, float16* y1) {
#if MV_T == T_F32
    if (nb0 == 4 && 32 * c + 32 <= K) {
        global const float* p = (global const float*)row + 32 * c;
        *y0 = vload16(0, p);
        *y1 = vload16(1, p);
        return;
    }
#elif MV_T == T_F16
    if (nb0 == 2 && 32 * c + 32 <= K) {
        global const half* p = (global const half*)row + 32 * c;
        *y0 = vload_half16(0, p);
        *y1 = vload_half16(1, p);
        return;
    }
#elif MV_T == T_BF16
    if (nb0 == 2 && 32 * c + 32 <= K) {  // bf16 -> f32: the 16 bits on top of a zero mantissa tail
        global const ushort* p = (global const ushort*)row + 32 * c;
        *y0 = as_float16(convert_uint16(vload16(0, p)) << 16);
        *y1 = as_float16(convert_uint16(vload16(1, p)) << 16);
        return;
    }
#elif MV_T == T_Q4_0
    {
        global const uchar* b = row + 18 * c;
        const float d = rd_f16(b);
        const uchar16 q = vload16(0, b + 2);
        *y0 = (convert_float16(q & (uchar16)(0xF)) - 8.0f) * d;
        *y1 = (convert_float16(q >> (uchar16)(4)) - 8.0f) * d;
        return;
    }
#elif MV_T == T_Q4_1
    {
        global const uchar* b = row + 20 * c;
        const float d = rd_f16(b), m = rd_f16(b + 2);
        const uchar16 q = vload16(0, b + 4);
        *y0 = convert_float16(q & (uchar16)(0xF)) * d + m;
        *y1 = convert_float16(q >> (uchar16)(4)) * d + m;
        return;
    }
#elif MV_T == T_Q5_0
    {
        global const uchar* b = row + 22 * c;
        const float d = rd_f16(b);
        const int16 qh = (int16)((int)rd_u32(b + 2));
        const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const int16 q = convert_int16(vload16(0, b + 6));
        const int16 lo = (q & 0xF) | (((qh >> lane) & 1) << 4), hi = (q >> 4) | (((qh >> (lane + 16)) & 1) << 4);
        *y0 = convert_float16(lo - 16) * d;
        *y1 = convert_float16(hi - 16) * d;
        return;
    }
#elif MV_T == T_Q8_0
    {
        global const uchar* b = row + 34 * c;
        const float d = rd_f16(b);
        *y0 = convert_float16(vload16(0, (global const char*)(b + 2))) * d;
        *y1 = convert_float16(vload16(1, (global const char*)(b + 2))) * d;
        return;
    }
#endif
    float y[32];
    load32(MV_T, row, nb0, c, K, y);
    *y0 = vload16(0, y);
    *y1 = vload16(1, y);
}

// the activations' values [32c, 32c + 32) of a row (zeros past K: the row may end there)
inline void mv_act(global const float* bn, int c, int K, float16* x0, float16* x1) {
    const int k0 = 32 * c;
    if (k0 + 32 <= K) {
        *x0 = vload16(0, bn + k0);
        *x1 = vload16(1, bn + k0);
        return;
    }
    float x[32];
    for (int l = 0; l < 32; ++l) x[l] = k0 + l < K ? bn[k0 + l] : 0.0f;
    *x0 = vload16(0, x);
    *x1 = vload16(1, x);
}

// a unit of the chunk loop: MV_U chunks of 32 values. Q4_K, Q5_K and Q6_K take two (the low and high nibbles of the
// same 32 bytes, one read of the block's scales for both); the other types one.
#if MV_T == T_Q4_K
#define MV_U 2
inline void mv_load_unit(global const uchar* row, long nb0, int p, int K, float16* y) {
    global const uchar* b = row + 144 * (p >> 2);
    const int j = p & 3;
    float d0, m0, d1, m1;
    k4_scale_min(b, 2 * j, &d0, &m0);
    k4_scale_min(b, 2 * j + 1, &d1, &m1);
    global const uchar* q = b + 16 + 32 * j;
    const int16 qa = convert_int16(vload16(0, q)), qb = convert_int16(vload16(1, q));
    y[0] = d0 * convert_float16(qa & 0xF) - m0;
    y[1] = d0 * convert_float16(qb & 0xF) - m0;
    y[2] = d1 * convert_float16(qa >> 4) - m1;
    y[3] = d1 * convert_float16(qb >> 4) - m1;
}
#elif MV_T == T_Q5_K
#define MV_U 2
inline void mv_load_unit(global const uchar* row, long nb0, int p, int K, float16* y) {
    global const uchar* b = row + 176 * (p >> 2);
    const int j = p & 3;
    float d0, m0, d1, m1;
    k4_scale_min(b, 2 * j, &d0, &m0);
    k4_scale_min(b, 2 * j + 1, &d1, &m1);
    global const uchar* q = b + 48 + 32 * j;
    const int16 qa = convert_int16(vload16(0, q)), qb = convert_int16(vload16(1, q));
    const int16 ha = convert_int16(vload16(0, b + 16)), hb = convert_int16(vload16(1, b + 16));
    y[0] = d0 * convert_float16((qa & 0xF) | (((ha >> (2 * j)) & 1) << 4)) - m0;
    y[1] = d0 * convert_float16((qb & 0xF) | (((hb >> (2 * j)) & 1) << 4)) - m0;
    y[2] = d1 * convert_float16((qa >> 4) | (((ha >> (2 * j + 1)) & 1) << 4)) - m1;
    y[3] = d1 * convert_float16((qb >> 4) | (((hb >> (2 * j + 1)) & 1) << 4)) - m1;
}
#elif MV_T == T_Q6_K
// chunks k and k + 2 of a 128-value half share their ql and qh bytes (low/high nibble, other qh bits)
#define MV_U 2
#define MV_CHUNK(u, v) (((u) >> 1) * 4 + ((u) & 1) + 2 * (v))
inline void mv_load_unit(global const uchar* row, long nb0, int u, int K, float16* y) {
    global const uchar* b = row + 210 * (u >> 2);
    const int n = (u >> 1) & 1, k0 = u & 1, hs = 2 * k0;
    const float d = rd_f16(b + 208);
    global const uchar* ql = b + 64 * n + 32 * k0;
    global const uchar* qh = b + 128 + 32 * n;
    global const uchar* sc = b + 192 + n * 8 + 2 * k0;
    const int16 la = convert_int16(vload16(0, ql)), lb = convert_int16(vload16(1, ql));
    const int16 ha = convert_int16(vload16(0, qh)), hb = convert_int16(vload16(1, qh));
    y[0] = (d * (float)((char)sc[0])) * convert_float16(((la & 0xF) | (((ha >> hs) & 3) << 4)) - 32);
    y[1] = (d * (float)((char)sc[1])) * convert_float16(((lb & 0xF) | (((hb >> hs) & 3) << 4)) - 32);
    y[2] = (d * (float)((char)sc[4])) * convert_float16(((la >> 4) | (((ha >> (hs + 4)) & 3) << 4)) - 32);
    y[3] = (d * (float)((char)sc[5])) * convert_float16(((lb >> 4) | (((hb >> (hs + 4)) & 3) << 4)) - 32);
}
#else
#define MV_U 1
inline void mv_load_unit(global const uchar* row, long nb0, int p, int K, float16* y) {
    mv_load(row, nb0, p, K, &y[0], &y[1]);
}
#endif
#define MV_V (2 * MV_U)
#ifndef MV_CHUNK
#define MV_CHUNK(u, v) ((u) * MV_U + (v))  // the chunk of 32 values that part v of unit u holds
#endif

// dst[n, m] for MV_RB blocks of MV_R weight rows per work-group of MV_LS items (rows past M are read clamped and
// not written; the blocks one after the other, so that few large groups cover the matrix: a CPU device pays for
// every group it schedules), all N columns in passes of MV_NC; b: f32 rows (ldb, sb2, sb3 element strides), dst:
// f32 (ldd, sd2, sd3).
kernel void k_mv(TENSOR(a), int r2, int r3, global const uchar* b_p, ulong b_o, long ldb, long sb2, long sb3, int N,
                 int b2, global uchar* d_p, ulong d_o, long ldd, long sd2, long sd3, local float* scratch) {
    const int ib = get_global_id(1);
    const int lid = MV_LS > 1 ? get_local_id(0) : 0;
    const int i2 = ib % b2, i3 = ib / b2, K = a_ne.s0, M = a_ne.s1;
    global const float* bb = (global const float*)(b_p + b_o) + i2 * sb2 + i3 * sb3;
    global float* dd = (global float*)(d_p + d_o) + i2 * sd2 + i3 * sd3;
    const int nu = (K + 32 * MV_U - 1) / (32 * MV_U);
    for (int blk = 0; blk < MV_RB; ++blk) {
        const int m0 = (get_group_id(0) * MV_RB + blk) * MV_R;
        if (m0 >= M) break;  // the same for every item of the group: no barrier is skipped by some only
        global const uchar* rows[MV_R];
        for (int r = 0; r < MV_R; ++r) rows[r] = AT(a, 0, min(m0 + r, M - 1), i2 / r2, i3 / r3);
        for (int n0 = 0; n0 < N; n0 += MV_NC) {
            MV_ACC acc[MV_R][MV_NC];
            for (int r = 0; r < MV_R; ++r)
                for (int j = 0; j < MV_NC; ++j) acc[r][j] = (MV_ACC)(0.0f);
            for (int u = lid; u < nu; u += MV_LS) {
                float16 y[MV_R][MV_V];
#pragma unroll
                for (int r = 0; r < MV_R; ++r) mv_load_unit(rows[r], a_nb.s0, u, K, y[r]);
#pragma unroll
                for (int j = 0; j < MV_NC; ++j) {
                    float16 x[MV_V];
                    global const float* bn = bb + (long)min(n0 + j, N - 1) * ldb;
#pragma unroll
                    for (int v = 0; v < MV_U; ++v) mv_act(bn, MV_CHUNK(u, v), K, &x[2 * v], &x[2 * v + 1]);
#pragma unroll
                    for (int r = 0; r < MV_R; ++r) {
                        MV_ACC t = acc[r][j];
#pragma unroll
                        for (int v = 0; v < MV_V; ++v) t = MV_MAD(y[r][v], x[v], t);
                        acc[r][j] = t;
                    }
                }
            }
            for (int r = 0; r < MV_R; ++r) {
                for (int j = 0; j < MV_NC; ++j) {
#if MV_LS > 1  // a local reduction (barriers only where there is more than one item)
                    const float s = group_sum(MV_HSUM(acc[r][j]), scratch);
#else
                    const float s = MV_HSUM(acc[r][j]);
#endif
                    if (lid == 0 && m0 + r < M && n0 + j < N) dd[(long)(n0 + j) * ldd + m0 + r] = s;
                }
            }
        }
    }
}
#endif
