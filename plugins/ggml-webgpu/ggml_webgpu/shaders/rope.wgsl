// ggml-webgpu: ROPE (NORMAL, NEOX, MROPE, IMROPE, VISION; YaRN, channel offset, frequency factors).
// One invocation per pair slot j (ne0 / 2 per row) of (head i1, token i2, i3). NORMAL rotates (lo + 2i, lo + 2i + 1),
// NEOX/MROPE/IMROPE (lo + i, lo + i + n_dims/2), VISION (i, i + n_dims), lo = n_offs; channels outside the rotated
// range are copied. Multi-section modes take the position of the pair's section (pos[i2 + k * ne2]). theta
// advances by repeated float multiplication, as ggml's cache does.
// A: x, B: positions (i32), C: frequency factors; words: n, mode, n_dims, n_offs, sections[4], theta_scale,
// freq_scale, ext_factor, mscale, corr0, corr1, type, has_ff

@compute @workgroup_size(64)
fn rope(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = item(wid, nwg, lid);
    if (e >= pu(OP)) { return; }
    let ix = unflat4(e, vec4<u32>(ne(TA, 0u) / 2u, ne(TA, 1u), ne(TA, 2u), ne(TA, 3u)));
    let j = ix.x;
    let i1 = ix.y;
    let i2 = ix.z;
    let i3 = ix.w;
    let mode = pu(OP + 1u);
    let n_dims = pu(OP + 2u);
    let lo = pu(OP + 3u);
    let s0 = pu(OP + 4u);
    let s1 = pu(OP + 5u);
    let s2 = pu(OP + 6u);
    let s3 = pu(OP + 7u);
    let theta_scale = pf(OP + 8u);
    let freq_scale = pf(OP + 9u);
    let ext_factor = pf(OP + 10u);
    let mscale = pf(OP + 11u);
    let corr0 = pf(OP + 12u);
    let corr1 = pf(OP + 13u);
    let t = pu(OP + 14u);
    let has_ff = pu(OP + 15u) != 0u;
    let vision = mode == 24u;
    let nh = n_dims / 2u;
    if (!vision && (2u * j < lo || 2u * j >= lo + n_dims)) {
        d_stf(at(TD, 2u * j, i1, i2, i3), t, A_f(at(TA, 2u * j, i1, i2, i3), t));
        d_stf(at(TD, 2u * j + 1u, i1, i2, i3), t, A_f(at(TA, 2u * j + 1u, i1, i2, i3), t));
        return;
    }
    var i = j;
    if (!vision) { i = j - lo / 2u; }
    var k0: u32;
    var k1: u32;
    if (vision) {
        k0 = i;
        k1 = i + n_dims;
    } else if (mode == 0u) {
        k0 = lo + 2u * i;
        k1 = k0 + 1u;
    } else {
        k0 = lo + i;
        k1 = lo + i + nh;
    }
    var which = 0u;
    var power = i;
    if ((mode & 8u) != 0u) {
        let sector = i % (s0 + s1 + s2 + s3);
        let s01 = s0 + s1;
        let s012 = s01 + s2;
        if (mode == 40u) {
            let r = sector % 3u;
            if (r == 0u && sector < 3u * s0) { which = 0u; }
            else if (r == 1u && sector < 3u * s1) { which = 1u; }
            else if (r == 2u && sector < 3u * s2) { which = 2u; }
            else { which = 3u; }
        } else {
            which = select(select(select(3u, 2u, sector < s012), 1u, sector < s01), 0u, sector < s0);
        }
        if (vision) {
            var base = s012;
            if (which == 0u) { base = 0u; } else if (which == 1u) { base = s0; } else if (which == 2u) { base = s01; }
            power = sector - base;
        }
    }
    var theta_extrap = f32(bitcast<i32>(B_w(at(TB, i2 + which * ne(TA, 2u), 0u, 0u, 0u))));
    for (var k = 0u; k < power; k++) { theta_extrap *= theta_scale; }
    if (has_ff) { theta_extrap = theta_extrap / C_f32(at(TC, i, 0u, 0u, 0u)); }
    let theta_interp = freq_scale * theta_extrap;
    var theta = theta_interp;
    if (ext_factor != 0.0) {
        let y = (f32(i) - corr0) / max(0.001, corr1 - corr0);
        let ramp = (1.0 - min(1.0, max(0.0, y))) * ext_factor;
        theta = fma(theta_interp, 1.0 - ramp, theta_extrap * ramp);
    }
    // reduce to [-pi, pi] first (Cody-Waite, two constants): shader sin/cos are only specified inside that range
    let kq = round(theta * 0.15915494309189535);
    let red = (theta - kq * 6.28125) - kq * 0.0019353071795864769;
    let c = cos(red) * mscale;
    let s = sin(red) * mscale;
    let x0 = A_f(at(TA, k0, i1, i2, i3), t);
    let x1 = A_f(at(TA, k1, i1, i2, i3), t);
    d_stf(at(TD, k0, i1, i2, i3), t, x0 * c - x1 * s);
    d_stf(at(TD, k1, i1, i2, i3), t, x0 * s + x1 * c);
}
