// ggml-webgpu: per-row kernels, one 64-wide workgroup per row: NORM / RMS_NORM / L2_NORM and SOFT_MAX (ext).

var<workgroup> red: array<f32, 64>;

fn group_sum(v: f32, l: u32) -> f32 {
    workgroupBarrier();
    red[l] = v;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (l < s) { red[l] = red[l] + red[l + s]; }
        workgroupBarrier();
    }
    return red[0];
}

fn group_max(v: f32, l: u32) -> f32 {
    workgroupBarrier();
    red[l] = v;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (l < s) { red[l] = max(red[l], red[l + s]); }
        workgroupBarrier();
    }
    return red[0];
}

// words: n_rows, mode (0 norm, 1 rms_norm, 2 l2_norm), eps, fused (1: D = norm(A) * repeat(B), the MUL that
// consumed the norm folded in; the norm's own result is not written)
@compute @workgroup_size(64)
fn norm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let r = group(wid, nwg);
    if (r >= pu(OP)) { return; }  // uniform per workgroup: every invocation leaves together
    let l = lid.x;
    let n = ne(TA, 0u);
    let i = unflat4(r, vec4<u32>(ne(TA, 1u), ne(TA, 2u), ne(TA, 3u), 1u));
    let src = at(TA, 0u, i.x, i.y, i.z);
    let dst = at(TD, 0u, i.x, i.y, i.z);
    let s0 = nb(TA, 0u);
    let mode = pu(OP + 1u);
    let eps = pf(OP + 2u);
    var mean = 0.0;
    if (mode == 0u) {
        var s = 0.0;
        for (var k = l; k < n; k += WG) { s += A_f32(src + k * s0); }
        mean = group_sum(s, l) / f32(n);
    }
    var ss = 0.0;
    for (var k = l; k < n; k += WG) {
        let x = A_f32(src + k * s0) - mean;
        ss += x * x;
    }
    let sum = group_sum(ss, l);
    var scale: f32;
    if (mode == 2u) {
        scale = 1.0 / max(sqrt(sum), eps);
    } else {
        scale = 1.0 / sqrt(sum / f32(n) + eps);
    }
    if (pu(OP + 3u) == 0u) {
        for (var k = l; k < n; k += WG) { d_st32(dst + k * nb(TD, 0u), bitcast<u32>((A_f32(src + k * s0) - mean) * scale)); }
        return;
    }
    // the MUL: the same f32 product of the rounded norm value and the weight as the unfused pair computes
    let w = at(TB, 0u, i.x % ne(TB, 1u), i.y % ne(TB, 2u), i.z % ne(TB, 3u));
    let nw = ne(TB, 0u);
    for (var k = l; k < n; k += WG) {
        let v = (A_f32(src + k * s0) - mean) * scale;
        d_st32(dst + k * nb(TD, 0u), bitcast<u32>(v * B_f32(w + (k % nw) * nb(TB, 0u))));
    }
}

fn alibi_slope(max_bias: f32, m0: f32, m1: f32, n_head_log2: u32, h: u32) -> f32 {
    if (max_bias <= 0.0) { return 1.0; }
    if (h < n_head_log2) { return pow(m0, f32(h + 1u)); }
    return pow(m1, f32(2u * (h - n_head_log2) + 1u));
}

// softmax(x * scale + slope * mask) per row of A; mask in B (broadcast over dims 2, 3), sinks in C (one per head)
// words: n_rows, scale, max_bias, m0, m1, n_head_log2, has_mask, mask type, has_sinks
@compute @workgroup_size(64)
fn soft_max(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_id) lid: vec3<u32>) {
    let r = group(wid, nwg);
    if (r >= pu(OP)) { return; }
    let l = lid.x;
    let n = ne(TA, 0u);
    let i = unflat4(r, vec4<u32>(ne(TA, 1u), ne(TA, 2u), ne(TA, 3u), 1u));
    let i1 = i.x;
    let i2 = i.y;
    let i3 = i.z;
    let scale = pf(OP + 1u);
    let slope = alibi_slope(pf(OP + 2u), pf(OP + 3u), pf(OP + 4u), pu(OP + 5u), i2);
    let has_mask = pu(OP + 6u) != 0u;
    let mt = pu(OP + 7u);
    let has_sinks = pu(OP + 8u) != 0u;
    let x = at(TA, 0u, i1, i2, i3);
    var mrow = 0u;
    if (has_mask) { mrow = at(TB, 0u, i1 % ne(TB, 1u), i2 % ne(TB, 2u), i3 % ne(TB, 3u)); }
    let y = at(TD, 0u, i1, i2, i3);
    var mx = A_f32(x) * scale;  // element 0 starts every invocation's maximum (-inf needs no literal)
    if (has_mask) { mx += slope * B_f(mrow, mt); }
    for (var k = l; k < n; k += WG) {
        var w = A_f32(x + k * nb(TA, 0u)) * scale;
        if (has_mask) { w += slope * B_f(mrow + k * nb(TB, 0u), mt); }
        mx = max(mx, w);
    }
    mx = group_max(mx, l);
    var sink = 0.0;
    if (has_sinks) {
        sink = C_f32(at(TC, i2, 0u, 0u, 0u));
        mx = max(mx, sink);
    }
    var sum = 0.0;
    for (var k = l; k < n; k += WG) {
        var w = A_f32(x + k * nb(TA, 0u)) * scale;
        if (has_mask) { w += slope * B_f(mrow + k * nb(TB, 0u), mt); }
        sum += exp(w - mx);
    }
    sum = group_sum(sum, l);
    if (has_sinks) { sum += exp(sink - mx); }
    let inv = 1.0 / sum;
    for (var k = l; k < n; k += WG) {
        var w = A_f32(x + k * nb(TA, 0u)) * scale;
        if (has_mask) { w += slope * B_f(mrow + k * nb(TB, 0u), mt); }
        d_st32(y + k * nb(TD, 0u), bitcast<u32>(exp(w - mx) * inv));
    }
}

