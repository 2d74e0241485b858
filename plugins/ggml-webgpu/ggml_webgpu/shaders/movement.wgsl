// ggml-webgpu: data movement: CPY/DUP/CONT (float <-> float conversions, same-type byte copies), GET_ROWS, SET_ROWS.

// dst element e = src element e (flat order, both shapes ne[0]-fastest); words: n, type A, type D
@compute @workgroup_size(64)
fn cpy(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let i = unflat(e, TA);
    let o = unflat(e, TD);
    d_stf(at(TD, o.x, o.y, o.z, o.w), pu(OP + 2u), A_f(at(TA, i.x, i.y, i.z, i.w), pu(OP + 1u)));
}

// same-type copy of `unit`-byte elements (blocks for quantized types: ne[0] counts blocks, nb[0] = block bytes);
// one invocation per byte (or per word when unit, strides and bases are multiples of 4); words: n, unit, wordwise
@compute @workgroup_size(64)
fn cpy_raw(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let unit = pu(OP + 1u);
    let step = select(1u, 4u, pu(OP + 2u) != 0u);
    let per = unit / step;
    let el = e / per;
    let off = (e % per) * step;
    let i = unflat(el, TA);
    let o = unflat(el, TD);
    let s = at(TA, i.x, i.y, i.z, i.w) + off;
    let d = at(TD, o.x, o.y, o.z, o.w) + off;
    if (step == 4u) { d_st32(d, A_w(s)); } else { d_st8(d, A_u8(s)); }
}

// dst[:, i10, i11, i12] = A[:, B[i10, i11, i12], i11, i12] for rows of A inside this window [r_lo, r_lo + r_n)
// of the r_all rows; a bad index writes zeros and reports `code`. Words: n, type A, type D, r_lo, r_n, r_all, code
@compute @workgroup_size(64)
fn get_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let o = unflat(e, TD);
    let r = B_i(at(TB, o.y, o.z, o.w, 0u), pu(OP + 7u));
    let r_lo = pu(OP + 3u);
    let td = pu(OP + 2u);
    let dst = at(TD, o.x, o.y, o.z, o.w);
    if (r < 0 || u32(r) >= pu(OP + 5u)) {
        if (r_lo == 0u) {
            if (o.x == 0u) { report(pu(OP + 6u)); }
            d_stf(dst, td, 0.0);
        }
        return;
    }
    let ur = u32(r);
    if (ur < r_lo || ur >= r_lo + pu(OP + 4u)) { return; }
    let src = at(TA, o.x, ur - r_lo, o.z, o.w);
    if (td == T_I32) { d_st32(dst, A_w(src)); } else { d_stf(dst, td, A_f(src, pu(OP + 1u))); }
}

// quantized rows: one invocation per 32 values; words as get_rows
@compute @workgroup_size(64)
fn get_rows_q(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let o = unflat4(e, vec4<u32>(ne(TD, 0u) / 32u, ne(TD, 1u), ne(TD, 2u), ne(TD, 3u)));
    let r = B_i(at(TB, o.y, o.z, o.w, 0u), pu(OP + 7u));
    let r_lo = pu(OP + 3u);
    var y: array<f32, 32>;
    if (r < 0 || u32(r) >= pu(OP + 5u)) {
        if (r_lo != 0u) { return; }
        if (o.x == 0u) { report(pu(OP + 6u)); }
        for (var l = 0u; l < 32u; l++) { y[l] = 0.0; }
    } else {
        let ur = u32(r);
        if (ur < r_lo || ur >= r_lo + pu(OP + 4u)) { return; }
        a_dq32(pu(OP + 1u), at(TA, 0u, ur - r_lo, o.z, o.w), o.x, &y);
    }
    for (var l = 0u; l < 32u; l++) { d_st32(at(TD, 32u * o.x + l, o.y, o.z, o.w), bitcast<u32>(y[l])); }
}

// D[:, B[i1, i2 % B.ne1, i3 % B.ne2], i2, i3] = A[:, i1, i2, i3]; a bad index skips the row and reports `code`.
// words: n, type A, type D, type B (i32 / i64), code
@compute @workgroup_size(64)
fn set_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let i = unflat(e, TA);
    let r = B_i(at(TB, i.y, i.z % ne(TB, 1u), i.w % ne(TB, 2u), 0u), pu(OP + 3u));
    if (r < 0 || u32(r) >= ne(TD, 1u)) {
        if (i.x == 0u) { report(pu(OP + 4u)); }
        return;
    }
    d_stf(at(TD, i.x, u32(r), i.z, i.w), pu(OP + 2u), A_f(at(TA, i.x, i.y, i.z, i.w), pu(OP + 1u)));
}

