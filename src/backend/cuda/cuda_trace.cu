/* cuda_trace.cu — the host side of cuda_trace.cuh's timeline: BRISK_CUDA_TRACE=FILE (in a trace
 * build) records the BRISK_CUDA_TRACE_STEP-th replayed decode step (default 40: past the warm-up
 * and the first tokens) into FILE, one record a line ("grid block sm kind ns"), and the kernel
 * nodes of every graph captured into FILE.names ("graph G node I grid X Y Z block X NAME"), in
 * the order of capture, which is the order of the step's launches. bench/cuda/trace_step.py turns
 * them into a table. The trace's stamps cost an atomic and a store per block, so a traced step
 * runs a little slower than a plain one: the gaps it shows, not its total, are the point. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

#define TRACE_SETTERS_MAX 64
#define TRACE_CAP (1u << 23) /* records: 8 M x 24 bytes (a warp's end is one), a few steps of the largest graphs */

/* Each .cu's copy of the device pointers (cuda_trace.cuh), set by its own setter. The array is
 * zero before any constructor runs (static storage), so registration order does not matter. */
static bk_trace_setter trace_setters[TRACE_SETTERS_MAX];
static int trace_n_setters;
extern "C" int bk_trace_register(bk_trace_setter set) {
    if (trace_n_setters < TRACE_SETTERS_MAX) trace_setters[trace_n_setters++] = set;
    return trace_n_setters;
}

typedef struct cuda_trace {
    char *path, *names; /* FILE and FILE.names */
    long step, seen; /* the replay to record (1-based), replays so far */
    bool armed, done;
    int n_graphs;
    bk_trace_rec *buf;
    unsigned *count;
} cuda_trace;

static void trace_point(bk_trace_rec *buf, unsigned *count, unsigned cap) {
    for (int i = 0; i < trace_n_setters; i++) trace_setters[i](buf, count, cap);
}

void cuda_trace_init(cuda_backend *cb) {
    const char *path = cb->plan.trace;
    cb->trace = NULL;
    if (!path || !*path) return;
#ifndef BK_TRACE
    fprintf(stderr, "BRISK_CUDA_TRACE: this is not a trace build (make BUILD=build-trace "
                    "EXTRA_NVCCFLAGS=-DBK_TRACE); nothing is recorded\n");
#else
    cuda_trace *t = (cuda_trace *)calloc(1, sizeof *t);
    if (!t) return;
    t->path = strdup(path);
    t->names = (char *)malloc(strlen(path) + sizeof ".names");
    if (t->names) sprintf(t->names, "%s.names", path);
    t->step = cb->plan.trace_step;
    if (!t->path || !t->names || cudaMalloc((void **)&t->buf, (size_t)TRACE_CAP * sizeof(bk_trace_rec)) != cudaSuccess ||
        cudaMalloc((void **)&t->count, sizeof(unsigned)) != cudaSuccess) {
        (void)cudaGetLastError();
        fprintf(stderr, "BRISK_CUDA_TRACE: no memory for the records; nothing is recorded\n");
        cudaFree(t->buf);
        free(t->path);
        free(t->names);
        free(t);
        return;
    }
    FILE *f = fopen(t->path, "w"); /* both files start empty */
    if (f) fclose(f);
    f = fopen(t->names, "w");
    if (f) fclose(f);
    cb->trace = t;
#endif
}

/* The kernel nodes of a captured graph, in capture order, appended to FILE.names. */
void cuda_trace_graph(cuda_backend *cb, cudaGraph_t g) {
    cuda_trace *t = cb->trace;
    if (!t) return;
    size_t n = 0;
    if (cudaGraphGetNodes(g, NULL, &n) != cudaSuccess || !n) return;
    cudaGraphNode_t *nodes = (cudaGraphNode_t *)malloc(n * sizeof *nodes);
    FILE *f = nodes ? fopen(t->names, "a") : NULL;
    if (f && cudaGraphGetNodes(g, nodes, &n) == cudaSuccess) {
        for (size_t i = 0; i < n; i++) {
            cudaGraphNodeType ty;
            cudaKernelNodeParams p;
            const char *name = "?";
            if (cudaGraphNodeGetType(nodes[i], &ty) != cudaSuccess || ty != cudaGraphNodeTypeKernel ||
                cudaGraphKernelNodeGetParams(nodes[i], &p) != cudaSuccess)
                continue;
            if (cudaFuncGetName(&name, p.func) != cudaSuccess) name = "?";
            fprintf(f, "graph %d node %zu grid %u %u %u block %u %s\n", t->n_graphs, i, p.gridDim.x, p.gridDim.y,
                    p.gridDim.z, p.blockDim.x * p.blockDim.y * p.blockDim.z, name);
        }
    }
    (void)cudaGetLastError();
    if (f) fclose(f);
    free(nodes);
    t->n_graphs++;
}

/* Arms the device pointers for the chosen replay only: before it they are NULL (a stamp is one
 * load and a branch), and after it NULL again. */
void cuda_trace_before_replay(cuda_backend *cb) {
    cuda_trace *t = cb->trace;
    if (!t || t->done || ++t->seen != t->step) return;
    cudaStreamSynchronize(cb->stream);
    cudaMemset(t->count, 0, sizeof(unsigned));
    trace_point(t->buf, t->count, TRACE_CAP);
    cudaDeviceSynchronize();
    t->armed = true;
}

void cuda_trace_after_replay(cuda_backend *cb) {
    cuda_trace *t = cb->trace;
    if (!t || !t->armed) return;
    t->armed = false;
    t->done = true;
    cudaStreamSynchronize(cb->stream);
    trace_point(NULL, NULL, 0);
    unsigned n = 0;
    cudaMemcpy(&n, t->count, sizeof n, cudaMemcpyDeviceToHost);
    unsigned keep = n < TRACE_CAP ? n : TRACE_CAP;
    bk_trace_rec *h = (bk_trace_rec *)malloc((size_t)keep * sizeof *h + 1);
    FILE *f = h ? fopen(t->path, "w") : NULL;
    if (f && cudaMemcpy(h, t->buf, (size_t)keep * sizeof *h, cudaMemcpyDeviceToHost) == cudaSuccess) {
        for (unsigned i = 0; i < keep; i++)
            fprintf(f, "%llu %u %u %u %llu\n", h[i].grid, h[i].block, h[i].info >> 8, h[i].info & 0xFF, h[i].t);
        fprintf(stderr, "BRISK_CUDA_TRACE: %u records of replayed step %ld in %s%s\n", keep, t->step, t->path,
                n > keep ? " (the buffer was full: later blocks are missing)" : "");
    }
    (void)cudaGetLastError();
    if (f) fclose(f);
    free(h);
}

void cuda_trace_free(cuda_backend *cb) {
    cuda_trace *t = cb->trace;
    if (!t) return;
    cudaFree(t->buf);
    cudaFree(t->count);
    free(t->path);
    free(t->names);
    free(t);
    cb->trace = NULL;
}
