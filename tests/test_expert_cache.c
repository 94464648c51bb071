/* test_expert_cache.c — the hot-expert GPU cache for experts in host memory
 * (brisk_context_params.cache_experts, backend/moe.c) without a GPU: the
 * model "on the GPU" is split_cpu's second CPU backend, which holds the
 * cache's slots, while the context's extra CPU backend runs the misses, as
 * a GPU stage does. Each layer's weighted expert sum is then two sums added,
 * so logits match the all-CPU run to rounding (1e-4 of the row's largest
 * for float models, 2e-2 with quantized activations: g_tol) and greedy tokens exactly; the counters add up; the calibration file
 * round-trips and a broken one is refused with a message.
 *
 * The map mode (the default for decode steps) runs a cached layer as one moe_ffn through tables of
 * expert pointers (a slot, or the expert's host bytes: on the stand-in both
 * are host memory) and counts routings in "device" counters read back between
 * passes: its logits equal the all-CPU run's bit for bit, its hit count is what
 * the reference's routing gives the initial cache, and its refresh still
 * follows the routing. */
#include <stdlib.h>
#include <unistd.h>

#include "backend/cuda/cuda_backend.h"
#include "brisk.h"
#include "model/synth.h"
#include "test.h"

#define N_PROMPT 24
#define N_GEN 12

typedef struct run_opts {
    int n_cpu_moe;        /* 0: the all-CPU reference */
    int cache_experts;
    const char *miss;     /* BRISK_XCACHE_MISS: "cpu", "copy", "map" or NULL (auto: map) */
    const char *read_every; /* BRISK_XCACHE_READ_EVERY or NULL */
    const int64_t *stats; /* (n_layer, n_expert) or NULL */
    int stats_layers, stats_experts;
    int k;                /* the model's n_expert_used */
    bool gpu;             /* every layer on CUDA device 0 (the cache's slots there), not split_cpu's stand-in */
} run_opts;

typedef struct run_out {
    float *logits;        /* (N_GEN + 1, n_vocab): the prompt's last row, then each generated token's */
    brisk_token tokens[N_GEN + 1];
    int n_vocab, n_layer, k;
    brisk_expert_cache_stats st;
    int64_t routed;       /* entries routed in the cached layers */
    int64_t *counts;      /* the reference run's routing counts (n_layer, n_expert) */
} run_out;

