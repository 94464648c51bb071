/* test_embeddings.c — embeddings (brisk_context_params.embeddings): pooled and per-token hidden
 * states against llama.cpp (build/llamacpp-ref embed, llama_get_embeddings_seq / _ith on the same
 * GGUF and token ids), batching, the reranking head, normalisation and MaxSim (one document, and
 * brisk_maxsim_batch's many on the CPU) against plain references.
 *
 * Tolerance: max |brisk - llama.cpp| over a vector, divided by the vector's max |x|: 1e-4 for
 * f32 weights (stories260K), 1e-3 for f16 (brisk-kjv-6m; measured up to 1.4e-4). */
#include <sys/stat.h>
#include <unistd.h>

#include "brisk.h"
#include "format/gguf.h"
#include "quant/quant.h"
#include "test.h"
#include "llamacpp/ref_util.h"

static char dir[1024], build_dir[512];
static bool have_ref;
static const char *const TEXT = "In the beginning God created the heaven and the earth.";

static brisk_context *embed_ctx(brisk_model *m, int pooling, int n_seq) {
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = 256;
    cp.n_seq_max = n_seq;
    cp.kv_type = BRISK_KV_F32;
    cp.n_threads = 2;
    cp.embeddings = true;
    cp.pooling = pooling;
    brisk_context *c = NULL;
    CHECK_OK(brisk_context_new(m, &cp, &c));
    return c;
}

/* The relative difference of two vectors (see the top). */
static double rel_diff(const float *a, const float *b, int n) {
    double md = 0, mx = 0;
    for (int i = 0; i < n; i++) {
        if (fabs((double)a[i] - b[i]) > md) md = fabs((double)a[i] - b[i]);
        if (fabs(b[i]) > mx) mx = fabs(b[i]);
    }
    return md / (mx > 0 ? mx : 1);
}

/* brisk's and llama.cpp's embeddings of TEXT (tokenized by brisk with add_special) under one pooling. */
static void compare(const char *path, const char *pooling, double tol) {
    if (!have_ref) SKIP_REQUIRED("%s/llamacpp-ref is missing (the llama.cpp reference)", build_dir);
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(path, NULL, &m));
    if (!m) return;
    brisk_token ids[128];
    int64_t n = 0;
    CHECK_OK(brisk_tokenize(m, TEXT, strlen(TEXT), true, false, ids, 128, &n));
    char pstr[1024] = "", ref_path[1200], cmd[4096];
    for (int i = 0; i < n; i++) snprintf(pstr + strlen(pstr), sizeof pstr - strlen(pstr), "%s%d", i ? " " : "", ids[i]);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    snprintf(ref_path, sizeof ref_path, "%s/%s.%s.embd", dir, base, pooling);
    snprintf(cmd, sizeof cmd, "%s/llamacpp-ref embed -m %s -p '%s' --pooling %s --kv f32 -t 1 --logits-out %s 2>/dev/null",
             build_dir, path, pstr, pooling, ref_path);
    int nd = 0, nr = 0;
    float *ref = ref_run(cmd) ? NULL : ref_read_logits(ref_path, &nd, &nr);
    brisk_model_info info;
    brisk_model_get_info(m, &info);
    int pl = brisk_pooling_from_name(pooling);
    CHECK(ref && nd == info.n_embd && nr == (pl == BRISK_POOLING_NONE ? n : 1));
    brisk_context *c = embed_ctx(m, pl, 1);
    if (ref && c && nd == info.n_embd) {
        CHECK(brisk_context_pooling(c) == pl);
        CHECK(brisk_context_n_embd_out(c) == info.n_embd);
        brisk_batch_entry b[128];
        for (int i = 0; i < n; i++) b[i] = (brisk_batch_entry){ids[i], i, 0, true};
        CHECK_OK(brisk_decode(c, b, (int)n));
        CHECK(brisk_get_logits(c, 0) == NULL);
        double worst = 0;
        for (int r = 0; r < nr; r++) {
            const float *e = pl == BRISK_POOLING_NONE ? brisk_get_embeddings_ith(c, r) : brisk_get_embeddings_seq(c, 0);
            CHECK(e != NULL);
            if (e) {
                double d = rel_diff(e, ref + (size_t)r * nd, nd);
                worst = d > worst ? d : worst;
            }
        }
        printf("    %s pooling %s: %lld tokens, %d rows, max rel diff %.2e (tol %.0e)\n", base, pooling, (long long)n,
               nr, worst, tol);
        CHECK(worst <= tol);
    }
    free(ref);
    brisk_context_free(c);
    brisk_model_free(m);
}

