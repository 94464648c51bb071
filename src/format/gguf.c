/* gguf.c — the GGUF reader: one pass over the header that validates every
 * field against the file before anything points into it.
 *
 * Open does all the checking; the getters afterwards only convert. Arithmetic
 * on counts, lengths, shapes and offsets read from the file is done in 64-bit
 * unsigned with an explicit overflow check, and every length is compared with
 * the bytes left rather than added to a position. */
#include "format/gguf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mapfile.h"
#include "base/status.h"
#include "quant/quant.h"

#define GGUF_MAGIC_LE 0x46554747u /* "GGUF" read as a little-endian u32 */
#define GGUF_MAX_NAME 64          /* tensor names are shorter (llama.cpp's GGML_MAX_NAME) */
#define GGUF_MAX_NESTING 8        /* arrays of arrays of ... */
#define GGUF_MIN_KV_BYTES 14      /* u64 key length, 1-byte key, u32 type, 1-byte value */
#define GGUF_MIN_TENSOR_BYTES 24  /* u64 name length, u32 n_dims, u32 type, u64 offset */

typedef struct gguf_kv {
    char *key;                  /* NUL-terminated copy */
    gguf_value_type type;
    gguf_value_type elem_type;  /* arrays: element type */
    uint64_t n;                 /* arrays: elements; strings: bytes */
    const unsigned char *val;   /* into the map: scalar, string bytes, or first array element */
    const unsigned char *raw;   /* into the map: the value as stored, after the type field */
    uint64_t raw_len;           /* bytes */
    uint32_t *strs;             /* string arrays: (n) offsets from val of each element's u64 length */
} gguf_kv;

struct gguf_file {
    mapfile map;               /* empty for gguf_open_memory */
    const unsigned char *base; /* the whole file */
    size_t size;               /* bytes */
    uint32_t version, alignment;
    uint64_t data_offset;
    int64_t n_kv, n_tensors;
    gguf_kv *kv;               /* (n_kv) */
    gguf_tensor *tensors;      /* (n_tensors) */
    int64_t *kv_ht, *t_ht;     /* open addressing, slot = index + 1, 0 = empty */
    uint64_t kv_mask, t_mask;
    struct gguf_file **parts;  /* a split GGUF's other files (gguf_open_ex), whose tensors are in tensors */
    int n_parts;
};

static const uint8_t type_size[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *gguf_type_name(gguf_value_type t) {
    static const char *const names[GGUF_TYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
    return (unsigned)t < GGUF_TYPE_COUNT ? names[t] : "?";
}

/* ---- little-endian loads (the map has no alignment guarantee) ---- */

static inline uint16_t le16(const unsigned char *p) {
    uint16_t v;
    memcpy(&v, p, 2);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap16(v);
#endif
    return v;
}
static inline uint32_t le32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    return v;
}
static inline uint64_t le64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static bool mul_u64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }

/* ---- name hash tables (keys and tensor names) ---- */

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int64_t *ht_new(int64_t n, uint64_t *mask) {
    uint64_t cap = 8;
    while (cap < (uint64_t)n * 2) cap *= 2;
    *mask = cap - 1;
    return calloc(cap, sizeof(int64_t));
}

typedef const char *(*name_fn)(const gguf_file *g, int64_t i);
static const char *kv_name(const gguf_file *g, int64_t i) { return g->kv[i].key; }
static const char *tensor_name(const gguf_file *g, int64_t i) { return g->tensors[i].name; }

/* Index of name, or -1. With insert >= 0, adds it under that index when absent. */
static int64_t ht_probe(const gguf_file *g, int64_t *slots, uint64_t mask, name_fn fn,
                        const char *name, int64_t insert) {
    if (!slots) return -1;
    for (uint64_t h = hash_str(name) & mask;; h = (h + 1) & mask) {
        if (slots[h] == 0) {
            if (insert >= 0) slots[h] = insert + 1;
            return -1;
        }
        if (!strcmp(fn(g, slots[h] - 1), name)) return slots[h] - 1;
    }
}

/* ---- the parser ---- */

typedef struct parser {
    const unsigned char *p;
    size_t size, pos;  /* bytes */
    char where[128];   /* "kv 3 'general.name'": names the item in messages */
} parser;

static void set_where(parser *ps, const char *what, int64_t i, const unsigned char *name, uint64_t len) {
    int n = snprintf(ps->where, sizeof ps->where, "%s %" PRId64, what, i);
    if (!name || n < 0) return;
    char clean[72];
    size_t m = len < 64 ? (size_t)len : 64;
    for (size_t k = 0; k < m; k++) clean[k] = (name[k] < 0x20 || name[k] == 0x7f) ? '?' : (char)name[k];
    clean[m] = 0;
    snprintf(ps->where + n, sizeof ps->where - (size_t)n, " '%s%s'", clean, len > 64 ? "..." : "");
}

static brisk_status perr(const parser *ps, size_t at, const char *fmt, ...) BK_PRINTF(3, 4);
static brisk_status perr(const parser *ps, size_t at, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return bk_fail(BRISK_ERR_FORMAT, "%s: %s at byte %zu", msg, ps->where, at);
}