fn wrap(j: i32, n: u32) -> u32 {
    let m = j % i32(n);
    return u32(select(m, m + i32(n), m < 0));
}

// layout ops, one invocation per destination element, float types: REPEAT (mode 0: A at the index modulo its
// shape), CONCAT (1: A, then B along dimension `dim`), PAD (2: A shifted by the left pads, zeros or wrapped cells
// outside), DIAG_MASK (3: `value` above the diagonal shifted by n_past).
// words: n, mode, type, dim | circular | n_past, value bits, pads lp0 rp0 lp1 rp1 lp2 rp2 lp3 rp3 (signed)
@compute @workgroup_size(64)
fn gather(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let o = unflat(e, TD);
    let t = pu(OP + 2u);
    let dst = at(TD, o.x, o.y, o.z, o.w);
    let na = shape(TA);
    var v = 0.0;
    switch pu(OP + 1u) {
        case 0u: { v = A_f(at(TA, o.x % na.x, o.y % na.y, o.z % na.z, o.w % na.w), t); }
        case 1u: {
            let d = pu(OP + 3u);
            if (o[d] < na[d]) {
                v = A_f(at(TA, o.x, o.y, o.z, o.w), t);
            } else {
                var j = o;
                j[d] = o[d] - na[d];
                v = B_f(at(TB, j.x, j.y, j.z, j.w), t);
            }
        }
        case 2u: {
            let circular = pu(OP + 3u) != 0u;
            var j: vec4<u32>;
            var inside = true;
            for (var d = 0u; d < 4u; d++) {
                let jd = i32(o[d]) - pi(OP + 5u + 2u * d);
                if (jd < 0 || jd >= i32(na[d])) {
                    inside = false;
                    j[d] = wrap(jd, na[d]);
                } else {
                    j[d] = u32(jd);
                }
            }
            if (inside || circular) { v = A_f(at(TA, j.x, j.y, j.z, j.w), t); }
        }
        default: {
            v = A_f(at(TA, o.x, o.y, o.z, o.w), t);
            if (o.x > pu(OP + 3u) + o.y) { v = pf(OP + 4u); }
        }
    }
    d_stf(dst, t, v);
}

// ---- quantizers: one 32-value block in ggml's quantize_row_*_ref arithmetic (byte-identical), written at byte b
// of D with byte stores (blocks are 18-24 or 34 bytes: never whole words)

fn st16_any(b: u32, v: u32) {
    d_st8(b, v & 0xffu);
    d_st8(b + 1u, (v >> 8u) & 0xffu);
}

fn st32_any(b: u32, v: u32) {
    st16_any(b, v & 0xffffu);
    st16_any(b + 2u, v >> 16u);
}

