/* test_split.c — partial offload (-ngl below the layer count) without a GPU:
 * the model's layers split across two CPU backends (brisk_model_params.split_cpu)
 * run the staging, the residual stream's hand-over, the per-stage KV pages,
 * recurrent state and checkpoints exactly as a CPU + GPU split does. The same
 * CPU kernels run either way, so every logit must equal the unsplit run's bit
 * for bit: through a prefill of two interleaved sequences, decode steps,
 * a checkpoint, a shared prefix, a cut back, and a clear.
 *
 * Experts in host memory (n_cpu_moe) the same way: the "GPU" stage's layers
 * among the first n_cpu_moe run their experts on the context's extra CPU
 * backend through the host buffers and transfers a GPU stage uses. */
#include <unistd.h>

#include "brisk.h"
#include "model/synth.h"
#include "test.h"

/* A fixed, model-independent token stream, so both runs see the same inputs. */
static brisk_token tok_at(int i, int n_vocab) { return (brisk_token)((i * 7 + 3) % (n_vocab - 4) + 2); }

typedef struct logbuf {
    float *v;
    size_t n, cap;
} logbuf;

static void keep_logits(brisk_context *c, int n_entries, int n_vocab, logbuf *out) {
    for (int i = 0; i < n_entries; i++) {
        const float *l = brisk_get_logits(c, i);
        CHECK(l != NULL);
        if (!l) return;
        if (out->n + (size_t)n_vocab > out->cap) {
            out->cap = (out->n + (size_t)n_vocab) * 2;
            out->v = realloc(out->v, out->cap * sizeof(float));
        }
        memcpy(out->v + out->n, l, (size_t)n_vocab * sizeof(float));
        out->n += (size_t)n_vocab;
    }
}

/* Decodes n entries (seq[i], continuing each sequence's cache), every entry asking for logits. */
static void step(brisk_context *c, const int *seq, int n, int *k, int n_vocab, logbuf *out) {
    brisk_batch_entry e[16] = {{0}};
    for (int i = 0; i < n; i++) {
        int32_t pos = brisk_seq_len(c, seq[i]);
        for (int j = 0; j < i; j++) pos += seq[j] == seq[i]; /* earlier entries of this batch */
        e[i] = (brisk_batch_entry){.token = tok_at((*k)++, n_vocab), .pos = pos, .seq = seq[i], .logits = true};
    }
    CHECK_OK(brisk_decode(c, e, n));
    keep_logits(c, n, n_vocab, out);
}

/* The scenario, on a model loaded with n_gpu_layers (split_cpu: split on two CPU backends)
 * and n_cpu_moe. */
static bool run(const char *path, int n_gpu_layers, int n_cpu_moe, bool split, logbuf *out, int *n_layer) {
    brisk_model_params mp = brisk_model_default_params();
    mp.n_gpu_layers = n_gpu_layers;
    mp.split_cpu = split;
    mp.n_cpu_moe = n_cpu_moe;
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(path, &mp, &m));
    if (!m) return false;
    brisk_model_info info;
    brisk_model_get_info(m, &info);
    *n_layer = info.n_layer;
    int want = split && n_gpu_layers > 0 && n_gpu_layers < info.n_layer ? n_gpu_layers : 0;
    CHECK(info.n_gpu_layers == want);
    /* the layers in [first "GPU" layer, n_cpu_moe) keep their experts on the host */
    int first_gpu = n_gpu_layers < 0 || n_gpu_layers > info.n_layer ? 0 : info.n_layer - n_gpu_layers;
    int want_moe = split && n_gpu_layers != 0 && n_cpu_moe > 0 ? (n_cpu_moe < info.n_layer ? n_cpu_moe : info.n_layer) : 0;
    CHECK(info.n_cpu_moe == want_moe);
    CHECK((info.cpu_moe_bytes > 0) == (want_moe > first_gpu));
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = 128;
    cp.n_seq_max = 3;
    cp.n_batch = 16;
    cp.n_threads = 2;
    cp.n_seq_checkpoints = 2;
    brisk_context *c = NULL;
    CHECK_OK(brisk_context_new(m, &cp, &c));
    if (!c) {
        brisk_model_free(m);
        return false;
    }
    int nv = brisk_n_vocab(m), k = 0;
    /* prefill: seq 0 (8 tokens) and seq 1 (5) interleaved in one batch */
    int pre[13] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 0, 0};
    step(c, pre, 13, &k, nv, out);
    CHECK(brisk_seq_len(c, 0) == 8 && brisk_seq_len(c, 1) == 5);
    CHECK_OK(brisk_seq_checkpoint(c, 0));
    int both[2] = {0, 1};
    for (int t = 0; t < 4; t++) step(c, both, 2, &k, nv, out);
    /* seq 2 takes seq 0's first 8 positions (pages shared, or the checkpoint's state), seq 0 is cut back to 8 */
    CHECK_OK(brisk_seq_share_prefix(c, 0, 2, 8));
    CHECK_OK(brisk_seq_remove(c, 0, 8, -1));
    CHECK(brisk_seq_len(c, 0) == 8 && brisk_seq_len(c, 2) == 8);
    int three[3] = {2, 0, 1};
    for (int t = 0; t < 3; t++) step(c, three, 3, &k, nv, out);
    /* seq 1 starts over, two entries of it in one batch */
    CHECK_OK(brisk_seq_clear(c, 1));
    int again[3] = {1, 2, 1};
    step(c, again, 3, &k, nv, out);
    brisk_context_free(c);
    brisk_model_free(m);
    return true;
}

