/* gguf_write.c — the GGUF writer (version 3).
 *
 * Metadata is serialized into one growing buffer as it is set; tensors are
 * declared up front so their offsets are known when the header is written;
 * tensor data is then streamed straight to the file in declaration order,
 * each tensor padded to the alignment. Nothing but the metadata and the
 * tensor table is ever held in memory. The file is an atomic_file: the
 * bytes go to a temporary file beside the path and finish renames it into
 * place, so a failed write or a model being served from the path never sees
 * a half-written or truncated file. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/atomic_file.h"
#include "base/status.h"
#include "format/gguf.h"
#include "quant/quant.h"

typedef struct wtensor {
    char *name;
    uint32_t type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes, offset; /* offset relative to the data blob */
} wtensor;

enum { W_SETUP, W_WRITING, W_DONE, W_FAILED };

struct gguf_writer {
    unsigned char *kv;  /* serialized kv pairs */
    size_t kv_len, kv_cap;
    int64_t n_kv;
    char **keys;        /* (n_kv) copies, for the duplicate check */
    wtensor *t;         /* (n_t) declared tensors */
    int64_t n_t, t_cap;
    uint32_t alignment;
    int state;
    atomic_file *af;    /* the output until finish publishes it; aborted if the writer is freed unfinished */
    FILE *f;            /* af's stream */
    char *path;         /* for messages */
    int64_t next;       /* next tensor to stream */
    uint64_t partial;   /* bytes of tensor `next` already streamed by write_rows */
};

static const uint8_t elem_size[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

gguf_writer *gguf_writer_new(void) {
    gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    atomic_file_abort(w->af); /* an unfinished file never replaces the path */
    for (int64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    for (int64_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->keys);
    free(w->t);
    free(w->kv);
    free(w->path);
    free(w);
}

/* ---- metadata buffer ---- */

static brisk_status kv_put(gguf_writer *w, const void *p, size_t n) {
    if (n > SIZE_MAX / 2 - w->kv_len) return bk_fail(BRISK_ERR_NOMEM, "gguf writer: metadata too large");
    if (w->kv_len + n > w->kv_cap) {
        size_t cap = w->kv_cap ? w->kv_cap : 4096;
        while (cap < w->kv_len + n) cap *= 2;
        unsigned char *q = realloc(w->kv, cap);
        if (!q) return bk_fail(BRISK_ERR_NOMEM, "gguf writer: %zu bytes of metadata", cap);
        w->kv = q;
        w->kv_cap = cap;
    }
    if (n) memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
    return BRISK_OK;
}

static brisk_status kv_u32(gguf_writer *w, uint32_t v) {
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    return kv_put(w, b, 4);
}

static brisk_status kv_u64(gguf_writer *w, uint64_t v) {
    BK_TRY(kv_u32(w, (uint32_t)v));
    return kv_u32(w, (uint32_t)(v >> 32));
}

static brisk_status kv_str(gguf_writer *w, const char *s, size_t len) {
    BK_TRY(kv_u64(w, len));
    return kv_put(w, s, len);
}

/* Appends "key, type" for a new key; the value follows. Rolled back by kv_end on failure. */
static brisk_status kv_begin(gguf_writer *w, const char *key, gguf_value_type type, size_t *mark) {
    if (!w || !key || !*key) return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: empty key");
    if (w->state != W_SETUP)
        return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: key '%s' set after the header was written", key);
    for (int64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->keys[i], key)) return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: duplicate key '%s'", key);
    *mark = w->kv_len;
    BK_TRY(kv_str(w, key, strlen(key)));
    return kv_u32(w, (uint32_t)type);
}

static brisk_status kv_end(gguf_writer *w, const char *key, size_t mark, brisk_status s) {
    char *copy = s == BRISK_OK ? strdup(key) : NULL;
    char **keys = copy ? realloc(w->keys, (size_t)(w->n_kv + 1) * sizeof *keys) : NULL;
    if (s == BRISK_OK && !keys) {
        free(copy);
        s = bk_fail(BRISK_ERR_NOMEM, "gguf writer: key '%s'", key);
    }
    if (s != BRISK_OK) {
        w->kv_len = mark;
        return s;
    }
    w->keys = keys;
    w->keys[w->n_kv++] = copy;
    return BRISK_OK;
}

static brisk_status set_scalar(gguf_writer *w, const char *key, gguf_value_type type, const void *le) {
    size_t mark;
    BK_TRY(kv_begin(w, key, type, &mark));
    return kv_end(w, key, mark, kv_put(w, le, elem_size[type]));
}

static brisk_status not_alignment(const char *key) {
    if (key && !strcmp(key, "general.alignment"))
        return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: general.alignment must be a u32");
    return BRISK_OK;
}

brisk_status gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) {
    bool is_align = key && !strcmp(key, "general.alignment");
    if (is_align && (v == 0 || (v & (v - 1))))
        return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: alignment %" PRIu32 " is not a power of two", v);
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    BK_TRY(set_scalar(w, key, GGUF_TYPE_UINT32, b));
    if (is_align) w->alignment = v;
    return BRISK_OK;
}

