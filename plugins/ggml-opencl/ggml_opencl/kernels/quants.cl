// ggml-opencl: quantized blocks, decoded 32 values at a time, and the legacy quantizers.
//
// dq32(type, row, c, y) writes elements [32c, 32c + 32) of a quantized row as floats, with ggml's dequantize_row_*
// arithmetic (float products in ggml's order, no contraction), so values match ggml bit for bit.
// Block layouts (bytes): see ggml-common.h; K-quant super-blocks hold 256 values = 8 chunks of 32.

constant float IQ4NL_VALUES[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
// twice the E2M1 values (the block scale carries the factor 1/2)
constant float MXFP4_VALUES[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

inline int type_block_bytes(int t) {
    switch (t) {
        case T_Q4_0: return 18;
        case T_Q4_1: return 20;
        case T_Q5_0: return 22;
        case T_Q5_1: return 24;
        case T_Q8_0: return 34;
        case T_IQ4_NL: return 18;
        case T_Q2_K: return 84;
        case T_Q3_K: return 110;
        case T_Q4_K: return 144;
        case T_Q5_K: return 176;
        case T_Q6_K: return 210;
        case T_IQ4_XS: return 136;
        case T_TQ1_0: return 54;
        case T_TQ2_0: return 66;
        case T_MXFP4: return 17;
        case T_NVFP4: return 36;
        case T_Q1_0: return 18;
        default: return 0;
    }
}

// E8M0 scale times 1/2: 2^(e - 128), subnormal below e = 2
inline float e8m0_half(uchar e) {
    return as_float(e < 2 ? (0x00200000u << e) : ((uint)(e - 1) << 23));
}

// unsigned E4M3 (bias 7, bit 7 ignored) times 1/2; 0x00 and 0x7f give 0
inline float ue4m3_half(uchar x) {
    if (x == 0 || x == 0x7f) return 0.0f;
    const int ex = (x >> 3) & 0xF;
    const float man = (float)(x & 7);
    const float raw = ex == 0 ? ldexp(man, -9) : ldexp(1.0f + man / 8.0f, ex - 7);
    return raw * 0.5f;
}

// TQ1_0: element e (0..255) of a block: base-3 digits packed five to a byte (four in qh)
inline int tq1_digit(global const uchar* b, int e) {
    int q, n;
    if (e < 160) { q = b[e & 31]; n = e >> 5; }
    else if (e < 240) { q = b[32 + ((e - 160) & 15)]; n = (e - 160) >> 4; }
    else { q = b[48 + ((e - 240) & 3)]; n = (e - 240) >> 2; }
    int p = 1;
    for (int i = 0; i < n; ++i) p *= 3;
    return (((q * p) & 0xFF) * 3) >> 8;
}

// sub-block j (0..7) of a Q4_K / Q5_K block b (d, dmin, scales[12], ...): its scale d·sc and its min dmin·m, with
// the 6-bit sc and m of ggml's get_scale_min_k4
inline void k4_scale_min(global const uchar* b, int j, float* d, float* m) {
    global const uchar* q = b + 4;
    float sc, mn;
    if (j < 4) {
        sc = (float)(q[j] & 63);
        mn = (float)(q[j + 4] & 63);
    } else {
        sc = (float)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        mn = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
    *d = rd_f16(b) * sc;
    *m = rd_f16(b + 2) * mn;
}

// 6-bit signed scale j (0..15) of a Q3_K block, minus 32
inline float q3k_scale(global const uchar* s, int j) {
    int low = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    int high = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return (float)((low | (high << 4)) - 32);
}

// programs that decode one type only (the tuned matrix-vector kernels) inline the decoder so that the type
// switch folds away; the main program keeps one out-of-line copy
#ifdef DQ32_INLINE
#define DQ32_ATTR inline __attribute__((always_inline))
#define LOAD32_ATTR inline __attribute__((always_inline))
#else
#define DQ32_ATTR
#define LOAD32_ATTR inline
#endif

DQ32_ATTR void dq32(int t, global const uchar* row, int c, float* y) {
    switch (t) {
    case T_Q4_0: {
        global const uchar* b = row + 18 * c;
        const float d = rd_f16(b);
        for (int l = 0; l < 16; ++l) {
            y[l] = (float)((b[2 + l] & 0xF) - 8) * d;
            y[l + 16] = (float)((b[2 + l] >> 4) - 8) * d;
        }
        break;
    }
    case T_Q4_1: {
        global const uchar* b = row + 20 * c;
        const float d = rd_f16(b), m = rd_f16(b + 2);
        for (int l = 0; l < 16; ++l) {
            y[l] = (float)(b[4 + l] & 0xF) * d + m;
            y[l + 16] = (float)(b[4 + l] >> 4) * d + m;
        }
        break;
    }
    case T_Q5_0: {
        global const uchar* b = row + 22 * c;
        const float d = rd_f16(b);
        const uint qh = rd_u32(b + 2);
        for (int l = 0; l < 16; ++l) {
            int lo = (b[6 + l] & 0xF) | (((qh >> l) & 1) << 4);
            int hi = (b[6 + l] >> 4) | (((qh >> (l + 16)) & 1) << 4);
            y[l] = (float)(lo - 16) * d;
            y[l + 16] = (float)(hi - 16) * d;
        }
        break;
    }
    case T_Q5_1: {
        global const uchar* b = row + 24 * c;
        const float d = rd_f16(b), m = rd_f16(b + 2);
        const uint qh = rd_u32(b + 4);
        for (int l = 0; l < 16; ++l) {
            int lo = (b[8 + l] & 0xF) | (((qh >> l) & 1) << 4);
            int hi = (b[8 + l] >> 4) | (((qh >> (l + 16)) & 1) << 4);
            y[l] = (float)lo * d + m;
            y[l + 16] = (float)hi * d + m;
        }
        break;
    }
    case T_Q8_0: {
        global const uchar* b = row + 34 * c;
        const float d = rd_f16(b);
        for (int l = 0; l < 32; ++l) y[l] = (float)((char)b[2 + l]) * d;
        break;
    }
    case T_IQ4_NL: {
        global const uchar* b = row + 18 * c;
        const float d = rd_f16(b);
        for (int l = 0; l < 16; ++l) {
            y[l] = d * IQ4NL_VALUES[b[2 + l] & 0xF];
            y[l + 16] = d * IQ4NL_VALUES[b[2 + l] >> 4];
        }
        break;
    }
    case T_Q2_K: {  // scales[16] qs[64] d dmin
        global const uchar* b = row + 84 * (c >> 3);
        const int n = (c & 7) >> 2, j = c & 3;
        const float d = rd_f16(b + 80), dmin = rd_f16(b + 82);
        global const uchar* q = b + 16 + 32 * n;
        for (int h = 0; h < 2; ++h) {
            const uchar sc = b[n * 8 + j * 2 + h];
            const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
            for (int l = 0; l < 16; ++l) y[16 * h + l] = dl * (float)((q[16 * h + l] >> (2 * j)) & 3) - ml;
        }
        break;
    }
    case T_Q3_K: {  // hmask[32] qs[64] scales[12] d
        global const uchar* b = row + 110 * (c >> 3);
        const int n = (c & 7) >> 2, j = c & 3;
        const float d = rd_f16(b + 108);
        global const uchar* q = b + 32 + 32 * n;
        const uchar m = (uchar)(1 << (4 * n + j));
        for (int h = 0; h < 2; ++h) {
            const float dl = d * q3k_scale(b + 96, n * 8 + j * 2 + h);
            for (int l = 0; l < 16; ++l) {
                const int k = 16 * h + l;
                y[k] = dl * (float)(((q[k] >> (2 * j)) & 3) - ((b[k] & m) ? 0 : 4));
            }
        }
        break;
    }
    case T_Q4_K: {  // d dmin scales[12] qs[128]
        global const uchar* b = row + 144 * (c >> 3);
        const int s = c & 7, shift = 4 * (s & 1);
        float d1, m1;
        k4_scale_min(b, s, &d1, &m1);
        global const uchar* q = b + 16 + 32 * (s >> 1);
        for (int l = 0; l < 32; ++l) y[l] = d1 * (float)((q[l] >> shift) & 0xF) - m1;
        break;
    }
    case T_Q5_K: {  // d dmin scales[12] qh[32] qs[128]
        global const uchar* b = row + 176 * (c >> 3);
        const int s = c & 7, shift = 4 * (s & 1);
        float d1, m1;
        k4_scale_min(b, s, &d1, &m1);
        global const uchar* q = b + 48 + 32 * (s >> 1);
        for (int l = 0; l < 32; ++l) {
            const int v = ((q[l] >> shift) & 0xF) | (((b[16 + l] >> s) & 1) << 4);
            y[l] = d1 * (float)v - m1;
        }
        break;
    }
    case T_Q6_K: {  // ql[128] qh[64] scales[16] d; values (d * scale) * (q - 32), one scale per 16
        global const uchar* b = row + 210 * (c >> 3);
        const int n = (c & 7) >> 2, k = c & 3;
        const float d = rd_f16(b + 208);
        global const uchar* ql = b + 64 * n + 32 * (k & 1);
        global const uchar* qh = b + 128 + 32 * n;
        const int lshift = 4 * (k >> 1), hshift = 2 * k;
        for (int h = 0; h < 2; ++h) {
            const float dl = d * (float)((char)b[192 + n * 8 + h + 2 * k]);
            for (int l = 16 * h; l < 16 * h + 16; ++l) {
                const int q = (((ql[l] >> lshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4)) - 32;
                y[l] = dl * (float)q;
            }
        }
        break;
    }
    case T_IQ4_XS: {  // d scales_h scales_l[4] qs[128]
        global const uchar* b = row + 136 * (c >> 3);
        const int ib = c & 7;
        const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((rd_u16(b + 2) >> (2 * ib)) & 3) << 4);
        const float dl = rd_f16(b) * (float)(ls - 32);
        global const uchar* q = b + 8 + 16 * ib;
        for (int l = 0; l < 16; ++l) {
            y[l] = dl * IQ4NL_VALUES[q[l] & 0xF];
            y[l + 16] = dl * IQ4NL_VALUES[q[l] >> 4];
        }
        break;
    }
    case T_MXFP4: {  // e qs[16]
        global const uchar* b = row + 17 * c;
        const float d = e8m0_half(b[0]);
        for (int l = 0; l < 16; ++l) {
            y[l] = MXFP4_VALUES[b[1 + l] & 0xF] * d;
            y[l + 16] = MXFP4_VALUES[b[1 + l] >> 4] * d;
        }
        break;
    }
    case T_NVFP4: {  // d[4] (ue4m3, one per 16) qs[32]; a chunk is two sub-blocks of 16
        global const uchar* b = row + 36 * (c >> 1);
        for (int h = 0; h < 2; ++h) {
            const int s = 2 * (c & 1) + h;
            const float d = ue4m3_half(b[s]);
            global const uchar* q = b + 4 + 8 * s;
            for (int l = 0; l < 8; ++l) {
                y[16 * h + l] = MXFP4_VALUES[q[l] & 0xF] * d;
                y[16 * h + 8 + l] = MXFP4_VALUES[q[l] >> 4] * d;
            }
        }
        break;
    }
    case T_TQ1_0: {  // qs[48] qh[4] d
        global const uchar* b = row + 54 * (c >> 3);
        const float d = rd_f16(b + 52);
        for (int l = 0; l < 32; ++l) y[l] = (float)(tq1_digit(b, 32 * (c & 7) + l) - 1) * d;
        break;
    }
    case T_TQ2_0: {  // qs[64] d
        global const uchar* b = row + 66 * (c >> 3);
        const int h = (c & 7) >> 2, j = c & 3;
        const float d = rd_f16(b + 64);
        for (int l = 0; l < 32; ++l) y[l] = (float)(((b[32 * h + l] >> (2 * j)) & 3) - 1) * d;
        break;
    }
    case T_Q1_0: {  // d qs[16]: bit set -> d, clear -> -d
        global const uchar* b = row + 18 * (c >> 2);
        const float d = rd_f16(b);
        global const uchar* q = b + 2 + 4 * (c & 3);
        for (int l = 0; l < 32; ++l) y[l] = ((q[l >> 3] >> (l & 7)) & 1) ? d : -d;
        break;
    }
    default:
        for (int l = 0; l < 32; ++l) y[l] = 0.0f;
    }
}

// 32 consecutive values of row `row` from column 32c (zeros past K); any float or quantized type
LOAD32_ATTR void load32(int t, global const uchar* row, long nb0, int c, int K, float* y) {
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

// ---------------------------------------------------------------------------------------------- quantizers
// q32(type, x, dst) writes one 32-value block in ggml's quantize_row_*_ref arithmetic (byte-identical).

inline void st_f16(global uchar* p, float v) {
    ushort h;
    vstore_half_rte(v, 0, (private half*)&h);
    p[0] = (uchar)(h & 0xFF);
    p[1] = (uchar)(h >> 8);
}

inline void st_u32(global uchar* p, uint v) {
    p[0] = (uchar)v; p[1] = (uchar)(v >> 8); p[2] = (uchar)(v >> 16); p[3] = (uchar)(v >> 24);
}

// C's float -> int8_t through int (out-of-range values keep their low byte, as the reference emulation does)
inline int to_i8(float v) { return (int)(char)(int)v; }

void q32(int t, const float* x, global uchar* b) {
    switch (t) {
    case T_Q4_0:
    case T_Q5_0: {
        float amax = 0.0f, vmax = 0.0f;
        for (int l = 0; l < 32; ++l) if (amax < fabs(x[l])) { amax = fabs(x[l]); vmax = x[l]; }
        const float d = vmax / (t == T_Q4_0 ? -8.0f : -16.0f);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        st_f16(b, d);
        if (t == T_Q4_0) {
            for (int l = 0; l < 16; ++l) {
                const int lo = min(15, to_i8(x[l] * id + 8.5f)), hi = min(15, to_i8(x[l + 16] * id + 8.5f));
                b[2 + l] = (uchar)((lo & 0xFF) | ((hi << 4) & 0xFF));
            }
        } else {
            uint qh = 0;
            for (int l = 0; l < 16; ++l) {
                const int lo = min(31, to_i8(x[l] * id + 16.5f)) & 0xFF, hi = min(31, to_i8(x[l + 16] * id + 16.5f)) & 0xFF;
                b[6 + l] = (uchar)((lo & 0x0F) | ((hi & 0x0F) << 4));
                qh |= ((uint)((lo & 0x10) >> 4) << l) | ((uint)((hi & 0x10) >> 4) << (l + 16));
            }
            st_u32(b + 2, qh);
        }
        break;
    }
    case T_Q4_1:
    case T_Q5_1: {
        float vmin = FLT_MAX, vmax = -FLT_MAX;
        for (int l = 0; l < 32; ++l) {
            if (x[l] < vmin) vmin = x[l];
            if (x[l] > vmax) vmax = x[l];
        }
        const float d = (vmax - vmin) / (t == T_Q4_1 ? 15.0f : 31.0f);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        st_f16(b, d);
        st_f16(b + 2, vmin);
        if (t == T_Q4_1) {
            for (int l = 0; l < 16; ++l) {
                const int lo = min(15, to_i8((x[l] - vmin) * id + 0.5f));
                const int hi = min(15, to_i8((x[l + 16] - vmin) * id + 0.5f));
                b[4 + l] = (uchar)((lo & 0xFF) | ((hi << 4) & 0xFF));
            }
        } else {
            uint qh = 0;
            for (int l = 0; l < 16; ++l) {
                const int lo = (int)((x[l] - vmin) * id + 0.5f) & 0xFF, hi = (int)((x[l + 16] - vmin) * id + 0.5f) & 0xFF;
                b[8 + l] = (uchar)((lo & 0x0F) | ((hi & 0x0F) << 4));
                qh |= ((uint)((lo & 0x10) >> 4) << l) | ((uint)((hi & 0x10) >> 4) << (l + 16));
            }
            st_u32(b + 4, qh);
        }
        break;
    }
    case T_Q8_0: {
        float amax = 0.0f;
        for (int l = 0; l < 32; ++l) { const float a = fabs(x[l]); amax = amax > a ? amax : a; }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        st_f16(b, d);
        for (int l = 0; l < 32; ++l) b[2 + l] = (uchar)(char)(int)round(x[l] * id);
        break;
    }
    default:
        break;
    }
}