static void test_kjv_mean(void) { compare("models/brisk-kjv-6m.gguf", "mean", 1e-3); }
static void test_kjv_last(void) { compare("models/brisk-kjv-6m.gguf", "last", 1e-3); }
static void test_kjv_cls(void) { compare("models/brisk-kjv-6m.gguf", "cls", 1e-3); }
static void test_kjv_none(void) { compare("models/brisk-kjv-6m.gguf", "none", 1e-3); }

static void stories(const char *pooling) {
    char p[1024];
    snprintf(p, sizeof p, "%s/data/stories260K/stories260K.gguf", test_shared_dir());
    if (test_need_file(p)) compare(p, pooling, 1e-4);
}
static void test_stories_mean(void) { stories("mean"); }
static void test_stories_last(void) { stories("last"); }

/* A Qwen3-Reranker-shaped copy of brisk-kjv-6m, as llama.cpp's converter makes one: pooling rank,
 * labels "yes" and "no", a "rerank" chat template, and cls.output.weight (2, n_embd) f32 = the LM
 * head's rows of two tokens (here ids YES and NO). Written to $BUILD/conformance/kjv-reranker.gguf,
 * where tests/t_server.sh takes it (it runs `test_embeddings rank` first). */
#define YES 100
#define NO 200
static const char *make_copy(bool reranker) {
    static char out[1200];
    snprintf(out, sizeof out, "%s/%s", dir, reranker ? "kjv-reranker.gguf" : "kjv-add-eos.gguf");
    gguf_file *g = NULL;
    gguf_writer *w = gguf_writer_new();
    float *head = NULL;
    brisk_status s = w ? gguf_open("models/brisk-kjv-6m.gguf", &g) : BRISK_ERR_NOMEM;
    const gguf_tensor *lm = s == BRISK_OK ? gguf_find_tensor(g, "output.weight") : NULL;
    if (s == BRISK_OK && !lm) lm = gguf_find_tensor(g, "token_embd.weight");
    int64_t d = lm ? lm->ne[0] : 0;
    if (lm && (head = malloc(2 * (size_t)d * sizeof(float)))) {
        size_t rb = lm->nbytes / (size_t)lm->ne[1];
        s = quant_dequantize(lm->type, (const char *)lm->data + YES * rb, head, d);
        if (s == BRISK_OK) s = quant_dequantize(lm->type, (const char *)lm->data + NO * rb, head + d, d);
    } else if (s == BRISK_OK) {
        s = BRISK_ERR_NOMEM;
    }
    for (int64_t i = 0; s == BRISK_OK && i < gguf_kv_count(g); i++) s = gguf_writer_copy_kv(w, g, i);
    const char *labels[2] = {"yes", "no"};
    size_t lens[2] = {3, 2};
    if (!reranker) { /* Qwen3-Embedding's convention: pooling last over a text the tokenizer ends with EOS */
        if (s == BRISK_OK) s = gguf_writer_set_u32(w, "qwen3.pooling_type", BRISK_POOLING_LAST);
        if (s == BRISK_OK) s = gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", true);
        for (int64_t i = 0; s == BRISK_OK && i < gguf_tensor_count(g); i++) {
            const gguf_tensor *t = gguf_get_tensor(g, i);
            s = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne);
        }
        if (s == BRISK_OK) s = gguf_writer_begin(w, out);
        for (int64_t i = 0; s == BRISK_OK && i < gguf_tensor_count(g); i++)
            s = gguf_writer_write_tensor(w, gguf_get_tensor(g, i)->data, gguf_get_tensor(g, i)->nbytes);
        if (s == BRISK_OK) s = gguf_writer_finish(w);
        goto done;
    }
    if (s == BRISK_OK) s = gguf_writer_set_u32(w, "qwen3.pooling_type", BRISK_POOLING_RANK);
    if (s == BRISK_OK) s = gguf_writer_set_arr_str(w, "qwen3.classifier.output_labels", labels, lens, 2);
    /* the prompt /v1/rerank renders (tests/server/embeddings.mjs) */
    if (s == BRISK_OK) s = gguf_writer_set_str(w, "tokenizer.chat_template.rerank", "Query: {query}\nDocument: {document}");
    for (int64_t i = 0; s == BRISK_OK && i < gguf_tensor_count(g); i++) {
        const gguf_tensor *t = gguf_get_tensor(g, i);
        s = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne);
    }
    if (s == BRISK_OK) s = gguf_writer_add_tensor(w, "cls.output.weight", QT_F32, 2, (const int64_t[2]){d, 2});
    if (s == BRISK_OK) s = gguf_writer_begin(w, out);
    for (int64_t i = 0; s == BRISK_OK && i < gguf_tensor_count(g); i++) {
        const gguf_tensor *t = gguf_get_tensor(g, i);
        s = gguf_writer_write_tensor(w, t->data, t->nbytes);
    }
    if (s == BRISK_OK) s = gguf_writer_write_tensor(w, head, 2 * (uint64_t)d * sizeof(float));
    if (s == BRISK_OK) s = gguf_writer_finish(w);
