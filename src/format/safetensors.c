/* safetensors.c — the validating reader described in safetensors.h. The
 * header is parsed with cJSON; tensor names are copied, data points into
 * the map. */
#include "format/safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/mapfile.h"
#include "base/status.h"
#include "quant/quant.h"

#define MAX_HEADER (100u << 20)
#define MAX_NAME 255

struct st_file {
    mapfile map;                 /* empty for memory files */
    const unsigned char *base;   /* the whole file */
    size_t size;
    const unsigned char *blob;   /* 8 + N */
    uint64_t blob_size;
    st_tensor *t;                /* (n) sorted by data offset */
    int64_t n;
    const st_tensor **by_name;   /* (n) into t, sorted by name */
    char **meta;                 /* (2 * n_meta) key, value */
    int64_t n_meta;
};

static const struct { const char *name; size_t size; } dtypes[ST_DTYPE_COUNT] = {
    [ST_F32] = {"F32", 4}, [ST_F16] = {"F16", 2}, [ST_BF16] = {"BF16", 2}, [ST_F64] = {"F64", 8},
    [ST_I64] = {"I64", 8}, [ST_I32] = {"I32", 4}, [ST_I16] = {"I16", 2}, [ST_I8] = {"I8", 1},
    [ST_U8] = {"U8", 1}, [ST_U16] = {"U16", 2}, [ST_U32] = {"U32", 4}, [ST_U64] = {"U64", 8},
    [ST_BOOL] = {"BOOL", 1}, [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *st_dtype_name(st_dtype t) { return t < ST_DTYPE_COUNT ? dtypes[t].name : "?"; }
size_t st_dtype_size(st_dtype t) { return t < ST_DTYPE_COUNT ? dtypes[t].size : 0; }

/* A JSON number that is an integer in [0, 2^53). */
static bool json_u53(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d < 9007199254740992.0) || floor(d) != d) return false;
    *out = (uint64_t)d;
    return true;
}

static int cmp_offset(const void *a, const void *b) {
    const st_tensor *x = a, *y = b;
    return x->data < y->data ? -1 : x->data > y->data ? 1 : (x->nbytes > y->nbytes) - (x->nbytes < y->nbytes);
}
static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

static brisk_status parse_entry(st_file *f, const cJSON *e, st_tensor *t) {
    const char *nm = e->string;
    size_t len = strlen(nm);
    if (len == 0 || len > MAX_NAME) return bk_fail(BRISK_ERR_FORMAT, "safetensors: tensor name of %zu bytes", len);
    if (!cJSON_IsObject(e)) return bk_fail(BRISK_ERR_FORMAT, "safetensors: '%s' is not an object", nm);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt)) return bk_fail(BRISK_ERR_FORMAT, "safetensors: '%s' has no dtype", nm);
    t->dtype = ST_DTYPE_COUNT;
    for (int k = 0; k < ST_DTYPE_COUNT; k++)
        if (!strcmp(dt->valuestring, dtypes[k].name)) t->dtype = (st_dtype)k;
    if (t->dtype == ST_DTYPE_COUNT)
        return bk_fail(BRISK_ERR_FORMAT, "safetensors: '%s' has unknown dtype '%.32s'", nm, dt->valuestring);
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > ST_MAX_DIMS)
        return bk_fail(BRISK_ERR_FORMAT, "safetensors: '%s' has a bad shape", nm);
    uint64_t n = 1;
    bool overflow = false;
    const cJSON *it;
    t->n_dims = 0;
    cJSON_ArrayForEach(it, sh) {
        uint64_t d;
        if (!json_u53(it, &d)) return bk_fail(BRISK_ERR_FORMAT, "safetensors: '%s' has a bad dimension", nm);
        t->shape[t->n_dims++] = (int64_t)d;
        if (d && n > (UINT64_MAX >> 4) / d) overflow = true;
        n *= d;
    }
    for (int k = t->n_dims; k < ST_MAX_DIMS; k++) t->shape[k] = 1;
    uint64_t b0, b1;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_u53(cJSON_GetArrayItem(off, 0), &b0) ||
        !json_u53(cJSON_GetArrayItem(off, 1), &b1))
        return bk_fail(BRISK_ERR_FORMAT, "safetensors: '%s' has bad data_offsets", nm);
    if (b0 > b1 || b1 > f->blob_size)
        return bk_fail(BRISK_ERR_FORMAT, "safetensors: '%s' data [%llu, %llu) outside the %llu data bytes", nm,
                       (unsigned long long)b0, (unsigned long long)b1, (unsigned long long)f->blob_size);
    if (overflow || n * dtypes[t->dtype].size != b1 - b0)
        return bk_fail(BRISK_ERR_FORMAT, "safetensors: '%s' has %llu bytes, its shape and dtype need %s", nm,
                       (unsigned long long)(b1 - b0), overflow ? "too many" : "another count");
    char *name = malloc(len + 1);
    if (!name) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    memcpy(name, nm, len + 1);
    t->name = name;
    t->n_elems = (int64_t)n;
    t->nbytes = b1 - b0;
    t->data = f->blob + b0;
    return BRISK_OK;
}

