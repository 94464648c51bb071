/* test_eagle3.c — the EAGLE-3 drafter (model/eagle3.h, the drafter's eagle3 kind) on a synthetic
 * tiny-llama target (and tiny-qwen35) with the tiny-llama-eagle3 drafter (brisk synth, built-in vocabulary, f32):
 *
 *   load:     the file's keys and tensors are read as llama.cpp's eagle3 loader reads them (three
 *             target layers, the target's embedding serving); a file of another architecture, a
 *             target without the drafter's layers, and one of another width are refused with a
 *             message; the target keeps the layer inputs only when asked;
 *   greedy:   spec_generate with the drafter gives plain greedy decoding's tokens, token for token
 *             (tiny-llama, and tiny-qwen35, whose recurrent state rolls back from snapshots).
 *             The files are patched so that rounds accept some proposals and reject others: the
 *             target's LM head keeps two rows (tiny-llama's greedy token on this prompt is always 1), the
 *             drafter's keeps row 1, negated (it proposes 1 where that logit is positive, else 0, the
 *             first of the zero logits: varying with its h; measured 67..92% accepted on tiny-llama,
 *             9..33% on tiny-qwen35);
 *   rollback: the drafter driven by hand through rounds that keep 1..4 of 4 verified tokens (the
 *             unpatched files) proposes what a drafter fed the same settled history one position at
 *             a time proposes: its cache holds exactly the settled (token P+1, g_P) pairs;
 *   slots:    two drafters of one target context (a server's slots) fed their own rows of shared
 *             batches (drafter_process_at) propose what the same reference proposes for each;
 *   d2t:      a drafter with a reduced vocabulary (tiny-llama-eagle3-d2t: 200 of the 354 tokens) has
 *             logits at its d2t's target ids only, the others -inf; speculative greedy equals plain
 *             greedy; a d2t with a repeated or an out-of-range id is refused with a message.
 * The drafter's logits against llama.cpp's are in test_conformance.c (eagle3). */
#include <unistd.h>

#include "brisk.h"
#include "engine/drafter.h"
#include "engine/mtp.h"
#include "engine/speculative.h"
#include "format/gguf.h"
#include "model/eagle3.h"
#include "model/model.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "gguf_patch.h"
#include "test.h"

static char dir[512];

static void path_for(const char *name, char *out, size_t cap) { snprintf(out, cap, "%s/%s.gguf", dir, name); }

static float two_rows(int64_t i, int64_t ne0, float x) { return i / ne0 < 2 ? x : 0.0f; }
static float row_one(int64_t i, int64_t ne0, float x) { return i / ne0 == 1 ? -x : 0.0f; }

/* The pair (a target of the preset, the drafter); patched: as the header says. */
static void make_pair(const char *preset, bool patched, char *tpath, char *dpath, size_t cap) {
    char tn[96], dn[96];
    snprintf(tn, sizeof tn, "%s%s", preset, patched ? "-patched" : "");
    snprintf(dn, sizeof dn, "d-%s%s", preset, patched ? "-patched" : "");
    path_for(tn, tpath, cap);
    path_for(dn, dpath, cap);
    if (access(tpath, R_OK) == 0 && access(dpath, R_OK) == 0) return;
    synth_config c;
    CHECK_OK(synth_preset(preset, &c));
    c.n_threads = 2;
    CHECK_OK(synth_write(&c, NULL, tpath, false));
    CHECK_OK(synth_preset("tiny-llama-eagle3", &c));
    c.n_threads = 2;
    CHECK_OK(synth_write(&c, NULL, dpath, false));
    if (!patched) return;
    patch(tpath, "output.weight", two_rows);
    patch(dpath, "output.weight", row_one);
}

static brisk_context_params ctx_params(void) {
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    cp.kv_type = BRISK_KV_F32;
    cp.n_seq_checkpoints = 2; /* a recurrent target rolls a rejected draft back from a snapshot */
    cp.keep_recurrent_inputs = true;
    return cp;
}

static const brisk_token prompt[] = {1, 100, 200, 300, 40, 50, 60, 70};
#define N_PROMPT ((int)(sizeof prompt / sizeof *prompt))
#define N_GEN 48

