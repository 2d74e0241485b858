// FLASH_ATTN_EXT: softmax(softcap(q.k^T * scale) + slope*mask) . v with an online softmax, in float32.
//
// One block of FA_THREADS threads per (query row i1, head h, i3). q: [Dk, n_q, H, ne3] f32; k: [Dk, n_kv, Hk, ne3]
// and v: [Dv, n_kv, Hv, ne3] f32 or f16; mask (optional, f16): [n_kv, >= n_q, mh, m3]; sinks (optional, f32): one
// logit per head; out: [Dv, H, n_q, ne3] f32 (ggml's permuted layout). With f16 K the query is rounded to f16
// first, as ggml does. Each warp scores FA_TILE / FA_WARPS keys of a tile; the block then rescales its running
// sums and each thread accumulates a few output dimensions.
#include "common.cuh"

#define FA_THREADS 128
#define FA_WARPS (FA_THREADS / 32)
#define FA_TILE 32
#define FA_MAX_D 512

extern "C" __global__ void __launch_bounds__(FA_THREADS)
k_flash_attn(const char* q, const char* k, const char* v, const char* mask, const char* sinks, char* out, TDesc dq,
             TDesc dk, TDesc dv, TDesc dm, TDesc dout, int k_type, int v_type, int has_mask, int has_sinks,
             float scale, float softcap, float max_bias, float m0, float m1, int n_head_log2) {
    __shared__ float qs[FA_MAX_D];
    __shared__ float scores[FA_TILE];
    __shared__ float acc_scale;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const long long i1 = blockIdx.x, h = blockIdx.y, i3 = blockIdx.z;
    const long long Dk = dq.ne[0], Dv = dv.ne[0], n_kv = dk.ne[1];
    const long long hk = h / (dq.ne[2] / dk.ne[2]), hv = h / (dq.ne[2] / dv.ne[2]);

    const char* qr = q + i1 * dq.nb[1] + h * dq.nb[2] + i3 * dq.nb[3];
    for (long long i = tid; i < Dk; i += FA_THREADS) {
        const float val = *(const float*)(qr + i * dq.nb[0]);
        qs[i] = k_type == GT_F16 ? round_to_f16(val) : val;
    }
    const char* mr = has_mask ? mask + i1 * dm.nb[1] + (h % dm.ne[2]) * dm.nb[2] + (i3 % dm.ne[3]) * dm.nb[3] : nullptr;
    const float slope = alibi_slope(max_bias, (int)h, n_head_log2, m0, m1);

    // running max M, denominator S and numerator acc[] (FA_MAX_D / FA_THREADS dimensions per thread)
    float M = -INFINITY, S = 0.0f;
    float acc[FA_MAX_D / FA_THREADS];
#pragma unroll
    for (int j = 0; j < FA_MAX_D / FA_THREADS; ++j) acc[j] = 0.0f;
    if (has_sinks) {
        M = *(const float*)(sinks + h * 4);
        S = 1.0f;
    }
    __syncthreads();

    for (long long t0 = 0; t0 < n_kv; t0 += FA_TILE) {
        // scores of this tile: each warp takes keys warp, warp + FA_WARPS, ...
        for (int j = warp; j < FA_TILE; j += FA_WARPS) {
            const long long t = t0 + j;
            float s = -INFINITY;
            if (t < n_kv) {
                const char* kr = k + t * dk.nb[1] + hk * dk.nb[2] + i3 * dk.nb[3];
                float dot = 0.0f;
                for (long long i = lane; i < Dk; i += 32) dot += qs[i] * load_elem(kr + i * dk.nb[0], k_type);
                dot = warp_sum(dot);
                s = dot * scale;
                if (softcap != 0.0f) s = softcap * tanhf(s / softcap);
                if (has_mask) s += slope * f16_bits_to_f32(load_u16(mr + t * dm.nb[0]));
            }
            if (lane == 0) scores[j] = s;
        }
        __syncthreads();
        if (tid == 0) {
            float mt = M;
            for (int j = 0; j < FA_TILE; ++j) mt = fmaxf(mt, scores[j]);
            const float corr = (M == -INFINITY) ? 0.0f : expf(M - mt);
            float add = 0.0f;
            for (int j = 0; j < FA_TILE; ++j) {
                const float p = (mt == -INFINITY) ? 0.0f : expf(scores[j] - mt);
                scores[j] = p;
                add += p;
            }
            S = S * corr + add;
            M = mt;
            acc_scale = corr;
        }
        __syncthreads();
        const float corr = acc_scale;
#pragma unroll
        for (int jd = 0; jd < FA_MAX_D / FA_THREADS; ++jd) {
            const long long dd = tid + jd * FA_THREADS;
            if (dd >= Dv) break;
            float a = acc[jd] * corr;
            for (int j = 0; j < FA_TILE && t0 + j < n_kv; ++j) {
                const char* vr = v + (t0 + j) * dv.nb[1] + hv * dv.nb[2] + i3 * dv.nb[3];
                a += scores[j] * load_elem(vr + dd * dv.nb[0], v_type);
            }
            acc[jd] = a;
        }
        __syncthreads();
    }
    // thread 0 holds the final S; share it
    if (tid == 0) acc_scale = S;
    __syncthreads();
    const float inv = acc_scale > 0.0f ? 1.0f / acc_scale : 0.0f;
    char* orow = out + h * dout.nb[1] + i1 * dout.nb[2] + i3 * dout.nb[3];
#pragma unroll
    for (int jd = 0; jd < FA_MAX_D / FA_THREADS; ++jd) {
        const long long dd = tid + jd * FA_THREADS;
        if (dd < Dv) *(float*)(orow + dd * dout.nb[0]) = acc[jd] * inv;
    }
}