static brisk_status parse_meta(st_file *f, const cJSON *m) {
    if (!cJSON_IsObject(m)) return bk_fail(BRISK_ERR_FORMAT, "safetensors: __metadata__ is not an object");
    int n = cJSON_GetArraySize(m);
    if (!(f->meta = calloc((size_t)(2 * n + 1), sizeof *f->meta))) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, m) {
        if (!cJSON_IsString(it)) return bk_fail(BRISK_ERR_FORMAT, "safetensors: __metadata__ value is not a string");
        char *k = strdup(it->string), *v = strdup(it->valuestring);
        f->meta[2 * f->n_meta] = k;
        f->meta[2 * f->n_meta + 1] = v;
        f->n_meta++;
        if (!k || !v) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    return BRISK_OK;
}

static brisk_status parse(st_file *f) {
    if (f->size < 8) return bk_fail(BRISK_ERR_FORMAT, "safetensors: file of %zu bytes is too short", f->size);
    uint64_t hn = 0;
    for (int k = 7; k >= 0; k--) hn = hn << 8 | f->base[k];
    if (hn < 2 || hn > MAX_HEADER || hn > f->size - 8)
        return bk_fail(BRISK_ERR_FORMAT, "safetensors: header size %llu does not fit the %zu-byte file",
                       (unsigned long long)hn, f->size);
    f->blob = f->base + 8 + hn;
    f->blob_size = f->size - 8 - hn;
    cJSON *root = cJSON_ParseWithLength((const char *)f->base + 8, (size_t)hn);
    if (!root) return bk_fail(BRISK_ERR_FORMAT, "safetensors: the header is not valid JSON");
    brisk_status s = cJSON_IsObject(root) ? BRISK_OK : bk_fail(BRISK_ERR_FORMAT, "safetensors: the header is not an object");
    int n = s == BRISK_OK ? cJSON_GetArraySize(root) : 0;
    if (s == BRISK_OK && (!(f->t = calloc((size_t)n + 1, sizeof *f->t)) ||
                          !(f->by_name = calloc((size_t)n + 1, sizeof *f->by_name))))
        s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
    const cJSON *e;
    bool have_meta = false;
    if (s == BRISK_OK) cJSON_ArrayForEach(e, root) {
        if (!strcmp(e->string, "__metadata__")) {
            s = have_meta ? bk_fail(BRISK_ERR_FORMAT, "safetensors: two __metadata__ entries") : parse_meta(f, e);
            have_meta = true;
        } else {
            s = parse_entry(f, e, &f->t[f->n]);
            if (s == BRISK_OK) f->n++;
        }
        if (s != BRISK_OK) break;
    }
    cJSON_Delete(root);
    if (s != BRISK_OK) return s;
    qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_offset);
    for (int64_t i = 0; i < f->n; i++) f->by_name[i] = &f->t[i];
    for (int64_t i = 1; i < f->n; i++)
        if (f->t[i].nbytes && f->t[i - 1].data + f->t[i - 1].nbytes > f->t[i].data)
            return bk_fail(BRISK_ERR_FORMAT, "safetensors: tensors '%s' and '%s' share bytes", f->t[i - 1].name,
                           f->t[i].name);
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_name);
    for (int64_t i = 1; i < f->n; i++)
        if (!strcmp(f->by_name[i]->name, f->by_name[i - 1]->name))
            return bk_fail(BRISK_ERR_FORMAT, "safetensors: tensor '%s' appears twice", f->by_name[i]->name);
    return BRISK_OK;
}

