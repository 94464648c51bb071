/* test_gguf.c — the GGUF reader and writer: known facts of the shared test
 * files, a writer round trip, and corruption sweeps (every truncation, every
 * byte overwritten, fields set to extreme values) that must fail cleanly.
 *
 *   test_gguf [filter]          run the tests
 *   test_gguf --seeds DIR       write the fuzz seed corpus (fuzz/corpus/gguf)
 *   test_gguf --write-split SRC PREFIX N   SRC as N parts PREFIX-0000k-of-0000N.gguf (llama.cpp's gguf-split
 *                               layout; the fixtures of t_pull.sh and t_llamacpp_ref.sh) */
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/status.h"
#include "brisk.h"
#include "format/gguf.h"
#include "quant/quant.h"
#include "test.h"

/* ---- helpers ---- */

typedef struct bb { unsigned char *p; size_t n, cap; } bb; /* a growing byte buffer */

static void bb_put(bb *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static size_t bb_u32(bb *b, uint32_t v) {
    size_t at = b->n;
    unsigned char x[4];
    for (int i = 0; i < 4; i++) x[i] = (unsigned char)(v >> (8 * i));
    bb_put(b, x, 4);
    return at;
}
static size_t bb_u64(bb *b, uint64_t v) {
    size_t at = b->n;
    bb_u32(b, (uint32_t)v);
    bb_u32(b, (uint32_t)(v >> 32));
    return at;
}
static size_t bb_str(bb *b, const char *s) {
    size_t at = bb_u64(b, strlen(s));
    bb_put(b, s, strlen(s));
    return at;
}
static void bb_pad(bb *b, size_t a) {
    while (b->n % a) bb_put(b, "", 1);
}
static void put_at(unsigned char *p, size_t at, int width, uint64_t v) {
    for (int i = 0; i < width; i++) p[at + i] = (unsigned char)(v >> (8 * i));
}

static unsigned char *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(n > 0 ? (size_t)n : 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return p;
}

static char tmpdir_[256];
static const char *tmp_path(const char *name) {
    static char path[512];
    if (!tmpdir_[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(tmpdir_, sizeof tmpdir_, "%s/brisk_gguf_XXXXXX", t ? t : "/tmp");
        if (!mkdtemp(tmpdir_)) abort();
    }
    snprintf(path, sizeof path, "%s/%s", tmpdir_, name);
    return path;
}

static const char *shared_file(const char *rel) {
    static char path[1024];
    snprintf(path, sizeof path, "%s/data/%s", test_shared_dir(), rel);
    return path;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static volatile unsigned char sink_;

/* Touches everything an opened file exposes (what fuzz_gguf.c does). */
static void walk(const gguf_file *g) {
    char buf[200];
    for (int64_t i = 0; i < gguf_kv_count(g); i++) {
        const char *key = gguf_kv_key(g, i), *s;
        CHECK(gguf_find_key(g, key) == i);
        gguf_kv_format(g, i, buf, sizeof buf);
        gguf_kv_format(g, i, buf, 5);
        int64_t i64;
        double f64;
        size_t len;
        gguf_value_type et;
        uint64_t n;
        gguf_get_i64(g, key, &i64);
        gguf_get_f64(g, key, &f64);
        if (gguf_get_str(g, key, &s, &len) == BRISK_OK && len) sink_ ^= (unsigned char)s[len - 1];
        if (gguf_kv_arr_info(g, i, &et, &n) == BRISK_OK && et == GGUF_TYPE_STRING)
            for (uint64_t k = 0; k < n; k++)
                if (gguf_kv_arr_str(g, i, k, &s, &len) == BRISK_OK && len) sink_ ^= (unsigned char)s[len - 1];
    }
    for (int64_t i = 0; i < gguf_tensor_count(g); i++) {
        const gguf_tensor *t = gguf_get_tensor(g, i);
        CHECK(gguf_find_tensor(g, t->name) == t);
        if (t->nbytes) sink_ ^= ((const unsigned char *)t->data)[t->nbytes - 1];
    }
}

/* Opens an exact-size copy (so ASan sees any over-read); returns the status. */
static brisk_status open_copy(const unsigned char *p, size_t n, bool do_walk) {
    unsigned char *c = malloc(n ? n : 1);
    if (n) memcpy(c, p, n);
    gguf_file *g = NULL;
    brisk_status s = gguf_open_memory(n ? c : NULL, n, &g);
    if (s == BRISK_OK) {
        if (do_walk) walk(g);
        gguf_close(g);
    } else {
        CHECK(g == NULL);
        CHECK(brisk_last_error()[0] != 0);
    }
    free(c);
    return s;
}

/* ---- a small hand-built file, with the position of every field ---- */

typedef struct mini {
    bb b;
    size_t magic, version, n_tensors, n_kv, key0_len, align_type, align_val, u32b_key, u32a_type, str_len;
    size_t bool_val, arr_type, arr_n, arr_str0;
    size_t t_name_len[2], t_name[2], t_ndims[2], t_ne0[2], t_ne1, t_type[2], t_off[2], data;
} mini;

static void mini_build(mini *m) {
    memset(m, 0, sizeof *m);
    bb *b = &m->b;
    m->magic = b->n;
    bb_put(b, "GGUF", 4);
    m->version = bb_u32(b, 3);
    m->n_tensors = bb_u64(b, 2);
    m->n_kv = bb_u64(b, 6);
    m->key0_len = bb_str(b, "general.architecture");
    bb_u32(b, GGUF_TYPE_STRING);
    m->str_len = bb_str(b, "test");
    bb_str(b, "general.alignment");
    m->align_type = bb_u32(b, GGUF_TYPE_UINT32);
    m->align_val = bb_u32(b, 32);
    bb_str(b, "t.u32a");
    m->u32a_type = bb_u32(b, GGUF_TYPE_UINT32);
    bb_u32(b, 7);
    m->u32b_key = bb_str(b, "t.u32b") + 8;
    bb_u32(b, GGUF_TYPE_UINT32);
    bb_u32(b, 8);
    bb_str(b, "t.flag");
    bb_u32(b, GGUF_TYPE_BOOL);
    m->bool_val = b->n;
    bb_put(b, "\1", 1);
    bb_str(b, "t.words");
    bb_u32(b, GGUF_TYPE_ARRAY);
    m->arr_type = bb_u32(b, GGUF_TYPE_STRING);
    m->arr_n = bb_u64(b, 3);
    m->arr_str0 = bb_str(b, "a");
    bb_str(b, "bc");
    bb_str(b, "");
    const char *names[2] = {"wa", "wb"};
    for (int t = 0; t < 2; t++) {
        m->t_name_len[t] = bb_str(b, names[t]);
        m->t_name[t] = m->t_name_len[t] + 8;
        m->t_ndims[t] = bb_u32(b, t == 0 ? 2 : 1);
        m->t_ne0[t] = bb_u64(b, 8);
        if (t == 0) m->t_ne1 = bb_u64(b, 2);
        m->t_type[t] = bb_u32(b, 0);
        m->t_off[t] = bb_u64(b, t == 0 ? 0 : 64);
    }
    bb_pad(b, 32);
    m->data = b->n;
    for (int i = 0; i < 24; i++) {
        float f = (float)i;
        bb_put(b, &f, 4);
    }
}

static void test_mini_valid(void) {
    mini m;
    mini_build(&m);
    gguf_file *g;
    CHECK_OK(gguf_open_memory(m.b.p, m.b.n, &g));
    if (g) {
        CHECK(gguf_version(g) == 3);
        CHECK(gguf_alignment(g) == 32);
        CHECK(gguf_data_offset(g) == m.data);
        CHECK(gguf_kv_count(g) == 6 && gguf_tensor_count(g) == 2);
        uint32_t u;
        CHECK_OK(gguf_get_u32(g, "t.u32b", &u));
        CHECK(u == 8);
        bool fl = false;
        CHECK_OK(gguf_get_bool(g, "t.flag", &fl));
        CHECK(fl);
        const char *s;
        size_t len;
        CHECK_OK(gguf_get_arr_str(g, "t.words", 1, &s, &len));
        CHECK(len == 2 && !memcmp(s, "bc", 2));
        CHECK_OK(gguf_get_arr_str(g, "t.words", 2, &s, &len));
        CHECK(len == 0);
        CHECK(gguf_get_arr_str(g, "t.words", 3, &s, &len) == BRISK_ERR_RANGE);
        const gguf_tensor *t = gguf_find_tensor(g, "wb");
        CHECK(t && t->nbytes == 32 && t->offset == 64 && t->ne[0] == 8 && t->ne[1] == 1);
        CHECK(t && t->data == m.b.p + m.data + 64);
        walk(g);
        gguf_close(g);
    }
    free(m.b.p);
}

typedef struct patch { const char *what; size_t mini_off; int width; uint64_t value; } patch;

static void test_mini_fields(void) {
    mini m;
    mini_build(&m);
    const uint64_t U64 = UINT64_MAX;
    const patch patches[] = {
        {"magic", offsetof(mini, magic), 4, 0x46554758},
        {"version 1", offsetof(mini, version), 4, 1},
        {"version 0", offsetof(mini, version), 4, 0},
        {"version 4", offsetof(mini, version), 4, 4},
        {"big-endian version", offsetof(mini, version), 4, 0x03000000},
        {"n_tensors+1", offsetof(mini, n_tensors), 8, 3},
        {"n_tensors max", offsetof(mini, n_tensors), 8, U64},
        {"n_tensors 2^62", offsetof(mini, n_tensors), 8, 1ull << 62},
        {"n_tensors 2^32", offsetof(mini, n_tensors), 8, 1ull << 32},
        {"n_kv+1", offsetof(mini, n_kv), 8, 7},
        {"n_kv max", offsetof(mini, n_kv), 8, U64},
        {"n_kv 2^62", offsetof(mini, n_kv), 8, 1ull << 62},
        {"key len 0", offsetof(mini, key0_len), 8, 0},
        {"key len max", offsetof(mini, key0_len), 8, U64},
        {"key len max-7", offsetof(mini, key0_len), 8, U64 - 7},
        {"key len 2^40", offsetof(mini, key0_len), 8, 1ull << 40},
        {"key NUL", offsetof(mini, u32b_key), 1, 0},
        {"duplicate key", offsetof(mini, u32b_key) /* +5 below */, 0, 'a'},
        {"value type 13", offsetof(mini, u32a_type), 4, 13},
        {"value type max", offsetof(mini, u32a_type), 4, 0xffffffff},
        {"string len max", offsetof(mini, str_len), 8, U64},
        {"string len max-7", offsetof(mini, str_len), 8, U64 - 7},
        {"string len 2^40", offsetof(mini, str_len), 8, 1ull << 40},
        {"bool 2", offsetof(mini, bool_val), 1, 2},
        {"bool 255", offsetof(mini, bool_val), 1, 255},
        {"array type 13", offsetof(mini, arr_type), 4, 13},
        {"array n max", offsetof(mini, arr_n), 8, U64},
        {"array n 2^61", offsetof(mini, arr_n), 8, 1ull << 61},
        {"array n 2^61+1", offsetof(mini, arr_n), 8, (1ull << 61) + 1},
        {"array n 2^32", offsetof(mini, arr_n), 8, 1ull << 32},
        {"array string len max", offsetof(mini, arr_str0), 8, U64},
        {"array string len 2^40", offsetof(mini, arr_str0), 8, 1ull << 40},
        {"alignment 0", offsetof(mini, align_val), 4, 0},
        {"alignment 3", offsetof(mini, align_val), 4, 3},
        {"alignment 48", offsetof(mini, align_val), 4, 48},
        {"alignment 2^31+1", offsetof(mini, align_val), 4, 0x80000001},
        {"alignment as i32", offsetof(mini, align_type), 4, GGUF_TYPE_INT32},
        {"alignment as f32", offsetof(mini, align_type), 4, GGUF_TYPE_FLOAT32},
        {"name len 0", offsetof(mini, t_name_len[0]), 8, 0},
        {"name len 64", offsetof(mini, t_name_len[0]), 8, 64},
        {"name len max", offsetof(mini, t_name_len[1]), 8, U64},
        {"duplicate tensor", offsetof(mini, t_name[1]), 0, 'a'},
        {"n_dims 5", offsetof(mini, t_ndims[0]), 4, 5},
        {"n_dims max", offsetof(mini, t_ndims[1]), 4, 0xffffffff},
        {"ne negative", offsetof(mini, t_ne0[0]), 8, U64},
        {"ne INT64_MIN", offsetof(mini, t_ne0[1]), 8, 1ull << 63},
        {"ne product overflow", offsetof(mini, t_ne0[0]), 8, 1ull << 62},
        {"ne product 2^64", offsetof(mini, t_ne1), 8, 1ull << 61},
        {"ne past end", offsetof(mini, t_ne0[1]), 8, 1ull << 40},
        {"ne overlap", offsetof(mini, t_ne1), 8, 3},
        {"type 99", offsetof(mini, t_type[0]), 4, 99},
        {"type retired 31", offsetof(mini, t_type[1]), 4, 31},
        {"type max", offsetof(mini, t_type[1]), 4, 0xffffffff},
        {"type q4_0 ne0 8", offsetof(mini, t_type[0]), 4, 2},
        {"type q4_K ne0 8", offsetof(mini, t_type[1]), 4, 12},
        {"offset misaligned", offsetof(mini, t_off[1]), 8, 1},
        {"offset overlap", offsetof(mini, t_off[1]), 8, 32},
        {"offset same", offsetof(mini, t_off[1]), 8, 0},
        {"offset past end", offsetof(mini, t_off[1]), 8, 96},
        {"offset first past end", offsetof(mini, t_off[0]), 8, 64},
        {"offset wraps", offsetof(mini, t_off[1]), 8, U64 - 31},
        {"offset 2^63", offsetof(mini, t_off[0]), 8, 1ull << 63},
    };
    for (size_t k = 0; k < sizeof patches / sizeof patches[0]; k++) {
        const patch *pt = &patches[k];
        unsigned char *c = malloc(m.b.n);
        memcpy(c, m.b.p, m.b.n);
        size_t at = *(const size_t *)((const char *)&m + pt->mini_off);
        if (pt->width == 0)
            c[at + (strstr(pt->what, "key") ? 5 : 1)] = (unsigned char)pt->value; /* rename: "t.u32b"->"t.u32a", "wb"->"wa" */
        else
            put_at(c, at, pt->width, pt->value);
        gguf_file *g = NULL;
        brisk_status s = gguf_open_memory(c, m.b.n, &g);
        if (s == BRISK_OK) {
            fprintf(stderr, "  '%s' was accepted\n", pt->what);
            gguf_close(g);
        }
        CHECK(s != BRISK_OK);
        if (getenv("GGUF_VERBOSE")) fprintf(stderr, "  %-24s -> %s\n", pt->what, brisk_last_error());
        if (!strncmp(pt->what, "version 1", 9) || strstr(pt->what, "big-endian"))
            CHECK(s == BRISK_ERR_UNSUPPORTED);
        else
            CHECK(s == BRISK_ERR_FORMAT);
        free(c);
    }
    free(m.b.p);
}

static void test_mini_truncate_and_mutate(void) {
    mini m;
    mini_build(&m);
    for (size_t n = 0; n < m.b.n; n++) CHECK(open_copy(m.b.p, n, false) == BRISK_ERR_FORMAT);
    /* Every byte overwritten by a few values: any status, never a crash. */
    const int vals[] = {0x00, 0xff, 0x80, 0x7f, 0x01, -1 /* b+1 */, -2 /* b^0x40 */};
    int ok = 0;
    unsigned char *c = malloc(m.b.n);
    for (size_t i = 0; i < m.data; i++)
        for (size_t v = 0; v < sizeof vals / sizeof vals[0]; v++) {
            memcpy(c, m.b.p, m.b.n);
            c[i] = vals[v] == -1 ? (unsigned char)(c[i] + 1) : vals[v] == -2 ? c[i] ^ 0x40 : (unsigned char)vals[v];
            ok += open_copy(c, m.b.n, true) == BRISK_OK;
        }
    /* Random multi-byte damage, fixed seed. */
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int it = 0; it < 20000; it++) {
        memcpy(c, m.b.p, m.b.n);
        int k = 1 + (int)(rng % 4);
        for (int j = 0; j < k; j++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(rng >> 33) % m.data;
            c[at] = (unsigned char)(rng >> 13);
            if ((rng >> 7) & 1 && at + 8 <= m.b.n) put_at(c, at, 8, (rng >> 9) & 1 ? UINT64_MAX : 1ull << 62);
        }
        ok += open_copy(c, m.b.n, true) == BRISK_OK;
    }
    free(c);
    CHECK(ok > 0); /* some damage (e.g. inside padding or values) is harmless */
    free(m.b.p);
}

/* A version-2 file with an array of arrays and the scalar types the writer has no setter for. */
static void nested_build(bb *b) {
    bb_put(b, "GGUF", 4);
    bb_u32(b, 2); /* version 2 reads the same */
    bb_u64(b, 0);
    bb_u64(b, 3);
    bb_str(b, "n.grid"); /* [2 x [3 x u16]] */
    bb_u32(b, GGUF_TYPE_ARRAY);
    bb_u32(b, GGUF_TYPE_ARRAY);
    bb_u64(b, 2);
    for (int r = 0; r < 2; r++) {
        bb_u32(b, GGUF_TYPE_UINT16);
        bb_u64(b, 3);
        for (int k = 0; k < 3; k++) bb_put(b, "\1\0", 2);
    }
    bb_str(b, "n.i8");
    bb_u32(b, GGUF_TYPE_INT8);
    bb_put(b, "\xfe", 1);
    bb_str(b, "n.f64");
    bb_u32(b, GGUF_TYPE_FLOAT64);
    double d = 2.5;
    bb_put(b, &d, 8);
}

static void test_nested_arrays(void) {
    bb b = {0};
    nested_build(&b);
    gguf_file *g;
    CHECK_OK(gguf_open_memory(b.p, b.n, &g));
    if (g) {
        CHECK(gguf_version(g) == 2);
        gguf_value_type et;
        uint64_t n;
        const void *data;
        CHECK_OK(gguf_get_arr(g, "n.grid", &et, &n, &data));
        CHECK(et == GGUF_TYPE_ARRAY && n == 2 && data == NULL);
        const char *s;
        size_t len;
        CHECK(gguf_get_arr_str(g, "n.grid", 0, &s, &len) == BRISK_ERR_UNSUPPORTED);
        int64_t i64;
        CHECK_OK(gguf_get_i64(g, "n.i8", &i64));
        CHECK(i64 == -2);
        uint32_t u;
        CHECK(gguf_get_u32(g, "n.i8", &u) == BRISK_ERR_FORMAT);
        CHECK(gguf_get_u32(g, "n.absent", &u) == BRISK_ERR_NOT_FOUND);
        CHECK(gguf_get_str(g, "n.i8", &s, &len) == BRISK_ERR_FORMAT);
        float f;
        CHECK_OK(gguf_get_f32(g, "n.f64", &f));
        CHECK(f == 2.5f);
        char buf[64];
        CHECK_OK(gguf_kv_format(g, 0, buf, sizeof buf));
        CHECK(!strcmp(buf, "[2 x array]"));
        gguf_close(g);
    }
    for (size_t k = 0; k < b.n; k++) CHECK(open_copy(b.p, k, false) != BRISK_OK);
    free(b.p);
    /* Nesting past the limit. */
    bb z = {0};
    bb_put(&z, "GGUF", 4);
    bb_u32(&z, 3);
    bb_u64(&z, 0);
    bb_u64(&z, 1);
    bb_str(&z, "deep");
    bb_u32(&z, GGUF_TYPE_ARRAY);
    for (int k = 0; k < 40; k++) {
        bb_u32(&z, GGUF_TYPE_ARRAY);
        bb_u64(&z, 1);
    }
    bb_u32(&z, GGUF_TYPE_UINT8);
    bb_u64(&z, 0);
    CHECK(open_copy(z.p, z.n, false) == BRISK_ERR_FORMAT);
    free(z.p);
}

/* ---- the shared test files ---- */

static void test_stories260k(void) {
    gguf_file *g;
    CHECK_OK(gguf_open(shared_file("stories260K/stories260K.gguf"), &g));
    if (!g) return;
    CHECK(gguf_version(g) == 3);
    CHECK(gguf_tensor_count(g) == 48);
    CHECK(gguf_kv_count(g) == 19);
    CHECK(gguf_data_offset(g) == 14176);
    CHECK(gguf_alignment(g) == 32);
    CHECK(gguf_file_size(g) == 1185376);
    uint32_t u;
    int64_t i64;
    float f;
    const char *s;
    size_t len;
    CHECK_OK(gguf_get_u32(g, "llama.embedding_length", &u));
    CHECK(u == 64);
    CHECK_OK(gguf_get_i64(g, "llama.feed_forward_length", &i64));
    CHECK(i64 == 172);
    CHECK_OK(gguf_get_u32(g, "llama.context_length", &u));
    CHECK(u == 2048);
    CHECK_OK(gguf_get_u32(g, "llama.attention.head_count_kv", &u));
    CHECK(u == 4);
    CHECK_OK(gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f));
    CHECK(f == 1e-5f);
    CHECK(gguf_get_f32(g, "llama.rope.freq_base", &f) == BRISK_ERR_NOT_FOUND);
    CHECK_OK(gguf_get_i64(g, "tokenizer.ggml.seperator_token_id", &i64));
    CHECK(i64 == 0xFFFFFFFFll);
    CHECK_OK(gguf_get_str(g, "general.architecture", &s, &len));
    CHECK(len == 5 && !memcmp(s, "llama", 5));
    CHECK(gguf_get_str(g, "llama.block_count", &s, &len) == BRISK_ERR_FORMAT);
    gguf_value_type et;
    uint64_t n;
    const void *data;
    CHECK_OK(gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data));
    CHECK(et == GGUF_TYPE_STRING && n == 512);
    CHECK_OK(gguf_get_arr_str(g, "tokenizer.ggml.tokens", 259, &s, &len));
    CHECK(len == 4 && !memcmp(s, "\xe2\x96\x81t", 4)); /* "▁t" */
    CHECK_OK(gguf_get_arr_str(g, "tokenizer.ggml.tokens", 3, &s, &len));
    CHECK(len == 6 && !memcmp(s, "<0x00>", 6));
    CHECK_OK(gguf_get_arr_str(g, "tokenizer.ggml.tokens", 511, &s, &len));
    CHECK(gguf_get_arr_str(g, "tokenizer.ggml.tokens", 512, &s, &len) == BRISK_ERR_RANGE);
    CHECK_OK(gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, &data));
    CHECK(et == GGUF_TYPE_INT32 && n == 512);
    if (et == GGUF_TYPE_INT32 && n == 512) {
        int32_t tt[512];
        memcpy(tt, data, sizeof tt);
        int counts[8] = {0};
        for (int i = 0; i < 512; i++)
            if (tt[i] >= 0 && tt[i] < 8) counts[tt[i]]++;
        CHECK(counts[1] == 253 && counts[2] == 1 && counts[3] == 2 && counts[6] == 256);
    }
    CHECK_OK(gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n, &data));
    CHECK(et == GGUF_TYPE_FLOAT32 && n == 512);
    if (n == 512) {
        float last;
        memcpy(&last, (const char *)data + 511 * 4, 4);
        CHECK(last == -252.0f);
    }
    CHECK(gguf_get_arr(g, "general.name", &et, &n, &data) == BRISK_ERR_FORMAT);
    char buf[256];
    int64_t kt = gguf_find_key(g, "tokenizer.ggml.tokens");
    CHECK_OK(gguf_kv_format(g, kt, buf, sizeof buf));
    CHECK(!strncmp(buf, "[512 x string] \"<unk>\", \"<s>\", \"</s>\"", 37));

    int64_t params = 0;
    uint64_t bytes = 0;
    for (int64_t i = 0; i < gguf_tensor_count(g); i++) {
        const gguf_tensor *t = gguf_get_tensor(g, i);
        CHECK(t->type == 0);
        params += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        bytes += t->nbytes;
        CHECK(t->offset % 32 == 0);
    }
    CHECK(params == 292800);
    CHECK(bytes == 292800 * 4);
    const gguf_tensor *emb = gguf_find_tensor(g, "token_embd.weight"), *out = gguf_find_tensor(g, "output.weight");
    CHECK(emb && emb->n_dims == 2 && emb->ne[0] == 64 && emb->ne[1] == 512 && emb->nbytes == 131072);
    CHECK(emb && out && !memcmp(emb->data, out->data, emb->nbytes)); /* tied classifier, copied */
    const gguf_tensor *down = gguf_find_tensor(g, "blk.4.ffn_down.weight");
    CHECK(down && down->ne[0] == 172 && down->ne[1] == 64);
    CHECK(gguf_find_tensor(g, "blk.5.ffn_down.weight") == NULL);
    CHECK(gguf_get_tensor(g, 48) == NULL && gguf_get_tensor(g, -1) == NULL);
    walk(g);
    gguf_close(g);
}