done:
    CHECK_OK(s);
    free(head);
    gguf_writer_free(w);
    gguf_close(g);
    return s == BRISK_OK ? out : NULL;
}

/* Pooling rank with the yes/no head: brisk's score is softmax(h . yes, h . no)[0] over the last
 * token's hidden state h (a direct computation from pooling last and the LM head's logits),
 * and equals llama.cpp's. */
static void test_rank(void) {
    const char *path = make_copy(true);
    if (!path) return;
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(path, NULL, &m));
    if (!m) return;
    brisk_token ids[128];
    int64_t n = 0;
    CHECK_OK(brisk_tokenize(m, TEXT, strlen(TEXT), true, false, ids, 128, &n));
    brisk_batch_entry b[128];
    for (int i = 0; i < n; i++) b[i] = (brisk_batch_entry){ids[i], i, 0, i == n - 1};
    brisk_context *c = embed_ctx(m, BRISK_POOLING_UNSPECIFIED, 1); /* the file's: rank */
    float score[2] = {0};
    if (c) {
        CHECK(brisk_context_pooling(c) == BRISK_POOLING_RANK);
        CHECK(brisk_context_n_embd_out(c) == 2);
        CHECK_OK(brisk_decode(c, b, (int)n));
        const float *r = brisk_get_embeddings_seq(c, 0);
        CHECK(r != NULL);
        if (r) memcpy(score, r, sizeof score);
    }
    brisk_context_free(c);
    /* direct: the generative model's logits of YES and NO after the prompt */
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = 256;
    cp.kv_type = BRISK_KV_F32;
    cp.n_threads = 2;
    c = NULL;
    CHECK_OK(brisk_context_new(m, &cp, &c));
    if (c) {
        CHECK_OK(brisk_decode(c, b, (int)n));
        const float *lg = brisk_get_logits(c, (int)n - 1);
        CHECK(lg != NULL);
        if (lg) {
            double p_yes = 1.0 / (1.0 + exp((double)lg[NO] - lg[YES]));
            printf("    rank score %.6f, direct %.6f\n", score[0], p_yes);
            CHECK(fabs(score[0] - p_yes) < 2e-4 && fabs(score[0] + score[1] - 1) < 1e-5);
        }
    }
    brisk_context_free(c);
    if (have_ref) {
        char ref_path[1300], cmd[4096], pstr[1024] = "";
        for (int i = 0; i < n; i++) snprintf(pstr + strlen(pstr), sizeof pstr - strlen(pstr), "%s%d", i ? " " : "", ids[i]);
        snprintf(ref_path, sizeof ref_path, "%s.rank.embd", path);
        snprintf(cmd, sizeof cmd, "%s/llamacpp-ref embed -m %s -p '%s' --kv f32 -t 1 --logits-out %s 2>/dev/null",
                 build_dir, path, pstr, ref_path);
        int nd = 0, nr = 0;
        float *ref = ref_run(cmd) ? NULL : ref_read_logits(ref_path, &nd, &nr);
        CHECK(ref && nd == 2 && nr == 1);
        if (ref && nd == 2) {
            printf("    llama.cpp: %.6f %.6f\n", ref[0], ref[1]);
            CHECK(fabs(ref[0] - score[0]) < 1e-3);
        }
        free(ref);
    }
    brisk_model_free(m);
}