static bool run(const char *path, const run_opts *o, run_out *r) {
    memset(r, 0, sizeof *r);
    brisk_model_params mp = brisk_model_default_params();
    mp.split_cpu = o->n_cpu_moe > 0 && !o->gpu; /* all layers on the stand-in "GPU", the experts of n_cpu_moe on the host */
    mp.n_gpu_layers = o->n_cpu_moe > 0 || o->gpu ? -1 : 0;
    mp.n_cpu_moe = o->n_cpu_moe;
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(path, &mp, &m));
    if (!m) return false;
    brisk_model_info info;
    brisk_model_get_info(m, &info);
    r->n_layer = info.n_layer;
    r->n_vocab = brisk_n_vocab(m);
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = 128;
    cp.n_batch = 32;
    cp.n_threads = 2;
    /* An f32 cache: a run whose misses go to the CPU sums its experts' outputs in two parts (another
     * float order, differences of ~1e-8), and an f16 cache rounds such a difference up to one f16 ulp
     * now and then, which the tiny random model's near-tie routings can amplify past the bound. */
    cp.kv_type = BRISK_KV_F32;
    cp.cache_experts = o->cache_experts;
    cp.expert_stats = o->stats;
    cp.expert_stats_layers = o->stats_layers;
    cp.expert_stats_experts = o->stats_experts;
    /* the reference's counts, the calibration of the others (collected on the CPU only) */
    cp.collect_expert_stats = o->n_cpu_moe == 0 && !o->gpu;
    if (o->miss) setenv("BRISK_XCACHE_MISS", o->miss, 1);
    else unsetenv("BRISK_XCACHE_MISS");
    if (o->read_every) setenv("BRISK_XCACHE_READ_EVERY", o->read_every, 1);
    else unsetenv("BRISK_XCACHE_READ_EVERY");
    brisk_context *c = NULL;
    CHECK_OK(brisk_context_new(m, &cp, &c));
    unsetenv("BRISK_XCACHE_MISS");
    unsetenv("BRISK_XCACHE_READ_EVERY");
    if (!c) {
        brisk_model_free(m);
        return false;
    }
    r->logits = malloc((size_t)(N_GEN + 1) * r->n_vocab * sizeof(float));
    brisk_batch_entry e[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++)
        e[i] = (brisk_batch_entry){.token = (i * 7 + 3) % (r->n_vocab - 4) + 2, .pos = i, .seq = 0,
                                   .logits = i == N_PROMPT - 1};
    bool ok = brisk_decode(c, e, N_PROMPT) == BRISK_OK;
    CHECK(ok);
    for (int t = 0; ok && t <= N_GEN; t++) {
        const float *l = brisk_get_logits(c, t == 0 ? N_PROMPT - 1 : 0);
        CHECK(l != NULL);
        if (!l) break;
        memcpy(r->logits + (size_t)t * r->n_vocab, l, (size_t)r->n_vocab * sizeof(float));
        int best = 0;
        for (int v = 1; v < r->n_vocab; v++)
            if (l[v] > l[best]) best = v;
        r->tokens[t] = best;
        if (t == N_GEN) break;
        brisk_batch_entry g = {.token = best, .pos = N_PROMPT + t, .seq = 0, .logits = true};
        ok = brisk_decode(c, &g, 1) == BRISK_OK;
        CHECK(ok);
    }
    CHECK_OK(brisk_context_expert_cache_stats(c, -1, &r->st));
    if (cp.collect_expert_stats) {
        r->counts = malloc((size_t)info.n_layer * 8 * sizeof *r->counts);
        CHECK_OK(brisk_context_expert_counts(c, r->counts, (int64_t)info.n_layer * 8, NULL, NULL));
    }
    int n_cached = o->n_cpu_moe < info.n_layer ? o->n_cpu_moe : info.n_layer;
    r->k = o->k;
    r->routed = r->st.n_layers ? (int64_t)(N_PROMPT + N_GEN) * r->k * n_cached : 0;
    /* the per-layer figures add up to the whole */
    brisk_expert_cache_stats sum = {0};
    for (int l = 0; l < info.n_layer; l++) {
        brisk_expert_cache_stats one;
        CHECK_OK(brisk_context_expert_cache_stats(c, l, &one));
        sum.hits += one.hits;
        sum.misses += one.misses;
        sum.copies += one.copies;
    }
    CHECK(sum.hits == r->st.hits && sum.misses == r->st.misses && sum.copies == r->st.copies);
    brisk_context_free(c);
    brisk_model_free(m);
    return ok;
}

/* The logits' bound, of the row's largest magnitude. A run that splits a layer's experts between
 * two products (the hits', the misses') adds their two partial sums, another float order than the
 * one product's (the residual stream moves by ~1e-8); where the activations are quantized before
 * each product (Q8_0, Q8_K), such a move can cross one rounding boundary now and then and change a
 * quant by one step, which the tiny random model carries to ~1% of a logit (6.2e-3 measured, a
 * q8_0 prompt's split on packed panels; the same file in ggml's order happened to cross none).
 * Float models keep 1e-4. */
static double g_tol = 1e-4;

/* Same greedy tokens, and every logit within g_tol of its row's largest magnitude. */
static void check_same(const run_out *ref, const run_out *got, const char *what) {
    bool same_tok = !memcmp(ref->tokens, got->tokens, sizeof ref->tokens);
    double worst = 0;
    for (int t = 0; t <= N_GEN; t++) {
        const float *a = ref->logits + (size_t)t * ref->n_vocab, *b = got->logits + (size_t)t * ref->n_vocab;
        double mx = 0, d = 0;
        for (int v = 0; v < ref->n_vocab; v++) {
            mx = fabs(a[v]) > mx ? fabs(a[v]) : mx;
            d = fabs((double)a[v] - b[v]) > d ? fabs((double)a[v] - b[v]) : d;
        }
        if (mx > 0 && d / mx > worst) worst = d / mx;
    }
    if (getenv("XC_VERBOSE"))
        fprintf(stderr, "  %s: worst %.3g, hits %lld, misses %lld (copied %lld), refresh copies %lld\n", what, worst,
                (long long)got->st.hits, (long long)got->st.misses, (long long)got->st.miss_copied,
                (long long)got->st.copies);
    if (!same_tok || !(worst <= g_tol))
        fprintf(stderr, "  %s: tokens %s, worst logit difference %.3g of the row's largest\n", what,
                same_tok ? "equal" : "DIFFER", worst);
    CHECK(same_tok);
    CHECK(worst <= g_tol);
}

