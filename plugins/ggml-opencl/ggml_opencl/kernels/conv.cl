// ggml-opencl: the convolution family, one work-item per output element: IM2COL, CONV_2D, CONV_2D_DW,
// CONV_TRANSPOSE_1D/2D, POOL_1D/2D, UPSCALE. Layouts are ggml's: images [W, H, C, N], 2-d kernels [KW, KH, IC, OC].
// An f16 kernel rounds the input values to f16 before the products (ggml writes its patches in the kernel's type).

// p: s0, s1, p0, p1, d0, d1, is_2d
kernel void k_im2col(int8 p, TENSOR(a), TENSOR(b), int b_t, TENSOR(d), int d_t, long n) {
    ITEM4(d_ne, n)
    float v = 0.0f;
    if (p.s6) {  // [IC*KH*KW, OW, OH, N]
        const int kw = a_ne.s0, kh = a_ne.s1;
        const int kx = i0 % kw, ky = (i0 / kw) % kh, ic = i0 / (kw * kh);
        const int x = i1 * p.s0 + kx * p.s4 - p.s2, y = i2 * p.s1 + ky * p.s5 - p.s3;
        if (x >= 0 && x < b_ne.s0 && y >= 0 && y < b_ne.s1) v = load_f(AT(b, x, y, ic, i3), b_t);
    } else {  // [IC*KW, OW, N, 1]
        const int kw = a_ne.s0;
        const int kx = i0 % kw, ic = i0 / kw;
        const int x = i1 * p.s0 + kx * p.s4 - p.s2;
        if (x >= 0 && x < b_ne.s0) v = load_f(AT(b, x, ic, i2, 0), b_t);
    }
    store_f(AT(d, i0, i1, i2, i3), d_t, v);
}

// CONV_2D: dst[ox, oy, oc, n] = sum over (ic, ky, kx) of b[x, y, ic, n] * a[kx, ky, ic, oc]; p: s0, s1, p0, p1, d0, d1
kernel void k_conv_2d(int8 p, TENSOR(a), int a_t, TENSOR(b), int b_t, TENSOR(d), long n) {
    ITEM4(d_ne, n)
    const int round_in = a_t == T_F16;
    float acc = 0.0f;
    for (int ic = 0; ic < a_ne.s2; ++ic)
        for (int ky = 0; ky < a_ne.s1; ++ky) {
            const int y = i1 * p.s1 + ky * p.s5 - p.s3;
            if (y < 0 || y >= b_ne.s1) continue;
            for (int kx = 0; kx < a_ne.s0; ++kx) {
                const int x = i0 * p.s0 + kx * p.s4 - p.s2;
                if (x < 0 || x >= b_ne.s0) continue;
                float v = load_f(AT(b, x, y, ic, i3), b_t);
                if (round_in) v = round_f16(v);
                acc += v * load_f(AT(a, kx, ky, ic, i2), a_t);
            }
        }
    *(global float*)AT(d, i0, i1, i2, i3) = acc;
}

// CONV_2D_DW: one [KW, KH] filter per channel; dst[ox, oy, c, n] (any result strides)
kernel void k_conv_2d_dw(int8 p, TENSOR(a), TENSOR(b), TENSOR(d), long n) {
    ITEM4(d_ne, n)
    float acc = 0.0f;
    for (int ky = 0; ky < a_ne.s1; ++ky) {
        const int y = i1 * p.s1 + ky * p.s5 - p.s3;
        if (y < 0 || y >= b_ne.s1) continue;
        for (int kx = 0; kx < a_ne.s0; ++kx) {
            const int x = i0 * p.s0 + kx * p.s4 - p.s2;
            if (x < 0 || x >= b_ne.s0) continue;
            acc += *(global const float*)AT(b, x, y, i2, i3) * *(global const float*)AT(a, kx, ky, 0, i2);
        }
    }
    *(global float*)AT(d, i0, i1, i2, i3) = acc;
}

// CONV_TRANSPOSE_1D: a [K, OC, IC], b [L, IC]: dst[t, oc] = sum over ic and taps with l*s0 + tap = t
kernel void k_conv_transpose_1d(int s0, TENSOR(a), int a_t, TENSOR(b), TENSOR(d), long n) {
    ITEM4(d_ne, n)
    const int round_in = a_t == T_F16;
    float acc = 0.0f;
    for (int ic = 0; ic < a_ne.s2; ++ic)
        for (int tap = i0 % s0; tap < a_ne.s0 && tap <= i0; tap += s0) {
            const int l = (i0 - tap) / s0;
            if (l >= b_ne.s0) continue;
            float v = *(global const float*)AT(b, l, ic, 0, 0);
            if (round_in) v = round_f16(v);
            acc += v * load_f(AT(a, tap, i1, ic, 0), a_t);
        }
    *(global float*)AT(d, i0, i1, i2, i3) = acc;
}

