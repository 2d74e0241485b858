// ggml-opencl: data movement: CPY/DUP/CONT with type conversion (quantizing and dequantizing), GET_ROWS, SET_ROWS.
// Copies pair elements by their flat logical index, so source and destination may differ in shape and strides.

// plain element types: float <-> float (f32/f16/bf16), int -> int, int -> float, f32 -> i32
kernel void k_cpy(TENSOR(a), int a_t, TENSOR(d), int d_t, int ints, long n) {
    ITEM4(d_ne, n)
    int j0, j1, j2, j3;
    unflat(flat(i0, i1, i2, i3, d_ne), a_ne, &j0, &j1, &j2, &j3);
    global const uchar* src = AT(a, j0, j1, j2, j3);
    global uchar* dst = AT(d, i0, i1, i2, i3);
    if (ints == 2) store_i(dst, d_t, load_i(src, a_t));              // int -> int
    else if (ints == 1) store_f(dst, d_t, (float)load_i(src, a_t));  // int -> float
    else if (ints == 3) store_i(dst, d_t, (long)load_f(src, a_t));   // float -> int, truncating
    else store_f(dst, d_t, load_f(src, a_t));
}

// quantized -> float: one work-item per 32-value chunk of the source
kernel void k_cpy_from_q(TENSOR(a), int a_t, TENSOR(d), int d_t, long n) {
    ITEM4(((int4)(a_ne.s0 / 32, a_ne.s1, a_ne.s2, a_ne.s3)), n)
    const int c = i0, j1 = i1, j2 = i2, j3 = i3;
    float y[32];
    dq32(a_t, AT(a, 0, j1, j2, j3), c, y);
    const long e0 = flat(32 * c, j1, j2, j3, a_ne);
    for (int l = 0; l < 32; ++l) {
        unflat(e0 + l, d_ne, &i0, &i1, &i2, &i3);
        store_f(AT(d, i0, i1, i2, i3), d_t, y[l]);
    }
}

// gather the 32 source values of flat elements e0..e0+31 (any source type; a quantized source decodes its chunk)
inline void gather32(TENSOR(a), int a_t, long e0, float* x) {
    int j0, j1, j2, j3;
    unflat(e0, a_ne, &j0, &j1, &j2, &j3);
    if (type_block_bytes(a_t) != 0) {
        dq32(a_t, AT(a, 0, j1, j2, j3), j0 / 32, x);
        return;
    }
    for (int l = 0; l < 32; ++l) {
        unflat(e0 + l, a_ne, &j0, &j1, &j2, &j3);
        x[l] = load_f(AT(a, j0, j1, j2, j3), a_t);
    }
}

// anything -> a legacy 32-value quantized type: one work-item per destination block
kernel void k_cpy_to_q(TENSOR(a), int a_t, TENSOR(d), int d_t, long n) {
    ITEM4(((int4)(d_ne.s0 / 32, d_ne.s1, d_ne.s2, d_ne.s3)), n)
    const int c = i0;
    float x[32];
    gather32(a_p, a_o, a_ne, a_nb, a_t, flat(32 * c, i1, i2, i3, d_ne), x);
    q32(d_t, x, AT(d, 0, i1, i2, i3) + (long)c * type_block_bytes(d_t));
}

// same quantized type: blocks move as bytes in logical order; one work-item per destination block
kernel void k_cpy_blocks(TENSOR(a), TENSOR(d), int bs, int bytes, long n) {
    ITEM4(((int4)(d_ne.s0 / bs, d_ne.s1, d_ne.s2, d_ne.s3)), n)
    const int c = i0;
    int j0, j1, j2, j3;
    unflat(flat(c * bs, i1, i2, i3, d_ne), a_ne, &j0, &j1, &j2, &j3);
    global const uchar* src = AT(a, 0, j1, j2, j3) + (long)(j0 / bs) * bytes;
    global uchar* dst = AT(d, 0, i1, i2, i3) + (long)c * bytes;
    for (int l = 0; l < bytes; ++l) dst[l] = src[l];
}

// GET_ROWS: dst(i0, i10, i11, i12) = a(i0, idx(i10, i11, i12), i11, i12); a bad index writes 0 and reports
kernel void k_get_rows(TENSOR(a), int a_t, TENSOR(b), TENSOR(d), int d_t, global int* err, int code, long n) {
    ITEM4(d_ne, n)
    const int i10 = i1, i11 = i2, i12 = i3;
    const int r = *(global const int*)AT(b, i10, i11, i12, 0);
    global uchar* dst = AT(d, i0, i10, i11, i12);
    if (r < 0 || r >= a_ne.s1) {
        if (i0 == 0) report_error(err, code);
        if (d_t == T_I32) *(global int*)dst = 0; else store_f(dst, d_t, 0.0f);
        return;
    }
    global const uchar* src = AT(a, i0, r, i11, i12);
    if (d_t == T_I32) *(global int*)dst = *(global const int*)src;
    else store_f(dst, d_t, load_f(src, a_t));
}

kernel void k_get_rows_q(TENSOR(a), int a_t, TENSOR(b), TENSOR(d), global int* err, int code, long n) {
    ITEM4(((int4)(d_ne.s0 / 32, d_ne.s1, d_ne.s2, d_ne.s3)), n)
    const int c = i0, i10 = i1, i11 = i2, i12 = i3;
    const int r = *(global const int*)AT(b, i10, i11, i12, 0);
    float y[32];
    if (r < 0 || r >= a_ne.s1) {
        if (c == 0) report_error(err, code);
        for (int l = 0; l < 32; ++l) y[l] = 0.0f;
    } else {
        dq32(a_t, AT(a, 0, r, i11, i12), c, y);
    }
    for (int l = 0; l < 32; ++l) *(global float*)AT(d, 32 * c + l, i10, i11, i12) = y[l];
}

// SET_ROWS: dst(i0, idx(i1, i2 % c1, i3 % c2), i2, i3) = b(i0, i1, i2, i3); bad indices are skipped and reported
inline long set_rows_index(TENSOR(c), int c_t, int i1, int i2, int i3) {
    global const uchar* p = AT(c, i1, i2 % c_ne.s1, i3 % c_ne.s2, 0);
    return c_t == T_I64 ? *(global const long*)p : (long)*(global const int*)p;
}

kernel void k_set_rows(TENSOR(b), int b_t, TENSOR(c), int c_t, TENSOR(d), int d_t, global int* err, int code,
                       long n) {
    ITEM4(b_ne, n)
    const long r = set_rows_index(c_p, c_o, c_ne, c_nb, c_t, i1, i2, i3);
    if (r < 0 || r >= d_ne.s1) {
        if (i0 == 0) report_error(err, code);
        return;
    }
    store_f(AT(d, i0, r, i2, i3), d_t, load_f(AT(b, i0, i1, i2, i3), b_t));
}

kernel void k_set_rows_q(TENSOR(b), int b_t, TENSOR(c), int c_t, TENSOR(d), int d_t, global int* err, int code,
                         long n) {
    ITEM4(((int4)(b_ne.s0 / 32, b_ne.s1, b_ne.s2, b_ne.s3)), n)
    const int blk = i0;
    const long r = set_rows_index(c_p, c_o, c_ne, c_nb, c_t, i1, i2, i3);
    if (r < 0 || r >= d_ne.s1) {
        if (blk == 0) report_error(err, code);
        return;
    }
    float x[32];
    for (int l = 0; l < 32; ++l) x[l] = load_f(AT(b, 32 * blk + l, i1, i2, i3), b_t);
    q32(d_t, x, AT(d, 0, r, i2, i3) + (long)blk * type_block_bytes(d_t));
}
