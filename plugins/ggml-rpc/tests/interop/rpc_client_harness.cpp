// llama.cpp's own RPC *client* (ggml-rpc, built from the llama-cpp-python 0.3.36 sdist) against a server given on
// the command line: small LLaMA-style graphs are computed on the remote device and on ggml's CPU backend in this
// process, and the largest differences are printed, one line per case:
//
//     CASE <name> <max |rpc - cpu|> <max |cpu|>
//
// Written for ggml-core's interop test (tests/test_interop_llama_cpp.py); it only uses ggml's public API.
// Usage: rpc_client_harness HOST:PORT [--no-weights]

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml-rpc.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

struct Rng {
    uint64_t s;
    float next() {  // uniform in [-1, 1)
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        return (float) ((s >> 40) & 0xFFFFFF) / (float) 0x800000 - 1.0f;
    }
};

using Builder = std::function<ggml_tensor *(ggml_context *, std::vector<ggml_tensor *> &)>;

// fills every input (tensors flagged INPUT) with values from a seed; quantized inputs are quantized from floats
void fill_inputs(const std::vector<ggml_tensor *> & inputs, uint64_t seed) {
    Rng rng{seed};
    for (ggml_tensor * t : inputs) {
        const int64_t n = ggml_nelements(t);
        std::vector<float> f(n);
        for (auto & x : f) {
            x = rng.next();
        }
        if (t->type == GGML_TYPE_F32) {
            ggml_backend_tensor_set(t, f.data(), 0, n * sizeof(float));
        } else if (t->type == GGML_TYPE_I32) {
            std::vector<int32_t> v(n);
            const int64_t lim = t->op_params[0] > 0 ? t->op_params[0] : 1;  // caller stores the index range here
            for (int64_t i = 0; i < n; i++) {
                v[i] = (int32_t) (i * 7 % lim);
            }
            ggml_backend_tensor_set(t, v.data(), 0, n * sizeof(int32_t));
        } else if (t->type == GGML_TYPE_F16) {
            std::vector<ggml_fp16_t> h(n);
            ggml_fp32_to_fp16_row(f.data(), h.data(), n);
            ggml_backend_tensor_set(t, h.data(), 0, n * sizeof(ggml_fp16_t));
        } else {
            std::vector<uint8_t> q(ggml_nbytes(t));
            ggml_quantize_chunk(t->type, f.data(), q.data(), 0, ggml_nrows(t), t->ne[0], nullptr);
            ggml_backend_tensor_set(t, q.data(), 0, q.size());
        }
    }
}

// with `fallback` (the CPU) the graph runs through ggml_backend_sched, as llama.cpp runs graphs: its split graphs keep
// their uid between computes, so the RPC client sends GRAPH_RECOMPUTE for the later rounds
std::vector<float> run_case(ggml_backend_t backend, ggml_backend_t fallback, const Builder & build, uint64_t seed,
                            int repeats) {
    ggml_init_params params = {64 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true};
    ggml_context * ctx = ggml_init(params);
    std::vector<ggml_tensor *> inputs;
    ggml_tensor * out = build(ctx, inputs);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, backend);
    ggml_backend_sched_t sched = nullptr;
    if (fallback) {
        ggml_backend_t backends[2] = {backend, fallback};
        sched = ggml_backend_sched_new(backends, nullptr, 2, GGML_DEFAULT_GRAPH_SIZE, false, true);
    }
    std::vector<float> result;
    for (int r = 0; r < repeats; r++) {  // later rounds: new inputs, the same graph
        fill_inputs(inputs, seed + r);
        const ggml_status st = sched ? ggml_backend_sched_graph_compute(sched, gf) : ggml_backend_graph_compute(backend, gf);
        if (st != GGML_STATUS_SUCCESS) {
            fprintf(stderr, "compute failed\n");
            exit(1);
        }
        std::vector<float> got(ggml_nelements(out));
        ggml_backend_tensor_get(out, got.data(), 0, got.size() * sizeof(float));
        result.insert(result.end(), got.begin(), got.end());
    }
    if (sched) {
        ggml_backend_sched_free(sched);
    }
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    return result;
}

ggml_tensor * input(ggml_context * ctx, std::vector<ggml_tensor *> & inputs, ggml_type type, int64_t ne0, int64_t ne1,
                    int64_t ne2 = 1, int64_t ne3 = 1) {
    ggml_tensor * t = ggml_new_tensor_4d(ctx, type, ne0, ne1, ne2, ne3);
    ggml_set_input(t);
    inputs.push_back(t);
    return t;
}

