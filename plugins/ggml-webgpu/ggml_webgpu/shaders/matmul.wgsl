// ggml-webgpu: MUL_MAT. pack_b turns the activations into contiguous f32 rows [i3][i2][n][K], rounded the way
// ggml's CPU rounds them for the weight type's dot product (f16, bf16, Q8_0 blocks of 32, Q8_K blocks of 256);
// mul_mat decodes the weights in-shader, 32 at a time, and multiplies them with up to 8 activation rows per
// workgroup (one weight row per workgroup, K split over its 64 invocations, then a tree reduction).

// words: n_items (blocks), type A, mode (0 none, 1 f16, 2 Q8_0, 3 Q8_K, 4 bf16), blk (32 or 256)
@compute @workgroup_size(64)
fn pack_b(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let t = pu(OP + 1u);
    let mode = pu(OP + 2u);
    let blk = pu(OP + 3u);
    let k = ne(TA, 0u);
    let nblk = (k + blk - 1u) / blk;
    let i = unflat4(e, vec4<u32>(nblk, ne(TA, 1u), ne(TA, 2u), ne(TA, 3u)));
    let k0 = i.x * blk;
    let kn = min(k - k0, blk);
    let row = at(TA, 0u, i.y, i.z, i.w);
    let out = ((i.w * ne(TA, 2u) + i.z) * ne(TA, 1u) + i.y) * k + k0;
    var x: array<f32, 256>;
    for (var l = 0u; l < kn; l++) { x[l] = A_f(row + (k0 + l) * nb(TA, 0u), t); }
    if (mode == 2u) {  // Q8_0 as ggml-cpu's x86 code: d = amax / 127 (stored as f16), q = rint(x * 127 / amax)
        var amax = 0.0;
        for (var l = 0u; l < kn; l++) { amax = max(amax, abs(x[l])); }
        let d = amax / 127.0;
        let id = select(0.0, 127.0 / amax, amax != 0.0);
        let dh = round_f16(d);
        for (var l = 0u; l < kn; l++) { x[l] = round(x[l] * id) * dh; }  // WGSL round: half to even
    } else if (mode == 3u) {  // Q8_K: iscale = -127 / (first value of largest magnitude), q = min(127, rint(x iscale))
        var amax = 0.0;
        var vmax = 0.0;
        for (var l = 0u; l < kn; l++) {
            let a = abs(x[l]);
            if (a > amax) { amax = a; vmax = x[l]; }
        }
        var iscale = 0.0;
        var d = 0.0;
        if (amax != 0.0) {
            iscale = -127.0 / vmax;
            d = 1.0 / iscale;
        }
        for (var l = 0u; l < kn; l++) { x[l] = min(127.0, round(iscale * x[l])) * d; }
    } else if (mode == 1u) {
        for (var l = 0u; l < kn; l++) { x[l] = round_f16(x[l]); }
    } else if (mode == 4u) {
        for (var l = 0u; l < kn; l++) { x[l] = bf16_to_f32(f32_to_bf16(x[l])); }
    }
    for (var l = 0u; l < kn; l++) { d_st32((out + l) * 4u, bitcast<u32>(x[l])); }
}

const NT = 8u;
var<workgroup> acc_red: array<f32, 512>;

