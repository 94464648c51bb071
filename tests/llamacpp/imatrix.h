/* imatrix.h — llama-imatrix's statistics, gathered inside llamacpp-ref (`llamacpp-ref imatrix`),
 * so that brisk's `quantize --imatrix` and llama.cpp's read one importance matrix made by
 * llama.cpp itself (bench/quant_quality.sh).
 *
 * What is gathered is what tools/imatrix/imatrix.cpp (v0.4.0) gathers: for every matrix product
 * whose weight is a layer's (name "blk.*"), over batches of 16+ tokens, the sum of the squared
 * f32 activations per input column and the number of rows summed; for the expert products
 * (MUL_MAT_ID), per expert, the rows routed to it. The file is its legacy .dat: entries sorted by
 * name, each value (sum / rows) * ncall with ncall = ceil(most rows / chunk), 1 where an expert got
 * no row, then the chunk count and the text's name.
 *
 * The collector reads the activations in host memory: the CPU backend only. Owns its entries;
 * imx_free releases them. */
#ifndef LLAMACPP_IMATRIX_H
#define LLAMACPP_IMATRIX_H
#include <stdbool.h>

#include "ggml.h"

typedef struct imx imx;

imx *imx_new(int chunk_size); /* NULL: out of memory */
void imx_free(imx *m);
/* llama_context_params.cb_eval (user: the imx) */
bool imx_collect(struct ggml_tensor *t, bool ask, void *user);
/* Writes the legacy .dat; 0, or 1 with a message on stderr (also for an error met while
 * collecting: non-finite activations, out of memory, a shape it cannot store). */
int imx_write(const imx *m, const char *path, int n_chunks, const char *dataset);

#endif