static brisk_status open_common(st_file *f, st_file **out) {
    brisk_status s = parse(f);
    if (s != BRISK_OK) {
        st_close(f);
        return s;
    }
    *out = f;
    return BRISK_OK;
}

brisk_status st_open_memory(const void *data, size_t size, st_file **out) {
    *out = NULL;
    st_file *f = calloc(1, sizeof *f);
    if (!f) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    f->base = data;
    f->size = size;
    return open_common(f, out);
}

brisk_status st_open(const char *path, st_file **out) {
    *out = NULL;
    st_file *f = calloc(1, sizeof *f);
    if (!f) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    brisk_status s = mapfile_open(path, &f->map);
    if (s != BRISK_OK) {
        free(f);
        return s;
    }
    f->base = f->map.data;
    f->size = f->map.size;
    s = open_common(f, out);
    return s == BRISK_OK ? s : bk_wrap(s, "%s", path);
}

void st_close(st_file *f) {
    if (!f) return;
    for (int64_t i = 0; i < f->n; i++) free((char *)f->t[i].name);
    for (int64_t i = 0; i < 2 * f->n_meta; i++) free(f->meta[i]);
    free(f->meta);
    free(f->t);
    free(f->by_name);
    mapfile_close(&f->map);
    free(f);
}

int64_t st_count(const st_file *f) { return f->n; }
const st_tensor *st_get(const st_file *f, int64_t i) { return i >= 0 && i < f->n ? &f->t[i] : NULL; }

const st_tensor *st_find(const st_file *f, const char *name) {
    int64_t lo = 0, hi = f->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->by_name[mid]->name, name);
        if (c == 0) return f->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const char *st_metadata(const st_file *f, const char *key) {
    for (int64_t i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta[2 * i], key)) return f->meta[2 * i + 1];
    return NULL;
}

brisk_status st_read_f32(const st_tensor *t, int64_t e0, int64_t n, float *dst) {
    if (e0 < 0 || n < 0 || e0 > t->n_elems || n > t->n_elems - e0)
        return bk_fail(BRISK_ERR_RANGE, "safetensors: elements [%lld, +%lld) outside '%s'", (long long)e0,
                       (long long)n, t->name);
    const unsigned char *p = t->data + (size_t)e0 * dtypes[t->dtype].size;
    switch (t->dtype) {
    case ST_F32:
        memcpy(dst, p, (size_t)n * 4);
        return BRISK_OK;
    case ST_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = quant_f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return BRISK_OK;
    case ST_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = quant_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return BRISK_OK;
    default:
        return bk_fail(BRISK_ERR_UNSUPPORTED, "safetensors: '%s' is %s (f32, f16 and bf16 are supported)", t->name,
                       dtypes[t->dtype].name);
    }
}