static brisk_status truncated(const parser *ps, const char *what, uint64_t need) {
    return bk_fail(BRISK_ERR_FORMAT,
                   "truncated file: %s of %s at byte %zu needs %" PRIu64 " bytes, %zu left",
                   what, ps->where, ps->pos, need, ps->size - ps->pos);
}

static size_t left(const parser *ps) { return ps->size - ps->pos; }

static brisk_status rd_u32(parser *ps, const char *what, uint32_t *v) {
    if (left(ps) < 4) return truncated(ps, what, 4);
    *v = le32(ps->p + ps->pos);
    ps->pos += 4;
    return BRISK_OK;
}

static brisk_status rd_u64(parser *ps, const char *what, uint64_t *v) {
    if (left(ps) < 8) return truncated(ps, what, 8);
    *v = le64(ps->p + ps->pos);
    ps->pos += 8;
    return BRISK_OK;
}

/* A gguf_string: u64 length + bytes. */
static brisk_status rd_str(parser *ps, const char *what, const unsigned char **s, uint64_t *len) {
    BK_TRY(rd_u64(ps, what, len));
    if (*len > left(ps)) {
        ps->pos -= 8;
        return perr(ps, ps->pos, "truncated file: %s length %" PRIu64 " exceeds the %zu bytes left",
                    what, *len, left(ps) - 8);
    }
    *s = ps->p + ps->pos;
    ps->pos += (size_t)*len;
    return BRISK_OK;
}

/* An array body (u32 element type, u64 count, elements). With kv, fills its
 * array fields and, for strings, the index of element positions. */
