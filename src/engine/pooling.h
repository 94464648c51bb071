/* pooling.h — what embeddings add after the forward pass (see brisk.h's embeddings section):
 * the reranking head run on the host, and the names of the pooling types. The public
 * brisk_embd_normalize, brisk_maxsim and brisk_maxsim_batch (late interaction) live in pooling.c
 * too. */
#ifndef BK_POOLING_H
#define BK_POOLING_H
#include "model/model.h"

/* Outputs of the model's reranking head: cls.output's rows, else (cls alone) n_embd; 0: no head. */
int pooling_rank_outputs(const brisk_model *m);
/* out (pooling_rank_outputs floats) = the head over x (n_embd floats), as llama.cpp's graph builds
 * it: tanh(cls x + cls.bias) when cls is present, then cls.output . + cls.output.bias, then a
 * softmax for qwen3 (its reranker's yes/no). tmp: 2 * n_embd floats of scratch. */
brisk_status pooling_rank_head(const brisk_model *m, const float *x, float *out, float *tmp);

#endif
