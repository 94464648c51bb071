/* cuda_trace.cuh — a timeline of one decode step from inside its kernels, for a trace build only
 * (`make BUILD=build-trace EXTRA_NVCCFLAGS=-DBK_TRACE`; the normal build compiles all of it out).
 *
 * Why: the step runs as one CUDA graph of ~500 programmatic launches, and the GPU machine has no
 * Nsight Systems; ncu serialises kernels, and the ablations (BRISK_CUDA_ABLATE) give what a class of
 * ops costs, not where the time between kernels goes. Here thread 0 of every block stamps the
 * global nanosecond timer when the block starts, when its pdl_wait returns (the kernel before it has
 * finished and its writes are visible) and, in kernels that open a BK_TRACE_SCOPE, lane 0 of each
 * warp when its warp ends (a block's warps may finish apart: its end is the last of them),
 * with the launch's grid id and the SM. From these: each launch's ramp (its blocks' first and last
 * starts), the time from the last block of one kernel ending to the waits of the next returning
 * (the dependency's latency), and each kernel's span. bench/cuda/trace_step.py reads the records.
 *
 * Without relocatable device code each .cu has its own copy of the device pointers below, so each
 * copy registers a host setter when the program loads (bk_trace_register) and cuda_trace.cu sets
 * them all when BRISK_CUDA_TRACE names a file. */
#ifndef BK_CUDA_TRACE_CUH
#define BK_CUDA_TRACE_CUH

#define BK_TRACE_START 0 /* the block began */
#define BK_TRACE_WAIT 1  /* its pdl_wait returned */
#define BK_TRACE_END 2   /* it ended (kernels with a BK_TRACE_SCOPE) */

typedef struct bk_trace_rec {
    unsigned long long grid, t; /* %gridid, %globaltimer (ns) */
    unsigned block, info;       /* linear block index; SM << 8 | kind */
} bk_trace_rec;

typedef void (*bk_trace_setter)(bk_trace_rec *buf, unsigned *count, unsigned cap);
extern "C" int bk_trace_register(bk_trace_setter set);

#ifdef BK_TRACE
static __device__ bk_trace_rec *bk_trace_buf;
static __device__ unsigned *bk_trace_count;
static __device__ unsigned bk_trace_cap;

__device__ __forceinline__ void bk_trace_mark(unsigned kind) {
    /* a block's end is its last warp's: lane 0 of every warp stamps END (the reader keeps each
     * block's latest), thread 0 alone the start and the wait */
    const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    if (kind == BK_TRACE_END ? (tid & 31u) != 0 : tid != 0) return;
    bk_trace_rec *b = bk_trace_buf;
    if (!b) return;
    unsigned long long g, t;
    unsigned sm;
    asm volatile("mov.u64 %0, %%gridid;" : "=l"(g));
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    const unsigned i = atomicAdd(bk_trace_count, 1u);
    if (i >= bk_trace_cap) return;
    bk_trace_rec r;
    r.grid = g;
    r.t = t;
    r.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    r.info = sm << 8 | kind;
    b[i] = r;
}
/* stamps BK_TRACE_END when the enclosing scope (a kernel's body) is left, by any return */
struct bk_trace_scope {
    __device__ __forceinline__ ~bk_trace_scope() { bk_trace_mark(BK_TRACE_END); }
};
#define BK_TRACE_SCOPE() bk_trace_scope bk_trace_scope_
static void bk_trace_set_here(bk_trace_rec *buf, unsigned *count, unsigned cap) {
    (void)cudaMemcpyToSymbol(bk_trace_buf, &buf, sizeof buf);
    (void)cudaMemcpyToSymbol(bk_trace_count, &count, sizeof count);
    (void)cudaMemcpyToSymbol(bk_trace_cap, &cap, sizeof cap);
}
static const int bk_trace_registered __attribute__((unused)) = bk_trace_register(bk_trace_set_here);
#else
__device__ __forceinline__ void bk_trace_mark(unsigned) {}
#define BK_TRACE_SCOPE() (void)0
#endif

#endif