/* The Qwen3-Embedding convention on a copy of brisk-kjv-6m whose file says pooling last and
 * add_eos_token: each side tokenizes TEXT itself (llama.cpp through the harness's --prompt-text,
 * with its special tokens, as its server does), the text ends with EOS, and the vectors agree. */
static void test_last_eos(void) {
    if (!have_ref) SKIP_REQUIRED("%s/llamacpp-ref is missing (the llama.cpp reference)", build_dir);
    const char *path = make_copy(false);
    if (!path) return;
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(path, NULL, &m));
    if (!m) return;
    brisk_token ids[128];
    int64_t n = 0;
    CHECK_OK(brisk_tokenize(m, TEXT, strlen(TEXT), true, false, ids, 128, &n));
    CHECK(n > 1 && ids[n - 1] == brisk_token_eos(m));
    char ref_path[1300], cmd[4096];
    snprintf(ref_path, sizeof ref_path, "%s.embd", path);
    snprintf(cmd, sizeof cmd, "%s/llamacpp-ref embed -m %s --prompt-text '%s' --kv f32 -t 1 --logits-out %s 2>/dev/null",
             build_dir, path, TEXT, ref_path);
    int nd = 0, nr = 0;
    float *ref = ref_run(cmd) ? NULL : ref_read_logits(ref_path, &nd, &nr);
    brisk_context *c = embed_ctx(m, BRISK_POOLING_UNSPECIFIED, 1);
    CHECK(ref && nr == 1 && c && brisk_context_pooling(c) == BRISK_POOLING_LAST);
    if (ref && c && nd == brisk_context_n_embd_out(c)) {
        brisk_batch_entry b[128];
        for (int i = 0; i < n; i++) b[i] = (brisk_batch_entry){ids[i], i, 0, false};
        CHECK_OK(brisk_decode(c, b, (int)n));
        const float *v = brisk_get_embeddings_seq(c, 0);
        double d = v ? rel_diff(v, ref, nd) : 1;
        printf("    last pooling over a text ending in EOS: max rel diff %.2e\n", d);
        CHECK(d <= 1e-3);
    }
    free(ref);
    brisk_context_free(c);
    brisk_model_free(m);
}

/* Two sequences of different lengths in one call pool as each alone (within 1e-3: the batch
 * kernels sum in another order for another row count; measured 1.8e-4); pooling none hands out only
 * the entries that asked; bad settings fail cleanly. */