static brisk_status parse_array(parser *ps, int depth, gguf_kv *kv) {
    size_t at = ps->pos;
    uint32_t et;
    uint64_t n;
    BK_TRY(rd_u32(ps, "array element type", &et));
    if (et >= GGUF_TYPE_COUNT) return perr(ps, at, "bad array element type %" PRIu32, et);
    BK_TRY(rd_u64(ps, "array length", &n));
    if (kv) {
        kv->elem_type = (gguf_value_type)et;
        kv->n = n;
        kv->val = ps->p + ps->pos;
    }
    size_t rest = left(ps);
    if (type_size[et]) {
        if (n > rest / type_size[et])
            return perr(ps, at, "truncated file: array of %" PRIu64 " x %s needs more than the %zu bytes left",
                        n, gguf_type_name((gguf_value_type)et), rest);
        const unsigned char *e = ps->p + ps->pos;
        if (et == GGUF_TYPE_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (e[i] > 1) return perr(ps, at, "bool array element %" PRIu64 " is %u, not 0 or 1", i, e[i]);
        ps->pos += (size_t)(n * type_size[et]);
    } else if (et == GGUF_TYPE_STRING) {
        if (n > rest / 8)
            return perr(ps, at, "truncated file: array of %" PRIu64 " strings needs more than the %zu bytes left",
                        n, rest);
        if (kv) {
            kv->strs = malloc(n ? (size_t)n * sizeof *kv->strs : 1);
            if (!kv->strs) return bk_fail(BRISK_ERR_NOMEM, "gguf: index of %" PRIu64 " strings", n);
        }
        for (uint64_t i = 0; i < n; i++) {
            size_t es = ps->pos;
            uint64_t len;
            if (left(ps) < 8)
                return perr(ps, es, "truncated file: string %" PRIu64 " of %" PRIu64 " in the array", i, n);
            len = le64(ps->p + es);
            if (len > left(ps) - 8)
                return perr(ps, es, "truncated file: string %" PRIu64 " of the array has length %" PRIu64
                            ", %zu bytes left", i, len, left(ps) - 8);
            if (kv) {
                size_t off = es - (size_t)(kv->val - ps->p);
                if (off > UINT32_MAX) /* 4 bytes per entry keep open fast; no vocab comes near */
                    return bk_fail(BRISK_ERR_UNSUPPORTED, "%s: string array larger than 4 GiB", ps->where);
                kv->strs[i] = (uint32_t)off;
            }
            ps->pos += 8 + (size_t)len;
        }
    } else {
        if (depth + 1 >= GGUF_MAX_NESTING)
            return perr(ps, at, "arrays nested more than %d deep", GGUF_MAX_NESTING);
        if (n > rest / 12)
            return perr(ps, at, "truncated file: array of %" PRIu64 " arrays needs more than the %zu bytes left",
                        n, rest);
        for (uint64_t i = 0; i < n; i++) BK_TRY(parse_array(ps, depth + 1, NULL));
    }
    return BRISK_OK;
}

static brisk_status parse_value(parser *ps, gguf_kv *kv) {
    size_t at = ps->pos;
    kv->raw = ps->p + at;
    if (kv->type == GGUF_TYPE_STRING) {
        BK_TRY(rd_str(ps, "string value", &kv->val, &kv->n));
    } else if (kv->type == GGUF_TYPE_ARRAY) {
        BK_TRY(parse_array(ps, 0, kv));
    } else {
        size_t sz = type_size[kv->type];
        if (left(ps) < sz) return truncated(ps, gguf_type_name(kv->type), sz);
        kv->val = ps->p + at;
        if (kv->type == GGUF_TYPE_BOOL && kv->val[0] > 1)
            return perr(ps, at, "bool value is %u, not 0 or 1", kv->val[0]);
        ps->pos += sz;
    }
    kv->raw_len = ps->pos - at;
    return BRISK_OK;
}

/* A key or tensor name: copied, NUL-free. */
static brisk_status parse_name(parser *ps, const char *what, uint64_t max, char **out,
                               const unsigned char **s, uint64_t *len) {
    size_t at = ps->pos;
    BK_TRY(rd_str(ps, what, s, len));
    if (*len == 0) return perr(ps, at, "empty %s", what);
    if (*len >= max) return perr(ps, at, "%s is %" PRIu64 " bytes (at most %" PRIu64 ")", what, *len, max - 1);
    if (memchr(*s, 0, (size_t)*len)) return perr(ps, at, "%s contains a NUL byte", what);
    *out = malloc((size_t)*len + 1);
    if (!*out) return bk_fail(BRISK_ERR_NOMEM, "gguf: %s", what);
    memcpy(*out, *s, (size_t)*len);
    (*out)[*len] = 0;
    return BRISK_OK;
}

static brisk_status parse_kvs(parser *ps, gguf_file *g) {
    for (int64_t i = 0; i < g->n_kv; i++) {
        gguf_kv *kv = &g->kv[i];
        const unsigned char *s;
        uint64_t len;
        set_where(ps, "kv", i, NULL, 0);
        size_t at = ps->pos;
        BK_TRY(parse_name(ps, "key", UINT64_MAX, &kv->key, &s, &len));
        set_where(ps, "kv", i, s, len);
        int64_t dup = ht_probe(g, g->kv_ht, g->kv_mask, kv_name, kv->key, i);
        if (dup >= 0) return perr(ps, at, "duplicate key (also kv %" PRId64 ")", dup);
        uint32_t type;
        at = ps->pos;
        BK_TRY(rd_u32(ps, "value type", &type));
        if (type >= GGUF_TYPE_COUNT) return perr(ps, at, "bad value type %" PRIu32, type);
        kv->type = (gguf_value_type)type;
        BK_TRY(parse_value(ps, kv));
    }
    return BRISK_OK;
}

static brisk_status parse_alignment(parser *ps, gguf_file *g) {
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t i = gguf_find_key(g, "general.alignment");
    if (i < 0) return BRISK_OK;
    const gguf_kv *kv = &g->kv[i];
    set_where(ps, "kv", i, (const unsigned char *)kv->key, strlen(kv->key));
    size_t at = (size_t)(kv->raw - ps->p);
    /* As llama.cpp: a u32 that is a nonzero power of two. */
    if (kv->type != GGUF_TYPE_UINT32) return perr(ps, at, "alignment must be a u32, not %s", gguf_type_name(kv->type));
    uint32_t a = le32(kv->val);
    if (a == 0 || (a & (a - 1))) return perr(ps, at, "alignment %" PRIu32 " is not a power of two", a);
    g->alignment = a;
    return BRISK_OK;
}

/* Checks one tensor's shape and type and computes its size. */
static brisk_status tensor_size(parser *ps, size_t at, gguf_tensor *t) {
    const quant_traits *qt = quant_get_traits(t->type);
    if (!qt || qt->block_elems <= 0 || qt->block_bytes <= 0)
        return perr(ps, at, "unknown tensor type %" PRIu32, t->type);
    uint64_t nel = 1;
    for (int j = 0; j < GGUF_MAX_DIMS; j++)
        if (!mul_u64(nel, (uint64_t)t->ne[j], &nel) || nel > INT64_MAX)
            return perr(ps, at, "shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] has too many elements",
                        t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
    if (t->ne[0] % qt->block_elems)
        return perr(ps, at, "ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRId32,
                    t->ne[0], qt->name, qt->block_elems);
    uint64_t rows = t->ne[0] ? nel / (uint64_t)t->ne[0] : 0, bytes;
    if (!mul_u64((uint64_t)(t->ne[0] / qt->block_elems), (uint64_t)qt->block_bytes, &bytes) ||
        !mul_u64(bytes, rows, &bytes))
        return perr(ps, at, "tensor size overflows");
    t->nbytes = bytes;
    return BRISK_OK;
}

static brisk_status parse_tensor_infos(parser *ps, gguf_file *g, size_t *info_pos) {
    for (int64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        const unsigned char *s;
        uint64_t len;
        size_t at = info_pos[i] = ps->pos;
        set_where(ps, "tensor info", i, NULL, 0);
        char *name = NULL;
        BK_TRY(parse_name(ps, "tensor name", GGUF_MAX_NAME, &name, &s, &len));
        t->name = name;
        set_where(ps, "tensor info", i, s, len);
        int64_t dup = ht_probe(g, g->t_ht, g->t_mask, tensor_name, t->name, i);
        if (dup >= 0) return perr(ps, at, "duplicate tensor name (also tensor %" PRId64 ")", dup);
        uint32_t n_dims;
        BK_TRY(rd_u32(ps, "n_dims", &n_dims));
        if (n_dims > GGUF_MAX_DIMS)
            return perr(ps, ps->pos - 4, "n_dims = %" PRIu32 " (at most %d)", n_dims, GGUF_MAX_DIMS);
        t->n_dims = (int)n_dims;
        for (int j = 0; j < GGUF_MAX_DIMS; j++) t->ne[j] = 1;
        for (uint32_t j = 0; j < n_dims; j++) {
            uint64_t ne = 0;
            BK_TRY(rd_u64(ps, "shape", &ne));
            if (ne > INT64_MAX) return perr(ps, ps->pos - 8, "ne[%" PRIu32 "] = %" PRId64 " is negative", j, (int64_t)ne);
            t->ne[j] = (int64_t)ne;
        }
        BK_TRY(rd_u32(ps, "tensor type", &t->type));
        BK_TRY(rd_u64(ps, "tensor offset", &t->offset));
        BK_TRY(tensor_size(ps, at, t));
    }
    return BRISK_OK;
}

typedef struct span { uint64_t begin, end; int64_t i; } span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* Offsets aligned, data inside the file, no two tensors sharing bytes. */
static brisk_status place_tensors(parser *ps, gguf_file *g, const size_t *info_pos) {
    uint64_t blob = g->size - g->data_offset; /* bytes of the data blob */
    for (int64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        set_where(ps, "tensor info", i, (const unsigned char *)t->name, strlen(t->name));
        if (t->offset % g->alignment)
            return perr(ps, info_pos[i], "offset %" PRIu64 " is not a multiple of the alignment %" PRIu32,
                        t->offset, g->alignment);
        if (t->offset > blob || t->nbytes > blob - t->offset)
            return perr(ps, info_pos[i],
                        "truncated file: data [%" PRIu64 ", +%" PRIu64 ") past the end of the %" PRIu64
                        "-byte data blob", t->offset, t->nbytes, blob);
        t->data = g->base + g->data_offset + t->offset;
    }
    if (g->n_tensors < 2) return BRISK_OK;
    span *sp = malloc((size_t)g->n_tensors * sizeof *sp);
    if (!sp) return bk_fail(BRISK_ERR_NOMEM, "gguf: tensor spans");
    for (int64_t i = 0; i < g->n_tensors; i++)
        sp[i] = (span){g->tensors[i].offset, g->tensors[i].offset + g->tensors[i].nbytes, i};
    qsort(sp, (size_t)g->n_tensors, sizeof *sp, span_cmp);
    brisk_status s = BRISK_OK;
    uint64_t end = 0;
    int64_t last = -1;
    for (int64_t k = 0; k < g->n_tensors && s == BRISK_OK; k++) {
        if (sp[k].begin == sp[k].end) continue; /* empty tensors own no bytes */
        if (last >= 0 && sp[k].begin < end) {
            const gguf_tensor *t = &g->tensors[sp[k].i];
            set_where(ps, "tensor info", sp[k].i, (const unsigned char *)t->name, strlen(t->name));
            s = perr(ps, info_pos[sp[k].i], "data [%" PRIu64 ", %" PRIu64 ") overlaps tensor %" PRId64 " '%s'",
                     sp[k].begin, sp[k].end, last, g->tensors[last].name);
        }
        if (sp[k].end > end) {
            end = sp[k].end;
            last = sp[k].i;
        }
    }
    free(sp);
    return s;
}

static brisk_status parse_header(gguf_file *g) {
    parser ps = {.p = g->base, .size = g->size, .pos = 0};
    snprintf(ps.where, sizeof ps.where, "header");
    uint32_t magic, version;
    BK_TRY(rd_u32(&ps, "magic", &magic));
    if (magic != GGUF_MAGIC_LE)
        return perr(&ps, 0, "not a GGUF file (magic %02x %02x %02x %02x)", g->base[0], g->base[1],
                    g->base[2], g->base[3]);
    BK_TRY(rd_u32(&ps, "version", &version));
    if (version == 1)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "GGUF version 1 is unsupported (brisk reads versions 2 and 3)");
    if (__builtin_bswap32(version) == 2 || __builtin_bswap32(version) == 3)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "big-endian GGUF is unsupported");
    if (version != 2 && version != 3) return perr(&ps, 4, "unknown GGUF version %" PRIu32, version);
    g->version = version;
    uint64_t n_tensors, n_kv;
    BK_TRY(rd_u64(&ps, "tensor count", &n_tensors));
    BK_TRY(rd_u64(&ps, "kv count", &n_kv));
    if (n_kv > left(&ps) / GGUF_MIN_KV_BYTES)
        return perr(&ps, 16, "kv count %" PRIu64 " cannot fit in the %zu bytes left", n_kv, left(&ps));
    if (n_tensors > left(&ps) / GGUF_MIN_TENSOR_BYTES)
        return perr(&ps, 8, "tensor count %" PRIu64 " cannot fit in the %zu bytes left", n_tensors, left(&ps));
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    g->kv = calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *g->tensors);
    g->kv_ht = ht_new(g->n_kv, &g->kv_mask);
    g->t_ht = ht_new(g->n_tensors, &g->t_mask);
    if (!g->kv || !g->tensors || !g->kv_ht || !g->t_ht)
        return bk_fail(BRISK_ERR_NOMEM, "gguf: %" PRIu64 " keys, %" PRIu64 " tensors", n_kv, n_tensors);

    BK_TRY(parse_kvs(&ps, g));
    BK_TRY(parse_alignment(&ps, g));
    size_t *info_pos = malloc(n_tensors ? (size_t)n_tensors * sizeof *info_pos : 1);
    if (!info_pos) return bk_fail(BRISK_ERR_NOMEM, "gguf: %" PRIu64 " tensors", n_tensors);
    brisk_status s = parse_tensor_infos(&ps, g, info_pos);
    if (s == BRISK_OK) {
        uint64_t pad = (g->alignment - ps.pos % g->alignment) % g->alignment;
        g->data_offset = ps.pos + pad;
        if (pad > left(&ps)) {
            if (g->n_tensors == 0) {
                g->data_offset = g->size; /* no data blob: the padding may be left out */
            } else {
                snprintf(ps.where, sizeof ps.where, "tensor data");
                s = truncated(&ps, "padding", pad);
            }
        }
    }
    if (s == BRISK_OK) s = place_tensors(&ps, g, info_pos);
    free(info_pos);
    return s;
}