static bool synth(const char *preset, uint32_t type, const char *ftype, int k, char *dir, char *path, size_t cap) {
    strcpy(dir, "/tmp/brisk-test-xcache-XXXXXX");
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return false;
    }
    snprintf(path, cap, "%s/%s.gguf", dir, preset);
    synth_config c;
    CHECK_OK(synth_preset(preset, &c));
    c.expert_skew = 1;
    c.n_threads = 2;
    if (type) c.type = type;
    c.ftype = ftype;
    c.n_expert_used = k;
    return synth_write(&c, NULL, path, false) == BRISK_OK;
}

static void cleanup(const char *dir, const char *path) {
    unlink(path);
    rmdir(dir);
}

/* The routings to each layer's 3 most counted experts (ties: the lower id) of counts (nl, ne). */
static int64_t top3_routings(const int64_t *counts, int nl, int ne) {
    int64_t want = 0;
    for (int l = 0; l < nl; l++) {
        const int64_t *c = counts + (size_t)l * ne;
        bool taken[64] = {false};
        for (int s = 0; s < 3; s++) {
            int best = -1;
            for (int e = 0; e < ne; e++)
                if (!taken[e] && c[e] > 0 && (best < 0 || c[e] > c[best])) best = e;
            if (best < 0) break;
            taken[best] = true;
            want += c[best];
        }
    }
    return want;
}

/* Map mode's device counters, exactly: with calibration counts the cache starts with each layer's 3
 * most counted experts (ties: the lower id), and with no readback before the end (none is due in
 * 13 passes) nothing is swapped, so its hits are the reference's routings to those experts; the
 * final stats read the counters back. */
static void check_map_counts(const char *path, const run_out *ref, int nl, int ne, int k) {
    run_opts o = {.n_cpu_moe = nl, .cache_experts = 3, .miss = "map", .read_every = "1000", .stats = ref->counts,
                  .stats_layers = nl, .stats_experts = ne, .k = k};
    run_out got;
    if (!run(path, &o, &got)) return;
    int64_t want = top3_routings(ref->counts, nl, ne);
    if (got.st.hits != want)
        fprintf(stderr, "  map counters: hits %lld, the reference's routing gives %lld\n", (long long)got.st.hits,
                (long long)want);
    CHECK(got.st.hits == want);
    CHECK(got.st.hits + got.st.misses == got.routed);
    CHECK(got.st.copies == (int64_t)3 * nl); /* the first fill only */
    CHECK(!memcmp(ref->logits, got.logits, (size_t)(N_GEN + 1) * ref->n_vocab * sizeof(float)));
    free(got.logits);
}

/* The cache on every layer of a model, misses on the CPU, copied, or by default (copied while spare slots last), with
 * and without calibration counts. */
