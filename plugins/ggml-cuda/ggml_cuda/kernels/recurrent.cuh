// The recurrent ops' per-item work, f32: SSM_CONV (one output), SSM_SCAN, GATED_DELTA_NET and RWKV_WKV7 (one state
// row of one head of one sequence, looped over the tokens). recurrent.cu runs one thread per item; the functions are
// GGML_HD so that tests/recurrent_harness.cu runs the same code on the host over every item.
//
// Results are ggml's: the outputs, then the states (K snapshot slots of n_s states for SSM_SCAN and
// GATED_DELTA_NET, slot 0 the newest). Each item keeps its state row in slot 0 of the result, updates it in place
// token by token (so slot 0 holds the final state at the end) and copies it to slot j after the token j steps before
// the last. Products and sums are rounded one by one (no contraction), in ggml's CPU order.
#pragma once

#include "common.cuh"

// byte offset of element (i0, i1, i2, i3) (host and device)
GGML_HD long long roff(const TDesc& d, long long i0, long long i1, long long i2, long long i3) {
    return i0 * d.nb[0] + i1 * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3];
}

// the f32 at element (i0, i1, i2, i3) of tensor p
GGML_HD float rld(const char* p, const TDesc& d, long long i0, long long i1, long long i2, long long i3) {
    return *(const float*)(p + roff(d, i0, i1, i2, i3));
}

GGML_HD float softplus_f(float x) { return x > 20.0f ? x : logf(fadd_rn(1.0f, expf(x))); }

GGML_HD void copy_row(float* dst, const float* row, long long len) {
    for (long long l = 0; l < len; ++l) dst[l] = row[l];
}

// SSM_CONV output e (flat over d [d_inner, n_t, n_s]): sum over k ascending of sx[t + k, i, s] * c[k, i]
GGML_HD void ssm_conv_item(const char* sx, const char* c, char* d, const TDesc& dsx, const TDesc& dc, const TDesc& dd,
                           long long e) {
    const long long i = e % dd.ne[0], t = (e / dd.ne[0]) % dd.ne[1], s = e / (dd.ne[0] * dd.ne[1]);
    float acc = 0.0f;
    for (long long k = 0; k < dc.ne[0]; ++k) {
        acc = fadd_rn(acc, fmul_rn(rld(sx, dsx, t + k, i, s, 0), rld(c, dc, k, i, 0, 0)));
    }
    *(float*)(d + roff(dd, i, t, s, 0)) = acc;
}

// SSM_SCAN item e = (i, h, seq) over [head_dim, n_head, n_s]: row i of head h, starting from state row ids[seq].
// Per token, delta = softplus(dt[h]), st[l] = st[l] * exp(delta * A[l or 0, h]) + B[l, g] * (x[i, h] * delta),
// y = sum over l of st[l] * C[l, g] (g = h / (n_head / n_group)). Returns false (nothing written) for a bad row.
GGML_HD bool ssm_scan_item(const char* s, const char* x, const char* dt, const char* A, const char* B, const char* C,
                           const char* ids, float* out, const TDesc& ds, const TDesc& dx, const TDesc& ddt,
                           const TDesc& dA, const TDesc& dB, const TDesc& dC, const TDesc& dids, int k_slots,
                           long long e) {
    const long long head_dim = dx.ne[0], n_head = dx.ne[1], n_t = dx.ne[2], n_s = dx.ne[3], d_state = ds.ne[0];
    const long long i = e % head_dim, h = (e / head_dim) % n_head, seq = e / (head_dim * n_head);
    const long long g = h / (n_head / dB.ne[1]);
    const int r = *(const int*)(ids + roff(dids, seq, 0, 0, 0));
    if (r < 0 || r >= ds.ne[3]) return false;
    const long long n_y = head_dim * n_head * n_t * n_s, slot_len = d_state * head_dim * n_head * n_s;
    float* st = out + n_y + ((seq * n_head + h) * head_dim + i) * d_state;
    for (long long l = 0; l < d_state; ++l) st[l] = rld(s, ds, l, i, h, r);
    for (long long t = 0; t < n_t; ++t) {
        const float delta = softplus_f(rld(dt, ddt, h, t, seq, 0));
        const float x_dt = fmul_rn(rld(x, dx, i, h, t, seq), delta);
        const float decay_h = expf(fmul_rn(delta, rld(A, dA, 0, h, 0, 0)));
        float acc = 0.0f;
        for (long long l = 0; l < d_state; ++l) {
            const float decay = dA.ne[0] == 1 ? decay_h : expf(fmul_rn(delta, rld(A, dA, l, h, 0, 0)));
            const float v = fadd_rn(fmul_rn(st[l], decay), fmul_rn(rld(B, dB, l, g, t, seq), x_dt));
            st[l] = v;
            acc = fadd_rn(acc, fmul_rn(v, rld(C, dC, l, g, t, seq)));
        }
        out[((seq * n_t + t) * n_head + h) * head_dim + i] = acc;
        const long long slot = n_t - 1 - t;
        if (slot > 0 && slot < k_slots) copy_row(st + slot * slot_len, st, d_state);
    }
    return true;
}