static brisk_status open_common(gguf_file *g, gguf_file **out) {
    brisk_status s = parse_header(g);
    if (s != BRISK_OK) {
        gguf_close(g);
        return s;
    }
    *out = g;
    return BRISK_OK;
}

brisk_status gguf_open_memory(const void *data, size_t size, gguf_file **out) {
    if (!out) return bk_fail(BRISK_ERR_INVALID_ARG, "gguf_open_memory: out is NULL");
    *out = NULL;
    if (!data && size) return bk_fail(BRISK_ERR_INVALID_ARG, "gguf_open_memory: NULL data");
    gguf_file *g = calloc(1, sizeof *g);
    if (!g) return bk_fail(BRISK_ERR_NOMEM, "gguf: handle");
    g->base = data;
    g->size = size;
    return open_common(g, out);
}

brisk_status gguf_open(const char *path, gguf_file **out) { return gguf_open_ex(path, false, out); }

static brisk_status open_one(const char *path, bool copy, gguf_file **out) {
    gguf_file *g = calloc(1, sizeof *g);
    if (!g) return bk_fail(BRISK_ERR_NOMEM, "gguf: handle");
    brisk_status s = mapfile_open_ex(path, copy, &g->map);
    if (s != BRISK_OK) {
        free(g);
        return s;
    }
    g->base = g->map.data;
    g->size = g->map.size;
    s = open_common(g, out);
    if (s != BRISK_OK) return bk_wrap(s, "%s", path);
    return BRISK_OK;
}

