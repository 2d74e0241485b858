// ggml-webgpu: the recurrent family, f32: SSM_CONV, SSM_SCAN, GATED_DELTA_NET, RWKV_WKV7.
//
// The scans run one invocation per (state row, head, sequence) and loop over the tokens, the row (at most
// MAX_ROW values) in private memory. The bind group has five operand slots, fewer than these ops' operands, so a
// `load` dispatch first copies the initial states into the result's newest state slot (slot 0), where each
// invocation reads its row and writes it back at the end (and to slot j after the token j steps before the last);
// RWKV_WKV7's v is copied into the output rows, where only the invocation that overwrites an element reads it.

const MAX_ROW = 256u;

// the invocation's state row
var<private> rw: array<f32, MAX_ROW>;

// f32 element `idx` of the result (D), counted from its first byte
fn d_get(idx: u32) -> f32 { return bitcast<f32>(d_ld32(pu(TD) + idx * 4u)); }
fn d_set(idx: u32, v: f32) { d_st32(pu(TD) + idx * 4u, bitcast<u32>(v)); }

fn softplus(x: f32) -> f32 {
    if (x > 20.0) { return x; }
    return log(1.0 + exp(x));
}

// the state row from result element `first` on; the row to result element `dst` on
fn row_load(first: u32, len: u32) {
    for (var l = 0u; l < len; l++) { rw[l] = d_get(first + l); }
}
fn row_store(dst: u32, len: u32) {
    for (var l = 0u; l < len; l++) { d_set(dst + l, rw[l]); }
}

// SSM_CONV: D[i, t, s] = sum over k (ascending) of A[t + k, i, s] * B[k, i]; words: n
@compute @workgroup_size(64)
fn ssm_conv(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let o = unflat(e, TD);
    var acc = 0.0;
    for (var k = 0u; k < ne(TB, 0u); k++) {
        acc += A_f32(at(TA, o.y + k, o.x, o.z, 0u)) * B_f32(at(TB, k, o.x, 0u, 0u));
    }
    d_st32(at(TD, o.x, o.y, o.z, o.w), bitcast<u32>(acc));
}

// load: element e (flat over the shape ne0, ne1, ne2, n / (ne0 ne1 ne2)) of A written to result element first + e;
// with gather = 1, index i3 reads A's dim-3 row B[i3] (i32), a bad row is reported with `code` and loads zeros.
// words: n, ne0, ne1, ne2, first, gather, code
@compute @workgroup_size(64)
fn load(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let o = unflat4(e, vec4<u32>(pu(OP + 1u), pu(OP + 2u), pu(OP + 3u), 1u));
    var row = o.w;
    if (pu(OP + 5u) == 1u) {
        let r = B_i(at(TB, o.w, 0u, 0u, 0u), T_I32);
        if (r < 0 || u32(r) >= ne(TA, 3u)) {
            if (o.x == 0u) { report(pu(OP + 6u)); }
            d_set(pu(OP + 4u) + e, 0.0);
            return;
        }
        row = u32(r);
    }
    d_set(pu(OP + 4u) + e, A_f32(at(TA, o.x, o.y, o.z, row)));
}

// SSM_SCAN: A x [head_dim, n_head, n_t, n_s], B dt [n_head, n_t, n_s], C A [1 or d_state, n_head], E B and F C
// [d_state, n_group, n_t, n_s]; the result holds y [head_dim, n_head, n_t, n_s], then k_slots slots of n_s states
// [d_state, head_dim, n_head] (slot 0 loaded). Invocation (i, h, s): per token, with delta = softplus(dt),
// st[l] = st[l] * exp(delta * A) + B[l] * x * delta and y = sum over l of st[l] * C[l]. words: n, k_slots
@compute @workgroup_size(64)
fn ssm_scan(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let k_slots = pu(OP + 1u);
    let head_dim = ne(TA, 0u);
    let n_head = ne(TA, 1u);
    let n_t = ne(TA, 2u);
    let n_s = ne(TA, 3u);
    let d_state = ne(TE, 0u);
    let o = unflat4(e, vec4<u32>(head_dim, n_head, n_s, 1u));
    let i = o.x;
    let h = o.y;
    let s = o.z;
    let g = h / (n_head / ne(TE, 1u));
    let per_head = ne(TC, 0u) == 1u;
    let n_y = head_dim * n_head * n_t * n_s;
    let slot_len = d_state * head_dim * n_head * n_s;
    let st = n_y + ((s * n_head + h) * head_dim + i) * d_state;
    row_load(st, d_state);
    for (var t = 0u; t < n_t; t++) {
        let delta = softplus(B_f32(at(TB, h, t, s, 0u)));
        let x_dt = A_f32(at(TA, i, h, t, s)) * delta;
        let decay_h = exp(delta * C_f32(at(TC, 0u, h, 0u, 0u)));
        var acc = 0.0;
        for (var l = 0u; l < d_state; l++) {
            var decay = decay_h;
            if (!per_head) { decay = exp(delta * C_f32(at(TC, l, h, 0u, 0u))); }
            let v = rw[l] * decay + E_f32(at(TE, l, g, t, s)) * x_dt;
            rw[l] = v;
            acc += v * F_f32(at(TF, l, g, t, s));
        }
        d_set(((s * n_t + t) * n_head + h) * head_dim + i, acc);
        let slot = n_t - 1u - t;
        if (slot > 0u && slot < k_slots) { row_store(st + slot * slot_len, d_state); }
    }
    row_store(st, d_state);
}

