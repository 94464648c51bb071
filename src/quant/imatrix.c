/* imatrix.c — llama-imatrix files, GGUF and legacy (see imatrix.h). */
#include "quant/imatrix.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "format/gguf.h"

typedef struct {
    char *name;
    float *v; /* (n) importance, already divided by the counts */
    int64_t n;
} imatrix_entry;

struct quant_imatrix {
    imatrix_entry *e; /* (n_entries) */
    int64_t n_entries, cap;
};

void quant_imatrix_free(quant_imatrix *m) {
    if (!m) return;
    for (int64_t i = 0; i < m->n_entries; i++) {
        free(m->e[i].name);
        free(m->e[i].v);
    }
    free(m->e);
    free(m);
}

int64_t quant_imatrix_count(const quant_imatrix *m) { return m ? m->n_entries : 0; }

const float *quant_imatrix_find(const quant_imatrix *m, const char *name, int64_t *n) {
    for (int64_t i = 0; m && i < m->n_entries; i++)
        if (!strcmp(m->e[i].name, name)) {
            *n = m->e[i].n;
            return m->e[i].v;
        }
    return NULL;
}

/* Appends an entry of n values (uninitialised); a later entry of the same name replaces it. */
static brisk_status add_entry(quant_imatrix *m, const char *name, size_t name_len, int64_t n, float **v) {
    imatrix_entry *e = NULL;
    for (int64_t i = 0; i < m->n_entries; i++)
        if (strlen(m->e[i].name) == name_len && !memcmp(m->e[i].name, name, name_len)) e = &m->e[i];
    if (!e) {
        if (m->n_entries == m->cap) {
            int64_t cap = m->cap ? 2 * m->cap : 64;
            imatrix_entry *ne = realloc(m->e, (size_t)cap * sizeof *ne);
            if (!ne) return bk_fail(BRISK_ERR_NOMEM, "imatrix: out of memory");
            m->e = ne;
            m->cap = cap;
        }
        e = &m->e[m->n_entries];
        *e = (imatrix_entry){0};
        if (!(e->name = malloc(name_len + 1))) return bk_fail(BRISK_ERR_NOMEM, "imatrix: out of memory");
        memcpy(e->name, name, name_len);
        e->name[name_len] = 0;
        m->n_entries++;
    }
    free(e->v);
    e->n = n;
    if (!(e->v = malloc((size_t)n * sizeof(float)))) return bk_fail(BRISK_ERR_NOMEM, "imatrix: out of memory");
    *v = e->v;
    return BRISK_OK;
}

static brisk_status check_finite(const char *path, const char *name, const float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return bk_fail(BRISK_ERR_FORMAT, "imatrix %s: non-finite value in %s", path, name);
    return BRISK_OK;
}

/* ---- legacy .dat ---- */

static bool read_i32(FILE *f, int32_t *v) { return fread(v, 4, 1, f) == 1; }

static brisk_status load_legacy(const char *path, FILE *f, quant_imatrix *m) {
    int32_t n_entries;
    if (!read_i32(f, &n_entries) || n_entries < 1) return bk_fail(BRISK_ERR_FORMAT, "imatrix %s: no entries", path);
    char name[4096];
    for (int32_t i = 0; i < n_entries; i++) {
        int32_t len, ncall, nval;
        if (!read_i32(f, &len) || len < 1 || len >= (int32_t)sizeof name || fread(name, 1, (size_t)len, f) != (size_t)len)
            return bk_fail(BRISK_ERR_FORMAT, "imatrix %s: bad name of entry %d", path, (int)i);
        name[len] = 0;
        if (!read_i32(f, &ncall) || !read_i32(f, &nval) || nval < 1 || nval > (1 << 28))
            return bk_fail(BRISK_ERR_FORMAT, "imatrix %s: bad size of entry %s", path, name);
        float *v;
        BK_TRY(add_entry(m, name, (size_t)len, nval, &v));
        if (fread(v, 4, (size_t)nval, f) != (size_t)nval)
            return bk_fail(BRISK_ERR_FORMAT, "imatrix %s: entry %s is cut short", path, name);
        if (ncall > 0)
            for (int32_t k = 0; k < nval; k++) v[k] = v[k] / (float)(int64_t)ncall;
        BK_TRY(check_finite(path, name, v, nval));
    }
    return BRISK_OK; /* trailing chunk count and dataset name: not needed */
}