/* The split keys of llama.cpp's gguf-split: split.no (0-based), split.count; 0/1 when absent. */
static brisk_status split_keys(const gguf_file *g, int64_t *no, int64_t *count) {
    *no = 0;
    *count = 1;
    brisk_status s = gguf_get_i64(g, "split.count", count);
    if (s == BRISK_ERR_NOT_FOUND) return BRISK_OK;
    BK_TRY(s);
    s = gguf_get_i64(g, "split.no", no);
    if (s != BRISK_OK && s != BRISK_ERR_NOT_FOUND) return s;
    if (*count < 1 || *count > 99999 || *no < 0 || *no >= *count)
        return bk_fail(BRISK_ERR_FORMAT, "split.no %lld, split.count %lld", (long long)*no, (long long)*count);
    return BRISK_OK;
}

/* A split GGUF (llama.cpp's gguf-split: PREFIX-00001-of-0000N.gguf holds the metadata and some tensors,
 * the other parts their split.* keys and tensors): opens parts 2..N beside the first and takes their
 * tensors into g's table, each pointing into its own part's map, so a model reads one file's tensors. */
static brisk_status open_parts(gguf_file *g, const char *path, bool copy, int64_t count) {
    const size_t n = strlen(path), tail = strlen("-00001-of-00000.gguf");
    char want[32];
    snprintf(want, sizeof want, "-00001-of-%05lld.gguf", (long long)count);
    if (n < tail || strcmp(path + n - tail, want))
        return bk_fail(BRISK_ERR_FORMAT, "the first part of a split GGUF of %lld parts should be named PREFIX%s",
                       (long long)count, want);
    g->parts = calloc((size_t)count - 1, sizeof *g->parts);
    char *p = malloc(n + 1);
    if (!g->parts || !p) {
        free(p);
        return bk_fail(BRISK_ERR_NOMEM, "gguf: split parts");
    }
    brisk_status s = BRISK_OK;
    int64_t total = g->n_tensors;
    for (int64_t k = 1; k < count && s == BRISK_OK; k++) {
        memcpy(p, path, n - tail);
        snprintf(p + n - tail, tail + 1, "-%05lld-of-%05lld.gguf", (long long)k + 1, (long long)count);
        int64_t no, cnt;
        s = open_one(p, copy, &g->parts[k - 1]);
        if (s == BRISK_OK) g->n_parts++;
        if (s == BRISK_OK) s = split_keys(g->parts[k - 1], &no, &cnt);
        if (s == BRISK_OK && (no != k || cnt != count))
            s = bk_fail(BRISK_ERR_FORMAT, "%s: split.no %lld of %lld, expected %lld of %lld", p, (long long)no,
                        (long long)cnt, (long long)k, (long long)count);
        if (s == BRISK_OK) total += g->parts[k - 1]->n_tensors;
    }
    free(p);
    BK_TRY(s);
    int64_t declared;
    if (gguf_get_i64(g, "split.tensors.count", &declared) == BRISK_OK && declared != total)
        return bk_fail(BRISK_ERR_FORMAT, "split.tensors.count is %lld, the %lld parts hold %lld tensors",
                       (long long)declared, (long long)count, (long long)total);
    gguf_tensor *t = realloc(g->tensors, (size_t)(total ? total : 1) * sizeof *t);
    if (!t) return bk_fail(BRISK_ERR_NOMEM, "gguf: %lld tensors", (long long)total);
    g->tensors = t;
    free(g->t_ht);
    if (!(g->t_ht = ht_new(total, &g->t_mask))) return bk_fail(BRISK_ERR_NOMEM, "gguf: %lld tensors", (long long)total);
    int64_t m = g->n_tensors;
    for (int k = 0; k < g->n_parts; k++)
        for (int64_t j = 0; j < g->parts[k]->n_tensors; j++) {
            t[m++] = g->parts[k]->tensors[j]; /* the name moves with it */
            g->parts[k]->tensors[j].name = NULL;
        }
    g->n_tensors = m;
    for (int64_t i = 0; i < m; i++)
        if (ht_probe(g, g->t_ht, g->t_mask, tensor_name, t[i].name, i) >= 0)
            return bk_fail(BRISK_ERR_FORMAT, "split GGUF: tensor '%s' is in two parts", t[i].name);
    return BRISK_OK;
}

