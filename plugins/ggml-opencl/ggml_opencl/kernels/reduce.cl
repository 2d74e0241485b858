// ggml-opencl: reductions and selection: SUM, SUM_ROWS, MEAN, CUMSUM, ARGMAX, COUNT_EQUAL, ARGSORT, TOP_K.

// compensated (Kahan) running sum: float accumulation that follows ggml's double sums closely
inline void kahan_add(float* s, float* c, float v) {
    const float y = v - *c;
    const float t = *s + y;
    *c = (t - *s) - y;
    *s = t;
}

#define R_SUM_ROWS 0
#define R_MEAN 1
#define R_SUM 2

// SUM_ROWS / MEAN: one work-group per row; SUM: one work-group over every element
kernel void k_sum(int mode, TENSOR(a), int a_t, TENSOR(d), int d_t, local float* scratch) {
    const int lid = get_local_id(0), ls = get_local_size(0);
    float s = 0.0f, c = 0.0f;
    if (mode == R_SUM) {
        const long n = (long)a_ne.s0 * a_ne.s1 * a_ne.s2 * a_ne.s3;
        for (long e = lid; e < n; e += ls) {
            int i0, i1, i2, i3;
            unflat(e, a_ne, &i0, &i1, &i2, &i3);
            kahan_add(&s, &c, load_f(AT(a, i0, i1, i2, i3), a_t));
        }
        s = group_sum(s, scratch);
        if (lid == 0) store_f(AT(d, 0, 0, 0, 0), d_t, s);
        return;
    }
    const int r = get_group_id(0);
    const int i1 = r % a_ne.s1, i2 = (r / a_ne.s1) % a_ne.s2, i3 = r / (a_ne.s1 * a_ne.s2);
    global const uchar* row = AT(a, 0, i1, i2, i3);
    for (int i = lid; i < a_ne.s0; i += ls) kahan_add(&s, &c, load_f(row + (long)i * a_nb.s0, a_t));
    s = group_sum(s, scratch);
    if (mode == R_MEAN) s = s / (float)a_ne.s0;
    if (lid == 0) store_f(AT(d, 0, i1, i2, i3), d_t, s);
}

// CUMSUM: one work-item per row, y[i] = y[i-1] + x[i] in float (as ggml)
kernel void k_cumsum(TENSOR(a), TENSOR(d), long n) {
    const long r = get_global_id(0);
    if (r >= n) return;
    const int i1 = r % a_ne.s1, i2 = (r / a_ne.s1) % a_ne.s2, i3 = r / (a_ne.s1 * a_ne.s2);
    float s = 0.0f;
    for (int i = 0; i < a_ne.s0; ++i) {
        s += *(global const float*)AT(a, i, i1, i2, i3);
        *(global float*)AT(d, i, i1, i2, i3) = s;
    }
}

// ARGMAX: ggml's loop, max = MAX(max, x[i]); if (max == x[i]) idx = i: the last of equal maxima
kernel void k_argmax(TENSOR(a), TENSOR(d), long n) {
    const long r = get_global_id(0);
    if (r >= n) return;
    float best = -INFINITY;
    int idx = 0;
    for (int i = 0; i < a_ne.s0; ++i) {
        const float v = *(global const float*)AT(a, i, r, 0, 0);
        best = best > v ? best : v;
        if (best == v) idx = i;
    }
    *(global int*)AT(d, r, 0, 0, 0) = idx;
}

// COUNT_EQUAL: i32 elements of a and b that are equal, as one i64 (a single work-item)
kernel void k_count_equal(TENSOR(a), TENSOR(b), TENSOR(d)) {
    if (get_global_id(0) != 0) return;
    const long n = (long)a_ne.s0 * a_ne.s1 * a_ne.s2 * a_ne.s3;
    long count = 0;
    for (long e = 0; e < n; ++e) {
        int i0, i1, i2, i3;
        unflat(e, a_ne, &i0, &i1, &i2, &i3);
        count += *(global const int*)AT(a, i0, i1, i2, i3) == *(global const int*)AT(b, i0, i1, i2, i3);
    }
    *(global long*)AT(d, 0, 0, 0, 0) = count;
}

// ARGSORT / TOP_K: one work-item per source element finds its rank in its row (a stable order: ties keep index
// order) and writes its index there. TOP_K (k > 0) keeps ranks < k, descending, with the first two swapped as ggml.
kernel void k_rank_sort(int descending, int k, TENSOR(a), TENSOR(d), long n) {
    ITEM4(a_ne, n)
    global const uchar* row = AT(a, 0, i1, i2, i3);
    const float x = *(global const float*)(row + (long)i0 * a_nb.s0);
    int rank = 0;
    for (int j = 0; j < a_ne.s0; ++j) {
        const float y = *(global const float*)(row + (long)j * a_nb.s0);
        const int before = descending ? (y > x) : (y < x);
        rank += before || (y == x && j < i0);
    }
    if (k > 0) {
        if (rank >= k) return;
        if (k > 1 && rank < 2) rank = 1 - rank;
    }
    *(global int*)AT(d, rank, i1, i2, i3) = i0;
}
