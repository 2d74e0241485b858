// ggml-opencl: attention building blocks: SOFT_MAX (ext), ROPE (NORMAL/NEOX, YaRN), FLASH_ATTN_EXT, DIAG_MASK.

// ALiBi slope of head h (1 when max_bias is 0): m0^(h+1) for the first n_head_log2 heads, then m1^(2(h-n)+1)
inline float alibi_slope(float max_bias, float m0, float m1, int n_head_log2, int h) {
    if (max_bias <= 0.0f) return 1.0f;
    return h < n_head_log2 ? pow(m0, (float)(h + 1)) : pow(m1, (float)(2 * (h - n_head_log2) + 1));
}

// softmax(x * scale + slope * mask) per row, sinks joining the denominator; one work-group per row
kernel void k_soft_max(float scale, float max_bias, float m0, float m1, int n_head_log2, TENSOR(a), int has_mask,
                       TENSOR(m), int m_t, int has_sinks, TENSOR(s), TENSOR(d), local float* scratch) {
    const int r = get_group_id(0);
    const int i1 = r % a_ne.s1, i2 = (r / a_ne.s1) % a_ne.s2, i3 = r / (a_ne.s1 * a_ne.s2);
    const int lid = get_local_id(0), ls = get_local_size(0), n = a_ne.s0;
    const float slope = alibi_slope(max_bias, m0, m1, n_head_log2, i2);
    global const uchar* x = AT(a, 0, i1, i2, i3);
    global const uchar* mrow = has_mask ? AT(m, 0, i1, i2 % m_ne.s2, i3 % m_ne.s3) : x;
    global uchar* y = AT(d, 0, i1, i2, i3);
    float mx = -INFINITY;
    for (int i = lid; i < n; i += ls) {
        float w = *(global const float*)(x + i * a_nb.s0) * scale;
        if (has_mask) w += slope * load_f(mrow + i * m_nb.s0, m_t);
        mx = fmax(mx, w);
    }
    mx = group_max(mx, scratch);
    float sink = 0.0f;
    if (has_sinks) {
        sink = *(global const float*)AT(s, i2, 0, 0, 0);
        mx = fmax(mx, sink);
    }
    float sum = 0.0f;
    for (int i = lid; i < n; i += ls) {
        float w = *(global const float*)(x + i * a_nb.s0) * scale;
        if (has_mask) w += slope * load_f(mrow + i * m_nb.s0, m_t);
        const float e = exp(w - mx);
        sum += e;
        *(global float*)(y + i * d_nb.s0) = e;
    }
    sum = group_sum(sum, scratch);
    if (has_sinks) sum += exp(sink - mx);
    const float inv = 1.0f / sum;
    for (int i = lid; i < n; i += ls) *(global float*)(y + i * d_nb.s0) *= inv;
}

#define ROPE_NORMAL 0
#define ROPE_NEOX 2
#define ROPE_MROPE 8
#define ROPE_VISION 24
#define ROPE_IMROPE 40

// ROPE: one work-item per pair slot j (ne0 / 2 per row) of (head i1, token i2, i3).
// NORMAL rotates (lo + 2i, lo + 2i + 1), NEOX/MROPE/IMROPE (lo + i, lo + i + n_dims/2), VISION (i, i + n_dims),
// with lo = n_offs; channels outside the rotated range are copied. Multi-section modes take the position of the
// pair's section (t, h, w, e: pos[i2 + k * ne2]). theta advances by repeated float multiplication, as ggml's cache.
kernel void k_rope(int mode, int n_dims, int n_offs, int4 sect, float theta_scale, float freq_scale,
                   float ext_factor, float mscale, float corr0, float corr1, TENSOR(a), int t, TENSOR(p), int has_ff,
                   TENSOR(f), TENSOR(d), long n) {
    ITEM4(((int4)(a_ne.s0 / 2, a_ne.s1, a_ne.s2, a_ne.s3)), n)
    const int j = i0, nh = n_dims / 2, vision = mode == ROPE_VISION;
    const int lo = n_offs, hi = n_offs + n_dims;
    if (!vision && (2 * j < lo || 2 * j >= hi)) {
        store_f(AT(d, 2 * j, i1, i2, i3), t, load_f(AT(a, 2 * j, i1, i2, i3), t));
        store_f(AT(d, 2 * j + 1, i1, i2, i3), t, load_f(AT(a, 2 * j + 1, i1, i2, i3), t));
        return;
    }
    const int i = vision ? j : j - lo / 2;  // the pair's index in the rotation
    int k0, k1;
    if (vision) { k0 = i; k1 = i + n_dims; }
    else if (mode == ROPE_NORMAL) { k0 = lo + 2 * i; k1 = k0 + 1; }
    else { k0 = lo + i; k1 = lo + i + nh; }
    int which = 0, power = i;
    if (mode & ROPE_MROPE) {
        const int sector = i % (sect.s0 + sect.s1 + sect.s2 + sect.s3);
        const int s01 = sect.s0 + sect.s1, s012 = s01 + sect.s2;
        if (mode == ROPE_IMROPE) {
            const int r = sector % 3;
            which = (r == 0 && sector < 3 * sect.s0) ? 0 : (r == 1 && sector < 3 * sect.s1) ? 1
                  : (r == 2 && sector < 3 * sect.s2) ? 2 : 3;
        } else {
            which = sector < sect.s0 ? 0 : sector < s01 ? 1 : sector < s012 ? 2 : 3;
        }
        if (vision) power = sector - (which == 0 ? 0 : which == 1 ? sect.s0 : which == 2 ? s01 : s012);
    }
    float theta_extrap = (float)*(global const int*)AT(p, i2 + which * a_ne.s2, 0, 0, 0);
    for (int k = 0; k < power; ++k) theta_extrap *= theta_scale;
    if (has_ff) theta_extrap = theta_extrap / *(global const float*)AT(f, i, 0, 0, 0);
    const float theta_interp = freq_scale * theta_extrap;
    float theta = theta_interp;
    if (ext_factor != 0.0f) {
        const float y = ((float)i - corr0) / fmax(0.001f, corr1 - corr0);
        const float ramp = (1.0f - fmin(1.0f, fmax(0.0f, y))) * ext_factor;
        theta = fma(theta_interp, 1.0f - ramp, theta_extrap * ramp);  // ggml's compilers fuse this one
    }
    const float c = cos(theta) * mscale, s = sin(theta) * mscale;
    const float x0 = load_f(AT(a, k0, i1, i2, i3), t), x1 = load_f(AT(a, k1, i1, i2, i3), t);
    store_f(AT(d, k0, i1, i2, i3), t, x0 * c - x1 * s);
    store_f(AT(d, k1, i1, i2, i3), t, x0 * s + x1 * c);
}

