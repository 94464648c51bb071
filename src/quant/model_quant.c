#include "quant/model_quant.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/progress.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "format/gguf.h"
#include "quant/imatrix.h"
#include "quant/quant.h"
#include "quant/quant_mix.h"

#define MAX_THREADS 256
#define CHUNK_ELEMS 32768 /* rows are handed out in chunks of about this many values */

typedef struct {
    const char *out_path;
    uint64_t total, done; /* input bytes of all tensors, and of those finished */
    int64_t i, n;         /* tensor index, count */
    progress bar;
} quant_progress;

static void progress_draw(quant_progress *p, const char *name, double frac_of_tensor, uint64_t tensor_bytes, bool force) {
    double pct = 100.0 * ((double)p->done + frac_of_tensor * (double)tensor_bytes) / (double)(p->total ? p->total : 1);
    progress_update(&p->bar, force, "%s: %5.1f%% (%lld/%lld) %.40s", p->out_path, pct, (long long)p->i + 1,
                    (long long)p->n, name);
}

typedef struct {
    const gguf_tensor *t;
    uint32_t type;
    const float *imatrix; /* (ne[2], ne[0]) or NULL */
    size_t in_row, out_row;
    int64_t nrows, chunk;
    unsigned char *out;
    float **scratch; /* per thread, CHUNK_ELEMS or ne[0] floats */
    atomic_llong next, rows_done;
    quant_progress *prog; /* drawn by thread 0 */
    brisk_status st[MAX_THREADS];
} quant_job;

static void quant_worker(void *arg, int ith, int nth) {
    quant_job *j = arg;
    const int64_t ne0 = j->t->ne[0], ne1 = j->t->ne[1];
    float *row = j->scratch[ith];
    brisk_status s = BRISK_OK;
    for (;;) {
        int64_t r0 = atomic_fetch_add(&j->next, j->chunk);
        if (r0 >= j->nrows || s != BRISK_OK) break;
        int64_t r1 = r0 + j->chunk < j->nrows ? r0 + j->chunk : j->nrows;
        for (int64_t r = r0; r < r1 && s == BRISK_OK; r++) {
            const float *w = j->imatrix ? j->imatrix + (r / ne1) * ne0 : NULL; /* expert r / ne1 */
            s = quant_dequantize(j->t->type, (const unsigned char *)j->t->data + (size_t)r * j->in_row, row, ne0);
            if (s == BRISK_OK) s = quant_quantize_rows(j->type, row, j->out + (size_t)r * j->out_row, 1, ne0, w);
        }
        int64_t done = atomic_fetch_add(&j->rows_done, r1 - r0) + (r1 - r0);
        if (ith == 0 && j->prog)
            progress_draw(j->prog, j->t->name, (double)done / (double)j->nrows, j->t->nbytes, false);
    }
    (void)nth;
    j->st[ith] = s;
}

/* The imatrix entry for t, checked against its shape (NULL if none). */
static brisk_status imatrix_for(const quant_imatrix *im, const gguf_tensor *t, const float **out) {
    *out = NULL;
    int64_t n = 0;
    const float *v = im ? quant_imatrix_find(im, t->name, &n) : NULL;
    if (!v) return BRISK_OK;
    if (n != t->ne[0] * t->ne[2]) {
        if (!strcmp(t->name, "token_embd.weight")) return BRISK_OK; /* as llama.cpp: ignored there */
        return bk_fail(BRISK_ERR_FORMAT, "quantize: imatrix has %lld values for %s, which needs %lld", (long long)n,
                       t->name, (long long)(t->ne[0] * t->ne[2]));
    }
    *out = v;
    return BRISK_OK;
}