static void test_vocab_files(void) {
    static const struct { const char *file; uint64_t n_tokens; const char *tok0; } v[] = {
        {"ggml-vocab-llama-spm.gguf", 32000, "<unk>"}, {"ggml-vocab-phi-3.gguf", 32064, "<unk>"},
        {"ggml-vocab-gpt-2.gguf", 50257, "!"},         {"ggml-vocab-qwen2.gguf", 151936, "!"},
        {"ggml-vocab-llama-bpe.gguf", 128256, "!"},    {"ggml-vocab-qwen35.gguf", 151936, "!"},
    };
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
        char rel[128];
        snprintf(rel, sizeof rel, "llama.cpp-vocab/%s", v[k].file);
        gguf_file *g;
        double t0 = now_ms();
        CHECK_OK(gguf_open(shared_file(rel), &g));
        double ms = now_ms() - t0;
        if (!g) continue;
        gguf_value_type et;
        uint64_t n;
        CHECK_OK(gguf_kv_arr_info(g, gguf_find_key(g, "tokenizer.ggml.tokens"), &et, &n));
        CHECK(et == GGUF_TYPE_STRING && n == v[k].n_tokens);
        const char *s;
        size_t len;
        CHECK_OK(gguf_get_arr_str(g, "tokenizer.ggml.tokens", 0, &s, &len));
        CHECK(len == strlen(v[k].tok0) && !memcmp(s, v[k].tok0, len));
        CHECK_OK(gguf_get_arr_str(g, "tokenizer.ggml.tokens", n - 1, &s, &len));
        CHECK(gguf_tensor_count(g) == 0);
        CHECK(gguf_data_offset(g) <= gguf_file_size(g));
        if (getenv("GGUF_VERBOSE")) fprintf(stderr, "  %s: open %.2f ms\n", v[k].file, ms);
        CHECK(ms < 1000); /* a few ms in practice; loose for sanitizer builds */
        gguf_close(g);
    }
}