// CONV_TRANSPOSE_2D: a [KW, KH, OC, IC], b [W, H, IC, N]: dst[ox, oy, oc, n]
kernel void k_conv_transpose_2d(int s, TENSOR(a), int a_t, TENSOR(b), TENSOR(d), long n) {
    ITEM4(d_ne, n)
    const int round_in = a_t == T_F16;
    float acc = 0.0f;
    for (int ic = 0; ic < a_ne.s3; ++ic)
        for (int ky = i1 % s; ky < a_ne.s1 && ky <= i1; ky += s) {
            const int y = (i1 - ky) / s;
            if (y >= b_ne.s1) continue;
            for (int kx = i0 % s; kx < a_ne.s0 && kx <= i0; kx += s) {
                const int x = (i0 - kx) / s;
                if (x >= b_ne.s0) continue;
                float v = *(global const float*)AT(b, x, y, ic, i3);
                if (round_in) v = round_f16(v);
                acc += v * load_f(AT(a, kx, ky, i2, ic), a_t);
            }
        }
    *(global float*)AT(d, i0, i1, i2, i3) = acc;
}

// POOL_2D (p: op, k0, k1, s0, s1, p0, p1): AVG divides by k0*k1 (padding counts), MAX starts from -FLT_MAX
// POOL_1D (p: op, k0, s0, p0): AVG divides by the cells inside the signal
kernel void k_pool(int two_d, int8 p, TENSOR(a), int a_t, TENSOR(d), long n) {
    ITEM4(d_ne, n)
    const int is_max = p.s0 == 0;
    float acc = is_max ? -FLT_MAX : 0.0f;
    if (two_d) {
        for (int ky = 0; ky < p.s2; ++ky) {
            const int y = i1 * p.s4 - p.s6 + ky;
            for (int kx = 0; kx < p.s1; ++kx) {
                const int x = i0 * p.s3 - p.s5 + kx;
                if (x < 0 || x >= a_ne.s0 || y < 0 || y >= a_ne.s1) continue;
                const float v = load_f(AT(a, x, y, i2, i3), a_t);
                acc = is_max ? fmax(acc, v) : acc + v;
            }
        }
        if (!is_max) acc /= (float)(p.s1 * p.s2);
    } else {
        int count = 0;
        for (int k = 0; k < p.s1; ++k) {
            const int x = i0 * p.s2 - p.s3 + k;
            if (x < 0 || x >= a_ne.s0) continue;
            const float v = load_f(AT(a, x, i1, i2, i3), a_t);
            acc = is_max ? fmax(acc, v) : acc + v;
            ++count;
        }
        if (!is_max) acc = count > 0 ? acc / (float)count : 0.0f;
    }
    *(global float*)AT(d, i0, i1, i2, i3) = acc;
}

inline float cubic_w1(float v) { return ((-0.75f + 2.0f) * v - (-0.75f + 3.0f)) * v * v + 1.0f; }
inline float cubic_w2(float v) { return ((-0.75f * v - 5.0f * -0.75f) * v + 8.0f * -0.75f) * v - 4.0f * -0.75f; }

inline float cubic_weight(int j, float t) {
    switch (j) {
        case 0: return cubic_w2(t + 1.0f);
        case 1: return cubic_w1(t);
        case 2: return cubic_w1(1.0f - t);
        default: return cubic_w2(2.0f - t);
    }
}

// UPSCALE: mode 0 nearest (every dim: i / sf), 1 bilinear, 2 bicubic in dims 0, 1 (source coordinate
// (i + off) / sf - off); dims 2, 3 always nearest
kernel void k_upscale(int mode, float4 sf, float off, TENSOR(a), TENSOR(d), long n) {
    ITEM4(d_ne, n)
    const int j2 = (int)((float)i2 / sf.s2), j3 = (int)((float)i3 / sf.s3);
    float v;
    if (mode == 0) {
        v = *(global const float*)AT(a, (int)((float)i0 / sf.s0), (int)((float)i1 / sf.s1), j2, j3);
    } else {
        const float y = ((float)i1 + off) / sf.s1 - off, x = ((float)i0 + off) / sf.s0 - off;
        const int y0 = (int)floor(y), x0 = (int)floor(x);
        const int W = a_ne.s0, H = a_ne.s1;
        if (mode == 1) {
            const int ya = clamp(y0, 0, H - 1), yb = clamp(y0 + 1, 0, H - 1);
            const int xa = clamp(x0, 0, W - 1), xb = clamp(x0 + 1, 0, W - 1);
            const float dy = clamp(y - (float)ya, 0.0f, 1.0f), dx = clamp(x - (float)xa, 0.0f, 1.0f);
            const float p00 = *(global const float*)AT(a, xa, ya, j2, j3), p01 = *(global const float*)AT(a, xb, ya, j2, j3);
            const float p10 = *(global const float*)AT(a, xa, yb, j2, j3), p11 = *(global const float*)AT(a, xb, yb, j2, j3);
            v = p00 * (1.0f - dx) * (1.0f - dy) + p01 * dx * (1.0f - dy) + p10 * (1.0f - dx) * dy + p11 * dx * dy;
        } else {
            const float ty = y - (float)y0, tx = x - (float)x0;
            v = 0.0f;
            for (int jy = 0; jy < 4; ++jy) {
                const int yy = clamp(y0 - 1 + jy, 0, H - 1);
                float row = 0.0f;
                for (int jx = 0; jx < 4; ++jx)
                    row += *(global const float*)AT(a, clamp(x0 - 1 + jx, 0, W - 1), yy, j2, j3) * cubic_weight(jx, tx);
                v += row * cubic_weight(jy, ty);
            }
        }
    }
    *(global float*)AT(d, i0, i1, i2, i3) = v;
}
