// Runs the recurrent kernels' per-item code (kernels/recurrent.cuh) on the HOST over every item, as the kernels'
// threads do on a GPU. test_recurrent_host.py builds this with nvcc and compares with ggml-core's numpy references.
//
// usage: recurrent_harness OP N K SCALE   (OP: ssm_conv | ssm_scan | gated_delta_net | rwkv_wkv7; N items)
// stdin: n_src (int64), then per operand: ne[4], nb[4], byte offset, byte count (int64) and the bytes; then the
// result's ne[4], nb[4] and byte count. stdout: the result's bytes. Exit status 3: a bad state row was met.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "recurrent.cuh"

static void read_all(void* dst, size_t n) {
    if (fread(dst, 1, n, stdin) != n) {
        fprintf(stderr, "short input\n");
        exit(2);
    }
}

static long long read_i64() {
    long long v;
    read_all(&v, 8);
    return v;
}

static TDesc read_desc() {
    TDesc d;
    for (int k = 0; k < 4; ++k) d.ne[k] = read_i64();
    for (int k = 0; k < 4; ++k) d.nb[k] = read_i64();
    return d;
}

int main(int argc, char** argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s OP N K SCALE\n", argv[0]);
        return 2;
    }
    const char* op = argv[1];
    const long long n = atoll(argv[2]);
    const int k_slots = atoi(argv[3]);
    const float scale = (float)atof(argv[4]);
    const long long n_src = read_i64();
    if (n_src < 1 || n_src > 7) {
        fprintf(stderr, "bad operand count %lld\n", n_src);
        return 2;
    }
    std::vector<std::vector<char>> data((size_t)n_src);
    std::vector<TDesc> desc((size_t)n_src);
    std::vector<const char*> p((size_t)n_src);
    for (long long i = 0; i < n_src; ++i) {
        desc[i] = read_desc();
        const long long offset = read_i64(), bytes = read_i64();
        data[i].resize((size_t)bytes);
        read_all(data[i].data(), (size_t)bytes);
        p[i] = data[i].data() + offset;
    }
    const TDesc dd = read_desc();
    std::vector<char> out((size_t)read_i64(), 0);
    float* o = (float*)out.data();
    int status = 0;
    for (long long e = 0; e < n; ++e) {
        if (!strcmp(op, "ssm_conv")) {
            ssm_conv_item(p[0], p[1], out.data(), desc[0], desc[1], dd, e);
        } else if (!strcmp(op, "ssm_scan")) {
            if (!ssm_scan_item(p[0], p[1], p[2], p[3], p[4], p[5], p[6], o, desc[0], desc[1], desc[2], desc[3],
                               desc[4], desc[5], desc[6], k_slots, e)) {
                status = 3;
            }
        } else if (!strcmp(op, "gated_delta_net")) {
            gated_delta_net_item(p[0], p[1], p[2], p[3], p[4], p[5], o, desc[0], desc[1], desc[2], desc[3], desc[4],
                                 desc[5], k_slots, scale, e);
        } else if (!strcmp(op, "rwkv_wkv7")) {
            rwkv_wkv7_item(p[0], p[1], p[2], p[3], p[4], p[5], p[6], o, desc[0], desc[1], desc[2], desc[3], desc[4],
                           desc[5], desc[6], e);
        } else {
            fprintf(stderr, "unknown op %s\n", op);
            return 2;
        }
    }
    fwrite(out.data(), 1, out.size(), stdout);
    return status;
}