static void test_load(void) {
    char tpath[600], dpath[600], other[600];
    make_pair("tiny-llama", false, tpath, dpath, sizeof tpath);
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(tpath, NULL, &m));
    if (!m) return;
    eagle3 *e = NULL;
    CHECK_OK(eagle3_open(dpath, m, 64, 2, &e));
    if (e) {
        const int32_t *ids = eagle3_target_layers(e);
        CHECK(eagle3_n_embd(e) == 256 && ids[0] == 1 && ids[1] == 2 && ids[2] == 3 && eagle3_len(e) == 0);
        /* a pair beyond the cache, a token out of range: errors, the cache unchanged */
        float g[256] = {0};
        int32_t tok = 5, bad = brisk_n_vocab(m);
        CHECK(eagle3_decode(e, &tok, g, 3, 1, false) == BRISK_ERR_INVALID_ARG);
        CHECK(eagle3_decode(e, &bad, g, 0, 1, false) == BRISK_ERR_INVALID_ARG);
        CHECK_OK(eagle3_decode(e, &tok, g, 0, 1, true));
        CHECK(eagle3_len(e) == 1 && eagle3_logits(e) && eagle3_hidden(e, 0) && !eagle3_hidden(e, 1));
        /* blank pairs (a server slot's reused prefix): up to n_ctx, never shrinking; then decodes go on */
        CHECK(eagle3_extend_blank(e, 0) == BRISK_ERR_INVALID_ARG && eagle3_extend_blank(e, 65) == BRISK_ERR_INVALID_ARG);
        CHECK_OK(eagle3_extend_blank(e, 3));
        CHECK(eagle3_len(e) == 3);
        CHECK_OK(eagle3_decode(e, &tok, g, 3, 1, true));
        CHECK(eagle3_len(e) == 4 && eagle3_logits(e));
        eagle3_cut(e, 1);
        /* a sibling (a server slot's): the same weights, its own cache; it outlives the drafter it shares */
        eagle3 *s2 = NULL;
        CHECK_OK(eagle3_open_sibling(e, 32, &s2));
        if (s2) {
            CHECK(eagle3_len(s2) == 0 && eagle3_logits(s2) == NULL);
            float gz[256] = {0};
            int32_t t0 = 5;
            eagle3_cut(e, 0);
            CHECK_OK(eagle3_decode(e, &t0, gz, 0, 1, true));
            CHECK_OK(eagle3_decode(s2, &t0, gz, 0, 1, true));
            const float *la = eagle3_logits(e), *lb = eagle3_logits(s2);
            CHECK(la && lb && la != lb && !memcmp(la, lb, (size_t)brisk_n_vocab(m) * sizeof(float)));
            CHECK(eagle3_len(e) == 1 && eagle3_len(s2) == 1);
            eagle3_free(e);
            e = NULL;
            CHECK_OK(eagle3_decode(s2, &t0, gz, 1, 1, true)); /* its shared map and backend still there */
            CHECK(eagle3_len(s2) == 2 && eagle3_logits(s2));
        }
        eagle3_free(s2);
    }
    eagle3_free(e);
    e = NULL;
    /* the target itself is no drafter */
    CHECK(eagle3_open(tpath, m, 64, 2, &e) == BRISK_ERR_FORMAT && !e);
    CHECK(strstr(brisk_last_error(), "eagle3"));
    /* the target keeps no layer inputs until asked; then the drafter's three */
    brisk_context_params cp = ctx_params();
    brisk_context *t = NULL;
    CHECK_OK(brisk_context_new(m, &cp, &t));
    brisk_batch_entry b = {1, 0, 0, true};
    if (t) {
        CHECK_OK(brisk_decode(t, &b, 1));
        CHECK(eagle3_features(t, 0) == NULL);
        int32_t ids[3] = {1, 2, 9}, ok[3] = {1, 2, 3}, elsewhere[3] = {0, 2, 3};
        CHECK(eagle3_keep_layers(t, ids, 3) == BRISK_ERR_INVALID_ARG);
        CHECK_OK(eagle3_keep_layers(t, ok, 3));
        CHECK_OK(eagle3_keep_layers(t, ok, 3)); /* a second drafter of the same target */
        CHECK(eagle3_keep_layers(t, elsewhere, 3) == BRISK_ERR_INVALID_ARG);
        CHECK_OK(brisk_decode(t, &(brisk_batch_entry){1, 1, 0, true}, 1));
        CHECK(eagle3_features(t, 0) && !eagle3_features(t, 1));
    }
    brisk_context_free(t);
    brisk_model_free(m);
    /* a target of two layers lacks layer 3; one of another width does not fit */
    synth_config c;
    CHECK_OK(synth_preset("tiny-llama", &c));
    c.n_layer = 2;
    c.n_threads = 2;
    path_for("t2", other, sizeof other);
    CHECK_OK(synth_write(&c, NULL, other, false));
    CHECK_OK(brisk_model_load(other, NULL, &m));
    if (m) CHECK(eagle3_open(dpath, m, 64, 2, &e) == BRISK_ERR_UNSUPPORTED && !e);
    brisk_model_free(m);
    CHECK_OK(synth_preset("tiny-llama", &c));
    c.n_embd = 128, c.n_head = 4, c.n_head_kv = 2;
    c.n_threads = 2;
    path_for("t128", other, sizeof other);
    CHECK_OK(synth_write(&c, NULL, other, false));
    CHECK_OK(brisk_model_load(other, NULL, &m));
    if (m) CHECK(eagle3_open(dpath, m, 64, 2, &e) == BRISK_ERR_FORMAT && !e && strstr(brisk_last_error(), "width"));
    brisk_model_free(m);
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