static void test_stories_corrupt(void) {
    size_t n;
    unsigned char *p = read_all(shared_file("stories260K/stories260K.gguf"), &n);
    CHECK(p != NULL);
    if (!p) return;
    const size_t head = 14176;
    /* Every cut inside the header and a spread of cuts inside the data. */
    for (size_t k = 0; k <= head + 64; k++) CHECK(open_copy(p, k, false) == BRISK_ERR_FORMAT);
    for (size_t k = head + 64; k < n; k += 4099) CHECK(open_copy(p, k, false) == BRISK_ERR_FORMAT);
    CHECK(open_copy(p, n - 1, false) == BRISK_ERR_FORMAT);
    CHECK(open_copy(p, n, false) == BRISK_OK);
    /* Every header byte overwritten, in place on one exact-size copy. */
    unsigned char *c = malloc(n);
    memcpy(c, p, n);
    const int vals[] = {0xff, 0x00, -1};
    for (size_t i = 0; i < head; i++)
        for (size_t v = 0; v < sizeof vals / sizeof vals[0]; v++) {
            unsigned char old = c[i];
            c[i] = vals[v] < 0 ? old ^ 0x01 : (unsigned char)vals[v];
            gguf_file *g = NULL;
            if (gguf_open_memory(c, n, &g) == BRISK_OK) {
                walk(g);
                gguf_close(g);
            }
            c[i] = old;
        }
    free(c);
    free(p);
}

