/* cmd_bench.c — `brisk bench`: prompt processing and generation speed, as
 * mean ± sd over repetitions, with the bandwidth achieved and its share of
 * the machine's measured memory bandwidth (llama-bench's method: one warm-up,
 * then -r runs, each from the same -d tokens of cache, filled once). The bytes
 * are those each token really reads (brisk_decode_bytes): weights, a MoE's
 * routed experts, KV history of the layers that keep one, recurrent state. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "brisk.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "engine/speculative.h"

typedef struct {
    const uint64_t *buf;
    size_t n;
    uint64_t sum;
} bw_arg;

/* Streams a slice through eight independent xor chains: the loop runs at
 * the loads' rate (two a cycle), not at a dependent float add chain's as the
 * scalar double sum it replaces did, so a core asks for lines as fast as the
 * memory gives them. */
static void *bw_read(void *p) {
    bw_arg *a = p;
    const uint64_t *b = a->buf;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    for (size_t i = 0; i + 8 <= a->n; i += 8) {
        s0 ^= b[i], s1 ^= b[i + 1], s2 ^= b[i + 2], s3 ^= b[i + 3];
        s4 ^= b[i + 4], s5 ^= b[i + 5], s6 ^= b[i + 6], s7 ^= b[i + 7];
    }
    a->sum = s0 ^ s1 ^ s2 ^ s3 ^ s4 ^ s5 ^ s6 ^ s7;
    return NULL;
}

/* Measured read bandwidth in GB/s: the best of 5 passes in which n_threads
 * threads each stream a slice of a 1 GiB buffer (touched first, so no pass
 * counts page faults). */
static double measure_bandwidth_here(int n_threads) {
    size_t bytes = (size_t)1 << 30, n = bytes / sizeof(uint64_t);
    /* mapped, not malloc'd: munmap gives the pages back at once (a sanitizer's allocator would keep
     * a freed block in its quarantine) */
    uint64_t *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) return 0;
    for (size_t i = 0; i < n; i++) buf[i] = i;
    double best = 0;
    pthread_t th[256];
    bw_arg args[256];
    if (n_threads > 256) n_threads = 256;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = cli_now();
        for (int t = 0; t < n_threads; t++) {
            args[t] = (bw_arg){buf + n / n_threads * t, n / n_threads, 0};
            pthread_create(&th[t], NULL, bw_read, &args[t]);
        }
        for (int t = 0; t < n_threads; t++) pthread_join(th[t], NULL);
        double gbs = bytes / (cli_now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    munmap(buf, bytes);
    return best;
}

/* The measurement in this process, then the peak RSS reset (cli_peak_rss_reset) so that its buffer
 * never counts in the run's peak. (It ran in a forked child before: a fork of a process that has
 * threads can leave the child on a lock another thread held; under ASan the child's allocator lock
 * hung t_pull.sh's bench in a CI-like run.) */
static double measure_bandwidth(int n_threads) {
    double v = measure_bandwidth_here(n_threads);
    cli_peak_rss_reset();
    return v;
}

static void stats(const double *x, int n, double *mean, double *sd) {
    double s = 0, ss = 0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) ss += (x[i] - *mean) * (x[i] - *mean);
    *sd = n > 1 ? sqrt(ss / (n - 1)) : 0;
}

static uint64_t rng_state = 88172645463325252ull;
static int rand_token(int n_vocab) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (int)(rng_state % (uint64_t)n_vocab);
}

/* Fills sequences [0, n_seq) with `depth` tokens each, untimed (llama-bench's -d), once for the
 * whole bench: at depth 131072 a fill takes minutes, so the runs cut their sequences back to it
 * (cut_back) instead of filling again; a recurrent model's state is restored from the checkpoint
 * taken here (the context keeps one per sequence). */
