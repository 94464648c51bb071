/* pooling.c — the host side of embeddings: pooling names, the reranking head, normalisation and
 * late-interaction scoring (MaxSim). See brisk.h's embeddings section. */
#include <math.h>
#include <string.h>

#include "base/status.h"
#include "engine/pooling.h"
#include "quant/quant.h"

static const char *const pooling_names[] = {"none", "mean", "cls", "last", "rank"}; /* by brisk_pooling */

int brisk_pooling_from_name(const char *name) {
    for (int i = 0; name && i < 5; i++)
        if (!strcmp(name, pooling_names[i])) return i;
    return -2;
}

const char *brisk_pooling_name(int pooling) {
    return pooling >= 0 && pooling < 5 ? pooling_names[pooling] : pooling == -1 ? "unspecified" : "?";
}

int pooling_rank_outputs(const brisk_model *m) {
    return m->cls_out.host ? (int)m->cls_out.n_out : m->cls.host ? m->hp.n_embd : 0;
}

/* y (w.n_out) = W x (+ b): one dequantized row at a time into row (w.n_in floats). */
static brisk_status head_matvec(const bk_weight *w, const bk_weight *b, const float *x, float *row, float *y) {
    for (int64_t r = 0; r < w->n_out; r++) {
        BK_TRY(quant_dequantize(w->type, (const char *)w->host + (size_t)r * w->row_bytes, row, w->n_in));
        double acc = 0;
        for (int64_t i = 0; i < w->n_in; i++) acc += (double)row[i] * x[i];
        y[r] = (float)acc + (b && b->host ? ((const float *)b->host)[r] : 0.0f);
    }
    return BRISK_OK;
}

brisk_status pooling_rank_head(const brisk_model *m, const float *x, float *out, float *tmp) {
    int d = m->hp.n_embd, n = pooling_rank_outputs(m);
    if (!n) return bk_fail(BRISK_ERR_UNSUPPORTED, "pooling rank needs a classification head (cls / cls.output tensors)");
    float *row = tmp, *h = tmp + d;
    const float *cur = x;
    if (m->cls.host) {
        BK_TRY(head_matvec(&m->cls, &m->cls_b, cur, row, m->cls_out.host ? h : out));
        float *y = m->cls_out.host ? h : out;
        for (int i = 0; i < d; i++) y[i] = tanhf(y[i]);
        cur = y;
    }
    if (m->cls_out.host) BK_TRY(head_matvec(&m->cls_out, &m->cls_out_b, cur, row, out));
    if (m->hp.arch == ARCH_QWEN3) { /* the reranker's yes/no logits become P(yes), P(no) */
        float mx = out[0];
        for (int i = 1; i < n; i++) mx = out[i] > mx ? out[i] : mx;
        double sum = 0;
        for (int i = 0; i < n; i++) sum += out[i] = expf(out[i] - mx);
        for (int i = 0; i < n; i++) out[i] = (float)(out[i] / sum);
    }
    return BRISK_OK;
}

void brisk_embd_normalize(const float *in, float *out, int n, int norm) {
    double sum = 0;
    if (norm < 0) {
        sum = 1;
    } else if (norm == 0) { /* to the int16 range */
        for (int i = 0; i < n; i++) sum = fabs(in[i]) > sum ? fabs(in[i]) : sum;
        sum /= 32760.0;
    } else if (norm == 2) {
        for (int i = 0; i < n; i++) sum += (double)in[i] * in[i];
        sum = sqrt(sum);
    } else {
        for (int i = 0; i < n; i++) sum += pow(fabs(in[i]), norm);
        sum = pow(sum, 1.0 / norm);
    }
    float scale = sum > 0 ? (float)(1.0 / sum) : 0.0f;
    for (int i = 0; i < n; i++) out[i] = in[i] * scale;
}

/* MaxSim without the (n_q, n_d) similarity matrix: query rows go four at a time, so each
 * document row is read once per four queries and its dot products fold straight into the four
 * running maxima. */
float brisk_maxsim(const float *q, int n_q, const float *d, int n_d, int dim) {
    if (n_q <= 0 || n_d <= 0 || dim <= 0) return 0.0f;
    double total = 0;
    int i = 0;
    for (; i + 4 <= n_q; i += 4) {
        const float *q0 = q + (size_t)i * dim, *q1 = q0 + dim, *q2 = q1 + dim, *q3 = q2 + dim;
        float m0 = -INFINITY, m1 = -INFINITY, m2 = -INFINITY, m3 = -INFINITY;
        for (int j = 0; j < n_d; j++) {
            const float *dr = d + (size_t)j * dim;
            float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int k = 0; k < dim; k++) {
                float x = dr[k];
                s0 += q0[k] * x, s1 += q1[k] * x, s2 += q2[k] * x, s3 += q3[k] * x;
            }
            m0 = s0 > m0 ? s0 : m0, m1 = s1 > m1 ? s1 : m1, m2 = s2 > m2 ? s2 : m2, m3 = s3 > m3 ? s3 : m3;
        }
        total += (double)m0 + m1 + m2 + m3;
    }
    for (; i < n_q; i++) {
        const float *qr = q + (size_t)i * dim;
        float m = -INFINITY;
        for (int j = 0; j < n_d; j++) {
            const float *dr = d + (size_t)j * dim;
            float s = 0;
            for (int k = 0; k < dim; k++) s += qr[k] * dr[k];
            m = s > m ? s : m;
        }
        total += m;
    }
    return (float)total;
}
