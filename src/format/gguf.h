/* gguf.h — GGUF files (versions 2 and 3), read through mmap and written streaming.
 *
 * Byte layout (little-endian):
 *   u32 magic "GGUF"; u32 version; u64 n_tensors; u64 n_kv;
 *   n_kv x { str key; u32 type; value }      value: scalar, str, or array
 *                                            array: u32 elem_type; u64 n; n values
 *   n_tensors x { str name; u32 n_dims (<=4); u64 ne[n_dims]; u32 ggml_type; u64 offset }
 *   zero padding to general.alignment (default 32); tensor data blob.
 *   str = u64 length + bytes (no NUL). ne[0] is the contiguous dimension.
 *
 * The reader validates every count, size, offset and type against the file
 * and returns BRISK_ERR_FORMAT with a message on anything inconsistent; it
 * never reads outside the mapping. Keys and tensor names are copied as
 * NUL-terminated strings; string values and tensor data point into the map
 * and live until gguf_close().
 *
 * What open checks (the message names the item and its byte offset):
 *   magic; version 2 or 3 (1 and big-endian files: BRISK_ERR_UNSUPPORTED);
 *   counts that can fit in the bytes left; keys non-empty, NUL-free, unique;
 *   value and element types known; bools 0 or 1; every string and array
 *   inside the file (n * elem_size overflow-safe); arrays nested at most 8 deep;
 *   general.alignment, if present, a u32 power of two (as llama.cpp: 1 is
 *   allowed, so tensor data is only as aligned as the file says);
 *   tensor names 1..63 bytes, NUL-free, unique; n_dims <= 4; ne >= 0 and
 *   their product <= INT64_MAX; type known to quant_get_traits(); ne[0] a
 *   multiple of the block size; size without overflow; offset a multiple
 *   of the alignment; data inside the file; no two tensors sharing bytes.
 * A file without tensors may end before the padding; its data offset is
 * then the file size.
 */
#ifndef BK_GGUF_H
#define BK_GGUF_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "brisk.h"

typedef enum gguf_value_type {
    GGUF_TYPE_UINT8 = 0, GGUF_TYPE_INT8 = 1, GGUF_TYPE_UINT16 = 2, GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4, GGUF_TYPE_INT32 = 5, GGUF_TYPE_FLOAT32 = 6, GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8, GGUF_TYPE_ARRAY = 9, GGUF_TYPE_UINT64 = 10, GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12, GGUF_TYPE_COUNT
} gguf_value_type;

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

typedef struct gguf_file gguf_file;

typedef struct gguf_tensor {
    const char *name;         /* NUL-terminated copy */
    uint32_t type;            /* ggml type id (see quant/quant.h) */
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* unused dims are 1 */
    uint64_t offset;          /* relative to the data blob */
    uint64_t nbytes;          /* computed from type and shape */
    const void *data;         /* into the map */
} gguf_tensor;

/* Opens and validates a file (mmap). */
brisk_status gguf_open(const char *path, gguf_file **out);
/* copy: read the file into memory instead of mapping it (mapfile_open_ex). */
brisk_status gguf_open_ex(const char *path, bool copy, gguf_file **out);
/* Parses a caller-owned buffer (not copied; must outlive the handle). For fuzzing and tests. */
brisk_status gguf_open_memory(const void *data, size_t size, gguf_file **out);
void gguf_close(gguf_file *g);

uint32_t gguf_version(const gguf_file *g);
uint32_t gguf_alignment(const gguf_file *g);
uint64_t gguf_data_offset(const gguf_file *g); /* file offset of the tensor data blob */
size_t gguf_file_size(const gguf_file *g);

/* ---- metadata ---- */
int64_t gguf_kv_count(const gguf_file *g);
const char *gguf_kv_key(const gguf_file *g, int64_t i);
gguf_value_type gguf_kv_type(const gguf_file *g, int64_t i);
int64_t gguf_find_key(const gguf_file *g, const char *key); /* -1 if absent */

/* Scalar getters by key. Integer getters accept any integer type (and bool)
 * whose value fits; float getters accept f32, f64 and integers. Return
 * BRISK_ERR_NOT_FOUND when the key is absent (no message set), and
 * BRISK_ERR_FORMAT on a type that cannot convert. */