/* ---- writer ---- */

static void test_writer_round_trip(void) {
    const char *path = tmp_path("rt.gguf");
    gguf_writer *w = gguf_writer_new();
    CHECK(w != NULL);
    if (!w) return;
    CHECK_OK(gguf_writer_set_str(w, "general.architecture", "test"));
    CHECK_OK(gguf_writer_set_u32(w, "general.alignment", 64));
    CHECK_OK(gguf_writer_set_u32(w, "a.u32", 4000000000u));
    CHECK_OK(gguf_writer_set_i32(w, "a.i32", -5));
    CHECK_OK(gguf_writer_set_u64(w, "a.u64", 1ull << 40));
    CHECK_OK(gguf_writer_set_f32(w, "a.f32", 0.25f));
    CHECK_OK(gguf_writer_set_bool(w, "a.bool", true));
    CHECK_OK(gguf_writer_set_str(w, "a.empty", ""));
    const int16_t i16[3] = {-1, 2, 300};
    CHECK_OK(gguf_writer_set_arr(w, "a.i16s", GGUF_TYPE_INT16, i16, 3));
    const double f64[2] = {1.5, -2.0};
    CHECK_OK(gguf_writer_set_arr(w, "a.f64s", GGUF_TYPE_FLOAT64, f64, 2));
    CHECK_OK(gguf_writer_set_arr(w, "a.none", GGUF_TYPE_UINT8, NULL, 0));
    const char *strs[4] = {"x", "", "a\0b", "hello"};
    const size_t lens[4] = {1, 0, 3, 5};
    CHECK_OK(gguf_writer_set_arr_str(w, "a.strs", strs, lens, 4));
    CHECK_OK(gguf_writer_set_arr_str(w, "a.strs2", strs, NULL, 2));
    /* Misuse: each refused, nothing recorded. */
    CHECK(gguf_writer_set_u32(w, "a.u32", 1) == BRISK_ERR_INVALID_ARG);
    CHECK(gguf_writer_set_u32(w, "", 1) == BRISK_ERR_INVALID_ARG);
    CHECK(gguf_writer_set_arr(w, "a.bad", GGUF_TYPE_STRING, strs, 1) == BRISK_ERR_INVALID_ARG);
    CHECK(gguf_writer_set_i32(w, "general.alignment", 64) == BRISK_ERR_INVALID_ARG);

    const int64_t ne_a[2] = {5, 3}, ne_b[1] = {7}, ne_c[2] = {32, 2}, ne_z[2] = {0, 4};
    CHECK_OK(gguf_writer_add_tensor(w, "t.a", QT_F32, 2, ne_a));
    CHECK_OK(gguf_writer_add_tensor(w, "t.b", QT_F16, 1, ne_b));
    CHECK_OK(gguf_writer_add_tensor(w, "t.c", QT_Q8_0, 2, ne_c));
    CHECK_OK(gguf_writer_add_tensor(w, "t.zero", QT_F32, 2, ne_z));
    CHECK(gguf_writer_add_tensor(w, "t.a", QT_F32, 1, ne_b) == BRISK_ERR_INVALID_ARG);
    CHECK(gguf_writer_add_tensor(w, "t.q", QT_Q8_0, 1, ne_b) == BRISK_ERR_INVALID_ARG);
    CHECK(gguf_writer_add_tensor(w, "t.u", 99, 1, ne_b) == BRISK_ERR_INVALID_ARG);
    CHECK(gguf_writer_add_tensor(w, "t.d", QT_F32, 5, ne_a) == BRISK_ERR_INVALID_ARG);
    CHECK(gguf_writer_write_tensor(w, "", 0) == BRISK_ERR_INVALID_ARG); /* before begin */

    CHECK_OK(gguf_writer_begin(w, path));
    CHECK(gguf_writer_set_u32(w, "late", 1) == BRISK_ERR_INVALID_ARG);
    float a[15];
    uint16_t hb[7];
    unsigned char q[68];
    for (int i = 0; i < 15; i++) a[i] = (float)i * 0.5f;
    for (int i = 0; i < 7; i++) hb[i] = (uint16_t)(0x3c00 + i);
    for (int i = 0; i < 68; i++) q[i] = (unsigned char)(i * 7);
    CHECK(gguf_writer_write_tensor(w, a, sizeof a - 4) == BRISK_ERR_INVALID_ARG); /* wrong size */
    CHECK_OK(gguf_writer_write_tensor(w, a, sizeof a));
    CHECK(gguf_writer_finish(w) == BRISK_ERR_INVALID_ARG); /* 3 still to come */
    CHECK_OK(gguf_writer_write_tensor(w, hb, sizeof hb));
    CHECK_OK(gguf_writer_write_tensor(w, q, sizeof q));
    CHECK_OK(gguf_writer_write_tensor(w, NULL, 0));
    CHECK(gguf_writer_write_tensor(w, a, 4) == BRISK_ERR_INVALID_ARG); /* one too many */
    CHECK_OK(gguf_writer_finish(w));
    gguf_writer_free(w);

    gguf_file *g;
    CHECK_OK(gguf_open(path, &g));
    if (!g) return;
    CHECK(gguf_version(g) == 3 && gguf_alignment(g) == 64 && gguf_data_offset(g) % 64 == 0);
    CHECK(gguf_kv_count(g) == 13 && gguf_tensor_count(g) == 4);
    uint32_t u;
    int64_t i64;
    float f;
    bool b;
    const char *s;
    size_t len;
    CHECK_OK(gguf_get_u32(g, "a.u32", &u));
    CHECK(u == 4000000000u);
    CHECK_OK(gguf_get_i64(g, "a.i32", &i64));
    CHECK(i64 == -5);
    CHECK_OK(gguf_get_i64(g, "a.u64", &i64));
    CHECK(i64 == 1ll << 40);
    CHECK(gguf_get_u32(g, "a.u64", &u) == BRISK_ERR_FORMAT);
    CHECK_OK(gguf_get_f32(g, "a.f32", &f));
    CHECK(f == 0.25f);
    CHECK_OK(gguf_get_bool(g, "a.bool", &b));
    CHECK(b);
    CHECK_OK(gguf_get_str(g, "a.empty", &s, &len));
    CHECK(len == 0);
    gguf_value_type et;
    uint64_t n;
    const void *data;
    CHECK_OK(gguf_get_arr(g, "a.i16s", &et, &n, &data));
    CHECK(et == GGUF_TYPE_INT16 && n == 3 && !memcmp(data, i16, sizeof i16));
    CHECK_OK(gguf_get_arr(g, "a.f64s", &et, &n, &data));
    CHECK(et == GGUF_TYPE_FLOAT64 && n == 2 && !memcmp(data, f64, sizeof f64));
    CHECK_OK(gguf_get_arr(g, "a.none", &et, &n, &data));
    CHECK(et == GGUF_TYPE_UINT8 && n == 0);
    for (uint64_t i = 0; i < 4; i++) {
        CHECK_OK(gguf_get_arr_str(g, "a.strs", i, &s, &len));
        CHECK(len == lens[i] && !memcmp(s, strs[i], len));
    }
    CHECK_OK(gguf_get_arr_str(g, "a.strs2", 1, &s, &len));
    CHECK(len == 0);
    const gguf_tensor *t = gguf_find_tensor(g, "t.a");
    CHECK(t && t->nbytes == sizeof a && !memcmp(t->data, a, sizeof a) && t->offset == 0);
    t = gguf_find_tensor(g, "t.b");
    CHECK(t && t->nbytes == sizeof hb && !memcmp(t->data, hb, sizeof hb) && t->offset == 64);
    t = gguf_find_tensor(g, "t.c");
    CHECK(t && t->type == QT_Q8_0 && t->nbytes == 68 && !memcmp(t->data, q, 68) && t->offset == 128);
    t = gguf_find_tensor(g, "t.zero");
    CHECK(t && t->nbytes == 0 && t->ne[0] == 0 && t->ne[1] == 4 && t->offset == 256);
    CHECK(gguf_file_size(g) == gguf_data_offset(g) + 256);
    gguf_close(g);
    remove(path);
}

