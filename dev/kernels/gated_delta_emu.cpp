/* gated_delta_emu.cpp — cuda_ssm.cu's kernels run on the CPU, one std::thread
 * per CUDA thread: __syncthreads, __syncwarp and the warp shuffles/ballots
 * become barriers and an exchange buffer, shared memory a per-block buffer
 * filled with NaN bytes first (reading what no thread wrote shows). The
 * kernels' text is cut out of src/backend/cuda/cuda_ssm.cu, so this checks
 * the mainline's indexing, tiling, gathering and syncs without a GPU:
 *   gd_chunk_kernel and gated_delta_kernel against the delta rule in double
 *   (1e-5 relative), ssm_conv_par_kernel + ssm_conv_state_kernel against the
 *   CPU backend's loop (bit-equal outputs and carried inputs).
 * What it cannot show: speed, the GPU's memory model, launch limits (shared
 * memory attributes, registers).
 * Build and run (about a minute on two cores): sh dev/kernels/gated_delta_emu.sh */
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
using std::min;
struct dim3 { unsigned x = 1, y = 1, z = 1; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
struct alignas(16) float4 { float x, y, z, w; };
thread_local dim3 threadIdx, blockIdx;
static std::barrier<> *blk_bar;
static std::barrier<> *warp_bar[32];
static uint64_t xb[32][32];
static unsigned char *g_dyn;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(x) alignas(x)
#define __fmul_rn(a, b) ((a) * (b))
#define __fadd_rn(a, b) ((a) + (b))
#define __ffs(x) __builtin_ffs(x)
#define __popc(x) __builtin_popcount(x)
static void __syncthreads() { blk_bar->arrive_and_wait(); }
static void __syncwarp() { warp_bar[threadIdx.x / 32]->arrive_and_wait(); }
template <class T> static T xchg(T v, int src) {
    int w = threadIdx.x / 32, l = threadIdx.x % 32;
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    xb[w][l] = u;
    __syncwarp();
    T r;
    memcpy(&r, &xb[w][src], sizeof r);
    __syncwarp();
    return r;
}
template <class T> static T __shfl_xor_sync(unsigned, T v, int o) { return xchg(v, (int)(threadIdx.x % 32) ^ o); }
template <class T> static T __shfl_sync(unsigned, T v, int s) { return xchg(v, s); }
template <class T> static T __shfl_up_sync(unsigned, T v, int o) {
    int l = threadIdx.x % 32;
    return xchg(v, l - o >= 0 ? l - o : l);
}
static unsigned __ballot_sync(unsigned, bool p) {
    unsigned m = 0;
    for (int i = 0; i < 32; i++) {
        int b = xchg((int)p, i);
        if (b) m |= 1u << i;
    }
    return m;
}
template <class F> static void launch(dim3 grid, int threads, size_t dyn, F f) {
    std::vector<unsigned char> smem(dyn + 16);
    g_dyn = smem.data();
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                std::barrier<> b(threads);
                blk_bar = &b;
                for (int w = 0; w < threads / 32; w++) warp_bar[w] = new std::barrier<>(32);
                memset(smem.data(), 0xFF, smem.size()); /* garbage, as on a GPU */
                std::vector<std::thread> ts;
                for (int t = 0; t < threads; t++)
                    ts.emplace_back([&, t, x, y, z] {
                        threadIdx = dim3(t, 0, 0);
                        blockIdx = dim3(x, y, z);
                        f();
                    });
                for (auto &t : ts) t.join();
                for (int w = 0; w < threads / 32; w++) delete warp_bar[w];
            }
}

