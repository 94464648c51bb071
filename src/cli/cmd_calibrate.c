/* cmd_calibrate.c — `brisk calibrate -m FILE -f TEXT -o STATS [-c 512]`: runs a
 * text through an MoE model on the CPU and records how often each expert is
 * routed to, per layer: the input of expert offload's hot-expert cache (which
 * experts to keep on the GPU under a memory budget: `--expert-stats STATS`).
 * Writes STATS as JSON (brisk_expert_stats_write, engine/expert_stats.c, which
 * also reads it back) and prints, per layer, the share of routings the most
 * popular experts take. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/progress.h"
#include "brisk.h"
#include "cli/cli.h"
#include "cli/common.h"

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Share of one layer's routings taken by its top `frac` of experts. */
static double top_share(const int64_t *row, int n_expert, double frac, int64_t *tmp) {
    memcpy(tmp, row, (size_t)n_expert * sizeof *tmp);
    qsort(tmp, (size_t)n_expert, sizeof *tmp, cmp_desc);
    int64_t total = 0, top = 0;
    int k = (int)(frac * n_expert + 0.5);
    if (k < 1) k = 1;
    for (int e = 0; e < n_expert; e++) {
        total += tmp[e];
        if (e < k) top += tmp[e];
    }
    return total ? (double)top / (double)total : 0.0;
}

int cmd_calibrate(int argc, char **argv) {
    cli_text_opts to = CLI_TEXT_OPTS_DEFAULT;
    const char *out_path = NULL;
    for (int i = 1; i < argc; i++) {
        int g = cli_text_flag(argc, argv, &i, &to);
        if (g) {
            if (g < 0) return 2;
            continue;
        }
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: brisk calibrate -m FILE -f TEXT -o STATS.json [-c 512] [-t N] [--chunks N]\n"
                   "  counts, per layer, how often each expert of an MoE model is routed to over TEXT (on the CPU),\n"
                   "  in chunks of -c tokens, all of TEXT unless --chunks caps them; a few thousand tokens rank the\n"
                   "  experts well for --expert-stats (512 tokens ranked a 35B-A3B's experts 0.9 points of hits worse than 8,192)\n"
                   "  -o, --output FILE    where the counts go (JSON)\n" CLI_TEXT_HELP);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(out_path = cli_next(argc, argv, &i))) return 2;
        } else {
            return cli_error(2, "calibrate: unknown option '%s'", a);
        }
    }
    const char *model_path = to.model_path, *text_path = to.text_path;
    int n_ctx = to.n_ctx, n_threads = to.n_threads, n_chunks_max = to.n_chunks_max;
    if (!model_path || !text_path || !out_path)
        return cli_error(2, "calibrate: -m FILE, -f TEXT and -o STATS are required");
    const char *inputs[2] = {model_path, text_path}; /* checked before the run, not after it */
    if (atomic_file_check_distinct("calibrate", out_path, inputs, 2) != BRISK_OK)
        return cli_error(1, "%s", brisk_last_error());
    atomic_file_remove_on_signal();
    size_t len;
    char *text = cli_read_all(text_path, &len);
    if (!text) return 1;
    int rc = 1;
    brisk_model *m = NULL;
    brisk_context *ctx = NULL;
    brisk_token *toks = NULL;
    brisk_batch_entry *batch = NULL;
    int64_t *counts = NULL, *tmp = NULL;
    cli_model_opts mo = CLI_MODEL_OPTS_DEFAULT;
    mo.n_gpu_layers = 0; /* the statistics are read on the CPU */
    if (!cli_load_model(model_path, &mo, NULL, &m)) goto done;
    int64_t n = 0;
    if (!cli_tokenize(m, text, len, true, false, &toks, &n)) goto done;
    if (n < 1) {
        cli_error(1, "calibrate: %s has no tokens", text_path);
        goto done;
    }
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_ctx;
    cp.n_threads = n_threads;
    cp.collect_expert_stats = true;
    cp.cpu = mo.cpu;
    if (!cli_new_context(m, &cp, &ctx)) goto done;
    int n_layer = 0, n_expert = 0;
    if (brisk_context_expert_counts(ctx, NULL, 0, &n_layer, &n_expert) != BRISK_OK) {
        cli_error(1, "calibrate: %s: %s", model_path, brisk_last_error());
        goto done;
    }
    batch = malloc((size_t)n_ctx * sizeof *batch);
    counts = malloc((size_t)n_layer * n_expert * sizeof *counts);
    tmp = malloc((size_t)n_expert * sizeof *tmp);
    if (!batch || !counts || !tmp) {
        cli_error(1, "out of memory");
        goto done;
    }
    int64_t n_chunks = (n + n_ctx - 1) / n_ctx, done_tok = 0;
    if (n_chunks_max > 0 && n_chunks > n_chunks_max) n_chunks = n_chunks_max;
    progress bar;
    progress_begin(&bar, "calibrate");
    for (int64_t c = 0; c < n_chunks; c++) {
        int nb = (int)(n - c * n_ctx < n_ctx ? n - c * n_ctx : n_ctx);
        brisk_seq_clear(ctx, 0);
        for (int i = 0; i < nb; i++) batch[i] = (brisk_batch_entry){toks[c * n_ctx + i], i, 0, i == nb - 1};
        if (brisk_decode(ctx, batch, nb) != BRISK_OK) {
            cli_error(1, "%s", brisk_last_error());
            goto done;
        }
        done_tok += nb;
        progress_update(&bar, c + 1 == n_chunks, "%lld / %lld tokens (%.0f tokens/s)", (long long)done_tok,
                        (long long)n, done_tok / progress_elapsed(&bar));
    }
    double secs = progress_elapsed(&bar);
    progress_end(&bar, NULL);
    if (brisk_context_expert_counts(ctx, counts, (int64_t)n_layer * n_expert, NULL, NULL) != BRISK_OK) goto done;
    int64_t routed = 0; /* each token routes to k experts in every layer */
    for (int e = 0; e < n_expert; e++) routed += counts[e];
    int k = (int)(routed / done_tok);
    if (brisk_expert_stats_write(out_path, model_path, n_layer, n_expert, k, done_tok, counts) != BRISK_OK) {
        cli_error(1, "calibrate: %s", brisk_last_error());
        goto done;
    }
    printf("%lld tokens, %d layers x %d experts (top-%d); share of routings taken by the most used experts:\n",
           (long long)done_tok, n_layer, n_expert, k);
    printf("| layer | top 10%% | top 25%% | top 50%% | unused experts |\n|---|---|---|---|---|\n");
    for (int l = 0; l < n_layer; l++) {
        const int64_t *row = counts + (size_t)l * n_expert;
        int unused = 0;
        for (int e = 0; e < n_expert; e++) unused += row[e] == 0;
        printf("| %d | %.1f%% | %.1f%% | %.1f%% | %d |\n", l, 100 * top_share(row, n_expert, 0.10, tmp),
               100 * top_share(row, n_expert, 0.25, tmp), 100 * top_share(row, n_expert, 0.50, tmp), unused);
    }
    fprintf(stderr, "calibrate: %lld tokens in %.1f s (%.0f tokens/s); wrote %s\n", (long long)done_tok, secs,
            done_tok / secs, out_path);
    rc = 0;
done:
    free(tmp);
    free(counts);
    free(batch);
    free(toks);
    free(text);
    brisk_context_free(ctx);
    brisk_model_free(m);
    return rc;
}