static void check_model(const char *preset, uint32_t type, const char *ftype, int k) {
    char dir[64], path[128];
    g_tol = type == 0 && !ftype ? 1e-4 : 2e-2; /* float weights, float activations; else quantized ones */
    if (!synth(preset, type, ftype, k, dir, path, sizeof path)) return;
    run_out ref, got;
    run_opts ro = {.k = k};
    if (!run(path, &ro, &ref)) return;
    CHECK(ref.st.n_layers == 0 && ref.st.hits == 0);
    int nl = ref.n_layer, ne = 8;
    /* experts in host memory without a cache: the old path, bit for bit as all-CPU */
    run_opts plain = {.n_cpu_moe = nl, .k = k};
    if (run(path, &plain, &got)) {
        CHECK(!memcmp(ref.logits, got.logits, (size_t)(N_GEN + 1) * ref.n_vocab * sizeof(float)));
        CHECK(got.st.n_layers == 0);
        free(got.logits);
    }
    /* the reference run's own counts as the calibration, and one run's own counts */
    int64_t *stats = ref.counts;
    const char *modes[] = {"cpu", "copy", NULL};
    int64_t hits[2] = {0, 0}; /* misses on the CPU: from the first batch, calibrated */
    for (int mi = 0; mi < 3; mi++)
        for (int with_stats = 0; with_stats < 2; with_stats++) {
            run_opts o = {.n_cpu_moe = nl, .cache_experts = 3, .miss = modes[mi], .stats = with_stats ? stats : NULL,
                          .stats_layers = nl, .stats_experts = ne, .k = k};
            char what[160];
            snprintf(what, sizeof what, "%s: 3 of 8 experts cached, misses %s, %s", preset,
                     modes[mi] ? modes[mi] : "by default", with_stats ? "calibrated" : "from the first batch");
            if (!run(path, &o, &got)) continue;
            check_same(&ref, &got, what);
            CHECK(got.st.n_layers == nl && got.st.slots == 3 && got.st.spare_slots == (2 * k < 5 ? 2 * k : 5));
            CHECK(got.st.hits + got.st.misses == got.routed);
            CHECK(got.st.hits > 0 && got.st.misses > 0);
            CHECK(got.st.copies >= (int64_t)3 * nl); /* every slot was filled */
            CHECK(got.st.miss_copied <= got.st.misses);
            if (mi == 0) CHECK(got.st.miss_copied == 0 && got.st.miss_copies == 0);
            if (mi == 1) CHECK(got.st.miss_copied > 0 && got.st.miss_copies > 0);
            if (mi == 0) hits[with_stats] = got.st.hits;
            free(got.logits);
        }
    CHECK(hits[1] > hits[0]); /* the calibration's experts serve the first batch too */
    check_map_counts(path, &ref, nl, ne, k);
    /* counts that rank the experts upside down: the refresh replaces the coldest as the run's own
     * counts grow */
    for (int i = 0; i < nl * ne; i++) stats[i] = 1000000 - stats[i];
    run_opts wrong = {.n_cpu_moe = nl, .cache_experts = 3, .miss = "cpu", .stats = stats, .stats_layers = nl,
                      .stats_experts = ne, .k = k};
    if (run(path, &wrong, &got)) {
        check_same(&ref, &got, "3 cached, from misleading counts");
        CHECK(got.st.copies > (int64_t)3 * nl);
        CHECK(got.st.hits + got.st.misses == got.routed);
        free(got.logits);
    }
    /* the same in map mode: the refresh from the counters read back after every pass */
    wrong.miss = "map";
    wrong.read_every = "1";
    if (run(path, &wrong, &got)) {
        check_same(&ref, &got, "3 cached, from misleading counts, map");
        CHECK(got.st.copies > (int64_t)3 * nl);
        CHECK(got.st.hits + got.st.misses == got.routed);
        free(got.logits);
    }
    /* every expert cached: all hits, the slots filled at creation */
    run_opts all = {.n_cpu_moe = nl, .cache_experts = 8, .k = k};
    if (run(path, &all, &got)) {
        check_same(&ref, &got, "all 8 experts cached");
        CHECK(got.st.misses == 0 && got.st.hits == got.routed && got.st.spare_slots == 0);
        free(got.logits);
    }
    /* the cache on the first layer only */
    run_opts one = {.n_cpu_moe = 1, .cache_experts = 2, .miss = "copy", .k = k};
    if (run(path, &one, &got)) {
        check_same(&ref, &got, "layer 0's experts on the host, 2 cached");
        CHECK(got.st.n_layers == 1 && got.st.hits + got.st.misses == got.routed);
        free(got.logits);
    }
    /* statistics of another shape are refused */
    brisk_model_params mp = brisk_model_default_params();
    mp.split_cpu = true;
    mp.n_cpu_moe = nl;
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(path, &mp, &m));
    if (m) {
        brisk_context_params cp = brisk_context_default_params();
        cp.n_ctx = 64;
        cp.cache_experts = 2;
        cp.expert_stats = stats;
        cp.expert_stats_layers = nl + 1;
        cp.expert_stats_experts = ne;
        brisk_context *c = NULL;
        CHECK(brisk_context_new(m, &cp, &c) == BRISK_ERR_INVALID_ARG && !c);
        CHECK(strstr(brisk_last_error(), "do not fit this model") != NULL);
        /* the cache's settings that do not parse are refused with their name, not taken as the default */
        cp.expert_stats = NULL;
        static const char *const bad[][2] = {{"BRISK_XCACHE_MISS", "mapped"}, {"BRISK_XCACHE_READ_EVERY", "0"},
                                             {"BRISK_XCACHE_READ_EVERY", "8x"}, {"BRISK_XCACHE_SWAP_MARGIN", "-1"},
                                             {"BRISK_XCACHE_SWAP_MARGIN", ""}};
        for (int i = 0; i < 5; i++) {
            setenv(bad[i][0], bad[i][1], 1);
            c = NULL;
            CHECK(brisk_context_new(m, &cp, &c) == BRISK_ERR_INVALID_ARG && !c);
            CHECK(strstr(brisk_last_error(), bad[i][0]) != NULL);
            unsetenv(bad[i][0]);
        }
        setenv("BRISK_XCACHE_SWAP_MARGIN", "2.5", 1); /* a good value still makes the context */
        CHECK_OK(brisk_context_new(m, &cp, &c));
        unsetenv("BRISK_XCACHE_SWAP_MARGIN");
        brisk_context_free(c);
        brisk_model_free(m);
    }
    free(stats);
    free(ref.logits);
    cleanup(dir, path);
}

