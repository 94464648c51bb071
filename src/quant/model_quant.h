/* model_quant.h — quantize a GGUF model file the way llama-quantize does.
 * The mix (quant_mix.h) decides each tensor's type; tensors that change type
 * are dequantized to f32 and quantized with quant_quantize_rows (with the
 * imatrix entry of that tensor, if one was given); the others are copied.
 * Metadata is copied; general.file_type and general.quantization_version are
 * set. Rows are shared out among n_threads; one tensor is in memory at a time. */
#ifndef BK_MODEL_QUANT_H
#define BK_MODEL_QUANT_H
#include <stdbool.h>
#include <stdint.h>

#include "brisk.h"

typedef struct model_quant_opts {
    const char *ftype;        /* llama-quantize's name: "Q4_K_M", "Q8_0", "IQ4_XS", ... */
    bool pure;                /* every convertible matrix gets the mix's base type */
    const char *imatrix_path; /* llama-imatrix output (GGUF or legacy .dat), or NULL */
    int n_threads;            /* <= 0: one per core */
    bool progress;            /* a live line on stderr on a terminal (base/progress.h), and a summary line */
    bool allow_requantize;    /* convert tensors that are quantized already (else an error, as llama-quantize) */
} model_quant_opts;

/* Writes out_path.tmp.XXXXXX and renames it over out_path when complete
 * (base/atomic_file.h): out_path may be a model that a running process maps;
 * BRISK_ERR_INVALID_ARG, before any work, if it is in_path's or the imatrix's file. */
brisk_status model_quantize(const char *in_path, const char *out_path, const model_quant_opts *o);
#endif
