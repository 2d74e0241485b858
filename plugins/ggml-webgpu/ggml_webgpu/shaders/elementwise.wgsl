// ggml-webgpu: elementwise kernels, one invocation per destination element; every operand is addressed through
// its own strides, so views and ggml's repeat-broadcasting (index modulo the operand's extent) need no copies.
// Op words: [OP] n, [OP+1] code, [OP+2..] types and float parameters (see ops/elementwise.py).

fn gelu_tanh(x: f32) -> f32 {
    let c = 0.7978845608028654;
    let a = 0.044715;
    return 0.5 * x * (1.0 + tanh(c * x * (1.0 + a * x * x)));
}

// ggml's CPU GELU: an f16 table of f16(gelu(f16 x)); exact outside (-10, 10)
fn gelu_ggml(x: f32) -> f32 {
    if (x <= -10.0) { return 0.0; }
    if (x >= 10.0) { return x; }
    return round_f16(gelu_tanh(round_f16(x)));
}

// ggml's CPU GELU_QUICK: the f16 table for every x
fn gelu_quick_ggml(x: f32) -> f32 {
    let h = round_f16(x);
    return round_f16(h * (1.0 / (1.0 + exp(-1.702 * h))));
}

fn erf_approx(x: f32) -> f32 {
    // Abramowitz-Stegun 7.1.26 is too coarse; use erf(x) = sign(x) * (1 - erfc(|x|)) with a Chebyshev-fitted erfc
    // (Numerical Recipes erfcc, relative error < 1.2e-7)
    let z = abs(x);
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
        + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
    return select(r - 1.0, 1.0 - r, x >= 0.0);
}

fn gelu_erf(x: f32) -> f32 { return 0.5 * x * (1.0 + erf_approx(x * 0.70710678118654752)); }
fn silu(x: f32) -> f32 { return x / (1.0 + exp(-x)); }
fn hardsigmoid(x: f32) -> f32 { return min(1.0, max(0.0, (x + 3.0) / 6.0)); }
fn expm1_(x: f32) -> f32 {
    if (abs(x) < 1e-5) { return x + 0.5 * x * x; }
    return exp(x) - 1.0;
}

// codes: UNARY sub-ops keep ggml's numbering (enum ggml_unary_op), the other maps from 100 on
fn apply_map(op: u32, x: f32, p0: f32, p1: f32) -> f32 {
    switch op {
        case 0u: { return abs(x); }
        case 1u: { return select(select(x, -1.0, x < 0.0), 1.0, x > 0.0); }
        case 2u: { return -x; }
        case 3u: { return select(0.0, 1.0, x > 0.0); }
        case 4u: { return tanh(x); }
        case 5u: { return select(expm1_(x), x, x > 0.0); }
        case 6u: { return select(0.0, x, x > 0.0); }
        case 7u: { return 1.0 / (1.0 + exp(-x)); }
        case 8u: { return gelu_ggml(x); }
        case 9u: { return gelu_quick_ggml(x); }
        case 10u: { return silu(x); }
        case 11u: { return x * hardsigmoid(x); }
        case 12u: { return hardsigmoid(x); }
        case 13u: { return exp(x); }
        case 14u: { return exp(x) - 1.0; }  // ggml computes expf(x) - 1
        case 15u: { return select(log(1.0 + exp(x)), x, x > 20.0); }
        case 16u: { return gelu_erf(x); }
        case 18u: { return floor(x); }
        case 19u: { return ceil(x); }
        case 20u: { return select(ceil(x - 0.5), floor(x + 0.5), x >= 0.0); }  // C round: halves away from zero
        case 21u: { return trunc(x); }
        case 100u: { return x * x; }
        case 101u: { return sqrt(x); }
        case 102u: { return log(x); }
        case 103u: { return sin(x); }
        case 104u: { return cos(x); }
        case 105u: { return select(x * p0 + p1, x * p0, p1 == 0.0); }
        case 106u: { return select(select(x, p1, x > p1), p0, x < p0); }
        case 107u: { return select(p0 * x, x, x > 0.0); }
        default: { return x; }
    }
}

