/* maxsim_emu.cpp — cuda_maxsim.cu's kernels (maxsim_prep_kernel, maxsim_kernel<TM>, maxsim_sum_kernel)
 * compiled for the CPU (see maxsim_emu.sh) and held against a double-precision MaxSim: a block of
 * 256 emulated threads (one std::thread each; __syncthreads a barrier of 256, a shuffle an exchange
 * buffer between two barriers of the warp's 32; shared memory the kernel's static locals, one block
 * at a time; atomics through std::atomic_ref), grid by grid in stream order, over the sizes
 * tests/test_cuda_ops.c's maxsim takes (smaller): every query-tile height, dims that are no
 * multiple of 4 or of a stage, documents of 0 and 1 rows, one across blocks, many to a block, zero
 * rows, with and without normalising. Same tolerance as test_cuda_ops: 1e-5 of each score's
 * magnitude bound, empty documents exactly 0.
 * What it cannot show: the device's scheduling (a missing __syncthreads can pass here when the
 * emulated threads happen to run in order), its shared-memory banks and what nvcc makes of the
 * arithmetic (the kernels use fmaf; built with -ffp-contract=off, the rest rounds as written).
 * Build and run (a minute on two cores): sh dev/kernels/maxsim_emu.sh */
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static /* one block at a time: the block's threads share the kernel's statics */

struct dim3 {
    unsigned x, y, z;
};
static thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) float2 {
    float x, y;
};
template <class T> static T __ldg(const T *p) { return *p; }
static unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
static float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static unsigned atomicMax(unsigned *p, unsigned v) {
    std::atomic_ref<unsigned> a(*p);
    unsigned o = a.load();
    while (o < v && !a.compare_exchange_weak(o, v)) {
    }
    return o;
}
static float atomicAdd(float *p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }

static std::barrier<> *block_bar, *warp_bar[8];
static uint64_t xb[8][32];
static void __syncthreads() { block_bar->arrive_and_wait(); }
template <class T> static T __shfl_xor_sync(unsigned, T v, int o) {
    static_assert(sizeof(T) <= 8, "lanes of at most 64 bits");
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    memcpy(&xb[w][l], &v, sizeof v);
    warp_bar[w]->arrive_and_wait();
    T r;
    memcpy(&r, &xb[w][l ^ o], sizeof r);
    warp_bar[w]->arrive_and_wait();
    return r;
}

#include "maxsim_emu.inc" /* cut out of cuda_maxsim.cu by maxsim_emu.sh */

/* Runs kernel(args) over grid blocks of 256 threads, a block at a time (the threads wait for each
 * other between blocks: the statics are the next block's). */
template <class F> static void launch(unsigned grid, F kernel) {
    gridDim = {grid, 1, 1};
    blockDim = {256, 1, 1};
    std::vector<std::thread> th;
    for (unsigned t = 0; t < 256; t++)
        th.emplace_back([&, t] {
            threadIdx = {t, 0, 0};
            for (unsigned b = 0; b < grid; b++) {
                blockIdx = {b, 0, 0};
                kernel();
                block_bar->arrive_and_wait();
            }
        });
    for (auto &x : th) x.join();
}