fn d_q32(t: u32, x: ptr<function, array<f32, 32>>, b: u32) {
    switch t {
        case 8u: {  // Q8_0: d = amax / 127, q = round(x / d)
            var amax = 0.0;
            for (var l = 0u; l < 32u; l++) { amax = max(amax, abs((*x)[l])); }
            let d = amax / 127.0;
            let id = select(0.0, 1.0 / d, d != 0.0);
            st16_any(b, f32_to_f16(d));
            for (var l = 0u; l < 32u; l++) { d_st8(b + 2u + l, bitcast<u32>(i32(roundf((*x)[l] * id))) & 0xffu); }
        }
        case 2u, 6u: {  // Q4_0 / Q5_0: d = (value of largest magnitude) / -8 (-16)
            var amax = 0.0;
            var vmax = 0.0;
            for (var l = 0u; l < 32u; l++) {
                if (amax < abs((*x)[l])) { amax = abs((*x)[l]); vmax = (*x)[l]; }
            }
            let d = vmax / select(-16.0, -8.0, t == 2u);
            let id = select(0.0, 1.0 / d, d != 0.0);
            st16_any(b, f32_to_f16(d));
            if (t == 2u) {
                for (var l = 0u; l < 16u; l++) {
                    let lo = min(15, i32((*x)[l] * id + 8.5));
                    let hi = min(15, i32((*x)[l + 16u] * id + 8.5));
                    d_st8(b + 2u + l, (u32(lo) & 0xfu) | ((u32(hi) & 0xfu) << 4u));
                }
            } else {
                var qh = 0u;
                for (var l = 0u; l < 16u; l++) {
                    let lo = u32(min(31, i32((*x)[l] * id + 16.5)));
                    let hi = u32(min(31, i32((*x)[l + 16u] * id + 16.5)));
                    d_st8(b + 6u + l, (lo & 0xfu) | ((hi & 0xfu) << 4u));
                    qh = qh | (((lo & 0x10u) >> 4u) << l) | (((hi & 0x10u) >> 4u) << (l + 16u));
                }
                st32_any(b + 2u, qh);
            }
        }
        case 3u, 7u: {  // Q4_1 / Q5_1: d = (max - min) / 15 (31), m = min
            var vmin = (*x)[0];
            var vmax = (*x)[0];
            for (var l = 1u; l < 32u; l++) {
                vmin = min(vmin, (*x)[l]);
                vmax = max(vmax, (*x)[l]);
            }
            let d = (vmax - vmin) / select(31.0, 15.0, t == 3u);
            let id = select(0.0, 1.0 / d, d != 0.0);
            st16_any(b, f32_to_f16(d));
            st16_any(b + 2u, f32_to_f16(vmin));
            if (t == 3u) {
                for (var l = 0u; l < 16u; l++) {
                    let lo = min(15, i32(((*x)[l] - vmin) * id + 0.5));
                    let hi = min(15, i32(((*x)[l + 16u] - vmin) * id + 0.5));
                    d_st8(b + 4u + l, (u32(lo) & 0xfu) | ((u32(hi) & 0xfu) << 4u));
                }
            } else {
                var qh = 0u;
                for (var l = 0u; l < 16u; l++) {
                    let lo = u32(i32(((*x)[l] - vmin) * id + 0.5)) & 0xffu;
                    let hi = u32(i32(((*x)[l + 16u] - vmin) * id + 0.5)) & 0xffu;
                    d_st8(b + 8u + l, (lo & 0xfu) | ((hi & 0xfu) << 4u));
                    qh = qh | (((lo & 0x10u) >> 4u) << l) | (((hi & 0x10u) >> 4u) << (l + 16u));
                }
                st32_any(b + 4u, qh);
            }
        }
        default: { }
    }
}

// SET_ROWS into quantized rows: one invocation per 32-value block of A; words as set_rows
@compute @workgroup_size(64)
fn set_rows_q(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let i = unflat4(e, vec4<u32>(ne(TA, 0u) / 32u, ne(TA, 1u), ne(TA, 2u), ne(TA, 3u)));
    let r = B_i(at(TB, i.y, i.z % ne(TB, 1u), i.w % ne(TB, 2u), 0u), pu(OP + 3u));
    if (r < 0 || u32(r) >= ne(TD, 1u)) {
        if (i.x == 0u) { report(pu(OP + 4u)); }
        return;
    }
    var x: array<f32, 32>;
    for (var l = 0u; l < 32u; l++) { x[l] = A_f(at(TA, 32u * i.x + l, i.y, i.z, i.w), pu(OP + 1u)); }
    d_q32(pu(OP + 2u), &x, at(TD, i.x, u32(r), i.z, i.w));
}

// CPY into a quantized tensor: one invocation per destination block, its 32 values from A in flat order;
// words: n_blocks, type A, type D
@compute @workgroup_size(64)
fn cpy_q(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let nd = shape(TD);
    let o = unflat4(e, vec4<u32>(nd.x / 32u, nd.y, nd.z, nd.w));
    let first = ((o.w * nd.z + o.z) * nd.y + o.y) * nd.x + 32u * o.x;
    var x: array<f32, 32>;
    for (var l = 0u; l < 32u; l++) {
        let i = unflat(first + l, TA);
        x[l] = A_f(at(TA, i.x, i.y, i.z, i.w), pu(OP + 1u));
    }
    d_q32(pu(OP + 2u), &x, at(TD, o.x, o.y, o.z, o.w));
}

// CPY out of a quantized tensor: one invocation per 32 source values, written in flat order to any float D;
// words: n_chunks, type A, type D
@compute @workgroup_size(64)
fn cpy_dq(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let na = shape(TA);
    let i = unflat4(e, vec4<u32>(na.x / 32u, na.y, na.z, na.w));
    var y: array<f32, 32>;
    a_dq32(pu(OP + 1u), at(TA, 0u, i.y, i.z, i.w), i.x, &y);
    let first = ((i.w * na.z + i.z) * na.y + i.y) * na.x + 32u * i.x;
    for (var l = 0u; l < 32u; l++) {
        let o = unflat(first + l, TD);
        d_stf(at(TD, o.x, o.y, o.z, o.w), pu(OP + 2u), y[l]);
    }
}
