// MUL_MAT for float weights, and the batched path of every weight type:
//   k_mv_float      matrix x few vectors (N <= MV_MAX_COLS): one warp per weight row, all columns at once
//   k_gemm_f32      tiled SIMT SGEMM (f32 weights, f32 activations), 64x64 tiles
//   k_gemm_wmma_*   tensor-core GEMM (nvcuda::wmma m16n16k16, f16 or bf16 inputs, f32 accumulate), 128x128x32
//                   tiles in two shared-memory stages filled with cp.async (sm_80+)
//   k_convert_rows  activations (any strides, f32/f16/bf16) -> contiguous rows of f32/f16/bf16
//   k_dequant_rows  quantized weights -> contiguous f16 or bf16 rows (for the tensor-core path)
// Convention: C[m, n] = sum_k A[m, k] * B[n, k]; A = src0 [K, M, a2, a3], B = src1 [K, N, b2, b3],
// D = dst [M, N, b2, b3] f32; A broadcasts over B's dims 2, 3 (A index = B index / ratio).
#include <mma.h>

#include "matmul.cuh"

// grid (ceil(M / MV_ROWS), b2*b3 or n_used*n_tokens), block 32*MV_ROWS. A rows contiguous (nb0 = element size).
extern "C" __global__ void __launch_bounds__(32 * MV_ROWS)
k_mv_float(const char* a, const char* b, char* d, const char* ids, unsigned int* status, TDesc da, TDesc db, TDesc dd,
           TDesc di, int ta, int tb, int ncols, int vec, int n_used) {
    const int lane = threadIdx.x & 31;
    const long long m = (long long)blockIdx.x * MV_ROWS + (threadIdx.x >> 5);
    if (m >= da.ne[1]) return;
    const char* abase;
    long long bcol, dcol, act_row0;
    if (!mv_bases(a, ids, status, da, db, dd, di, n_used, abase, bcol, dcol, act_row0)) return;
    const char* arow = abase + m * da.nb[1];
    const char* bbase = b + bcol;
    const long long K = da.ne[0];
    float acc[MV_MAX_COLS];
#pragma unroll
    for (int c = 0; c < MV_MAX_COLS; ++c) acc[c] = 0.0f;

    if (vec) {  // 8 weights per lane per step: 16-byte loads of f16/bf16, two float4 of f32; B f32 with packed rows
        for (long long k = 8 * lane; k < K; k += 8 * 32) {
            float w[8];
            if (ta == GT_F32) {
                const float4 w0 = *(const float4*)(arow + k * 4), w1 = *(const float4*)(arow + k * 4 + 16);
                w[0] = w0.x; w[1] = w0.y; w[2] = w0.z; w[3] = w0.w; w[4] = w1.x; w[5] = w1.y; w[6] = w1.z; w[7] = w1.w;
            } else {
                const uint4 raw = *(const uint4*)(arow + k * 2);
                const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const uint16_t lo = (uint16_t)(words[j] & 0xFFFF), hi = (uint16_t)(words[j] >> 16);
                    w[2 * j] = ta == GT_F16 ? f16_bits_to_f32(lo) : bf16_bits_to_f32(lo);
                    w[2 * j + 1] = ta == GT_F16 ? f16_bits_to_f32(hi) : bf16_bits_to_f32(hi);
                }
            }
#pragma unroll
            for (int c = 0; c < MV_MAX_COLS; ++c) {
                if (c >= ncols) break;
                const float* xr = (const float*)(bbase + c * db.nb[1]) + k;
                const float4 x0 = *(const float4*)xr, x1 = *(const float4*)(xr + 4);
                const float xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
                float s = 0.0f;
#pragma unroll
                for (int j = 0; j < 8; ++j) s += w[j] * round_act(xs[j], ta);
                acc[c] += s;
            }
        }
    } else {
        const int esize = ta == GT_F32 ? 4 : 2;
        for (long long k = lane; k < K; k += 32) {
            const float w = load_elem(arow + k * esize, ta);
#pragma unroll
            for (int c = 0; c < MV_MAX_COLS; ++c) {
                if (c >= ncols) break;
                acc[c] += w * round_act(load_elem(bbase + c * db.nb[1] + k * db.nb[0], tb), ta);
            }
        }
    }
#pragma unroll
    for (int c = 0; c < MV_MAX_COLS; ++c) {
        if (c >= ncols) break;
        const float s = warp_sum(acc[c]);
        if (lane == 0) *(float*)(d + dcol + m * dd.nb[0] + c * dd.nb[1]) = s;
    }
}

// ---- SIMT SGEMM ----------------------------------------------------------------------------------------------

#define SG_TILE 64
#define SG_BK 16

