/* gguf_rows.c — see gguf_rows.h. */
#include "format/gguf_rows.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/progress.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "quant/quant.h"

#define MAX_THREADS 256
#define SLAB_BYTES ((size_t)32 << 20)
#define CHUNK_ELEMS 65536 /* rows are claimed in chunks of about this many values */

struct gguf_rows {
    gguf_writer *w;
    threadpool *tp;
    int n_threads;
    float **scratch;       /* per thread: 2 * max_ne0 floats */
    unsigned char *slab[2];
    size_t slab_cap;
    int cur;               /* the slab to fill next; the other is pending */
    uint64_t pend_bytes;
    progress prog; /* the opts' label: quiet without one */
    int64_t n_tensors, i;
    uint64_t total, done;  /* output bytes: all, and of written slabs */
    int64_t period;        /* > 0: a tensor's rows repeat its first `period` rows (gguf_rows_set_period) */
};

typedef struct {
    gguf_rows *r;
    uint32_t type;
    int64_t ne0, row0, nrows, chunk;
    size_t row_bytes;
    gguf_row_fn fn;
    void *ctx;
    unsigned char *out;
    const unsigned char *cache; /* the first `period` converted rows, copied for every row; or NULL */
    int64_t period;
    bool no_flush;              /* producing the cache: the pending slab waits for the tensor's rows */
    atomic_llong next, rows_done;
    brisk_status st[MAX_THREADS];
} rows_job;

static void progress_draw(gguf_rows *r, uint64_t extra, bool force) {
    double t = progress_elapsed(&r->prog);
    double done = (double)(r->done + extra), rate = done / (t > 1e-6 ? t : 1e-6);
    double eta = rate > 0 ? ((double)r->total - done) / rate : 0;
    progress_update(&r->prog, force, "tensor %lld/%lld %5.1f%% %7.1f MB/s ETA %4.0fs", (long long)r->i + 1,
                    (long long)r->n_tensors, 100.0 * done / (double)(r->total ? r->total : 1), rate / 1e6, eta);
}

static brisk_status convert_row(uint32_t type, const float *x, unsigned char *dst, int64_t ne0) {
    if (type == QT_F16)
        for (int64_t k = 0; k < ne0; k++) ((uint16_t *)dst)[k] = quant_f32_to_f16(x[k]);
    else if (type == QT_BF16)
        for (int64_t k = 0; k < ne0; k++) ((uint16_t *)dst)[k] = quant_f32_to_bf16(x[k]);
    else if (type == QT_I64) /* whole numbers below 2^24, exact in f32 (token ids) */
        for (int64_t k = 0; k < ne0; k++) {
            int64_t v = (int64_t)x[k];
            memcpy(dst + 8 * k, &v, 8);
        }
    else if (type != QT_F32)
        return quant_quantize_rows(type, x, dst, 1, ne0, NULL);
    return BRISK_OK;
}

static void rows_worker(void *arg, int ith, int nth) {
    rows_job *j = arg;
    gguf_rows *r = j->r;
    brisk_status s = BRISK_OK;
    (void)nth;
    if (ith == 0 && r->pend_bytes && !j->no_flush) s = gguf_writer_write_rows(r->w, r->slab[r->cur ^ 1], r->pend_bytes);
    float *x = r->scratch[ith], *tmp = x + j->ne0;
    while (s == BRISK_OK) {
        int64_t r0 = atomic_fetch_add(&j->next, j->chunk);
        if (r0 >= j->nrows) break;
        int64_t r1 = r0 + j->chunk < j->nrows ? r0 + j->chunk : j->nrows;
        for (int64_t k = r0; k < r1 && s == BRISK_OK; k++) {
            unsigned char *dst = j->out + (size_t)k * j->row_bytes;
            if (j->cache) {
                memcpy(dst, j->cache + (size_t)((j->row0 + k) % j->period) * j->row_bytes, j->row_bytes);
                continue;
            }
            float *row = j->type == QT_F32 ? (float *)dst : x; /* f32 rows are produced in place */
            s = j->fn(j->ctx, j->row0 + k, row, tmp);
            if (s == BRISK_OK) s = convert_row(j->type, row, dst, j->ne0);
        }
        int64_t done = atomic_fetch_add(&j->rows_done, r1 - r0) + (r1 - r0);
        if (ith == 0) progress_draw(r, (uint64_t)done * j->row_bytes, false);
    }
    j->st[ith] = s;
}

