/* offload.c — see offload.h. */
#include "engine/offload.h"

#include <stdlib.h>

#include "backend/cuda/cuda_backend.h"
#include "base/status.h"

struct moe_offload {
    bk_backend *cpu;
    int n_max, n_embd, k;
    void *mem;      /* CPU backend memory carved into the four below */
    float *x;       /* (n_max, n_embd) the experts' input */
    int32_t *ids;   /* (n_max, k) the router's choices */
    float *w;       /* (n_max, k) their weights */
    float *out;     /* (n_max, n_embd) the experts' weighted sum */
};

brisk_status offload_transfer(bk_backend *from, const void *src, bk_backend *to, void *dst, size_t bytes) {
    if (bk_backend_is_cuda(to, NULL)) return bk_cuda_write(to, dst, src, bytes);
    return from->ops->read(from, src, dst, bytes); /* to the host: a GPU copies back and waits */
}

brisk_status moe_offload_new(int n_threads, int n_max, int n_embd, int k, moe_offload **out) {
    *out = NULL;
    moe_offload *mo = calloc(1, sizeof *mo);
    if (!mo) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    mo->n_max = n_max;
    mo->n_embd = n_embd;
    mo->k = k;
    size_t xf = (size_t)n_max * n_embd, kf = (size_t)n_max * k;
    brisk_status s = bk_cpu_backend_new(n_threads, &mo->cpu);
    if (s == BRISK_OK) s = mo->cpu->ops->alloc(mo->cpu, (2 * xf + 2 * kf) * sizeof(float), &mo->mem);
    if (s != BRISK_OK) {
        moe_offload_free(mo);
        return s;
    }
    mo->x = mo->mem;
    mo->out = mo->x + xf;
    mo->w = mo->out + xf;
    mo->ids = (int32_t *)(mo->w + kf);
    *out = mo;
    return BRISK_OK;
}

void moe_offload_free(moe_offload *mo) {
    if (!mo) return;
    if (mo->mem) mo->cpu->ops->release(mo->cpu, mo->mem);
    if (mo->cpu) mo->cpu->ops->free(mo->cpu);
    free(mo);
}

/* The backend's work so far is done once x, ids and weights are read back
 * (read waits); the sum is written back before the caller's next op, so the
 * pass continues in order on be. */
brisk_status moe_offload_ffn(moe_offload *mo, bk_backend *be, const bk_weight *gate, const bk_weight *up,
                             const bk_weight *down, const float *x, int n, const int32_t *ids, const float *weights,
                             int k, float *out) {
    if (!mo) return bk_fail(BRISK_ERR_BACKEND, "experts in host memory, but the context has no CPU backend for them");
    if (n > mo->n_max || k != mo->k)
        return bk_fail(BRISK_ERR_RANGE, "moe offload: %d tokens x %d experts exceed its buffers (%d x %d)", n, k,
                       mo->n_max, mo->k);
    size_t xb = (size_t)n * mo->n_embd * sizeof(float), kb = (size_t)n * k * sizeof(float);
    BK_TRY(offload_transfer(be, x, mo->cpu, mo->x, xb));
    BK_TRY(offload_transfer(be, ids, mo->cpu, mo->ids, kb));
    BK_TRY(offload_transfer(be, weights, mo->cpu, mo->w, kb));
    mo->cpu->ops->moe_ffn(mo->cpu, gate, up, down, mo->x, n, mo->ids, mo->w, k, mo->out);
    return offload_transfer(mo->cpu, mo->out, be, out, xb);
}