brisk_status gguf_open_ex(const char *path, bool copy, gguf_file **out) {
    if (!out || !path) return bk_fail(BRISK_ERR_INVALID_ARG, "gguf_open: NULL argument");
    *out = NULL;
    gguf_file *g;
    BK_TRY(open_one(path, copy, &g));
    int64_t no, count;
    brisk_status s = split_keys(g, &no, &count);
    if (s == BRISK_OK && no != 0)
        s = bk_fail(BRISK_ERR_INVALID_ARG, "part %lld of a split GGUF of %lld: open its first part (-00001-of-%05lld)",
                    (long long)no + 1, (long long)count, (long long)count);
    if (s == BRISK_OK && count > 1) s = open_parts(g, path, copy, count);
    if (s != BRISK_OK) {
        gguf_close(g);
        return bk_wrap(s, "%s", path);
    }
    *out = g;
    return BRISK_OK;
}

void gguf_close(gguf_file *g) {
    if (!g) return;
    if (g->kv)
        for (int64_t i = 0; i < g->n_kv; i++) {
            free(g->kv[i].key);
            free(g->kv[i].strs);
        }
    if (g->tensors)
        for (int64_t i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    free(g->kv_ht);
    free(g->t_ht);
    for (int k = 0; k < g->n_parts; k++) gguf_close(g->parts[k]);
    free(g->parts);
    mapfile_close(&g->map);
    free(g);
}

uint32_t gguf_version(const gguf_file *g) { return g->version; }
uint32_t gguf_alignment(const gguf_file *g) { return g->alignment; }
uint64_t gguf_data_offset(const gguf_file *g) { return g->data_offset; }
size_t gguf_file_size(const gguf_file *g) { return g->size; }

/* ---- metadata ---- */

int64_t gguf_kv_count(const gguf_file *g) { return g->n_kv; }

const char *gguf_kv_key(const gguf_file *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? g->kv[i].key : NULL;
}

gguf_value_type gguf_kv_type(const gguf_file *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? g->kv[i].type : GGUF_TYPE_COUNT;
}

int64_t gguf_find_key(const gguf_file *g, const char *key) {
    if (!g || !key) return -1;
    return ht_probe(g, g->kv_ht, g->kv_mask, kv_name, key, -1);
}

brisk_status gguf_kv_raw(const gguf_file *g, int64_t kv, const void **raw, uint64_t *len) {
    if (kv < 0 || kv >= g->n_kv) return bk_fail(BRISK_ERR_RANGE, "gguf: no kv %" PRId64, kv);
    *raw = g->kv[kv].raw;
    *len = g->kv[kv].raw_len;
    return BRISK_OK;
}

static bool is_int_type(gguf_value_type t) {
    return t <= GGUF_TYPE_INT32 || t == GGUF_TYPE_BOOL || t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_INT64;
}

/* An integer scalar widened: *neg set when it is below zero (then *v holds it as int64). */
static void load_int(const gguf_kv *kv, uint64_t *v, bool *neg) {
    const unsigned char *p = kv->val;
    int64_t s = 0;
    *neg = false;
    switch (kv->type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_BOOL: *v = p[0]; return;
    case GGUF_TYPE_UINT16: *v = le16(p); return;
    case GGUF_TYPE_UINT32: *v = le32(p); return;
    case GGUF_TYPE_UINT64: *v = le64(p); return;
    case GGUF_TYPE_INT8: s = (int8_t)p[0]; break;
    case GGUF_TYPE_INT16: s = (int16_t)le16(p); break;
    case GGUF_TYPE_INT32: s = (int32_t)le32(p); break;
    case GGUF_TYPE_INT64: s = (int64_t)le64(p); break;
    default: break;
    }
    *neg = s < 0;
    *v = (uint64_t)s;
}

static brisk_status find_scalar(const gguf_file *g, const char *key, const gguf_kv **out) {
    int64_t i = gguf_find_key(g, key);
    if (i < 0) return BRISK_ERR_NOT_FOUND;
    *out = &g->kv[i];
    return BRISK_OK;
}

static brisk_status bad_type(const gguf_kv *kv, const char *want) {
    return bk_fail(BRISK_ERR_FORMAT, "key '%s' is %s, expected %s", kv->key, gguf_type_name(kv->type), want);
}

brisk_status gguf_get_i64(const gguf_file *g, const char *key, int64_t *out) {
    const gguf_kv *kv = NULL;
    BK_TRY(find_scalar(g, key, &kv));
    if (!is_int_type(kv->type)) return bad_type(kv, "an integer");
    uint64_t v;
    bool neg;
    load_int(kv, &v, &neg);
    if (!neg && v > INT64_MAX)
        return bk_fail(BRISK_ERR_FORMAT, "key '%s' = %" PRIu64 " does not fit in i64", key, v);
    *out = (int64_t)v;
    return BRISK_OK;
}

brisk_status gguf_get_u32(const gguf_file *g, const char *key, uint32_t *out) {
    const gguf_kv *kv = NULL;
    BK_TRY(find_scalar(g, key, &kv));
    if (!is_int_type(kv->type)) return bad_type(kv, "an integer");
    uint64_t v;
    bool neg;
    load_int(kv, &v, &neg);
    if (neg) return bk_fail(BRISK_ERR_FORMAT, "key '%s' = %" PRId64 " does not fit in u32", key, (int64_t)v);
    if (v > UINT32_MAX) return bk_fail(BRISK_ERR_FORMAT, "key '%s' = %" PRIu64 " does not fit in u32", key, v);
    *out = (uint32_t)v;
    return BRISK_OK;
}

brisk_status gguf_get_f64(const gguf_file *g, const char *key, double *out) {
    const gguf_kv *kv = NULL;
    BK_TRY(find_scalar(g, key, &kv));
    if (kv->type == GGUF_TYPE_FLOAT32) {
        uint32_t b = le32(kv->val);
        float f;
        memcpy(&f, &b, 4);
        *out = f;
    } else if (kv->type == GGUF_TYPE_FLOAT64) {
        uint64_t b = le64(kv->val);
        memcpy(out, &b, 8);
    } else if (is_int_type(kv->type)) {
        uint64_t v;
        bool neg;
        load_int(kv, &v, &neg);
        *out = neg ? (double)(int64_t)v : (double)v;
    } else {
        return bad_type(kv, "a number");
    }
    return BRISK_OK;
}

brisk_status gguf_get_f32(const gguf_file *g, const char *key, float *out) {
    double d;
    BK_TRY(gguf_get_f64(g, key, &d));
    *out = (float)d;
    return BRISK_OK;
}

brisk_status gguf_get_bool(const gguf_file *g, const char *key, bool *out) {
    const gguf_kv *kv = NULL;
    BK_TRY(find_scalar(g, key, &kv));
    if (!is_int_type(kv->type)) return bad_type(kv, "bool");
    uint64_t v;
    bool neg;
    load_int(kv, &v, &neg);
    if (neg || v > 1) return bk_fail(BRISK_ERR_FORMAT, "key '%s' is not 0 or 1", key);
    *out = v == 1;
    return BRISK_OK;
}

brisk_status gguf_get_str(const gguf_file *g, const char *key, const char **s, size_t *len) {
    const gguf_kv *kv = NULL;
    BK_TRY(find_scalar(g, key, &kv));
    if (kv->type != GGUF_TYPE_STRING) return bad_type(kv, "string");
    *s = (const char *)kv->val;
    *len = (size_t)kv->n;
    return BRISK_OK;
}

static brisk_status arr_at(const gguf_file *g, int64_t i, const gguf_kv **out) {
    if (i < 0 || i >= g->n_kv) return bk_fail(BRISK_ERR_RANGE, "gguf: no kv %" PRId64, i);
    if (g->kv[i].type != GGUF_TYPE_ARRAY) return bad_type(&g->kv[i], "array");
    *out = &g->kv[i];
    return BRISK_OK;
}

brisk_status gguf_kv_arr_info(const gguf_file *g, int64_t kv, gguf_value_type *elem_type, uint64_t *n) {
    const gguf_kv *a = NULL;
    BK_TRY(arr_at(g, kv, &a));
    *elem_type = a->elem_type;
    *n = a->n;
    return BRISK_OK;
}

brisk_status gguf_get_arr(const gguf_file *g, const char *key, gguf_value_type *elem_type, uint64_t *n,
                          const void **data) {
    int64_t i = gguf_find_key(g, key);
    if (i < 0) return BRISK_ERR_NOT_FOUND;
    const gguf_kv *a = NULL;
    BK_TRY(arr_at(g, i, &a));
    *elem_type = a->elem_type;
    *n = a->n;
    *data = type_size[a->elem_type] ? a->val : NULL;
    return BRISK_OK;
}

brisk_status gguf_kv_arr_str(const gguf_file *g, int64_t kv, uint64_t i, const char **s, size_t *len) {
    const gguf_kv *a = NULL;
    BK_TRY(arr_at(g, kv, &a));
    if (a->elem_type == GGUF_TYPE_ARRAY)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "key '%s' is an array of arrays", a->key);
    if (a->elem_type != GGUF_TYPE_STRING)
        return bk_fail(BRISK_ERR_FORMAT, "key '%s' is an array of %s, not of strings", a->key,
                       gguf_type_name(a->elem_type));
    if (i >= a->n)
        return bk_fail(BRISK_ERR_RANGE, "key '%s': string %" PRIu64 " of %" PRIu64, a->key, i, a->n);
    const unsigned char *e = a->val + a->strs[i];
    *len = (size_t)le64(e);
    *s = (const char *)e + 8;
    return BRISK_OK;
}