// D[m, n, i2, i3] = sum_k A[k, m, i2 / r2, i3 / r3] * Bp[k, n, i2, i3] for the rows [m_base, m_base + m_count)
// whose window A is bound to. words: n_groups, type A, N, K, b2, r2, r3, m_base, m_count, n_tiles
@compute @workgroup_size(64)
fn mul_mat(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = group(wid, nwg);
    if (g >= pu(OP)) { return; }
    let l = lid.x;
    let t = pu(OP + 1u);
    let n_all = pu(OP + 2u);
    let k = pu(OP + 3u);
    let b2 = pu(OP + 4u);
    let m_count = pu(OP + 8u);
    let m = g % m_count;
    let rest = g / m_count;
    let tile = rest % pu(OP + 9u);
    let batch = rest / pu(OP + 9u);
    let i2 = batch % b2;
    let i3 = batch / b2;
    let row = at(TA, 0u, m, i2 / pu(OP + 5u), i3 / pu(OP + 6u));
    let n0 = tile * NT;
    let nt = min(NT, n_all - n0);
    var acc: array<f32, 8>;
    for (var j = 0u; j < NT; j++) { acc[j] = 0.0; }
    let bw0 = (batch * n_all + n0) * k * 4u;
    if (t == T_F32 && nb(TA, 0u) == 4u && (row & 3u) == 0u) {  // packed f32 rows: plain word loads
        let r4 = row >> 2u;
        let b4 = bw0 >> 2u;
        for (var q = l; q < k; q += WG) {
            let wv = bitcast<f32>(A[r4 + q]);
            for (var j = 0u; j < nt; j++) { acc[j] += wv * bitcast<f32>(B[b4 + j * k + q]); }
        }
    } else if (block_bytes(t) == 0u) {  // plain weights: the 64 invocations take every 64th element
        let nb0 = nb(TA, 0u);
        for (var q = l; q < k; q += WG) {
            let wv = A_f(row + q * nb0, t);
            for (var j = 0u; j < nt; j++) { acc[j] += wv * B_f32(bw0 + (j * k + q) * 4u); }
        }
    } else {  // quantized: every 64th chunk of 32, decoded once for all the columns
        var w: array<f32, 32>;
        let nchunks = k / 32u;
        for (var c = l; c < nchunks; c += WG) {
            a_dq32(t, row, c, &w);
            for (var j = 0u; j < nt; j++) {
                let bw = bw0 + (j * k + 32u * c) * 4u;
                var s = 0.0;
                for (var q = 0u; q < 32u; q++) { s += w[q] * B_f32(bw + q * 4u); }
                acc[j] += s;
            }
        }
    }
    for (var j = 0u; j < nt; j++) { acc_red[j * WG + l] = acc[j]; }
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (l < s) {
            for (var j = 0u; j < nt; j++) { acc_red[j * WG + l] += acc_red[j * WG + l + s]; }
        }
        workgroupBarrier();
    }
    if (l < nt) {
        d_st32(at(TD, pu(OP + 7u) + m, n0 + l, i2, i3), bitcast<u32>(acc_red[l * WG]));
    }
}

// weights rows [0, m_count) of the window A (every matrix i2, i3 of it) -> contiguous f32 rows [mat][m][K] in D.
// One invocation per 32 values. words: n_items, type A, m_count
@compute @workgroup_size(64)
fn pack_a(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let t = pu(OP + 1u);
    let mc = pu(OP + 2u);
    let k = ne(TA, 0u);
    let i = unflat4(e, vec4<u32>((k + 31u) / 32u, mc, ne(TA, 2u), ne(TA, 3u)));
    var y: array<f32, 32>;
    a_load32(t, at(TA, 0u, i.y, i.z, i.w), nb(TA, 0u), i.x, k, &y);
    let out = ((i.w * ne(TA, 2u) + i.z) * mc + i.y) * k + 32u * i.x;
    let kn = min(32u, k - 32u * i.x);
    for (var l = 0u; l < kn; l++) { d_st32((out + l) * 4u, bitcast<u32>(y[l])); }
}

// tiled SGEMM: D[m_base + m, n, i2, i3] = sum_k Ap[mat][m][k] * Bp[batch][n][k], 64x64 tiles per workgroup of
// 16x16 invocations (4x4 outputs each), K in steps of 16 through workgroup memory.
// A: packed weights, B: packed activations; words: n_groups, N, K, b2, r2, r3, m_base, m_count, a2,
// tiles_n, tiles_m
const TILE = 64u;
const TK = 16u;
var<workgroup> sa: array<f32, 1024>;  // [TK][TILE]
var<workgroup> sb: array<f32, 1024>;