/* ---- GGUF ---- */

static bool strip_suffix(const char *s, const char *suffix, size_t *stem) {
    size_t n = strlen(s), k = strlen(suffix);
    if (n <= k || strcmp(s + n - k, suffix)) return false;
    *stem = n - k;
    return true;
}

static brisk_status load_gguf(const char *path, quant_imatrix *m) {
    gguf_file *g = NULL;
    BK_TRY(gguf_open(path, &g));
    brisk_status s = BRISK_OK;
    if (gguf_find_key(g, "imatrix.datasets") < 0 || gguf_find_key(g, "imatrix.chunk_count") < 0 ||
        gguf_find_key(g, "imatrix.chunk_size") < 0)
        s = bk_fail(BRISK_ERR_FORMAT, "imatrix %s: missing imatrix metadata (imatrix.datasets, chunk_count, chunk_size)",
                    path);
    for (int64_t i = 0; s == BRISK_OK && i < gguf_tensor_count(g); i++) {
        const gguf_tensor *sums = gguf_get_tensor(g, i);
        size_t stem;
        if (!strip_suffix(sums->name, ".in_sum2", &stem)) continue;
        char cname[80];
        snprintf(cname, sizeof cname, "%.*s.counts", (int)stem, sums->name);
        const gguf_tensor *cnt = gguf_find_tensor(g, cname);
        if (!cnt) {
            s = bk_fail(BRISK_ERR_FORMAT, "imatrix %s: %s has no %s", path, sums->name, cname);
            break;
        }
        if (sums->type != 0 || cnt->type != 0) {
            s = bk_fail(BRISK_ERR_FORMAT, "imatrix %s: sums and counts of %.*s must be F32", path, (int)stem, sums->name);
            break;
        }
        const int64_t nval = (int64_t)(sums->nbytes / 4), ncounts = (int64_t)(cnt->nbytes / 4);
        if (ncounts < 1 || nval % ncounts) {
            s = bk_fail(BRISK_ERR_FORMAT, "imatrix %s: %zu sums do not split into %lld experts", path,
                        (size_t)nval, (long long)ncounts);
            break;
        }
        float *v;
        if ((s = add_entry(m, sums->name, stem, nval, &v)) != BRISK_OK) break;
        const int64_t ne0 = nval / ncounts;
        for (int64_t j = 0; j < ncounts; j++) {
            float c;
            memcpy(&c, (const char *)cnt->data + 4 * j, 4);
            const float count = (float)lroundf(c); /* stored as a float, used as an integer */
            for (int64_t k = 0; k < ne0; k++) {
                float sum;
                memcpy(&sum, (const char *)sums->data + 4 * (j * ne0 + k), 4);
                v[j * ne0 + k] = count > 0.0f ? sum / count : 1.0f;
            }
        }
        s = check_finite(path, sums->name, v, nval);
    }
    gguf_close(g);
    if (s == BRISK_OK && m->n_entries == 0) s = bk_fail(BRISK_ERR_FORMAT, "imatrix %s: no data", path);
    return s;
}

brisk_status quant_imatrix_load(const char *path, quant_imatrix **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return bk_fail(BRISK_ERR_IO, "imatrix: cannot open %s", path);
    char magic[4] = {0};
    size_t got = fread(magic, 1, 4, f);
    quant_imatrix *m = calloc(1, sizeof *m);
    brisk_status s;
    if (!m) s = bk_fail(BRISK_ERR_NOMEM, "imatrix: out of memory");
    else if (got == 4 && !memcmp(magic, "GGUF", 4)) s = load_gguf(path, m);
    else s = fseek(f, 0, SEEK_SET) ? bk_fail(BRISK_ERR_IO, "imatrix: cannot read %s", path) : load_legacy(path, f, m);
    fclose(f);
    if (s != BRISK_OK) {
        quant_imatrix_free(m);
        return s;
    }
    *out = m;
    return BRISK_OK;
}
