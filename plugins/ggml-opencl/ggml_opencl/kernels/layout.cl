// ggml-opencl: layout and fill ops. One work-item per destination element computes where its value comes from
// (REPEAT, CONCAT, PAD, ROLL, PAD_REFLECT_1D, DIAG, TRI) or what it is (ARANGE, FILL, TIMESTEP_EMBEDDING).
// Values of plain types move as raw bytes (es bytes per element), so every plain type is handled alike.

#define L_REPEAT 0
#define L_CONCAT 1
#define L_PAD 2
#define L_ROLL 3
#define L_PAD_REFLECT 4
#define L_DIAG 5
#define L_TRI 6
#define L_ARANGE 7
#define L_FILL 8
#define L_TIMESTEP 9
#define L_REPEAT_BACK 10

inline void copy_elem(global uchar* dst, global const uchar* src, int es) {
    for (int i = 0; i < es; ++i) dst[i] = src[i];
}

inline void zero_elem(global uchar* dst, int es) {
    for (int i = 0; i < es; ++i) dst[i] = 0;
}

inline int wrap(int i, int n) {
    const int r = i % n;
    return r < 0 ? r + n : r;
}

// p: eight integer parameters (meaning per mode); f0, f1: float parameters; es: element size in bytes
kernel void k_layout(int mode, int8 p, float f0, float f1, int es, TENSOR(a), int a_t, TENSOR(b), TENSOR(d), int d_t,
                     long n) {
    ITEM4(d_ne, n)
    global uchar* dst = AT(d, i0, i1, i2, i3);
    int4 j = (int4)(i0, i1, i2, i3);
    switch (mode) {
    case L_REPEAT:
        copy_elem(dst, AT(a, i0 % a_ne.s0, i1 % a_ne.s1, i2 % a_ne.s2, i3 % a_ne.s3), es);
        return;
    case L_CONCAT: {  // p.s0: the dimension
        const int dim = p.s0;
        const int ja = dim == 0 ? i0 : dim == 1 ? i1 : dim == 2 ? i2 : i3;
        const int na = dim == 0 ? a_ne.s0 : dim == 1 ? a_ne.s1 : dim == 2 ? a_ne.s2 : a_ne.s3;
        if (ja < na) {
            copy_elem(dst, AT(a, i0, i1, i2, i3), es);
        } else {
            const int k = ja - na;
            copy_elem(dst, AT(b, dim == 0 ? k : i0, dim == 1 ? k : i1, dim == 2 ? k : i2, dim == 3 ? k : i3), es);
        }
        return;
    }
    case L_PAD: {  // p: lp0, lp1, lp2, lp3, circular
        int4 s = j - p.s0123;
        if (p.s4) {
            s = (int4)(wrap(s.s0, a_ne.s0), wrap(s.s1, a_ne.s1), wrap(s.s2, a_ne.s2), wrap(s.s3, a_ne.s3));
        } else if (any(s < 0) || any(s >= a_ne)) {
            zero_elem(dst, es);
            return;
        }
        copy_elem(dst, AT(a, s.s0, s.s1, s.s2, s.s3), es);
        return;
    }
    case L_ROLL: {  // p: shifts
        const int4 s = (int4)(wrap(i0 - p.s0, a_ne.s0), wrap(i1 - p.s1, a_ne.s1), wrap(i2 - p.s2, a_ne.s2),
                              wrap(i3 - p.s3, a_ne.s3));
        copy_elem(dst, AT(a, s.s0, s.s1, s.s2, s.s3), es);
        return;
    }
    case L_PAD_REFLECT: {  // p.s0: left padding
        int s = i0 - p.s0;
        if (s < 0) s = -s;
        if (s >= a_ne.s0) s = 2 * (a_ne.s0 - 1) - s;
        copy_elem(dst, AT(a, s, i1, i2, i3), es);
        return;
    }
    case L_DIAG:
        if (i0 == i1) copy_elem(dst, AT(a, i0, 0, i2, i3), es);
        else zero_elem(dst, es);
        return;
    case L_TRI: {  // p.s0: 0 upper+diag, 1 upper, 2 lower+diag, 3 lower (column i0 against row i1)
        const int t = p.s0;
        const int keep = t == 0 ? i0 >= i1 : t == 1 ? i0 > i1 : t == 2 ? i0 <= i1 : i0 < i1;
        if (keep) copy_elem(dst, AT(a, i0, i1, i2, i3), es);
        else zero_elem(dst, es);
        return;
    }
    case L_ARANGE:  // start + step * i with one rounding
        store_f(dst, d_t, fma(f1, (float)i0, f0));
        return;
    case L_FILL:
        store_f(dst, d_t, f0);
        return;
    case L_TIMESTEP: {  // p: dim, max_period; row i1 holds [cos(t f_j), sin(t f_j)] for t = a[i1]
        const int nh = p.s0 / 2;
        const float t = *(global const float*)AT(a, i1, 0, 0, 0);
        float v = 0.0f;
        if (i0 < 2 * nh) {
            const int k = i0 < nh ? i0 : i0 - nh;
            const float freq = exp(-log((float)p.s1) * (float)k / (float)max(nh, 1));
            v = i0 < nh ? cos(t * freq) : sin(t * freq);
        }
        *(global float*)dst = v;
        return;
    }
    case L_REPEAT_BACK: {  // the sum of every tile of a at this position
        float s = 0.0f;
        for (int t3 = i3; t3 < a_ne.s3; t3 += d_ne.s3)
            for (int t2 = i2; t2 < a_ne.s2; t2 += d_ne.s2)
                for (int t1 = i1; t1 < a_ne.s1; t1 += d_ne.s1)
                    for (int t0 = i0; t0 < a_ne.s0; t0 += d_ne.s0) s += load_f(AT(a, t0, t1, t2, t3), a_t);
        store_f(dst, d_t, s);
        return;
    }
    default:
        return;
    }
}
