/* ops_maxsim.c — test_cuda_ops's checks of late-interaction scoring (cuda_maxsim.cu): the maxsim op
 * on the GPU against the plain reference (a double loop), and brisk_maxsim_batch through a context
 * on the GPU against the same call on the CPU. Not a translation unit of its own: tests/test_cuda_ops.c
 * includes it (for its gpu backend, fill and dev_copy).
 *
 * Tolerance: |gpu - reference| <= 1e-5 * the score's magnitude bound (over the query rows, the
 * largest sum of |products| of a query row with a document row, normalised when the rows are): what
 * fp32 rounding of the dot products can move, whichever row wins a near tie; an empty document is 0
 * exactly. GPU against the CPU's brisk_maxsim_batch: twice that. */
#include <unistd.h>

#include "engine/pooling.h"
#include "model/synth.h"

/* The reference score of each document and its magnitude bound. */
static void maxsim_ref(const float *q, int n_q, const float *d, const int64_t *off, int n_docs, int dim, bool norm,
                       double *want, double *bound) {
    double *qn = malloc(sizeof(double) * (size_t)(n_q > 0 ? n_q : 1));
    for (int i = 0; i < n_q; i++) {
        double s = 0;
        for (int k = 0; k < dim; k++) s += (double)q[(size_t)i * dim + k] * q[(size_t)i * dim + k];
        qn[i] = !norm ? 1 : s > 0 ? 1 / sqrt(s) : 0;
    }
    for (int j = 0; j < n_docs; j++) {
        want[j] = bound[j] = 0;
        for (int i = 0; i < n_q && off[j + 1] > off[j]; i++) {
            double best = -INFINITY, babs = 0;
            for (int64_t r = off[j]; r < off[j + 1]; r++) {
                const float *qr = q + (size_t)i * dim, *dr = d + (size_t)r * dim;
                double s = 0, a = 0, dn = 0;
                for (int k = 0; k < dim; k++) {
                    s += (double)qr[k] * dr[k];
                    a += fabs((double)qr[k] * dr[k]);
                    dn += (double)dr[k] * dr[k];
                }
                const double sc = qn[i] * (!norm ? 1 : dn > 0 ? 1 / sqrt(dn) : 0);
                best = s * sc > best ? s * sc : best;
                babs = a * sc > babs ? a * sc : babs;
            }
            want[j] += best;
            bound[j] += babs;
        }
    }
    free(qn);
}

/* Random rows (a zero row among them when there are several), documents of the given lengths. */
static float *maxsim_rows(int n, int dim) {
    float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1) * (size_t)dim);
    fill(x, (size_t)n * dim, 1.0f);
    if (n > 2) memset(x + (size_t)(n / 2) * dim, 0, sizeof(float) * (size_t)dim);
    return x;
}
static int64_t *maxsim_offsets(const int *len, int n_docs) {
    int64_t *off = malloc(sizeof(int64_t) * (size_t)(n_docs + 1));
    off[0] = 0;
    for (int j = 0; j < n_docs; j++) off[j + 1] = off[j] + len[j];
    return off;
}

/* The op on the test's GPU backend for n_q query rows against documents of lengths len, both ways of
 * normalising; its launch counter shows the product ran. */