/* programmatic dependent launch (cuda_pdl.cuh): nothing to wait for on one emulated grid */
static void pdl_wait() {}
#include "gated_delta_emu.inc" /* cut out of cuda_ssm.cu by gated_delta_emu.sh */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand() {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16) % 2000001 / 1000000.0f - 1.0f;
}
static double rel(const float *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (a[i] != a[i]) return INFINITY;
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* double reference of the op (per entry in batch order) */
static void ref_gd(const float *qkv, const float *b, const float *a, const float *ab, const float *as, double *S,
                   const int32_t *seq, int n, int nk, int nv, int group, int d, double *out) {
    size_t width = (size_t)(2 * nk + nv) * d;
    std::vector<double> qn(d), kn(d);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nv; h++) {
            int hk = group ? h / group : h % nk;
            const float *row = qkv + t * width;
            for (int w = 0; w < 2; w++) {
                const float *x = row + (size_t)(w * nk + hk) * d;
                double s = 0;
                for (int i = 0; i < d; i++) s += (double)x[i] * x[i];
                for (int i = 0; i < d; i++) (w ? kn : qn)[i] = x[i] / sqrt(s + 1e-6);
            }
            double beta = 1 / (1 + exp(-(double)b[t * nv + h]));
            double ab1 = a[t * nv + h] + ab[h], sp = ab1 > 20 ? ab1 : log(1 + exp(ab1));
            double dec = exp(sp * as[h]);
            double *Sh = S + ((size_t)seq[t] * nv + h) * d * d;
            for (int r = 0; r < d; r++) {
                double *Sr = Sh + (size_t)r * d, sk = 0, o = 0;
                for (int i = 0; i < d; i++) { Sr[i] *= dec; sk += Sr[i] * kn[i]; }
                double del = beta * (row[(size_t)(2 * nk + h) * d + r] - sk);
                for (int i = 0; i < d; i++) { Sr[i] += del * kn[i]; o += Sr[i] * qn[i]; }
                out[(size_t)t * nv * d + (size_t)h * d + r] = o / sqrt((double)d);
            }
        }
}

static int fails = 0;
/* group: 0 tiled value-head order (qwen35), else nv / nk (grouped, qwen3next) */
static void case_gd(int nk, int nv, int d, int n, const int32_t *seq, int mode, int group = 0) {
    int slots = 3;
    size_t width = (size_t)(2 * nk + nv) * d, nq = n * width, nba = (size_t)n * nv, ns = (size_t)slots * nv * d * d,
           no = (size_t)n * nv * d;
    std::vector<float> qkv(nq), b(nba), a(nba), ab(nv), as(nv), st(ns), out(no, NAN);
    for (auto &x : qkv) x = frand();
    for (auto &x : b) x = 3 * frand();
    for (auto &x : a) x = 3 * frand();
    for (auto &x : ab) x = frand();
    for (auto &x : as) x = -expf(frand());
    for (auto &x : st) x = 0.05f * frand();
    std::vector<double> sd(st.begin(), st.end()), od(no);
    ref_gd(qkv.data(), b.data(), a.data(), ab.data(), as.data(), sd.data(), seq, n, nk, nv, group, d, od.data());
    /* mode 0: the recurrent kernel alone; 1: the chunked kernel for every sequence; 2: as cuda_gated_delta
     * splits a batch: sequences of >= GDC_MIN_PER_SEQ entries chunked, the others recurrent (skipping those) */
    gdc_slots sl;
    gd_skip skip;
    memset(&skip, 0, sizeof skip);
    int nsq = 0, left = n;
    for (int t = 0; t < n; t++) {
        int c = 0;
        bool f = false;
        for (int i = 0; i < nsq; i++) f |= sl.s[i] == seq[t];
        for (int u = 0; u < n; u++) c += seq[u] == seq[t];
        if (!f && mode > 0 && (mode == 1 || c >= GDC_MIN_PER_SEQ)) {
            sl.s[nsq++] = seq[t];
            skip.bits[seq[t] / 32] |= 1u << (seq[t] % 32);
            left -= c;
        }
    }
    if (nsq) {
        dim3 grid((d + 31) / 32, nv, nsq);
        gdc_args p = {qkv.data(), b.data(), a.data(), ab.data(), as.data(), st.data(), out.data(), seq, n, nk, nv, d,
                      group, 1e-6f};
        if (d <= 64) launch(grid, GDC_THREADS, sizeof(gdc_shared<64>), [&] { gd_chunk_kernel<64>(p, sl); });
        else launch(grid, GDC_THREADS, sizeof(gdc_shared<128>), [&] { gd_chunk_kernel<128>(p, sl); });
    }
    if (left > 0) {
        dim3 grid((d + GD_WARPS - 1) / GD_WARPS, nv);
        if (d <= 64)
            launch(grid, GD_WARPS * 32, 0, [&] {
                gated_delta_kernel<2>(qkv.data(), b.data(), a.data(), ab.data(), as.data(), st.data(), seq, skip, n,
                                      nk, nv, group, d, 1e-6f, out.data());
            });
        else
            launch(grid, GD_WARPS * 32, 0, [&] {
                gated_delta_kernel<4>(qkv.data(), b.data(), a.data(), ab.data(), as.data(), st.data(), seq, skip, n,
                                      nk, nv, group, d, 1e-6f, out.data());
            });
    }
    double eo = rel(out.data(), od.data(), no), es = rel(st.data(), sd.data(), ns);
    bool ok = eo <= 1e-5 && es <= 1e-5;
    fails += !ok;
    printf("%s gated_delta %s%s (%d chunked) heads %d/%d d %d n %d: out %.2e state %.2e\n", ok ? "ok  " : "FAIL",
           mode == 0 ? "recurrent" : mode == 1 ? "chunked" : "split", group ? " grouped" : "", nsq, nk, nv, d, n, eo,
           es);
}

