/* test_pp.c — pipeline parallelism through the real forward pass, on the CPU
 * (issue 7's CI proof of the schedule where no multi-GPU machine is lent).
 *
 * A model is loaded N times (N = 2, 3, 4) as ranks 0..N-1 of
 * brisk_model_params.pp_size: each binds only its run of layers
 * (model_pp_layers), rank 0 also the embedding and the LM head. Each rank's
 * context runs on a CPU backend whose p2p op is this file's test double: the
 * ranks run in threads and every send is a message queued for its peer, every
 * receive waits for the message from its peer (in order, sizes checked). So
 * the test runs engine/context.c's pp_forward as the GPUs would: micro-batches
 * round the ranks and back to rank 0 for the logits.
 *
 * The batches: a first one with two sequences' prompts (8 entries: up to 4
 * micro-batches that cut across the sequences), then N_STEPS greedy steps of
 * sequence 0, every fourth also feeding sequence 1 (2 entries: 2
 * micro-batches). The same batches run on the unsplit model. Checks: rank 0's
 * greedy tokens equal the unsplit model's; its logits equal them bit for bit
 * for the Q8_0 models (each token's layers run the same kernels on the same
 * inputs whatever the micro-batch) and within LOGIT_TOL_F32 for the F32 one
 * (its prompt's products take a tiled path whose sums depend on how many rows
 * a micro-batch has; measured 1.0e-6); the number of transfers is the
 * schedule's. Models: stories260K (llama, F32), a tiny qwen3 in Q8_0,
 * a tiny qwen3moe and a tiny qwen35 (Gated DeltaNet layers: their recurrent
 * state must follow the sequences through the micro-batches). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "brisk.h"
#include "engine/tp.h"
#include "model/model.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "ranks.h"
#include "test.h"

#define N_STEPS 24
#define MAX_RANKS 4
#define LOGIT_TOL_F32 1e-5 /* max |a - b| / max |b| over a step's vocabulary */
/* On the GPU a micro-batch of fewer entries may take another product kernel than the whole batch
 * (the int8 tile path from 16 rows on, the decode one below): the rounding of quantized
 * activations then differs as between the CPU and the GPU (tests/test_cuda_ops.c's end-to-end
 * tolerance). */
#define LOGIT_TOL_GPU 5e-2

/* ---- the p2p test double: a FIFO of messages per (sender, receiver) ----
 * A message is a copy of the sent floats in one of the sender's backend buffers (a ring of
 * POOL buffers made at attach, before any thread runs): the double uses only backend ops
 * (alloc, copy, read as a wait), so it can run on CUDA backends too (BRISK_PP_GPU=1: the ranks'
 * CUDA backends on one GPU). That mode aborted on the H200 (2026-12-03: a backend error in the
 * first pass, not yet diagnosed when the device time ran out), so make test-cuda does not run it. */
#define POOL 8
#define POOL_FLOATS ((size_t)1 << 16)
typedef struct msg {
    struct msg *next;
    size_t n;
    float *data; /* sender's backend memory */
} msg;

static struct {
    int n_ranks;
    bk_backend *be[MAX_RANKS];
    msg *head[MAX_RANKS][MAX_RANKS], *tail[MAX_RANKS][MAX_RANKS];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bk_backend_ops ops; /* the CPU backend's, plus p2p */
    void *pool[MAX_RANKS][POOL];
    int pool_next[MAX_RANKS];
    long n_sends;
    bool failed;
    /* rank 0's sampled token, for the other ranks' next batch */
    pthread_barrier_t bar;
    int token;
} G;

static int rank_of(bk_backend *be) {
    for (int r = 0; r < G.n_ranks; r++)
        if (G.be[r] == be) return r;
    return -1;
}