static void test_batched(void) {
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load("models/brisk-kjv-6m.gguf", NULL, &m));
    if (!m) return;
    brisk_token a[64], bt[64];
    int64_t na = 0, nb = 0;
    const char *other = "And the earth was without form, and void; and darkness was upon the face of the deep.";
    CHECK_OK(brisk_tokenize(m, TEXT, strlen(TEXT), true, false, a, 64, &na));
    CHECK_OK(brisk_tokenize(m, other, strlen(other), true, false, bt, 64, &nb));
    int d = 0;
    brisk_model_info info;
    brisk_model_get_info(m, &info);
    d = info.n_embd;
    for (int pl = BRISK_POOLING_MEAN; pl <= BRISK_POOLING_LAST; pl++) {
        float solo[2][512];
        brisk_context *c = embed_ctx(m, pl, 2);
        if (!c) break;
        brisk_batch_entry e[128];
        for (int s = 0; s < 2; s++) {
            const brisk_token *t = s ? bt : a;
            int64_t nt = s ? nb : na;
            for (int i = 0; i < nt; i++) e[i] = (brisk_batch_entry){t[i], i, s, false};
            CHECK_OK(brisk_seq_clear(c, s));
            CHECK_OK(brisk_decode(c, e, (int)nt));
            const float *v = brisk_get_embeddings_seq(c, s);
            CHECK(v && !brisk_get_embeddings_seq(c, 1 - s));
            if (v) memcpy(solo[s], v, (size_t)d * sizeof(float));
        }
        /* interleaved: a's and b's entries alternate while both last */
        int k = 0;
        for (int i = 0; i < (na > nb ? na : nb); i++) {
            if (i < na) e[k++] = (brisk_batch_entry){a[i], i, 0, false};
            if (i < nb) e[k++] = (brisk_batch_entry){bt[i], i, 1, false};
        }
        CHECK_OK(brisk_seq_clear(c, 0));
        CHECK_OK(brisk_seq_clear(c, 1));
        CHECK_OK(brisk_decode(c, e, k));
        for (int s = 0; s < 2; s++) {
            const float *v = brisk_get_embeddings_seq(c, s);
            double rd = v ? rel_diff(v, solo[s], d) : 1;
            if (rd > 1e-6) printf("    pooling %s seq %d: batched vs alone %.2e\n", brisk_pooling_name(pl), s, rd);
            CHECK(rd < 1e-3);
        }
        CHECK(brisk_get_embeddings_ith(c, 0) == NULL); /* pooled: no per-token rows */
        brisk_context_free(c);
    }
    brisk_context *c = embed_ctx(m, BRISK_POOLING_NONE, 1);
    if (c) {
        brisk_batch_entry e[64];
        for (int i = 0; i < na; i++) e[i] = (brisk_batch_entry){a[i], i, 0, i >= na - 2};
        CHECK_OK(brisk_decode(c, e, (int)na));
        CHECK(brisk_get_embeddings_ith(c, 0) == NULL && brisk_get_embeddings_ith(c, (int)na - 1) != NULL);
        CHECK(brisk_get_embeddings_seq(c, 0) == NULL);
        brisk_context_free(c);
    }
    /* a model without a head refuses rank; an unknown pooling is refused */
    brisk_context_params cp = brisk_context_default_params();
    cp.embeddings = true;
    cp.pooling = BRISK_POOLING_RANK;
    c = NULL;
    CHECK(brisk_context_new(m, &cp, &c) == BRISK_ERR_UNSUPPORTED && !c);
    CHECK(strstr(brisk_last_error(), "classification head") != NULL);
    cp.pooling = 9;
    CHECK(brisk_context_new(m, &cp, &c) == BRISK_ERR_INVALID_ARG && !c);
    CHECK(brisk_pooling_from_name("last") == BRISK_POOLING_LAST && brisk_pooling_from_name("max") == -2);
    brisk_model_free(m);
}

/* Normalisation as llama.cpp's common_embd_normalize; MaxSim against the plain double loop. */
static void test_normalize_maxsim(void) {
    float x[5] = {3, -4, 0, 0, 0}, y[5];
    brisk_embd_normalize(x, y, 5, 2);
    CHECK(fabsf(y[0] - 0.6f) < 1e-6f && fabsf(y[1] + 0.8f) < 1e-6f);
    brisk_embd_normalize(x, y, 5, 1);
    CHECK(fabsf(y[0] - 3.0f / 7) < 1e-6f);
    brisk_embd_normalize(x, y, 5, 0);
    CHECK(fabsf(y[1] + 32760.0f) < 1e-2f);
    brisk_embd_normalize(x, y, 5, -1);
    CHECK(y[0] == 3 && y[1] == -4);
    float z[5] = {0};
    brisk_embd_normalize(z, y, 5, 2);
    CHECK(y[0] == 0);
    enum { NQ = 7, ND = 13, DIM = 33 };
    static float q[NQ * DIM], dd[ND * DIM];
    uint32_t r = 12345;
    for (int i = 0; i < NQ * DIM; i++) q[i] = (float)((r = r * 1664525u + 1013904223u) >> 8) / (1 << 24) - 0.5f;
    for (int i = 0; i < ND * DIM; i++) dd[i] = (float)((r = r * 1664525u + 1013904223u) >> 8) / (1 << 24) - 0.5f;
    for (int nq = 1; nq <= NQ; nq++) {
        double want = 0;
        for (int i = 0; i < nq; i++) {
            double best = -1e30;
            for (int j = 0; j < ND; j++) {
                double s = 0;
                for (int k = 0; k < DIM; k++) s += (double)q[i * DIM + k] * dd[j * DIM + k];
                best = s > best ? s : best;
            }
            want += best;
        }
        CHECK(fabs(brisk_maxsim(q, nq, dd, ND, DIM) - want) < 1e-4);
    }
    CHECK(brisk_maxsim(q, 0, dd, ND, DIM) == 0);
}

