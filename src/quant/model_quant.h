/* model_quant.h — re-quantize a GGUF model file, tensor by tensor.
 * Every 2-D ".weight" matrix whose rows fit the target's block size becomes
 * the target type (like llama-quantize --pure); vectors and odd-width
 * matrices keep their type. Metadata is copied, general.file_type updated.
 * Rows are split across n_threads; one tensor is in memory at a time. */
#ifndef BK_MODEL_QUANT_H
#define BK_MODEL_QUANT_H
#include <stdbool.h>
#include <stdint.h>
#include "brisk.h"

brisk_status model_quantize(const char *in_path, const char *out_path, uint32_t type, int n_threads,
                            bool progress);
#endif
