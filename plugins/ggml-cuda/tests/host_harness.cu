// Runs the kernels' block-format code on the HOST (no GPU): the helpers marked GGML_HD in common.cuh,
// quants.cuh and matmul_q.cu compile for both sides. test_host_harness.py builds this with nvcc and compares the
// results with ggml-core's bit-exact numpy quantizers. What it does not cover: the kernels' thread/warp
// structure (reductions, staging, launch geometry), which only a GPU run checks.
//
// usage: host_harness dequant TYPE N | quant TYPE N | dot TYPE N | act32 N | act256 N   (binary stdin -> stdout)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "matmul_q.cu"

static void read_all(void* dst, size_t n) {
    if (fread(dst, 1, n, stdin) != n) {
        fprintf(stderr, "short input\n");
        exit(2);
    }
}

static void write_all(const void* src, size_t n) { fwrite(src, 1, n, stdout); }

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s dequant|quant|dot TYPE N | act32|act256 N\n", argv[0]);
        return 2;
    }
    const char* cmd = argv[1];
    if (!strcmp(cmd, "act32") || !strcmp(cmd, "act256")) {
        const long n = atol(argv[2]);
        const int qk = !strcmp(cmd, "act32") ? 32 : 256;
        std::vector<float> x((size_t)n * qk);
        read_all(x.data(), x.size() * 4);
        for (long b = 0; b < n; ++b) {
            const float* v = &x[(size_t)b * qk];
            int8_t q[256];
            float scales[2] = {0.0f, 0.0f};
            if (qk == 32) {
                float amax = 0.0f, d;
                for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(v[j]));
                const float id = act32_inverse(amax, &d);
                float sum = 0.0f;
                for (int j = 0; j < 32; ++j) {
                    q[j] = (int8_t)act32_quant(v[j], id);
                    sum += (float)q[j];
                }
                act32_scales(d, sum, &scales[0], &scales[1]);
            } else {
                float best = 0.0f, vmax = 0.0f;
                for (int j = 0; j < 256; ++j) {
                    if (fabsf(v[j]) > best) {
                        best = fabsf(v[j]);
                        vmax = v[j];
                    }
                }
                if (best == 0.0f) {
                    memset(q, 0, 256);
                } else {
                    const float iscale = act256_iscale(vmax);
                    for (int j = 0; j < 256; ++j) q[j] = (int8_t)act256_quant(v[j], iscale);
                    scales[0] = act256_scale(iscale);
                }
            }
            write_all(q, qk);
            write_all(scales, qk == 32 ? 8 : 4);
        }
        return 0;
    }
    const int type = atoi(argv[2]);
    const long n = atol(argv[3]);
    const int bsize = qsize_of(type), qk = qk_of(type);
    if (bsize == 0) {
        fprintf(stderr, "unknown type %d\n", type);
        return 2;
    }
    if (!strcmp(cmd, "dequant")) {
        std::vector<uint8_t> blocks((size_t)n * bsize);
        read_all(blocks.data(), blocks.size());
        std::vector<float> out((size_t)n * qk);
        for (long i = 0; i < n * qk; ++i) out[i] = dequant_elem((const char*)blocks.data(), type, i);
        write_all(out.data(), out.size() * 4);
    } else if (!strcmp(cmd, "quant")) {
        std::vector<float> x((size_t)n * 32);
        read_all(x.data(), x.size() * 4);
        std::vector<uint8_t> out((size_t)n * bsize);
        for (long b = 0; b < n; ++b) {
            if (!quantize_block32(&x[(size_t)b * 32], &out[(size_t)b * bsize], type)) return 3;
        }
        write_all(out.data(), out.size());
    } else if (!strcmp(cmd, "dot")) {
        // per unit: block (bsize bytes), sub-block index (int32), 32 int8 activations, dx, sx (float32)
        std::vector<uint8_t> blk(bsize);
        for (long u = 0; u < n; ++u) {
            int s, x[8];
            float dxv, sxv;
            read_all(blk.data(), bsize);
            read_all(&s, 4);
            read_all(x, 32);
            read_all(&dxv, 4);
            read_all(&sxv, 4);
            const float r = dot_unit(type, blk.data(), s, x, dxv, sxv);
            write_all(&r, 4);
        }
    } else {
        fprintf(stderr, "unknown command %s\n", cmd);
        return 2;
    }
    return 0;
}