// SUM_ROWS / MEAN: words: n_rows, mean (0 sum, 1 divide by ne0)
@compute @workgroup_size(64)
fn sum_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_id) lid: vec3<u32>) {
    let r = group(wid, nwg);
    if (r >= pu(OP)) { return; }
    let l = lid.x;
    let n = ne(TA, 0u);
    let i = unflat4(r, vec4<u32>(ne(TA, 1u), ne(TA, 2u), ne(TA, 3u), 1u));
    let src = at(TA, 0u, i.x, i.y, i.z);
    var s = 0.0;
    for (var k = l; k < n; k += WG) { s += A_f32(src + k * nb(TA, 0u)); }
    var total = group_sum(s, l);
    if (pu(OP + 1u) != 0u) { total = total / f32(n); }
    if (l == 0u) { d_st32(at(TD, 0u, i.x, i.y, i.z), bitcast<u32>(total)); }
}

// a total order of the f32 bit patterns (NaNs after +inf, or before -inf when negative): every rank is unique,
// so the result is a permutation whatever the data
fn sort_key(v: f32) -> u32 {
    let u = bitcast<u32>(v);
    return select(u ^ 0x80000000u, ~u, (u & 0x80000000u) != 0u);
}

// ARGSORT / TOP_K by ranking: element i0 of its row goes to position rank = #{j: x_j before x_i0} (ties by index,
// a valid order for ggml's unstable sort); TOP_K keeps ranks < ne0 of D. words: n, descending
@compute @workgroup_size(64)
fn rank_sort(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let i = unflat(e, TA);
    let row = at(TA, 0u, i.y, i.z, i.w);
    let s0 = nb(TA, 0u);
    let x = sort_key(A_f32(row + i.x * s0));
    let desc = pu(OP + 1u) != 0u;
    var rank = 0u;
    for (var j = 0u; j < ne(TA, 0u); j++) {
        let y = sort_key(A_f32(row + j * s0));
        let before = select((y < x), (y > x), desc) || (y == x && j < i.x);
        rank += select(0u, 1u, before);
    }
    if (rank < ne(TD, 0u)) { d_st32(at(TD, rank, i.y, i.z, i.w), i.x); }
}

var<workgroup> red_i: array<u32, 64>;

// ARGMAX per row of A (ties: the last index, as ggml); words: n_rows
@compute @workgroup_size(64)
fn argmax(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
    let r = group(wid, nwg);
    if (r >= pu(OP)) { return; }
    let l = lid.x;
    let n = ne(TA, 0u);
    let row = at(TA, 0u, r, 0u, 0u);
    var best = A_f32(row);
    var bi = 0u;
    for (var k = l; k < n; k += WG) {
        let v = A_f32(row + k * nb(TA, 0u));
        if (v >= best) { best = v; bi = k; }  // k grows: >= keeps the last of equal values
    }
    red[l] = best;
    red_i[l] = bi;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (l < s) {
            let v = red[l + s];
            let i = red_i[l + s];
            if (v > red[l] || (v == red[l] && i > red_i[l])) {
                red[l] = v;
                red_i[l] = i;
            }
        }
        workgroupBarrier();
    }
    if (l == 0u) { d_st32(at(TD, r, 0u, 0u, 0u), red_i[0]); }
}

// CUMSUM: one invocation per row, the running sum in order (as ggml); words: n_rows
@compute @workgroup_size(64)
fn cumsum(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
    let r = item(wid, nwg, lid);
    if (r >= pu(OP)) { return; }
    let i = unflat4(r, vec4<u32>(ne(TA, 1u), ne(TA, 2u), ne(TA, 3u), 1u));
    let src = at(TA, 0u, i.x, i.y, i.z);
    let dst = at(TD, 0u, i.x, i.y, i.z);
    var s = 0.0;
    for (var k = 0u; k < ne(TA, 0u); k++) {
        s += A_f32(src + k * nb(TA, 0u));
        d_st32(dst + k * nb(TD, 0u), bitcast<u32>(s));
    }
}

// SUM of every element of A, by one workgroup; words: 1
@compute @workgroup_size(64)
fn sum_all(@builtin(local_invocation_id) lid: vec3<u32>) {
    let l = lid.x;
    let sh = shape(TA);
    let n = sh.x * sh.y * sh.z * sh.w;
    var s = 0.0;
    for (var e = l; e < n; e += WG) {
        let i = unflat(e, TA);
        s += A_f32(at(TA, i.x, i.y, i.z, i.w));
    }
    let total = group_sum(s, l);
    if (l == 0u) { d_st32(pu(TD), bitcast<u32>(total)); }
}