/* The codebook, ternary and FP4 types (quant_iq.h): written and read back with
 * ggml's block sizes (3 x 2 blocks each), and a row that is not a whole number
 * of blocks refused. */
static void test_low_bit_types(void) {
    static const struct { uint32_t t; int64_t be, bb; } ty[] = {
        {QT_IQ2_XXS, 256, 66}, {QT_IQ2_XS, 256, 74}, {QT_IQ2_S, 256, 82}, {QT_IQ3_XXS, 256, 98},
        {QT_IQ3_S, 256, 110},  {QT_IQ1_S, 256, 50},  {QT_IQ1_M, 256, 56}, {QT_TQ1_0, 256, 54},
        {QT_TQ2_0, 256, 66},   {QT_NVFP4, 64, 36},   {QT_Q1_0, 128, 18},  {QT_Q2_0, 64, 18},
    };
    enum { NT = sizeof ty / sizeof ty[0] };
    const char *path = tmp_path("lowbit.gguf");
    gguf_writer *w = gguf_writer_new();
    CHECK(w != NULL);
    if (!w) return;
    char name[NT][32];
    for (int i = 0; i < NT; i++) {
        snprintf(name[i], sizeof name[i], "t.%s", quant_type_name(ty[i].t));
        const int64_t ne[2] = {3 * ty[i].be, 2}, bad[2] = {ty[i].be + 32, 1};
        CHECK_OK(gguf_writer_add_tensor(w, name[i], ty[i].t, 2, ne));
        CHECK(gguf_writer_add_tensor(w, "t.bad", ty[i].t, 2, bad) == BRISK_ERR_INVALID_ARG);
    }
    CHECK_OK(gguf_writer_begin(w, path));
    static unsigned char buf[6 * 110];
    for (int i = 0; i < NT; i++) {
        for (int k = 0; k < 6 * ty[i].bb; k++) buf[k] = (unsigned char)(k * 13 + i);
        CHECK_OK(gguf_writer_write_tensor(w, buf, (size_t)(6 * ty[i].bb)));
    }
    CHECK_OK(gguf_writer_finish(w));
    gguf_writer_free(w);
    gguf_file *g = NULL;
    CHECK_OK(gguf_open(path, &g));
    for (int i = 0; g && i < NT; i++) {
        const gguf_tensor *t = gguf_find_tensor(g, name[i]);
        CHECK(t && t->type == ty[i].t && t->nbytes == (uint64_t)(6 * ty[i].bb) &&
              ((const unsigned char *)t->data)[1] == (unsigned char)(13 + i));
    }
    gguf_close(g);
    remove(path);
}