static int fill_depth(brisk_context *ctx, int n_vocab, int depth, int n_seq, int n_batch, brisk_batch_entry *batch,
                      bool blank) {
    for (int s = 0; s < n_seq; s++) {
        if (brisk_seq_clear(ctx, s) != BRISK_OK) return -1;
        if (blank && brisk_seq_extend_blank(ctx, s, depth) != BRISK_OK) return -1;
        for (int p0 = 0; !blank && p0 < depth; p0 += n_batch) {
            int nb = depth - p0 < n_batch ? depth - p0 : n_batch;
            for (int i = 0; i < nb; i++) batch[i] = (brisk_batch_entry){rand_token(n_vocab), p0 + i, s, false};
            if (brisk_decode(ctx, batch, nb) != BRISK_OK) return -1;
        }
        if (brisk_seq_checkpoint(ctx, s) != BRISK_OK) return -1;
    }
    return 0;
}

/* Sequences [0, n_seq) back to their first `depth` tokens (depth 0: cleared). */
static int cut_back(brisk_context *ctx, int depth, int n_seq) {
    for (int s = 0; s < n_seq; s++)
        if (brisk_seq_remove(ctx, s, depth, -1) != BRISK_OK) return -1;
    return 0;
}

/* One run after `depth` cached tokens (fill_depth's): pp tokens as one batch, or tg steps of one
 * token for each of n_seq sequences; afterwards, untimed, the sequences are cut back to depth.
 * Returns tokens/s (all sequences) or -1. */
static double run_once(brisk_context *ctx, int n_vocab, int n_prompt, int n_gen, int depth, int n_seq,
                       brisk_batch_entry *batch) {
    double t0 = cli_now(), tps;
    if (n_prompt > 0) {
        for (int i = 0; i < n_prompt; i++)
            batch[i] = (brisk_batch_entry){rand_token(n_vocab), depth + i, 0, i == n_prompt - 1};
        if (brisk_decode(ctx, batch, n_prompt) != BRISK_OK) return -1;
        tps = n_prompt / (cli_now() - t0);
    } else {
        for (int i = 0; i < n_gen; i++) {
            for (int s = 0; s < n_seq; s++) batch[s] = (brisk_batch_entry){rand_token(n_vocab), depth + i, s, true};
            if (brisk_decode(ctx, batch, n_seq) != BRISK_OK) return -1;
        }
        tps = (double)n_gen * n_seq / (cli_now() - t0);
    }
    return cut_back(ctx, depth, n_prompt > 0 ? 1 : n_seq) < 0 ? -1 : tps;
}

/* Bytes a run reads per token (brisk_decode_bytes): pp, the weights once for the batch (a MoE's
 * experts as many as its tokens route to; the cached history as attention reads it is not
 * counted); tg, every step's weights, KV history at that step's depth and recurrent state,
 * over the n_seq tokens of the step. experts: measured distinct experts per layer and step, or 0.
 * 0 on failure. */
static double bytes_per_token(const brisk_model *m, const brisk_context_params *cp, int n_prompt, int n_gen, int depth,
                              int n_seq, double experts) {
    brisk_step_bytes b;
    brisk_kv_type kv = cp->kv_type;
    if (n_prompt > 0)
        return brisk_decode_bytes(m, kv, depth, n_prompt, experts, &b) == BRISK_OK ? (double)b.weights / n_prompt : 0;
    double sum = 0;
    for (int i = 0; i < n_gen; i++) { /* --attn-sparse: the pages read, not the whole history */
        if (brisk_decode_bytes_sparse(m, kv, (int64_t)depth + i, n_seq, experts, cp->attn_sparse_k,
                                      cp->kv_block_size > 0 ? cp->kv_block_size : 16, &b) != BRISK_OK)
            return 0;
        sum += (double)b.total;
    }
    return sum / ((double)n_gen * n_seq);
}

/* Mean distinct experts per MoE layer and pass since the reading (*reads, *passes) was taken, which
 * it then renews; 0 when the context does not count them (a GPU, a dense model). */
static double experts_since(const brisk_context *ctx, int64_t *reads, int64_t *passes) {
    int64_t r, p;
    if (brisk_context_expert_reads(ctx, &r, &p) != BRISK_OK) return 0;
    double mean = p > *passes ? (double)(r - *reads) / (double)(p - *passes) : 0;
    *reads = r, *passes = p;
    return mean;
}

