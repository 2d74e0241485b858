// Normalisation kernels: NORM, RMS_NORM, L2_NORM (one block per row) and GROUP_NORM (one block per group).
// Sums are accumulated in double, as ggml's CPU does, then the scale is computed in float.
#include "common.cuh"

#define N_NORM 0
#define N_RMS 1
#define N_L2 2

// one block per row of x (f32); d f32 of the same shape
extern "C" __global__ void k_norm_rows(const char* x, char* d, TDesc dx, TDesc dd, float eps, int mode) {
    __shared__ double partial[32];
    const long long nrows = nrows_of(dx);
    const long long n = dx.ne[0];
    for (long long row = blockIdx.x; row < nrows; row += gridDim.x) {
        long long i1, i2, i3;
        split_row(dx, row, i1, i2, i3);
        const char* xr = x + i1 * dx.nb[1] + i2 * dx.nb[2] + i3 * dx.nb[3];
        char* dr = d + i1 * dd.nb[1] + i2 * dd.nb[2] + i3 * dd.nb[3];
        float mean = 0.0f;
        if (mode == N_NORM) {
            double s = 0.0;
            for (long long i = threadIdx.x; i < n; i += blockDim.x) s += (double)*(const float*)(xr + i * dx.nb[0]);
            s = block_sum_d(s, partial);
            mean = (float)(s / (double)n);
        }
        double s2 = 0.0;
        for (long long i = threadIdx.x; i < n; i += blockDim.x) {
            const float v = fsub_rn(*(const float*)(xr + i * dx.nb[0]), mean);
            s2 += (double)fmul_rn(v, v);
        }
        s2 = block_sum_d(s2, partial);
        float scale;
        if (mode == N_L2) {
            scale = 1.0f / fmaxf(sqrtf((float)s2), eps);
        } else {
            const float var = (float)(s2 / (double)n);
            scale = 1.0f / sqrtf(fadd_rn(var, eps));
        }
        for (long long i = threadIdx.x; i < n; i += blockDim.x) {
            const float v = fsub_rn(*(const float*)(xr + i * dx.nb[0]), mean);
            *(float*)(dr + i * dd.nb[0]) = fmul_rn(v, scale);
        }
        __syncthreads();
    }
}

// GROUP_NORM: group g of channel block i3 covers channels [g*per, min((g+1)*per, ne2)) and all of dims 0, 1;
// one block per (group, i3); x and d f32 of the same shape
extern "C" __global__ void k_group_norm(const char* x, char* d, TDesc dx, TDesc dd, int n_groups, int per_group,
                                        float eps) {
    __shared__ double partial[32];
    const int g = blockIdx.x % n_groups;
    const long long i3 = blockIdx.x / n_groups;
    const long long c0 = (long long)g * per_group;
    const long long c1 = min((long long)(g + 1) * per_group, dx.ne[2]);
    if (c0 >= c1) return;
    const long long plane = dx.ne[0] * dx.ne[1];
    const long long n = plane * (c1 - c0);
    double s = 0.0;
    for (long long k = threadIdx.x; k < n; k += blockDim.x) {
        const long long c = c0 + k / plane, r = k % plane;
        s += (double)*(const float*)(x + offset4(dx, r % dx.ne[0], r / dx.ne[0], c, i3));
    }
    s = block_sum_d(s, partial);
    const float mean = (float)(s / (double)n);
    double s2 = 0.0;
    for (long long k = threadIdx.x; k < n; k += blockDim.x) {
        const long long c = c0 + k / plane, r = k % plane;
        const float v = fsub_rn(*(const float*)(x + offset4(dx, r % dx.ne[0], r / dx.ne[0], c, i3)), mean);
        s2 += (double)fmul_rn(v, v);
    }
    s2 = block_sum_d(s2, partial);
    const float scale = 1.0f / sqrtf(fadd_rn((float)(s2 / (double)n), eps));
    for (long long k = threadIdx.x; k < n; k += blockDim.x) {
        const long long c = c0 + k / plane, r = k % plane;
        const long long i0 = r % dx.ne[0], i1 = r / dx.ne[0];
        const float v = fsub_rn(*(const float*)(x + offset4(dx, i0, i1, c, i3)), mean);
        *(float*)(d + offset4(dd, i0, i1, c, i3)) = fmul_rn(v, scale);
    }
}