static brisk_status test_p2p(bk_backend *be, const bk_p2p *list, int n) {
    int me = rank_of(be);
    if (me < 0) return BRISK_ERR_INVALID_ARG;
    float sink;
    for (int i = 0; i < n; i++) /* the sends first: they never wait */
        if (list[i].send) {
            msg *m = malloc(sizeof *m);
            if (!m || list[i].n > POOL_FLOATS) {
                fprintf(stderr, "  rank %d: a send of %zu floats (pool slots hold %zu)\n", me, list[i].n, POOL_FLOATS);
                abort();
            }
            m->next = NULL;
            m->n = list[i].n;
            m->data = G.pool[me][G.pool_next[me]++ % POOL];
            be->ops->copy(be, m->data, list[i].buf, list[i].n * sizeof(float));
            if (be->ops->read(be, m->data, &sink, sizeof sink) != BRISK_OK) { /* waits for the copy */
                fprintf(stderr, "  rank %d: send: %s\n", me, brisk_last_error());
                abort();
            }
            pthread_mutex_lock(&G.mu);
            int p = list[i].peer;
            if (G.tail[me][p]) G.tail[me][p]->next = m;
            else G.head[me][p] = m;
            G.tail[me][p] = m;
            G.n_sends++;
            pthread_cond_broadcast(&G.cv);
            pthread_mutex_unlock(&G.mu);
        }
    for (int i = 0; i < n; i++) {
        if (list[i].send) continue;
        int p = list[i].peer;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 20; /* a schedule that deadlocks fails here instead of hanging the suite */
        pthread_mutex_lock(&G.mu);
        int rc = 0;
        while (!G.head[p][me] && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&G.cv, &G.mu, &until);
        msg *m = G.head[p][me];
        if (m && !(G.head[p][me] = m->next)) G.tail[p][me] = NULL;
        pthread_mutex_unlock(&G.mu);
        if (!m || m->n != list[i].n) {
            fprintf(stderr, "  rank %d: receive from %d: %s (%zu floats, %zu expected)\n", me, p,
                    m ? "wrong size" : "nothing came", m ? m->n : 0, list[i].n);
            G.failed = true;
            free(m);
            abort(); /* the other ranks wait on this one: no way to fail softly */
        }
        be->ops->copy(be, list[i].buf, m->data, m->n * sizeof(float)); /* one address space: CPU, or one GPU */
        if (be->ops->read(be, list[i].buf, &sink, sizeof sink) != BRISK_OK) { /* before the slot is reused */
            fprintf(stderr, "  rank %d: receive: %s\n", me, brisk_last_error());
            abort();
        }
        free(m);
    }
    return BRISK_OK;
}

static brisk_status attach(void *user, bk_backend *be, int rank) {
    (void)user;
    if (!G.ops.name) {
        G.ops = *be->ops;
        G.ops.p2p = test_p2p;
    }
    G.be[rank] = be;
    be->ops = &G.ops;
    for (int i = 0; i < POOL; i++)
        if (be->ops->alloc(be, POOL_FLOATS * sizeof(float), &G.pool[rank][i]) != BRISK_OK) return BRISK_ERR_NOMEM;
    return BRISK_OK;
}

/* ---- the batches ---- */
typedef struct rank_run {
    brisk_context *c;
    int rank, n_ranks; /* n_ranks 0: the unsplit model */
    int n_vocab;
    int tokens[N_STEPS];
    float *logits; /* (N_STEPS + 1, n_vocab): the prompt's last logits of sequence 1, then sequence 0's */
    brisk_status s;
} rank_run;

static void *run_batches(void *arg) {
    rank_run *r = arg;
    static const int32_t p0[] = {1, 40, 61, 79, 63}, p1[] = {1, 52, 33};
    bool leader = r->rank == 0, sync = r->n_ranks > 1;
    brisk_batch_entry e[8];
    for (int i = 0; i < 5; i++) e[i] = (brisk_batch_entry){.token = p0[i], .pos = i, .seq = 0, .logits = i == 4};
    for (int i = 0; i < 3; i++) e[5 + i] = (brisk_batch_entry){.token = p1[i], .pos = i, .seq = 1, .logits = i == 2};
    r->s = brisk_decode(r->c, e, 8);
    int last = 4, pos0 = 5, pos1 = 3;
    if (leader && r->s == BRISK_OK)
        memcpy(r->logits, brisk_get_logits(r->c, 7), (size_t)r->n_vocab * sizeof(float));
    for (int t = 0; t < N_STEPS; t++) {
        if (leader && r->s == BRISK_OK) {
            const float *lg = brisk_get_logits(r->c, last);
            memcpy(r->logits + (size_t)(t + 1) * r->n_vocab, lg, (size_t)r->n_vocab * sizeof(float));
            G.token = r->tokens[t] = ranks_argmax(lg, r->n_vocab);
        }
        if (sync) pthread_barrier_wait(&G.bar);
        int tok = sync ? G.token : r->tokens[t], n = 1;
        if (r->s != BRISK_OK) break; /* (after the barrier: no rank is left waiting on it) */
        e[0] = (brisk_batch_entry){.token = tok, .pos = pos0++, .seq = 0, .logits = true};
        if (t % 4 == 3) e[n++] = (brisk_batch_entry){.token = tok, .pos = pos1++, .seq = 1, .logits = false};
        r->s = brisk_decode(r->c, e, n);
        last = 0;
    }
    return NULL;
}

