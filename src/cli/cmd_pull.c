/* cmd_pull.c — `brisk pull REPO[:QUANT]`, `brisk ls`, `brisk rm REPO[:QUANT]`: GGUF
 * models from a Hugging Face hub in the shared cache (hub/hf_hub.h, hub/hf_cache.h),
 * and cli_hf_resolve, which `-hf` on run/bench/serve/perplexity goes through. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "brisk.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "base/progress.h"
#include "hub/hf_cache.h"
#include "hub/hf_hub.h"

#define HUB_ENV_HELP                                                                                     \
    "environment: HF_TOKEN (gated and private repos), HF_ENDPOINT (default https://huggingface.co),\n" \
    "  HF_HOME or HF_HUB_CACHE (the cache: default ~/.cache/huggingface/hub, shared with huggingface_hub\n" \
    "  and llama.cpp), HF_HUB_OFFLINE=1 (-hf uses the cache only)\n"

static void usage_pull(FILE *f) {
    fprintf(f, "usage: brisk pull REPO[:QUANT]\n"
               "  fetches a GGUF model from a Hugging Face repo into the cache and prints its path\n"
               "  QUANT picks the file (Q4_K_M, q8_0, ...: matched case-insensitively in the file name);\n"
               "  without one: Q4_K_M, else Q8_0, else the first GGUF. A split GGUF brings all its parts.\n"
               "  An interrupted download resumes where it stopped; every file is checked against the\n"
               "  size and sha256 the hub lists. Then: brisk run -hf REPO[:QUANT] ...\n" HUB_ENV_HELP);
}

static double mib(uint64_t b) { return (double)b / 1048576.0; }

/* Progress (base/progress.h): a bar redrawn on a terminal, and one summary line per file. */

static void on_progress(const hf_progress *p, void *user) {
    progress *b = user;
    double rate = p->seconds > 0 ? mib(p->done - p->resumed) / p->seconds : 0;
    if (p->finished) {
        progress_clear(b);
        if (p->cached) fprintf(stderr, "[%d/%d] %s: %.1f MiB, in the cache already\n", p->index, p->count, p->file,
                               mib(p->total));
        else {
            fprintf(stderr, "[%d/%d] %s: %.1f MiB in %.1f s (%.1f MiB/s)", p->index, p->count, p->file,
                    mib(p->total), p->seconds, rate);
            if (p->resumed) fprintf(stderr, ", resumed from %.1f MiB", mib(p->resumed));
            if (p->retries) fprintf(stderr, ", %d retr%s", p->retries, p->retries == 1 ? "y" : "ies");
            fputs(", sha256 checked\n", stderr);
        }
        return;
    }
    double frac = p->total ? (double)p->done / (double)p->total : 1;
    char fill[31];
    int k = (int)(frac * 30);
    for (int i = 0; i < 30; i++) fill[i] = i < k ? '#' : '-';
    fill[30] = 0;
    double eta = rate > 0 ? mib(p->total - p->done) / rate : 0;
    progress_update(b, false, "[%d/%d] %s %3.0f%% [%s] %.1f/%.1f MiB %.1f MiB/s ETA %d:%02d", p->index, p->count,
            p->file, frac * 100, fill, mib(p->done), mib(p->total), rate, (int)eta / 60, (int)eta % 60);
}

/* Pulls spec (ORG/NAME[:QUANT]) with a progress display; *paths as hf_pull gives them. 0 or an exit code. */
static int pull(const char *spec, char ***paths, int *n) {
    char repo[HF_REPO_MAX], quant[HF_QUANT_MAX];
    if (hf_spec_parse(spec, repo, quant) != BRISK_OK) return cli_error(2, "%s", brisk_last_error());
    const char *off = getenv("HF_HUB_OFFLINE");
    if (off && *off && strcmp(off, "0")) { /* what the cache has, or nothing */
        char root[4096];
        if (hf_cache_root(root, sizeof root) == BRISK_OK && hf_cache_find(root, repo, quant, paths, n) == BRISK_OK)
            return 0;
        return cli_error(1, "%s is not in the cache and HF_HUB_OFFLINE is set", spec);
    }
    progress b;
    progress_begin(&b, "pull");
    hf_hub_opts o = {.user_agent = "brisk/" BRISK_VERSION, .progress = on_progress, .user = &b};
    if (hf_pull(repo, quant, &o, paths, n) != BRISK_OK) {
        progress_clear(&b);
        return cli_error(1, "pull: %s", brisk_last_error());
    }
    return 0;
}

