// ggml-core's driver for llama.cpp's C API (libllama), built against the vendored llama.cpp of the
// llama-cpp-python sdist by ggml_core/testing/llama_cpp.py. It is the reference side of tests and benchmarks:
// logits, greedy continuations, token ids and tokens/s computed by llama.cpp itself.
//
//   harness logits   MODEL THREADS N_CTX KV_TYPE FLASH TOKENS OUT   one batch: float32 [n_tokens, n_vocab] to OUT
//   harness steps    MODEL THREADS N_CTX KV_TYPE FLASH TOKENS OUT   one token per decode call, same output
//   harness generate MODEL THREADS N_CTX KV_TYPE FLASH TOKENS N     greedy: N token ids, one per line
//   harness tokenize MODEL ADD_SPECIAL PARSE_SPECIAL               text on stdin, ids one per line
//   harness bench    MODEL THREADS N_PROMPT N_GEN REPS KV_TYPE FLASH
//                    like llama-bench: a warm-up, then REPS times a prompt of N_PROMPT tokens in one batch and
//                    N_GEN single-token steps on a cleared cache; prints "pp SECONDS" and "tg SECONDS" per rep
//
// TOKENS is a file of little-endian int32 token ids. Exit code 1 with a message on stderr on any failure.

#include "llama.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

namespace {

[[noreturn]] void fail(const std::string & msg) {
    std::fprintf(stderr, "llama_cpp_harness: %s\n", msg.c_str());
    std::exit(1);
}

void quiet_log(ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_ERROR) {
        std::fputs(text, stderr);
    }
}

ggml_type kv_type(const std::string & name) {
    if (name == "f32") return GGML_TYPE_F32;
    if (name == "f16") return GGML_TYPE_F16;
    if (name == "q8_0") return GGML_TYPE_Q8_0;
    fail("unknown KV cache type '" + name + "' (f32, f16, q8_0)");
}

std::vector<llama_token> read_tokens(const char * path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail(std::string("cannot read ") + path);
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::vector<llama_token> tokens(bytes.size() / sizeof(llama_token));
    std::memcpy(tokens.data(), bytes.data(), tokens.size() * sizeof(llama_token));
    return tokens;
}

llama_model * load(const char * path) {
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(path, mp);
    if (!model) fail(std::string("llama.cpp cannot load ") + path);
    return model;
}

llama_context * context(llama_model * model, int threads, int n_ctx, int n_batch, const std::string & kv, int flash) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    cp.n_ubatch = n_batch;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.type_k = kv_type(kv);
    cp.type_v = kv_type(kv);
    cp.flash_attn_type = flash ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.no_perf = true;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) fail("llama.cpp cannot create a context");
    return ctx;
}

// decode tokens[first, first + n) at positions first.. ; logits for every one when all_logits, else the last
void decode(llama_context * ctx, const std::vector<llama_token> & tokens, int first, int n, bool all_logits) {
    llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        batch.token[i] = tokens[first + i];
        batch.pos[i] = first + i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = all_logits || i == n - 1;
    }
    batch.n_tokens = n;
    if (llama_decode(ctx, batch) != 0) fail("llama_decode failed");
    llama_batch_free(batch);
}

int argmax(const float * v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) {
        if (v[i] > v[best]) best = i;
    }
    return best;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 3) fail("usage: see the comment at the top of llama_cpp_harness.cpp");
    const std::string mode = argv[1];
    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
    llama_model * model = load(argv[2]);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    if (mode == "tokenize") {
        if (argc != 5) fail("tokenize MODEL ADD_SPECIAL PARSE_SPECIAL");
        std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
        std::vector<llama_token> ids(text.size() + 8);
        int n = llama_tokenize(vocab, text.data(), (int) text.size(), ids.data(), (int) ids.size(),
                               std::atoi(argv[3]) != 0, std::atoi(argv[4]) != 0);
        if (n < 0) fail("llama_tokenize failed");
        for (int i = 0; i < n; i++) std::printf("%d\n", ids[i]);
    } else if (mode == "logits" || mode == "steps" || mode == "generate") {
        if (argc != 9) fail(mode + " MODEL THREADS N_CTX KV_TYPE FLASH TOKENS OUT|N");
        std::vector<llama_token> tokens = read_tokens(argv[7]);
        if (tokens.empty()) fail("no tokens");
        const int n = (int) tokens.size();
        llama_context * ctx = context(model, std::atoi(argv[3]), std::atoi(argv[4]), mode == "steps" ? 1 : n,
                                      argv[5], std::atoi(argv[6]));
        if (mode == "generate") {
            decode(ctx, tokens, 0, n, false);
            const int n_gen = std::atoi(argv[8]);
            for (int i = 0; i < n_gen; i++) {
                int next = argmax(llama_get_logits_ith(ctx, -1), n_vocab);
                std::printf("%d\n", next);
                if (llama_vocab_is_eog(vocab, next)) break;
                tokens.push_back(next);
                decode(ctx, tokens, (int) tokens.size() - 1, 1, false);
            }
        } else {
            std::FILE * out = std::fopen(argv[8], "wb");
            if (!out) fail(std::string("cannot write ") + argv[8]);
            if (mode == "logits") {
                decode(ctx, tokens, 0, n, true);
                for (int i = 0; i < n; i++) std::fwrite(llama_get_logits_ith(ctx, i), sizeof(float), n_vocab, out);
            } else {
                for (int i = 0; i < n; i++) {
                    decode(ctx, tokens, i, 1, true);
                    std::fwrite(llama_get_logits_ith(ctx, 0), sizeof(float), n_vocab, out);
                }
            }
            std::fclose(out);
        }
        llama_free(ctx);
    } else if (mode == "bench") {
        if (argc != 9) fail("bench MODEL THREADS N_PROMPT N_GEN REPS KV_TYPE FLASH");
        const int threads = std::atoi(argv[3]), n_prompt = std::atoi(argv[4]), n_gen = std::atoi(argv[5]);
        const int reps = std::atoi(argv[6]);
        llama_context * ctx = context(model, threads, n_prompt + n_gen + 8, n_prompt, argv[7], std::atoi(argv[8]));
        std::vector<llama_token> tokens(n_prompt + n_gen);
        for (int i = 0; i < n_prompt + n_gen; i++) tokens[i] = (llama_token) ((i * 7919 + 13) % n_vocab);
        llama_memory_t mem = llama_get_memory(ctx);
        // warm-up, as llama-bench does: one prompt batch and one step
        decode(ctx, tokens, 0, n_prompt, false);
        decode(ctx, tokens, n_prompt, 1, false);
        for (int r = 0; r < reps; r++) {
            llama_memory_clear(mem, true);
            auto t0 = std::chrono::steady_clock::now();
            decode(ctx, tokens, 0, n_prompt, false);
            llama_synchronize(ctx);
            std::printf("pp %.9f\n", seconds_since(t0));
            llama_memory_clear(mem, true);
            t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < n_gen; i++) decode(ctx, tokens, i, 1, false);
            llama_synchronize(ctx);
            std::printf("tg %.9f\n", seconds_since(t0));
            std::fflush(stdout);
        }
        llama_free(ctx);
    } else {
        fail("unknown mode '" + mode + "' (logits, steps, generate, tokenize, bench)");
    }
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
