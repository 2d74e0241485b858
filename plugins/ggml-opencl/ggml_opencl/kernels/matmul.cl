// ggml-opencl: MUL_MAT. dst[n, m] = sum_k a[m, k] * b[n, k] (a: [K, M] weights of any supported type, b: [K, N]).
//
// Two paths, chosen by the host:
//  * N small (token generation): k_mul_mv reads the weights in their own type, dequantizing 32 values at a time,
//    one work-group of MV_LS items per output row.
//  * otherwise: k_pack_a dequantizes / converts the weights once into f32 panels [M/TM][K][TM], k_pack_b turns the
//    activations into contiguous f32 rows (rounded like ggml's dot type when asked), and k_gemm computes a TN x TM
//    tile per work-item with TM-wide vector loads of the panel (register blocking; TM, TN from device properties).

#ifndef GEMM_TM
#define GEMM_TM 8
#endif
#ifndef GEMM_TN
#define GEMM_TN 8
#endif
#ifndef MV_NMAX
#define MV_NMAX 8
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define VTM CAT(float, GEMM_TM)
#define VLOAD_TM CAT(vload, GEMM_TM)
#define VSTORE_TM CAT(vstore, GEMM_TM)

// 32 consecutive values of row `row` from column 32c (zeros past K); any float or quantized type
inline void load32(int t, global const uchar* row, long nb0, int c, int K, float* y) {
    if (type_block_bytes(t) != 0) {
        dq32(t, row, c, y);
        return;
    }
    const int k0 = 32 * c;
    if (t == T_F32 && nb0 == 4 && k0 + 32 <= K) {
        global const float* p = (global const float*)row + k0;
        for (int l = 0; l < 32; ++l) y[l] = p[l];
        return;
    }
    if (t == T_F16 && nb0 == 2 && k0 + 32 <= K) {
        global const half* p = (global const half*)row + k0;
        for (int l = 0; l < 4; ++l) vstore8(vload_half8(l, p), l, y);
        return;
    }
    for (int l = 0; l < 32; ++l) y[l] = k0 + l < K ? load_f(row + (long)(k0 + l) * nb0, t) : 0.0f;
}

// weights rows [m_base, m_base + Mc) of every weight matrix -> f32 panels; padded rows are zero
kernel void k_pack_a(TENSOR(a), int a_t, int m_base, int Mc, global float* at, long n) {
    const int K = a_ne.s0;
    ITEM4(((int4)((K + 31) / 32, Mc, a_ne.s2, a_ne.s3)), n)
    const int c = i0, m = i1, ia = i2 + i3 * a_ne.s2;
    float y[32];
    if (m_base + m < a_ne.s1) load32(a_t, AT(a, 0, m_base + m, i2, i3), a_nb.s0, c, K, y);
    else for (int l = 0; l < 32; ++l) y[l] = 0.0f;
    global float* panel = at + (long)ia * Mc * K + (long)(m / GEMM_TM) * K * GEMM_TM + m % GEMM_TM;
    const int kn = min(32, K - 32 * c);
    for (int l = 0; l < kn; ++l) panel[(long)(32 * c + l) * GEMM_TM] = y[l];
}

// activation rounding of ggml's dot types: 0 none, 1 f16, 2 Q8_0/Q8_1 (blocks of 32), 3 Q8_K (blocks of 256), 4 bf16
#define R_NONE 0
#define R_F16 1
#define R_Q8_0 2
#define R_Q8_K 3
#define R_BF16 4