/* Re-encoding stories260K through copy_kv and the tensor table gives the same bytes. */
static void test_writer_reencode(void) {
    gguf_file *g;
    CHECK_OK(gguf_open(shared_file("stories260K/stories260K.gguf"), &g));
    if (!g) return;
    const char *path = tmp_path("re.gguf");
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_kv_count(g); i++) CHECK_OK(gguf_writer_copy_kv(w, g, i));
    for (int64_t i = 0; i < gguf_tensor_count(g); i++) {
        const gguf_tensor *t = gguf_get_tensor(g, i);
        CHECK_OK(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne));
    }
    CHECK_OK(gguf_writer_begin(w, path));
    for (int64_t i = 0; i < gguf_tensor_count(g); i++) {
        const gguf_tensor *t = gguf_get_tensor(g, i);
        CHECK_OK(gguf_writer_write_tensor(w, t->data, t->nbytes));
    }
    CHECK_OK(gguf_writer_finish(w));
    gguf_writer_free(w);
    size_t n1, n2;
    unsigned char *a = read_all(shared_file("stories260K/stories260K.gguf"), &n1), *b = read_all(path, &n2);
    CHECK(a && b && n1 == n2 && !memcmp(a, b, n1));
    free(a);
    free(b);
    gguf_close(g);
    remove(path);
}

