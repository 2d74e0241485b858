// ggml-opencl: MUL_MAT helpers, MUL_MAT_ID, OUT_PROD. dst[n, m] = sum_k a[m, k] * b[n, k] (a: [K, M] weights of any
// supported type, b: [K, N]).
//
// The products themselves (k_gemm, k_mv) are in matmul_tuned.cl, built per tuned configuration. Here:
//  * k_pack_a dequantizes / converts the weights once into f32 panels [M/tm][K][tm] for k_gemm (tm: the tuned
//    configuration's vector width, a run-time argument so that one build serves every configuration);
//  * k_pack_b turns the activations into contiguous f32 rows, rounded like ggml's dot type when asked;
//  * the MUL_MAT_ID and OUT_PROD kernels.

// weights rows [m_base, m_base + Mc) of every weight matrix -> f32 panels; padded rows are zero
kernel void k_pack_a(TENSOR(a), int a_t, int m_base, int Mc, int tm, global float* at, long n) {
    const int K = a_ne.s0;
    ITEM4(((int4)((K + 31) / 32, Mc, a_ne.s2, a_ne.s3)), n)
    const int c = i0, m = i1, ia = i2 + i3 * a_ne.s2;
    float y[32];
    if (m_base + m < a_ne.s1) load32(a_t, AT(a, 0, m_base + m, i2, i3), a_nb.s0, c, K, y);
    else for (int l = 0; l < 32; ++l) y[l] = 0.0f;
    global float* panel = at + (long)ia * Mc * K + (long)(m / tm) * K * tm + m % tm;
    const int kn = min(32, K - 32 * c);
    for (int l = 0; l < kn; ++l) panel[(long)(32 * c + l) * tm] = y[l];
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
    if (mode == R_Q8_0) {  // ggml-cpu's x86 quantize_row_q8_0: d = amax / 127 (stored as f16), q = rint(x * 127 / amax)
        float amax = 0.0f;
        for (int k = 0; k < kn; ++k) amax = fmax(amax, fabs(x[k]));
        const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f, dh = round_f16(d);
        for (int k = 0; k < kn; ++k) out[k] = rint(x[k] * id) * dh;  // half to even, as _mm256_round_ps
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
