/* cuda_nccl.cu — the all_reduce op of a tensor-parallel CUDA backend through
 * NCCL (engine/tp.h runs the ranks; model/llama.c calls the op twice a layer),
 * and the p2p op of a pipeline rank (engine/context.c's pp_forward hands the
 * residual stream on with ncclSend / ncclRecv, grouped).
 *
 * Loading: libnccl.so.2 is dlopen'd at the first communicator, never linked:
 * brisk builds (and CI links) without NCCL's header or library, and a process
 * that runs one GPU never maps it. The few entry points and types are
 * declared here as nccl.h (NCCL 2.x) has them: ncclUniqueId is 128 bytes,
 * ncclSuccess = 0, ncclFloat32 = 7, ncclSum = 0.
 *
 * The communicator belongs to the backend (cb->nccl); the op is an
 * ncclAllReduce on the backend's stream, in place, so a step captured as a
 * CUDA graph (cuda_graph.cu) holds it as one more node (NCCL >= 2.9 allows
 * capture; the connections are set up beforehand by an eager warm-up). NVLink
 * SHARP multicast stays off: NCCL_NVLS_ENABLE=0 is set before the first
 * communicator unless the environment sets it. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

typedef struct ncclComm *ncclComm_t;
typedef struct {
    char internal[128];
} ncclUniqueId;
typedef int ncclResult_t; /* an enum in nccl.h: ncclSuccess = 0 */
enum { NCCL_SUCCESS = 0, NCCL_FLOAT32 = 7, NCCL_SUM = 0 };

typedef ncclResult_t (*nccl_get_unique_id_fn)(ncclUniqueId *);
typedef ncclResult_t (*nccl_comm_init_rank_fn)(ncclComm_t *, int, ncclUniqueId, int);
typedef ncclResult_t (*nccl_all_reduce_fn)(const void *, void *, size_t, int, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*nccl_comm_destroy_fn)(ncclComm_t);
typedef const char *(*nccl_get_error_string_fn)(ncclResult_t);
typedef ncclResult_t (*nccl_get_version_fn)(int *);
typedef ncclResult_t (*nccl_send_fn)(const void *, size_t, int, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*nccl_recv_fn)(void *, size_t, int, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*nccl_group_fn)(void);

/* The library's entry points: loaded once per process and kept (no dlclose, as cuda_blas.cu). */
typedef struct nccl_lib {
    bool tried, ok;
    char why[512];
    nccl_get_unique_id_fn get_unique_id;
    nccl_comm_init_rank_fn comm_init_rank;
    nccl_all_reduce_fn all_reduce;
    nccl_comm_destroy_fn comm_destroy;
    nccl_get_error_string_fn error_string;
    nccl_send_fn send;
    nccl_recv_fn recv;
    nccl_group_fn group_start, group_end;
    int version;
} nccl_lib;
static nccl_lib lib; /* the mapping of a shared library, not device state */

/* One backend's communicator. */
typedef struct cuda_nccl {
    ncclComm_t comm;
    int rank, n_ranks;
} cuda_nccl;

static bool nccl_load(void) {
    if (lib.tried) return lib.ok;
    lib.tried = true;
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (!h) h = dlopen("libnccl.so", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        snprintf(lib.why, sizeof lib.why,
                 "NCCL is not installed: libnccl.so.2 cannot be loaded (%s); install NCCL 2 (e.g. the libnccl2 "
                 "package) or put its lib directory on LD_LIBRARY_PATH",
                 dlerror());
        return false;
    }
    lib.get_unique_id = (nccl_get_unique_id_fn)dlsym(h, "ncclGetUniqueId");
    lib.comm_init_rank = (nccl_comm_init_rank_fn)dlsym(h, "ncclCommInitRank");
    lib.all_reduce = (nccl_all_reduce_fn)dlsym(h, "ncclAllReduce");
    lib.comm_destroy = (nccl_comm_destroy_fn)dlsym(h, "ncclCommDestroy");
    lib.error_string = (nccl_get_error_string_fn)dlsym(h, "ncclGetErrorString");
    nccl_get_version_fn get_version = (nccl_get_version_fn)dlsym(h, "ncclGetVersion");
    lib.send = (nccl_send_fn)dlsym(h, "ncclSend");
    lib.recv = (nccl_recv_fn)dlsym(h, "ncclRecv");
    lib.group_start = (nccl_group_fn)dlsym(h, "ncclGroupStart");
    lib.group_end = (nccl_group_fn)dlsym(h, "ncclGroupEnd");
    if (!lib.get_unique_id || !lib.comm_init_rank || !lib.all_reduce || !lib.comm_destroy || !lib.error_string ||
        !lib.send || !lib.recv || !lib.group_start || !lib.group_end) {
        snprintf(lib.why, sizeof lib.why, "libnccl.so.2 lacks an entry point brisk needs (NCCL 2.x expected)");
        return false;
    }
    if (get_version) get_version(&lib.version);
    if (lib.version && lib.version < 20900) {
        snprintf(lib.why, sizeof lib.why, "NCCL %d is too old: CUDA graph capture needs 2.9 or later", lib.version);
        return false;
    }
    lib.ok = true;
    return true;
}

static brisk_status nccl_fail(const char *what, ncclResult_t r) {
    return bk_fail(BRISK_ERR_BACKEND, "nccl: %s: %s (%d)", what, lib.error_string ? lib.error_string(r) : "?", r);
}