// DIAG_MASK_INF / _ZERO: element (i0, i1) with i0 > n_past + i1 becomes `value`
kernel void k_diag_mask(int n_past, float value, TENSOR(a), TENSOR(d), long n) {
    ITEM4(a_ne, n)
    const float x = *(global const float*)AT(a, i0, i1, i2, i3);
    *(global float*)AT(d, i0, i1, i2, i3) = i0 > n_past + i1 ? value : x;
}

#ifndef FA_DMAX
#define FA_DMAX 256
#endif

// FLASH_ATTN_EXT: one work-item per (query iq, head h, i3), online softmax over the kv positions.
// dst is [Dv, n_head, n_q, ne3]; GQA maps head h to kv head h / (n_head / n_head_kv)
kernel void k_flash_attn(float scale, float max_bias, float m0, float m1, int n_head_log2, float softcap,
                         TENSOR(q), TENSOR(k), int k_t, TENSOR(v), int v_t, int has_mask, TENSOR(m),
                         int has_sinks, TENSOR(s), TENSOR(d), long n) {
    ITEM4(((int4)(q_ne.s1, q_ne.s2, q_ne.s3, 1)), n)
    const int iq = i0, h = i1;
    i3 = i2;
    const int dk = q_ne.s0, dv = v_ne.s0, n_kv = k_ne.s1;
    const int hk = h / (q_ne.s2 / k_ne.s2), hv = h / (q_ne.s2 / v_ne.s2);
    const float slope = alibi_slope(max_bias, m0, m1, n_head_log2, h);
    global const uchar* qrow = AT(q, 0, iq, h, i3);
    global const uchar* mrow = has_mask ? AT(m, 0, iq, h % m_ne.s2, i3 % m_ne.s3) : qrow;
    float acc[FA_DMAX];
    for (int i = 0; i < dv; ++i) acc[i] = 0.0f;
    float M = -INFINITY, S = 0.0f;
    const float sc = softcap != 0.0f ? scale / softcap : scale;
    const int round_q = k_t == T_F16;
    for (int j = 0; j < n_kv; ++j) {
        const float mv = has_mask ? slope * vload_half(0, (global const half*)(mrow + j * m_nb.s0)) : 0.0f;
        if (mv == -INFINITY) continue;
        global const uchar* krow = AT(k, 0, j, hk, i3);
        float dot = 0.0f;
        for (int i = 0; i < dk; ++i) {
            float qi = *(global const float*)(qrow + i * q_nb.s0);
            if (round_q) qi = round_f16(qi);
            dot += qi * load_f(krow + i * k_nb.s0, k_t);
        }
        float sv = dot * sc;
        if (softcap != 0.0f) sv = softcap * tanh(sv);
        sv += mv;
        if (sv == -INFINITY) continue;
        const float Mold = M;
        float ms = 1.0f, vs = 1.0f;
        if (sv > M) {
            M = sv;
            ms = exp(Mold - M);
            for (int i = 0; i < dv; ++i) acc[i] *= ms;
        } else {
            vs = exp(sv - M);
        }
        global const uchar* vrow = AT(v, 0, j, hv, i3);
        for (int i = 0; i < dv; ++i) acc[i] += vs * load_f(vrow + i * v_nb.s0, v_t);
        S = S * ms + vs;
    }
    if (has_sinks) {
        const float sk = *(global const float*)AT(s, h, 0, 0, 0);
        float ms = 1.0f, vs = 1.0f;
        if (sk > M) {
            ms = exp(M - sk);
            for (int i = 0; i < dv; ++i) acc[i] *= ms;
        } else {
            vs = exp(sk - M);
        }
        S = S * ms + vs;
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int i = 0; i < dv; ++i) *(global float*)AT(d, i, h, iq, i3) = acc[i] * inv;
}
