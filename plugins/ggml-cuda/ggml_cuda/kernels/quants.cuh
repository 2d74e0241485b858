// ggml's block-quantized formats: per-element dequantization and the reference quantizers of the 32-element
// types, with the same float operations (no fused multiply-add) so that results equal ggml's bit for bit.
#pragma once

#include "common.cuh"

// block sizes (elements) and type sizes (bytes)
GGML_HD int qk_of(int type) {
    switch (type) {
        case GT_Q2_K: case GT_Q3_K: case GT_Q4_K: case GT_Q5_K: case GT_Q6_K: return 256;
        default: return 32;
    }
}

GGML_HD int qsize_of(int type) {
    switch (type) {
        case GT_Q4_0: return 18;
        case GT_Q4_1: return 20;
        case GT_Q5_0: return 22;
        case GT_Q5_1: return 24;
        case GT_Q8_0: return 34;
        case GT_IQ4_NL: return 18;
        case GT_Q2_K: return 84;
        case GT_Q3_K: return 110;
        case GT_Q4_K: return 144;
        case GT_Q5_K: return 176;
        case GT_Q6_K: return 210;
        default: return 0;
    }
}

GGML_HD int iq4_nl_value(int q) {
    const int8_t values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    return values[q & 15];
}

GGML_HD uint32_t load_u32_unaligned(const uint8_t* p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7)
GGML_HD void kq_scale_min(int j, const uint8_t* s, int& sc, int& m) {
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// Q3_K: the signed scale (already minus 32) of sub-block i (0..15) from the 12 packed bytes
GGML_HD int q3k_scale(const uint8_t* b, int i) {
    const int lo = (b[i % 8] >> (4 * (i / 8))) & 0xF;
    const int hi = (b[8 + i % 4] >> (2 * (i / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

// element j (0 .. qk-1) of one block
GGML_HD float dequant_in_block(const uint8_t* x, int type, int j) {
    switch (type) {
        case GT_Q4_0: {
            const float d = f16_bits_to_f32(load_u16(x));
            const int q = j < 16 ? (x[2 + j] & 0xF) : (x[2 + j - 16] >> 4);
            return (float)(q - 8) * d;
        }
        case GT_Q4_1: {
            const float d = f16_bits_to_f32(load_u16(x)), m = f16_bits_to_f32(load_u16(x + 2));
            const int q = j < 16 ? (x[4 + j] & 0xF) : (x[4 + j - 16] >> 4);
            return fadd_rn(fmul_rn((float)q, d), m);
        }
        case GT_Q5_0: {
            const float d = f16_bits_to_f32(load_u16(x));
            const uint32_t qh = load_u32_unaligned(x + 2);
            const int lo = j < 16 ? (x[6 + j] & 0xF) : (x[6 + j - 16] >> 4);
            const int q = lo | (int)(((qh >> j) & 1u) << 4);
            return (float)(q - 16) * d;
        }
        case GT_Q5_1: {
            const float d = f16_bits_to_f32(load_u16(x)), m = f16_bits_to_f32(load_u16(x + 2));
            const uint32_t qh = load_u32_unaligned(x + 4);
            const int lo = j < 16 ? (x[8 + j] & 0xF) : (x[8 + j - 16] >> 4);
            const int q = lo | (int)(((qh >> j) & 1u) << 4);
            return fadd_rn(fmul_rn((float)q, d), m);
        }
        case GT_Q8_0: return (float)(int8_t)x[2 + j] * f16_bits_to_f32(load_u16(x));
        case GT_IQ4_NL: {
            const float d = f16_bits_to_f32(load_u16(x));
            const int q = j < 16 ? (x[2 + j] & 0xF) : (x[2 + j - 16] >> 4);
            return d * (float)iq4_nl_value(q);
        }
        case GT_Q2_K: {  // scales[16] qs[64] d dmin
            const float d = f16_bits_to_f32(load_u16(x + 80)), dmin = f16_bits_to_f32(load_u16(x + 82));
            const int h = j / 128, r = j % 128, g = r / 32, l = r % 32;
            const int sc = x[8 * h + 2 * g + (l >= 16)];
            const int q = (x[16 + 32 * h + l] >> (2 * g)) & 3;
            return fsub_rn(fmul_rn(fmul_rn(d, (float)(sc & 0xF)), (float)q), fmul_rn(dmin, (float)(sc >> 4)));
        }
        case GT_Q3_K: {  // hmask[32] qs[64] scales[12] d
            const float d = f16_bits_to_f32(load_u16(x + 108));
            const int h = j / 128, r = j % 128, g = r / 32, l = r % 32;
            const int sc = q3k_scale(x + 96, 8 * h + 2 * g + (l >= 16));
            const int q2 = (x[32 + 32 * h + l] >> (2 * g)) & 3;
            const int q = q2 - ((x[l] >> (4 * h + g)) & 1 ? 0 : 4);
            return fmul_rn(fmul_rn(d, (float)sc), (float)q);
        }
        case GT_Q4_K: {  // d dmin scales[12] qs[128]
            const float d = f16_bits_to_f32(load_u16(x)), dmin = f16_bits_to_f32(load_u16(x + 2));
            const int s = j / 32, c = s / 2, l = j % 32;
            int sc, m;
            kq_scale_min(s, x + 4, sc, m);
            const uint8_t b = x[16 + 32 * c + l];
            const int q = (s & 1) ? (b >> 4) : (b & 0xF);
            return fsub_rn(fmul_rn(fmul_rn(d, (float)sc), (float)q), fmul_rn(dmin, (float)m));
        }
        case GT_Q5_K: {  // d dmin scales[12] qh[32] qs[128]
            const float d = f16_bits_to_f32(load_u16(x)), dmin = f16_bits_to_f32(load_u16(x + 2));
            const int s = j / 32, c = s / 2, l = j % 32;
            int sc, m;
            kq_scale_min(s, x + 4, sc, m);
            const uint8_t b = x[48 + 32 * c + l];
            const int q = ((s & 1) ? (b >> 4) : (b & 0xF)) + (((x[16 + l] >> s) & 1) ? 16 : 0);
            return fsub_rn(fmul_rn(fmul_rn(d, (float)sc), (float)q), fmul_rn(dmin, (float)m));
        }
        case GT_Q6_K: {  // ql[128] qh[64] scales[16] d
            const float d = f16_bits_to_f32(load_u16(x + 208));
            const int h = j / 128, r = j % 128, g = r / 32, l = r % 32;
            const uint8_t lb = x[64 * h + (g & 1) * 32 + l];
            const int lo = (g >= 2) ? (lb >> 4) : (lb & 0xF);
            const int hi = (x[128 + 32 * h + l] >> (2 * g)) & 3;
            const int q = (lo | (hi << 4)) - 32;
            const int sc = (int8_t)x[192 + 8 * h + l / 16 + 2 * g];
            return fmul_rn(fmul_rn(d, (float)sc), (float)q);
        }
        default: return 0.0f;
    }
}

// element i0 of a row of blocks
GGML_HD float dequant_elem(const char* row, int type, long long i0) {
    const int qk = qk_of(type);
    return dequant_in_block((const uint8_t*)row + (i0 / qk) * qsize_of(type), type, (int)(i0 % qk));
}

// ---- reference quantizers of the 32-element types (quantize_row_*_ref) ---------------------------------------

GGML_HD float inv_or_zero(float d) { return d != 0.0f ? fdiv_rn(1.0f, d) : 0.0f; }

GGML_HD void store_u16(uint8_t* p, uint16_t v) {
    p[0] = (uint8_t)(v & 0xFF);
    p[1] = (uint8_t)(v >> 8);
}

GGML_HD void store_u32(uint8_t* p, uint32_t v) {
    for (int k = 0; k < 4; ++k) p[k] = (uint8_t)(v >> (8 * k));
}

// C's (int8_t)(int)f: truncate toward zero, keep the low byte
GGML_HD int trunc_to_int8(float f) { return (int)(int8_t)(int)f; }

// quantize 32 floats into one block of `type` (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0); false for other types
GGML_HD bool quantize_block32(const float* v, uint8_t* out, int type) {
    if (type == GT_Q8_0) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(v[j]));
        const float d = fdiv_rn(amax, 127.0f), id = inv_or_zero(d);
        store_u16(out, f32_to_f16_bits(d));
        for (int j = 0; j < 32; ++j) out[2 + j] = (uint8_t)(int8_t)(int)roundf(fmul_rn(v[j], id));
        return true;
    }
    if (type == GT_Q4_0 || type == GT_Q5_0) {
        float amax = 0.0f, vmax = 0.0f;
        for (int j = 0; j < 32; ++j) {
            if (fabsf(v[j]) > amax) {
                amax = fabsf(v[j]);
                vmax = v[j];
            }
        }
        const bool five = type == GT_Q5_0;
        const float d = fdiv_rn(vmax, five ? -16.0f : -8.0f), id = inv_or_zero(d);
        const float off = five ? 16.5f : 8.5f;
        const int top = five ? 31 : 15;
        store_u16(out, f32_to_f16_bits(d));
        int q[32];
        for (int j = 0; j < 32; ++j) q[j] = min(top, trunc_to_int8(fadd_rn(fmul_rn(v[j], id), off)));
        uint8_t* qs = out + (five ? 6 : 2);
        if (five) {
            uint32_t qh = 0;
            for (int j = 0; j < 32; ++j) qh |= (uint32_t)(((q[j] & 0xFF) & 0x10) >> 4) << j;
            store_u32(out + 2, qh);
            for (int j = 0; j < 16; ++j) qs[j] = (uint8_t)((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
        } else {
            for (int j = 0; j < 16; ++j) qs[j] = (uint8_t)(((uint8_t)q[j]) | (uint8_t)(q[j + 16] << 4));
        }
        return true;
    }
    if (type == GT_Q4_1 || type == GT_Q5_1) {
        float vmin = 3.402823466e+38f, vmax = -3.402823466e+38f;
        for (int j = 0; j < 32; ++j) {
            if (v[j] < vmin) vmin = v[j];
            if (v[j] > vmax) vmax = v[j];
        }
        const bool five = type == GT_Q5_1;
        const float d = fdiv_rn(fsub_rn(vmax, vmin), five ? 31.0f : 15.0f), id = inv_or_zero(d);
        store_u16(out, f32_to_f16_bits(d));
        store_u16(out + 2, f32_to_f16_bits(vmin));
        int q[32];
        for (int j = 0; j < 32; ++j) {
            const int t = (int)fadd_rn(fmul_rn(fsub_rn(v[j], vmin), id), 0.5f);
            q[j] = five ? (t & 0xFF) : min(15, (int)(int8_t)t);
        }
        uint8_t* qs = out + (five ? 8 : 4);
        if (five) {
            uint32_t qh = 0;
            for (int j = 0; j < 32; ++j) qh |= (uint32_t)((q[j] & 0x10) >> 4) << j;
            store_u32(out + 4, qh);
            for (int j = 0; j < 16; ++j) qs[j] = (uint8_t)((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
        } else {
            for (int j = 0; j < 16; ++j) qs[j] = (uint8_t)(((uint8_t)q[j]) | (uint8_t)(q[j + 16] << 4));
        }
        return true;
    }
    return false;
}