/* --spec-replay: greedy generation of n_gen tokens after a prompt of random tokens, once plainly
 * (which records the target's own tokens) and then -r times with a replay drafter that proposes
 * k tokens a round, the first n_match of them the target's (so each round accepts n_match + 1
 * tokens unless batch rounding moves an argmax); then what one verify step of k = 1..16 tokens
 * costs against a one-token step, at the prompt's depth. */
typedef struct replay_emit {
    brisk_token *out; /* (n_max) the tokens emitted, or NULL */
    int n, n_max;
} replay_emit;

static bool replay_emit_token(void *user, brisk_token t) {
    replay_emit *e = user;
    if (e->n >= e->n_max) return false;
    if (e->out) e->out[e->n] = t;
    e->n++;
    return true;
}

#define REPLAY_PROMPT 32
#define VERIFY_MAX 16

/* One greedy run through spec_generate on a cleared sequence 0; seconds, or -1. */
static double replay_once(brisk_context *ctx, drafter *dr, int n_vocab, const brisk_token *prompt, int n_gen,
                          int k, int n_ctx, brisk_token *out, spec_stats *st) {
    brisk_sampler_params sp = brisk_sampler_default_params();
    sp.temp = 0;
    brisk_sampler *smp = NULL;
    if (brisk_seq_clear(ctx, 0) != BRISK_OK || brisk_sampler_new(&sp, n_vocab, &smp) != BRISK_OK) return -1;
    replay_emit e = {out, 0, n_gen};
    double t0 = cli_now();
    brisk_status s = spec_generate(ctx, dr, smp, prompt, REPLAY_PROMPT, k, 0, n_ctx, replay_emit_token, &e, st);
    double t = cli_now() - t0;
    brisk_sampler_free(smp);
    return s == BRISK_OK && e.n == n_gen ? t : -1;
}

/* Times reps speculative runs of drafter dr (st: the last run's counts) and prints them beside the
 * plain decode's t_plain seconds as the table's two rows; false if a run failed. */
static bool spec_rows(brisk_context *ctx, drafter *dr, int n_vocab, const brisk_token *ref, int n_gen, int k, int n_ctx,
                      int reps, double *t, double t_plain, const char *name, spec_stats *st) {
    for (int r = 0; r < reps; r++)
        if ((t[r] = replay_once(ctx, dr, n_vocab, ref, n_gen, k, n_ctx, NULL, st)) < 0) return false;
    for (int r = 0; r < reps; r++) t[r] = n_gen / t[r];
    double mean, sd;
    stats(t, reps, &mean, &sd);
    printf("| %-22s | %18s | %12s | %8s |\n", "test", "tokens/s", "tokens/step", "speedup");
    printf("|------------------------|--------------------|--------------|----------|\n");
    printf("| %-22s | %18.2f | %12.2f | %8s |\n", "tg plain", n_gen / t_plain, 1.0, "1.00");
    printf("| %-22s | %9.2f ± %6.2f | %12.2f | %8.2f |\n", name, mean, sd,
           st->rounds ? (double)(st->emitted - 1) / st->rounds : 0.0, mean * t_plain / n_gen);
    return true;
}