brisk_status gguf_writer_set_u16(gguf_writer *w, const char *key, uint16_t v) {
    BK_TRY(not_alignment(key));
    unsigned char b[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
    return set_scalar(w, key, GGUF_TYPE_UINT16, b);
}

brisk_status gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) {
    BK_TRY(not_alignment(key));
    uint32_t u = (uint32_t)v;
    unsigned char b[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                          (unsigned char)(u >> 24)};
    return set_scalar(w, key, GGUF_TYPE_INT32, b);
}

brisk_status gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v) {
    BK_TRY(not_alignment(key));
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
    return set_scalar(w, key, GGUF_TYPE_UINT64, b);
}

brisk_status gguf_writer_set_f32(gguf_writer *w, const char *key, float v) {
    BK_TRY(not_alignment(key));
    uint32_t u;
    memcpy(&u, &v, 4);
    unsigned char b[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                          (unsigned char)(u >> 24)};
    return set_scalar(w, key, GGUF_TYPE_FLOAT32, b);
}

brisk_status gguf_writer_set_bool(gguf_writer *w, const char *key, bool v) {
    BK_TRY(not_alignment(key));
    unsigned char b = v ? 1 : 0;
    return set_scalar(w, key, GGUF_TYPE_BOOL, &b);
}

brisk_status gguf_writer_set_str(gguf_writer *w, const char *key, const char *v) {
    BK_TRY(not_alignment(key));
    if (!v) return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: NULL string for '%s'", key ? key : "?");
    size_t mark;
    BK_TRY(kv_begin(w, key, GGUF_TYPE_STRING, &mark));
    return kv_end(w, key, mark, kv_str(w, v, strlen(v)));
}

brisk_status gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_value_type elem_type, const void *data,
                                 uint64_t n) {
    BK_TRY(not_alignment(key));
    if ((unsigned)elem_type >= GGUF_TYPE_COUNT || !elem_size[elem_type])
        return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: '%s': numeric arrays only, not %s", key ? key : "?",
                       gguf_type_name(elem_type));
    if (n > SIZE_MAX / 8 || (n && !data))
        return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: '%s': bad array", key ? key : "?");
    if (elem_type == GGUF_TYPE_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (((const unsigned char *)data)[i] > 1)
                return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: '%s': bool %" PRIu64 " is not 0 or 1", key, i);
    size_t mark;
    BK_TRY(kv_begin(w, key, GGUF_TYPE_ARRAY, &mark));
    brisk_status s = kv_u32(w, (uint32_t)elem_type);
    if (s == BRISK_OK) s = kv_u64(w, n);
    if (s == BRISK_OK) s = kv_put(w, data, (size_t)n * elem_size[elem_type]);
    return kv_end(w, key, mark, s);
}

brisk_status gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, const size_t *lens,
                                     uint64_t n) {
    BK_TRY(not_alignment(key));
    if (n && !strs) return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: '%s': NULL strings", key ? key : "?");
    for (uint64_t i = 0; i < n; i++)
        if (!strs[i]) return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: '%s': string %" PRIu64 " is NULL", key, i);
    size_t mark;
    BK_TRY(kv_begin(w, key, GGUF_TYPE_ARRAY, &mark));
    brisk_status s = kv_u32(w, GGUF_TYPE_STRING);
    if (s == BRISK_OK) s = kv_u64(w, n);
    for (uint64_t i = 0; i < n && s == BRISK_OK; i++) s = kv_str(w, strs[i], lens ? lens[i] : strlen(strs[i]));
    return kv_end(w, key, mark, s);
}

