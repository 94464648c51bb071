/* cmd_perplexity.c — `brisk perplexity -m FILE -f TEXT [-c 512]`, llama.cpp's
 * method: the text is tokenized as llama-perplexity does (BOS first when the
 * model adds one, special tokens not parsed), cut into chunks of n_ctx tokens
 * (the first of each replaced by BOS when the model adds one), and each chunk
 * scores the tokens of its second half. So both programs score the same tokens
 * of a text. Prints the running estimate per chunk, then the final value.
 *
 * llama-perplexity's KL-divergence mode, for what a quantization (of the
 * weights or of the KV cache) costs: --kl-divergence-base FILE saves the
 * scored positions' log-probabilities (cli/kld.h's file, llama-perplexity's
 * own); then --kl-divergence --kl-divergence-base FILE runs the chunks that
 * file holds (its tokens, its n_ctx; no -f) and compares, position by
 * position: mean KL divergence from the base, the perplexity ratio, how often
 * the top token is the same. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/progress.h"
#include "brisk.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "cli/kld.h"

/* Decodes chunk ct (n_ctx tokens, the first replaced by BOS when the model adds one) as one
 * sequence from a cleared cache, with logits for positions [n_ctx / 2, n_ctx - 1). */
static bool eval_chunk(brisk_context *ctx, const brisk_model *m, const brisk_token *ct, int n_ctx,
                       brisk_batch_entry *batch) {
    const int first = n_ctx / 2;
    const bool bos = brisk_add_bos(m) && brisk_token_bos(m) >= 0;
    brisk_seq_clear(ctx, 0);
    for (int i = 0; i < n_ctx; i++)
        batch[i] = (brisk_batch_entry){i == 0 && bos ? brisk_token_bos(m) : ct[i], i, 0, i >= first && i < n_ctx - 1};
    if (brisk_decode(ctx, batch, n_ctx) != BRISK_OK) return cli_error(1, "%s", brisk_last_error()), false;
    return true;
}