/* The plain reference of brisk_maxsim_batch: every dot product in double, rows normalised first
 * when norm (a zero row stays zero); an empty document scores 0. */
static double maxsim_ref(const float *q, int n_q, const float *d, int64_t r0, int64_t r1, int dim, bool norm) {
    if (r1 <= r0) return 0;
    double total = 0;
    for (int i = 0; i < n_q; i++) {
        double qn = 0, best = -INFINITY;
        for (int k = 0; k < dim; k++) qn += (double)q[i * dim + k] * q[i * dim + k];
        for (int64_t r = r0; r < r1; r++) {
            double s = 0, dn = 0;
            for (int k = 0; k < dim; k++) {
                s += (double)q[i * dim + k] * d[r * dim + k];
                dn += (double)d[r * dim + k] * d[r * dim + k];
            }
            if (norm) s = qn > 0 && dn > 0 ? s / sqrt(qn) / sqrt(dn) : 0;
            best = s > best ? s : best;
        }
        total += best;
    }
    return total;
}

/* brisk_maxsim_batch on the CPU (no context: the GPU's kernel is tests/test_cuda_ops.c's maxsim)
 * against the double reference, within 1e-5 of the score's magnitude bound (the sum over query
 * rows of the largest sum of |products| of a row pair: what fp32 rounding of the dots moves), with
 * and without normalising, over awkward sizes: dim 33, one query row and odd counts, documents of
 * one row, empty documents (also first and last), a zero row, rows not starting at 0; and the
 * normalised scores equal brisk_embd_normalize + brisk_maxsim's. Bad arguments are refused. */