/* Plain greedy decoding of N_GEN tokens after the prompt on sequence 0 of t, which is cleared after. */
static void plain_greedy(brisk_context *t, int nv, collect *out) {
    out->n = 0;
    brisk_batch_entry b[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) b[i] = (brisk_batch_entry){prompt[i], i, 0, i == N_PROMPT - 1};
    CHECK_OK(brisk_decode(t, b, N_PROMPT));
    const float *lg = brisk_get_logits(t, N_PROMPT - 1);
    for (int i = 0; i < N_GEN && lg; i++) {
        out->out[out->n++] = argmax(lg, nv);
        brisk_batch_entry e = {out->out[i], N_PROMPT + i, 0, true};
        CHECK_OK(brisk_decode(t, &e, 1));
        lg = brisk_get_logits(t, 0);
    }
    CHECK_OK(brisk_seq_clear(t, 0));
}

/* A temperature-0 sampler (NULL on failure, recorded). */
static brisk_sampler *greedy_sampler(int nv) {
    brisk_sampler *smp = NULL;
    brisk_sampler_params sp = brisk_sampler_default_params();
    sp.temp = 0;
    CHECK_OK(brisk_sampler_new(&sp, nv, &smp));
    return smp;
}

/* Plain greedy decoding, then speculative with the EAGLE-3 drafter (k = 1, 3 and 5): the same tokens. */
static void greedy(const char *preset) {
    char tpath[600], dpath[600];
    make_pair(preset, true, tpath, dpath, sizeof tpath);
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(tpath, NULL, &m));
    if (!m) return;
    int nv = brisk_n_vocab(m);
    brisk_context_params cp = ctx_params();
    brisk_context *t = NULL;
    CHECK_OK(brisk_context_new(m, &cp, &t));
    if (!t) goto done;
    collect plain;
    plain_greedy(t, nv, &plain);
    drafter *d = NULL;
    CHECK_OK(drafter_new_eagle3(t, m, dpath, cp.n_ctx, 2, 0, NULL, &d));
    for (int k = 1; d && k <= 5; k += 2) {
        brisk_sampler *smp = greedy_sampler(nv);
        collect spec = {.n = 0};
        spec_stats st;
        if (smp) CHECK_OK(spec_generate(t, d, smp, prompt, N_PROMPT, k, 0, cp.n_ctx, emit, &spec, &st));
        CHECK(spec.n == N_GEN && memcmp(spec.out, plain.out, sizeof plain.out) == 0);
        for (int i = 0; i < N_GEN; i++)
            if (spec.out[i] != plain.out[i]) {
                fprintf(stderr, "  k=%d: token %d: speculative %d, plain %d\n", k, i, spec.out[i], plain.out[i]);
                break;
            }
        CHECK(st.accepted > 0 && st.accepted < st.drafted); /* the accept and the rollback paths both ran */
        if (!strcmp(preset, "tiny-llama")) CHECK(plain.out[0] == 1 && plain.out[N_GEN - 1] == 1); /* the premise */
        printf("  %s eagle3 k=%d: %lld rounds, %lld proposed, %lld accepted (%.1f%%), %.2f tokens per target step\n",
               preset, k, (long long)st.rounds, (long long)st.drafted, (long long)st.accepted,
               st.drafted ? 100.0 * st.accepted / st.drafted : 0.0, st.rounds ? (st.emitted - 1.0) / st.rounds : 0.0);
        brisk_sampler_free(smp);
        CHECK_OK(brisk_seq_clear(t, 0));
    }
    drafter_free(d);
