/* pooling.h — what embeddings add after the forward pass (see brisk.h's embeddings section):
 * the reranking head run on the host, and the names of the pooling types. The public
 * brisk_embd_normalize, brisk_maxsim and brisk_maxsim_batch (late interaction: on the CPU, or on
 * the context's GPU through the backend's maxsim op) live in pooling.c too. */
#ifndef BK_POOLING_H
#define BK_POOLING_H
#include "model/model.h"

/* Outputs of the model's reranking head: cls.output's rows, else (cls alone) n_embd; 0: no head. */
int pooling_rank_outputs(const brisk_model *m);
/* out (pooling_rank_outputs floats) = the head over x (n_embd floats), as llama.cpp's graph builds
 * it: tanh(cls x + cls.bias) when cls is present, then cls.output . + cls.output.bias, then a
 * softmax for qwen3 (its reranker's yes/no). tmp: 2 * n_embd floats of scratch. */
brisk_status pooling_rank_head(const brisk_model *m, const float *x, float *out, float *tmp);

/* Defined in context.c, for work beside the forward passes: */
/* The backend of c's last stage when it is a CUDA backend (the model's output layer is on a GPU),
 * else NULL (also for c NULL). */
bk_backend *ctx_gpu_backend(const brisk_context *c);
/* *mem = at least `bytes` of that backend's memory, kept by c (made at the first call, made anew
 * larger when a call needs more; its contents are not kept then) and freed with it. The caller
 * owns the contents until its next call. BRISK_ERR_UNSUPPORTED without a GPU stage,
 * BRISK_ERR_NOMEM when the device has not the room. */
brisk_status ctx_side_memory(brisk_context *c, size_t bytes, void **mem);
#endif