static bool on_gpu(void) { return getenv("BRISK_PP_GPU") && !strcmp(getenv("BRISK_PP_GPU"), "1"); }

static brisk_model *load(const char *path, int rank, int n_ranks) {
    brisk_model_params mp = brisk_model_default_params();
    mp.n_gpu_layers = on_gpu() ? -1 : 0;
    mp.pp_rank = rank;
    mp.pp_size = n_ranks;
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(path, &mp, &m));
    return m;
}

/* Transfers of one forward pass of n entries over N ranks: each of the M micro-batches is sent
 * once by every rank. */
static long sends_of(int n, int n_ranks) { return (long)(n < n_ranks ? n : n_ranks) * n_ranks; }

static void check_model(const char *path, int n_ranks, double tol) {
    brisk_model *ref_m = load(path, 0, 0);
    if (!ref_m) return;
    int n_layer = ref_m->hp.n_layer;
    if (n_layer < n_ranks) {
        brisk_model_free(ref_m);
        return;
    }
    rank_run ref = {.c = ranks_new_ctx(ref_m, 2), .n_vocab = brisk_n_vocab(ref_m)};
    ref.logits = malloc((size_t)(N_STEPS + 1) * ref.n_vocab * sizeof(float));
    if (ref.c) run_batches(&ref);
    CHECK_OK(ref.s);

    tp_link *link = NULL;
    CHECK_OK(tp_link_local(attach, NULL, &link));
    memset(&G, 0, sizeof G);
    G.n_ranks = n_ranks;
    pthread_mutex_init(&G.mu, NULL);
    pthread_cond_init(&G.cv, NULL);
    pthread_barrier_init(&G.bar, NULL, (unsigned)n_ranks);
    brisk_model *m[MAX_RANKS] = {0};
    rank_run run[MAX_RANKS];
    pthread_t th[MAX_RANKS];
    bool ok = true;
    int covered = 0;
    for (int r = 0; r < n_ranks; r++) {
        m[r] = load(path, r, n_ranks);
        if (!m[r]) {
            ok = false;
            break;
        }
        m[r]->tp = link; /* the model does not own it (no tp_free) */
        CHECK(m[r]->pp_l0 == covered && m[r]->pp_l1 > m[r]->pp_l0);
        covered = m[r]->pp_l1;
        run[r] = (rank_run){.c = ranks_new_ctx(m[r], 2), .rank = r, .n_ranks = n_ranks, .n_vocab = ref.n_vocab};
        run[r].logits = malloc((size_t)(N_STEPS + 1) * ref.n_vocab * sizeof(float));
        ok &= run[r].c != NULL;
    }
    if (ok) {
        CHECK(covered == n_layer);
        for (int r = 0; r < n_ranks; r++) pthread_create(&th[r], NULL, run_batches, &run[r]);
        for (int r = 0; r < n_ranks; r++) pthread_join(th[r], NULL);
        for (int r = 0; r < n_ranks; r++) CHECK_OK(run[r].s);
        CHECK(!memcmp(run[0].tokens, ref.tokens, sizeof ref.tokens));
        double worst = ranks_logit_diff(run[0].logits, ref.logits, N_STEPS + 1, ref.n_vocab);
        CHECK(worst <= (on_gpu() ? LOGIT_TOL_GPU : tol));
        long want = sends_of(8, n_ranks);
        for (int t = 0; t < N_STEPS; t++) want += sends_of(t % 4 == 3 ? 2 : 1, n_ranks);
        CHECK(G.n_sends == want);
        printf("  %s, %d ranks (rank 0: layers 0-%d of %d): %d greedy tokens equal, logits within %.1e, "
               "%ld transfers\n",
               strrchr(path, '/') ? strrchr(path, '/') + 1 : path, n_ranks, m[0]->pp_l1 - 1, n_layer, N_STEPS,
               worst, G.n_sends);
    }
    for (int r = 0; r < n_ranks; r++)
        for (int i = 0; G.be[r] && i < POOL; i++)
            if (G.pool[r][i]) G.be[r]->ops->release(G.be[r], G.pool[r][i]);
    for (int r = 0; r < n_ranks; r++) {
        if (!m[r]) break;
        brisk_context_free(run[r].c);
        free(run[r].logits);
        brisk_model_free(m[r]);
    }
    for (int a = 0; a < MAX_RANKS; a++) /* a failed run may leave messages */
        for (int b = 0; b < MAX_RANKS; b++)
            for (msg *x = G.head[a][b], *nx; x; x = nx) nx = x->next, free(x); /* (data: the pool's) */
    pthread_barrier_destroy(&G.bar);
    pthread_cond_destroy(&G.cv);
    pthread_mutex_destroy(&G.mu);
    tp_link_free(link);
    brisk_context_free(ref.c);
    free(ref.logits);
    brisk_model_free(ref_m);
}