brisk_status gguf_rows_new(gguf_writer *w, const gguf_rows_opts *o, gguf_rows **out) {
    *out = NULL;
    if (o->n_threads < 1 || o->n_threads > MAX_THREADS)
        return bk_fail(BRISK_ERR_INVALID_ARG, "threads must be in [1, %d]", MAX_THREADS);
    gguf_rows *r = calloc(1, sizeof *r);
    if (!r) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    r->w = w;
    r->n_threads = o->n_threads;
    progress_begin(&r->prog, o->label);
    r->total = o->total_bytes;
    r->n_tensors = o->n_tensors;
    r->i = -1;
    r->slab_cap = o->slab_bytes ? o->slab_bytes : SLAB_BYTES;
    if (r->slab_cap < o->max_row_bytes) r->slab_cap = o->max_row_bytes;
    brisk_status s = (r->scratch = calloc((size_t)r->n_threads, sizeof *r->scratch)) ? BRISK_OK
                                                                                     : bk_fail(BRISK_ERR_NOMEM, "out of memory");
    for (int k = 0; s == BRISK_OK && k < r->n_threads; k++)
        if (!(r->scratch[k] = malloc((size_t)(2 * (o->max_ne0 > 0 ? o->max_ne0 : 1)) * sizeof(float))))
            s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
    for (int k = 0; s == BRISK_OK && k < 2; k++)
        if (!(r->slab[k] = malloc(r->slab_cap))) s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
    if (s == BRISK_OK) s = threadpool_new(r->n_threads, &r->tp);
    if (s != BRISK_OK) {
        gguf_rows_free(r);
        return s;
    }
    *out = r;
    return BRISK_OK;
}

brisk_status gguf_rows_tensor(gguf_rows *r, uint32_t type, int64_t ne0, int64_t rows, gguf_row_fn fn, void *ctx) {
    const size_t rb = quant_row_size(type, ne0);
    if (!rb) return bk_fail(BRISK_ERR_INVALID_ARG, "rows of %lld values do not fit type %s", (long long)ne0,
                            quant_type_name(type));
    const int64_t per_slab = r->slab_cap / rb > 0 ? (int64_t)(r->slab_cap / rb) : 1;
    rows_job *j = calloc(1, sizeof *j);
    if (!j) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    *j = (rows_job){.r = r, .type = type, .ne0 = ne0, .row_bytes = rb, .fn = fn, .ctx = ctx,
                    .chunk = ne0 >= CHUNK_ELEMS ? 1 : CHUNK_ELEMS / ne0};
    r->i++;
    brisk_status s = BRISK_OK;
    unsigned char *cache = NULL;
    if (r->period > 0 && rows > r->period) { /* the first rows once, then copies */
        if (!(cache = malloc((size_t)r->period * rb))) {
            free(j);
            return bk_fail(BRISK_ERR_NOMEM, "out of memory");
        }
        j->row0 = 0;
        j->nrows = r->period;
        j->out = cache;
        j->no_flush = true;
        atomic_init(&j->next, 0);
        atomic_init(&j->rows_done, 0);
        threadpool_run(r->tp, rows_worker, j);
        for (int k = 0; k < r->n_threads && s == BRISK_OK; k++) s = j->st[k];
        j->no_flush = false;
        j->cache = cache;
        j->period = r->period;
        j->chunk = 64;
    }
    for (int64_t r0 = 0; r0 < rows && s == BRISK_OK; r0 += per_slab) {
        j->row0 = r0;
        j->nrows = rows - r0 < per_slab ? rows - r0 : per_slab;
        j->out = r->slab[r->cur];
        atomic_init(&j->next, 0);
        atomic_init(&j->rows_done, 0);
        r->done += r->pend_bytes; /* thread 0 writes it in this step */
        threadpool_run(r->tp, rows_worker, j);
        for (int k = 0; k < r->n_threads && s == BRISK_OK; k++) s = j->st[k];
        r->pend_bytes = (uint64_t)j->nrows * rb;
        r->cur ^= 1;
    }
    free(j);
    free(cache);
    return s;
}

void gguf_rows_set_period(gguf_rows *r, int64_t period) { r->period = period > 0 ? period : 0; }

brisk_status gguf_rows_finish(gguf_rows *r) {
    brisk_status s = r->pend_bytes ? gguf_writer_write_rows(r->w, r->slab[r->cur ^ 1], r->pend_bytes) : BRISK_OK;
    r->done += r->pend_bytes;
    r->pend_bytes = 0;
    progress_draw(r, 0, true);
    progress_end(&r->prog, NULL);
    return s;
}

void gguf_rows_free(gguf_rows *r) {
    if (!r) return;
    progress_end(&r->prog, NULL); /* a failed write: the error goes on a line of its own */
    threadpool_free(r->tp);
    for (int k = 0; r->scratch && k < r->n_threads; k++) free(r->scratch[k]);
    free(r->scratch);
    free(r->slab[0]);
    free(r->slab[1]);
    free(r);
}
