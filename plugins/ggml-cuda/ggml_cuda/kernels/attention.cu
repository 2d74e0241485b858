// Attention building blocks: SOFT_MAX (ext: scale, mask, ALiBi, sinks) and ROPE (NORMAL / NEOX with YaRN).
#include "common.cuh"

// One block per row (i1, i2, i3) of x. Three passes over the row (max, sum, write) recompute
// w = x*scale + slope*mask, so rows of any length work without shared-memory limits.
// mask (optional, f32/f16): row i1, broadcast over dims 2, 3; sinks (optional, f32): one logit per head (i2).
extern "C" __global__ void k_soft_max(const char* x, const char* mask, const char* sinks, char* d, TDesc dx, TDesc dm,
                                      TDesc dd, int mask_type, int has_mask, int has_sinks, float scale,
                                      float max_bias, float m0, float m1, int n_head_log2) {
    __shared__ float partial[32];
    const long long nrows = nrows_of(dx);
    const long long n = dx.ne[0];
    for (long long row = blockIdx.x; row < nrows; row += gridDim.x) {
        long long i1, i2, i3;
        split_row(dx, row, i1, i2, i3);
        const char* xr = x + i1 * dx.nb[1] + i2 * dx.nb[2] + i3 * dx.nb[3];
        char* dr = d + i1 * dd.nb[1] + i2 * dd.nb[2] + i3 * dd.nb[3];
        const char* mr = has_mask ? mask + i1 * dm.nb[1] + (i2 % dm.ne[2]) * dm.nb[2] + (i3 % dm.ne[3]) * dm.nb[3]
                                  : nullptr;
        const float slope = alibi_slope(max_bias, (int)i2, n_head_log2, m0, m1);
        float mx = -INFINITY;
        for (long long i = threadIdx.x; i < n; i += blockDim.x) {
            float w = fmul_rn(*(const float*)(xr + i * dx.nb[0]), scale);
            if (has_mask) w = fadd_rn(w, fmul_rn(slope, load_elem(mr + i * dm.nb[0], mask_type)));
            mx = fmaxf(mx, w);
        }
        mx = block_max(mx, partial);
        float sink = 0.0f;
        if (has_sinks) {
            sink = *(const float*)(sinks + i2 * 4);
            mx = fmaxf(mx, sink);
        }
        double total = 0.0;
        for (long long i = threadIdx.x; i < n; i += blockDim.x) {
            float w = fmul_rn(*(const float*)(xr + i * dx.nb[0]), scale);
            if (has_mask) w = fadd_rn(w, fmul_rn(slope, load_elem(mr + i * dm.nb[0], mask_type)));
            total += (double)expf(w - mx);
        }
        __shared__ double partial_d[32];
        total = block_sum_d(total, partial_d);
        if (has_sinks) total += (double)expf(sink - mx);
        const float inv = (float)(1.0 / total);
        for (long long i = threadIdx.x; i < n; i += blockDim.x) {
            float w = fmul_rn(*(const float*)(xr + i * dx.nb[0]), scale);
            if (has_mask) w = fadd_rn(w, fmul_rn(slope, load_elem(mr + i * dm.nb[0], mask_type)));
            *(float*)(dr + i * dd.nb[0]) = fmul_rn(expf(w - mx), inv);
        }
        __syncthreads();
    }
}

// One thread per pair slot. x: [ne0 = head_dim, ne1 = heads, ne2 = tokens, ne3]; pos: i32, one per token.
// Slots below n_dims/2 rotate pair k of the channels [n_offs, n_offs + n_dims) (NORMAL: adjacent channels, NEOX:
// halves); the other slots copy two of the remaining channels. theta advances in float32 as ggml's rope cache
// does (theta *= theta_scale per pair); freq_factors (optional) divide each pair's theta; YaRN mixes interpolated
// and extrapolated theta with a ramp over [corr_lo, corr_hi].
extern "C" __global__ void k_rope(const char* x, const char* pos, const char* freq_factors, char* d, TDesc dx,
                                  TDesc dd, int type, int n_dims, int n_offs, int neox, int has_ff, float theta_scale,
                                  float freq_scale, float ext_factor, float corr_lo, float corr_hi, float mscale) {
    const long long slots = dx.ne[0] / 2, half = n_dims / 2;
    const long long nrows = nrows_of(dx);
    for (long long row = blockIdx.y; row < nrows; row += gridDim.y) {
        long long i1, i2, i3;
        split_row(dx, row, i1, i2, i3);
        const char* xr = x + i1 * dx.nb[1] + i2 * dx.nb[2] + i3 * dx.nb[3];
        char* dr = d + i1 * dd.nb[1] + i2 * dd.nb[2] + i3 * dd.nb[3];
        const float p = (float)*(const int*)(pos + i2 * 4);
        for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < slots;
             k += (long long)gridDim.x * blockDim.x) {
            if (k >= half) {  // copy two channels outside [n_offs, n_offs + n_dims)
                for (long long c = 2 * (k - half); c < 2 * (k - half) + 2; ++c) {
                    const long long e = c < n_offs ? c : c + n_dims;
                    store_elem(dr + e * dd.nb[0], type, load_elem(xr + e * dx.nb[0], type));
                }
                continue;
            }
            const long long ia = neox ? n_offs + k : n_offs + 2 * k;
            const long long ib = neox ? n_offs + k + half : n_offs + 2 * k + 1;
            float theta = p;
            for (long long s = 0; s < k; ++s) theta = fmul_rn(theta, theta_scale);
            if (has_ff) theta = fdiv_rn(theta, *(const float*)(freq_factors + k * 4));
            const float theta_interp = fmul_rn(freq_scale, theta);
            float th = theta_interp;
            float ms = mscale;
            if (ext_factor != 0.0f) {
                const float y = fdiv_rn(fsub_rn((float)k, corr_lo), fmaxf(0.001f, fsub_rn(corr_hi, corr_lo)));
                const float ramp = fmul_rn(fsub_rn(1.0f, fminf(1.0f, fmaxf(0.0f, y))), ext_factor);
                th = fadd_rn(fmul_rn(theta_interp, fsub_rn(1.0f, ramp)), fmul_rn(theta, ramp));
            }
            const float c = fmul_rn(cosf(th), ms), s = fmul_rn(sinf(th), ms);
            const float x0 = load_elem(xr + ia * dx.nb[0], type), x1 = load_elem(xr + ib * dx.nb[0], type);
            store_elem(dr + ia * dd.nb[0], type, fsub_rn(fmul_rn(x0, c), fmul_rn(x1, s)));
            store_elem(dr + ib * dd.nb[0], type, fadd_rn(fmul_rn(x0, s), fmul_rn(x1, c)));
        }
    }
}