/* Converts tensor t to type into a new buffer (*out, *bytes). */
static brisk_status convert(threadpool *tp, int n_threads, float **scratch, const gguf_tensor *t, uint32_t type,
                            const float *imatrix, quant_progress *prog, unsigned char **out, size_t *bytes) {
    quant_job *j = calloc(1, sizeof *j);
    if (!j) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    j->t = t;
    j->type = type;
    j->imatrix = imatrix;
    j->in_row = quant_row_size(t->type, t->ne[0]);
    j->out_row = quant_row_size(type, t->ne[0]);
    j->nrows = t->ne[1] * t->ne[2] * t->ne[3];
    j->chunk = t->ne[0] >= CHUNK_ELEMS ? 1 : CHUNK_ELEMS / t->ne[0];
    j->scratch = scratch;
    j->prog = prog;
    atomic_init(&j->next, 0);
    atomic_init(&j->rows_done, 0);
    *bytes = j->out_row * (size_t)j->nrows;
    j->out = malloc(*bytes ? *bytes : 1);
    brisk_status s = j->out ? BRISK_OK : bk_fail(BRISK_ERR_NOMEM, "quantize: cannot hold tensor %s (%zu bytes)", t->name, *bytes);
    if (s == BRISK_OK) threadpool_run(tp, quant_worker, j);
    for (int k = 0; k < n_threads && s == BRISK_OK; k++) s = j->st[k];
    if (s != BRISK_OK) free(j->out);
    else *out = j->out;
    free(j);
    return s;
}