/* k = 2 splits a sum of two products into its two terms: exact; k = 4 regroups the terms */
static void t_qwen3moe(void) { check_model("tiny-qwen3moe", 0, NULL, 2); }
static void t_qwen3moe_k4_q8(void) { check_model("tiny-qwen3moe", 8 /* QT_Q8_0 */, NULL, 4); }
static void t_qwen35moe(void) { check_model("tiny-qwen35moe", 0, NULL, 4); }
/* Q4_K_M's mix gives the down products of layers 2 and 3 (of 4) Q6_K and those of layers 0 and 1
 * Q4_K: each layer's slots, and the spare slots the copied misses go through, hold its own type */
static void t_qwen3moe_q4_k_m(void) { check_model("tiny-qwen3moe", 0, "Q4_K_M", 2); }

/* On a GPU (tests/cuda/run.sh; skipped without one): map mode's counters. A one-token step counts
 * in its MoE op's first launch (bk_cuda_expert_count_arm), a prefill in a count kernel: every
 * routing is counted once, hit or miss, and the text is that of the run without offload (the same
 * kernels through the tables). Statistics are collected on the CPU only, so the exact hit count is
 * check_map_counts' (the stand-in). */
static void check_cuda_counts(const char *preset, int k) {
    char dir[64], path[128];
    if (!synth(preset, 0, NULL, k, dir, path, sizeof path)) return;
    run_out ref, got;
    run_opts ro = {.k = k, .gpu = true};
    if (run(path, &ro, &ref)) {
        run_opts o = {.n_cpu_moe = ref.n_layer, .cache_experts = 3, .miss = "map", .read_every = "1000", .k = k,
                      .gpu = true};
        if (run(path, &o, &got)) {
            if (got.st.hits + got.st.misses != got.routed)
                fprintf(stderr, "  %s on CUDA: hits %lld + misses %lld, routed %lld\n", preset, (long long)got.st.hits,
                        (long long)got.st.misses, (long long)got.routed);
            CHECK(got.st.hits + got.st.misses == got.routed);
            CHECK(got.st.hits > 0 && got.st.misses > 0);
            check_same(&ref, &got, "map mode on CUDA");
            free(got.logits);
        }
        free(ref.logits);
    }
    cleanup(dir, path);
}