// b -> contiguous f32 rows [batch][N][K]; one work-item per block of `blk` values (32 or 256; 32 when no rounding)
// round kn (<= 256) staged values the way `mode` says and write them to out
inline void pack_block(const float* x, int kn, int mode, global float* out) {
    if (mode == R_Q8_0) {  // d = amax / 127 (stored as f16), q = roundf(x / d)
        float amax = 0.0f;
        for (int k = 0; k < kn; ++k) amax = fmax(amax, fabs(x[k]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f, dh = round_f16(d);
        for (int k = 0; k < kn; ++k) out[k] = round(x[k] * id) * dh;
    } else if (mode == R_Q8_K) {  // iscale = -127 / (the first value of largest magnitude), q = min(127, rint(x iscale))
        float amax = 0.0f, vmax = 0.0f;
        for (int k = 0; k < kn; ++k) {
            const float a = fabs(x[k]);
            vmax = a > amax ? x[k] : vmax;
            amax = a > amax ? a : amax;
        }
        const float iscale = amax == 0.0f ? 0.0f : -127.0f / vmax, d = amax == 0.0f ? 0.0f : 1.0f / iscale;
        for (int k = 0; k < kn; ++k) out[k] = fmin(127.0f, rint(iscale * x[k])) * d;
    } else if (mode == R_F16) {
        for (int k = 0; k < kn; ++k) out[k] = round_f16(x[k]);
    } else if (mode == R_BF16) {
        for (int k = 0; k < kn; ++k) out[k] = bf16_bits(to_bf16(x[k]));
    } else {
        for (int k = 0; k < kn; ++k) out[k] = x[k];
    }
}

// stage values [k0, k0 + kn) of a row of b (any float type, fast path for packed f32)
inline void stage_row(global const uchar* row, long nb0, int t, int k0, int kn, float* x) {
    if (t == T_F32 && nb0 == 4) {
        global const float* src = (global const float*)row + k0;
        for (int k = 0; k < kn; ++k) x[k] = src[k];
    } else {
        for (int k = 0; k < kn; ++k) x[k] = load_f(row + (long)(k0 + k) * nb0, t);
    }
}

kernel void k_pack_b(TENSOR(b), int b_t, int mode, int blk, global float* bp, long n_items) {
    const int K = b_ne.s0;
    ITEM4(((int4)((K + blk - 1) / blk, b_ne.s1, b_ne.s2, b_ne.s3)), n_items)
    const int k0 = i0 * blk, kn = min(K - k0, blk);
    float x[256];
    stage_row(AT(b, 0, i1, i2, i3), b_nb.s0, b_t, k0, kn, x);
    pack_block(x, kn, mode, bp + (flat(0, i1, i2, i3, b_ne) / b_ne.s0) * K + k0);
}

// rows[3r .. 3r+2] = (row of b, token, slot): row r of bp is b[:, row, token], rounded like k_pack_b
kernel void k_pack_b_rows(TENSOR(b), int b_t, int mode, int blk, global const int* rows, int n_rows,
                          global float* bp, long n_items) {
    const int K = b_ne.s0;
    ITEM4(((int4)((K + blk - 1) / blk, n_rows, 1, 1)), n_items)
    const int k0 = i0 * blk, kn = min(K - k0, blk);
    float x[256];
    stage_row(AT(b, 0, rows[3 * i1], rows[3 * i1 + 1], 0), b_nb.s0, b_t, k0, kn, x);
    pack_block(x, kn, mode, bp + (long)i1 * K + k0);
}

// dst[m, slot, token] = tmp[r, m] for the (row, token, slot) triple r
kernel void k_scatter_rows(global const float* tmp, int M, global const int* rows, int n_rows, TENSOR(d), long n) {
    ITEM4(((int4)(M, n_rows, 1, 1)), n)
    *(global float*)AT(d, i0, rows[3 * i1 + 2], rows[3 * i1 + 1], 0) = tmp[(long)i1 * M + i0];
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
    VTM acc[GEMM_TN];
    for (int i = 0; i < GEMM_TN; ++i) {
        brow[i] = bb + (long)min(nt + i, N - 1) * ldb;
        acc[i] = (VTM)(0.0f);
    }
    for (int k = 0; k < K; ++k) {
        const VTM av = VLOAD_TM(k, ap);
#pragma unroll
        for (int i = 0; i < GEMM_TN; ++i) acc[i] = mad((VTM)(brow[i][k]), av, acc[i]);
    }
    global float* dd = (global float*)(d_p + d_o) + i2 * sd2 + i3 * sd3 + m_base + mt;
    for (int i = 0; i < GEMM_TN; ++i) {
        if (nt + i >= N) break;
        global float* out = dd + (long)(nt + i) * ldd;
        if (mt + GEMM_TM <= Mv) {
            VSTORE_TM(acc[i], 0, out);
        } else {
            float tmp[GEMM_TM];
            VSTORE_TM(acc[i], 0, tmp);
            for (int j = 0; mt + j < Mv; ++j) out[j] = tmp[j];
        }
    }
}

// few columns: one work-group per weight row m; items take 32-value chunks in turn, then reduce
kernel void k_mul_mv(TENSOR(a), int a_t, int r2, int r3, global const uchar* b_p, ulong b_o, long ldb, long sb2,
                     long sb3, int N, int b2, global uchar* d_p, ulong d_o, long ldd, long sd2, long sd3,
                     local float* scratch) {
    const int m = get_group_id(0), ib = get_global_id(1);
    const int lid = get_local_id(0), ls = get_local_size(0);
    const int i2 = ib % b2, i3 = ib / b2, K = a_ne.s0;
    global const uchar* row = AT(a, 0, m, i2 / r2, i3 / r3);
    global const float* bb = (global const float*)(b_p + b_o) + i2 * sb2 + i3 * sb3;
    float acc[MV_NMAX];
    for (int n = 0; n < MV_NMAX; ++n) acc[n] = 0.0f;
    const int nc = (K + 31) / 32;
    float y[32];
    for (int c = lid; c < nc; c += ls) {
        load32(a_t, row, a_nb.s0, c, K, y);
        const int k0 = 32 * c, kn = min(32, K - k0);
        for (int n = 0; n < N; ++n) {
            global const float* bn = bb + (long)n * ldb + k0;
            float s = 0.0f;
            if (kn == 32) {
                for (int l = 0; l < 32; ++l) s = mad(y[l], bn[l], s);
            } else {
                for (int l = 0; l < kn; ++l) s = mad(y[l], bn[l], s);
            }
            acc[n] += s;
        }
    }
    global float* dd = (global float*)(d_p + d_o) + i2 * sd2 + i3 * sd3 + m;
    for (int n = 0; n < N; ++n) {
        const float s = group_sum(acc[n], scratch);
        if (lid == 0) dd[(long)n * ldd] = s;
    }
}

// MUL_MAT_ID: dst[m, e, t] = as[:, m, ids[e, t]] . b[:, e % b1, t]; bp holds b as f32 rows [t][b1][K] (rounded like
// MUL_MAT's activations). One work-group per (m, e, t); a bad expert id writes 0 and is reported.
kernel void k_mul_mat_id(TENSOR(a), int a_t, TENSOR(ids), global const float* bp, int b1, TENSOR(d), global int* err,
                         int code, local float* scratch) {
    const int g = get_group_id(0), lid = get_local_id(0), ls = get_local_size(0);
    const int M = a_ne.s1, n_used = ids_ne.s0, K = a_ne.s0;
    const int m = g % M, e = (g / M) % n_used, t = g / (M * n_used);
    const int expert = *(global const int*)AT(ids, e, t, 0, 0);
    if (expert < 0 || expert >= a_ne.s2) {
        if (lid == 0) {
            if (m == 0) report_error(err, code);
            *(global float*)AT(d, m, e, t, 0) = 0.0f;
        }
        return;
    }
    global const uchar* row = AT(a, 0, m, expert, 0);
    global const float* x = bp + ((long)t * b1 + e % b1) * K;
    float acc = 0.0f;
    float y[32];
    for (int c = lid; c < (K + 31) / 32; c += ls) {
        load32(a_t, row, a_nb.s0, c, K, y);
        const int kn = min(32, K - 32 * c);
        for (int l = 0; l < kn; ++l) acc = mad(y[l], x[32 * c + l], acc);
    }
    acc = group_sum(acc, scratch);
    if (lid == 0) *(global float*)AT(d, m, e, t, 0) = acc;
}

// OUT_PROD: dst[m, n, i2, i3] = sum_k a[m, k, i2 / r2, i3 / r3] * b[n, k, i2, i3] (a and b any float type)
kernel void k_out_prod(TENSOR(a), int a_t, TENSOR(b), int b_t, TENSOR(d), long n) {
    ITEM4(d_ne, n)
    const int r2 = d_ne.s2 / a_ne.s2, r3 = d_ne.s3 / a_ne.s3;
    float acc = 0.0f;
    for (int k = 0; k < a_ne.s1; ++k)
        acc = mad(load_f(AT(a, i0, k, i2 / r2, i3 / r3), a_t), load_f(AT(b, i1, k, i2, i3), b_t), acc);
    *(global float*)AT(d, i0, i1, i2, i3) = acc;
}