static void case_conv(int nc, int dc, int n, const int32_t *seq) {
    int slots = 3;
    size_t nx = (size_t)n * nc, ns = (size_t)slots * (dc - 1) * nc;
    std::vector<float> x(nx), w((size_t)dc * nc), st(ns + 1), st2, out(nx, NAN), ref(nx);
    for (auto &v : x) v = 2 * frand();
    for (auto &v : w) v = frand();
    for (auto &v : st) v = 2 * frand();
    st2 = st;
    size_t ss = (size_t)(dc - 1) * nc;
    for (int c = 0; c < nc; c++) /* the CPU's loop */
        for (int t = 0; t < n; t++) {
            float *s_ = st2.data() + (size_t)seq[t] * ss + c, xt = x[(size_t)t * nc + c], s = 0;
            for (int i = 0; i < dc - 1; i++) s += s_[(size_t)i * nc] * w[(size_t)c * dc + i];
            s += xt * w[(size_t)c * dc + dc - 1];
            for (int i = 0; i + 1 < dc - 1; i++) s_[(size_t)i * nc] = s_[(size_t)(i + 1) * nc];
            if (dc > 1) s_[(size_t)(dc - 2) * nc] = xt;
            ref[(size_t)t * nc + c] = s / (1 + expf(-s));
        }
    dim3 grid((nc + CONV_THREADS - 1) / CONV_THREADS, (n + CONV_ENT - 1) / CONV_ENT);
    launch(grid, CONV_THREADS, 0, [&] { ssm_conv_par_kernel(x.data(), w.data(), st.data(), seq, n, nc, dc, out.data()); });
    if (dc > 1) launch(grid, CONV_THREADS, 0, [&] { ssm_conv_state_kernel(x.data(), st.data(), seq, n, nc, dc); });
    bool same_out = !memcmp(out.data(), ref.data(), nx * 4), same_st = !memcmp(st.data(), st2.data(), ns * 4);
    fails += !(same_out && same_st);
    printf("%s ssm_conv channels %d d_conv %d n %d: outputs %s, carried inputs %s\n", same_out && same_st ? "ok  " : "FAIL",
           nc, dc, n, same_out ? "equal" : "DIFFER", same_st ? "equal" : "DIFFER");
}

int main() {
    static int32_t s1[600], s3[600], r3[600], few[600], dec[600];
    for (int t = 0; t < 600; t++) {
        s1[t] = 1; s3[t] = t % 3; r3[t] = t / 7 % 3; few[t] = t % 20 ? 0 : 2;
        dec[t] = t % 9 == 4 ? 1 + t / 9 % 2 : 0; /* slot 0: 80 entries; slots 1, 2: 5 each */
    }
    case_conv(200, 4, 70, s3);
    case_conv(130, 4, 100, r3);
    case_conv(40, 4, 65, few);
    case_conv(40, 2, 40, s3);
    case_conv(40, 1, 40, s3);
    case_gd(1, 2, 128, 50, s3, 0);
    case_gd(1, 2, 128, 150, s1, 1);
    case_gd(1, 2, 128, 200, s3, 1);
    case_gd(1, 3, 40, 65, s3, 1);
    case_gd(2, 4, 64, 130, r3, 1);
    case_gd(1, 2, 128, 200, few, 1);
    case_gd(1, 1, 128, 64, s1, 1);
    case_gd(1, 1, 128, 1, s1, 1);
    case_gd(1, 2, 128, 200, few, 2); /* slot 0 chunked, slot 2 (10 entries) recurrent */
    case_gd(2, 4, 64, 90, dec, 2);   /* one long prefill among single decode entries */
    case_gd(2, 4, 64, 90, dec, 2, 2); /* the same in qwen3next's grouped order */
    case_gd(2, 6, 64, 20, s3, 0, 3);
    printf("%d failed\n", fails);
    return fails != 0;
}
