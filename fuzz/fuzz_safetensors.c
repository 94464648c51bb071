/* fuzz_safetensors.c — libFuzzer target for the safetensors reader: open
 * the input as a .safetensors file, then look every tensor up by name, read
 * its first and last elements as floats and check its bytes lie inside the
 * input (the buffer is exactly the input's size, so ASan sees any overread). */
#include <stdint.h>
#include <stdlib.h>

#include "format/safetensors.h"

static volatile float sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_file *f;
    if (st_open_memory(data, size, &f) != BRISK_OK) return 0;
    for (int64_t i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_get(f, i);
        if (st_find(f, t->name) != t) abort();
        if (t->data < data || t->data + t->nbytes > data + size) abort();
        float x[2];
        if (t->n_elems > 0 && st_read_f32(t, 0, 1, x) == BRISK_OK) sink = x[0];
        if (t->n_elems > 0 && st_read_f32(t, t->n_elems - 1, 1, x) == BRISK_OK) sink = x[0];
        if (st_read_f32(t, t->n_elems, 1, x) == BRISK_OK) abort();
    }
    st_metadata(f, "format");
    st_close(f);
    return 0;
}
