// ggml-webgpu: FLASH_ATTN_EXT with an online softmax over the kv positions. Q in A (f32), K in B and V in C (f32/f16), mask in E (f16, broadcast over heads and dim 3), sinks in F
// (f32, one per head); dst D is [Dv, n_head, n_q, ne3]. GQA maps head h to kv head h / (n_head / n_head_kv).
// With f16 K, Q is rounded to f16 first (as ggml's CPU converts Q to K's type).
// words: n, scale, max_bias, m0, m1, n_head_log2, softcap, type K, type V, has_mask, has_sinks

fn alibi(max_bias: f32, m0: f32, m1: f32, n_head_log2: u32, h: u32) -> f32 {
    if (max_bias <= 0.0) { return 1.0; }
    if (h < n_head_log2) { return pow(m0, f32(h + 1u)); }
    return pow(m1, f32(2u * (h - n_head_log2) + 1u));
}

var<workgroup> scores: array<f32, 64>;
var<workgroup> valid: array<u32, 64>;

// one workgroup per (iq, h, i3): each invocation scores one kv position of a block of 64 (its whole dot product),
// then every invocation runs the same online-softmax update over the block, in kv order, for its own V dims
// (l, l + 64, l + 128, l + 192)
@compute @workgroup_size(64)
fn flash_attn(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = group(wid, nwg);
    if (g >= pu(OP)) { return; }
    let l = lid.x;
    let ix = unflat4(g, vec4<u32>(ne(TA, 1u), ne(TA, 2u), ne(TA, 3u), 1u));
    let iq = ix.x;
    let h = ix.y;
    let i3 = ix.z;
    let scale = pf(OP + 1u);
    let softcap = pf(OP + 6u);
    let kt = pu(OP + 7u);
    let vt = pu(OP + 8u);
    let has_mask = pu(OP + 9u) != 0u;
    let has_sinks = pu(OP + 10u) != 0u;
    let dk = ne(TA, 0u);
    let dv = ne(TC, 0u);
    let n_kv = ne(TB, 1u);
    let hk = h / (ne(TA, 2u) / ne(TB, 2u));
    let hv = h / (ne(TA, 2u) / ne(TC, 2u));
    let slope = alibi(pf(OP + 2u), pf(OP + 3u), pf(OP + 4u), pu(OP + 5u), h);
    let qrow = at(TA, 0u, iq, h, i3);
    var mrow = 0u;
    if (has_mask) { mrow = at(TE, 0u, iq, h % ne(TE, 2u), i3 % ne(TE, 3u)); }
    var sc = scale;
    if (softcap != 0.0) { sc = scale / softcap; }
    var acc: array<f32, 4>;
    for (var r = 0u; r < 4u; r++) { acc[r] = 0.0; }
    var mx = 0.0;
    var started = false;  // mx is -inf until the first unmasked score
    var sum = 0.0;
    for (var j0 = 0u; j0 < n_kv; j0 += WG) {
        let j = j0 + l;
        var sv = 0.0;
        var ok = 0u;
        if (j < n_kv) {
            var mv = 0.0;
            var raw = 0u;
            if (has_mask) {
                raw = E_u16(mrow + j * nb(TE, 0u));
                mv = slope * f16_to_f32(raw);
            }
            if (raw != 0xfc00u) {  // -inf: masked out
                ok = 1u;
                let krow = at(TB, 0u, j, hk, i3);
                var dot = 0.0;
                for (var i = 0u; i < dk; i++) {
                    var qi = A_f32(qrow + i * nb(TA, 0u));
                    if (kt == T_F16) { qi = round_f16(qi); }
                    dot += qi * B_f(krow + i * nb(TB, 0u), kt);
                }
                sv = dot * sc;
                if (softcap != 0.0) { sv = softcap * tanh(sv); }
                sv += mv;
            }
        }
        scores[l] = sv;
        valid[l] = ok;
        workgroupBarrier();
        let jn = min(WG, n_kv - j0);
        for (var t = 0u; t < jn; t++) {
            if (valid[t] == 0u) { continue; }
            let s = scores[t];
            var ms = 1.0;
            var vs = 1.0;
            if (!started) {
                mx = s;
                started = true;
            } else if (s > mx) {
                ms = exp(mx - s);
                mx = s;
            } else {
                vs = exp(s - mx);
            }
            let vrow = at(TC, 0u, j0 + t, hv, i3);
            for (var r = 0u; r < 4u; r++) {
                let i = l + r * WG;
                if (i < dv) { acc[r] = acc[r] * ms + vs * C_f(vrow + i * nb(TC, 0u), vt); }
            }
            sum = sum * ms + vs;
        }
        workgroupBarrier();
    }
    if (has_sinks) {
        let sk = F_f32(at(TF, h, 0u, 0u, 0u));
        var ms = 1.0;
        var vs = 1.0;
        if (!started) {
            ms = 0.0;
        } else if (sk > mx) {
            ms = exp(mx - sk);
        } else {
            vs = exp(sk - mx);
        }
        for (var r = 0u; r < 4u; r++) { acc[r] *= ms; }
        sum = sum * ms + vs;
    }
    var inv = 0.0;
    if (sum != 0.0) { inv = 1.0 / sum; }
    for (var r = 0u; r < 4u; r++) {
        let i = l + r * WG;
        if (i < dv) { d_st32(at(TD, i, h, iq, i3), bitcast<u32>(acc[r] * inv)); }
    }
}
