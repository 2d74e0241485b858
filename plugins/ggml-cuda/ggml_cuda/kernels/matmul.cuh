// Shared by matmul.cu and matmul_q.cu: activation rounding, batch broadcasting, and the bases of a
// matrix-vector block for MUL_MAT and MUL_MAT_ID.
#pragma once

#include "quants.cuh"

#define MV_ROWS 4
#define MV_MAX_COLS 8

__device__ __forceinline__ float round_act(float x, int ta) {
    // ggml's CPU rounds activations to the weight's dot type: f16 for f16 weights, bf16 for bf16 weights
    return ta == GT_F16 ? round_to_f16(x) : (ta == GT_BF16 ? round_to_bf16(x) : x);
}

__device__ __forceinline__ void batch_offsets(const TDesc& da, const TDesc& dd, long long z, long long& i2, long long& i3,
                                              long long& a2, long long& a3) {
    i2 = z % dd.ne[2];
    i3 = z / dd.ne[2];
    a2 = i2 / (dd.ne[2] / da.ne[2]);
    a3 = i3 / (dd.ne[3] / da.ne[3]);
}

// The three bases of one matrix-vector block: the weight matrix, activation column 0 and output column 0.
// Plain MUL_MAT: blockIdx.y is the batch (i2, i3) and A broadcasts. MUL_MAT_ID (ids != null): blockIdx.y is
// (e, t) = (y % n_used, y / n_used), the weights are expert ids[e, t] of A ([K, M, n_expert]), the activation is
// B[:, e % B.ne[1], t] and the output D[:, e, t]; an expert id out of range raises STATUS_BAD_ROW_INDEX and the
// block does nothing. Returns false when the block has nothing to do.
__device__ __forceinline__ bool mv_bases(const char* a, const char* ids, unsigned int* status, const TDesc& da,
                                         const TDesc& db, const TDesc& dd, const TDesc& di, int n_used,
                                         const char*& abase, long long& bcol, long long& dcol, long long& act_row0) {
    const long long y = blockIdx.y;
    if (ids == nullptr) {
        long long i2, i3, a2, a3;
        batch_offsets(da, dd, y, i2, i3, a2, a3);
        abase = a + a2 * da.nb[2] + a3 * da.nb[3];
        bcol = i2 * db.nb[2] + i3 * db.nb[3];
        dcol = i2 * dd.nb[2] + i3 * dd.nb[3];
        act_row0 = dd.ne[1] * (i2 + dd.ne[2] * i3);
        return true;
    }
    const long long e = y % n_used, t = y / n_used;
    const int expert = *(const int*)(ids + e * di.nb[0] + t * di.nb[1]);
    if (expert < 0 || expert >= da.ne[2]) {
        if (blockIdx.x == 0 && threadIdx.x == 0) atomicOr(status, STATUS_BAD_ROW_INDEX);
        return false;
    }
    abase = a + expert * da.nb[2];
    bcol = (e % db.ne[1]) * db.nb[1] + t * db.nb[2];
    dcol = e * dd.nb[1] + t * dd.nb[2];
    act_row0 = (e % db.ne[1]) + db.ne[1] * t;
    return true;
}

