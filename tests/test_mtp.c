/* test_mtp.c — multi-token prediction (engine/mtp.h, the drafter's mtp kind)
 * on synthetic qwen35 and qwen35moe files with one MTP block (brisk synth's
 * n_mtp, the built-in 354-token vocabulary, f32):
 *
 *   load:     the block is bound under llama.cpp's names (n_mtp, the trunk's
 *             n_layer unchanged, the bytes kept out of weight_bytes); a file
 *             without the key or its tensors has none; an MTP context of such
 *             a model, or a target on an architecture without an MTP head, is
 *             refused with a message;
 *   greedy:   spec_generate with the MTP drafter gives plain greedy decoding's
 *             tokens, token for token, with the acceptance rate printed. The
 *             files are patched so that drafts are often right and sometimes
 *             wrong: the embedding scaled to unit size and the trunk's residual
 *             branches halved (the target is nearly a bigram model of its
 *             embedding), and the MTP block made that bigram exactly (eh_proj =
 *             [I | 0], its branches zero), so rounds accept all, some and none
 *             of their proposals (measured: 54..73%), and the target's
 *             recurrent state and both caches are rolled back;
 *   rollback: the drafter driven by hand through rounds that keep 1..4 of 4
 *             verified tokens (the random, unpatched head) proposes what an MTP
 *             head fed the same settled history from scratch proposes: its
 *             cache holds exactly the settled (token, h) pairs;
 *   gpu:      with a CUDA device (make test-cuda; skipped without one), the
 *             target and its MTP head on the GPU (the default load) against
 *             the CPU's (-ngl 0) fed the same rows: the target's h rows, the
 *             head's logits and output h within 2e-3 of each row's largest,
 *             the same argmax, and both contexts' memory on the device. The
 *             greedy cases then also run on the GPU there.
 * The MTP head's logits against llama.cpp's are in test_conformance.c. */
#include <unistd.h>

#include "backend/cuda/cuda_backend.h"
#include "brisk.h"
#include "engine/mtp.h"
#include "engine/speculative.h"
#include "format/gguf.h"
#include "model/model.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "gguf_patch.h"
#include "test.h"

static char dir[512];

static void path_for(const char *name, char *out, size_t cap) { snprintf(out, cap, "%s/%s.gguf", dir, name); }

static float damp(int64_t i, int64_t ne0, float x) { return x / 2; }
static float boost(int64_t i, int64_t ne0, float x) { return x * 50; } /* the embedding: std 0.02 -> 1 */
static float zero(int64_t i, int64_t ne0, float x) { return 0; }
static float eye_left(int64_t i, int64_t ne0, float x) { return i % ne0 == i / ne0 ? 1.0f : 0.0f; } /* [I | 0] */

/* A tiny synthetic model with one MTP block (built-in vocabulary, f32); bigram: patched as the header says. */
static void make_model(const char *preset, const char *name, bool bigram, char *path, size_t cap) {
    path_for(name, path, cap);
    if (access(path, R_OK) == 0) return;
    synth_config c;
    CHECK_OK(synth_preset(preset, &c));
    c.n_mtp = 1;
    c.n_threads = 2;
    CHECK_OK(synth_write(&c, NULL, path, false));
    if (!bigram) return;
    static const char *branch[] = {"attn_output", "ssm_out", "ffn_down", "ffn_down_exps", "ffn_down_shexp"};
    char t[96];
    gguf_file *g = NULL;
    CHECK_OK(gguf_open(path, &g));
    for (int l = 0; g && l <= c.n_layer; l++)
        for (size_t k = 0; k < sizeof branch / sizeof *branch; k++) {
            snprintf(t, sizeof t, "blk.%d.%s.weight", l, branch[k]);
            if (gguf_find_tensor(g, t)) patch(path, t, l < c.n_layer ? damp : zero);
        }
    gguf_close(g);
    patch(path, "token_embd.weight", boost);
    snprintf(t, sizeof t, "blk.%d.nextn.eh_proj.weight", c.n_layer);
    patch(path, t, eye_left);
}

static brisk_context_params ctx_params(void) {
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    cp.kv_type = BRISK_KV_F32;
    cp.n_seq_checkpoints = 2;
    cp.keep_recurrent_inputs = true; /* a rejected draft's cut replays the kept inputs */
    return cp;
}

