// Data movement: CPY/DUP/CONT (type conversion, dequantization, quantization to the 32-element types, raw row
// copies), GET_ROWS and SET_ROWS. Row indices are checked: an index outside the tensor sets STATUS_BAD_ROW_INDEX
// in the status word and the row is skipped, so no kernel reads or writes outside its tensors.
#include "quants.cuh"

// element conversion between plain types (f32/f16/bf16, ints to float, f32 to i32), source and destination in logical
// element order (shapes may differ, element counts are equal); one thread per element, grid-stride
extern "C" __global__ void k_cpy_convert(const char* s, char* d, TDesc ds, TDesc dd, int ts, int td, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long a0, a1, a2, a3, b0, b1, b2, b3;
        split_flat(ds, i, a0, a1, a2, a3);
        split_flat(dd, i, b0, b1, b2, b3);
        store_elem(d + offset4(dd, b0, b1, b2, b3), td, load_elem(s + offset4(ds, a0, a1, a2, a3), ts));
    }
}

// same type, element by element (esize bytes: 1, 2, 4 or 8), logical order
extern "C" __global__ void k_cpy_elements(const char* s, char* d, TDesc ds, TDesc dd, int esize, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long a0, a1, a2, a3, b0, b1, b2, b3;
        split_flat(ds, i, a0, a1, a2, a3);
        split_flat(dd, i, b0, b1, b2, b3);
        const char* src = s + offset4(ds, a0, a1, a2, a3);
        char* dst = d + offset4(dd, b0, b1, b2, b3);
        switch (esize) {
            case 1: *(uint8_t*)dst = *(const uint8_t*)src; break;
            case 2: *(uint16_t*)dst = *(const uint16_t*)src; break;
            case 4: *(uint32_t*)dst = *(const uint32_t*)src; break;
            default: *(unsigned long long*)dst = *(const unsigned long long*)src; break;
        }
    }
}

// same quantized type: the rows' bytes in logical order, regrouped into the destination's rows (row sizes may
// differ); one thread per byte
extern "C" __global__ void k_cpy_block_bytes(const char* s, char* d, TDesc ds, TDesc dd, long long src_row,
                                             long long dst_row, long long total) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        long long a1, a2, a3, b1, b2, b3;
        split_row(ds, i / src_row, a1, a2, a3);
        split_row(dd, i / dst_row, b1, b2, b3);
        d[b1 * dd.nb[1] + b2 * dd.nb[2] + b3 * dd.nb[3] + i % dst_row] =
            s[a1 * ds.nb[1] + a2 * ds.nb[2] + a3 * ds.nb[3] + i % src_row];
    }
}

// quantized source -> float destination (f32/f16/bf16), logical element order
extern "C" __global__ void k_cpy_dequant(const char* s, char* d, TDesc ds, TDesc dd, int ts, int td, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long a0, a1, a2, a3, b0, b1, b2, b3;
        split_flat(ds, i, a0, a1, a2, a3);
        split_flat(dd, i, b0, b1, b2, b3);
        const char* row = s + a1 * ds.nb[1] + a2 * ds.nb[2] + a3 * ds.nb[3];
        store_elem(d + offset4(dd, b0, b1, b2, b3), td, dequant_elem(row, ts, a0));
    }
}

// float source -> 32-element quantized destination (contiguous rows); one thread per destination block
extern "C" __global__ void k_cpy_quantize(const char* s, char* d, TDesc ds, TDesc dd, int ts, int td, long long nblocks) {
    const long long blocks_per_row = dd.ne[0] / 32;
    const int bsize = qsize_of(td);
    for (long long blk = blockIdx.x * (long long)blockDim.x + threadIdx.x; blk < nblocks;
         blk += (long long)gridDim.x * blockDim.x) {
        const long long drow = blk / blocks_per_row, jb = blk % blocks_per_row;
        long long b1, b2, b3;
        split_row(dd, drow, b1, b2, b3);
        float vals[32];
        const long long first = drow * dd.ne[0] + jb * 32;  // logical index of the block's first element
        for (int j = 0; j < 32; ++j) {
            long long a0, a1, a2, a3;
            split_flat(ds, first + j, a0, a1, a2, a3);
            vals[j] = load_elem(s + offset4(ds, a0, a1, a2, a3), ts);
        }
        quantize_block32(vals, (uint8_t*)(d + b1 * dd.nb[1] + b2 * dd.nb[2] + b3 * dd.nb[3]) + jb * bsize, td);
    }
}

