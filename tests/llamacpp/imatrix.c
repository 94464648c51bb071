/* imatrix.c — llama-imatrix's collector and legacy writer (imatrix.h). */
#include "imatrix.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *name;     /* the weight's name */
    float *sum;     /* (n_mat, ne0) sums of squared activations; float, as llama-imatrix adds them */
    int64_t *rows;  /* (n_mat) rows summed per expert, or one count for a dense product */
    int64_t ne0, n_mat;
    int n_rows;     /* entries in rows: n_mat for expert products, 1 for dense ones */
} imx_entry;

struct imx {
    imx_entry *e;
    int n, cap, chunk;
    char err[256]; /* the first error met while collecting; "" if none */
};

imx *imx_new(int chunk_size) {
    imx *m = calloc(1, sizeof *m);
    if (m) m->chunk = chunk_size > 0 ? chunk_size : 1;
    return m;
}

void imx_free(imx *m) {
    for (int i = 0; m && i < m->n; i++) free(m->e[i].name), free(m->e[i].sum), free(m->e[i].rows);
    if (m) free(m->e);
    free(m);
}

/* The entry of `name` (ne0 x n_mat values, n_rows counts), made on first use; NULL (m->err set) if
 * it exists with another shape or memory runs out. */
static imx_entry *entry(imx *m, const char *name, int64_t ne0, int64_t n_mat, int n_rows) {
    for (int i = 0; i < m->n; i++) {
        imx_entry *e = &m->e[i];
        if (strcmp(e->name, name)) continue;
        if (e->ne0 == ne0 && e->n_mat == n_mat && e->n_rows == n_rows) return e;
        snprintf(m->err, sizeof m->err, "%s: used with two shapes (a tensor both dense and routed?)", name);
        return NULL;
    }
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 64;
        imx_entry *ne = realloc(m->e, sizeof *ne * (size_t)cap);
        if (!ne) return snprintf(m->err, sizeof m->err, "out of memory"), NULL;
        m->e = ne, m->cap = cap;
    }
    imx_entry *e = &m->e[m->n];
    *e = (imx_entry){strdup(name), calloc((size_t)(ne0 * n_mat), sizeof(float)), calloc((size_t)n_rows, sizeof(int64_t)),
                     ne0, n_mat, n_rows};
    if (!e->name || !e->sum || !e->rows) {
        free(e->name), free(e->sum), free(e->rows);
        return snprintf(m->err, sizeof m->err, "out of memory"), NULL;
    }
    m->n++;
    return e;
}

/* The weight's name without a scheduler copy's decoration ("CPU#blk.0.attn_q.weight#0"), as
 * llama-imatrix's filter_tensor_name; out: 128 bytes. */
static const char *weight_name(const char *name, char *out) {
    const char *p = strchr(name, '#');
    if (!p) return name;
    const char *q = strchr(++p, '#');
    snprintf(out, 128, "%.*s", (int)(q ? q - p : (ptrdiff_t)strlen(p)), p);
    return out;
}

static void add_squares(float *acc, const float *x, int64_t n) {
    for (int64_t j = 0; j < n; j++) acc[j] += x[j] * x[j];
}