static const brisk_token prompt[] = {1, 100, 200, 300, 40, 50, 60, 70};
#define N_PROMPT ((int)(sizeof prompt / sizeof *prompt))
#define N_GEN 48

static void test_load(void) {
    char path[600], plain[600];
    make_model("tiny-qwen35", "q35-mtp", false, path, sizeof path);
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(path, NULL, &m));
    if (!m) return;
    CHECK(m->hp.n_layer == 4 && m->hp.n_nextn == 1 && m->n_mtp == 1 && m->nextn);
    CHECK(m->nextn && m->nextn[0].eh_proj.n_in == 2 * m->hp.n_embd && m->nextn[0].eh_proj.n_out == m->hp.n_embd);
    CHECK(m->nextn && m->nextn[0].shared_head_norm.host && !m->nextn[0].embed_tokens.host &&
          !m->nextn[0].shared_head_head.host); /* the trunk's embedding and LM head serve */
    CHECK(m->layers[4].wq.n_out == 2 * m->hp.n_head * m->hp.head_dim && m->layers[4].w_down.host);
    CHECK(!model_layer_recurrent(&m->hp, 4) && m->hp.n_attn_layers == 2);
    CHECK(m->mtp_bytes > 0 && m->mtp_params > 0);
    brisk_model_free(m);

    /* the same shape without the block: nothing bound, an MTP context refused */
    path_for("q35-plain", plain, sizeof plain);
    synth_config c;
    CHECK_OK(synth_preset("tiny-qwen35", &c));
    c.n_threads = 2;
    CHECK_OK(synth_write(&c, NULL, plain, false));
    CHECK_OK(brisk_model_load(plain, NULL, &m));
    if (!m) return;
    CHECK(m->n_mtp == 0 && m->hp.n_nextn == 0);
    brisk_context_params cp = ctx_params();
    brisk_context *mc = NULL;
    CHECK(mtp_context_new(m, &cp, &mc) == BRISK_ERR_UNSUPPORTED && !mc);
    CHECK(strstr(brisk_last_error(), "no multi-token-prediction"));
    brisk_model_free(m);
}

/* An architecture without an MTP head (qwen3) cannot feed one. */
static void test_refused(void) {
    char path[600];
    path_for("qwen3", path, sizeof path);
    synth_config c;
    CHECK_OK(synth_preset("tiny-qwen3", &c));
    c.n_layer = 1;
    c.n_threads = 2;
    CHECK_OK(synth_write(&c, NULL, path, false));
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(path, NULL, &m));
    if (!m) return;
    brisk_context_params cp = ctx_params();
    brisk_context *t = NULL;
    CHECK_OK(brisk_context_new(m, &cp, &t));
    drafter *d = NULL;
    CHECK(t && drafter_new_mtp(t, m, &cp, 0, &d) == BRISK_ERR_UNSUPPORTED && !d);
    CHECK(mtp_hidden(t, 0) == NULL);
    brisk_context_free(t);
    brisk_model_free(m);
    synth_config bad;
    CHECK_OK(synth_preset("tiny-qwen3", &bad));
    bad.n_mtp = 1;
    CHECK(synth_write(&bad, NULL, path, false) == BRISK_ERR_INVALID_ARG); /* synth: hybrids only */
}

typedef struct {
    brisk_token out[N_GEN];
    int n;
} collect;

static bool emit(void *user, brisk_token t) {
    collect *c = user;
    if (c->n >= N_GEN) return false;
    c->out[c->n++] = t;
    return true;
}

