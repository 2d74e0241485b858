// ggml-opencl: row normalisations. One work-group of LS items (a power of two, 1 on CPU devices) per row.

#define N_NORM 0
#define N_RMS 1
#define N_L2 2

inline void row_of(int r, int4 ne, int* i1, int* i2, int* i3) {
    *i1 = r % ne.s1;
    *i2 = (r / ne.s1) % ne.s2;
    *i3 = r / (ne.s1 * ne.s2);
}

// NORM: (x - mean) / sqrt(var + eps); RMS_NORM: x / sqrt(mean(x^2) + eps); L2_NORM: x / max(|x|, eps)
kernel void k_norm_rows(int mode, float eps, TENSOR(a), TENSOR(d), local float* scratch) {
    int i1, i2, i3;
    row_of(get_group_id(0), d_ne, &i1, &i2, &i3);
    const int lid = get_local_id(0), ls = get_local_size(0), n = a_ne.s0;
    global const uchar* x = AT(a, 0, i1, i2, i3);
    global uchar* y = AT(d, 0, i1, i2, i3);
    float mean = 0.0f;
    if (mode == N_NORM) {
        float s = 0.0f;
        for (int i = lid; i < n; i += ls) s += *(global const float*)(x + i * a_nb.s0);
        mean = group_sum(s, scratch) / (float)n;
    }
    float s2 = 0.0f;
    for (int i = lid; i < n; i += ls) {
        const float v = *(global const float*)(x + i * a_nb.s0) - mean;
        s2 += v * v;
    }
    s2 = group_sum(s2, scratch);
    float scale;
    if (mode == N_L2) scale = 1.0f / fmax(sqrt(s2), eps);
    else scale = 1.0f / sqrt(s2 / (float)n + eps);
    for (int i = lid; i < n; i += ls) {
        const float v = *(global const float*)(x + i * a_nb.s0) - mean;
        *(global float*)(y + i * d_nb.s0) = v * scale;
    }
}

// GROUP_NORM: channels (dim 2) in groups of cpg; one work-group per (group, i3)
kernel void k_group_norm(int cpg, float eps, TENSOR(a), TENSOR(d), local float* scratch) {
    const int g = get_group_id(0), i3 = get_group_id(1);
    const int lid = get_local_id(0), ls = get_local_size(0);
    const int c0 = g * cpg, c1 = min(c0 + cpg, a_ne.s2);
    const int ne0 = a_ne.s0, ne1 = a_ne.s1;
    const int n = ne0 * ne1 * (c1 - c0);
    float s = 0.0f;
    for (int i = lid; i < n; i += ls) {
        const int i0 = i % ne0, i1 = (i / ne0) % ne1, i2 = c0 + i / (ne0 * ne1);
        s += *(global const float*)AT(a, i0, i1, i2, i3);
    }
    const float mean = group_sum(s, scratch) / (float)n;
    float s2 = 0.0f;
    for (int i = lid; i < n; i += ls) {
        const int i0 = i % ne0, i1 = (i / ne0) % ne1, i2 = c0 + i / (ne0 * ne1);
        const float v = *(global const float*)AT(a, i0, i1, i2, i3) - mean;
        s2 += v * v;
    }
    const float scale = 1.0f / sqrt(group_sum(s2, scratch) / (float)n + eps);
    for (int i = lid; i < n; i += ls) {
        const int i0 = i % ne0, i1 = (i / ne0) % ne1, i2 = c0 + i / (ne0 * ne1);
        const float v = *(global const float*)AT(a, i0, i1, i2, i3) - mean;
        *(global float*)AT(d, i0, i1, i2, i3) = v * scale;
    }
}
