/* fuzz_gguf.c — libFuzzer target for the GGUF reader: open the input as a
 * GGUF file, then walk every key, array element and tensor the way
 * `brisk info` and the model loader do. The input buffer is exactly the
 * input's size, so ASan catches any read past the end. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"

static volatile unsigned char sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *g;
    if (gguf_open_memory(data, size, &g) != BRISK_OK) return 0;
    char buf[256];
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_kv_count(g); i++) {
        const char *key = gguf_kv_key(g, i);
        if (gguf_find_key(g, key) != i) abort();
        gguf_kv_format(g, i, buf, sizeof buf);
        gguf_kv_format(g, i, buf, 7); /* a cut-short buffer */
        int64_t i64;
        uint32_t u32;
        float f32;
        double f64;
        bool b;
        const char *s;
        size_t len;
        gguf_get_i64(g, key, &i64);
        gguf_get_u32(g, key, &u32);
        gguf_get_f32(g, key, &f32);
        gguf_get_f64(g, key, &f64);
        gguf_get_bool(g, key, &b);
        if (gguf_get_str(g, key, &s, &len) == BRISK_OK && len) sink ^= (unsigned char)(s[0] ^ s[len - 1]);
        gguf_value_type et;
        uint64_t n;
        const void *p;
        if (gguf_get_arr(g, key, &et, &n, &p) == BRISK_OK && p && n) sink ^= ((const unsigned char *)p)[0];
        if (gguf_kv_arr_info(g, i, &et, &n) == BRISK_OK && et == GGUF_TYPE_STRING)
            for (uint64_t k = 0; k < n; k++)
                if (gguf_kv_arr_str(g, i, k, &s, &len) == BRISK_OK && len) sink ^= (unsigned char)(s[0] ^ s[len - 1]);
        if (w) gguf_writer_copy_kv(w, g, i);
    }
    for (int64_t i = 0; i < gguf_tensor_count(g); i++) {
        const gguf_tensor *t = gguf_get_tensor(g, i);
        if (gguf_find_tensor(g, t->name) != t) abort();
        if (t->nbytes) sink ^= ((const unsigned char *)t->data)[0] ^ ((const unsigned char *)t->data)[t->nbytes - 1];
        if (w) gguf_writer_add_tensor(w, t->name, t->type, t->n_dims ? t->n_dims : 1, t->ne);
    }
    gguf_writer_free(w);
    gguf_close(g);
    return 0;
}