static brisk_token argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Plain greedy decoding, then speculative with the MTP drafter (k = 3 and 5): the same tokens. */
static void greedy(const char *preset, const char *name) {
    char path[600];
    make_model(preset, name, true, path, sizeof path);
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(path, NULL, &m));
    if (!m) return;
    int nv = brisk_n_vocab(m);
    brisk_context_params cp = ctx_params();
    brisk_context *t = NULL;
    CHECK_OK(brisk_context_new(m, &cp, &t));
    if (!t) goto done;
    collect plain = {.n = 0};
    brisk_batch_entry b[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) b[i] = (brisk_batch_entry){prompt[i], i, 0, i == N_PROMPT - 1};
    CHECK_OK(brisk_decode(t, b, N_PROMPT));
    const float *lg = brisk_get_logits(t, N_PROMPT - 1);
    for (int i = 0; i < N_GEN && lg; i++) {
        plain.out[plain.n++] = argmax(lg, nv);
        brisk_batch_entry e = {plain.out[i], N_PROMPT + i, 0, true};
        CHECK_OK(brisk_decode(t, &e, 1));
        lg = brisk_get_logits(t, 0);
    }
    CHECK_OK(brisk_seq_clear(t, 0));
    for (int k = 3; k <= 5; k += 2) {
        drafter *d = NULL;
        brisk_sampler *smp = NULL;
        brisk_sampler_params sp = brisk_sampler_default_params();
        sp.temp = 0;
        CHECK_OK(drafter_new_mtp(t, m, &cp, 0, &d));
        CHECK_OK(brisk_sampler_new(&sp, nv, &smp));
        collect spec = {.n = 0};
        spec_stats st;
        if (d && smp) CHECK_OK(spec_generate(t, d, smp, prompt, N_PROMPT, k, 0, cp.n_ctx, emit, &spec, &st));
        CHECK(spec.n == N_GEN && memcmp(spec.out, plain.out, sizeof plain.out) == 0);
        for (int i = 0; i < N_GEN; i++)
            if (spec.out[i] != plain.out[i]) {
                fprintf(stderr, "  %s k=%d: token %d: speculative %d, plain %d\n", name, k, i, spec.out[i], plain.out[i]);
                break;
            }
        /* drafts both accepted and rejected: the rollback paths ran */
        CHECK(st.accepted > 0 && st.accepted < st.drafted);
        printf("  %s mtp k=%d: %lld rounds, %lld proposed, %lld accepted (%.1f%%), %.2f tokens per target step\n", name,
               k, (long long)st.rounds, (long long)st.drafted, (long long)st.accepted,
               st.drafted ? 100.0 * st.accepted / st.drafted : 0.0, st.rounds ? (st.emitted - 1.0) / st.rounds : 0.0);
        brisk_sampler_free(smp);
        drafter_free(d);
        CHECK_OK(brisk_seq_clear(t, 0));
    }
done:
    brisk_context_free(t);
    brisk_model_free(m);
}

static void test_greedy_qwen35(void) { greedy("tiny-qwen35", "q35-bigram"); }
static void test_greedy_qwen35moe(void) { greedy("tiny-qwen35moe", "q35moe-bigram"); }

/* The reference head: a fresh target and MTP context fed hist[0, n-1) one token at a time, then the
 * chained greedy proposals for hist[n-1] (k of them). */
static void reference_drafts(brisk_model *m, const brisk_token *hist, int n, int k, brisk_token *out) {
    brisk_context_params cp = ctx_params();
    brisk_context *t = NULL, *mc = NULL;
    CHECK_OK(brisk_context_new(m, &cp, &t));
    CHECK_OK(mtp_context_new(m, &cp, &mc));
    if (t) CHECK_OK(mtp_keep_hidden(t));
    int d = m->hp.n_embd, nv = brisk_n_vocab(m);
    float *h = calloc((size_t)d, sizeof *h);
    for (int p = 0; t && mc && p < n - 1; p++) {
        brisk_batch_entry e = {hist[p], p, 0, false};
        CHECK_OK(mtp_decode(mc, &e, h, 1)); /* (x_p, h_{p-1}) */
        CHECK_OK(brisk_decode(t, &e, 1));
        memcpy(h, mtp_hidden(t, 0), (size_t)d * sizeof *h);
    }
    for (int i = 0; t && mc && i < k; i++) {
        brisk_batch_entry e = {i ? out[i - 1] : hist[n - 1], n - 1 + i, 0, true};
        CHECK_OK(mtp_decode(mc, &e, h, 1));
        out[i] = argmax(brisk_get_logits(mc, 0), nv);
        memcpy(h, mtp_hidden(mc, 0), (size_t)d * sizeof *h);
    }
    free(h);
    brisk_context_free(mc);
    brisk_context_free(t);
}

/* Rounds of 3 proposals verified in one batch of 4, keeping 1, 2, 3, 4, 1, ... of them (the kept
 * tokens: the proposals, then a correction unlike the next one), the target cut back as
 * speculative.c does (to its snapshot, then re-decoded). After each round the drafter's proposals
 * equal the reference head's on the same history. */
