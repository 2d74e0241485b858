// ggml-webgpu: what every kernel shares (prepended to each shader module, after the generated binding accessors).
//
// Every kernel has the same bind group: P (uniform parameters: six tensor descriptors, then the op's own words),
// A, B, C, E, F (operands) and D (destination, atomic words so that 8- and 16-bit stores never race with a
// neighbour), ERR (the largest bad-index code of a submission). Storage is bound as u32 words; tensors are addressed in bytes
// through their descriptor: base (byte offset inside the bound window), ne[4], nb[4] (bytes).
// f16 and bf16 are converted with integer arithmetic (round to nearest even, overflow to inf), so kernels need
// no shader-f16 and give the same bits on every adapter.

const TA = 0u;
const TB = 9u;
const TC = 18u;
const TD = 27u;
const TE = 36u;
const TF = 45u;
const OP = 54u;
const WG = 64u;

const T_F32 = 0u;
const T_F16 = 1u;
const T_Q4_0 = 2u;
const T_Q4_1 = 3u;
const T_Q5_0 = 6u;
const T_Q5_1 = 7u;
const T_Q8_0 = 8u;
const T_Q2_K = 10u;
const T_Q3_K = 11u;
const T_Q4_K = 12u;
const T_Q5_K = 13u;
const T_Q6_K = 14u;
const T_I8 = 24u;
const T_I16 = 25u;
const T_I32 = 26u;
const T_I64 = 27u;
const T_BF16 = 30u;

fn pu(i: u32) -> u32 { return P.v[i >> 2u][i & 3u]; }
fn pf(i: u32) -> f32 { return bitcast<f32>(pu(i)); }
fn pi(i: u32) -> i32 { return bitcast<i32>(pu(i)); }
fn ne(t: u32, d: u32) -> u32 { return pu(t + 1u + d); }
fn nb(t: u32, d: u32) -> u32 { return pu(t + 5u + d); }

// byte address of element (i0, i1, i2, i3) of tensor slot t
fn at(t: u32, i0: u32, i1: u32, i2: u32, i3: u32) -> u32 {
    return pu(t) + i0 * pu(t + 5u) + i1 * pu(t + 6u) + i2 * pu(t + 7u) + i3 * pu(t + 8u);
}

// flat index (ne[0] fastest) -> 4-d index over the shape of slot t
fn unflat(e: u32, t: u32) -> vec4<u32> {
    let n0 = ne(t, 0u);
    let n1 = ne(t, 1u);
    let n2 = ne(t, 2u);
    var r = e;
    let i0 = r % n0;
    r = r / n0;
    let i1 = r % n1;
    r = r / n1;
    return vec4<u32>(i0, i1, r % n2, r / n2);
}

fn unflat4(e: u32, n: vec4<u32>) -> vec4<u32> {
    var r = e;
    let i0 = r % n.x;
    r = r / n.x;
    let i1 = r % n.y;
    r = r / n.y;
    return vec4<u32>(i0, i1, r % n.z, r / n.z);
}

fn shape(t: u32) -> vec4<u32> { return vec4<u32>(ne(t, 0u), ne(t, 1u), ne(t, 2u), ne(t, 3u)); }

// the invocation's linear index over a 2-d grid of 64-wide workgroups
fn item(wid: vec3<u32>, nwg: vec3<u32>, lid: vec3<u32>) -> u32 { return (wid.y * nwg.x + wid.x) * WG + lid.x; }
fn group(wid: vec3<u32>, nwg: vec3<u32>) -> u32 { return wid.y * nwg.x + wid.x; }

fn f16_to_f32(h: u32) -> f32 {
    let s = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) { return bitcast<f32>(s | bitcast<u32>(f32(m) * 5.9604644775390625e-8)); }
    if (e == 31u) { return bitcast<f32>(s | 0x7f800000u | (m << 13u)); }
    return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}

fn f32_to_f16(x: f32) -> u32 {
    let u = bitcast<u32>(x);
    let s = (u >> 16u) & 0x8000u;
    let a = u & 0x7fffffffu;
    if (a > 0x7f800000u) { return s | 0x7e00u | ((a >> 13u) & 0x3ffu); }
    if (a >= 0x477ff000u) { return s | 0x7c00u; }
    if (a >= 0x38800000u) { return s | ((a + 0xc8000fffu + ((a >> 13u) & 1u)) >> 13u); }
    if (a <= 0x33000000u) { return s; }
    let e = a >> 23u;
    let m = (a & 0x7fffffu) | 0x800000u;
    let sh = 126u - e;
    var q = m >> sh;
    let rem = m & ((1u << sh) - 1u);
    let half = 1u << (sh - 1u);
    if (rem > half || (rem == half && (q & 1u) == 1u)) { q = q + 1u; }
    return s | q;
}

// C's roundf: halves away from zero
fn roundf(x: f32) -> f32 {
    let t = trunc(x);
    return select(t, t + sign(x), abs(x - t) >= 0.5);
}

fn round_f16(x: f32) -> f32 { return f16_to_f32(f32_to_f16(x)); }

fn f32_to_bf16(x: f32) -> u32 {
    let u = bitcast<u32>(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) { return (u >> 16u) | 64u; }
    return (u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u;
}

fn bf16_to_f32(b: u32) -> f32 { return bitcast<f32>(b << 16u); }

// element bytes of a plain type
fn elsize(t: u32) -> u32 {
    switch t {
        case 0u, 26u: { return 4u; }
        case 1u, 25u, 30u: { return 2u; }
        case 24u: { return 1u; }
        case 27u: { return 8u; }
        default: { return 0u; }
    }
}

fn report(code: u32) { atomicMax(&ERR[0], code); }

// ---- destination stores (atomics keep neighbouring bytes of a word intact)
fn d_st32(b: u32, v: u32) { atomicStore(&D[b >> 2u], v); }
fn d_st16(b: u32, v: u32) {
    let sh = (b & 2u) * 8u;
    atomicAnd(&D[b >> 2u], ~(0xffffu << sh));
    atomicOr(&D[b >> 2u], (v & 0xffffu) << sh);
}
fn d_st8(b: u32, v: u32) {
    let sh = (b & 3u) * 8u;
    atomicAnd(&D[b >> 2u], ~(0xffu << sh));
    atomicOr(&D[b >> 2u], (v & 0xffu) << sh);
}
fn d_ld32(b: u32) -> u32 { return atomicLoad(&D[b >> 2u]); }

fn d_stf(b: u32, t: u32, v: f32) {
    switch t {
        case 0u: { d_st32(b, bitcast<u32>(v)); }
        case 1u: { d_st16(b, f32_to_f16(v)); }
        case 30u: { d_st16(b, f32_to_bf16(v)); }
        default: { }
    }
}

fn d_sti(b: u32, t: u32, v: i32) {
    switch t {
        case 26u: { d_st32(b, bitcast<u32>(v)); }
        case 27u: {
            d_st32(b, bitcast<u32>(v));
            d_st32(b + 4u, select(0u, 0xffffffffu, v < 0));
        }
        case 25u: { d_st16(b, bitcast<u32>(v)); }
        case 24u: { d_st8(b, bitcast<u32>(v)); }
        default: { }
    }
}
