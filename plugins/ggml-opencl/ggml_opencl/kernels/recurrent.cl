// ggml-opencl: the recurrent family, f32: SSM_CONV, SSM_SCAN, GATED_DELTA_NET, RWKV_WKV7.
// The scans run one work-item per (state row, head, sequence) and loop over the tokens; each item keeps its state
// row in the result's newest state slot (slot 0), which holds the final state when the loop ends, and copies it to
// slot j after the token j steps before the last. Outputs come first in the result, then K slots of n_s states.

// the f32 value at element (i0, i1, i2, i3) of tensor x; the f32 row (i1, i2, i3) of x (rows are packed: the ops
// require nb[0] = 4)
#define LDF(x, i0, i1, i2, i3) (*(global const float*)AT(x, i0, i1, i2, i3))
#define ROW(x, i1, i2, i3) ((global const float*)AT(x, 0, i1, i2, i3))

// SSM_CONV: d[i, t, s] = sum over k (ascending) of sx[t + k, i, s] * c[k, i]; one item per output
kernel void k_ssm_conv(TENSOR(sx), TENSOR(c), TENSOR(d), long n) {
    ITEM4(d_ne, n)
    float acc = 0.0f;
    for (int k = 0; k < c_ne.s0; ++k)
        acc += LDF(sx, i1 + k, i0, i2, 0) * LDF(c, k, i0, 0, 0);
    *(global float*)AT(d, i0, i1, i2, i3) = acc;
}

inline float softplus_f(float x) { return x > 20.0f ? x : log(1.0f + exp(x)); }

// state row `row` (len floats) copied to `dst`
inline void copy_row(global float* dst, global const float* row, int len) {
    for (int l = 0; l < len; ++l) dst[l] = row[l];
}

// SSM_SCAN: item (i, h, s) scans row i of head h of sequence s over d_state, starting from state row ids[s].
// y[i, h, t, s] = sum over n of st[n] * C[n, g, t, s] after st[n] = st[n] * exp(delta * A) + B[n, g, t, s] * x * delta
kernel void k_ssm_scan(TENSOR(s), TENSOR(x), TENSOR(dt), TENSOR(A), TENSOR(B), TENSOR(C), TENSOR(ids), TENSOR(d),
                       int k_slots, global int* err, int code, long n) {
    const long e = get_global_id(0);
    if (e >= n) return;
    const int d_state = s_ne.s0, head_dim = x_ne.s0, n_head = x_ne.s1, n_t = x_ne.s2, n_s = x_ne.s3;
    const int i = (int)(e % head_dim), h = (int)((e / head_dim) % n_head), seq = (int)(e / ((long)head_dim * n_head));
    const int g = h / (n_head / B_ne.s1);
    const int per_head = A_ne.s0 == 1;  // Mamba-2: one A per head
    global float* out = (global float*)(d_p + d_o);
    const long n_y = (long)head_dim * n_head * n_t * n_s, slot_len = (long)d_state * head_dim * n_head * n_s;
    const long row_at = (((long)seq * n_head + h) * head_dim + i) * d_state;
    global float* st = out + n_y + row_at;
    const int r = *(global const int*)AT(ids, seq, 0, 0, 0);
    if (r < 0 || r >= s_ne.s3) {
        report_error(err, code);
        return;
    }
    for (int l = 0; l < d_state; ++l) st[l] = LDF(s, l, i, h, r);
    for (int t = 0; t < n_t; ++t) {
        const float delta = softplus_f(LDF(dt, h, t, seq, 0));
        const float x_dt = LDF(x, i, h, t, seq) * delta;
        global const float* a_row = ROW(A, h, 0, 0);
        global const float* b_row = ROW(B, g, t, seq);
        global const float* c_row = ROW(C, g, t, seq);
        if (per_head) {
            const float decay = exp(delta * a_row[0]);
            for (int l = 0; l < d_state; ++l) st[l] = st[l] * decay + b_row[l] * x_dt;
        } else {
            for (int l = 0; l < d_state; ++l) st[l] = st[l] * exp(delta * a_row[l]) + b_row[l] * x_dt;
        }
        float acc = 0.0f;
        for (int l = 0; l < d_state; ++l) acc += st[l] * c_row[l];
        out[(((long)seq * n_t + t) * n_head + h) * head_dim + i] = acc;
        const int slot = n_t - 1 - t;
        if (slot > 0 && slot < k_slots) copy_row(st + slot * slot_len, st, d_state);
    }
}