static void test_rollback(void) {
    char path[600];
    make_model("tiny-qwen35", "q35-mtp", false, path, sizeof path);
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(path, NULL, &m));
    if (!m) return;
    int nv = brisk_n_vocab(m);
    brisk_context_params cp = ctx_params();
    brisk_context *t = NULL;
    drafter *d = NULL;
    CHECK_OK(brisk_context_new(m, &cp, &t));
    if (t) CHECK_OK(drafter_new_mtp(t, m, &cp, 0, &d));
    brisk_token hist[128];
    brisk_batch_entry b[16];
    memcpy(hist, prompt, sizeof prompt);
    int n = N_PROMPT;
    if (!d) goto done;
    CHECK_OK(drafter_begin(d, hist, n));
    for (int i = 0; i < n; i++) b[i] = (brisk_batch_entry){hist[i], i, 0, i == n - 1};
    CHECK_OK(brisk_decode(t, b, n));
    CHECK_OK(drafter_process(d, b, n));
    hist[n] = argmax(brisk_get_logits(t, n - 1), nv);
    n++;
    for (int round = 0; round < 8; round++) {
        brisk_token dr[3], ref[3];
        int k = 0;
        CHECK_OK(drafter_draft(d, hist, n, 3, dr, &k));
        CHECK(k == 3);
        reference_drafts(m, hist, n, 3, ref);
        CHECK(memcmp(dr, ref, sizeof dr) == 0);
        if (k != 3) break;
        int pos = n - 1, keep = round % 4 + 1; /* tokens of the batch kept: hist[n-1] and keep-1 proposals */
        CHECK_OK(brisk_seq_checkpoint(t, 0));
        b[0] = (brisk_batch_entry){hist[n - 1], pos, 0, true};
        for (int i = 0; i < 3; i++) b[i + 1] = (brisk_batch_entry){dr[i], pos + 1 + i, 0, true};
        CHECK_OK(brisk_decode(t, b, 4));
        CHECK_OK(drafter_process(d, b, 4));
        for (int i = 0; i < keep - 1; i++) hist[n++] = dr[i];
        hist[n] = keep < 4 ? (dr[keep - 1] + 1) % nv : argmax(brisk_get_logits(t, 3), nv); /* the round's sample */
        n++;
        if (keep < 4) { /* as speculative.c's cut_to: back to the snapshot, then the kept tokens again */
            CHECK_OK(brisk_seq_remove(t, 0, pos, -1));
            CHECK(drafter_feed(t, hist, pos, pos + keep, b) == BRISK_OK);
        }
        CHECK(brisk_seq_len(t, 0) == n - 1);
        CHECK_OK(drafter_sync(d, hist, n));
    }
done:
    drafter_free(d);
    brisk_context_free(t);
    brisk_model_free(m);
}

/* The largest |a - b| over rows of n floats, each relative to that row's largest |b|. */
static double rows_rel_diff(const float *a, const float *b, int rows, int n) {
    double worst = 0;
    for (int r = 0; r < rows; r++) {
        double big = 1e-30, d = 0;
        for (int i = 0; i < n; i++) {
            double v = fabs(b[(size_t)r * n + i]), e = fabs((double)a[(size_t)r * n + i] - b[(size_t)r * n + i]);
            if (v > big) big = v;
            if (!(e <= d)) d = e; /* NaN too */
        }
        if (!(d / big <= worst)) worst = d / big;
    }
    return worst;
}

#define GPU_TOL 2e-3