int cli_hf_resolve(const char *spec, char *out, size_t cap) {
    char repo[HF_REPO_MAX], quant[HF_QUANT_MAX], root[4096];
    if (hf_spec_parse(spec, repo, quant) != BRISK_OK) return cli_error(2, "-hf: %s", brisk_last_error());
    if (hf_cache_root(root, sizeof root) != BRISK_OK) return cli_error(1, "-hf: %s", brisk_last_error());
    char **paths = NULL;
    int n = 0, rc = 0;
    /* the cache first: a model pulled once runs without the network */
    if (hf_cache_find(root, repo, quant, &paths, &n) != BRISK_OK && (rc = pull(spec, &paths, &n))) return rc;
    /* a split GGUF: its first part, beside which gguf_open finds the others (hf_pull keeps them in order) */
    if (snprintf(out, cap, "%s", paths[0]) >= (int)cap)
        rc = cli_error(1, "-hf %s: path too long", spec);
    hf_paths_free(paths, n);
    return rc;
}

int cmd_pull(int argc, char **argv) {
    const char *spec = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage_pull(stdout);
            return 0;
        }
        if (argv[i][0] == '-' || spec) return cli_error(2, "pull: unexpected '%s' (try `brisk pull --help`)", argv[i]);
        spec = argv[i];
    }
    if (!spec) return cli_error(2, "pull: REPO[:QUANT] is required (e.g. Qwen/Qwen3-0.6B-GGUF:Q8_0)");
    char **paths;
    int n, rc = pull(spec, &paths, &n);
    if (rc) return rc;
    for (int i = 0; i < n; i++) printf("%s\n", paths[i]);
    hf_paths_free(paths, n);
    return fflush(stdout) ? cli_error(1, "write error on stdout") : 0;
}

int cmd_ls(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: brisk ls\n  the GGUF models in the Hugging Face cache: REPO:QUANT, size, files, path\n"
                   HUB_ENV_HELP);
            return 0;
        }
        return cli_error(2, "ls: unexpected '%s'", argv[i]);
    }
    char root[4096];
    if (hf_cache_root(root, sizeof root) != BRISK_OK) return cli_error(1, "ls: %s", brisk_last_error());
    hf_cache_entry *e;
    int n;
    uint64_t partial;
    if (hf_cache_list(root, &e, &n, &partial) != BRISK_OK) return cli_error(1, "ls: %s", brisk_last_error());
    if (n) printf("%-48s %10s %5s  %s\n", "MODEL", "SIZE", "FILES", "PATH");
    for (int i = 0; i < n; i++) {
        char name[HF_REPO_MAX + HF_QUANT_MAX + 1];
        snprintf(name, sizeof name, "%s%s%s", e[i].repo, e[i].quant[0] ? ":" : "", e[i].quant);
        printf("%-48s %6.1f MiB %5d  %s\n", name, mib(e[i].size), e[i].n_files, e[i].path);
    }
    if (!n) fprintf(stderr, "no models in %s\n", root);
    if (partial) fprintf(stderr, "%.1f MiB in interrupted downloads (`brisk pull` resumes them)\n", mib(partial));
    free(e);
    return fflush(stdout) ? cli_error(1, "write error on stdout") : 0;
}

int cmd_rm(int argc, char **argv) {
    const char *spec = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: brisk rm REPO[:QUANT]\n  removes a model's files of QUANT (without one: the whole repo)\n"
                   "  from the Hugging Face cache, and blobs no snapshot uses any more. Only the cache.\n"
                   HUB_ENV_HELP);
            return 0;
        }
        if (argv[i][0] == '-' || spec) return cli_error(2, "rm: unexpected '%s'", argv[i]);
        spec = argv[i];
    }
    if (!spec) return cli_error(2, "rm: REPO[:QUANT] is required (see `brisk ls`)");
    char repo[HF_REPO_MAX], quant[HF_QUANT_MAX], root[4096];
    /* a path or anything else that is not ORG/NAME never reaches the file system */
    if (hf_spec_parse(spec, repo, quant) != BRISK_OK)
        return cli_error(2, "rm: '%s' is not a model of the cache (REPO[:QUANT], as `brisk ls` lists); "
                            "brisk rm removes nothing else", spec);
    if (hf_cache_root(root, sizeof root) != BRISK_OK) return cli_error(1, "rm: %s", brisk_last_error());
    uint64_t freed;
    brisk_status s = hf_cache_remove(root, repo, quant, &freed);
    if (s == BRISK_ERR_NOT_FOUND) return cli_error(1, "rm: %s (see `brisk ls`)", brisk_last_error());
    if (s != BRISK_OK) return cli_error(1, "rm: %s", brisk_last_error());
    fprintf(stderr, "removed %s (%.1f MiB freed)\n", spec, mib(freed));
    return 0;
}