static void test_maxsim_batch(void) {
    enum { DIM = 33, NQ = 7, ND = 12 };
    static const int len[ND] = {0, 1, 5, 0, 17, 1, 64, 3, 0, 2, 40, 0};
    int64_t off[ND + 1];
    off[0] = 3; /* rows 0-2 belong to no document */
    for (int j = 0; j < ND; j++) off[j + 1] = off[j] + len[j];
    const int64_t rows = off[ND];
    float *q = malloc(sizeof(float) * NQ * DIM), *d = malloc(sizeof(float) * (size_t)rows * DIM);
    uint32_t r = 777;
    for (int i = 0; i < NQ * DIM; i++) q[i] = (float)((r = r * 1664525u + 1013904223u) >> 8) / (1 << 24) - 0.5f;
    for (int64_t i = 0; i < rows * DIM; i++) d[i] = (float)((r = r * 1664525u + 1013904223u) >> 8) / (1 << 24) - 0.5f;
    memset(d + off[6] * DIM, 0, sizeof(float) * DIM);   /* a zero row (document 6's first) */
    memset(q + 2 * DIM, 0, sizeof(float) * DIM);        /* and a zero query row */
    float got[ND], tmp_q[NQ * DIM], *tmp_d = malloc(sizeof(float) * (size_t)rows * DIM);
    for (int norm = 0; norm < 2; norm++)
        for (int nq = 1; nq <= NQ; nq += 2) {
            CHECK_OK(brisk_maxsim_batch(NULL, q, nq, d, off, ND, DIM, norm, got));
            for (int j = 0; j < ND; j++) {
                double bound = 0;
                for (int i = 0; i < nq && len[j]; i++) {
                    double b = 0;
                    for (int64_t rr = off[j]; rr < off[j + 1]; rr++) {
                        double s = 0, qn = 0, dn = 0;
                        for (int k = 0; k < DIM; k++) {
                            s += fabs((double)q[i * DIM + k] * d[rr * DIM + k]);
                            qn += (double)q[i * DIM + k] * q[i * DIM + k];
                            dn += (double)d[rr * DIM + k] * d[rr * DIM + k];
                        }
                        if (norm) s = qn > 0 && dn > 0 ? s / sqrt(qn) / sqrt(dn) : 0;
                        b = s > b ? s : b;
                    }
                    bound += b;
                }
                double want = maxsim_ref(q, nq, d, off[j], off[j + 1], DIM, norm);
                CHECK_NEAR(got[j], want, 1e-5 * bound + 1e-7);
                if (!len[j]) CHECK(got[j] == 0);
            }
            if (norm) { /* the fused scales and the normalised copies: the same scores but for rounding */
                for (int i = 0; i < nq; i++) brisk_embd_normalize(q + i * DIM, tmp_q + i * DIM, DIM, 2);
                for (int64_t i = 0; i < rows; i++) brisk_embd_normalize(d + i * DIM, tmp_d + i * DIM, DIM, 2);
                for (int j = 0; j < ND; j++)
                    CHECK_NEAR(got[j], brisk_maxsim(tmp_q, nq, tmp_d + off[j] * DIM, len[j], DIM), 1e-5);
            } else { /* without, brisk_maxsim's own sums, bit for bit */
                for (int j = 0; j < ND; j++) CHECK(got[j] == brisk_maxsim(q, nq, d + off[j] * DIM, len[j], DIM));
            }
        }
    /* no query rows, no documents, every document empty: zeros */
    got[0] = got[1] = 1;
    CHECK_OK(brisk_maxsim_batch(NULL, q, 0, d, off, 2, DIM, true, got));
    CHECK(got[0] == 0 && got[1] == 0);
    CHECK_OK(brisk_maxsim_batch(NULL, q, NQ, d, off, 0, DIM, true, NULL));
    int64_t none[3] = {5, 5, 5};
    got[0] = got[1] = 1;
    CHECK_OK(brisk_maxsim_batch(NULL, q, NQ, NULL, none, 2, DIM, false, got));
    CHECK(got[0] == 0 && got[1] == 0);
    /* refused: decreasing offsets, a negative start, dim 0, a missing array */
    int64_t bad[3] = {0, 4, 2}, neg[2] = {-1, 2};
    CHECK(brisk_maxsim_batch(NULL, q, NQ, d, bad, 2, DIM, false, got) == BRISK_ERR_INVALID_ARG);
    CHECK(brisk_maxsim_batch(NULL, q, NQ, d, neg, 1, DIM, false, got) == BRISK_ERR_INVALID_ARG);
    CHECK(brisk_maxsim_batch(NULL, q, NQ, d, off, ND, 0, false, got) == BRISK_ERR_INVALID_ARG);
    CHECK(brisk_maxsim_batch(NULL, q, NQ, NULL, off, ND, DIM, false, got) == BRISK_ERR_INVALID_ARG);
    CHECK(brisk_maxsim_batch(NULL, NULL, NQ, d, off, ND, DIM, false, got) == BRISK_ERR_INVALID_ARG);
    free(q);
    free(d);
    free(tmp_d);
}

int main(int argc, char **argv) {
    const char *b = getenv("BUILD");
    snprintf(build_dir, sizeof build_dir, "%s", b ? b : "build");
    snprintf(dir, sizeof dir, "%s/conformance", build_dir);
    mkdir(dir, 0755);
    char ref_bin[600];
    snprintf(ref_bin, sizeof ref_bin, "%s/llamacpp-ref", build_dir);
    have_ref = access(ref_bin, X_OK) == 0 && test_env_switch("BRISK_NO_LLAMACPP") <= 0;
    test_case cases[] = {{"kjv_mean", test_kjv_mean}, {"kjv_last", test_kjv_last}, {"kjv_cls", test_kjv_cls},
                         {"kjv_none", test_kjv_none}, {"stories_mean", test_stories_mean},
                         {"stories_last", test_stories_last}, {"rank", test_rank}, {"last_eos", test_last_eos}, {"batched", test_batched},
                         {"normalize_maxsim", test_normalize_maxsim}, {"maxsim_batch", test_maxsim_batch}};
    return test_main(cases, sizeof cases / sizeof cases[0], argc, argv);
}