/* The target and its MTP head on the GPU against the CPU, each fed the CPU target's h rows. */
static void gpu_vs_cpu(const char *preset, const char *name) {
    char path[600];
    make_model(preset, name, true, path, sizeof path);
    brisk_model_params on_cpu = brisk_model_default_params();
    on_cpu.n_gpu_layers = 0;
    brisk_model *m[2] = {NULL, NULL}; /* CPU, GPU */
    brisk_context *t[2] = {NULL, NULL}, *x[2] = {NULL, NULL};
    CHECK_OK(brisk_model_load(path, &on_cpu, &m[0]));
    CHECK_OK(brisk_model_load(path, NULL, &m[1]));
    if (!m[0] || !m[1]) goto done;
    brisk_model_info info;
    brisk_model_get_info(m[1], &info);
    CHECK(info.gpu_device >= 0 && info.n_gpu_layers == m[1]->hp.n_layer);
    int d = m[0]->hp.n_embd, nv = brisk_n_vocab(m[0]);
    float *h[2] = {calloc((size_t)N_PROMPT * d, sizeof(float)), calloc((size_t)N_PROMPT * d, sizeof(float))};
    float *lg[2] = {calloc((size_t)N_PROMPT * nv, sizeof(float)), calloc((size_t)N_PROMPT * nv, sizeof(float))};
    float *oh[2] = {calloc((size_t)N_PROMPT * d, sizeof(float)), calloc((size_t)N_PROMPT * d, sizeof(float))};
    float *hin = calloc((size_t)N_PROMPT * d, sizeof(float)); /* row 0: no h before position 0 */
    brisk_context_params cp = ctx_params();
    brisk_batch_entry b[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) b[i] = (brisk_batch_entry){prompt[i], i, 0, true};
    for (int k = 0; k < 2 && h[1] && lg[1] && oh[1] && hin; k++) {
        CHECK_OK(brisk_context_new(m[k], &cp, &t[k]));
        if (!t[k]) goto out;
        CHECK_OK(mtp_keep_hidden(t[k]));
        CHECK_OK(brisk_decode(t[k], b, N_PROMPT));
        for (int i = 0; i < N_PROMPT && mtp_hidden(t[k], i); i++)
            memcpy(h[k] + (size_t)i * d, mtp_hidden(t[k], i), (size_t)d * sizeof(float));
        if (k == 0) memcpy(hin + d, h[0], (size_t)(N_PROMPT - 1) * d * sizeof(float));
        CHECK_OK(mtp_context_new(m[k], &cp, &x[k]));
        if (!x[k]) goto out;
        brisk_memory_report mr;
        brisk_context_memory(t[k], &mr);
        CHECK(k ? mr.device >= 0 : mr.device < 0);
        brisk_context_memory(x[k], &mr);
        CHECK(k ? mr.device >= 0 : mr.device < 0);
        CHECK_OK(mtp_decode(x[k], b, hin, N_PROMPT));
        for (int i = 0; i < N_PROMPT && brisk_get_logits(x[k], i) && mtp_hidden(x[k], i); i++) {
            memcpy(lg[k] + (size_t)i * nv, brisk_get_logits(x[k], i), (size_t)nv * sizeof(float));
            memcpy(oh[k] + (size_t)i * d, mtp_hidden(x[k], i), (size_t)d * sizeof(float));
        }
    }
    double dh = rows_rel_diff(h[1], h[0], N_PROMPT, d), dl = rows_rel_diff(lg[1], lg[0], N_PROMPT, nv),
           doh = rows_rel_diff(oh[1], oh[0], N_PROMPT, d);
    printf("  %s GPU vs CPU: target h %.2e, MTP logits %.2e, MTP h %.2e (of each row's largest)\n", name, dh, dl, doh);
    CHECK(dh < GPU_TOL && dl < GPU_TOL && doh < GPU_TOL);
    for (int i = 0; i < N_PROMPT; i++) CHECK(argmax(lg[1] + (size_t)i * nv, nv) == argmax(lg[0] + (size_t)i * nv, nv));
out:
    for (int k = 0; k < 2; k++) {
        free(h[k]), free(lg[k]), free(oh[k]);
        brisk_context_free(x[k]);
        brisk_context_free(t[k]);
    }
    free(hin);
done:
    brisk_model_free(m[0]);
    brisk_model_free(m[1]);
}

static void test_gpu(void) {
    if (bk_cuda_device_count() < 1) SKIP("no CUDA device");
    gpu_vs_cpu("tiny-qwen35", "q35-bigram");
    gpu_vs_cpu("tiny-qwen35moe", "q35moe-bigram");
}

int main(int argc, char **argv) {
    snprintf(dir, sizeof dir, "/tmp/brisk-test-mtp-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    static const test_case cases[] = {
        {"load", test_load},
        {"refused", test_refused},
        {"greedy_qwen35", test_greedy_qwen35},
        {"greedy_qwen35moe", test_greedy_qwen35moe},
        {"rollback", test_rollback},
        {"gpu", test_gpu},
    };
    int rc = test_main(cases, sizeof cases / sizeof *cases, argc, argv);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) rc = rc ? rc : 1;
    return rc;
}