// dst = f(A), same shape, any strides; words: n, code, type A, type D, p0, p1
@compute @workgroup_size(64)
fn map(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let i = unflat(e, TD);
    let x = A_f(at(TA, i.x, i.y, i.z, i.w), pu(OP + 2u));
    d_stf(at(TD, i.x, i.y, i.z, i.w), pu(OP + 3u), apply_map(pu(OP + 1u), x, pf(OP + 4u), pf(OP + 5u)));
}

// dst = A (op) repeat(B); words: n, code (0 add, 1 sub, 2 mul, 3 div), type A, type B, type D
@compute @workgroup_size(64)
fn binary(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let i = unflat(e, TD);
    let x = A_f(at(TA, i.x, i.y, i.z, i.w), pu(OP + 2u));
    let y = B_f(at(TB, i.x % ne(TB, 0u), i.y % ne(TB, 1u), i.z % ne(TB, 2u), i.w % ne(TB, 3u)), pu(OP + 3u));
    var r: f32;
    switch pu(OP + 1u) {
        case 0u: { r = x + y; }
        case 1u: { r = x - y; }
        case 2u: { r = x * y; }
        default: { r = x / y; }
    }
    d_stf(at(TD, i.x, i.y, i.z, i.w), pu(OP + 4u), r);
}

// GLU: dst = act(x) * g with x in A and g in B (two views of one tensor when fused); words: n, code (enum
// ggml_glu_op), type, alpha, limit
@compute @workgroup_size(64)
fn glu(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let i = unflat(e, TD);
    let t = pu(OP + 2u);
    let v = A_f(at(TA, i.x, i.y, i.z, i.w), t);
    let g = B_f(at(TB, i.x, i.y, i.z, i.w), t);
    var r: f32;
    switch pu(OP + 1u) {
        case 0u: { r = select(0.0, v, v > 0.0) * g; }
        case 1u: { r = gelu_ggml(v) * g; }
        case 2u: { r = silu(v) * g; }
        case 3u: {  // SWIGLU_OAI: x clamped above by limit, g to [-limit, limit]; x * sigmoid(alpha x) * (g + 1)
            let alpha = pf(OP + 3u);
            let limit = pf(OP + 4u);
            let xc = min(v, limit);
            let gc = clamp(g, -limit, limit);
            r = xc / (1.0 + exp(-alpha * xc)) * (gc + 1.0);
        }
        case 4u: { r = gelu_erf(v) * g; }
        default: { r = gelu_quick_ggml(v) * g; }
    }
    d_stf(at(TD, i.x, i.y, i.z, i.w), t, r);
}

// contiguous f32 operands, flat: dst[e] = A[e] (op) B[e % nb] (b's data repeats along a's); words: n, code, nb
@compute @workgroup_size(64)
fn binary_flat(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let x = bitcast<f32>(A[(pu(TA) >> 2u) + e]);
    let y = bitcast<f32>(B[(pu(TB) >> 2u) + e % pu(OP + 2u)]);
    var r: f32;
    switch pu(OP + 1u) {
        case 0u: { r = x + y; }
        case 1u: { r = x - y; }
        case 2u: { r = x * y; }
        default: { r = x / y; }
    }
    atomicStore(&D[(pu(TD) >> 2u) + e], bitcast<u32>(r));
}

// contiguous f32, flat: dst[e] = f(A[e]); words: n, code, p0, p1
@compute @workgroup_size(64)
fn map_flat(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let x = bitcast<f32>(A[(pu(TA) >> 2u) + e]);
    atomicStore(&D[(pu(TD) >> 2u) + e], bitcast<u32>(apply_map(pu(OP + 1u), x, pf(OP + 2u), pf(OP + 3u))));
}

// ADD_ID: dst(i0, i1, i2) = A(i0, i1, i2) + B(i0, C(i1, i2)); a bad id adds nothing and reports `code`.
// words: n, code
@compute @workgroup_size(64)
fn add_id(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let i = unflat(e, TD);
    let r = C_i(at(TC, i.y, i.z, 0u, 0u), T_I32);
    var v = A_f32(at(TA, i.x, i.y, i.z, i.w));
    if (r < 0 || u32(r) >= ne(TB, 1u)) {
        if (i.x == 0u) { report(pu(OP + 1u)); }
    } else {
        v += B_f32(at(TB, i.x, u32(r), 0u, 0u));
    }
    d_st32(at(TD, i.x, i.y, i.z, i.w), bitcast<u32>(v));
}
