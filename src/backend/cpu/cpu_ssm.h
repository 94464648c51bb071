/* cpu_ssm.h — the CPU backend's Gated DeltaNet ops (short causal conv and
 * the gated delta rule) and the sigmoid gate, split across the backend's
 * thread pool. The contracts are those of ssm_conv, gated_delta and
 * sigmoid_mul in backend/backend.h; cpu_backend.c puts these in its op table. */
#ifndef BK_CPU_SSM_H
#define BK_CPU_SSM_H
#include <stdint.h>

#include "backend/backend.h"
#include "base/threadpool.h"

#define CPU_SSM_MAX_D 512 /* largest head size (d_state) the delta rule takes */

void cpu_ssm_conv(threadpool *tp, const float *x, const bk_weight *w, float *conv, const int32_t *seq, int n,
                  int channels, int d_conv, float *out);
void cpu_gated_delta(threadpool *tp, const float *qkv, const float *b, const float *a, const bk_weight *a_bias,
                     const bk_weight *a_scale, float *ssm, const int32_t *seq, int n, int n_k_heads, int n_v_heads,
                     bool v_grouped, int d, float eps, float *out);
void cpu_sigmoid_mul(float *x, const float *gate, int n_rows, int width, int gate_width);
#endif
