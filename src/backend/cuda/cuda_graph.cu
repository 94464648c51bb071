/* cuda_graph.cu — forward passes as steps: one upload of the step's inputs,
 * and small passes (decode) captured once as a CUDA graph, then replayed.
 *
 * Why: a decode step of an 8B model is ~500 kernel launches of a few
 * microseconds each, the same order as the bandwidth time of the weights
 * they read. A graph launch replaces them with one call.
 *
 * A graph stays valid as positions move because every per-step value is
 * read from device memory (ids, positions, cache slots, table offsets and
 * block tables, in step_dev at fixed places), never baked into kernel
 * arguments. What does shape the kernels is the graph's key: the token
 * count, which rows want logits, the optional outputs (bk_step.variant),
 * and the attention length bucket (the next power of two of the longest
 * sequence, at least 256): split-K attention is
 * sized for the bucket and its kernels skip positions past each sequence's
 * end (the decode kernel, cuda_attn_decode.cu, deals each sequence's own
 * length over the bucket's splits), so one graph serves every length in its
 * bucket. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

#define GRAPH_MAX_TOKENS 16  /* larger passes amortise their launches: run eagerly */
#define GRAPH_CACHE_MAX 32

typedef struct cuda_graph_entry {
    int key[5];              /* n_tokens, n_out, first output row, attention bucket, bk_step.variant */
    cudaGraphExec_t exec;
} cuda_graph_entry;

brisk_status cuda_graph_init(cuda_backend *cb) {
    cb->graphs_off = cb->plan.graphs_off;
    cb->step_cap = (size_t)1 << 20; /* int32s: 4 MiB, as the attention staging area */
    CU_TRY(cudaMallocHost((void **)&cb->step_host, cb->step_cap * sizeof(int32_t)));
    CU_TRY(cudaMalloc((void **)&cb->step_dev, cb->step_cap * sizeof(int32_t)));
    CU_TRY(cudaEventCreateWithFlags(&cb->step_ev, cudaEventDisableTiming));
    cuda_trace_init(cb);
    cb->cap_graphs = GRAPH_CACHE_MAX;
    cb->graphs = (cuda_graph_entry *)calloc(GRAPH_CACHE_MAX, sizeof *cb->graphs);
    if (!cb->graphs) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    return BRISK_OK;
}

static void drop_graphs(cuda_backend *cb) {
    for (int i = 0; i < cb->n_graphs; i++) cudaGraphExecDestroy(cb->graphs[i].exec);
    cb->n_graphs = 0;
}

/* The step's embedding rows (quantized, as the table holds them: 512 tokens of qwen3-8b's Q4_K
 * rows are 1.2 MB, against 8 MB of floats and the host's time to make them) from a table in host
 * memory into emb_dev (cuda_backend.emb_host). The buffers hold 512 tokens (the engine's largest
 * micro-batch) and grow, dropping the captured graphs that read the old address, only for a
 * larger step. */
brisk_status cuda_stage_embedding(cuda_backend *cb, const bk_weight *emb, const int32_t *tokens, int n) {
    size_t need = (size_t)n * emb->row_bytes, want = need > (size_t)512 * emb->row_bytes ? need : (size_t)512 * emb->row_bytes;
    if (need > cb->emb_cap) {
        drop_graphs(cb);
        cudaFreeHost(cb->emb_host);
        cudaFree(cb->emb_dev);
        cb->emb_host = cb->emb_dev = NULL;
        cb->emb_cap = 0;
        CU_TRY(cudaMallocHost((void **)&cb->emb_host, want));
        CU_TRY(cudaMalloc((void **)&cb->emb_dev, want));
        cb->emb_cap = want;
    }
    for (int i = 0; i < n; i++)
        memcpy(cb->emb_host + (size_t)i * emb->row_bytes, (const uint8_t *)emb->host + (size_t)tokens[i] * emb->row_bytes,
               emb->row_bytes);
    CU_TRY(cudaMemcpyAsync(cb->emb_dev, cb->emb_host, need, cudaMemcpyHostToDevice, cb->stream));
    cb->st_emb = cb->emb_dev;
    return BRISK_OK;
}

void cuda_graph_free(cuda_backend *cb) {
    cuda_trace_free(cb);
    cudaFreeHost(cb->emb_host);
    cudaFree(cb->emb_dev);
    if (cb->graphs) drop_graphs(cb);
    free(cb->graphs);
    if (cb->step_ev) cudaEventDestroy(cb->step_ev);
    cudaFreeHost(cb->step_host);
    cudaFree(cb->step_dev);
}

/* Packs ids, pos, slot, seq, per-token table offsets, then the distinct
 * tables (tokens of one sequence share one copy). Returns the int32 count,
 * or -1. seq is packed because the recurrent ops (cuda_ssm.cu) index their
 * state by it, and a replayed graph must read this step's sequences. */
