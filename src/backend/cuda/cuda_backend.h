/* cuda_backend.h — the CUDA backend, seen from C. The one header of
 * src/backend/cuda/ that host code includes; it names no CUDA type.
 *
 * A CUDA backend owns one stream, a small device staging area for the batch
 * metadata (token ids, positions, cache slots, block tables arrive as host
 * pointers through backend.h; each op copies what it needs to the staging
 * area, skipping the copy when the bytes equal the previous upload) and an
 * attention scratch for split-K partial results. All of it is allocated in
 * bk_cuda_backend_new; no op allocates, but for the bounded cuBLAS scratch of
 * prefill products (cuda_blas.cu: at the first such product, never while a
 * graph is captured; counted in bk_cuda_backend_overhead). Weights bound through it get a
 * device copy in w->dev (cudaMalloc, freed by the process's exit or by the
 * backend that bound them: see bk_cuda_release_weight).
 *
 * Errors inside ops (which return void) are sticky: the first one is kept
 * and returned by the next read().
 *
 * Built when nvcc is found; otherwise a stub reports no devices. */
#ifndef BK_CUDA_BACKEND_H
#define BK_CUDA_BACKEND_H
#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 without a driver, a GPU or a CUDA build. */
int bk_cuda_device_count(void);
/* The CUDA runtime's and the driver's versions as CUDA writes them (12080: 12.8); 0 when unknown. */
int bk_cuda_runtime_version(void);
int bk_cuda_driver_version(void);
/* Device `device`'s name (cut to cap - 1 bytes) and compute capability. */
brisk_status bk_cuda_device_name(int device, char *name, size_t cap, int *cc_major, int *cc_minor);
/* A CUDA backend on device `device`. */
brisk_status bk_cuda_backend_new(int device, bk_backend **out);
/* A CUDA backend that only holds weights (bind_weight, alloc, release): a model's, whose contexts
 * run the ops on backends of their own. None of the ops' staging and scratch (about 45 MiB). */
brisk_status bk_cuda_weights_backend_new(int device, bk_backend **out);
/* The bytes a weights backend's bind_weight calls will take in all (a hint: its pool's slabs are
 * sized to it, so the last one does not end in a large unused tail). */
void bk_cuda_weights_expect(bk_backend *be, uint64_t bytes);
/* True when be is a CUDA backend; *device (if set) receives its device. */
bool bk_backend_is_cuda(const bk_backend *be, int *device);
/* Copies host bytes into backend memory and waits (tests and setup; not an op). */
brisk_status bk_cuda_write(bk_backend *be, void *dst, const void *src, size_t bytes);
/* Free and total memory of a device in bytes. */
brisk_status bk_cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes);
/* Device memory a backend allocates for itself at creation (staging, split-K
 * partials, activation buffers), beyond what alloc() hands out. */
size_t bk_cuda_backend_overhead(void);
/* Device memory the MoE op (cuda_moe.cu) allocates at its first call for
 * experts of this shape (0 when n_expert is 0): a chunk of entries' hidden
 * and output rows, whatever the batch, so it never grows afterwards. */
size_t bk_cuda_moe_scratch_bytes(int64_t n_embd, int64_t n_ff, int n_expert, int k);
/* Device-to-device copy bandwidth in GB/s (read + write); 0 on failure. */
double bk_cuda_copy_bandwidth(int device);
/* Frees the device copy of a weight bound by a CUDA backend (NULL dev: no-op). */
void bk_cuda_release_weight(bk_weight *w);
/* Matrix products this backend has run through cuBLAS (prefill batches on
 * dequantized weights: cuda_blas.cu), or -1 when cuBLAS is off
 * (BRISK_CUDA_DISABLE=cublas) or cannot be loaded. Loads it if no product has. */
long bk_cuda_blas_products(bk_backend *be);
/* Launches of one of the optional kernels by this backend so far: "mmvf", "mmvs", "mmqh", "mma",
 * "attn_mma", "attn_warp", "attn_prefill", "mmq" (the dense int8 tensor-core products) or "mmvq"
 * (the integer-dot GEMV) (a captured step counts once, at its capture), so that a test can assert
 * which kernel ran; -1 for another name, for mmvf, mmvs or mmqh where this backend does not run
 * them (before sm_90, or switched off in BRISK_CUDA_DISABLE), for mmq where it is switched off,
 * or without CUDA. */
long bk_cuda_path_launches(bk_backend *be, const char *name);
/* Whether this backend runs the decode attention of n tokens (the longest max_np positions) on
 * tensor cores (cuda_attn_mma.cu), as its plan (BRISK_CUDA_DISABLE=attn_mma, attn_gqa) and the
 * kernel's shapes decide: the tests' tolerance follows it. False without CUDA. */
bool bk_cuda_attn_on_mma(bk_backend *be, int kv_type, int n_head, int n_head_kv, int head_dim, int n, int max_np);

/* ---- host-to-device expert copies (cuda_expert_cache.cu) ----
 * A copier belongs to one CUDA backend and owns a copy stream of its own, a
 * ring of events and a pinned staging buffer. Copies run on the copy stream,
 * each after the work queued so far on the backend's stream (so a slot is
 * never overwritten while a queued product still reads it), and overlap the
 * backend's later work. backend/moe.c's hot-expert cache is its user. */