float st_f8_e4m3_to_f32(uint8_t b) {
    const uint32_t sign = (uint32_t)(b >> 7) << 31, e = (b >> 3) & 15, m = b & 7;
    float v;
    if ((b & 0x7F) == 0x7F) return NAN;
    if (e == 0) { /* subnormal: m * 2^-9, exact in f32 */
        v = (float)m * 0x1p-9f;
        return sign ? -v : v;
    }
    uint32_t bits = sign | (e - 7 + 127) << 23 | m << 20;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* The rows and columns of one matrix of a [..., R, C] tensor (1-D: one row). */
static void matrix_shape(const st_tensor *t, int64_t *r, int64_t *c) {
    *c = t->n_dims ? t->shape[t->n_dims - 1] : 1;
    *r = t->n_dims > 1 ? t->shape[t->n_dims - 2] : 1;
}

brisk_status st_check_block_scale(const st_tensor *q, const st_tensor *s, int64_t block_r, int64_t block_c) {
    if (q->dtype != ST_F8_E4M3)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "safetensors: '%s' is %s, block-scaled FP8 must be F8_E4M3", q->name,
                       dtypes[q->dtype].name);
    if (s->dtype != ST_F32 && s->dtype != ST_BF16 && s->dtype != ST_F16)
        return bk_fail(BRISK_ERR_FORMAT, "safetensors: scale '%s' is %s (f32, f16 or bf16 expected)", s->name,
                       dtypes[s->dtype].name);
    if (block_r <= 0 || block_c <= 0)
        return bk_fail(BRISK_ERR_FORMAT, "safetensors: FP8 block size %lld x %lld", (long long)block_r,
                       (long long)block_c);
    int64_t r, c;
    matrix_shape(q, &r, &c);
    bool ok = q->n_dims >= 2 && s->n_dims == q->n_dims && s->shape[s->n_dims - 2] == (r + block_r - 1) / block_r &&
              s->shape[s->n_dims - 1] == (c + block_c - 1) / block_c;
    for (int k = 0; ok && k < q->n_dims - 2; k++) ok = s->shape[k] == q->shape[k];
    if (!ok) {
        char qs[192] = "", ss[192] = "";
        for (int k = 0, n = 0; k < q->n_dims; k++) n += snprintf(qs + n, sizeof qs - (size_t)n, "%s%lld", k ? "," : "", (long long)q->shape[k]);
        for (int k = 0, n = 0; k < s->n_dims; k++) n += snprintf(ss + n, sizeof ss - (size_t)n, "%s%lld", k ? "," : "", (long long)s->shape[k]);
        return bk_fail(BRISK_ERR_FORMAT, "safetensors: scale '%s' is [%s], FP8 '%s' [%s] in %lldx%lld blocks needs one "
                       "scale per block", s->name, ss, q->name, qs, (long long)block_r, (long long)block_c);
    }
    return BRISK_OK;
}

brisk_status st_read_f8_scaled(const st_tensor *q, const st_tensor *s, int64_t block_r, int64_t block_c, int64_t e0,
                               int64_t n, float *dst) {
    BK_TRY(st_check_block_scale(q, s, block_r, block_c));
    if (e0 < 0 || n < 0 || e0 > q->n_elems || n > q->n_elems - e0)
        return bk_fail(BRISK_ERR_RANGE, "safetensors: elements [%lld, +%lld) outside '%s'", (long long)e0,
                       (long long)n, q->name);
    int64_t r, c;
    matrix_shape(q, &r, &c);
    const int64_t sr = s->shape[s->n_dims - 2], sc = s->shape[s->n_dims - 1];
    float scale = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t e = e0 + i, col = e % c, row = e / c; /* row: over all matrices */
        if (i == 0 || col % block_c == 0) { /* a new block: fetch its scale */
            const int64_t mat = row / r, br = row % r / block_r;
            BK_TRY(st_read_f32(s, (mat * sr + br) * sc + col / block_c, 1, &scale));
        }
        dst[i] = st_f8_e4m3_to_f32(q->data[e]) * scale;
    }
    return BRISK_OK;
}

void st_release(const st_file *f, const st_tensor *t) {
    if (!f->map.data || !t->nbytes) return;
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)t->data + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
    uintptr_t b = ((uintptr_t)t->data + t->nbytes) & ~((uintptr_t)pg - 1);
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}
