/* gguf_rows.h — writing a GGUF's tensors from rows produced on the fly, on
 * all cores, in bounded memory (brisk synth, brisk convert).
 *
 * For each tensor the caller gives a row function that fills one row of f32
 * values (row = index over all of the tensor's rows, ne[1] * ne[2]). Worker
 * threads claim rows in chunks, call it, convert each row to the tensor's type
 * (f32 as is, f16/bf16 element by element, others through
 * quant_quantize_rows) into one of two slabs, while thread 0 first writes the
 * other slab: generation and output overlap, and memory stays two slabs plus
 * two rows of floats per thread whatever the model size.
 *
 * Usage: declare the tensors on a gguf_writer, gguf_writer_begin(), then
 * gguf_rows_new(), gguf_rows_tensor() for each tensor in declaration order,
 * gguf_rows_finish() (writes what is pending), gguf_writer_finish(),
 * gguf_rows_free(). */
#ifndef BK_GGUF_ROWS_H
#define BK_GGUF_ROWS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "brisk.h"
#include "format/gguf.h"

/* Fills x (ne0 floats) with row `row` of the current tensor; tmp is ne0 more
 * floats of scratch. Called from several threads at once, each row once. */
typedef brisk_status (*gguf_row_fn)(void *ctx, int64_t row, float *x, float *tmp);

typedef struct gguf_rows_opts {
    int n_threads;          /* workers (>= 1) */
    size_t slab_bytes;      /* output bytes per step (0: 32 MiB); raised to the largest row */
    int64_t max_ne0;        /* the longest row of any tensor */
    size_t max_row_bytes;   /* the largest converted row of any tensor */
    const char *label;      /* a progress line on stderr under this label; NULL: quiet */
    uint64_t total_bytes;   /* tensor data bytes of the whole file (progress) */
    int64_t n_tensors;
} gguf_rows_opts;

typedef struct gguf_rows gguf_rows;

brisk_status gguf_rows_new(gguf_writer *w, const gguf_rows_opts *o, gguf_rows **out);
/* Produces, converts and streams out the next tensor: `rows` rows of ne0 values in `type`. */
brisk_status gguf_rows_tensor(gguf_rows *r, uint32_t type, int64_t ne0, int64_t rows, gguf_row_fn fn, void *ctx);
/* From the next tensor on, tensors of more than `period` rows repeat their first `period` rows
 * (generated and converted once): fast synthesis of benchmark models (0: off, the default). */
void gguf_rows_set_period(gguf_rows *r, int64_t period);
/* Writes the last pending slab and ends the progress line. */
brisk_status gguf_rows_finish(gguf_rows *r);
void gguf_rows_free(gguf_rows *r);
#endif
