// ggml-webgpu: quantized blocks of binding A decoded 32 values at a time, with ggml's dequantize_row_* arithmetic
// (float products in ggml's order), so values match ggml bit for bit. Block layouts: ggml-common.h; a K-quant
// super-block holds 256 values = 8 chunks of 32.

fn block_bytes(t: u32) -> u32 {
    switch t {
        case 2u: { return 18u; }
        case 3u: { return 20u; }
        case 6u: { return 22u; }
        case 7u: { return 24u; }
        case 8u: { return 34u; }
        case 10u: { return 84u; }
        case 11u: { return 110u; }
        case 12u: { return 144u; }
        case 13u: { return 176u; }
        case 14u: { return 210u; }
        case 20u: { return 18u; }
        case 23u: { return 136u; }
        case 34u: { return 54u; }
        case 35u: { return 66u; }
        case 39u: { return 17u; }
        case 40u: { return 36u; }
        case 41u: { return 18u; }
        default: { return 0u; }
    }
}

var<private> IQ4NL_VALUES: array<f32, 16> = array<f32, 16>(
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
// twice the E2M1 values (the block scale carries the factor 1/2)
var<private> MXFP4_VALUES: array<f32, 16> = array<f32, 16>(
    0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0);

fn a_f16(b: u32) -> f32 { return f16_to_f32(A_u16(b)); }

// E8M0 scale times 1/2: 2^(e - 128), subnormal below e = 2
fn e8m0_half(e: u32) -> f32 {
    if (e < 2u) { return bitcast<f32>(0x00200000u << e); }
    return bitcast<f32>((e - 1u) << 23u);
}

// unsigned E4M3 (bias 7, bit 7 ignored) times 1/2; 0x00 and 0x7f give 0
fn ue4m3_half(x: u32) -> f32 {
    if (x == 0u || x == 0x7fu) { return 0.0; }
    let ex = (x >> 3u) & 0xfu;
    let man = f32(x & 7u);
    var raw: f32;
    if (ex == 0u) { raw = ldexp(man, -9); } else { raw = ldexp(1.0 + man / 8.0, i32(ex) - 7); }
    return raw * 0.5;
}

// TQ1_0: element e (0..255) of the block at b: base-3 digits packed five to a byte (four in qh)
fn tq1_digit(b: u32, e: u32) -> i32 {
    var q: u32;
    var n: u32;
    if (e < 160u) {
        q = A_u8(b + (e & 31u));
        n = e >> 5u;
    } else if (e < 240u) {
        q = A_u8(b + 32u + ((e - 160u) & 15u));
        n = (e - 160u) >> 4u;
    } else {
        q = A_u8(b + 48u + ((e - 240u) & 3u));
        n = (e - 240u) >> 2u;
    }
    var p = 1u;
    for (var i = 0u; i < n; i++) { p *= 3u; }
    return i32((((q * p) & 0xffu) * 3u) >> 8u);
}
fn a_i8(b: u32) -> f32 { return f32(bitcast<i32>(A_u8(b) << 24u) >> 24u); }

// sub-block j (0..7) of a Q4_K / Q5_K block at b (d, dmin, scales[12], ...): its scale d·sc (x) and its min dmin·m
// (y), with the 6-bit sc and m of ggml's get_scale_min_k4
fn k4_scale_min(b: u32, j: u32) -> vec2<f32> {
    let q = b + 4u;
    var sm: vec2<f32>;
    if (j < 4u) {
        sm = vec2<f32>(f32(A_u8(q + j) & 63u), f32(A_u8(q + j + 4u) & 63u));
    } else {
        let sc = (A_u8(q + j + 4u) & 0xfu) | ((A_u8(q + j - 4u) >> 6u) << 4u);
        let mn = (A_u8(q + j + 4u) >> 4u) | ((A_u8(q + j) >> 6u) << 4u);
        sm = vec2<f32>(f32(sc), f32(mn));
    }
    return vec2<f32>(a_f16(b) * sm.x, a_f16(b + 2u) * sm.y);
}

// 6-bit signed scale j (0..15) of a Q3_K block, minus 32; s: the 12 scale bytes
fn q3k_scale(s: u32, j: u32) -> f32 {
    var low: u32;
    if (j < 8u) { low = A_u8(s + j) & 0xfu; } else { low = A_u8(s + j - 8u) >> 4u; }
    let high = (A_u8(s + 8u + (j & 3u)) >> (2u * (j >> 2u))) & 3u;
    return f32(i32(low | (high << 4u)) - 32);
}

// elements [32c, 32c + 32) of the quantized row at byte `row` of A
fn a_dq32(t: u32, row: u32, c: u32, y: ptr<function, array<f32, 32>>) {
    switch t {
        case 2u: {  // Q4_0: d, qs[16]
            let b = row + 18u * c;
            let d = a_f16(b);
            for (var l = 0u; l < 16u; l++) {
                let q = A_u8(b + 2u + l);
                (*y)[l] = f32(i32(q & 0xfu) - 8) * d;
                (*y)[l + 16u] = f32(i32(q >> 4u) - 8) * d;
            }
        }
        case 3u: {  // Q4_1: d, m, qs[16]
            let b = row + 20u * c;
            let d = a_f16(b);
            let m = a_f16(b + 2u);
            for (var l = 0u; l < 16u; l++) {
                let q = A_u8(b + 4u + l);
                (*y)[l] = f32(q & 0xfu) * d + m;
                (*y)[l + 16u] = f32(q >> 4u) * d + m;
            }
        }
        case 6u: {  // Q5_0: d, qh, qs[16]
            let b = row + 22u * c;
            let d = a_f16(b);
            let qh = A_u32(b + 2u);
            for (var l = 0u; l < 16u; l++) {
                let q = A_u8(b + 6u + l);
                let lo = (q & 0xfu) | (((qh >> l) & 1u) << 4u);
                let hi = (q >> 4u) | (((qh >> (l + 16u)) & 1u) << 4u);
                (*y)[l] = f32(i32(lo) - 16) * d;
                (*y)[l + 16u] = f32(i32(hi) - 16) * d;
            }
        }
        case 7u: {  // Q5_1: d, m, qh, qs[16]
            let b = row + 24u * c;
            let d = a_f16(b);
            let m = a_f16(b + 2u);
            let qh = A_u32(b + 4u);
            for (var l = 0u; l < 16u; l++) {
                let q = A_u8(b + 8u + l);
                let lo = (q & 0xfu) | (((qh >> l) & 1u) << 4u);
                let hi = (q >> 4u) | (((qh >> (l + 16u)) & 1u) << 4u);
                (*y)[l] = f32(lo) * d + m;
                (*y)[l + 16u] = f32(hi) * d + m;
            }
        }
        case 8u: {  // Q8_0: d, qs[32]
            let b = row + 34u * c;
            let d = a_f16(b);
            for (var l = 0u; l < 32u; l++) { (*y)[l] = a_i8(b + 2u + l) * d; }
        }
        case 10u: {  // Q2_K: scales[16] qs[64] d dmin
            let b = row + 84u * (c >> 3u);
            let n = (c & 7u) >> 2u;
            let j = c & 3u;
            let d = a_f16(b + 80u);
            let dmin = a_f16(b + 82u);
            let q = b + 16u + 32u * n;
            for (var h = 0u; h < 2u; h++) {
                let sc = A_u8(b + n * 8u + j * 2u + h);
                let dl = d * f32(sc & 0xfu);
                let ml = dmin * f32(sc >> 4u);
                for (var l = 0u; l < 16u; l++) {
                    (*y)[16u * h + l] = dl * f32((A_u8(q + 16u * h + l) >> (2u * j)) & 3u) - ml;
                }
            }
        }
        case 11u: {  // Q3_K: hmask[32] qs[64] scales[12] d
            let b = row + 110u * (c >> 3u);
            let n = (c & 7u) >> 2u;
            let j = c & 3u;
            let d = a_f16(b + 108u);
            let q = b + 32u + 32u * n;
            let m = 1u << (4u * n + j);
            for (var h = 0u; h < 2u; h++) {
                let dl = d * q3k_scale(b + 96u, n * 8u + j * 2u + h);
                for (var l = 0u; l < 16u; l++) {
                    let k = 16u * h + l;
                    let hb = select(4, 0, (A_u8(b + k) & m) != 0u);
                    (*y)[k] = dl * f32(i32((A_u8(q + k) >> (2u * j)) & 3u) - hb);
                }
            }
        }
        case 12u: {  // Q4_K: d dmin scales[12] qs[128]
            let b = row + 144u * (c >> 3u);
            let s = c & 7u;
            let shift = 4u * (s & 1u);
            let dm = k4_scale_min(b, s);
            let q = b + 16u + 32u * (s >> 1u);
            for (var l = 0u; l < 32u; l++) { (*y)[l] = dm.x * f32((A_u8(q + l) >> shift) & 0xfu) - dm.y; }
        }
        case 13u: {  // Q5_K: d dmin scales[12] qh[32] qs[128]
            let b = row + 176u * (c >> 3u);
            let s = c & 7u;
            let shift = 4u * (s & 1u);
            let dm = k4_scale_min(b, s);
            let q = b + 48u + 32u * (s >> 1u);
            for (var l = 0u; l < 32u; l++) {
                let v = ((A_u8(q + l) >> shift) & 0xfu) | (((A_u8(b + 16u + l) >> s) & 1u) << 4u);
                (*y)[l] = dm.x * f32(v) - dm.y;
            }
        }
        case 14u: {  // Q6_K: ql[128] qh[64] scales[16] d; values (d * scale) * (q - 32), one scale per 16
            let b = row + 210u * (c >> 3u);
            let n = (c & 7u) >> 2u;
            let k = c & 3u;
            let d = a_f16(b + 208u);
            let ql = b + 64u * n + 32u * (k & 1u);
            let qh = b + 128u + 32u * n;
            let lshift = 4u * (k >> 1u);
            let hshift = 2u * k;
            for (var h = 0u; h < 2u; h++) {
                let dl = d * a_i8(b + 192u + n * 8u + h + 2u * k);
                for (var l = 16u * h; l < 16u * h + 16u; l++) {
                    let q = ((A_u8(ql + l) >> lshift) & 0xfu) | (((A_u8(qh + l) >> hshift) & 3u) << 4u);
                    (*y)[l] = dl * f32(i32(q) - 32);
                }
            }
        }
        case 20u: {  // IQ4_NL: d, qs[16] indexing the non-linear table
            let b = row + 18u * c;
            let d = a_f16(b);
            for (var l = 0u; l < 16u; l++) {
                let q = A_u8(b + 2u + l);
                (*y)[l] = d * IQ4NL_VALUES[q & 0xfu];
                (*y)[l + 16u] = d * IQ4NL_VALUES[q >> 4u];
            }
        }
        case 23u: {  // IQ4_XS: d scales_h scales_l[4] qs[128]
            let b = row + 136u * (c >> 3u);
            let ib = c & 7u;
            let ls = ((A_u8(b + 4u + ib / 2u) >> (4u * (ib % 2u))) & 0xfu) | (((A_u16(b + 2u) >> (2u * ib)) & 3u) << 4u);
            let dl = a_f16(b) * f32(i32(ls) - 32);
            let q = b + 8u + 16u * ib;
            for (var l = 0u; l < 16u; l++) {
                let v = A_u8(q + l);
                (*y)[l] = dl * IQ4NL_VALUES[v & 0xfu];
                (*y)[l + 16u] = dl * IQ4NL_VALUES[v >> 4u];
            }
        }
        case 34u: {  // TQ1_0: qs[48] qh[4] d
            let b = row + 54u * (c >> 3u);
            let d = a_f16(b + 52u);
            for (var l = 0u; l < 32u; l++) { (*y)[l] = f32(tq1_digit(b, 32u * (c & 7u) + l) - 1) * d; }
        }
        case 35u: {  // TQ2_0: qs[64] d
            let b = row + 66u * (c >> 3u);
            let h = (c & 7u) >> 2u;
            let j = c & 3u;
            let d = a_f16(b + 64u);
            for (var l = 0u; l < 32u; l++) { (*y)[l] = f32(i32((A_u8(b + 32u * h + l) >> (2u * j)) & 3u) - 1) * d; }
        }
        case 39u: {  // MXFP4: e qs[16]
            let b = row + 17u * c;
            let d = e8m0_half(A_u8(b));
            for (var l = 0u; l < 16u; l++) {
                let q = A_u8(b + 1u + l);
                (*y)[l] = MXFP4_VALUES[q & 0xfu] * d;
                (*y)[l + 16u] = MXFP4_VALUES[q >> 4u] * d;
            }
        }
        case 40u: {  // NVFP4: d[4] (ue4m3, one per 16) qs[32]; a chunk is two sub-blocks of 16
            let b = row + 36u * (c >> 1u);
            for (var h = 0u; h < 2u; h++) {
                let s = 2u * (c & 1u) + h;
                let d = ue4m3_half(A_u8(b + s));
                let q = b + 4u + 8u * s;
                for (var l = 0u; l < 8u; l++) {
                    let v = A_u8(q + l);
                    (*y)[16u * h + l] = MXFP4_VALUES[v & 0xfu] * d;
                    (*y)[16u * h + 8u + l] = MXFP4_VALUES[v >> 4u] * d;
                }
            }
        }
        case 41u: {  // Q1_0: d qs[16]: bit set -> d, clear -> -d
            let b = row + 18u * (c >> 2u);
            let d = a_f16(b);
            let q = b + 2u + 4u * (c & 3u);
            for (var l = 0u; l < 32u; l++) { (*y)[l] = select(-d, d, ((A_u8(q + (l >> 3u)) >> (l & 7u)) & 1u) != 0u); }
        }
        default: { for (var l = 0u; l < 32u; l++) { (*y)[l] = 0.0; } }
    }
}

// 32 consecutive values of a row of A from column 32c (zeros past K): quantized or plain (stride nb0)
fn a_load32(t: u32, row: u32, nb0: u32, c: u32, k: u32, y: ptr<function, array<f32, 32>>) {
    if (block_bytes(t) != 0u) {
        a_dq32(t, row, c, y);
        return;
    }
    let k0 = 32u * c;
    for (var l = 0u; l < 32u; l++) {
        if (k0 + l < k) { (*y)[l] = A_f(row + (k0 + l) * nb0, t); } else { (*y)[l] = 0.0; }
    }
}