/* Runs the scenario unsplit, then with n_gpu_layers ngl[i] and n_cpu_moe cpu_moe[i] (cpu_moe NULL: 0),
 * and checks every run's logits equal the unsplit run's bit for bit. */
static void check_model_moe(const char *path, const int *ngl, const int *cpu_moe, int n_ngl) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        test_need_file(path);
        return;
    }
    fclose(f);
    logbuf ref = {0};
    int n_layer = 0;
    if (!run(path, 0, 0, false, &ref, &n_layer)) return;
    CHECK(ref.n > 0);
    for (size_t i = 0; i < ref.n; i++)
        if (!isfinite(ref.v[i])) {
            CHECK(isfinite(ref.v[i]));
            break;
        }
    for (int i = 0; i < n_ngl; i++) {
        logbuf got = {0};
        int nl = 0;
        int ncm = cpu_moe ? cpu_moe[i] : 0;
        if (run(path, ngl[i], ncm, true, &got, &nl)) {
            bool same = got.n == ref.n && !memcmp(got.v, ref.v, ref.n * sizeof(float));
            if (!same)
                fprintf(stderr, "  %s: -ngl %d --n-cpu-moe %d of %d layers: logits differ from the unsplit run\n",
                        path, ngl[i], ncm, nl);
            CHECK(same);
        }
        free(got.v);
    }
    free(ref.v);
}

static void check_model(const char *path, const int *ngl, int n_ngl) { check_model_moe(path, ngl, NULL, n_ngl); }

static void t_llama_stories(void) {
    char p[1024];
    snprintf(p, sizeof p, "%s/data/stories260K/stories260K.gguf", test_shared_dir());
    int ngl[] = {1, 2, 4, 5, -1}; /* 5 layers: splits after 4, 3, 1; then all "on the GPU" (one stage) */
    check_model(p, ngl, 5);
}

static void t_qwen3(void) {
    int ngl[] = {1, 3, 5}; /* 6 layers */
    check_model("models/brisk-kjv-6m.gguf", ngl, 3);
}

static void t_qwen3moe(void) {
    int ngl[] = {1, 2, 3}; /* 4 layers */
    check_model("models/brisk-kjv-moe.gguf", ngl, 3);
}

/* --n-cpu-moe on the 4-layer qwen3moe: all layers "on the GPU" (one stage) with the experts of
 * layer 0 or of every layer on the host; split after layer 2 with the experts of layer 2 (the
 * second stage's first) on the host; split after layer 1 with all of the second stage's. */
static void t_qwen3moe_cpu_moe(void) {
    int ngl[] = {-1, -1, 2, 3, 2}, cpu_moe[] = {1, 4, 3, 99, 1};
    check_model_moe("models/brisk-kjv-moe.gguf", ngl, cpu_moe, 5);
}

/* The same on a synthetic qwen35moe (Gated DeltaNet + attention, routed and shared experts). */
static void t_qwen35moe_cpu_moe(void) {
    char dir[] = "/tmp/brisk-test-split-XXXXXX", path[64];
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    snprintf(path, sizeof path, "%s/tiny-qwen35moe.gguf", dir);
    synth_config c;
    CHECK_OK(synth_preset("tiny-qwen35moe", &c));
    c.expert_skew = 1;
    c.n_threads = 2;
    CHECK_OK(synth_write(&c, NULL, path, false));
    int ngl[] = {-1, -1, 2, 3}, cpu_moe[] = {1, 4, 3, 4};
    check_model_moe(path, ngl, cpu_moe, 4);
    unlink(path);
    rmdir(dir);
}