bool imx_collect(struct ggml_tensor *t, bool ask, void *user) {
    imx *m = user;
    const struct ggml_tensor *w = t->src[0], *x = t->src[1];
    char nb[128];
    const char *name = w ? weight_name(w->name, nb) : "";
    if (ask) { /* llama-imatrix's choice: every routed product; dense ones of layer weights, 16+ rows */
        if (t->op == GGML_OP_MUL_MAT_ID) return true;
        return t->op == GGML_OP_MUL_MAT && x->ne[1] >= 16 && x->type == GGML_TYPE_F32 && !strncmp(name, "blk.", 4);
    }
    if (m->err[0]) return true;
    if (x->type != GGML_TYPE_F32 || x->nb[0] != sizeof(float)) {
        snprintf(m->err, sizeof m->err, "%s: activations not contiguous f32", w->name);
        return true;
    }
    const char *xd = x->data;
    const int64_t ne0 = x->ne[0];
    imx_entry *e;
    if (t->op == GGML_OP_MUL_MAT_ID) { /* ids (n_used, n_tokens) int32; x (ne0, n_used or 1, n_tokens) */
        const struct ggml_tensor *ids = t->src[2];
        const int64_t n_as = w->ne[2];
        if (x->ne[3] != 1 || ids->ne[1] != x->ne[2]) {
            snprintf(m->err, sizeof m->err, "%s: routed activations of an unexpected shape", w->name);
            return true;
        }
        if (!(e = entry(m, name, ne0, n_as, (int)n_as))) return true;
        for (int64_t k = 0; k < ids->ne[0]; k++)
            for (int64_t r = 0; r < ids->ne[1]; r++) {
                int32_t ex = *(const int32_t *)((const char *)ids->data + r * ids->nb[1] + k * ids->nb[0]);
                if (ex < 0 || ex >= n_as) {
                    snprintf(m->err, sizeof m->err, "%s: expert id %d of %lld", w->name, ex, (long long)n_as);
                    return true;
                }
                add_squares(e->sum + ex * ne0, (const float *)(xd + (k % x->ne[1]) * x->nb[1] + r * x->nb[2]), ne0);
                e->rows[ex]++;
            }
    } else {
        const int64_t n_mat = w->ne[2] * w->ne[3];
        if (!(e = entry(m, name, ne0, n_mat, 1))) return true;
        for (int64_t i3 = 0; i3 < x->ne[3]; i3++)
            for (int64_t i2 = 0; i2 < x->ne[2]; i2++) {
                float *acc = e->sum + ((i3 % w->ne[3]) * w->ne[2] + i2 % w->ne[2]) * ne0;
                for (int64_t r = 0; r < x->ne[1]; r++)
                    add_squares(acc, (const float *)(xd + r * x->nb[1] + i2 * x->nb[2] + i3 * x->nb[3]), ne0);
            }
        e->rows[0] += x->ne[1] * x->ne[2] * x->ne[3] / n_mat;
    }
    for (int64_t i = 0; i < e->ne0 * e->n_mat; i++)
        if (!isfinite(e->sum[i])) {
            snprintf(m->err, sizeof m->err, "%s: non-finite activations", w->name);
            break;
        }
    return true;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const imx_entry *)a)->name, ((const imx_entry *)b)->name);
}

int imx_write(const imx *m, const char *path, int n_chunks, const char *dataset) {
    if (m->err[0]) return fprintf(stderr, "llamacpp-ref: imatrix: %s\n", m->err), 1;
    imx_entry *s = malloc(sizeof *s * (size_t)(m->n ? m->n : 1));
    int32_t n = 0;
    for (int i = 0; s && i < m->n; i++) { /* entries with no row at all are left out, as llama-imatrix does */
        int64_t any = 0;
        for (int k = 0; k < m->e[i].n_rows; k++) any += m->e[i].rows[k];
        if (any) s[n++] = m->e[i];
    }
    if (s) qsort(s, (size_t)n, sizeof *s, by_name);
    FILE *f = s && n ? fopen(path, "wb") : NULL;
    bool ok = f && fwrite(&n, 4, 1, f) == 1;
    for (int32_t i = 0; ok && i < n; i++) {
        int64_t most = 0;
        for (int k = 0; k < s[i].n_rows; k++) most = s[i].rows[k] > most ? s[i].rows[k] : most;
        int32_t len = (int32_t)strlen(s[i].name), ncall = (int32_t)((most + m->chunk - 1) / m->chunk);
        int32_t nval = (int32_t)(s[i].ne0 * s[i].n_mat);
        ok = fwrite(&len, 4, 1, f) == 1 && fwrite(s[i].name, 1, (size_t)len, f) == (size_t)len &&
             fwrite(&ncall, 4, 1, f) == 1 && fwrite(&nval, 4, 1, f) == 1;
        for (int32_t v = 0; ok && v < nval; v++) {
            float rows = (float)s[i].rows[s[i].n_rows > 1 ? v / s[i].ne0 : 0], val = s[i].sum[v];
            if (rows == 0) val = 1, rows = 1; /* an expert no row reached: importance 1 */
            float out = val / rows * (float)ncall;
            ok = fwrite(&out, 4, 1, f) == 1;
        }
    }
    int32_t nc = n_chunks, dl = (int32_t)strlen(dataset);
    ok = ok && fwrite(&nc, 4, 1, f) == 1 && fwrite(&dl, 4, 1, f) == 1 && fwrite(dataset, 1, (size_t)dl, f) == (size_t)dl;
    if (f && fclose(f)) ok = false;
    free(s);
    if (!ok) {
        if (f) remove(path);
        return fprintf(stderr, n ? "llamacpp-ref: imatrix: cannot write %s\n" : "llamacpp-ref: imatrix: no matrix product gathered for %s\n", path), 1;
    }
    fprintf(stderr, "llamacpp-ref: imatrix: %d entries, %d chunks of %d -> %s\n", n, n_chunks, m->chunk, path);
    return 0;
}