brisk_status gguf_get_i64(const gguf_file *g, const char *key, int64_t *out);
brisk_status gguf_get_u32(const gguf_file *g, const char *key, uint32_t *out);
brisk_status gguf_get_f32(const gguf_file *g, const char *key, float *out);
brisk_status gguf_get_f64(const gguf_file *g, const char *key, double *out);
brisk_status gguf_get_bool(const gguf_file *g, const char *key, bool *out);
/* String value: points into the map, not NUL-terminated. */
brisk_status gguf_get_str(const gguf_file *g, const char *key, const char **s, size_t *len);

/* Arrays. gguf_get_arr gives the element type and count; for numeric
 * elements *data points at the packed little-endian values in the map (not
 * necessarily aligned: memcpy them out), for string and array elements it is
 * NULL. Arrays of arrays are validated at open but otherwise unsupported. */
brisk_status gguf_get_arr(const gguf_file *g, const char *key, gguf_value_type *elem_type,
                          uint64_t *n, const void **data);
/* i-th string of a string array (O(1): an index is built at open). */
brisk_status gguf_get_arr_str(const gguf_file *g, const char *key, uint64_t i, const char **s,
                              size_t *len);
/* The same by key index, for iterating over all keys. */
brisk_status gguf_kv_arr_info(const gguf_file *g, int64_t kv, gguf_value_type *elem_type,
                              uint64_t *n);
brisk_status gguf_kv_arr_str(const gguf_file *g, int64_t kv, uint64_t i, const char **s,
                             size_t *len);
/* A scalar or string value rendered as text (for `brisk info`); arrays render
 * as "[n x type]" followed by their first few elements. */
brisk_status gguf_kv_format(const gguf_file *g, int64_t kv, char *buf, size_t cap);
const char *gguf_type_name(gguf_value_type t);
/* The value of key kv exactly as stored (the bytes after its u32 type field),
 * pointing into the map. For gguf_writer_copy_kv. */
brisk_status gguf_kv_raw(const gguf_file *g, int64_t kv, const void **raw, uint64_t *len);

/* ---- tensors ---- */
int64_t gguf_tensor_count(const gguf_file *g);
const gguf_tensor *gguf_get_tensor(const gguf_file *g, int64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name); /* NULL if absent */

/* ---- writer ----
 * Usage: w = gguf_writer_new(); set metadata; declare every tensor with
 * gguf_writer_add_tensor(); gguf_writer_begin(path) writes the header; then
 * gguf_writer_write_tensor() for each tensor in declaration order streams its
 * data (so huge models never sit in memory); gguf_writer_finish() closes.
 * Misuse (duplicate key or tensor, wrong byte count, calls out of order)
 * returns BRISK_ERR_INVALID_ARG and changes nothing. Setting
 * "general.alignment" (u32, power of two) changes the padding. The bytes go
 * to PATH.tmp.XXXXXX and finish fsyncs it and renames it over path
 * (base/atomic_file.h), so path is replaced whole or not at all; freeing a
 * writer that began but did not finish removes the temporary file. */
typedef struct gguf_writer gguf_writer;
gguf_writer *gguf_writer_new(void); /* NULL on OOM */
void gguf_writer_free(gguf_writer *w);
brisk_status gguf_writer_set_u16(gguf_writer *w, const char *key, uint16_t v); /* (split.no, split.count) */
brisk_status gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
brisk_status gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
brisk_status gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
brisk_status gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
brisk_status gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
brisk_status gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
/* Numeric array: n elements of elem_type, packed little-endian, copied. */
brisk_status gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_value_type elem_type,
                                 const void *data, uint64_t n);
brisk_status gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs,
                                     const size_t *lens, uint64_t n);
/* Copies key kv of src (any type) into w. */
brisk_status gguf_writer_copy_kv(gguf_writer *w, const gguf_file *src, int64_t kv);
brisk_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t ggml_type,
                                    int n_dims, const int64_t *ne);
brisk_status gguf_writer_begin(gguf_writer *w, const char *path);
brisk_status gguf_writer_write_tensor(gguf_writer *w, const void *data, uint64_t nbytes);
/* Streams the next nbytes of the current tensor (any split, e.g. a chunk of
 * rows at a time); the tensor is complete, padded and the next one current
 * once all its bytes have come. Never more than the tensor has left. */
brisk_status gguf_writer_write_rows(gguf_writer *w, const void *data, uint64_t nbytes);
brisk_status gguf_writer_finish(gguf_writer *w);
#endif