// grid (ceil(N/64), ceil(M/64), b2*b3), block 256; A and B f32 with packed rows (nb0 = 4)
extern "C" __global__ void __launch_bounds__(256)
k_gemm_f32(const char* a, const char* b, char* d, TDesc da, TDesc db, TDesc dd) {
    __shared__ float As[SG_BK][SG_TILE + 4];
    __shared__ float Bs[SG_BK][SG_TILE + 4];
    const int t = threadIdx.x, tx = t % 16, ty = t / 16;
    const long long M = da.ne[1], N = db.ne[1], K = da.ne[0];
    const long long m0 = (long long)blockIdx.y * SG_TILE, n0 = (long long)blockIdx.x * SG_TILE;
    long long i2, i3, a2, a3;
    batch_offsets(da, dd, blockIdx.z, i2, i3, a2, a3);
    const char* abase = a + a2 * da.nb[2] + a3 * da.nb[3];
    const char* bbase = b + i2 * db.nb[2] + i3 * db.nb[3];
    float acc[4][4] = {};
    const int lr = t / 4, lc = (t % 4) * 4;  // loader: row lr (0..63), k columns lc..lc+3
    for (long long k0 = 0; k0 < K; k0 += SG_BK) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const long long k = k0 + lc + j;
            const long long am = m0 + lr, bn = n0 + lr;
            As[lc + j][lr] = (am < M && k < K) ? *(const float*)(abase + am * da.nb[1] + k * 4) : 0.0f;
            Bs[lc + j][lr] = (bn < N && k < K) ? *(const float*)(bbase + bn * db.nb[1] + k * 4) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < SG_BK; ++kk) {
            float av[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                av[i] = As[kk][ty * 4 + i];
                bv[i] = Bs[kk][tx * 4 + i];
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const long long m = m0 + ty * 4 + i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const long long n = n0 + tx * 4 + j;
            if (n < N) *(float*)(d + m * dd.nb[0] + n * dd.nb[1] + i2 * dd.nb[2] + i3 * dd.nb[3]) = acc[i][j];
        }
    }
}

// ---- tensor-core GEMM ----------------------------------------------------------------------------------------

#define WM_BM 128
#define WM_BN 128
#define WM_BK 32
#define WM_LD (WM_BK + 8)  // shared row length in elements (80 bytes: keeps 16-byte alignment, spreads banks)
#define WM_THREADS 256

// copy 16 bytes global -> shared; asynchronously on sm_80+, zero-filled when `valid` is false
__device__ __forceinline__ void copy16(void* smem, const void* gmem, bool valid) {
#if __CUDA_ARCH__ >= 800
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    const int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
#else
    *(uint4*)smem = valid ? *(const uint4*)gmem : make_uint4(0, 0, 0, 0);
#endif
}

__device__ __forceinline__ void copy_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

__device__ __forceinline__ void copy_wait_all_but_one() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group 1;\n" ::);
#endif
}

// one 128x32 tile of a row-major [rows][K] matrix of 2-byte elements into shared memory
template <typename T>
__device__ __forceinline__ void load_tile(T (*dst)[WM_LD], const char* base, long long row_stride, long long row0,
                                          long long rows, long long k0, long long K, int aligned) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
        const int chunk = threadIdx.x + c * WM_THREADS;  // 512 chunks of 8 elements
        const int r = chunk / 4, col = (chunk % 4) * 8;
        const long long gr = row0 + r, gk = k0 + col;
        const char* src = base + gr * row_stride + gk * 2;
        if (aligned) {
            copy16(&dst[r][col], gr < rows && gk + 8 <= K ? src : base, gr < rows && gk + 8 <= K);
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const bool ok = gr < rows && gk + j < K;
                uint16_t bits = ok ? load_u16(src + 2 * j) : (uint16_t)0;
                *(uint16_t*)&dst[r][col + j] = bits;
            }
        }
    }
}