/* cuda_maxsim's launches, in its order and with its choice of the query tile (TM from n_q) */
static void emu_maxsim(const float *q, int n_q, const float *d, int64_t n_rows, const int32_t *off, int n_docs, int dim,
                       bool norm, unsigned *best, float *qs, float *scores) {
    const size_t n_best = (size_t)n_docs * n_q, pb = (n_best + 255) / 256;
    launch((unsigned)(pb < 1 ? 1 : pb > 1024 ? 1024 : pb), [&] { maxsim_prep_kernel(q, n_q, dim, norm, best, n_best, qs); });
    auto main_kernel = [&](auto tm) {
        constexpr int TM = decltype(tm)::value;
        const int n_qt = (n_q + 8 * TM - 1) / (8 * TM);
        launch((unsigned)((n_rows + MS_DT - 1) / MS_DT * n_qt),
               [&] { maxsim_kernel<TM>(q, n_q, d, n_rows, off, n_docs, dim, norm, n_qt, best); });
    };
    if (n_rows > 0) {
        if (n_q <= 8) main_kernel(std::integral_constant<int, 1>());
        else if (n_q <= 16) main_kernel(std::integral_constant<int, 2>());
        else if (n_q <= 32) main_kernel(std::integral_constant<int, 4>());
        else main_kernel(std::integral_constant<int, 8>());
    }
    launch((unsigned)(((size_t)n_docs * 32 + 255) / 256), [&] { maxsim_sum_kernel(best, qs, n_q, off, n_docs, scores); });
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd() {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float frand() { return (float)(rnd() % 2000001) / 1000000.0f - 1.0f; }

static int n_fail, n_cases;

/* One case: random rows (a zero row among the query's and the documents' when there are several). */
static void check(int n_q, int dim, const std::vector<int> &len) {
    const int n_docs = (int)len.size();
    std::vector<int32_t> off(n_docs + 1, 0);
    for (int j = 0; j < n_docs; j++) off[j + 1] = off[j] + len[j];
    const int64_t rows = off[n_docs];
    std::vector<float> q((size_t)n_q * dim), d((size_t)(rows ? rows : 1) * dim), sc(n_docs), qs(n_q);
    for (auto &x : q) x = frand();
    for (auto &x : d) x = frand();
    if (n_q > 2) memset(&q[(size_t)(n_q / 2) * dim], 0, sizeof(float) * dim);
    if (rows > 2) memset(&d[(size_t)(rows / 2) * dim], 0, sizeof(float) * dim);
    std::vector<unsigned> best((size_t)n_docs * n_q);
    for (int norm = 0; norm < 2; norm++) {
        emu_maxsim(q.data(), n_q, d.data(), rows, off.data(), n_docs, dim, norm, best.data(), qs.data(), sc.data());
        int bad = 0;
        for (int j = 0; j < n_docs; j++) {
            double want = 0, bound = 0;
            for (int i = 0; i < n_q && len[j]; i++) {
                double b = -INFINITY, a = 0, qn = 0;
                for (int k = 0; k < dim; k++) qn += (double)q[(size_t)i * dim + k] * q[(size_t)i * dim + k];
                for (int64_t r = off[j]; r < off[j + 1]; r++) {
                    double s = 0, sa = 0, dn = 0;
                    for (int k = 0; k < dim; k++) {
                        const double x = q[(size_t)i * dim + k], y = d[(size_t)r * dim + k];
                        s += x * y, sa += fabs(x * y), dn += y * y;
                    }
                    const double f = !norm ? 1 : qn > 0 && dn > 0 ? 1 / sqrt(qn) / sqrt(dn) : 0;
                    b = s * f > b ? s * f : b;
                    a = sa * f > a ? sa * f : a;
                }
                want += b, bound += a;
            }
            const bool ok = len[j] ? fabs(sc[j] - want) <= 1e-5 * bound : sc[j] == 0;
            if (!ok && bad++ < 3)
                printf("FAIL n_q %d dim %d docs %d norm %d: doc %d (%d rows) %.9g, want %.9g (bound %.3g)\n", n_q, dim,
                       n_docs, norm, j, len[j], sc[j], want, bound);
        }
        n_cases++;
        n_fail += bad > 0;
    }
}

int main() {
    block_bar = new std::barrier<>(256);
    for (auto &w : warp_bar) w = new std::barrier<>(32);
    const std::vector<int> mixed = {0, 1, 17, 128, 129, 0, 0, 300, 2, 5, 1, 0};
    for (int n_q : {1, 3, 8, 9, 16, 17, 32, 33, 64, 65})
        for (int dim : {1, 5, 33, 130}) check(n_q, dim, mixed);
    check(7, 1000, mixed);
    check(32, 128, {1});
    check(5, 64, {0});
    check(64, 40, {700});
    std::vector<int> many(300);
    for (auto &l : many) l = rnd() % 5 == 0 ? 0 : rnd() % 9;
    check(32, 20, many);
    check(9, 33, many);
    printf("%d passed, %d failed\n", n_cases - n_fail, n_fail);
    return n_fail != 0;
}