@compute @workgroup_size(256)
fn sgemm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) li: u32) {
    let g = group(wid, nwg);
    if (g >= pu(OP)) { return; }
    let n_all = pu(OP + 1u);
    let k = pu(OP + 2u);
    let b2 = pu(OP + 3u);
    let mc = pu(OP + 7u);
    let tn = pu(OP + 9u);
    let tm = pu(OP + 10u);
    let tile_n = g % tn;
    let tile_m = (g / tn) % tm;
    let batch = g / (tn * tm);
    let i2 = batch % b2;
    let i3 = batch / b2;
    let mat = (i3 / pu(OP + 5u)) * pu(OP + 8u) + i2 / pu(OP + 4u);
    let tx = li % 16u;  // 4 columns n of the tile
    let ty = li / 16u;  // 4 rows m
    let m0 = tile_m * TILE;
    let n0 = tile_n * TILE;
    let a_base = mat * mc * k;
    let b_base = batch * n_all * k;
    var acc: array<f32, 16>;
    for (var q = 0u; q < 16u; q++) { acc[q] = 0.0; }
    for (var kb = 0u; kb < k; kb += TK) {
        // 256 invocations load 64 x 16 values of each operand: 4 each
        for (var r = 0u; r < 4u; r++) {
            let idx = li + r * 256u;
            let row = idx / TK;
            let kk = idx % TK;
            var av = 0.0;
            var bv = 0.0;
            if (kb + kk < k) {
                if (m0 + row < mc) { av = A_f32((a_base + (m0 + row) * k + kb + kk) * 4u); }
                if (n0 + row < n_all) { bv = B_f32((b_base + (n0 + row) * k + kb + kk) * 4u); }
            }
            sa[kk * TILE + row] = av;
            sb[kk * TILE + row] = bv;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk++) {
            let a4 = vec4<f32>(sa[kk * TILE + ty * 4u], sa[kk * TILE + ty * 4u + 1u], sa[kk * TILE + ty * 4u + 2u],
                               sa[kk * TILE + ty * 4u + 3u]);
            let b4 = vec4<f32>(sb[kk * TILE + tx * 4u], sb[kk * TILE + tx * 4u + 1u], sb[kk * TILE + tx * 4u + 2u],
                               sb[kk * TILE + tx * 4u + 3u]);
            for (var i = 0u; i < 4u; i++) {
                acc[i * 4u] += a4[i] * b4.x;
                acc[i * 4u + 1u] += a4[i] * b4.y;
                acc[i * 4u + 2u] += a4[i] * b4.z;
                acc[i * 4u + 3u] += a4[i] * b4.w;
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let m = m0 + ty * 4u + i;
        if (m >= mc) { continue; }
        for (var j = 0u; j < 4u; j++) {
            let n = n0 + tx * 4u + j;
            if (n < n_all) { d_st32(at(TD, pu(OP + 6u) + m, n, i2, i3), bitcast<u32>(acc[i * 4u + j])); }
        }
    }
}

// this invocation's share of the dot product of weight row `row` (A) with the packed activation row at byte bw (B)
fn partial_dot(t: u32, row: u32, bw: u32, k: u32, l: u32) -> f32 {
    var acc = 0.0;
    if (block_bytes(t) == 0u) {
        let nb0 = nb(TA, 0u);
        for (var q = l; q < k; q += WG) { acc += A_f(row + q * nb0, t) * B_f32(bw + q * 4u); }
    } else {
        var w: array<f32, 32>;
        for (var c = l; c < k / 32u; c += WG) {
            a_dq32(t, row, c, &w);
            var s = 0.0;
            for (var q = 0u; q < 32u; q++) { s += w[q] * B_f32(bw + (32u * c + q) * 4u); }
            acc += s;
        }
    }
    return acc;
}

// MUL_MAT_ID: D[m, slot, tok] = A[:, m, C[slot, tok]] . Bp[tok][slot % b1]; one workgroup per output.
// A bad expert index writes 0 and reports `code`. words: n_groups, type A, K, b1, n_used, code
@compute @workgroup_size(64)
fn mul_mat_id(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = group(wid, nwg);
    if (g >= pu(OP)) { return; }
    let l = lid.x;
    let t = pu(OP + 1u);
    let k = pu(OP + 2u);
    let b1 = pu(OP + 3u);
    let n_used = pu(OP + 4u);
    let m_all = ne(TA, 1u);
    let m = g % m_all;
    let slot = (g / m_all) % n_used;
    let tok = g / (m_all * n_used);
    let ex = C_i(at(TC, slot, tok, 0u, 0u), T_I32);
    let bad = ex < 0 || u32(ex) >= ne(TA, 2u);
    var p = 0.0;
    if (!bad) { p = partial_dot(t, at(TA, 0u, m, u32(ex), 0u), ((tok * b1 + slot % b1) * k) * 4u, k, l); }
    red_mm[l] = p;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (l < s) { red_mm[l] += red_mm[l + s]; }
        workgroupBarrier();
    }
    if (l == 0u) {
        if (bad && m == 0u) { report(pu(OP + 5u)); }
        d_st32(at(TD, m, slot, tok, 0u), bitcast<u32>(select(red_mm[0], 0.0, bad)));
    }
}

var<workgroup> red_mm: array<f32, 64>;