// GATED_DELTA_NET item e = (j, h, seq) over [S, H, n_s]: column j of head h's matrix M (state[i, j] = M[i][j]).
// Per token: M[i][j] *= exp(g[i or 0]), delta = (v[j] - sum_i M[i][j] k[i]) * beta, M[i][j] += k[i] * delta,
// out[j] = (sum_i M[i][j] q[i]) * scale; q/k head h % H_k of sequence seq / (n_s / n_s_k)
GGML_HD void gated_delta_net_item(const char* q, const char* k, const char* v, const char* g, const char* beta,
                                  const char* state, float* out, const TDesc& dq, const TDesc& dk, const TDesc& dv,
                                  const TDesc& dg, const TDesc& dbeta, const TDesc& dstate, int k_slots, float scale,
                                  long long e) {
    const long long S = dv.ne[0], H = dv.ne[1], n_t = dv.ne[2], n_s = dv.ne[3];
    const long long j = e % S, h = (e / S) % H, seq = e / (S * H);
    const long long hq = h % dq.ne[1], sq = seq / (n_s / dq.ne[3]);
    const bool kda = dg.ne[0] == S;
    const long long n_y = S * H * n_t * n_s, slot_len = S * S * H * n_s;
    float* col = out + n_y + ((seq * H + h) * S + j) * S;
    for (long long l = 0; l < S; ++l) col[l] = rld(state, dstate, l, j, h, seq);
    for (long long t = 0; t < n_t; ++t) {
        const float gate = expf(rld(g, dg, 0, h, t, seq));
        float kdot = 0.0f;
        for (long long l = 0; l < S; ++l) {
            const float m = fmul_rn(col[l], kda ? expf(rld(g, dg, l, h, t, seq)) : gate);
            col[l] = m;
            kdot = fadd_rn(kdot, fmul_rn(m, rld(k, dk, l, hq, t, sq)));
        }
        const float delta = fmul_rn(fsub_rn(rld(v, dv, j, h, t, seq), kdot), rld(beta, dbeta, 0, h, t, seq));
        float acc = 0.0f;
        for (long long l = 0; l < S; ++l) {
            const float m = fadd_rn(col[l], fmul_rn(rld(k, dk, l, hq, t, sq), delta));
            col[l] = m;
            acc = fadd_rn(acc, fmul_rn(m, rld(q, dq, l, hq, t, sq)));
        }
        out[((seq * n_t + t) * H + h) * S + j] = fmul_rn(acc, scale);
        const long long slot = n_t - 1 - t;
        if (slot > 0 && slot < k_slots) copy_row(col + slot * slot_len, col, S);
    }
}

// RWKV_WKV7 item e = (i, h, seq) over [S, H, n_s]: value row i of head h (state[h, i, j]); the operands r, w, k, v,
// a, b are [S, H, n_tokens], sequence seq owning tokens [seq * n_tokens / n_s, (seq + 1) * n_tokens / n_s).
// Per token: sa = sum_j a[j] M[i, j]; M[i, j] = M[i, j] w[j] + v[i] k[j] + sa b[j]; out[i] = sum_j M[i, j] r[j]
GGML_HD void rwkv_wkv7_item(const char* r, const char* w, const char* k, const char* v, const char* a, const char* b,
                            const char* state, float* out, const TDesc& dr, const TDesc& dw, const TDesc& dk,
                            const TDesc& dv, const TDesc& da, const TDesc& db, const TDesc& dstate, long long e) {
    const long long S = dk.ne[0], H = dk.ne[1], n_tokens = dk.ne[2], n_s = dstate.ne[1];
    const long long i = e % S, h = (e / S) % H, seq = e / (S * H);
    const long long per_seq = n_tokens / n_s;
    float* row = out + n_tokens * H * S + ((seq * H + h) * S + i) * S;
    for (long long l = 0; l < S; ++l) row[l] = rld(state, dstate, (h * S + i) * S + l, seq, 0, 0);
    for (long long t = seq * per_seq; t < (seq + 1) * per_seq; ++t) {
        float sa = 0.0f;
        for (long long l = 0; l < S; ++l) sa = fadd_rn(sa, fmul_rn(row[l], rld(a, da, l, h, t, 0)));
        const float vi = rld(v, dv, i, h, t, 0);
        float acc = 0.0f;
        for (long long l = 0; l < S; ++l) {
            const float wk = fadd_rn(fmul_rn(row[l], rld(w, dw, l, h, t, 0)), fmul_rn(vi, rld(k, dk, l, h, t, 0)));
            const float m = fadd_rn(wk, fmul_rn(sa, rld(b, db, l, h, t, 0)));
            row[l] = m;
            acc = fadd_rn(acc, fmul_rn(m, rld(r, dr, l, h, t, 0)));
        }
        out[(t * H + h) * S + i] = acc;
    }
}