extern "C" brisk_status bk_cuda_nccl_unique_id(unsigned char id[128]) {
    if (!nccl_load()) return bk_fail(BRISK_ERR_UNSUPPORTED, "%s", lib.why);
    setenv("NCCL_NVLS_ENABLE", "0", 0); /* rank 0's bootstrap starts here */
    ncclUniqueId u;
    ncclResult_t r = lib.get_unique_id(&u);
    if (r != NCCL_SUCCESS) return nccl_fail("ncclGetUniqueId", r);
    memcpy(id, u.internal, sizeof u.internal);
    return BRISK_OK;
}

/* Two all-reduces run eagerly right after the communicator is made (a decode step's size and a
 * prefill chunk's): NCCL sets up its connections at a communicator's first collectives, which are
 * then never inside a graph capture (a step's first pass is captured without an eager run). */
static brisk_status nccl_warm_up(cuda_backend *cb) {
    const size_t n = (size_t)1 << 20;
    float *buf = NULL;
    CU_TRY(cudaMalloc((void **)&buf, n * sizeof(float)));
    cudaError_t e = cudaMemsetAsync(buf, 0, n * sizeof(float), cb->stream);
    ncclResult_t r = NCCL_SUCCESS;
    const size_t sizes[2] = {(size_t)8192, n};
    for (int i = 0; i < 2 && e == cudaSuccess && r == NCCL_SUCCESS; i++)
        r = lib.all_reduce(buf, buf, sizes[i], NCCL_FLOAT32, NCCL_SUM, cb->nccl->comm, cb->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cb->stream);
    cudaFree(buf);
    if (r != NCCL_SUCCESS) return nccl_fail("ncclAllReduce (warm-up)", r);
    if (e != cudaSuccess) return bk_fail(BRISK_ERR_BACKEND, "nccl warm-up: %s", cudaGetErrorString(e));
    return BRISK_OK;
}

extern "C" brisk_status bk_cuda_nccl_init(bk_backend *be, const unsigned char id[128], int rank, int n_ranks) {
    cuda_backend *cb = (cuda_backend *)be;
    if (cb->nccl) return bk_fail(BRISK_ERR_INVALID_ARG, "nccl: the backend already has a communicator");
    if (!nccl_load()) return bk_fail(BRISK_ERR_UNSUPPORTED, "%s", lib.why);
    setenv("NCCL_NVLS_ENABLE", "0", 0); /* unless the user chose */
    cuda_nccl *nc = (cuda_nccl *)calloc(1, sizeof *nc);
    if (!nc) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    CU_TRY(cudaSetDevice(cb->device));
    ncclUniqueId u;
    memcpy(u.internal, id, sizeof u.internal);
    ncclResult_t r = lib.comm_init_rank(&nc->comm, n_ranks, u, rank);
    if (r != NCCL_SUCCESS) {
        free(nc);
        return nccl_fail("ncclCommInitRank", r);
    }
    nc->rank = rank;
    nc->n_ranks = n_ranks;
    cb->nccl = nc;
    return nccl_warm_up(cb);
}

void cuda_nccl_free(cuda_backend *cb) {
    if (!cb->nccl) return;
    if (cb->nccl->comm) lib.comm_destroy(cb->nccl->comm);
    free(cb->nccl);
    cb->nccl = NULL;
}

void cuda_all_reduce(bk_backend *be, float *x, size_t n) {
    cuda_backend *cb = (cuda_backend *)be;
    if (!cb->nccl || !n) return;
    cuda_forget_act_copies(cb); /* x changes: it no longer matches any quantized copy */
    ncclResult_t r = lib.all_reduce(x, x, n, NCCL_FLOAT32, NCCL_SUM, cb->nccl->comm, cb->stream);
    if (r != NCCL_SUCCESS) cuda_set_error(cb, nccl_fail("ncclAllReduce", r));
}

/* The transfers of list as one NCCL group on the backend's stream (ncclSend / ncclRecv between
 * group start and end progress together, which pp_forward's schedule relies on). */
brisk_status cuda_p2p(bk_backend *be, const bk_p2p *list, int n) {
    cuda_backend *cb = (cuda_backend *)be;
    if (!cb->nccl) return bk_fail(BRISK_ERR_UNSUPPORTED, "p2p: the backend has no communicator");
    cuda_forget_act_copies(cb); /* a receive rewrites its buffer: no quantized copy matches it any more */
    ncclResult_t r = lib.group_start();
    if (r != NCCL_SUCCESS) return nccl_fail("ncclGroupStart", r);
    for (int i = 0; i < n && r == NCCL_SUCCESS; i++)
        r = list[i].send ? lib.send(list[i].buf, list[i].n, NCCL_FLOAT32, list[i].peer, cb->nccl->comm, cb->stream)
                         : lib.recv(list[i].buf, list[i].n, NCCL_FLOAT32, list[i].peer, cb->nccl->comm, cb->stream);
    ncclResult_t e = lib.group_end(); /* always closes the group it opened */
    if (r != NCCL_SUCCESS) return nccl_fail(list[0].send ? "ncclSend" : "ncclRecv", r);
    if (e != NCCL_SUCCESS) return nccl_fail("ncclGroupEnd", e);
    return BRISK_OK;
}