static void test_stories(void) {
    char p[1024];
    if (!ranks_stories(p)) return;
    for (int n = 2; n <= 4; n++) check_model(p, n, LOGIT_TOL_F32);
}

/* A tiny synthesized model of preset in matrix type `type`, written to a temporary file. */
static void check_synth(const char *preset, uint32_t type) {
    char p[256];
    synth_config c;
    CHECK_OK(synth_preset(preset, &c));
    c.type = type;
    c.seed = 11;
    CHECK_OK(ranks_write_model(&c, "pp", preset, p));
    for (int n = 2; n <= 4; n++) check_model(p, n, 0.0); /* bit for bit */
    unlink(p);
}

static void test_qwen3(void) { check_synth("tiny-qwen3", QT_Q8_0); }
static void test_qwen3moe(void) { check_synth("tiny-qwen3moe", QT_Q8_0); }
static void test_qwen35(void) { check_synth("tiny-qwen35", QT_Q8_0); }

static void test_errors(void) {
    if (on_gpu()) return; /* the CPU's refusals */
    char p[1024];
    snprintf(p, sizeof p, "%s/data/stories260K/stories260K.gguf", test_shared_dir());
    if (!test_need_file(p)) return;
    brisk_model_params mp = brisk_model_default_params();
    mp.n_gpu_layers = 0;
    brisk_model *m = NULL;
    mp.pp_size = 1000; /* more ranks than layers */
    CHECK(brisk_model_load(p, &mp, &m) == BRISK_ERR_INVALID_ARG && !m);
    mp.pp_size = 2;
    mp.pp_rank = 2;
    CHECK(brisk_model_load(p, &mp, &m) == BRISK_ERR_INVALID_ARG && !m);
    mp.pp_rank = 0;
    mp.tp_size = 2; /* not both, yet */
    CHECK(brisk_model_load(p, &mp, &m) == BRISK_ERR_UNSUPPORTED && !m);
    mp.tp_size = 0;
    /* a pipeline rank without a link's p2p cannot make a context on the CPU, and says why */
    mp.pp_rank = 1;
    CHECK_OK(brisk_model_load(p, &mp, &m));
    brisk_context *c = NULL;
    if (m) {
        CHECK(brisk_context_new(m, NULL, &c) == BRISK_ERR_UNSUPPORTED && !c);
        CHECK(strstr(brisk_last_error(), "CUDA") != NULL);
    }
    brisk_model_free(m);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* a rank's abort must not swallow what the others printed */
    static const test_case cases[] = {{"stories", test_stories}, {"qwen3", test_qwen3}, {"qwen3moe", test_qwen3moe},
                                      {"qwen35", test_qwen35},   {"errors", test_errors}};
    return test_main(cases, 5, argc, argv);
}
