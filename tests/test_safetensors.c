/* test_safetensors.c — the safetensors reader on hand-built files: a valid
 * file (names, shapes, dtypes, data, metadata, f16/bf16 -> f32), then every
 * kind of corruption, each an error with a message and never a crash (the
 * inputs are exact-size heap copies, so ASan sees any overread); plus the
 * config.json reader. */
#include <stdint.h>

#include "format/hfconfig.h"
#include "format/safetensors.h"
#include "test.h"

/* A file from a header text and n data bytes (values 0, 1, 2, ...), in an exact-size buffer. */
static unsigned char *build(const char *hdr, size_t n_data, size_t *size) {
    size_t h = strlen(hdr);
    *size = 8 + h + n_data;
    unsigned char *b = malloc(*size);
    for (int k = 0; k < 8; k++) b[k] = (unsigned char)((uint64_t)h >> (8 * k));
    memcpy(b + 8, hdr, h);
    for (size_t i = 0; i < n_data; i++) b[8 + h + i] = (unsigned char)i;
    return b;
}

static brisk_status open_hdr(const char *hdr, size_t n_data) {
    size_t size;
    unsigned char *b = build(hdr, n_data, &size);
    st_file *f = NULL;
    brisk_status s = st_open_memory(b, size, &f);
    st_close(f);
    free(b);
    return s;
}

static void test_valid(void) {
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
                      "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[16,20]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                      "\"c\":{\"dtype\":\"F16\",\"shape\":[1,1,1],\"data_offsets\":[20,22]},"
                      "\"z\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[22,22]}}";
    size_t size;
    unsigned char *b = build(hdr, 22, &size);
    size_t data0 = size - 22;
    float one = 1.0f;
    memcpy(b + data0, &one, 4);
    b[data0 + 16] = 0x80, b[data0 + 17] = 0x3f; /* bf16 1.0 */
    b[data0 + 18] = 0x00, b[data0 + 19] = 0xc0; /* bf16 -2.0 */
    b[data0 + 20] = 0x00, b[data0 + 21] = 0x3c; /* f16 1.0 */
    st_file *f = NULL;
    CHECK_OK(st_open_memory(b, size, &f));
    if (!f) {
        free(b);
        return;
    }
    CHECK(st_count(f) == 4);
    CHECK(!strcmp(st_get(f, 0)->name, "a")); /* ordered by offset */
    const st_tensor *t = st_find(f, "b");
    CHECK(t && t->dtype == ST_BF16 && t->n_dims == 1 && t->shape[0] == 2 && t->nbytes == 4);
    float x[4];
    CHECK_OK(st_read_f32(t, 0, 2, x));
    CHECK(x[0] == 1.0f && x[1] == -2.0f);
    CHECK_OK(st_read_f32(st_find(f, "c"), 0, 1, x));
    CHECK(x[0] == 1.0f);
    t = st_find(f, "a");
    CHECK(t && t->n_dims == 2 && t->n_elems == 4);
    CHECK_OK(st_read_f32(t, 0, 1, x));
    CHECK(x[0] == 1.0f);
    CHECK(st_read_f32(t, 3, 2, x) == BRISK_ERR_RANGE);
    CHECK(st_read_f32(st_find(f, "z"), 0, 0, x) == BRISK_ERR_UNSUPPORTED);
    CHECK(st_find(f, "nope") == NULL);
    CHECK(st_metadata(f, "format") && !strcmp(st_metadata(f, "format"), "pt"));
    CHECK(st_metadata(f, "other") == NULL);
    st_close(f);
    free(b);
}