done:
    brisk_context_free(t);
    brisk_model_free(m);
}

static void test_greedy_llama(void) { greedy("tiny-llama"); }
static void test_greedy_qwen35(void) { greedy("tiny-qwen35"); } /* recurrent: rolled back from snapshots */

/* The reference: a fresh target and drafter fed hist[0, n-1) one position at a time (the pair of
 * position p once hist[p+1] is known), then k chained greedy proposals for hist[n-1]. */
static void reference_drafts(brisk_model *m, const char *dpath, const brisk_token *hist, int n, int k,
                             brisk_token *out) {
    brisk_context_params cp = ctx_params();
    brisk_context *t = NULL;
    eagle3 *e = NULL;
    CHECK_OK(brisk_context_new(m, &cp, &t));
    CHECK_OK(eagle3_open(dpath, m, cp.n_ctx, 2, &e));
    if (t && e) CHECK_OK(eagle3_keep_layers(t, eagle3_target_layers(e), 3));
    int d = e ? eagle3_n_embd(e) : 0, nv = brisk_n_vocab(m);
    float *g = calloc((size_t)d + 1, sizeof *g);
    for (int p = 0; t && e && p < n - 1; p++) {
        if (p > 0) CHECK_OK(eagle3_decode(e, &hist[p], g, p - 1, 1, false)); /* (hist[p], g_{p-1}) at p-1 */
        brisk_batch_entry be = {hist[p], p, 0, false};
        CHECK_OK(brisk_decode(t, &be, 1));
        CHECK_OK(eagle3_encode(e, eagle3_features(t, 0), 1, g));
    }
    for (int i = 0; t && e && i < k; i++) {
        int32_t tok = i ? out[i - 1] : hist[n - 1];
        CHECK_OK(eagle3_decode(e, &tok, g, n - 2 + i, 1, true));
        out[i] = argmax(eagle3_logits(e), nv);
        memcpy(g, eagle3_hidden(e, 0), (size_t)d * sizeof *g);
    }
    free(g);
    eagle3_free(e);
    brisk_context_free(t);
}

/* Rounds of 3 proposals verified in one batch of 4, keeping 1, 2, 3, 4, 1, ... of them (the kept
 * tokens: the proposals, then a correction unlike the next one), the target cut back and re-decoded
 * as speculative.c does. After each round the drafter's proposals equal the reference's. */
