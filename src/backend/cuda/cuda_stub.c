/* cuda_stub.c — the CUDA entry points when brisk is built without nvcc:
 * no devices, and a clear message if one is asked for anyway. */
#include "backend/cuda/cuda_backend.h"
#include "base/status.h"

#ifndef BRISK_HAVE_CUDA
int bk_cuda_device_count(void) { return 0; }
int bk_cuda_runtime_version(void) { return 0; }
int bk_cuda_driver_version(void) { return 0; }

brisk_status bk_cuda_device_name(int device, char *name, size_t cap, int *cc_major, int *cc_minor) {
    if (cap) name[0] = 0;
    *cc_major = *cc_minor = 0;
    return bk_fail(BRISK_ERR_UNSUPPORTED, "CUDA device %d: brisk was built without CUDA (no nvcc)", device);
}

brisk_status bk_cuda_backend_new(int device, bk_backend **out) {
    *out = NULL;
    return bk_fail(BRISK_ERR_UNSUPPORTED, "CUDA device %d: brisk was built without CUDA (no nvcc)", device);
}

brisk_status bk_cuda_weights_backend_new(int device, bk_backend **out) { return bk_cuda_backend_new(device, out); }
void bk_cuda_weights_expect(bk_backend *be, uint64_t bytes) { (void)be, (void)bytes; }

bool bk_backend_is_cuda(const bk_backend *be, int *device) {
    (void)be;
    (void)device;
    return false;
}

void bk_cuda_release_weight(bk_weight *w) { (void)w; }

long bk_cuda_blas_products(bk_backend *be) {
    (void)be;
    return -1;
}

long bk_cuda_path_launches(bk_backend *be, const char *name) {
    (void)be, (void)name;
    return -1;
}

bool bk_cuda_attn_on_mma(bk_backend *be, int kv_type, int n_head, int n_head_kv, int head_dim, int n, int max_np) {
    (void)be, (void)kv_type, (void)n_head, (void)n_head_kv, (void)head_dim, (void)n, (void)max_np;
    return false;
}

brisk_status bk_cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = *total_bytes = 0;
    return bk_fail(BRISK_ERR_UNSUPPORTED, "CUDA device %d: brisk was built without CUDA (no nvcc)", device);
}

size_t bk_cuda_backend_overhead(void) { return 0; }

size_t bk_cuda_moe_scratch_bytes(int64_t n_embd, int64_t n_ff, int n_expert, int k) {
    (void)n_embd;
    (void)n_ff;
    (void)n_expert;
    (void)k;
    return 0;
}

double bk_cuda_copy_bandwidth(int device) {
    (void)device;
    return 0.0;
}

brisk_status bk_cuda_write(bk_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    (void)dst;
    (void)src;
    (void)bytes;
    return bk_fail(BRISK_ERR_UNSUPPORTED, "brisk was built without CUDA");
}

brisk_status bk_cuda_copier_new(bk_backend *be, bk_cuda_copier **out) {
    (void)be;
    *out = NULL;
    return bk_fail(BRISK_ERR_UNSUPPORTED, "brisk was built without CUDA");
}

void bk_cuda_copier_free(bk_cuda_copier *cp) { (void)cp; }

bool bk_cuda_copier_pin(bk_cuda_copier *cp, const void *host, size_t bytes) {
    (void)cp;
    (void)host;
    (void)bytes;
    return false;
}

brisk_status bk_cuda_copier_copy(bk_cuda_copier *cp, void *dev, const void *host, size_t bytes) {
    (void)cp;
    (void)dev;
    (void)host;
    (void)bytes;
    return bk_fail(BRISK_ERR_UNSUPPORTED, "brisk was built without CUDA");
}

brisk_status bk_cuda_copier_mark(bk_cuda_copier *cp, uint64_t *ticket) {
    (void)cp;
    *ticket = 0;
    return BRISK_OK;
}

bool bk_cuda_copier_done(bk_cuda_copier *cp, uint64_t ticket) {
    (void)cp;
    (void)ticket;
    return true;
}

brisk_status bk_cuda_copier_fence(bk_cuda_copier *cp) {
    (void)cp;
    return BRISK_OK;
}

brisk_status bk_cuda_copier_wait(bk_cuda_copier *cp) {
    (void)cp;
    return BRISK_OK;
}

double bk_cuda_copier_bandwidth(const bk_cuda_copier *cp) {
    (void)cp;
    return 0.0;
}

const void *bk_cuda_copier_device_ptr(const bk_cuda_copier *cp, const void *host) {
    (void)cp;
    (void)host;
    return NULL;
}

double bk_cuda_copier_mapped_bandwidth(bk_cuda_copier *cp, const void *host, size_t bytes) {
    (void)cp;
    (void)host;
    (void)bytes;
    return 0.0;
}

brisk_status bk_cuda_copier_upload(bk_cuda_copier *cp, void *dev, const void *host, size_t bytes) {
    (void)cp;
    (void)dev;
    (void)host;
    (void)bytes;
    return bk_fail(BRISK_ERR_UNSUPPORTED, "brisk was built without CUDA");
}

brisk_status bk_cuda_copier_readback(bk_cuda_copier *cp, void *host, const void *dev, size_t bytes) {
    (void)cp;
    (void)host;
    (void)dev;
    (void)bytes;
    return bk_fail(BRISK_ERR_UNSUPPORTED, "brisk was built without CUDA");
}

bool bk_cuda_copier_readback_done(bk_cuda_copier *cp) {
    (void)cp;
    return true;
}

brisk_status bk_cuda_copier_readback_wait(bk_cuda_copier *cp) {
    (void)cp;
    return BRISK_OK;
}

brisk_status bk_cuda_host_alloc(size_t bytes, void **out) {
    (void)bytes;
    *out = NULL;
    return bk_fail(BRISK_ERR_UNSUPPORTED, "brisk was built without CUDA");
}

void bk_cuda_host_free(void *p) { (void)p; }

void bk_cuda_expert_count_arm(bk_backend *be, const int32_t *cached, uint32_t *counts) {
    (void)be;
    (void)cached;
    (void)counts;
}

bool bk_cuda_expert_count_taken(bk_backend *be) {
    (void)be;
    return false;
}

void bk_cuda_expert_count(bk_backend *be, const int32_t *ids, int nk, int n_expert, const int32_t *cached,
                          uint32_t *counts) {
    (void)be;
    (void)ids;
    (void)nk;
    (void)n_expert;
    (void)cached;
    (void)counts;
}

brisk_status bk_cuda_nccl_unique_id(unsigned char id[128]) {
    (void)id;
    return bk_fail(BRISK_ERR_UNSUPPORTED, "brisk was built without CUDA (no NCCL)");
}

brisk_status bk_cuda_nccl_init(bk_backend *be, const unsigned char id[128], int rank, int n_ranks) {
    (void)be;
    (void)id;
    (void)rank;
    (void)n_ranks;
    return bk_fail(BRISK_ERR_UNSUPPORTED, "brisk was built without CUDA (no NCCL)");
}
#else
typedef int bk_cuda_stub_unused; /* the real backend is in the .cu files */
#endif
