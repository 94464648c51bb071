/* test_engine.c — the engine end to end on stories260K (a real trained model):
 * greedy tokens and first-step logits against an independent float64
 * reference, interleaved sequences in shared batches, prefix sharing, cache
 * limits and bad input. */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "brisk.h"
#include "test.h"

static brisk_model *model;
static cJSON *ref;

static const char *stories_path(void) {
    static char p[1024];
    snprintf(p, sizeof p, "%s/data/stories260K/stories260K.gguf", test_shared_dir());
    return p;
}

static brisk_context *new_ctx(int n_ctx, int n_seq, brisk_kv_type kv, int threads) {
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_seq_max = n_seq;
    cp.kv_type = kv;
    cp.n_threads = threads;
    cp.kv_block_size = 16;
    brisk_context *c = NULL;
    CHECK_OK(brisk_context_new(model, &cp, &c));
    return c;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Greedy from BOS, one token per decode call. */
static void greedy(brisk_context *c, int seq, int n, int *out) {
    int tok = 1;
    for (int i = 0; i < n; i++) {
        brisk_batch_entry e = {tok, i, seq, true};
        CHECK_OK(brisk_decode(c, &e, 1));
        tok = out[i] = argmax(brisk_get_logits(c, 0), 512);
    }
}

static void test_greedy_reference(void) {
    cJSON *ids = cJSON_GetObjectItem(ref, "ids");
    int n = cJSON_GetArraySize(ids);
    CHECK(n == 256);
    for (int kv = 0; kv < 2; kv++) {
        brisk_context *c = new_ctx(512, 1, kv ? BRISK_KV_F16 : BRISK_KV_F32, 2);
        int out[256];
        greedy(c, 0, n, out);
        int same = 0;
        while (same < n && out[same] == cJSON_GetArrayItem(ids, same)->valueint) same++;
        if (same != n) fprintf(stderr, "  kv %s: first mismatch at step %d\n", kv ? "f16" : "f32", same);
        CHECK(same == n);
        brisk_context_free(c);
    }
}

static void test_first_logits(void) {
    brisk_context *c = new_ctx(64, 1, BRISK_KV_F32, 1);
    brisk_batch_entry e = {1, 0, 0, true};
    CHECK_OK(brisk_decode(c, &e, 1));
    const float *lg = brisk_get_logits(c, 0);
    cJSON *want = cJSON_GetObjectItem(ref, "first_step_logits");
    double maxerr = 0;
    for (int i = 0; i < 512; i++) {
        double d = fabs(lg[i] - cJSON_GetArrayItem(want, i)->valuedouble);
        if (d > maxerr) maxerr = d;
    }
    printf("  first-step logits: max abs error %.2e\n", maxerr);
    CHECK(maxerr < 1e-4);
    brisk_context_free(c);
}

static void test_prompt_batch(void) {
    /* A prompt decoded as one batch gives the same continuation as the reference. */
    cJSON *pc = cJSON_GetObjectItem(ref, "prompt_case");
    cJSON *pids = cJSON_GetObjectItem(pc, "prompt_ids"), *ids = cJSON_GetObjectItem(pc, "ids");
    int np = cJSON_GetArraySize(pids), steps = cJSON_GetObjectItem(pc, "steps")->valueint;
    brisk_context *c = new_ctx(128, 1, BRISK_KV_F32, 2);
    brisk_batch_entry b[16];
    for (int i = 0; i < np; i++) b[i] = (brisk_batch_entry){cJSON_GetArrayItem(pids, i)->valueint, i, 0, i == np - 1};
    CHECK_OK(brisk_decode(c, b, np));
    int tok = argmax(brisk_get_logits(c, np - 1), 512), ok = 1;
    for (int pos = np; pos < steps; pos++) {
        if (tok != cJSON_GetArrayItem(ids, pos - 1)->valueint) ok = 0;
        brisk_batch_entry e = {tok, pos, 0, true};
        CHECK_OK(brisk_decode(c, &e, 1));
        tok = argmax(brisk_get_logits(c, 0), 512);
    }
    CHECK(ok);
    brisk_context_free(c);
}

/* -ub: a call longer than n_ubatch runs as several forward passes, with the logits of one pass; the
 * scratch is sized by the pass (so n_ubatch really took effect). */
static void test_ubatch(void) {
    enum { N = 300 };
    static const int ubs[] = {0, 64, 7, 1000}; /* 0: the default (512) */
    float *want = NULL;
    uint64_t scratch[4];
    brisk_batch_entry b[N];
    for (int i = 0; i < N; i++) b[i] = (brisk_batch_entry){1 + (i * 37) % 500, i, 0, i == N - 1 || i == 100};
    for (int k = 0; k < 4; k++) {
        brisk_context_params cp = brisk_context_default_params();
        cp.n_ctx = 512;
        cp.n_batch = N;
        cp.n_ubatch = ubs[k];
        cp.kv_type = BRISK_KV_F32;
        cp.n_threads = 2;
        brisk_context *c = NULL;
        CHECK_OK(brisk_context_new(model, &cp, &c));
        brisk_memory_report mr;
        brisk_context_memory(c, &mr);
        scratch[k] = mr.scratch_bytes;
        CHECK_OK(brisk_decode(c, b, N));
        float got[2][512];
        memcpy(got[0], brisk_get_logits(c, 100), sizeof got[0]);
        memcpy(got[1], brisk_get_logits(c, N - 1), sizeof got[1]);
        if (!want) {
            want = malloc(sizeof got);
            memcpy(want, got, sizeof got);
        } else {
            double maxerr = 0;
            for (int i = 0; i < 1024; i++) maxerr = fmax(maxerr, fabs((double)(&got[0][0])[i] - want[i]));
            printf("  n_ubatch %d: max abs difference %.2e from one pass\n", ubs[k], maxerr);
            CHECK(maxerr < 1e-4);
        }
        brisk_context_free(c);
    }
    free(want);
    CHECK(scratch[2] < scratch[1] && scratch[1] < scratch[0] && scratch[0] == scratch[3]); /* 300 < 512 entries */
}

static void test_interleaved_sequences(void) {
    /* Four sequences with different prompts, decoded alone and then together in
     * shared batches (mixed prompt and generation entries): identical tokens. */
    const int prompts[4][6] = {{1, 403, 407}, {1, 291, 410, 456}, {1, 346, 306, 414, 263}, {1, 410}};
    const int plen[4] = {3, 4, 5, 2};
    const int N = 40;
    int alone[4][64], together[4][64];
    for (int s = 0; s < 4; s++) {
        brisk_context *c = new_ctx(256, 1, BRISK_KV_F16, 2);
        brisk_batch_entry b[8];
        for (int i = 0; i < plen[s]; i++) b[i] = (brisk_batch_entry){prompts[s][i], i, 0, i == plen[s] - 1};
        CHECK_OK(brisk_decode(c, b, plen[s]));
        int tok = argmax(brisk_get_logits(c, plen[s] - 1), 512);
        for (int i = 0; i < N; i++) {
            alone[s][i] = tok;
            brisk_batch_entry e = {tok, plen[s] + i, 0, true};
            CHECK_OK(brisk_decode(c, &e, 1));
            tok = argmax(brisk_get_logits(c, 0), 512);
        }
        brisk_context_free(c);
    }
    brisk_context *c = new_ctx(256, 4, BRISK_KV_F16, 2);
    int next[4], done[4] = {0}, fed[4] = {0}; /* fed: prompt tokens already decoded */
    /* Step k: sequence s feeds one prompt token at a time for s>=2 (staggered), all of it at once for s<2. */
    for (int step = 0; step < N + 8; step++) {
        brisk_batch_entry b[32];
        int nb = 0, who[32];
        for (int s = 0; s < 4; s++) {
            if (done[s] >= N) continue;
            if (fed[s] < plen[s]) {
                int take = s < 2 ? plen[s] : 1;
                for (int i = 0; i < take && fed[s] < plen[s]; i++, fed[s]++) {
                    who[nb] = s;
                    b[nb] = (brisk_batch_entry){prompts[s][fed[s]], fed[s], s, fed[s] == plen[s] - 1};
                    nb++;
                }
            } else {
                together[s][done[s]] = next[s];
                who[nb] = s;
                b[nb] = (brisk_batch_entry){next[s], plen[s] + done[s], s, true};
                nb++;
                done[s]++;
            }
        }
        if (!nb) break;
        CHECK_OK(brisk_decode(c, b, nb));
        for (int i = 0; i < nb; i++)
            if (b[i].logits) next[who[i]] = argmax(brisk_get_logits(c, i), 512);
    }
    for (int s = 0; s < 4; s++) {
        CHECK(done[s] == N);
        CHECK(!memcmp(alone[s], together[s], sizeof(int) * N));
    }
    brisk_context_free(c);
}

static void test_share_prefix(void) {
    /* Seq 1 takes seq 0's first 21 positions (mid-page), then both continue:
     * each must give what a fresh sequence gives. */
    brisk_context *c = new_ctx(256, 3, BRISK_KV_F32, 1);
    int ref_out[60];
    greedy(c, 2, 60, ref_out);
    int tok = 1;
    for (int i = 0; i < 30; i++) {
        brisk_batch_entry e = {tok, i, 0, true};
        CHECK_OK(brisk_decode(c, &e, 1));
        tok = argmax(brisk_get_logits(c, 0), 512);
    }
    CHECK_OK(brisk_seq_share_prefix(c, 0, 1, 21));
    CHECK(brisk_seq_len(c, 1) == 21);
    /* seq 1 continues from position 21 with the reference token */
    int t1 = ref_out[20], ok = 1;
    for (int i = 21; i < 60; i++) {
        brisk_batch_entry e = {t1, i, 1, true};
        CHECK_OK(brisk_decode(c, &e, 1));
        t1 = argmax(brisk_get_logits(c, 0), 512);
        if (t1 != ref_out[i]) ok = 0;
    }
    CHECK(ok);
    /* seq 0 continues too, unaffected by seq 1's writes into the shared page */
    ok = 1;
    for (int i = 30; i < 60; i++) {
        brisk_batch_entry e = {tok, i, 0, true};
        CHECK_OK(brisk_decode(c, &e, 1));
        if (tok != ref_out[i - 1]) ok = 0;
        tok = argmax(brisk_get_logits(c, 0), 512);
    }
    CHECK(ok);
    /* truncating and re-decoding reproduces the same tokens */
    CHECK_OK(brisk_seq_remove(c, 0, 10, -1));
    CHECK(brisk_seq_len(c, 0) == 10);
    brisk_batch_entry e = {ref_out[9], 10, 0, true};
    CHECK_OK(brisk_decode(c, &e, 1));
    CHECK(argmax(brisk_get_logits(c, 0), 512) == ref_out[10]);
    CHECK(brisk_seq_remove(c, 0, 2, 5) == BRISK_ERR_UNSUPPORTED);
    brisk_context_free(c);
}

/* brisk_seq_extend_blank (brisk bench --blank-depth): the positions count as cached, the next
 * decode continues after them, the cache's bounds hold, and another sequence is untouched. */
static void test_extend_blank(void) {
    brisk_context *c = new_ctx(128, 2, BRISK_KV_F16, 1);
    int ref_out[40], got[40];
    greedy(c, 1, 40, ref_out);
    CHECK_OK(brisk_seq_clear(c, 1));
    CHECK_OK(brisk_seq_extend_blank(c, 0, 37)); /* mid-page */
    CHECK(brisk_seq_len(c, 0) == 37);
    brisk_batch_entry gap = {1, 38, 0, true};
    CHECK(brisk_decode(c, &gap, 1) == BRISK_ERR_INVALID_ARG); /* a gap after the blank positions */
    brisk_batch_entry next = {1, 37, 0, true};
    CHECK_OK(brisk_decode(c, &next, 1));
    CHECK(brisk_seq_len(c, 0) == 38);
    const float *l = brisk_get_logits(c, 0);
    int finite = l != NULL;
    for (int i = 0; finite && i < 512; i++) finite = isfinite(l[i]);
    CHECK(finite); /* zero rows attend to a uniform mix, no NaN */
    greedy(c, 1, 40, got); /* the other sequence's pages are its own */
    CHECK(!memcmp(got, ref_out, sizeof got));
    CHECK(brisk_seq_extend_blank(c, 0, 1000) == BRISK_ERR_RANGE); /* beyond the pool */
    CHECK(brisk_seq_extend_blank(c, 2, 1) == BRISK_ERR_INVALID_ARG);
    CHECK(brisk_seq_extend_blank(c, 0, -1) == BRISK_ERR_INVALID_ARG);
    CHECK_OK(brisk_seq_clear(c, 0));
    greedy(c, 0, 40, got);
    CHECK(!memcmp(got, ref_out, sizeof got));
    brisk_context_free(c);
}

static void test_limits(void) {
    brisk_context *c = new_ctx(32, 2, BRISK_KV_F16, 1);
    brisk_batch_entry b[40];
    for (int i = 0; i < 40; i++) b[i] = (brisk_batch_entry){1, i, 0, false};
    CHECK(brisk_decode(c, b, 40) == BRISK_ERR_RANGE); /* beyond the context */
    CHECK(strlen(brisk_last_error()) > 0);
    brisk_seq_clear(c, 0);
    brisk_batch_entry bad_tok = {9999, 0, 0, true};
    CHECK(brisk_decode(c, &bad_tok, 1) == BRISK_ERR_INVALID_ARG);
    brisk_batch_entry bad_seq = {1, 0, 7, true};
    CHECK(brisk_decode(c, &bad_seq, 1) == BRISK_ERR_INVALID_ARG);
    brisk_batch_entry gap = {1, 5, 1, true};
    CHECK(brisk_decode(c, &gap, 1) == BRISK_ERR_INVALID_ARG);
    CHECK(brisk_get_logits(c, 3) == NULL);
    brisk_context_free(c);
}

static void test_sampler(void) {
    float logits[512];
    for (int i = 0; i < 512; i++) logits[i] = (float)((i * 37) % 512) / 50.0f; /* distinct values */
    brisk_sampler_params p = brisk_sampler_default_params();
    p.temp = 0;
    brisk_sampler *s;
    CHECK_OK(brisk_sampler_new(&p, 512, &s));
    CHECK(brisk_sampler_sample(s, logits) == argmax(logits, 512));
    brisk_sampler_free(s);
    /* same seed, same draws; top_k 1 is greedy */
    p = brisk_sampler_default_params();
    p.seed = 42;
    brisk_sampler *a, *b;
    CHECK_OK(brisk_sampler_new(&p, 512, &a));
    CHECK_OK(brisk_sampler_new(&p, 512, &b));
    int diff = 0;
    for (int i = 0; i < 50; i++) diff += brisk_sampler_sample(a, logits) != brisk_sampler_sample(b, logits);
    CHECK(diff == 0);
    brisk_sampler_free(a);
    brisk_sampler_free(b);
    p.top_k = 1;
    CHECK_OK(brisk_sampler_new(&p, 512, &a));
    CHECK(brisk_sampler_sample(a, logits) == argmax(logits, 512));
    brisk_sampler_free(a);
    /* repetition penalty pushes a repeated winner down */
    p = brisk_sampler_default_params();
    p.temp = 0;
    p.repeat_penalty = 100.0f;
    CHECK_OK(brisk_sampler_new(&p, 512, &a));
    int top = argmax(logits, 512);
    brisk_sampler_accept(a, top);
    CHECK(brisk_sampler_sample(a, logits) != top);
    brisk_sampler_free(a);
    /* min_p near 1 leaves only the best token */
    p = brisk_sampler_default_params();
    p.min_p = 0.999f;
    p.top_k = 0;
    CHECK_OK(brisk_sampler_new(&p, 512, &a));
    for (int i = 0; i < 20; i++) CHECK(brisk_sampler_sample(a, logits) == top);
    brisk_sampler_free(a);
}

static void test_detok_stream(void) {
    /* stories260K byte tokens are id = byte + 3: "é" split over two tokens,
     * then an invalid byte, then a 3-byte char whose tail never comes. */
    brisk_detok st = {0};
    char buf[64];
    size_t len;
    CHECK_OK(brisk_detok_push(model, &st, 3 + 0xC3, buf, sizeof buf, &len));
    CHECK(len == 0);
    CHECK_OK(brisk_detok_push(model, &st, 3 + 0xA9, buf, sizeof buf, &len));
    CHECK(len == 2 && !memcmp(buf, "\xC3\xA9", 2));
    CHECK_OK(brisk_detok_push(model, &st, 3 + 0xFF, buf, sizeof buf, &len));
    CHECK(len == 3 && !memcmp(buf, "\xEF\xBF\xBD", 3));
    CHECK_OK(brisk_detok_push(model, &st, 3 + 0xE2, buf, sizeof buf, &len));
    CHECK(len == 0);
    CHECK_OK(brisk_detok_push(model, &st, 403, buf, sizeof buf, &len)); /* "▁Once" breaks the sequence */
    CHECK(len > 3 && !memcmp(buf, "\xEF\xBF\xBD", 3) && strstr(buf, "Once"));
}

/* Quantized KV caches: the names, the head-size rule (stories260K's heads are 8 wide), and on
 * brisk-kjv-6m (64-wide heads) a q8_0 and a q4_0 cache through a prefix shared mid-page (the page
 * copied by bytes): the sharing sequence continues with the tokens the first one produced. */
static void test_quantized_kv(void) {
    CHECK(brisk_kv_type_from_name("q4_0") == BRISK_KV_Q4_0 && brisk_kv_type_from_name("q8_0") == BRISK_KV_Q8_0);
    CHECK(brisk_kv_type_from_name("q4_1") == -1);
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = 64;
    cp.kv_type = BRISK_KV_Q4_0;
    brisk_context *c = NULL;
    CHECK(brisk_context_new(model, &cp, &c) == BRISK_ERR_UNSUPPORTED && c == NULL);
    CHECK(strstr(brisk_last_error(), "q4_0") && strstr(brisk_last_error(), "multiple of 32"));
    cp.kv_type = BRISK_KV_Q4_0H;
    CHECK(brisk_context_new(model, &cp, &c) == BRISK_ERR_UNSUPPORTED && c == NULL);
    CHECK(strstr(brisk_last_error(), "q4_0h") && strstr(brisk_last_error(), "multiple of 32"));
    cp.kv_type = (brisk_kv_type)5;
    CHECK(brisk_context_new(model, &cp, &c) == BRISK_ERR_INVALID_ARG && c == NULL);
    brisk_model *kjv = NULL;
    CHECK_OK(brisk_model_load("models/brisk-kjv-6m.gguf", NULL, &kjv));
    if (!kjv) return;
    const int nv = brisk_n_vocab(kjv);
    for (int kt = BRISK_KV_Q8_0; kt <= BRISK_KV_Q4_0H; kt++) {
        cp = brisk_context_default_params();
        cp.n_ctx = 128, cp.n_seq_max = 2, cp.n_threads = 2, cp.kv_type = (brisk_kv_type)kt, cp.kv_block_size = 16;
        CHECK_OK(brisk_context_new(kjv, &cp, &c));
        if (!c) break;
        int out[40], tok = 1, same = 0;
        for (int i = 0; i < 40; i++) {
            brisk_batch_entry e = {tok, i, 0, true};
            CHECK_OK(brisk_decode(c, &e, 1));
            tok = out[i] = argmax(brisk_get_logits(c, 0), nv);
        }
        CHECK_OK(brisk_seq_share_prefix(c, 0, 1, 21));
        for (int i = 21; i < 40; i++) {
            brisk_batch_entry e = {out[i - 1], i, 1, true};
            CHECK_OK(brisk_decode(c, &e, 1));
            same += argmax(brisk_get_logits(c, 0), nv) == out[i];
        }
        printf("  %s cache: %d of 19 tokens after a shared 21-token prefix as the first sequence's\n",
               kt == BRISK_KV_Q4_0H ? "q4_0h" : kt == BRISK_KV_Q4_0 ? "q4_0" : "q8_0", same);
        CHECK(same == 19);
        brisk_context_free(c);
    }
    brisk_model_free(kjv);
}

static void test_bad_files(void) {
    brisk_model *m = NULL;
    CHECK(brisk_model_load("/nonexistent/model.gguf", NULL, &m) == BRISK_ERR_IO);
    CHECK(m == NULL);
    char p[1024];
    snprintf(p, sizeof p, "%s/data/llama.cpp-vocab/ggml-vocab-gpt-2.gguf", test_shared_dir());
    CHECK(brisk_model_load(p, NULL, &m) != BRISK_OK); /* vocab only: no tensors */
    printf("  vocab-only file as a model: %s\n", brisk_last_error());
}

int main(int argc, char **argv) {
    char p[1024];
    snprintf(p, sizeof p, "%s/data/stories260K/greedy_bos_256.json", test_shared_dir());
    FILE *f = fopen(p, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", p);
        return 1;
    }
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    ref = cJSON_Parse(buf);
    if (brisk_model_load(stories_path(), NULL, &model) != BRISK_OK) {
        fprintf(stderr, "load: %s\n", brisk_last_error());
        return 1;
    }
    test_case cases[] = {
        {"greedy_reference_256", test_greedy_reference},
        {"first_step_logits", test_first_logits},
        {"prompt_batch", test_prompt_batch},
        {"ubatch", test_ubatch},
        {"interleaved_sequences", test_interleaved_sequences},
        {"share_prefix", test_share_prefix},
        {"extend_blank", test_extend_blank},
        {"limits", test_limits},
        {"sampler", test_sampler},
        {"detok_stream", test_detok_stream},
        {"quantized_kv", test_quantized_kv},
        {"bad_files", test_bad_files},
    };
    int rc = test_main(cases, sizeof cases / sizeof cases[0], argc, argv);
    brisk_model_free(model);
    cJSON_Delete(ref);
    return rc;
}