static void test_rollback(void) {
    char tpath[600], dpath[600];
    make_pair("tiny-llama", false, tpath, dpath, sizeof tpath);
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(tpath, NULL, &m));
    if (!m) return;
    int nv = brisk_n_vocab(m);
    brisk_context_params cp = ctx_params();
    brisk_context *t = NULL;
    drafter *d = NULL;
    CHECK_OK(brisk_context_new(m, &cp, &t));
    if (t) CHECK_OK(drafter_new_eagle3(t, m, dpath, cp.n_ctx, 2, 0, NULL, &d));
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
        reference_drafts(m, dpath, hist, n, 3, ref);
        CHECK(memcmp(dr, ref, sizeof dr) == 0);
        if (k != 3) break;
        int pos = n - 1, keep = round % 4 + 1; /* tokens of the batch kept: hist[n-1] and keep-1 proposals */
        b[0] = (brisk_batch_entry){hist[n - 1], pos, 0, true};
        for (int i = 0; i < 3; i++) b[i + 1] = (brisk_batch_entry){dr[i], pos + 1 + i, 0, true};
        CHECK_OK(brisk_decode(t, b, 4));
        CHECK_OK(drafter_process(d, b, 4));
        for (int i = 0; i < keep - 1; i++) hist[n++] = dr[i];
        hist[n] = keep < 4 ? (dr[keep - 1] + 1) % nv : argmax(brisk_get_logits(t, 3), nv); /* the round's sample */
        n++;
        if (keep < 4) { /* as speculative.c's cut_to: back, then the kept tokens again (no drafter_process) */
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

/* Two drafters of one target context, a server's slots (scheduler.c): each round verifies both
 * sequences' proposals in one batch (sequence 1's entries first), each drafter fed its own rows of
 * it (drafter_process_at: the kept layer inputs are per batch entry); rounds keep 1..4 of 4, the
 * rejected positions cut and the kept ones decoded again. Each drafter proposes what the reference
 * fed its sequence alone proposes. */
static void test_slots(void) {
    char tpath[600], dpath[600];
    make_pair("tiny-llama", false, tpath, dpath, sizeof tpath);
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(tpath, NULL, &m));
    if (!m) return;
    int nv = brisk_n_vocab(m);
    brisk_context_params cp = ctx_params();
    cp.n_seq_max = 2;
    brisk_context *t = NULL;
    drafter *d[2] = {NULL, NULL};
    CHECK_OK(brisk_context_new(m, &cp, &t));
    /* the second shares the first's weights and backend (a server's slots: cmd_serve.c) */
    for (int s = 0; t && s < 2; s++) CHECK_OK(drafter_new_eagle3(t, m, dpath, cp.n_ctx, 2, 0, s ? d[0] : NULL, &d[s]));
    brisk_token hist[2][128];
    int n[2] = {N_PROMPT, N_PROMPT - 3};
    brisk_batch_entry b[16];
    memcpy(hist[0], prompt, sizeof prompt);
    for (int i = 0; i < n[1]; i++) hist[1][i] = (prompt[i] * 7 + 11) % nv;
    if (!d[0] || !d[1]) goto done;
    /* the prompts in one batch: sequence 1's, then 0's */
    int nb = 0, at[2];
    for (int s = 1; s >= 0; s--) {
        CHECK_OK(drafter_begin(d[s], hist[s], n[s]));
        at[s] = nb;
        for (int i = 0; i < n[s]; i++) b[nb++] = (brisk_batch_entry){hist[s][i], i, s, i == n[s] - 1};
    }
    CHECK_OK(brisk_decode(t, b, nb));
    for (int s = 0; s < 2; s++) {
        CHECK_OK(drafter_process_at(d[s], b, at[s], n[s]));
        hist[s][n[s]] = argmax(brisk_get_logits(t, at[s] + n[s] - 1), nv);
        n[s]++;
    }
    for (int round = 0; round < 6; round++) {
        brisk_token dr[2][3];
        int keep[2] = {round % 4 + 1, (round + 2) % 4 + 1}, pos[2];
        nb = 0;
        for (int s = 1; s >= 0; s--) {
            brisk_token ref[3];
            int k = 0;
            CHECK_OK(drafter_draft(d[s], hist[s], n[s], 3, dr[s], &k));
            CHECK(k == 3);
            reference_drafts(m, dpath, hist[s], n[s], 3, ref);
            CHECK(k == 3 && memcmp(dr[s], ref, sizeof ref) == 0);
            if (k != 3) goto done;
            pos[s] = n[s] - 1;
            at[s] = nb;
            b[nb++] = (brisk_batch_entry){hist[s][n[s] - 1], pos[s], s, true};
            for (int i = 0; i < 3; i++) b[nb++] = (brisk_batch_entry){dr[s][i], pos[s] + 1 + i, s, true};
        }
        CHECK_OK(brisk_decode(t, b, nb));
        for (int s = 0; s < 2; s++) CHECK_OK(drafter_process_at(d[s], b, at[s], 4));
        brisk_token last[2];
        for (int s = 0; s < 2; s++) /* the round's sample: a correction unlike the next proposal, or the 4th */
            last[s] = keep[s] < 4 ? (dr[s][keep[s] - 1] + 1) % nv : argmax(brisk_get_logits(t, at[s] + 3), nv);
        nb = 0;
        for (int s = 0; s < 2; s++) { /* cut back, the kept tokens decoded again, both in one batch */
            for (int i = 0; i < keep[s] - 1; i++) hist[s][n[s]++] = dr[s][i];
            hist[s][n[s]++] = last[s];
            if (keep[s] == 4) continue;
            CHECK_OK(brisk_seq_remove(t, s, pos[s], -1));
            for (int i = 0; i < keep[s]; i++) b[nb++] = (brisk_batch_entry){hist[s][pos[s] + i], pos[s] + i, s, false};
        }
        if (nb) CHECK_OK(brisk_decode(t, b, nb));
        for (int s = 0; s < 2; s++) {
            CHECK(brisk_seq_len(t, s) == n[s] - 1);
            CHECK_OK(drafter_sync(d[s], hist[s], n[s]));
        }
    }
done:
    for (int s = 0; s < 2; s++) drafter_free(d[s]);
    brisk_context_free(t);
    brisk_model_free(m);
}