brisk_status gguf_writer_copy_kv(gguf_writer *w, const gguf_file *src, int64_t kv) {
    const char *key = src ? gguf_kv_key(src, kv) : NULL;
    if (!key) return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: no kv %" PRId64 " to copy", kv);
    gguf_value_type type = gguf_kv_type(src, kv);
    const void *raw;
    uint64_t len;
    BK_TRY(gguf_kv_raw(src, kv, &raw, &len));
    bool is_align = !strcmp(key, "general.alignment");
    if (is_align && type != GGUF_TYPE_UINT32) return not_alignment(key);
    size_t mark;
    BK_TRY(kv_begin(w, key, type, &mark));
    BK_TRY(kv_end(w, key, mark, kv_put(w, raw, (size_t)len)));
    if (is_align) {
        const unsigned char *p = raw;
        w->alignment = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    }
    return BRISK_OK;
}

/* ---- tensors ---- */

brisk_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t ggml_type, int n_dims,
                                    const int64_t *ne) {
    if (!w || !name || !*name || !ne) return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: bad tensor");
    if (w->state != W_SETUP)
        return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: tensor '%s' added after the header was written", name);
    if (strlen(name) >= 64) return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: tensor name '%s' too long", name);
    for (int64_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name))
            return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: duplicate tensor '%s'", name);
    const quant_traits *qt = quant_get_traits(ggml_type);
    if (!qt) return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: tensor '%s': unknown type %" PRIu32, name, ggml_type);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: tensor '%s': n_dims %d", name, n_dims);
    wtensor t = {.type = ggml_type, .n_dims = n_dims, .ne = {1, 1, 1, 1}};
    uint64_t nel = 1;
    for (int j = 0; j < n_dims; j++) {
        if (ne[j] < 0 || __builtin_mul_overflow(nel, (uint64_t)ne[j], &nel) || nel > INT64_MAX)
            return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: tensor '%s': bad shape", name);
        t.ne[j] = ne[j];
    }
    if (t.ne[0] % qt->block_elems)
        return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: tensor '%s': ne[0] %" PRId64 " not a multiple of %d",
                       name, t.ne[0], qt->block_elems);
    uint64_t rows = t.ne[0] ? nel / (uint64_t)t.ne[0] : 0;
    if (__builtin_mul_overflow((uint64_t)(t.ne[0] / qt->block_elems), (uint64_t)qt->block_bytes, &t.nbytes) ||
        __builtin_mul_overflow(t.nbytes, rows, &t.nbytes))
        return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: tensor '%s': size overflows", name);
    if (w->n_t) {
        const wtensor *p = &w->t[w->n_t - 1];
        uint64_t end = p->offset + p->nbytes, pad = (w->alignment - end % w->alignment) % w->alignment;
        if (end < p->offset || end + pad < end)
            return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: tensor '%s': data blob too large", name);
        t.offset = end + pad;
    }
    if (w->n_t == w->t_cap) {
        int64_t cap = w->t_cap ? w->t_cap * 2 : 64;
        wtensor *q = realloc(w->t, (size_t)cap * sizeof *q);
        if (!q) return bk_fail(BRISK_ERR_NOMEM, "gguf writer: %" PRId64 " tensors", cap);
        w->t = q;
        w->t_cap = cap;
    }
    if (!(t.name = strdup(name))) return bk_fail(BRISK_ERR_NOMEM, "gguf writer: tensor '%s'", name);
    w->t[w->n_t++] = t;
    return BRISK_OK;
}

/* ---- output ---- */

static brisk_status w_io(gguf_writer *w, int err) {
    w->state = W_FAILED;
    return bk_fail(BRISK_ERR_IO, "%s: write failed: %s", w->path, err ? strerror(err) : "short write");
}

static brisk_status w_put(gguf_writer *w, const void *p, size_t n) {
    errno = 0;
    if (n && fwrite(p, 1, n, w->f) != n) return w_io(w, errno);
    return BRISK_OK;
}

static brisk_status w_pad(gguf_writer *w, uint64_t at) {
    static const unsigned char zeros[256];
    uint64_t pad = (w->alignment - at % w->alignment) % w->alignment;
    while (pad) {
        size_t n = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
        BK_TRY(w_put(w, zeros, n));
        pad -= n;
    }
    return BRISK_OK;
}