brisk_status model_quantize(const char *in_path, const char *out_path, const model_quant_opts *o) {
    const quant_ftype *ft = quant_ftype_find(o->ftype);
    if (!ft) return bk_fail(BRISK_ERR_INVALID_ARG, "quantize: unknown type '%s'", o->ftype);
    int n_threads = o->n_threads > 0 ? o->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads < 1) n_threads = 1;
    if (n_threads > MAX_THREADS) n_threads = MAX_THREADS;
    /* Writing over the input used to truncate the file being read (a bus error
     * and a lost model); the rename into place would now lose it whole. */
    const char *inputs[2] = {in_path, o->imatrix_path};
    BK_TRY(atomic_file_check_distinct("quantize", out_path, inputs, 2));
    quant_imatrix *im = NULL;
    if (o->imatrix_path) BK_TRY(quant_imatrix_load(o->imatrix_path, &im));
    gguf_file *g = NULL;
    brisk_status s = gguf_open(in_path, &g);
    if (s != BRISK_OK) {
        quant_imatrix_free(im);
        return s;
    }
    const int64_t nt = gguf_tensor_count(g);
    uint32_t *types = malloc((size_t)(nt ? nt : 1) * sizeof *types);
    float **scratch = calloc((size_t)n_threads, sizeof *scratch);
    gguf_writer *w = gguf_writer_new();
    threadpool *tp = NULL;
    if (!types || !scratch || !w) s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
    int n_fallback = 0;
    quant_mix_opts mo = {.pure = o->pure, .has_imatrix = im != NULL};
    if (s == BRISK_OK) s = quant_mix_plan(g, ft, &mo, types, &n_fallback);
    int64_t max_ne0 = 0;
    /* As llama-quantize: a quantized tensor quantized again carries both rounding errors, so it
     * takes a flag that says so. */
    for (int64_t i = 0; s == BRISK_OK && !o->allow_requantize && i < nt; i++) {
        const gguf_tensor *t = gguf_get_tensor(g, i);
        if (types[i] != t->type && t->type != QT_F32 && t->type != QT_F16 && t->type != QT_BF16)
            s = bk_fail(BRISK_ERR_INVALID_ARG, "quantize: %s is already quantized (%s is %s): quantizing it again "
                        "adds a second rounding error; quantize the f16/bf16/f32 model, or pass --allow-requantize",
                        in_path, t->name, quant_type_name(t->type));
    }
    quant_progress prog = {.out_path = out_path, .n = nt};
    progress_begin(&prog.bar, o->progress ? "quantize" : NULL);
    for (int64_t i = 0; s == BRISK_OK && i < nt; i++) {
        const gguf_tensor *t = gguf_get_tensor(g, i);
        if (types[i] != t->type && t->ne[0] > max_ne0) max_ne0 = t->ne[0];
        prog.total += t->nbytes;
    }
    for (int k = 0; s == BRISK_OK && k < n_threads; k++) {
        int64_t n = max_ne0 > CHUNK_ELEMS ? max_ne0 : CHUNK_ELEMS;
        if (!(scratch[k] = malloc((size_t)n * sizeof(float)))) s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    if (s == BRISK_OK) s = threadpool_new(n_threads, &tp);
    for (int64_t i = 0; s == BRISK_OK && i < gguf_kv_count(g); i++) {
        const char *key = gguf_kv_key(g, i);
        if (strcmp(key, "general.file_type") && strcmp(key, "general.quantization_version") &&
            strncmp(key, "split.", 6)) /* a split input (gguf_open reads all its parts) makes one file */
            s = gguf_writer_copy_kv(w, g, i);
    }
    if (s == BRISK_OK) s = gguf_writer_set_u32(w, "general.quantization_version", 2);
    if (s == BRISK_OK) s = gguf_writer_set_u32(w, "general.file_type", ft->id);
    for (int64_t i = 0; s == BRISK_OK && i < nt; i++) {
        const gguf_tensor *t = gguf_get_tensor(g, i);
        s = gguf_writer_add_tensor(w, t->name, types[i], t->n_dims, t->ne);
    }
    if (s == BRISK_OK) s = gguf_writer_begin(w, out_path);
    uint64_t bytes_out = 0;
    int n_no_imatrix = 0;
    for (int64_t i = 0; s == BRISK_OK && i < nt; i++) {
        const gguf_tensor *t = gguf_get_tensor(g, i);
        prog.i = i;
        progress_draw(&prog, t->name, 0.0, t->nbytes, false);
        if (types[i] == t->type) {
            s = gguf_writer_write_tensor(w, t->data, t->nbytes);
            bytes_out += t->nbytes;
        } else {
            const float *imat = NULL;
            s = imatrix_for(im, t, &imat);
            if (s == BRISK_OK && im && !imat) {
                n_no_imatrix++;
                if (ft->id == 21 && types[i] == QT_Q2_K && strcmp(t->name, "output.weight") &&
                    strcmp(t->name, "token_embd.weight")) /* Q2_K_S */
                    s = bk_fail(BRISK_ERR_INVALID_ARG, "quantize: the imatrix has no entry for %s, which Q2_K_S needs",
                                t->name);
            }
            unsigned char *buf = NULL;
            size_t bytes = 0;
            if (s == BRISK_OK)
                s = convert(tp, n_threads, scratch, t, types[i], imat, o->progress ? &prog : NULL, &buf, &bytes);
            if (s == BRISK_OK) s = gguf_writer_write_tensor(w, buf, bytes);
            free(buf);
            bytes_out += bytes;
        }
        prog.done += t->nbytes;
    }
    if (s == BRISK_OK) s = gguf_writer_finish(w);
    if (s != BRISK_OK) progress_end(&prog.bar, NULL);
    else {
        char more[128] = "";
        int k = 0;
        if (n_fallback) k += snprintf(more + k, sizeof more - (size_t)k, ", %d tensor(s) fell back to another type", n_fallback);
        if (n_no_imatrix) snprintf(more + k, sizeof more - (size_t)k, ", %d tensor(s) had no imatrix entry", n_no_imatrix);
        progress_end(&prog.bar, "%s -> %s as %s%s: %.2f MiB -> %.2f MiB in %.1f s%s", in_path, out_path, ft->name,
                     o->pure ? " (pure)" : "", prog.total / 1048576.0, bytes_out / 1048576.0,
                     progress_elapsed(&prog.bar), more);
    }
    threadpool_free(tp);
    for (int k = 0; scratch && k < n_threads; k++) free(scratch[k]);
    free(scratch);
    free(types);
    gguf_writer_free(w);
    gguf_close(g);
    quant_imatrix_free(im);
    return s;
}