static void check_maxsim(int n_q, int dim, const int *len, int n_docs) {
    int64_t *off = maxsim_offsets(len, n_docs);
    const int64_t rows = off[n_docs];
    float *q = maxsim_rows(n_q, dim), *d = maxsim_rows((int)rows, dim), *got = malloc(sizeof(float) * n_docs);
    double *want = malloc(sizeof(double) * n_docs), *bound = malloc(sizeof(double) * n_docs);
    int32_t *off32 = malloc(sizeof(int32_t) * (size_t)(n_docs + 1));
    for (int j = 0; j <= n_docs; j++) off32[j] = (int32_t)off[j];
    float *dq = dev_copy(q, sizeof(float) * (size_t)n_q * dim), *dd = dev_copy(d, sizeof(float) * (size_t)(rows ? rows : 1) * dim);
    int32_t *doff = dev_copy(off32, sizeof(int32_t) * (size_t)(n_docs + 1));
    void *work = dev_copy(NULL, bk_maxsim_work_bytes(n_q, n_docs));
    float *dsc = dev_copy(NULL, sizeof(float) * n_docs);
    for (int norm = 0; norm < 2; norm++) {
        const long l0 = bk_cuda_path_launches(gpu, "maxsim");
        gpu->ops->maxsim(gpu, dq, n_q, dd, rows, doff, n_docs, dim, norm, work, dsc);
        dev_read(dsc, got, sizeof(float) * n_docs);
        if (rows > 0) CHECK(bk_cuda_path_launches(gpu, "maxsim") == l0 + 1);
        maxsim_ref(q, n_q, d, off, n_docs, dim, norm, want, bound);
        int bad = 0;
        for (int j = 0; j < n_docs; j++) {
            const bool ok = off[j + 1] > off[j] ? fabs(got[j] - want[j]) <= 1e-5 * bound[j] : got[j] == 0;
            if (!ok && bad++ < 3)
                fprintf(stderr, "  maxsim n_q %d dim %d docs %d norm %d: doc %d (%lld rows) %.9g, want %.9g (bound %.3g)\n",
                        n_q, dim, n_docs, norm, j, (long long)(off[j + 1] - off[j]), got[j], want[j], bound[j]);
        }
        CHECK(bad == 0);
    }
    gpu->ops->release(gpu, dq);
    gpu->ops->release(gpu, dd);
    gpu->ops->release(gpu, doff);
    gpu->ops->release(gpu, work);
    gpu->ops->release(gpu, dsc);
    free(q), free(d), free(got), free(want), free(bound), free(off), free(off32);
}

/* Documents of pseudo-random lengths in [0, max_len] (about one in five empty). */
static int *maxsim_lengths(int n_docs, int max_len) {
    int *len = malloc(sizeof(int) * (size_t)n_docs);
    for (int j = 0; j < n_docs; j++) len[j] = rnd() % 5 == 0 ? 0 : (int)(rnd() % (unsigned)(max_len + 1));
    return len;
}

/* brisk_maxsim_batch through a context whose model is on the GPU (a synthesized tiny qwen3; the
 * context made with BRISK_CUDA_MAXSIM_MIN=0 so that every call goes there) against the CPU's (no
 * context): about 100 MiB of dim-4096 rows, more than one run of the staging (64 MiB), and 70,000 documents,
 * mostly empty, more than one run of documents (65,536). Then a context with the default threshold
 * keeps a small call on the CPU (no launch). */