/* brisk_model_fit_n_cpu_moe (--gpu-mem): the smallest budget for each n_cpu_moe N falls by one
 * layer's experts per layer moved back to the GPU, and a model loaded with the fitted N has it. */
static uint64_t min_budget(const char *path, const brisk_model_params *mp, const brisk_context_params *cp, int n) {
    uint64_t lo = 0, hi = (uint64_t)1 << 40; /* fit(hi) <= n; find the least such budget */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        int got = -1;
        bool ok = brisk_model_fit_n_cpu_moe(path, mp, cp, mid, &got) == BRISK_OK;
        if (ok && got <= n) hi = mid;
        else lo = mid;
    }
    return hi;
}

static void t_fit_cpu_moe(void) {
    const char *path = "models/brisk-kjv-moe.gguf";
    FILE *f = fopen(path, "rb");
    if (!f) {
        test_need_file(path);
        return;
    }
    fclose(f);
    brisk_model_params mp = brisk_model_default_params();
    mp.split_cpu = true; /* without a GPU the fit is 0: the second CPU backend stands in */
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = 256;
    int n = -1;
    CHECK_OK(brisk_model_fit_n_cpu_moe(path, &mp, &cp, (uint64_t)1 << 40, &n));
    CHECK(n == 0);
    CHECK(brisk_model_fit_n_cpu_moe(path, &mp, &cp, 1024, &n) == BRISK_ERR_NOMEM);
    CHECK(strstr(brisk_last_error(), "every expert in host memory") != NULL);
    mp.n_cpu_moe = 1;
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(path, &mp, &m));
    if (!m) return;
    brisk_model_info info;
    brisk_model_get_info(m, &info);
    brisk_model_free(m);
    uint64_t layer = info.cpu_moe_bytes; /* one layer's experts */
    CHECK(layer > 0);
    uint64_t b[5];
    mp.n_cpu_moe = 0;
    for (int i = 0; i < 5; i++) b[i] = min_budget(path, &mp, &cp, i);
    for (int i = 1; i < 4; i++) CHECK(b[i - 1] - b[i] == layer);
    CHECK(b[3] - b[4] >= layer); /* the first layer back also brings the MoE op's scratch */
    CHECK_OK(brisk_model_fit_n_cpu_moe(path, &mp, &cp, b[2], &n));
    CHECK(n == 2);
    CHECK_OK(brisk_model_fit_n_cpu_moe(path, &mp, &cp, b[2] - 1, &n));
    CHECK(n == 3);
    mp.n_cpu_moe = n;
    CHECK_OK(brisk_model_load(path, &mp, &m));
    if (!m) return;
    brisk_model_get_info(m, &info);
    CHECK(info.n_cpu_moe == 3 && info.cpu_moe_bytes == 3 * layer);
    brisk_model_free(m);
    /* -ngl 2: layers 0-1 run on the CPU anyway, so the fit is 0, 3 or 4 */
    mp.n_gpu_layers = 2;
    mp.n_cpu_moe = 0;
    CHECK_OK(brisk_model_fit_n_cpu_moe(path, &mp, &cp, min_budget(path, &mp, &cp, 3), &n));
    CHECK(n == 3);
    CHECK_OK(brisk_model_fit_n_cpu_moe(path, &mp, &cp, (uint64_t)1 << 40, &n));
    CHECK(n == 0);
}

static void t_qwen35_hybrid(void) {
    /* 4 layers, 0-2 Gated DeltaNet, 3 attention: stage 2 holds one, two or three recurrent layers */
    int ngl[] = {1, 2, 3};
    check_model("models/brisk-kjv-hybrid.gguf", ngl, 3);
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"llama_stories", t_llama_stories},
        {"qwen3", t_qwen3},
        {"qwen3moe", t_qwen3moe},
        {"qwen35_hybrid", t_qwen35_hybrid},
        {"qwen3moe_cpu_moe", t_qwen3moe_cpu_moe},
        {"qwen35moe_cpu_moe", t_qwen35moe_cpu_moe},
        {"fit_cpu_moe", t_fit_cpu_moe},
    };
    return test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