int cmd_perplexity(int argc, char **argv) {
    cli_text_opts to = CLI_TEXT_OPTS_DEFAULT;
    cli_model_opts mo = CLI_MODEL_OPTS_DEFAULT;
    const char *base_path = NULL;
    bool kl = false, measure = false;
    for (int i = 1; i < argc; i++) {
        int g = cli_model_flag(argc, argv, &i, &mo);
        if (!g) g = cli_text_flag(argc, argv, &i, &to);
        if (g) {
            if (g < 0) return 2;
            continue;
        }
        if (!strcmp(argv[i], "--kl-divergence-base")) {
            if (!(base_path = cli_next(argc, argv, &i))) return 2;
            continue;
        }
        if (!strcmp(argv[i], "--kl-divergence")) {
            kl = true;
            continue;
        }
        if (!strcmp(argv[i], "--attn-sparse-measure")) {
            measure = true;
            continue;
        }
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: brisk perplexity -m FILE -f TEXT [-c 512] [-t N] [--chunks N] [--kv-type f16|q8_0|q4_0|q4_0h|f32] [-ngl N] [--device I]\n"
                   "                        [--n-cpu-moe N | --gpu-mem SIZE] [--no-mmap]\n"
                   "  --kl-divergence-base FILE   also save the scored positions' log-probabilities to FILE\n"
                   "                              (llama-perplexity's format; FILE is replaced whole when the run ends)\n"
                   "  --kl-divergence             with --kl-divergence-base FILE: run FILE's chunks (its tokens and -c;\n"
                   "                              no -f) and report KL divergence from it, PPL ratio and same top token\n"
                   "  --attn-sparse-measure       with --attn-sparse K: also run dense attention to report the recall of\n"
                   "                              the true top-K pages by attention mass and the mass the pages read hold\n"
                   CLI_TEXT_HELP CLI_MODEL_HELP);
            return 0;
        }
        return cli_error(2, "perplexity: unknown option '%s'", argv[i]);
    }
    if (measure && !mo.attn_sparse)
        return cli_error(2, "perplexity: --attn-sparse-measure needs --attn-sparse K");
    if (kl && !base_path)
        return cli_error(2, "perplexity: --kl-divergence needs --kl-divergence-base FILE (a base run's logits)");
    const char *model_path = to.model_path, *text_path = to.text_path;
    int n_ctx = to.n_ctx, n_threads = to.n_threads, n_chunks_max = to.n_chunks_max;
    if (!text_path && !kl) return cli_error(2, "perplexity: -m FILE and -f TEXT are required");
    int hf_rc = cli_model_path(&mo, "perplexity", &model_path);
    if (hf_rc) return hf_rc;
    const char *inputs[2] = {model_path, text_path};
    if (base_path && !kl && atomic_file_check_distinct("perplexity", base_path, inputs, 2) != BRISK_OK)
        return cli_error(1, "%s", brisk_last_error()); /* before the run, not after it */
    atomic_file_remove_on_signal();
    kld_base kb = {0};
    if (kl) {
        if (!kld_base_open(base_path, n_chunks_max, &kb)) return 1;
        n_ctx = kb.n_ctx;
    }
    int rc = 1;
    size_t len = 0;
    char *text = NULL;
    brisk_model *m = NULL;
    brisk_context *ctx = NULL;
    brisk_token *own = NULL;       /* the text's tokens */
    const brisk_token *toks = NULL; /* those, or the base file's (kb's) */
    brisk_batch_entry *batch = NULL;
    kld_writer *kw = NULL;
    kld_stats ks = {0};
    uint16_t *rec = NULL, *scratch = NULL;
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_ctx;
    cp.n_outputs_max = n_ctx; /* every position's logits, a pass of up to 512 at a time */
    cp.n_threads = n_threads;
    cli_context_opts(&mo, &cp);
    cp.attn_sparse_measure = measure;
    if (!kl && !(text = cli_read_all(text_path, &len))) goto done;
    if (!cli_load_model(model_path, &mo, &cp, &m)) goto done;
    int n_vocab = brisk_n_vocab(m), first = n_ctx / 2;
    int64_t n = 0, n_chunks;
    if (kl) {
        if (kb.n_vocab != n_vocab) {
            cli_error(1, "%s holds logits over %d tokens, but %s has %d: a base from another model?", base_path,
                      kb.n_vocab, model_path, n_vocab);
            goto done;
        }
        toks = kb.tokens;
        n_chunks = kb.n_chunk;
        n = n_chunks * n_ctx;
    } else {
        if (!cli_tokenize(m, text, len, true, false, &own, &n)) goto done; /* common_tokenize(.., true) */
        toks = own;
        n_chunks = n / n_ctx;
        if (n_chunks_max > 0 && n_chunks > n_chunks_max) n_chunks = n_chunks_max;
        if (n_chunks < 1) {
            cli_error(1, "perplexity: the text has %lld tokens, fewer than one chunk of %d (lower -c)",
                      (long long)n, n_ctx);
            goto done;
        }
    }
    if (!cli_new_context(m, &cp, &ctx)) goto done;
    batch = malloc((size_t)n_ctx * sizeof *batch);
    if (!batch) goto done;
    if (kl) {
        size_t rl = kld_record_len(n_vocab) * sizeof(uint16_t);
        ks.cap = n_chunks * (n_ctx - 1 - first);
        if (!(rec = malloc(rl)) || !(scratch = malloc(rl)) || !(ks.klds = malloc((size_t)ks.cap * sizeof(float)))) {
            cli_error(1, "out of memory");
            goto done;
        }
    } else if (base_path && !kld_writer_open(base_path, n_ctx, n_vocab, (int)n_chunks, toks, &kw)) {
        goto done;
    }
    double nll = 0;
    int64_t count = 0;
    double t0 = cli_now();
    if (kl)
        fprintf(stderr, "kl-divergence: %lld chunks of %d from %s\n", (long long)n_chunks, n_ctx, base_path);
    else
        fprintf(stderr, "perplexity: %lld tokens, %lld chunks of %d\n", (long long)n, (long long)n_chunks, n_ctx);
    /* the chunk values on stdout are the progress on a terminal; a live line would wipe them */
    progress bar;
    progress_begin(&bar, isatty(1) ? NULL : kl ? "kl-divergence" : "perplexity");
    for (int64_t c = 0; c < n_chunks; c++) {
        double el = progress_elapsed(&bar);
        progress_update(&bar, false, "chunk %lld/%lld, %.0f s, ETA %.0f s", (long long)c + 1, (long long)n_chunks,
                        el, c ? el / (double)c * (double)(n_chunks - c) : 0.0);
        const brisk_token *ct = toks + c * n_ctx;
        if (!eval_chunk(ctx, m, ct, n_ctx, batch)) goto done;
        for (int i = first; i < n_ctx - 1; i++) {
            const float *lg = brisk_get_logits(ctx, i);
            if (kl) {
                double nll_b;
                if (!kld_base_read(&kb, rec, &nll_b)) goto done;
                kld_stats_add(&ks, rec, nll_b, lg, n_vocab, ct[i + 1], scratch);
                continue;
            }
            double t = kld_nll(lg, n_vocab, ct[i + 1]);
            nll += t;
            count++;
            if (kw && !kld_writer_add(kw, lg, t)) {
                kld_writer_close(kw, true); /* says what failed */
                kw = NULL;
                goto done;
            }
        }
        if (kl) {
            kld_stats_print_chunk(&ks, (int)c);
            continue;
        }
        printf("[%lld]%.4f%s", (long long)c + 1, exp(nll / count), c + 1 < n_chunks ? "," : "\n");
        fflush(stdout);
    }
    progress_end(&bar, NULL);
    if (kl) {
        kld_stats_print(&ks);
        fprintf(stderr, "kl-divergence: %lld positions (%.1f s)\n", (long long)ks.n, cli_now() - t0);
    } else {
        printf("Final estimate: PPL = %.4f over %lld tokens (%.1f s)\n", exp(nll / count), (long long)count,
               cli_now() - t0);
    }
    double recall, mass, best;
    int64_t groups;
    if (measure && brisk_context_attn_sparse_recall(ctx, &recall, &mass, &best, &groups) == BRISK_OK)
        printf("Sparse attention (K = %d): recall of the true top-K pages %.4f, attention mass read %.4f "
               "(the true top-K pages: %.4f), over %lld query groups that dropped a page\n", mo.attn_sparse, recall,
               mass, best, (long long)groups);
    if (kw) {
        bool ok = kld_writer_close(kw, true);
        kw = NULL;
        if (!ok) goto done;
        fprintf(stderr, "perplexity: saved the log-probabilities of %lld positions to %s\n", (long long)count,
                base_path);
    }
    rc = 0;
done:
    kld_writer_close(kw, false);
    kld_base_close(&kb);
    free(ks.klds);
    free(rec);
    free(scratch);
    free(batch);
    free(own);
    free(text);
    brisk_context_free(ctx);
    brisk_model_free(m);
    return rc;
}