brisk_status gguf_get_arr_str(const gguf_file *g, const char *key, uint64_t i, const char **s, size_t *len) {
    int64_t k = gguf_find_key(g, key);
    if (k < 0) return BRISK_ERR_NOT_FOUND;
    return gguf_kv_arr_str(g, k, i, s, len);
}

/* ---- formatting for `brisk info` ---- */

typedef struct sbuf { char *p; size_t cap, len; } sbuf; /* len may pass cap: output is cut */

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->len < b->cap) {
        size_t room = b->cap - b->len;
        memcpy(b->p + b->len, s, n < room ? n : room);
    }
    b->len += n;
}

static void sb_printf(sbuf *b, const char *fmt, ...) BK_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* A quoted, escaped string, cut after max bytes with its length noted. */
static void sb_quote(sbuf *b, const unsigned char *s, uint64_t len, uint64_t max) {
    uint64_t m = len < max ? len : max;
    while (m > 0 && m < len && (s[m] & 0xc0) == 0x80) m--; /* cut between UTF-8 characters */
    sb_put(b, "\"", 1);
    for (uint64_t i = 0; i < m; i++) {
        unsigned char c = s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_put(b, e, 2);
        } else if (c == '\n') {
            sb_put(b, "\\n", 2);
        } else if (c == '\t') {
            sb_put(b, "\\t", 2);
        } else if (c < 0x20 || c == 0x7f) {
            sb_printf(b, "\\x%02x", c);
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
    if (m < len) sb_printf(b, "... (%" PRIu64 " bytes)", len);
}

static void sb_scalar(sbuf *b, gguf_value_type t, const unsigned char *p) {
    switch (t) {
    case GGUF_TYPE_UINT8: sb_printf(b, "%u", p[0]); break;
    case GGUF_TYPE_INT8: sb_printf(b, "%d", (int8_t)p[0]); break;
    case GGUF_TYPE_UINT16: sb_printf(b, "%u", le16(p)); break;
    case GGUF_TYPE_INT16: sb_printf(b, "%d", (int16_t)le16(p)); break;
    case GGUF_TYPE_UINT32: sb_printf(b, "%" PRIu32, le32(p)); break;
    case GGUF_TYPE_INT32: sb_printf(b, "%" PRId32, (int32_t)le32(p)); break;
    case GGUF_TYPE_UINT64: sb_printf(b, "%" PRIu64, le64(p)); break;
    case GGUF_TYPE_INT64: sb_printf(b, "%" PRId64, (int64_t)le64(p)); break;
    case GGUF_TYPE_BOOL: sb_printf(b, "%s", p[0] ? "true" : "false"); break;
    case GGUF_TYPE_FLOAT32: {
        uint32_t u = le32(p);
        float f;
        memcpy(&f, &u, 4);
        sb_printf(b, "%g", (double)f);
        break;
    }
    case GGUF_TYPE_FLOAT64: {
        uint64_t u = le64(p);
        double d;
        memcpy(&d, &u, 8);
        sb_printf(b, "%g", d);
        break;
    }
    default: sb_put(b, "?", 1); break;
    }
}

brisk_status gguf_kv_format(const gguf_file *g, int64_t i, char *buf, size_t cap) {
    if (i < 0 || i >= g->n_kv) return bk_fail(BRISK_ERR_RANGE, "gguf: no kv %" PRId64, i);
    if (!buf || cap == 0) return bk_fail(BRISK_ERR_INVALID_ARG, "gguf_kv_format: no buffer");
    const gguf_kv *kv = &g->kv[i];
    sbuf b = {buf, cap - 1, 0};
    if (kv->type == GGUF_TYPE_STRING) {
        sb_quote(&b, kv->val, kv->n, 64);
    } else if (kv->type != GGUF_TYPE_ARRAY) {
        sb_scalar(&b, kv->type, kv->val);
    } else {
        sb_printf(&b, "[%" PRIu64 " x %s]", kv->n, gguf_type_name(kv->elem_type));
        size_t start = b.len;
        for (uint64_t k = 0; k < kv->n && kv->elem_type != GGUF_TYPE_ARRAY; k++) {
            if (b.len - start > 60) {
                sb_put(&b, " ...", 4);
                break;
            }
            sb_put(&b, k ? ", " : " ", k ? 2 : 1);
            if (kv->elem_type == GGUF_TYPE_STRING)
                sb_quote(&b, kv->val + kv->strs[k] + 8, le64(kv->val + kv->strs[k]), 24);
            else
                sb_scalar(&b, kv->elem_type, kv->val + k * type_size[kv->elem_type]);
        }
    }
    buf[b.len < b.cap ? b.len : b.cap] = 0;
    return BRISK_OK;
}

/* ---- tensors ---- */

int64_t gguf_tensor_count(const gguf_file *g) { return g->n_tensors; }

const gguf_tensor *gguf_get_tensor(const gguf_file *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name) {
    if (!g || !name) return NULL;
    int64_t i = ht_probe(g, g->t_ht, g->t_mask, tensor_name, name, -1);
    return i >= 0 ? &g->tensors[i] : NULL;
}