// A: [K, M, a2, a3] and B: [K, N, b2, b3] of T (packed rows); grid (ceil(N/128), ceil(M/128), b2*b3)
template <typename T>
__device__ __forceinline__ void gemm_wmma(const char* a, const char* b, char* d, const TDesc& da, const TDesc& db,
                                          const TDesc& dd, int aligned) {
    using namespace nvcuda;
    __shared__ __align__(128) T As[2][WM_BM][WM_LD];
    __shared__ __align__(128) T Bs[2][WM_BN][WM_LD];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp % 2, wn = warp / 2;  // warp tile: 64 rows (M) x 32 columns (N)
    const long long M = da.ne[1], N = db.ne[1], K = da.ne[0];
    const long long m0 = (long long)blockIdx.y * WM_BM, n0 = (long long)blockIdx.x * WM_BN;
    long long i2, i3, a2, a3;
    batch_offsets(da, dd, blockIdx.z, i2, i3, a2, a3);
    const char* abase = a + a2 * da.nb[2] + a3 * da.nb[3];
    const char* bbase = b + i2 * db.nb[2] + i3 * db.nb[3];

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    const long long ntiles = (K + WM_BK - 1) / WM_BK;
    load_tile<T>(As[0], abase, da.nb[1], m0, M, 0, K, aligned);
    load_tile<T>(Bs[0], bbase, db.nb[1], n0, N, 0, K, aligned);
    copy_commit();
    for (long long t = 0; t < ntiles; ++t) {
        const int s = (int)(t & 1);
        if (t + 1 < ntiles) {
            load_tile<T>(As[s ^ 1], abase, da.nb[1], m0, M, (t + 1) * WM_BK, K, aligned);
            load_tile<T>(Bs[s ^ 1], bbase, db.nb[1], n0, N, (t + 1) * WM_BK, K, aligned);
        }
        copy_commit();
        copy_wait_all_but_one();
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < WM_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[4];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb[2];
#pragma unroll
            for (int i = 0; i < 4; ++i) wmma::load_matrix_sync(fa[i], &As[s][wm * 64 + i * 16][kk], WM_LD);
#pragma unroll
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], &Bs[s][wn * 32 + j * 16][kk], WM_LD);
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();
    }
    // epilogue: each warp stages one 16x16 fragment at a time (column-major: m fastest) and stores it guarded
    float* stage = (float*)&As[0][0][0] + warp * 256;
    char* dbase = d + i2 * dd.nb[2] + i3 * dd.nb[3];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            wmma::store_matrix_sync(stage, acc[i][j], 16, wmma::mem_col_major);
            __syncwarp();
            for (int e = lane; e < 256; e += 32) {
                const long long m = m0 + wm * 64 + i * 16 + (e % 16), n = n0 + wn * 32 + j * 16 + (e / 16);
                if (m < M && n < N) *(float*)(dbase + m * dd.nb[0] + n * dd.nb[1]) = stage[e];
            }
            __syncwarp();
        }
    }
}

extern "C" __global__ void __launch_bounds__(WM_THREADS)
k_gemm_wmma_f16(const char* a, const char* b, char* d, TDesc da, TDesc db, TDesc dd, int aligned) {
    gemm_wmma<__half>(a, b, d, da, db, dd, aligned);
}

extern "C" __global__ void __launch_bounds__(WM_THREADS)
k_gemm_wmma_bf16(const char* a, const char* b, char* d, TDesc da, TDesc db, TDesc dd, int aligned) {
#if __CUDA_ARCH__ >= 800
    gemm_wmma<__nv_bfloat16>(a, b, d, da, db, dd, aligned);
#else
    __trap();  // the host selects this kernel on compute capability 8.0 and newer only
#endif
}

// ---- conversions for the batched paths -----------------------------------------------------------------------

// rows of s (any strides, f32/f16/bf16) -> packed rows of d (type td), same shape; grid (x over ne0, y over rows)
extern "C" __global__ void k_convert_rows(const char* s, char* d, TDesc ds, int ts, int td) {
    const long long nrows = nrows_of(ds), K = ds.ne[0];
    const int esize = td == GT_F32 ? 4 : 2;
    for (long long row = blockIdx.y; row < nrows; row += gridDim.y) {
        long long i1, i2, i3;
        split_row(ds, row, i1, i2, i3);
        const char* src = s + i1 * ds.nb[1] + i2 * ds.nb[2] + i3 * ds.nb[3];
        char* dst = d + row * K * esize;
        for (long long i0 = blockIdx.x * (long long)blockDim.x + threadIdx.x; i0 < K;
             i0 += (long long)gridDim.x * blockDim.x) {
            store_elem(dst + i0 * esize, td, load_elem(src + i0 * ds.nb[0], ts));
        }
    }
}

// rows of quantized s -> packed f16/bf16 rows of d (one row per weight row, in s's row order)
extern "C" __global__ void k_dequant_rows(const char* s, char* d, TDesc ds, int ts, int td) {
    const long long nrows = nrows_of(ds), K = ds.ne[0];
    for (long long row = blockIdx.y; row < nrows; row += gridDim.y) {
        long long i1, i2, i3;
        split_row(ds, row, i1, i2, i3);
        const char* src = s + i1 * ds.nb[1] + i2 * ds.nb[2] + i3 * ds.nb[3];
        char* dst = d + row * K * 2;
        for (long long i0 = blockIdx.x * (long long)blockDim.x + threadIdx.x; i0 < K;
             i0 += (long long)gridDim.x * blockDim.x) {
            store_elem(dst + i0 * 2, td, dequant_elem(src, ts, i0));
        }
    }
}