static int64_t pack_step(cuda_backend *cb, const bk_step *st, int *max_np) {
    const bk_attn_batch *ab = st->ab;
    int n = st->n_tokens, bs = st->kv_block_size;
    int32_t *pk = cb->step_host;
    int64_t cap = (int64_t)cb->step_cap, cur = 5 * (int64_t)n;
    if (cur > cap) return -1;
    memcpy(pk, st->tokens, (size_t)n * 4);
    memcpy(pk + n, ab->pos, (size_t)n * 4);
    memcpy(pk + 2 * n, ab->slot, (size_t)n * 4);
    if (ab->seq) memcpy(pk + 3 * n, ab->seq, (size_t)n * 4);
    else memset(pk + 3 * n, 0, (size_t)n * 4);
    *max_np = 0;
    for (int t = 0; t < n;) {
        int u = t, np = 0; /* tokens [t, u) share one table; np: their longest span */
        for (; u < n && ab->block_table[u] == ab->block_table[t]; u++)
            if (ab->pos[u] + 1 > np) np = ab->pos[u] + 1;
        if (np > *max_np) *max_np = np;
        int len = (np + bs - 1) / bs;
        if (cur + len > cap) return -1;
        memcpy(pk + cur, ab->block_table[t], (size_t)len * 4);
        for (int i = t; i < u; i++) pk[4 * n + i] = (int32_t)(cur - 5 * n);
        cur += len;
        t = u;
    }
    return cur;
}

static int np_bucket(int np) {
    int b = 256;
    while (b < np) b *= 2;
    return b;
}

extern "C" brisk_status cuda_step_begin(bk_backend *be, const bk_step *st, bool *replayed) {
    cuda_backend *cb = (cuda_backend *)be;
    *replayed = false;
    cb->step_on = false;
    if (cb->err != BRISK_OK) return BRISK_OK; /* reported by the next read() */
    int n = st->n_tokens, max_np = 0;
    /* step_host is reused: the previous step's upload must have left it */
    CU_TRY(cudaEventSynchronize(cb->step_ev));
    int64_t cnt = pack_step(cb, st, &max_np);
    if (cnt < 0) return bk_fail(BRISK_ERR_RANGE, "cuda: step of %d tokens exceeds the staging area", n);
    CU_TRY(cudaMemcpyAsync(cb->step_dev, cb->step_host, (size_t)cnt * 4, cudaMemcpyHostToDevice, cb->stream));
    cb->st_emb = NULL;
    if (st->emb && !st->emb->dev && st->emb->host && n > 0) BK_TRY(cuda_stage_embedding(cb, st->emb, st->tokens, n));
    CU_TRY(cudaEventRecord(cb->step_ev, cb->stream));
    cb->st_ids = cb->step_dev;
    cb->st_pos = cb->step_dev + n;
    cb->st_slot = cb->step_dev + 2 * n;
    cb->st_seq = cb->step_dev + 3 * n;
    cb->st_off = cb->step_dev + 4 * n;
    cb->st_tabs = cb->step_dev + 5 * n;
    cb->step_on = true;
    bool graph = !cb->graphs_off && n <= GRAPH_MAX_TOKENS;
    cb->st_np = graph ? np_bucket(max_np) : max_np;
    if (!graph) return BRISK_OK;

    int key[5] = {n, st->n_out, st->n_out ? st->out_idx[0] : -1, cb->st_np, st->variant};
    /* rows wanting logits beyond the first must follow it one by one for the key to describe them */
    for (int i = 1; i < st->n_out; i++)
        if (st->out_idx[i] != st->out_idx[0] + i) return BRISK_OK;
    for (int i = 0; i < cb->n_graphs; i++) {
        if (memcmp(cb->graphs[i].key, key, sizeof key)) continue;
        cuda_trace_before_replay(cb);
        CU_TRY(cudaGraphLaunch(cb->graphs[i].exec, cb->stream));
        cuda_trace_after_replay(cb);
        cb->n_replays++;
        cb->step_on = false;
        *replayed = true;
        return BRISK_OK;
    }
    if (cb->n_graphs == cb->cap_graphs) drop_graphs(cb);
    memcpy(cb->cur_key, key, sizeof key);
    CU_TRY(cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeRelaxed));
    cb->capturing = true;
    return BRISK_OK;
}

extern "C" brisk_status cuda_step_end(bk_backend *be, bool *rerun) {
    cuda_backend *cb = (cuda_backend *)be;
    *rerun = false;
    if (!cb->capturing) {
        cb->step_on = false;
        return BRISK_OK;
    }
    cb->capturing = false;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(cb->stream, &g);
    cudaGraphExec_t exec = NULL;
    if (e == cudaSuccess && cb->err == BRISK_OK) e = cudaGraphInstantiate(&exec, g, 0);
    if (e == cudaSuccess && g && cb->plan.graph_info) { /* the nodes a step replays (the bench's counts) */
        size_t n_nodes = 0;
        if (cudaGraphGetNodes(g, NULL, &n_nodes) == cudaSuccess) fprintf(stderr, "cuda graph: %zu nodes\n", n_nodes);
    }
    if (e == cudaSuccess && g) cuda_trace_graph(cb, g);
    if (g) cudaGraphDestroy(g);
    if (e != cudaSuccess || cb->err != BRISK_OK) {
        /* An op that cannot be captured: run this pass again eagerly, and
         * every later one too (the error, if it was the op's own, recurs). */
        cudaGetLastError();
        cb->err = BRISK_OK;
        cb->graphs_off = true;
        *rerun = true;
        return BRISK_OK;
    }
    cuda_graph_entry *ge = &cb->graphs[cb->n_graphs++];
    memcpy(ge->key, cb->cur_key, sizeof ge->key);
    ge->exec = exec;
    cb->n_captures++;
    cb->step_on = false;
    CU_TRY(cudaGraphLaunch(exec, cb->stream));
    return BRISK_OK;
}