// GET_ROWS: out[i0, i10, i11, i12] = a[i0, idx[i10, i11, i12], i11, i12]; a float, int32 or quantized;
// out f32 (i32 for an i32 source)
extern "C" __global__ void k_get_rows(const char* a, const char* idx, char* out, TDesc da, TDesc di, TDesc dout,
                                      int ta, int tout, unsigned int* status) {
    const long long nrows = nrows_of(dout);
    const bool quantized = ta != GT_F32 && ta != GT_F16 && ta != GT_BF16 && ta != GT_I32;
    for (long long row = blockIdx.y; row < nrows; row += gridDim.y) {
        long long i10, i11, i12;
        split_row(dout, row, i10, i11, i12);
        const int r = *(const int*)(idx + i10 * di.nb[0] + i11 * di.nb[1] + i12 * di.nb[2]);
        if (r < 0 || r >= da.ne[1]) {
            if (blockIdx.x == 0 && threadIdx.x == 0) atomicOr(status, STATUS_BAD_ROW_INDEX);
            continue;
        }
        const char* src = a + r * da.nb[1] + i11 * da.nb[2] + i12 * da.nb[3];
        char* dst = out + i10 * dout.nb[1] + i11 * dout.nb[2] + i12 * dout.nb[3];
        for (long long i0 = blockIdx.x * (long long)blockDim.x + threadIdx.x; i0 < dout.ne[0];
             i0 += (long long)gridDim.x * blockDim.x) {
            if (tout == GT_I32) {
                *(int*)(dst + i0 * dout.nb[0]) = *(const int*)(src + i0 * da.nb[0]);
            } else {
                const float val = quantized ? dequant_elem(src, ta, i0) : load_elem(src + i0 * da.nb[0], ta);
                *(float*)(dst + i0 * dout.nb[0]) = val;
            }
        }
    }
}

__device__ __forceinline__ long long load_index(const char* p, int itype) {
    return itype == GT_I64 ? *(const long long*)p : (long long)*(const int*)p;
}

// SET_ROWS: dst[:, idx[i1, i2 % c1, i3 % c2], i2, i3] = b[:, i1, i2, i3]; b f32/f16, dst f32/f16/bf16.
// One block row per source row.
extern "C" __global__ void k_set_rows(const char* b, const char* idx, char* dst, TDesc db, TDesc di, TDesc dd, int tb,
                                      int it, int td, unsigned int* status) {
    const long long nrows = nrows_of(db);
    for (long long row = blockIdx.y; row < nrows; row += gridDim.y) {
        long long i1, i2, i3;
        split_row(db, row, i1, i2, i3);
        const long long r = load_index(idx + i1 * di.nb[0] + (i2 % di.ne[1]) * di.nb[1] + (i3 % di.ne[2]) * di.nb[2], it);
        if (r < 0 || r >= dd.ne[1]) {
            if (blockIdx.x == 0 && threadIdx.x == 0) atomicOr(status, STATUS_BAD_ROW_INDEX);
            continue;
        }
        const char* src = b + i1 * db.nb[1] + i2 * db.nb[2] + i3 * db.nb[3];
        char* out = dst + r * dd.nb[1] + i2 * dd.nb[2] + i3 * dd.nb[3];
        for (long long i0 = blockIdx.x * (long long)blockDim.x + threadIdx.x; i0 < db.ne[0];
             i0 += (long long)gridDim.x * blockDim.x) {
            store_elem(out + i0 * dd.nb[0], td, load_elem(src + i0 * db.nb[0], tb));
        }
    }
}

// SET_ROWS into a 32-element quantized type: one thread per destination block of a written row
extern "C" __global__ void k_set_rows_quant(const char* b, const char* idx, char* dst, TDesc db, TDesc di, TDesc dd,
                                            int tb, int it, int td, unsigned int* status) {
    const long long blocks_per_row = db.ne[0] / 32;
    const long long total = nrows_of(db) * blocks_per_row;
    const int bsize = qsize_of(td);
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < total; k += (long long)gridDim.x * blockDim.x) {
        const long long row = k / blocks_per_row, jb = k % blocks_per_row;
        long long i1, i2, i3;
        split_row(db, row, i1, i2, i3);
        const long long r = load_index(idx + i1 * di.nb[0] + (i2 % di.ne[1]) * di.nb[1] + (i3 % di.ne[2]) * di.nb[2], it);
        if (r < 0 || r >= dd.ne[1]) {
            atomicOr(status, STATUS_BAD_ROW_INDEX);
            continue;
        }
        const char* src = b + i1 * db.nb[1] + i2 * db.nb[2] + i3 * db.nb[3];
        float vals[32];
        for (int j = 0; j < 32; ++j) vals[j] = load_elem(src + (jb * 32 + j) * db.nb[0], tb);
        quantize_block32(vals, (uint8_t*)(dst + r * dd.nb[1] + i2 * dd.nb[2] + i3 * dd.nb[3]) + jb * bsize, td);
    }
}