ggml_tensor * index_input(ggml_context * ctx, std::vector<ggml_tensor *> & inputs, int64_t n, int32_t range) {
    ggml_tensor * t = input(ctx, inputs, GGML_TYPE_I32, n, 1);
    t->op_params[0] = range;  // read by fill_inputs only (a leaf's op_params are not used by any kernel)
    return t;
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s HOST:PORT\n", argv[0]);
        return 2;
    }
    ggml_backend_reg_t reg = ggml_backend_rpc_add_server(argv[1]);
    if (!reg || ggml_backend_reg_dev_count(reg) == 0) {
        fprintf(stderr, "no devices at %s\n", argv[1]);
        return 1;
    }
    ggml_backend_dev_t dev = ggml_backend_reg_dev_get(reg, 0);
    size_t free_mem = 0, total_mem = 0;
    ggml_backend_dev_memory(dev, &free_mem, &total_mem);
    printf("DEVICE %s %s free=%zu total=%zu\n", ggml_backend_dev_name(dev), ggml_backend_dev_description(dev),
           free_mem, total_mem);
    if (argc > 3 && std::string(argv[2]) == "--alloc") {
        // one allocation of argv[3] bytes (over the server's budget in the test), then a small one: the failure
        // must be ggml's ordinary failed allocation (a null buffer) on a connection that still works
        ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(dev);
        const size_t n = (size_t) strtoull(argv[3], nullptr, 10);
        ggml_backend_buffer_t big = ggml_backend_buft_alloc_buffer(buft, n);
        printf("ALLOC %zu %s\n", n, big ? "ok" : "null");
        if (big) {
            ggml_backend_buffer_free(big);
        }
        ggml_backend_buffer_t small = ggml_backend_buft_alloc_buffer(buft, 4096);
        printf("ALLOC 4096 %s\n", small ? "ok" : "null");
        if (small) {
            ggml_backend_buffer_free(small);
        }
        fflush(stdout);
        return 0;
    }
    ggml_backend_t rpc = ggml_backend_dev_init(dev, nullptr);
    ggml_backend_t cpu = ggml_backend_cpu_init();

    const int64_t E = 64, T = 5, H = 4, D = 16, KV = 8, FF = 96, V = 50;
    std::vector<std::pair<std::string, Builder>> cases = {
        {"add_mul_scale", [&](ggml_context * c, std::vector<ggml_tensor *> & in) {
             ggml_tensor * a = input(c, in, GGML_TYPE_F32, E, T);
             ggml_tensor * b = input(c, in, GGML_TYPE_F32, E, 1);
             return ggml_scale(c, ggml_mul(c, ggml_add(c, a, b), a), 0.5f);
         }},
        {"rms_norm_silu_swiglu", [&](ggml_context * c, std::vector<ggml_tensor *> & in) {
             ggml_tensor * a = input(c, in, GGML_TYPE_F32, E, T);
             ggml_tensor * g = input(c, in, GGML_TYPE_F32, E, T);
             ggml_tensor * n = ggml_rms_norm(c, a, 1e-5f);
             return ggml_swiglu_split(c, ggml_silu(c, n), g);
         }},
        {"mul_mat_f32", [&](ggml_context * c, std::vector<ggml_tensor *> & in) {
             return ggml_mul_mat(c, input(c, in, GGML_TYPE_F32, E, FF), input(c, in, GGML_TYPE_F32, E, T));
         }},
        {"mul_mat_f16", [&](ggml_context * c, std::vector<ggml_tensor *> & in) {
             return ggml_mul_mat(c, input(c, in, GGML_TYPE_F16, E, FF), input(c, in, GGML_TYPE_F32, E, T));
         }},
        {"mul_mat_q8_0", [&](ggml_context * c, std::vector<ggml_tensor *> & in) {
             return ggml_mul_mat(c, input(c, in, GGML_TYPE_Q8_0, E, FF), input(c, in, GGML_TYPE_F32, E, T));
         }},
        {"mul_mat_q4_0", [&](ggml_context * c, std::vector<ggml_tensor *> & in) {
             return ggml_mul_mat(c, input(c, in, GGML_TYPE_Q4_0, E, FF), input(c, in, GGML_TYPE_F32, E, T));
         }},
        {"get_rows_q8_0", [&](ggml_context * c, std::vector<ggml_tensor *> & in) {
             ggml_tensor * emb = input(c, in, GGML_TYPE_Q8_0, E, V);
             return ggml_get_rows(c, emb, index_input(c, in, T, (int32_t) V));
         }},
        {"rope_neox_softmax_attention", [&](ggml_context * c, std::vector<ggml_tensor *> & in) {
             ggml_tensor * q = input(c, in, GGML_TYPE_F32, D, H, T);
             ggml_tensor * k = input(c, in, GGML_TYPE_F32, D, H, T);
             ggml_tensor * v = input(c, in, GGML_TYPE_F32, D, H, T);
             ggml_tensor * pos = index_input(c, in, T, 100);
             ggml_tensor * mask = input(c, in, GGML_TYPE_F32, T, T);
             q = ggml_rope_ext(c, q, pos, nullptr, D, GGML_ROPE_TYPE_NEOX, 0, 10000.f, 1.f, 0.f, 1.f, 32.f, 1.f);
             k = ggml_rope_ext(c, k, pos, nullptr, D, GGML_ROPE_TYPE_NEOX, 0, 10000.f, 1.f, 0.f, 1.f, 32.f, 1.f);
             ggml_tensor * qp = ggml_permute(c, q, 0, 2, 1, 3);
             ggml_tensor * kp = ggml_cont(c, ggml_permute(c, k, 0, 2, 1, 3));
             ggml_tensor * kq = ggml_soft_max_ext(c, ggml_mul_mat(c, kp, qp), mask, 0.25f, 0.0f);
             ggml_tensor * vt = ggml_cont(c, ggml_permute(c, v, 1, 2, 0, 3));
             ggml_tensor * kqv = ggml_permute(c, ggml_mul_mat(c, vt, kq), 0, 2, 1, 3);
             return ggml_cont_2d(c, kqv, D * H, T);
         }},
        {"flash_attn_ext", [&](ggml_context * c, std::vector<ggml_tensor *> & in) {
             ggml_tensor * q = input(c, in, GGML_TYPE_F32, D, T, H);
             ggml_tensor * k = input(c, in, GGML_TYPE_F16, D, KV, H / 2);
             ggml_tensor * v = input(c, in, GGML_TYPE_F16, D, KV, H / 2);
             ggml_tensor * mask = input(c, in, GGML_TYPE_F16, KV, T);
             ggml_tensor * o = ggml_flash_attn_ext(c, q, k, v, mask, 0.25f, 0.0f, 0.0f);
             return ggml_reshape_2d(c, o, D * H, T);
         }},
        {"kv_cache_set_rows_view", [&](ggml_context * c, std::vector<ggml_tensor *> & in) {
             ggml_tensor * cache = input(c, in, GGML_TYPE_F32, E, KV);
             ggml_tensor * rows = input(c, in, GGML_TYPE_F32, E, 3);
             ggml_tensor * idx = index_input(c, in, 3, (int32_t) KV);
             ggml_tensor * upd = ggml_set_rows(c, cache, rows, idx);
             ggml_tensor * view = ggml_view_2d(c, upd, E, 4, upd->nb[1], 2 * upd->nb[1]);
             ggml_tensor * half = ggml_cast(c, ggml_add(c, view, view), GGML_TYPE_F16);  // CPY with src[1] = itself
             return ggml_cast(c, half, GGML_TYPE_F32);
         }},
    };

    int failures = 0;
    for (auto & [name, build] : cases) {
        std::vector<float> want = run_case(cpu, nullptr, build, 1234, 2);
        std::vector<float> got = run_case(rpc, cpu, build, 1234, 2);
        double diff = 0, scale = 0;
        for (size_t i = 0; i < want.size(); i++) {
            diff = std::fmax(diff, std::fabs((double) got[i] - (double) want[i]));
            scale = std::fmax(scale, std::fabs((double) want[i]));
        }
        if (got.size() != want.size() || !std::isfinite(diff)) {
            failures++;
        }
        printf("CASE %s %.9g %.9g\n", name.c_str(), diff, scale);
        fflush(stdout);
    }

    // weights over 10 MiB: SET_TENSOR_HASH (miss) then SET_TENSOR with cache_flag, then a hit on the second upload
    const bool weights = !(argc > 2 && std::string(argv[2]) == "--no-weights");
    for (int round = 0; weights && round < 2; round++) {
        ggml_init_params params = {2 * ggml_tensor_overhead(), nullptr, true};
        ggml_context * ctx = ggml_init(params);
        ggml_tensor * w = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 3 * 1024 * 1024);  // 12 MiB
        ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, rpc);
        ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        std::vector<float> data(ggml_nelements(w));
        for (size_t i = 0; i < data.size(); i++) {
            data[i] = (float) (i % 1000) * 0.25f;
        }
        ggml_backend_tensor_set(w, data.data(), 0, ggml_nbytes(w));
        std::vector<float> back(data.size());
        ggml_backend_tensor_get(w, back.data(), 0, ggml_nbytes(w));
        const bool same = memcmp(back.data(), data.data(), ggml_nbytes(w)) == 0;
        failures += same ? 0 : 1;
        printf("WEIGHTS round=%d %s\n", round, same ? "same" : "DIFFERENT");
        ggml_backend_buffer_free(buf);
        ggml_free(ctx);
    }

    ggml_backend_free(rpc);
    ggml_backend_free(cpu);
    printf("DONE failures=%d\n", failures);
    return failures == 0 ? 0 : 1;
}