/* Element i of an i64 tensor set to v, in place. */
static void patch_i64(const char *path, const char *name, int64_t i, int64_t v) {
    gguf_file *g = NULL;
    CHECK_OK(gguf_open(path, &g));
    const gguf_tensor *t = g ? gguf_find_tensor(g, name) : NULL;
    CHECK(t && t->type == QT_I64 && i < t->ne[0]);
    FILE *fp = t ? fopen(path, "r+b") : NULL;
    CHECK(fp && fseek(fp, (long)(gguf_data_offset(g) + t->offset + 8 * (uint64_t)i), SEEK_SET) == 0 &&
          fwrite(&v, 8, 1, fp) == 1);
    if (fp) fclose(fp);
    gguf_close(g);
}

static void test_d2t(void) {
    char tpath[600], dpath[600], bad[600];
    path_for("t-d2t", tpath, sizeof tpath);
    path_for("d-d2t", dpath, sizeof dpath);
    synth_config c;
    CHECK_OK(synth_preset("tiny-llama", &c));
    c.n_threads = 2;
    CHECK_OK(synth_write(&c, NULL, tpath, false));
    CHECK_OK(synth_preset("tiny-llama-eagle3-d2t", &c));
    c.n_threads = 2;
    CHECK_OK(synth_write(&c, NULL, dpath, false));
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(tpath, NULL, &m));
    if (!m) return;
    const int nv = brisk_n_vocab(m), n_draft = c.eagle3_draft_vocab;
    eagle3 *e = NULL;
    CHECK_OK(eagle3_open(dpath, m, 64, 2, &e));
    if (e) { /* synth's d2t: draft row i -> target (7 i + 3) mod 354 */
        float g[256] = {0};
        int32_t tok = 5;
        CHECK_OK(eagle3_decode(e, &tok, g, 0, 1, true));
        const float *lg = eagle3_logits(e);
        int fin = 0, at_ids = 0;
        for (int v = 0; lg && v < nv; v++) fin += isfinite(lg[v]);
        for (int i = 0; lg && i < n_draft; i++) at_ids += isfinite(lg[(7 * i + 3) % nv]);
        CHECK(nv == 354 && fin == n_draft && at_ids == n_draft);
    }
    eagle3_free(e);
    /* speculative greedy with the reduced drafter: plain greedy's tokens */
    brisk_context_params cp = ctx_params();
    brisk_context *t = NULL;
    CHECK_OK(brisk_context_new(m, &cp, &t));
    collect plain = {.n = 0};
    if (t) plain_greedy(t, nv, &plain);
    drafter *d = NULL;
    if (t) CHECK_OK(drafter_new_eagle3(t, m, dpath, cp.n_ctx, 2, 0, NULL, &d));
    brisk_sampler *smp = greedy_sampler(nv);
    collect spec = {.n = 0};
    spec_stats st = {0};
    if (d && smp) CHECK_OK(spec_generate(t, d, smp, prompt, N_PROMPT, 3, 0, cp.n_ctx, emit, &spec, &st));
    CHECK(plain.n == N_GEN && spec.n == N_GEN && memcmp(spec.out, plain.out, sizeof plain.out) == 0 && st.drafted > 0);
    brisk_sampler_free(smp);
    drafter_free(d);
    brisk_context_free(t);
    /* a repeated target id, one outside the vocabulary: refused, with the reason */
    path_for("d-d2t-bad", bad, sizeof bad);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "cp %s %s", dpath, bad);
    CHECK(system(cmd) == 0);
    patch_i64(bad, "d2t", 5, 3); /* row 0's id */
    e = NULL;
    CHECK(eagle3_open(bad, m, 64, 2, &e) == BRISK_ERR_FORMAT && !e && strstr(brisk_last_error(), "repeated"));
    patch_i64(bad, "d2t", 5, nv);
    CHECK(eagle3_open(bad, m, 64, 2, &e) == BRISK_ERR_FORMAT && !e && strstr(brisk_last_error(), "outside"));
    brisk_model_free(m);
}

int main(int argc, char **argv) {
    snprintf(dir, sizeof dir, "/tmp/brisk-test-eagle3-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    static const test_case cases[] = {
        {"load", test_load},
        {"greedy_llama", test_greedy_llama},
        {"greedy_qwen35", test_greedy_qwen35},
        {"rollback", test_rollback},
        {"slots", test_slots},
        {"d2t", test_d2t},
    };
    int rc = test_main(cases, sizeof cases / sizeof *cases, argc, argv);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) rc = rc ? rc : 1;
    return rc;
}
