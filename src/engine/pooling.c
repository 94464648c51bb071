/* pooling.c — the host side of embeddings: pooling names, the reranking head, normalisation and
 * late-interaction scoring (MaxSim, one document or a batch). See brisk.h's embeddings section. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
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

/* The scale brisk_embd_normalize(x, .., n, 2) multiplies a row by: 1 / its L2 norm, 0 for a zero row. */
static float l2_scale(const float *x, int n) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += (double)x[i] * x[i];
    sum = sqrt(sum);
    return sum > 0 ? (float)(1.0 / sum) : 0.0f;
}

/* MaxSim without the (n_q, n_d) similarity matrix: query rows go four at a time, so each
 * document row is read once per four queries and its dot products fold straight into the four
 * running maxima. qs (n_q), ds (n_d): scales of each row's dot products (its inverse norm: the
 * row normalised without a copy), NULL: 1 (a product by 1 is exact: brisk_maxsim's sums). */
static double maxsim_rows(const float *q, int n_q, const float *d, int64_t n_d, int dim, const float *qs,
                          const float *ds) {
    double total = 0;
    int i = 0;
    for (; i + 4 <= n_q; i += 4) {
        const float *q0 = q + (size_t)i * dim, *q1 = q0 + dim, *q2 = q1 + dim, *q3 = q2 + dim;
        float m0 = -INFINITY, m1 = -INFINITY, m2 = -INFINITY, m3 = -INFINITY;
        for (int64_t j = 0; j < n_d; j++) {
            const float *dr = d + (size_t)j * dim, sj = ds ? ds[j] : 1.0f;
            float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int k = 0; k < dim; k++) {
                float x = dr[k];
                s0 += q0[k] * x, s1 += q1[k] * x, s2 += q2[k] * x, s3 += q3[k] * x;
            }
            s0 *= sj, s1 *= sj, s2 *= sj, s3 *= sj;
            m0 = s0 > m0 ? s0 : m0, m1 = s1 > m1 ? s1 : m1, m2 = s2 > m2 ? s2 : m2, m3 = s3 > m3 ? s3 : m3;
        }
        if (qs) total += (double)m0 * qs[i] + (double)m1 * qs[i + 1] + (double)m2 * qs[i + 2] + (double)m3 * qs[i + 3];
        else total += (double)m0 + m1 + m2 + m3;
    }
    for (; i < n_q; i++) {
        const float *qr = q + (size_t)i * dim;
        float m = -INFINITY;
        for (int64_t j = 0; j < n_d; j++) {
            const float *dr = d + (size_t)j * dim;
            float s = 0;
            for (int k = 0; k < dim; k++) s += qr[k] * dr[k];
            if (ds) s *= ds[j];
            m = s > m ? s : m;
        }
        total += qs ? (double)m * qs[i] : m;
    }
    return total;
}

float brisk_maxsim(const float *q, int n_q, const float *d, int n_d, int dim) {
    if (n_q <= 0 || n_d <= 0 || dim <= 0) return 0.0f;
    return (float)maxsim_rows(q, n_q, d, n_d, dim, NULL, NULL);
}

/* brisk_maxsim_batch on the host, a document at a time; normalising scales each dot product by
 * its rows' inverse norms (the query's once, each document's when it comes). */
static brisk_status maxsim_batch_cpu(const float *q, int n_q, const float *d, const int64_t *off, int n_docs, int dim,
                                     bool normalize, float *scores) {
    int64_t longest = 0;
    for (int j = 0; j < n_docs; j++) longest = off[j + 1] - off[j] > longest ? off[j + 1] - off[j] : longest;
    float *qs = NULL, *ds = NULL;
    if (normalize && n_q > 0 && longest > 0) {
        qs = malloc((size_t)n_q * sizeof *qs);
        ds = malloc((size_t)longest * sizeof *ds);
        if (!qs || !ds) {
            free(qs);
            free(ds);
            return bk_fail(BRISK_ERR_NOMEM, "maxsim: out of memory for %lld row scales", (long long)longest);
        }
        for (int i = 0; i < n_q; i++) qs[i] = l2_scale(q + (size_t)i * dim, dim);
    }
    for (int j = 0; j < n_docs; j++) {
        const int64_t n_d = off[j + 1] - off[j];
        const float *rows = d + (size_t)off[j] * dim;
        if (n_q <= 0 || n_d <= 0) {
            scores[j] = 0.0f;
            continue;
        }
        if (ds)
            for (int64_t r = 0; r < n_d; r++) ds[r] = l2_scale(rows + (size_t)r * dim, dim);
        scores[j] = (float)maxsim_rows(q, n_q, rows, n_d, dim, qs, ds);
    }
    free(qs);
    free(ds);
    return BRISK_OK;
}

brisk_status brisk_maxsim_batch(brisk_context *ctx, const float *q, int n_q, const float *d, const int64_t *off,
                                int n_docs, int dim, bool normalize, float *scores) {
    if (n_q < 0 || n_docs < 0 || dim <= 0 || !off || (n_q > 0 && !q) || (n_docs > 0 && !scores))
        return bk_fail(BRISK_ERR_INVALID_ARG, "maxsim: bad arguments (n_q %d, n_docs %d, dim %d)", n_q, n_docs, dim);
    if (off[0] < 0) return bk_fail(BRISK_ERR_INVALID_ARG, "maxsim: a negative offset (%lld)", (long long)off[0]);
    for (int j = 0; j < n_docs; j++)
        if (off[j + 1] < off[j])
            return bk_fail(BRISK_ERR_INVALID_ARG, "maxsim: document %d ends (%lld) before it starts (%lld)", j,
                           (long long)off[j + 1], (long long)off[j]);
    if (n_docs == 0) return BRISK_OK;
    const int64_t total = off[n_docs] - off[0];
    if (total > 0 && !d) return bk_fail(BRISK_ERR_INVALID_ARG, "maxsim: no document rows");
    (void)ctx; /* (the GPU kernel waits on branch lab/maxsim-gpu for its measurement) */
    return maxsim_batch_cpu(q, n_q, d, off, n_docs, dim, normalize, scores);
}