// GATED_DELTA_NET: A q and B k [S, H_k, n_t, n_s_k], C v [S, H, n_t, n_s], E g [1 or S, H, n_t, n_s], F beta
// [1, H, n_t, n_s]; the result holds the outputs [S, H, n_t, n_s], then k_slots slots of states [S, S, H, n_s]
// (slot 0 loaded; state[i, j] = M[i][j]). Invocation (j, h, s) owns column j of M: per token M[i][j] *= exp(g),
// delta = (v[j] - sum_i M[i][j] k[i]) beta, M[i][j] += k[i] delta, out[j] = scale sum_i M[i][j] q[i].
// words: n, k_slots, scale (f32)
@compute @workgroup_size(64)
fn gated_delta_net(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let k_slots = pu(OP + 1u);
    let scale = pf(OP + 2u);
    let S = ne(TC, 0u);
    let H = ne(TC, 1u);
    let n_t = ne(TC, 2u);
    let n_s = ne(TC, 3u);
    let o = unflat4(e, vec4<u32>(S, H, n_s, 1u));
    let j = o.x;
    let h = o.y;
    let s = o.z;
    let hq = h % ne(TA, 1u);
    let sq = s / (n_s / ne(TA, 3u));
    let kda = ne(TE, 0u) == S;
    let n_y = S * H * n_t * n_s;
    let slot_len = S * S * H * n_s;
    let col = n_y + ((s * H + h) * S + j) * S;
    row_load(col, S);
    for (var t = 0u; t < n_t; t++) {
        let gate = exp(E_f32(at(TE, 0u, h, t, s)));
        var kdot = 0.0;
        for (var l = 0u; l < S; l++) {
            var gl = gate;
            if (kda) { gl = exp(E_f32(at(TE, l, h, t, s))); }
            let m = rw[l] * gl;
            rw[l] = m;
            kdot += m * B_f32(at(TB, l, hq, t, sq));
        }
        let delta = (C_f32(at(TC, j, h, t, s)) - kdot) * F_f32(at(TF, 0u, h, t, s));
        var acc = 0.0;
        for (var l = 0u; l < S; l++) {
            let m = rw[l] + B_f32(at(TB, l, hq, t, sq)) * delta;
            rw[l] = m;
            acc += m * A_f32(at(TA, l, hq, t, sq));
        }
        d_set(((s * n_t + t) * H + h) * S + j, acc * scale);
        let slot = n_t - 1u - t;
        if (slot > 0u && slot < k_slots) { row_store(col + slot * slot_len, S); }
    }
    row_store(col, S);
}

// RWKV_WKV7: A r, B w, C k, E a, F b [S, H, n_tokens] (the tokens of n_s sequences back to back); the result holds
// the outputs [S, H, n_tokens] (loaded with v), then the states [S * S * H, n_s] (loaded). Invocation (i, h, s)
// owns value row i of head h (state[h, i, j]): per token sa = sum_j a[j] M[i, j],
// M[i, j] = M[i, j] w[j] + v[i] k[j] + sa b[j], out[i] = sum_j M[i, j] r[j]. words: n, n_s
@compute @workgroup_size(64)
fn rwkv_wkv7(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let n_s = pu(OP + 1u);
    let S = ne(TC, 0u);
    let H = ne(TC, 1u);
    let n_tokens = ne(TC, 2u);
    let o = unflat4(e, vec4<u32>(S, H, n_s, 1u));
    let i = o.x;
    let h = o.y;
    let s = o.z;
    let per_seq = n_tokens / n_s;
    let row = n_tokens * H * S + ((s * H + h) * S + i) * S;
    row_load(row, S);
    for (var t = s * per_seq; t < (s + 1u) * per_seq; t++) {
        var sa = 0.0;
        for (var l = 0u; l < S; l++) { sa += rw[l] * E_f32(at(TE, l, h, t, 0u)); }
        let yo = (t * H + h) * S + i;
        let vi = d_get(yo);
        var acc = 0.0;
        for (var l = 0u; l < S; l++) {
            let m = rw[l] * B_f32(at(TB, l, h, t, 0u)) + vi * C_f32(at(TC, l, h, t, 0u))
                + sa * F_f32(at(TF, l, h, t, 0u));
            rw[l] = m;
            acc += m * A_f32(at(TA, l, h, t, 0u));
        }
        d_set(yo, acc);
    }
    row_store(row, S);
}