static void t_cuda_map_counts(void) {
    if (bk_cuda_device_count() <= 0) {
        test_skip(0, "no CUDA device");
        return;
    }
    check_cuda_counts("tiny-qwen3moe", 2);
    check_cuda_counts("tiny-qwen35moe", 4);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void t_stats_file(void) {
    char path[] = "/tmp/brisk-test-xstats-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    int64_t counts[3 * 5];
    for (int i = 0; i < 15; i++) counts[i] = (int64_t)i * i * 1000003 + (i == 7 ? (int64_t)1 << 40 : 0);
    CHECK_OK(brisk_expert_stats_write(path, "m.gguf", 3, 5, 2, 12345, counts));
    int nl = 0, ne = 0;
    int64_t *got = NULL;
    CHECK_OK(brisk_expert_stats_read(path, &nl, &ne, &got));
    CHECK(nl == 3 && ne == 5 && got && !memcmp(got, counts, sizeof counts));
    free(got);
    /* truncated: every prefix of the file is refused with a message */
    size_t len = 0;
    char *txt = test_read_file(path, &len);
    CHECK(txt && len > 10);
    for (size_t cut = 0; txt && cut + 1 < len; cut += 7) {
        char *pre = strndup(txt, cut);
        write_text(path, pre);
        free(pre);
        got = NULL;
        brisk_status s = brisk_expert_stats_read(path, &nl, &ne, &got);
        CHECK(s == BRISK_ERR_FORMAT && got == NULL);
        CHECK(strstr(brisk_last_error(), "expert statistics") != NULL);
    }
    free(txt);
    static const char *bad[] = {
        "{\"format\":\"brisk-expert-stats-1\",\"n_layer\":2,\"n_expert\":2,\"tokens\":1,\"counts\":[[1,2],[3]]}",
        "{\"format\":\"brisk-expert-stats-1\",\"n_layer\":2,\"n_expert\":2,\"tokens\":1,\"counts\":[[1,2]]}",
        "{\"format\":\"brisk-expert-stats-1\",\"n_layer\":1,\"n_expert\":2,\"tokens\":1,\"counts\":[[1,-2]]}",
        "{\"format\":\"brisk-expert-stats-1\",\"n_layer\":1,\"n_expert\":2,\"tokens\":1,\"counts\":[[1,\"x\"]]}",
        "{\"format\":\"brisk-expert-stats-1\",\"n_layer\":1,\"n_expert\":2,\"tokens\":1,\"counts\":[[1,2.5]]}",
        "{\"format\":\"other\",\"n_layer\":1,\"n_expert\":1,\"tokens\":1,\"counts\":[[1]]}",
        "{\"format\":\"brisk-expert-stats-1\",\"n_layer\":0,\"n_expert\":1,\"tokens\":1,\"counts\":[]}",
        "[1, 2, 3]",
        "\x01\x02garbage",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(path, bad[i]);
        got = NULL;
        brisk_status s = brisk_expert_stats_read(path, &nl, &ne, &got);
        if (s != BRISK_ERR_FORMAT) fprintf(stderr, "  accepted: %s\n", bad[i]);
        CHECK(s == BRISK_ERR_FORMAT && got == NULL);
    }
    unlink(path);
    CHECK(brisk_expert_stats_read(path, &nl, &ne, &got) == BRISK_ERR_IO);
    CHECK(strstr(brisk_last_error(), path) != NULL);
}

int main(int argc, char **argv) {
    /* The CPU's repacked copies off (cpu_repack.h): an expert of the stand-in's cache is read through
     * expert_ptrs, where the CPU has no copy and runs the plain kernels, while the misses and the
     * all-CPU reference would run the copies, in another float order, and a tiny random model's
     * near-tied routings then flip (as a real GPU's kernels differ from the CPU's). What this file
     * tests is the cache: which experts run where, and that the two partial sums make the whole;
     * the copies' numerics are test_conformance's (against llama.cpp) and test_cpu_dot's. */
    setenv("BRISK_CPU_REPACK", "0", 1);
    static const test_case cases[] = {
        {"stats_file", t_stats_file},
        {"qwen3moe", t_qwen3moe},
        {"qwen3moe_k4_q8", t_qwen3moe_k4_q8},
        {"qwen35moe", t_qwen35moe},
        {"qwen3moe_q4_k_m", t_qwen3moe_q4_k_m},
        {"cuda_map_counts", t_cuda_map_counts},
    };
    return test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
