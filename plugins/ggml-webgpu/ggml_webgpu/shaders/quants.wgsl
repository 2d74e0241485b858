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
        default: { return 0u; }
    }
}

fn a_f16(b: u32) -> f32 { return f16_to_f32(A_u16(b)); }
fn a_i8(b: u32) -> f32 { return f32(bitcast<i32>(A_u8(b) << 24u) >> 24u); }

// get_scale_min_k4 of Q4_K / Q5_K: the 6-bit scale (x) and min (y) of sub-block j (0..7); q: the 12 scale bytes
fn scale_min_k4(j: u32, q: u32) -> vec2<f32> {
    if (j < 4u) {
        return vec2<f32>(f32(A_u8(q + j) & 63u), f32(A_u8(q + j + 4u) & 63u));
    }
    let sc = (A_u8(q + j + 4u) & 0xfu) | ((A_u8(q + j - 4u) >> 6u) << 4u);
    let mn = (A_u8(q + j + 4u) >> 4u) | ((A_u8(q + j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(mn));
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
            let sm = scale_min_k4(s, b + 4u);
            let d1 = a_f16(b) * sm.x;
            let m1 = a_f16(b + 2u) * sm.y;
            let q = b + 16u + 32u * (s >> 1u);
            for (var l = 0u; l < 32u; l++) { (*y)[l] = d1 * f32((A_u8(q + l) >> shift) & 0xfu) - m1; }
        }
        case 13u: {  // Q5_K: d dmin scales[12] qh[32] qs[128]
            let b = row + 176u * (c >> 3u);
            let s = c & 7u;
            let shift = 4u * (s & 1u);
            let sm = scale_min_k4(s, b + 4u);
            let d1 = a_f16(b) * sm.x;
            let m1 = a_f16(b + 2u) * sm.y;
            let q = b + 48u + 32u * (s >> 1u);
            for (var l = 0u; l < 32u; l++) {
                let v = ((A_u8(q + l) >> shift) & 0xfu) | (((A_u8(b + 16u + l) >> s) & 1u) << 4u);
                (*y)[l] = d1 * f32(v) - m1;
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