/* Entries of the test directory whose names start with prefix. */
static int count_prefixed(const char *prefix) {
    DIR *d = opendir(tmpdir_);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += !strncmp(e->d_name, prefix, strlen(prefix));
    if (d) closedir(d);
    return n;
}

static void test_writer_abandon(void) {
    const char *path = tmp_path("abandon.gguf");
    gguf_writer *w = gguf_writer_new();
    const int64_t ne[1] = {4};
    CHECK_OK(gguf_writer_add_tensor(w, "x", QT_F32, 1, ne));
    CHECK_OK(gguf_writer_begin(w, path));
    struct stat st;
    CHECK(stat(path, &st) != 0 && errno == ENOENT); /* nothing at the path before finish */
    CHECK(count_prefixed("abandon.gguf.tmp.") == 1);
    gguf_writer_free(w); /* unfinished: the temporary file goes */
    CHECK(stat(path, &st) != 0 && errno == ENOENT);
    CHECK(count_prefixed("abandon.gguf") == 0);
    /* an existing file at the path keeps its bytes through an abandoned write */
    FILE *f = fopen(path, "wb");
    CHECK(f && fputs("old", f) >= 0 && fclose(f) == 0);
    w = gguf_writer_new();
    CHECK_OK(gguf_writer_add_tensor(w, "x", QT_F32, 1, ne));
    CHECK_OK(gguf_writer_begin(w, path));
    gguf_writer_free(w);
    char *old = test_read_file(path, NULL);
    CHECK(old && !strcmp(old, "old"));
    free(old);
    CHECK(count_prefixed("abandon.gguf") == 1);
    remove(path);
    gguf_writer_free(NULL);
    gguf_close(NULL);
    w = gguf_writer_new();
    CHECK(gguf_writer_begin(w, "/nonexistent-dir/x.gguf") == BRISK_ERR_IO);
    gguf_writer_free(w);
    gguf_file *g = (gguf_file *)1;
    CHECK(gguf_open("/nonexistent-dir/x.gguf", &g) == BRISK_ERR_IO && g == NULL);
}

/* ---- fuzz seeds ---- */

static int write_file(const char *dir, const char *name, const void *p, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) return 1;
    return fclose(f) != 0;
}

static int write_seeds(const char *dir) {
    int bad = 0;
    bb e = {0};
    bb_put(&e, "GGUF", 4);
    bb_u32(&e, 3);
    bb_u64(&e, 0);
    bb_u64(&e, 0);
    bad |= write_file(dir, "empty.gguf", e.p, e.n);
    put_at(e.p, 4, 4, 1);
    bad |= write_file(dir, "v1.gguf", e.p, e.n);
    free(e.p);
    mini m;
    mini_build(&m);
    bad |= write_file(dir, "mini.gguf", m.b.p, m.b.n);
    bad |= write_file(dir, "mini-truncated.gguf", m.b.p, m.b.n - 40);
    put_at(m.b.p, m.t_off[1], 8, 32);
    bad |= write_file(dir, "mini-overlap.gguf", m.b.p, m.b.n);
    free(m.b.p);
    bb nb = {0};
    nested_build(&nb);
    bad |= write_file(dir, "nested-v2.gguf", nb.p, nb.n);
    free(nb.p);
    /* The writer round-trip file and stories260K's metadata with three small tensors. */
    gguf_file *g;
    if (gguf_open(shared_file("stories260K/stories260K.gguf"), &g) != BRISK_OK) return 1;
    const char *tmp = tmp_path("seed.gguf");
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_kv_count(g); i++) bad |= gguf_writer_copy_kv(w, g, i) != BRISK_OK;
    bad |= gguf_writer_set_arr(w, "s.i16s", GGUF_TYPE_INT16, "\1\0\2\0", 2) != BRISK_OK;
    const int64_t ne1[1] = {64}, ne2[2] = {32, 2}, ne3[2] = {256, 1};
    bad |= gguf_writer_add_tensor(w, "output_norm.weight", QT_F32, 1, ne1) != BRISK_OK;
    bad |= gguf_writer_add_tensor(w, "q8", QT_Q8_0, 2, ne2) != BRISK_OK;
    bad |= gguf_writer_add_tensor(w, "q4k", QT_Q4_K, 2, ne3) != BRISK_OK;
    static unsigned char zeros[256];
    bad |= gguf_writer_begin(w, tmp) != BRISK_OK;
    bad |= gguf_writer_write_tensor(w, zeros, 256) != BRISK_OK;
    bad |= gguf_writer_write_tensor(w, zeros, 68) != BRISK_OK;
    bad |= gguf_writer_write_tensor(w, zeros, 144) != BRISK_OK;
    bad |= gguf_writer_finish(w) != BRISK_OK;
    gguf_writer_free(w);
    gguf_close(g);
    size_t n;
    unsigned char *p = read_all(tmp, &n);
    if (p) bad |= write_file(dir, "stories-meta.gguf", p, n);
    free(p);
    remove(tmp);
    printf("seeds written to %s%s\n", dir, bad ? " (with errors)" : "");
    return bad;
}