static void maxsim_engine(void) {
    char dir[] = "/tmp/brisk-maxsim-XXXXXX", path[64];
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    snprintf(path, sizeof path, "%s/tiny.gguf", dir);
    synth_config sc;
    CHECK_OK(synth_preset("tiny-qwen3", &sc));
    CHECK_OK(synth_write(&sc, NULL, path, false));
    brisk_model_params mp = brisk_model_default_params();
    mp.n_gpu_layers = -1;
    brisk_model *m = NULL;
    brisk_context *c = NULL, *c_def = NULL;
    CHECK_OK(brisk_model_load(path, &mp, &m));
    if (m) {
        brisk_context_params cp = brisk_context_default_params();
        cp.n_ctx = 64;
        setenv("BRISK_CUDA_MAXSIM_MIN", "0", 1);
        CHECK_OK(brisk_context_new(m, &cp, &c));
        unsetenv("BRISK_CUDA_MAXSIM_MIN");
        CHECK_OK(brisk_context_new(m, &cp, &c_def));
    }
    bk_backend *be = c ? ctx_gpu_backend(c) : NULL;
    CHECK(be != NULL);
    static const int shapes[][3] = {{12, 4096, 40}, {3, 5, 70000}}; /* n_q, dim, documents */
    for (int s = 0; be && s < 2; s++) {
        const int n_q = shapes[s][0], dim = shapes[s][1], n_docs = shapes[s][2];
        int *len = maxsim_lengths(n_docs, s == 0 ? 400 : 4);
        int64_t *off = maxsim_offsets(len, n_docs);
        float *q = maxsim_rows(n_q, dim), *d = maxsim_rows((int)off[n_docs], dim);
        float *g = malloc(sizeof(float) * n_docs), *h = malloc(sizeof(float) * n_docs);
        double *want = malloc(sizeof(double) * n_docs), *bound = malloc(sizeof(double) * n_docs);
        for (int norm = 0; norm < 2; norm++) {
            const long l0 = bk_cuda_path_launches(be, "maxsim");
            CHECK_OK(brisk_maxsim_batch(c, q, n_q, d, off, n_docs, dim, norm, g));
            /* more than one run: of rows (over 64 MiB) or of documents (over 65,536) */
            CHECK(bk_cuda_path_launches(be, "maxsim") - l0 >= (off[n_docs] * dim * 4 > (64 << 20) || n_docs > 65536 ? 2 : 1));
            CHECK_OK(brisk_maxsim_batch(NULL, q, n_q, d, off, n_docs, dim, norm, h));
            maxsim_ref(q, n_q, d, off, n_docs, dim, norm, want, bound);
            int bad = 0;
            for (int j = 0; j < n_docs; j++)
                if (len[j] ? fabs(g[j] - h[j]) > 2e-5 * bound[j] || fabs(g[j] - want[j]) > 1e-5 * bound[j] : g[j] != 0)
                    if (bad++ < 3)
                        fprintf(stderr, "  maxsim_batch n_q %d dim %d norm %d: doc %d (%d rows) gpu %.9g cpu %.9g want %.9g\n",
                                n_q, dim, norm, j, len[j], g[j], h[j], want[j]);
            CHECK(bad == 0);
        }
        free(len), free(off), free(q), free(d), free(g), free(h), free(want), free(bound);
    }
    bk_backend *be_def = c_def ? ctx_gpu_backend(c_def) : NULL;
    if (be_def) { /* 16 x 64 x 128: below the default threshold */
        int len[2] = {30, 34};
        int64_t *off = maxsim_offsets(len, 2);
        float *q = maxsim_rows(16, 128), *d = maxsim_rows(64, 128), g[2];
        const long l0 = bk_cuda_path_launches(be_def, "maxsim");
        CHECK_OK(brisk_maxsim_batch(c_def, q, 16, d, off, 2, 128, true, g));
        CHECK(bk_cuda_path_launches(be_def, "maxsim") == l0);
        free(off), free(q), free(d);
    }
    brisk_context_free(c);
    brisk_context_free(c_def);
    brisk_model_free(m);
    unlink(path);
    rmdir(dir);
}

/* The op over awkward sizes: dim 1, 5, 33 (no multiple of 4, of a stage or a warp), 130, 767 and
 * 4,096; each query-tile height (n_q 1, 3, 8 | 9, 16 | 17, 32 | 33, 64) and several tiles (65, 100);
 * documents of 0 and 1 rows, first and last empty, a document across many blocks (2,100 rows), one
 * document of one row, 2,000 short documents (many to a block); a zero row in q and in d. */
static void test_maxsim(void) {
    static const int mixed[] = {0, 1, 17, 128, 129, 0, 0, 300, 2, 5, 1, 0};
    const int n_mixed = (int)(sizeof mixed / sizeof mixed[0]);
    static const int nqs[] = {1, 3, 8, 9, 16, 17, 32, 33, 64, 65, 100};
    static const int dims[] = {1, 5, 33, 130, 767};
    for (size_t a = 0; a < sizeof nqs / sizeof nqs[0]; a++)
        for (size_t b = 0; b < sizeof dims / sizeof dims[0]; b++) check_maxsim(nqs[a], dims[b], mixed, n_mixed);
    const int one = 1, zero = 0, longest = 2100;
    check_maxsim(7, 4096, mixed, n_mixed);
    check_maxsim(32, 128, &one, 1);
    check_maxsim(5, 64, &zero, 1);
    check_maxsim(64, 128, &longest, 1);
    int *len = maxsim_lengths(2000, 40);
    check_maxsim(32, 128, len, 2000);
    check_maxsim(9, 33, len, 2000);
    free(len);
    maxsim_engine();
}
