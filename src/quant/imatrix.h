/* imatrix.h — importance matrices written by llama.cpp's llama-imatrix, read
 * for `brisk quantize --imatrix`.
 *
 * Two formats, told apart by the first 4 bytes:
 *  - GGUF (llama-imatrix's default since 2025): per weight tensor NAME, two
 *    F32 tensors NAME.in_sum2 (ne0 x n_expert sums of squared activations)
 *    and NAME.counts (n_expert token counts), plus the keys imatrix.datasets,
 *    imatrix.chunk_count and imatrix.chunk_size (required, as in llama.cpp).
 *    Importance = in_sum2 / count per expert (1 where the count is 0).
 *  - legacy .dat: i32 n_entries; n_entries x { i32 len; len bytes name;
 *    i32 ncall; i32 nval; nval x f32 }; then optionally i32 chunk count,
 *    i32 len and a dataset name. Importance = value / ncall (as is when
 *    ncall is 0).
 * Non-finite values are an error, as in llama.cpp. */
#ifndef BK_IMATRIX_H
#define BK_IMATRIX_H
#include <stdint.h>

#include "brisk.h"

typedef struct quant_imatrix quant_imatrix;

brisk_status quant_imatrix_load(const char *path, quant_imatrix **out);
void quant_imatrix_free(quant_imatrix *m);
int64_t quant_imatrix_count(const quant_imatrix *m);
/* The importance vector for the weight tensor `name` (*n values: ne0 times
 * the number of experts), NULL if the file has none. Owned by m. */
const float *quant_imatrix_find(const quant_imatrix *m, const char *name, int64_t *n);

#endif
