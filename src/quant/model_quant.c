#include "quant/model_quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "base/threadpool.h"
#include "format/gguf.h"
#include "quant/quant.h"

/* llama.cpp's general.file_type for a model made of one type (LLAMA_FTYPE_MOSTLY_*). */
static int file_type_of(uint32_t t) {
    switch (t) {
    case QT_F32: return 0;
    case QT_F16: return 1;
    case QT_Q4_0: return 2;
    case QT_Q4_1: return 3;
    case QT_Q8_0: return 7;
    case QT_Q5_0: return 8;
    case QT_Q5_1: return 9;
    case QT_IQ4_NL: return 25;
    case QT_BF16: return 32;
    default: return -1;
    }
}

static bool should_quantize(const gguf_tensor *t, uint32_t type) {
    size_t n = strlen(t->name);
    if (t->n_dims != 2 || n < 7 || strcmp(t->name + n - 7, ".weight")) return false;
    return t->ne[0] % quant_get_traits(type)->block_elems == 0 && quant_get_traits(t->type)->can_dequantize;
}

typedef struct {
    const gguf_tensor *t;
    uint32_t type;
    size_t in_row, out_row;
    unsigned char *out;
    brisk_status st[256];
} quant_job;

static void quant_worker(void *arg, int ith, int nth) {
    quant_job *j = arg;
    long lo, hi;
    threadpool_range((long)j->t->ne[1], ith, nth, &lo, &hi);
    float *row = malloc((size_t)j->t->ne[0] * sizeof(float));
    brisk_status s = row ? BRISK_OK : bk_fail(BRISK_ERR_NOMEM, "out of memory");
    for (long r = lo; r < hi && s == BRISK_OK; r++) {
        s = quant_dequantize(j->t->type, (const unsigned char *)j->t->data + (size_t)r * j->in_row, row, j->t->ne[0]);
        if (s == BRISK_OK) s = quant_quantize(j->type, row, j->out + (size_t)r * j->out_row, j->t->ne[0]);
    }
    free(row);
    j->st[ith] = s;
}

brisk_status model_quantize(const char *in_path, const char *out_path, uint32_t type, int n_threads, bool progress) {
    const quant_traits *qt = quant_get_traits(type);
    if (!qt || !qt->can_quantize)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "quantize: brisk cannot write type %s yet", quant_type_name(type));
    if (n_threads <= 0) n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads > 256) n_threads = 256;
    gguf_file *g = NULL;
    BK_TRY(gguf_open(in_path, &g));
    gguf_writer *w = gguf_writer_new();
    threadpool *tp = NULL;
    brisk_status s = w ? threadpool_new(n_threads, &tp) : bk_fail(BRISK_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; s == BRISK_OK && i < gguf_kv_count(g); i++)
        if (strcmp(gguf_kv_key(g, i), "general.file_type")) s = gguf_writer_copy_kv(w, g, i);
    if (s == BRISK_OK && file_type_of(type) >= 0) s = gguf_writer_set_u32(w, "general.file_type", (uint32_t)file_type_of(type));
    int64_t nt = gguf_tensor_count(g);
    uint64_t total = 0, done = 0;
    for (int64_t i = 0; s == BRISK_OK && i < nt; i++) {
        const gguf_tensor *t = gguf_get_tensor(g, i);
        uint32_t ot = should_quantize(t, type) ? type : t->type;
        s = gguf_writer_add_tensor(w, t->name, ot, t->n_dims, t->ne);
        total += t->nbytes;
    }
    if (s == BRISK_OK) s = gguf_writer_begin(w, out_path);
    for (int64_t i = 0; s == BRISK_OK && i < nt; i++) {
        const gguf_tensor *t = gguf_get_tensor(g, i);
        if (!should_quantize(t, type)) {
            s = gguf_writer_write_tensor(w, t->data, t->nbytes);
        } else {
            quant_job j = {.t = t, .type = type, .in_row = quant_row_size(t->type, t->ne[0]),
                           .out_row = quant_row_size(type, t->ne[0])};
            size_t bytes = j.out_row * (size_t)t->ne[1];
            j.out = malloc(bytes ? bytes : 1);
            if (!j.out) {
                s = bk_fail(BRISK_ERR_NOMEM, "quantize: cannot hold tensor %s (%zu bytes)", t->name, bytes);
                break;
            }
            threadpool_run(tp, quant_worker, &j);
            for (int k = 0; k < n_threads && s == BRISK_OK; k++) s = j.st[k];
            if (s == BRISK_OK) s = gguf_writer_write_tensor(w, j.out, bytes);
            free(j.out);
        }
        done += t->nbytes;
        if (progress)
            fprintf(stderr, "\rquantizing %s: %5.1f%% (%lld/%lld tensors)", out_path, 100.0 * done / (double)(total ? total : 1),
                    (long long)i + 1, (long long)nt);
    }
    if (s == BRISK_OK) s = gguf_writer_finish(w);
    if (progress) fprintf(stderr, "\n");
    threadpool_free(tp);
    gguf_writer_free(w);
    gguf_close(g);
    return s;
}