// GATED_DELTA_NET: item (j, h, s) owns column j of head h's matrix M (state[i, j] = M[i][j], i fastest in memory).
// Per token: M[i][j] *= exp(g), delta = (v[j] - sum_i M[i][j] k[i]) * beta, M[i][j] += k[i] delta,
// out[j] = sum_i M[i][j] q[i] / sqrt(S); q/k head h % H_k of sequence s / (n_s / n_s_k)
kernel void k_gated_delta_net(TENSOR(q), TENSOR(k), TENSOR(v), TENSOR(g), TENSOR(beta), TENSOR(s), TENSOR(d),
                              int k_slots, long n) {
    const long e = get_global_id(0);
    if (e >= n) return;
    const int S = v_ne.s0, H = v_ne.s1, n_t = v_ne.s2, n_s = v_ne.s3;
    const int j = (int)(e % S), h = (int)((e / S) % H), seq = (int)(e / ((long)S * H));
    const int hq = h % q_ne.s1, sq = seq / (n_s / q_ne.s3);
    const int kda = g_ne.s0 == S;  // one gate per key row
    const float scale = 1.0f / sqrt((float)S);
    global float* out = (global float*)(d_p + d_o);
    const long n_y = (long)S * H * n_t * n_s, slot_len = (long)S * S * H * n_s;
    global float* col = out + n_y + (((long)seq * H + h) * S + j) * S;
    for (int l = 0; l < S; ++l) col[l] = LDF(s, l, j, h, seq);
    for (int t = 0; t < n_t; ++t) {
        global const float* g_row = ROW(g, h, t, seq);
        global const float* k_row = ROW(k, hq, t, sq);
        global const float* q_row = ROW(q, hq, t, sq);
        if (kda) {
            for (int l = 0; l < S; ++l) col[l] *= exp(g_row[l]);
        } else {
            const float gate = exp(g_row[0]);
            for (int l = 0; l < S; ++l) col[l] *= gate;
        }
        float kdot = 0.0f;
        for (int l = 0; l < S; ++l) kdot += col[l] * k_row[l];
        const float delta = (LDF(v, j, h, t, seq) - kdot) * LDF(beta, 0, h, t, seq);
        for (int l = 0; l < S; ++l) col[l] += k_row[l] * delta;
        float acc = 0.0f;
        for (int l = 0; l < S; ++l) acc += col[l] * q_row[l];
        out[(((long)seq * n_t + t) * H + h) * S + j] = acc * scale;
        const int slot = n_t - 1 - t;
        if (slot > 0 && slot < k_slots) copy_row(col + slot * slot_len, col, S);
    }
}

// RWKV_WKV7: item (i, h, s) owns value row i of head h's state (state[h, i, j], j fastest). Per token:
// sa = sum_j a[j] M[i, j]; M[i, j] = M[i, j] w[j] + v[i] k[j] + sa b[j]; out[i] = sum_j M[i, j] r[j]
kernel void k_rwkv_wkv7(TENSOR(r), TENSOR(w), TENSOR(k), TENSOR(v), TENSOR(a), TENSOR(b), TENSOR(s), TENSOR(d),
                        long n) {
    const long e = get_global_id(0);
    if (e >= n) return;
    const int S = k_ne.s0, H = k_ne.s1, n_tokens = k_ne.s2, n_s = s_ne.s1;
    const int i = (int)(e % S), h = (int)((e / S) % H), seq = (int)(e / ((long)S * H));
    const int per_seq = n_tokens / n_s;
    global float* out = (global float*)(d_p + d_o);
    const long row_at = (((long)seq * H + h) * S + i) * S;
    global float* row = out + (long)n_tokens * H * S + row_at;
    for (int l = 0; l < S; ++l) row[l] = LDF(s, ((long)h * S + i) * S + l, seq, 0, 0);
    for (int t = seq * per_seq; t < (seq + 1) * per_seq; ++t) {
        global const float* a_row = ROW(a, h, t, 0);
        global const float* b_row = ROW(b, h, t, 0);
        global const float* k_row = ROW(k, h, t, 0);
        global const float* r_row = ROW(r, h, t, 0);
        global const float* w_row = ROW(w, h, t, 0);
        float sa = 0.0f;
        for (int l = 0; l < S; ++l) sa += row[l] * a_row[l];
        const float vi = LDF(v, i, h, t, 0);
        for (int l = 0; l < S; ++l) row[l] = row[l] * w_row[l] + vi * k_row[l] + sa * b_row[l];
        float acc = 0.0f;
        for (int l = 0; l < S; ++l) acc += row[l] * r_row[l];
        out[((long)t * H + h) * S + i] = acc;
    }
}