typedef struct bk_cuda_copier bk_cuda_copier;
brisk_status bk_cuda_copier_new(bk_backend *be, bk_cuda_copier **out);
/* Waits for its copies, unpins what it pinned, frees it (NULL: no-op). */
void bk_cuda_copier_free(bk_cuda_copier *cp);
/* Pins host bytes [host, host + bytes) (rounded out to whole pages) for direct asynchronous copies
 * and maps them into the device's address space: anonymous memory (--no-mmap) as is, a read-only
 * file mapping with cudaHostRegisterReadOnly. False when neither works: copies from there then go
 * through the pinned staging buffer. At most 8 ranges per copier. */
bool bk_cuda_copier_pin(bk_cuda_copier *cp, const void *host, size_t bytes);
/* The address through which kernels read host byte `host` of a pinned range over PCIe (the host
 * pointer itself where the device can use it, cudaDevAttrCanUseHostPointerForRegisteredMem), or
 * NULL when no mapped range holds it. */
const void *bk_cuda_copier_device_ptr(const bk_cuda_copier *cp, const void *host);
/* GB/s of a kernel reading `bytes` from `host` through its mapping (0: not mapped or failed). */
double bk_cuda_copier_mapped_bandwidth(bk_cuda_copier *cp, const void *host, size_t bytes);
/* Queues a copy of <= 8192 host bytes to device memory dev on the backend's stream (ordered with its
 * ops; not on the copy stream), from a pinned ring: the host may reuse `host` at once. */
brisk_status bk_cuda_copier_upload(bk_cuda_copier *cp, void *dev, const void *host, size_t bytes);
/* Queues a copy of device bytes to pinned host memory (bk_cuda_host_alloc) on the backend's stream,
 * after its queued ops; _done says whether the latest one has landed (true when none is pending),
 * _wait waits for it. */
brisk_status bk_cuda_copier_readback(bk_cuda_copier *cp, void *host, const void *dev, size_t bytes);
bool bk_cuda_copier_readback_done(bk_cuda_copier *cp);
brisk_status bk_cuda_copier_readback_wait(bk_cuda_copier *cp);
/* Pinned host memory (cudaMallocHost) and its release (NULL: no-op). */
brisk_status bk_cuda_host_alloc(size_t bytes, void **out);
void bk_cuda_host_free(void *p);
/* An op on be's stream (captured in a step's graph like the others): for the nk entries of ids
 * (device), counts[e] += the entries routed to expert e (ids past the experts count as the last,
 * negative ids not at all) and counts[n_expert] += those whose cached[e] != 0. counts (n_expert + 1)
 * and cached (n_expert): device memory. */
void bk_cuda_expert_count(bk_backend *be, const int32_t *ids, int nk, int n_expert, const int32_t *cached,
                          uint32_t *counts);
/* Arms be's next one-token MoE layer (moe_ffn_shared through cuda_moe.cu's matrix-vector kernels) to
 * add its routing into counts and cached as bk_cuda_expert_count would, inside its gate·up launch: one
 * node fewer in the decode step. NULL counts disarms. bk_cuda_expert_count_taken, after the op, says
 * whether it did (else the caller counts), and disarms. */
void bk_cuda_expert_count_arm(bk_backend *be, const int32_t *cached, uint32_t *counts);
bool bk_cuda_expert_count_taken(bk_backend *be);
/* Queues a copy of host bytes to device memory dev (see above). */
brisk_status bk_cuda_copier_copy(bk_cuda_copier *cp, void *dev, const void *host, size_t bytes);
/* A ticket for the copies queued so far; bk_cuda_copier_done says whether they have finished. */
brisk_status bk_cuda_copier_mark(bk_cuda_copier *cp, uint64_t *ticket);
bool bk_cuda_copier_done(bk_cuda_copier *cp, uint64_t ticket);
/* The backend's stream waits (on the device, the host goes on) for every copy queued so far. */
brisk_status bk_cuda_copier_fence(bk_cuda_copier *cp);
/* The host waits for every copy queued so far (setup: the cache's first fill). */
brisk_status bk_cuda_copier_wait(bk_cuda_copier *cp);
/* Host-to-device bandwidth in GB/s from pinned memory, measured at creation. */
double bk_cuda_copier_bandwidth(const bk_cuda_copier *cp);

/* ---- NCCL (cuda_nccl.cu): libnccl.so.2 is dlopen'd at first use, never linked ---- */
/* A fresh ncclUniqueId (128 bytes) for a communicator of several processes (rank 0 makes it). */
brisk_status bk_cuda_nccl_unique_id(unsigned char id[128]);
/* Makes be rank `rank` of an n_ranks communicator (ncclCommInitRank, collective: every rank calls
 * it with the same id); its all_reduce op then sums over them (ncclAllReduce on its stream). Sets
 * NCCL_NVLS_ENABLE=0 unless the environment sets it. */
brisk_status bk_cuda_nccl_init(bk_backend *be, const unsigned char id[128], int rank, int n_ranks);

#ifdef __cplusplus
}
#endif
#endif
