/* safetensors.h — Hugging Face .safetensors files, read through mmap.
 *
 * Byte layout:
 *   u64 N (little-endian)          size of the header
 *   N bytes of UTF-8 JSON          { "NAME": {"dtype": "BF16", "shape": [d0, d1, ...],
 *                                             "data_offsets": [begin, end]}, ...,
 *                                    "__metadata__": {"key": "string", ...} }   (optional)
 *   the data blob                  offsets are relative to its start (byte 8 + N);
 *                                  a tensor's bytes are [begin, end), row-major,
 *                                  little-endian, shape[0] the outermost dimension.
 *
 * The reader validates everything before any tensor is handed out and
 * returns BRISK_ERR_FORMAT with a message naming the item on anything
 * inconsistent; it never reads outside the mapping:
 *   the file holds at least 8 bytes; 2 <= N <= 100 MiB and 8 + N <= file size;
 *   the header is a JSON object; each entry an object with a known dtype
 *   string, a shape of at most ST_MAX_DIMS integers in [0, 2^53), and
 *   data_offsets of two integers begin <= end <= blob size; end - begin
 *   equals the element count times the dtype size (overflow-checked);
 *   names are 1..255 bytes and unique (cJSON keeps duplicates: we reject them);
 *   no two tensors share bytes. "__metadata__" must be an object of strings.
 * Unknown dtypes are BRISK_ERR_UNSUPPORTED only for tensors that are read as
 * floats (st_read_f32); the file itself opens.
 */
#ifndef BK_SAFETENSORS_H
#define BK_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>
#include "brisk.h"

#define ST_MAX_DIMS 8

typedef enum st_dtype {
    ST_F32, ST_F16, ST_BF16, ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_U16, ST_U32,
    ST_U64, ST_BOOL, ST_F8_E4M3, ST_F8_E5M2, ST_DTYPE_COUNT
} st_dtype;

typedef struct st_tensor {
    const char *name;              /* NUL-terminated, owned by the file handle */
    st_dtype dtype;
    int n_dims;
    int64_t shape[ST_MAX_DIMS];    /* shape[0] outermost (PyTorch order) */
    int64_t n_elems;
    uint64_t nbytes;
    const unsigned char *data;     /* into the map (not necessarily aligned) */
} st_tensor;

typedef struct st_file st_file;

/* Opens and validates path (mmap). */
brisk_status st_open(const char *path, st_file **out);
/* Parses a caller-owned buffer (not copied; must outlive the handle). For fuzzing and tests. */
brisk_status st_open_memory(const void *data, size_t size, st_file **out);
void st_close(st_file *f);

int64_t st_count(const st_file *f);
const st_tensor *st_get(const st_file *f, int64_t i);           /* in file order of data offsets */
const st_tensor *st_find(const st_file *f, const char *name);   /* NULL if absent */
/* A "__metadata__" value, or NULL. */
const char *st_metadata(const st_file *f, const char *key);

const char *st_dtype_name(st_dtype t);
size_t st_dtype_size(st_dtype t);
/* Converts n elements starting at element e0 of t (f32, f16 or bf16) to f32. */
brisk_status st_read_f32(const st_tensor *t, int64_t e0, int64_t n, float *dst);
/* FP8 E4M3 (1 sign, 4 exponent bits biased by 7, 3 mantissa bits; no
 * infinities; 0x7F and 0xFF are NaN; exponent 0 is subnormal m/8 * 2^-6) to f32,
 * exactly: every code is a float. */
float st_f8_e4m3_to_f32(uint8_t b);
/* Block-scaled FP8 ("fine-grained fp8", as Qwen's and DeepSeek's checkpoints
 * store it): q is F8_E4M3 of shape [..., R, C], scale_inv has the same leading
 * dimensions and [ceil(R/block_r), ceil(C/block_c)] last, f32, f16 or bf16.
 * Checks that the two fit; BRISK_ERR_FORMAT names both tensors if not. */
brisk_status st_check_block_scale(const st_tensor *q, const st_tensor *scale_inv, int64_t block_r, int64_t block_c);
/* Dequantizes elements [e0, e0 + n) of q (checked with st_check_block_scale):
 * dst[i] = e4m3(q[e]) * scale_inv[matrix][row / block_r][col / block_c], one
 * f32 multiplication (as torch's dequantization in f32). */
brisk_status st_read_f8_scaled(const st_tensor *q, const st_tensor *scale_inv, int64_t block_r, int64_t block_c,
                               int64_t e0, int64_t n, float *dst);
/* Tells the kernel the pages of t may be dropped (after a tensor was converted),
 * so a checkpoint larger than memory streams through. No-op for memory files. */
void st_release(const st_file *f, const st_tensor *t);
#endif