static int bench_spec_replay(brisk_context *ctx, int n_vocab, int n_gen, int reps, int k, double rate, int n_ctx,
                             brisk_batch_entry *batch) {
    int rc = 1, n_match = (int)(rate * k + 0.5);
    brisk_token *ref = malloc((size_t)(REPLAY_PROMPT + n_gen) * sizeof *ref);
    double *t = calloc((size_t)reps, sizeof *t);
    drafter *none = NULL, *dr = NULL;
    spec_stats st;
    if (!ref || !t) goto done;
    for (int i = 0; i < REPLAY_PROMPT; i++) ref[i] = rand_token(n_vocab);
    /* the plain run: a drafter asked for 0 tokens proposes none; it records the reference */
    if (drafter_new_lookup(1, 1, &none) != BRISK_OK) goto done;
    double t_plain = replay_once(ctx, none, n_vocab, ref, n_gen, 0, n_ctx, ref + REPLAY_PROMPT, &st);
    if (t_plain < 0 || (t_plain = replay_once(ctx, none, n_vocab, ref, n_gen, 0, n_ctx, NULL, &st)) < 0) goto done;
    if (drafter_new_replay(ref, REPLAY_PROMPT + n_gen, n_match, n_vocab, &dr) != BRISK_OK) goto done;
    if (replay_once(ctx, dr, n_vocab, ref, n_gen, k, n_ctx, NULL, &st) < 0) goto done; /* warm-up */
    char name[48];
    snprintf(name, sizeof name, "tg replay k%d match %d", k, n_match);
    if (!spec_rows(ctx, dr, n_vocab, ref, n_gen, k, n_ctx, reps, t, t_plain, name, &st)) goto done;
    printf("replay: %lld rounds, %lld proposed, %lld accepted (%.1f%%; %d of %d a round intended)\n",
           (long long)st.rounds, (long long)st.drafted, (long long)st.accepted,
           st.drafted ? 100.0 * st.accepted / st.drafted : 0.0, n_match, k);
    /* the verify step: 1 + k tokens with logits for each, after the prompt, cut back after each */
    int depth = REPLAY_PROMPT;
    if (brisk_seq_clear(ctx, 0) != BRISK_OK || fill_depth(ctx, n_vocab, depth, 1, n_ctx, batch, false) < 0) goto done;
    printf("| %-10s | %10s | %12s |\n", "verify k", "ms/step", "x one-token");
    printf("|------------|------------|--------------|\n");
    double one = 0;
    for (int kk = 0; kk <= VERIFY_MAX; kk++) {
        double best = 1e30;
        for (int r = 0; r < reps + 1; r++) {
            for (int i = 0; i <= kk; i++) batch[i] = (brisk_batch_entry){rand_token(n_vocab), depth + i, 0, true};
            double t0 = cli_now();
            if (brisk_decode(ctx, batch, kk + 1) != BRISK_OK) goto done;
            double dt = cli_now() - t0;
            if (r > 0 && dt < best) best = dt; /* the first is a warm-up */
            if (cut_back(ctx, depth, 1) < 0) goto done;
        }
        if (kk == 0) one = best;
        printf("| %-10d | %10.3f | %12.2f |\n", kk, best * 1e3, best / one);
    }
    rc = 0;
done:
    if (rc) cli_error(1, "bench: %s", brisk_last_error());
    drafter_free(none);
    drafter_free(dr);
    free(ref);
    free(t);
    return rc;
}

/* --spec-mtp K: the model's own MTP head (engine/mtp.h) drafts up to K tokens a round: -n greedy tokens after
 * a prompt of random tokens, plainly and then -r times with MTP speculation (after a warm-up of each); the
 * tokens are checked to be the plain run's, and tokens/s, tokens per target step and the acceptance printed.
 * With eagle3 (--spec-eagle3 K -md FILE) the EAGLE-3 drafter at that path drafts instead. With a rate
 * (K:RATE, rate >= 0) the head still runs every round, but the round proposes what --spec-replay's would
 * (the first RATE*K of them the plain run's tokens): the speed at that acceptance with the head's real
 * cost, on files whose head drafts nothing useful (random weights). */
