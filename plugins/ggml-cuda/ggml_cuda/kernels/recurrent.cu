// The recurrent ops, f32: SSM_CONV (one thread per output), SSM_SCAN, GATED_DELTA_NET and RWKV_WKV7 (one thread per
// state row of one head of one sequence, looping over the tokens); the per-item code is in recurrent.cuh.
// Every kernel walks its items grid-stride. A bad state row in SSM_SCAN sets STATUS_BAD_ROW_INDEX and is skipped.
#include "recurrent.cuh"

#define FOR_ITEMS(e, n)                                                                  \
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < (n);        \
         e += (long long)gridDim.x * blockDim.x)

extern "C" __global__ void k_ssm_conv(const char* sx, const char* c, char* d, TDesc dsx, TDesc dc, TDesc dd,
                                      long long n) {
    FOR_ITEMS(e, n) ssm_conv_item(sx, c, d, dsx, dc, dd, e);
}

extern "C" __global__ void k_ssm_scan(const char* s, const char* x, const char* dt, const char* A, const char* B,
                                      const char* C, const char* ids, char* d, TDesc ds, TDesc dx, TDesc ddt,
                                      TDesc dA, TDesc dB, TDesc dC, TDesc dids, int k_slots, long long n,
                                      unsigned int* status) {
    FOR_ITEMS(e, n) {
        if (!ssm_scan_item(s, x, dt, A, B, C, ids, (float*)d, ds, dx, ddt, dA, dB, dC, dids, k_slots, e)) {
            atomicOr(status, STATUS_BAD_ROW_INDEX);
        }
    }
}

extern "C" __global__ void k_gated_delta_net(const char* q, const char* k, const char* v, const char* g,
                                             const char* beta, const char* state, char* d, TDesc dq, TDesc dk,
                                             TDesc dv, TDesc dg, TDesc dbeta, TDesc dstate, int k_slots, float scale,
                                             long long n) {
    FOR_ITEMS(e, n) gated_delta_net_item(q, k, v, g, beta, state, (float*)d, dq, dk, dv, dg, dbeta, dstate, k_slots,
                                         scale, e);
}

extern "C" __global__ void k_rwkv_wkv7(const char* r, const char* w, const char* k, const char* v, const char* a,
                                       const char* b, const char* state, char* d, TDesc dr, TDesc dw, TDesc dk,
                                       TDesc dv, TDesc da, TDesc db, TDesc dstate, long long n) {
    FOR_ITEMS(e, n) rwkv_wkv7_item(r, w, k, v, a, b, state, (float*)d, dr, dw, dk, dv, da, db, dstate, e);
}