/* Writes src as llama.cpp's gguf-split does: n parts PREFIX-0000k-of-0000n.gguf, the first with all
 * the metadata, every part with split.no / split.count (u16) and split.tensors.count (i32); tensors
 * dealt round robin. Returns the first part's path (static). */
static const char *write_split(const gguf_file *src, int n, const char *prefix) {
    static char first[512];
    const int64_t nt = gguf_tensor_count(src);
    for (int k = 0; k < n; k++) {
        char name[64], pbuf[1024];
        snprintf(name, sizeof name, "sp-%05d-of-%05d.gguf", k + 1, n);
        snprintf(pbuf, sizeof pbuf, "%s-%05d-of-%05d.gguf", prefix ? prefix : "", k + 1, n);
        const char *path = prefix ? pbuf : tmp_path(name);
        if (!k) snprintf(first, sizeof first, "%s", path);
        gguf_writer *w = gguf_writer_new();
        CHECK(w != NULL);
        if (!w) return first;
        for (int64_t i = 0; k == 0 && i < gguf_kv_count(src); i++) CHECK_OK(gguf_writer_copy_kv(w, src, i));
        CHECK_OK(gguf_writer_set_u16(w, "split.no", (uint16_t)k));
        CHECK_OK(gguf_writer_set_u16(w, "split.count", (uint16_t)n));
        CHECK_OK(gguf_writer_set_i32(w, "split.tensors.count", (int32_t)nt));
        for (int64_t i = k; i < nt; i += n) {
            const gguf_tensor *t = gguf_get_tensor(src, i);
            CHECK_OK(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne));
        }
        CHECK_OK(gguf_writer_begin(w, path));
        for (int64_t i = k; i < nt; i += n) {
            const gguf_tensor *t = gguf_get_tensor(src, i);
            CHECK_OK(gguf_writer_write_tensor(w, t->data, t->nbytes));
        }
        CHECK_OK(gguf_writer_finish(w));
        gguf_writer_free(w);
    }
    return first;
}

/* Greedy logits of a fixed prompt through the engine. */
static void prompt_logits(const char *path, float *out, int nv) {
    brisk_model *m = NULL;
    brisk_context *c = NULL;
    CHECK_OK(brisk_model_load(path, NULL, &m));
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 1;
    if (m) CHECK_OK(brisk_context_new(m, &cp, &c));
    if (!c) {
        brisk_model_free(m);
        return;
    }
    brisk_batch_entry b[5];
    for (int i = 0; i < 5; i++) b[i] = (brisk_batch_entry){(brisk_token)(1 + 37 * i), i, 0, i == 4};
    CHECK_OK(brisk_decode(c, b, 5));
    const float *l = brisk_get_logits(c, 4);
    CHECK(l != NULL && brisk_n_vocab(m) == nv);
    if (l) memcpy(out, l, sizeof(float) * (size_t)nv);
    brisk_context_free(c);
    brisk_model_free(m);
}

/* A split GGUF (llama.cpp's gguf-split layout) reads as the one file it was cut from: every tensor's
 * bytes, and the model's logits bit for bit; a later part or a missing part is a clear error. */
static void test_split_parts(void) {
    gguf_file *src = NULL, *g = NULL;
    const char *orig = shared_file("stories260K/stories260K.gguf");
    CHECK_OK(gguf_open(orig, &src));
    if (!src) return;
    const char *first = write_split(src, 3, NULL);
    CHECK_OK(gguf_open(first, &g));
    if (g) {
        CHECK(gguf_tensor_count(g) == gguf_tensor_count(src));
        int same = 1;
        for (int64_t i = 0; i < gguf_tensor_count(src); i++) {
            const gguf_tensor *a = gguf_get_tensor(src, i), *b = gguf_find_tensor(g, a->name);
            same &= b && b->type == a->type && b->nbytes == a->nbytes && !memcmp(b->data, a->data, a->nbytes);
        }
        CHECK(same);
        gguf_close(g);
    }
    enum { NV = 512 };
    static float la[NV], lb[NV];
    prompt_logits(orig, la, NV);
    prompt_logits(first, lb, NV);
    CHECK(!memcmp(la, lb, sizeof la));
    char second[512];
    snprintf(second, sizeof second, "%s", first);
    memcpy(strstr(second, "-00001-of-") + 1, "00002", 5);
    g = NULL;
    CHECK(gguf_open(second, &g) == BRISK_ERR_INVALID_ARG && !g);
    CHECK(strstr(brisk_last_error(), "first part") != NULL);
    char third[512];
    snprintf(third, sizeof third, "%s", first);
    memcpy(strstr(third, "-00001-of-") + 1, "00003", 5);
    CHECK(unlink(third) == 0);
    CHECK(gguf_open(first, &g) != BRISK_OK && !g); /* a missing part */
    printf("  missing part: %s\n", brisk_last_error());
    CHECK(strstr(brisk_last_error(), "00003-of-00003") != NULL);
    unlink(first);
    unlink(second);
    gguf_close(src);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--seeds")) return write_seeds(argv[2]);
    if (argc == 5 && !strcmp(argv[1], "--write-split")) { /* SRC PREFIX N: fixtures for t_pull.sh, t_llamacpp_ref.sh */
        gguf_file *src = NULL;
        if (gguf_open(argv[2], &src) != BRISK_OK) return fprintf(stderr, "%s\n", brisk_last_error()), 1;
        write_split(src, atoi(argv[4]), argv[3]);
        gguf_close(src);
        return test_failed_ ? 1 : 0;
    }
    static const test_case cases[] = {
        {"mini_valid", test_mini_valid},
        {"mini_fields", test_mini_fields},
        {"mini_truncate_and_mutate", test_mini_truncate_and_mutate},
        {"nested_arrays", test_nested_arrays},
        {"stories260k", test_stories260k},
        {"vocab_files", test_vocab_files},
        {"stories_corrupt", test_stories_corrupt},
        {"writer_round_trip", test_writer_round_trip},
        {"low_bit_types", test_low_bit_types},
        {"writer_reencode", test_writer_reencode},
        {"writer_abandon", test_writer_abandon},
        {"split_parts", test_split_parts},
    };
    int rc = test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
    if (tmpdir_[0]) rmdir(tmpdir_);
    return rc;
}