static void test_corrupt(void) {
    static const struct { const char *hdr; size_t n_data; const char *what; } bad[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 7, "data past the end"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "size != shape"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "begin > end"},
        {"{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "negative dim"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8, "fractional dim"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "9 dims"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
         "element count overflow"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "no offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "one offset"},
        {"{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "no dtype"},
        {"{\"a\":[1,2]}", 0, "entry not an object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "duplicate name"},
        {"{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "empty name"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "metadata value not a string"},
        {"[1,2,3]", 0, "header not an object"},
        {"{\"a\":", 0, "truncated JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        brisk_status s = open_hdr(bad[i].hdr, bad[i].n_data);
        if (s != BRISK_ERR_FORMAT) fprintf(stderr, "  case '%s': status %d\n", bad[i].what, (int)s);
        CHECK(s == BRISK_ERR_FORMAT);
        CHECK(strlen(brisk_last_error()) > 0);
    }
    /* header length beyond the file, tiny files */
    unsigned char b[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'};
    st_file *f = NULL;
    CHECK(st_open_memory(b, 10, &f) == BRISK_ERR_FORMAT && !f);
    b[0] = 2, b[1] = 0;
    CHECK(st_open_memory(b, 7, &f) == BRISK_ERR_FORMAT);
    CHECK_OK(st_open_memory(b, 10, &f)); /* "{}": no tensors */
    CHECK(f && st_count(f) == 0);
    st_close(f);
    CHECK(st_open("/nonexistent/model.safetensors", &f) == BRISK_ERR_IO);
}

/* Every prefix of a valid file fails cleanly. */
static void test_truncations(void) {
    const char *hdr = "{\"w\":{\"dtype\":\"F16\",\"shape\":[3,2],\"data_offsets\":[0,12]}}";
    size_t size;
    unsigned char *full = build(hdr, 12, &size);
    for (size_t n = 0; n < size; n++) {
        unsigned char *p = malloc(n ? n : 1);
        memcpy(p, full, n);
        st_file *f = NULL;
        CHECK(st_open_memory(p, n, &f) != BRISK_OK && !f);
        free(p);
    }
    free(full);
}

static void test_hfconfig(void) {
    hf_config c;
    const char *q35 = "{\"architectures\":[\"Qwen3_5ForConditionalGeneration\"],\"model_type\":\"qwen3_5\","
                      "\"tie_word_embeddings\":false,\"text_config\":{\"vocab_size\":1000,\"hidden_size\":64,"
                      "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":16,"
                      "\"intermediate_size\":128,\"linear_key_head_dim\":8,\"linear_value_head_dim\":8,"
                      "\"linear_num_key_heads\":2,\"linear_num_value_heads\":4,\"rms_norm_eps\":1e-6,"
                      "\"eos_token_id\":7,\"rope_parameters\":{\"rope_theta\":1e7,\"partial_rotary_factor\":0.25,"
                      "\"mrope_section\":[11,11,10]}}}";
    CHECK_OK(hf_config_parse(q35, strlen(q35), &c));
    CHECK(c.arch == HF_QWEN35 && !strcmp(c.gguf_arch, "qwen35"));
    CHECK(c.n_layer == 4 && c.head_dim == 16 && c.ssm_n_v == 4 && c.ssm_conv == 4 && c.full_attn_interval == 4);
    CHECK(c.rope_theta == 1e7 && c.partial_rotary == 0.25 && c.has_mrope && c.mrope[2] == 10 && c.mrope[3] == 0);
    CHECK(c.token_id[HF_TOK_EOS] == 7 && c.token_id[HF_TOK_BOS] == -1 && !c.tied);
    const char *llama = "{\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":10,\"hidden_size\":8,"
                        "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"intermediate_size\":16,"
                        "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0},\"rope_theta\":500000}";
    CHECK_OK(hf_config_parse(llama, strlen(llama), &c));
    CHECK(c.arch == HF_LLAMA && c.n_head_kv == 2 && !strcmp(c.rope_type, "llama3") && c.rope_factor == 8.0);
    CHECK(c.rope_theta == 500000);
    const char *gpt2 = "{\"architectures\":[\"GPT2LMHeadModel\"]}";
    CHECK(hf_config_parse(gpt2, strlen(gpt2), &c) == BRISK_ERR_UNSUPPORTED);
    const char *badheads = "{\"architectures\":[\"Qwen3ForCausalLM\"],\"vocab_size\":10,\"hidden_size\":8,"
                           "\"num_hidden_layers\":1,\"num_attention_heads\":3,\"num_key_value_heads\":2,"
                           "\"intermediate_size\":16}";
    CHECK(hf_config_parse(badheads, strlen(badheads), &c) == BRISK_ERR_FORMAT);
    CHECK(hf_config_parse("{", 1, &c) == BRISK_ERR_FORMAT);
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"valid", test_valid},
        {"corrupt", test_corrupt},
        {"truncations", test_truncations},
        {"hfconfig", test_hfconfig},
    };
    return test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