static int bench_spec_mtp(brisk_model *m, brisk_context *ctx, const brisk_context_params *cp, int n_vocab, int n_gen,
                          int reps, int k, double rate, const char *eagle3) {
    int rc = 1, n_match = rate >= 0 ? (int)(rate * k + 0.5) : -1;
    drafter *rp = NULL;
    brisk_token *ref = malloc((size_t)(REPLAY_PROMPT + n_gen) * sizeof *ref), *out = malloc((size_t)n_gen * sizeof *out);
    double *t = calloc((size_t)reps, sizeof *t);
    drafter *none = NULL, *dr = NULL;
    spec_stats st;
    bool same = true;
    if (!ref || !out || !t) goto done;
    for (int i = 0; i < REPLAY_PROMPT; i++) ref[i] = rand_token(n_vocab);
    if (drafter_new_lookup(1, 1, &none) != BRISK_OK) goto done;
    double t_plain = replay_once(ctx, none, n_vocab, ref, n_gen, 0, cp->n_ctx, ref + REPLAY_PROMPT, &st);
    if (t_plain < 0 || (t_plain = replay_once(ctx, none, n_vocab, ref, n_gen, 0, cp->n_ctx, NULL, &st)) < 0) goto done;
    const char *kind = eagle3 ? "eagle3" : "mtp";
    if ((eagle3 ? drafter_new_eagle3(ctx, m, eagle3, cp->n_ctx, cp->n_threads, 0, NULL, &dr)
                : drafter_new_mtp(ctx, m, cp, 0, &dr)) != BRISK_OK)
        goto done;
    if (n_match >= 0 && (drafter_new_replay(ref, REPLAY_PROMPT + n_gen, n_match, n_vocab, &rp) != BRISK_OK ||
                         drafter_replay_over(rp, dr) != BRISK_OK))
        goto done;
    drafter *use = rp ? rp : dr;
    if (replay_once(ctx, use, n_vocab, ref, n_gen, k, cp->n_ctx, out, &st) < 0) goto done; /* warm-up */
    same = !memcmp(out, ref + REPLAY_PROMPT, (size_t)n_gen * sizeof *out);
    char name[48];
    if (rp) snprintf(name, sizeof name, "tg %s k%d match %d", kind, k, n_match);
    else snprintf(name, sizeof name, "tg %s k%d", kind, k);
    if (!spec_rows(ctx, use, n_vocab, ref, n_gen, k, cp->n_ctx, reps, t, t_plain, name, &st)) goto done;
    printf("%s: %lld rounds, %lld proposed, %lld accepted (%.1f%%); greedy tokens %s plain decoding's\n",
           kind, (long long)st.rounds, (long long)st.drafted, (long long)st.accepted,
           st.drafted ? 100.0 * st.accepted / st.drafted : 0.0, same ? "equal to" : "DIFFER from");
    rc = same ? 0 : 1;
done:
    if (rc) cli_error(1, "bench: %s", same ? brisk_last_error() : "speculation changed the greedy tokens");
    drafter_free(none);
    drafter_free(rp);
    drafter_free(dr);
    free(ref);
    free(out);
    free(t);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    const char *model_path = NULL, *draft_path = NULL;
    int n_prompt = 512, n_gen = 128, n_threads = 0, reps = 5, n_ctx = 0;
    int depth = 0, n_seq = 1, spec_k = 0, mtp_k = 0;
    double spec_rate = 0, mtp_rate = -1;
    bool json = false, blank = false, eagle3 = false, warmup = true;
    cli_model_opts mo = CLI_MODEL_OPTS_DEFAULT;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int g = cli_model_flag(argc, argv, &i, &mo);
        if (g) {
            if (g < 0) return 2;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: brisk bench -m FILE [-p 512] [-n 128] [-d DEPTH] [-np SEQS] [-t N] [-r 5] [-c N] [-ngl N]\n"
                   "                   [--device I] [--n-cpu-moe N | --gpu-mem SIZE] [--no-mmap] [--kv-type T] [--json]\n"
                   "                   [--cache-experts N|auto] [--expert-stats FILE] [--tp N] [--blank-depth]\n"
                   "                   [--no-warmup]\n"
                   "  -d N    run each test after N tokens already in the KV cache (llama-bench's -d)\n"
                   "  --blank-depth  the -d positions as blank (zero) cache rows, not a prefill of random tokens:\n"
                   "          decode reads the same bytes, and a depth of 1M is ready in seconds (outputs are noise)\n"
                   "  --no-warmup  no untimed run before the timed ones (llama-bench's flag): a long prompt's\n"
                   "          time to first token in one prefill instead of two\n"
                   "  -np N   generation decodes N sequences per step (batched decode; tokens/s of all)\n"
                   "  --spec-replay K:RATE  speculative decoding at a fixed acceptance: -n greedy tokens, each\n"
                   "          round proposing K of which the first RATE*K are the model's own; prints tokens/s,\n"
                   "          tokens per target step, and the cost of a verify step of 1+k tokens, k = 0..16\n"
                   "  --spec-mtp K[:RATE]  speculative decoding with the model's own multi-token-prediction head\n"
                   "          (Qwen3.5/3.6 nextn layers, where the trunk runs), K drafts a round: -n greedy tokens\n"
                   "          plainly and with it, tokens/s, tokens per target step and the acceptance rate; with\n"
                   "          RATE the head runs each round but the first RATE*K proposals are the model's own\n"
                   "          tokens, the rest wrong (as --spec-replay): the speed at that acceptance, head included\n"
                   "  --spec-eagle3 K -md, --model-draft FILE  the same with the EAGLE-3 drafter FILE (llama.cpp's\n"
                   "          eagle3 GGUF; it runs where the target does, all on the CPU or all on the GPU)\n"
                   "  -m, --model FILE     GGUF model\n"
                   CLI_MODEL_HELP);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model_path = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--spec-replay")) {
            char *end = NULL;
            if (!(v = cli_next(argc, argv, &i))) return 2;
            spec_k = (int)strtol(v, &end, 10);
            if (spec_k < 1 || spec_k > DRAFTER_MAX_DRAFT || *end != ':' || (spec_rate = strtod(end + 1, &end)) < 0 ||
                spec_rate > 1 || *end)
                return cli_error(2, "bench: --spec-replay K:RATE wants K in [1, %d] and RATE in [0, 1], not '%s'",
                                 DRAFTER_MAX_DRAFT, v);
        } else if (!strcmp(a, "--spec-mtp") || !strcmp(a, "--spec-eagle3")) {
            char *end = NULL;
            if (!(v = cli_next(argc, argv, &i))) return 2;
            mtp_k = (int)strtol(v, &end, 10);
            mtp_rate = -1;
            if (mtp_k < 1 || mtp_k > DRAFTER_MAX_DRAFT || (*end && *end != ':') ||
                (*end == ':' && ((mtp_rate = strtod(end + 1, &end)) < 0 || mtp_rate > 1 || *end)))
                return cli_error(2, "bench: %s K[:RATE] wants K in [1, %d] and RATE in [0, 1], not '%s'", a,
                                 DRAFTER_MAX_DRAFT, v);
            eagle3 = !strcmp(a, "--spec-eagle3");
        } else if (!strcmp(a, "-md") || !strcmp(a, "--model-draft")) {
            if (!(draft_path = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--blank-depth")) {
            blank = true;
        } else if (!strcmp(a, "--no-warmup")) {
            warmup = false;
        } else {
            int *dst = !strcmp(a, "-p") ? &n_prompt : !strcmp(a, "-n") ? &n_gen
                     : !strcmp(a, "-t") ? &n_threads : !strcmp(a, "-r") ? &reps
                     : !strcmp(a, "-c") ? &n_ctx : !strcmp(a, "-d") ? &depth
                     : !strcmp(a, "-np") ? &n_seq : NULL;
            if (!dst) return cli_error(2, "bench: unknown option '%s'", a);
            if (!(v = cli_next(argc, argv, &i)) || !cli_int(a, v, 0, 1 << 20, dst)) return 2;
        }
    }
    if (reps < 1) return cli_error(2, "bench: -r must be at least 1");
    if (eagle3 != (draft_path != NULL)) return cli_error(2, "bench: --spec-eagle3 K goes with -md FILE, and -md with it");
    if (n_seq < 1 || n_seq > 256) return cli_error(2, "bench: -np must be in [1, 256]");
    int hf_rc = cli_model_path(&mo, "bench", &model_path);
    if (hf_rc) return hf_rc;
    if (n_threads <= 0) n_threads = cli_default_threads();
    brisk_model *m = NULL;
    brisk_context *ctx = NULL;
    brisk_batch_entry *batch = NULL;
    int rc = 1;
    brisk_context_params cp = brisk_context_default_params();
    cp.n_threads = n_threads;
    cli_context_opts(&mo, &cp);
    /* the cache is one page pool for all sequences: room for each of them */
    cp.n_ctx = n_ctx > 0 ? n_ctx : (depth + (n_prompt > n_gen ? n_prompt : n_gen) + 16) * n_seq;
    cp.n_seq_max = n_seq;
    cp.n_batch = n_prompt > n_seq ? n_prompt : n_seq;
    if (depth > 0 && cp.n_batch < 512) cp.n_batch = 512;
    /* The GPU's copy bandwidth (the roofline) is measured before the model loads, so that its two
     * 1 GiB buffers never add to the run's peak memory (compared with llama.cpp's in RESULTS.md). */
    double gpu_bw = mo.n_gpu_layers != 0 ? brisk_gpu_bandwidth(mo.device) : 0.0;
    /* a recurrent model's runs go back to the depth through one checkpoint a sequence (fill_depth;
     * a copy of the state each: none needed to go back to 0, which is a clear) */
    cp.n_seq_checkpoints = depth > 0 || spec_k || mtp_k ? 2 : 0;
    cp.keep_recurrent_inputs = spec_k || mtp_k; /* a plain run at depth pays no rollback's copies */
    if (spec_k || mtp_k) { /* the prompt, the generation and one round's proposals; the verify table's batches */
        cp.n_ctx = n_ctx > 0 ? n_ctx : REPLAY_PROMPT + n_gen + DRAFTER_MAX_DRAFT + 16;
        cp.n_seq_max = 1;
        cp.n_batch = 512;
    }
    if (!cli_load_model(model_path, &mo, &cp, &m)) goto done;
    brisk_model_info info;
    brisk_model_get_info(m, &info);
    /* A MoE on the CPU counts the distinct experts each step routes to, the expert weights it reads
     * (a copy of a few ids a layer); on a GPU brisk_decode_bytes's bound stands in for them. */
    cp.collect_expert_stats = info.n_expert > 0 && info.gpu_device < 0;
    if (!cli_new_context(m, &cp, &ctx)) goto done;
    batch = malloc((size_t)(cp.n_batch > 1 ? cp.n_batch : 1) * sizeof *batch);
    if (!batch) goto done;
    int n_vocab = brisk_n_vocab(m);
    /* the roofline is the memory the weights are read from */
    double bw = info.gpu_device < 0 ? measure_bandwidth(cli_default_threads())
                : info.gpu_device == mo.device && gpu_bw > 0 ? gpu_bw : brisk_gpu_bandwidth(info.gpu_device);
    if (spec_k || mtp_k) {
        printf("model: %s (%s), %.2f GiB; threads %d\n", model_path, info.arch, info.weight_bytes / 1073741824.0,
               n_threads);
        if (n_gen <= 0) rc = cli_error(2, "bench: %s needs -n > 0", spec_k ? "--spec-replay" : eagle3 ? "--spec-eagle3" : "--spec-mtp");
        else if (spec_k) rc = bench_spec_replay(ctx, n_vocab, n_gen, reps, spec_k, spec_rate, cp.n_ctx, batch);
        else rc = bench_spec_mtp(m, ctx, &cp, n_vocab, n_gen, reps, mtp_k, mtp_rate, draft_path);
        goto done;
    }
    double *tps = calloc((size_t)reps, sizeof *tps);
    if (!tps) goto done;
    double t_fill = cli_now();
    if (fill_depth(ctx, n_vocab, depth, n_gen > 0 ? n_seq : 1, cp.n_batch, batch, blank) < 0) { /* pp: sequence 0 */
        cli_error(1, "%s", brisk_last_error());
        goto done_tps;
    }
    if (depth > 0 && !json)
        fprintf(stderr, "depth %d %s once for %d sequence%s in %.2f s\n", depth, blank ? "set blank (no prefill)" : "filled",
                n_gen > 0 ? n_seq : 1, n_gen > 0 && n_seq > 1 ? "s" : "", cli_now() - t_fill);
    if (!json) {
        if (info.gpu_device >= 0)
            printf("model: %s (%s), %.2f GiB, %.2f B params; CUDA device %d; copy bandwidth %.0f GB/s (measured)\n",
                   model_path, info.arch, info.weight_bytes / 1073741824.0, info.n_params / 1e9, info.gpu_device, bw);
        else
            printf("model: %s (%s), %.2f GiB, %.2f B params; threads %d; memory bandwidth %.1f GB/s (measured)\n",
                   model_path, info.arch, info.weight_bytes / 1073741824.0, info.n_params / 1e9, n_threads, bw);
        printf("| %-14s | %18s | %8s | %7s |\n", "test", "tokens/s", "GB/s", "% of bw");
        printf("|----------------|--------------------|----------|---------|\n");
    }
    for (int kind = 0; kind < 2; kind++) {
        int np = kind == 0 ? n_prompt : 0, ng = kind == 0 ? 0 : n_gen;
        if ((kind == 0 && np == 0) || (kind == 1 && ng == 0)) continue;
        if (warmup && run_once(ctx, n_vocab, np, ng, depth, n_seq, batch) < 0) { /* warm-up */
            cli_error(1, "%s", brisk_last_error());
            goto done_tps;
        }
        int64_t reads = 0, passes = 0;
        experts_since(ctx, &reads, &passes);
        for (int r = 0; r < reps; r++)
            if ((tps[r] = run_once(ctx, n_vocab, np, ng, depth, n_seq, batch)) < 0) {
                cli_error(1, "%s", brisk_last_error());
                goto done_tps;
            }
        double mean, sd;
        stats(tps, reps, &mean, &sd);
        double per_tok = bytes_per_token(m, &cp, np, ng, depth, n_seq, experts_since(ctx, &reads, &passes));
        double gbs = per_tok * mean / 1e9;
        char name[48];
        int nl = snprintf(name, sizeof name, "%s%d", kind == 0 ? "pp" : "tg", kind == 0 ? np : ng);
        if (depth > 0) nl += snprintf(name + nl, sizeof name - (size_t)nl, "@d%d%s", depth, blank ? "b" : "");
        if (kind == 1 && n_seq > 1) snprintf(name + nl, sizeof name - (size_t)nl, "x%d", n_seq);
        brisk_memory_report mr;
        brisk_context_memory(ctx, &mr);
        if (json)
            printf("{\"test\":\"%s\",\"t\":%d,\"tps_mean\":%.3f,\"tps_sd\":%.3f,\"gbs\":%.2f,\"bw\":%.2f,"
                   "\"peak_rss_mb\":%.1f,\"repacked_mb\":%.1f}\n",
                   name, n_threads, mean, sd, gbs, bw, cli_peak_rss_mb(), mr.host_copy_bytes / 1048576.0);
        else
            printf("| %-14s | %9.2f ± %6.2f | %8.2f | %6.1f%% |\n", name, mean, sd, gbs, 100 * gbs / bw);
    }
    if (!json) {
        brisk_memory_report mr;
        brisk_context_memory(ctx, &mr);
        printf("peak RSS: %.1f MiB", cli_peak_rss_mb());
        if (mr.host_copy_bytes) printf(" (repacked weight copies: %.1f MiB)", mr.host_copy_bytes / 1048576.0);
        printf("\n");
    }
    cli_report_expert_cache(m, ctx);
    rc = 0;
done_tps:
    free(tps);
done:
    cli_free_expert_stats(&cp);
    free(batch);
    brisk_context_free(ctx);
    brisk_model_free(m);
    return rc;
}