brisk_status gguf_writer_begin(gguf_writer *w, const char *path) {
    if (!w || !path) return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: no path");
    if (w->state != W_SETUP) return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: begin called twice");
    /* The header goes into the metadata buffer after the kv pairs, then out in one piece. */
    unsigned char head[24] = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    for (int i = 0; i < 8; i++) {
        head[8 + i] = (unsigned char)((uint64_t)w->n_t >> (8 * i));
        head[16 + i] = (unsigned char)((uint64_t)w->n_kv >> (8 * i));
    }
    size_t kv_end_at = w->kv_len;
    brisk_status s = BRISK_OK;
    for (int64_t i = 0; i < w->n_t && s == BRISK_OK; i++) {
        const wtensor *t = &w->t[i];
        s = kv_str(w, t->name, strlen(t->name));
        if (s == BRISK_OK) s = kv_u32(w, (uint32_t)t->n_dims);
        for (int j = 0; j < t->n_dims && s == BRISK_OK; j++) s = kv_u64(w, (uint64_t)t->ne[j]);
        if (s == BRISK_OK) s = kv_u32(w, t->type);
        if (s == BRISK_OK) s = kv_u64(w, t->offset);
    }
    if (s != BRISK_OK) {
        w->kv_len = kv_end_at;
        return s;
    }
    free(w->path);
    if (!(w->path = strdup(path))) return bk_fail(BRISK_ERR_NOMEM, "gguf writer: path");
    if ((s = atomic_file_open(path, &w->af)) != BRISK_OK) {
        w->kv_len = kv_end_at;
        return s;
    }
    w->f = atomic_file_stream(w->af);
    w->state = W_WRITING;
    s = w_put(w, head, sizeof head);
    if (s == BRISK_OK) s = w_put(w, w->kv, w->kv_len);
    if (s == BRISK_OK) s = w_pad(w, sizeof head + w->kv_len);
    w->kv_len = kv_end_at;
    return s;
}

brisk_status gguf_writer_write_tensor(gguf_writer *w, const void *data, uint64_t nbytes) {
    if (!w || w->state != W_WRITING)
        return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: write_tensor outside begin/finish");
    if (w->next >= w->n_t)
        return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: all %" PRId64 " tensors already written", w->n_t);
    const wtensor *t = &w->t[w->next];
    if (nbytes != t->nbytes)
        return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: tensor %" PRId64 " '%s': got %" PRIu64
                       " bytes, its shape and type need %" PRIu64, w->next, t->name, nbytes, t->nbytes);
    if (nbytes && !data) return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: tensor '%s': NULL data", t->name);
    if (w->partial)
        return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: tensor '%s': write_tensor after write_rows", t->name);
    BK_TRY(w_put(w, data, (size_t)nbytes));
    BK_TRY(w_pad(w, nbytes));
    w->next++;
    return BRISK_OK;
}

brisk_status gguf_writer_write_rows(gguf_writer *w, const void *data, uint64_t nbytes) {
    if (!w || w->state != W_WRITING)
        return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: write_rows outside begin/finish");
    if (w->next >= w->n_t)
        return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: all %" PRId64 " tensors already written", w->n_t);
    const wtensor *t = &w->t[w->next];
    if (nbytes > t->nbytes - w->partial)
        return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: tensor '%s': %" PRIu64 " more bytes, only %" PRIu64
                       " left", t->name, nbytes, t->nbytes - w->partial);
    if (nbytes && !data) return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: tensor '%s': NULL data", t->name);
    BK_TRY(w_put(w, data, (size_t)nbytes));
    w->partial += nbytes;
    if (w->partial == t->nbytes) { /* complete: pad and move on */
        BK_TRY(w_pad(w, t->nbytes));
        w->partial = 0;
        w->next++;
    }
    return BRISK_OK;
}

brisk_status gguf_writer_finish(gguf_writer *w) {
    if (!w || w->state != W_WRITING)
        return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: finish without a successful begin");
    if (w->next != w->n_t)
        return bk_fail(BRISK_ERR_INVALID_ARG, "gguf writer: %s: %" PRId64 " of %" PRId64 " tensors written",
                       w->path, w->next, w->n_t);
    atomic_file *af = w->af;
    w->af = NULL;
    w->f = NULL;
    brisk_status s = atomic_file_commit(af);
    w->state = s == BRISK_OK ? W_DONE : W_FAILED;
    return s;
}
