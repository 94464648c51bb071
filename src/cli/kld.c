/* kld.c — llama-perplexity's base-logits file (write, read) and its KL
 * divergence statistics. See kld.h for the layout. */
#include "cli/kld.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/atomic_file.h"
#include "cli/cli.h"

#define KLD_MAGIC "_logits_"
#define KLD_NLL_MAGIC "_nll_f64" /* brisk's trailer */
#define KLD_HEADER 20   /* magic, n_ctx, n_vocab, n_chunk */
#define KLD_SPAN 16.0f  /* nats below the top log-probability that a record keeps */

/* A record's log-probability of entry q. One function for both sides, so a run compared with
 * its own base subtracts identical floats (KLD exactly 0). */
static inline float rec_lp(float scale, float min_lp, uint16_t q) { return scale * q + min_lp; }

static void rec_head(const uint16_t *rec, float *scale, float *min_lp) {
    memcpy(scale, rec, sizeof *scale);
    memcpy(min_lp, rec + 2, sizeof *min_lp);
}

/* kld_encode, also handing back the top logit, the clamp floor and log(sum exp(l - top)). */
static void encode(const float *l, int n_vocab, uint16_t *rec, float *top, float *floor_, float *lse) {
    float mx = l[0], mn = l[0];
    for (int v = 1; v < n_vocab; v++) {
        mx = l[v] > mx ? l[v] : mx;
        mn = l[v] < mn ? l[v] : mn;
    }
    if (mn < mx - KLD_SPAN) mn = mx - KLD_SPAN;
    double se = 0;
    for (int v = 0; v < n_vocab; v++) se += exp((double)l[v] - mx);
    const float ls = (float)log(se), scale = (mx - mn) / 65535.0f, min_lp = mn - mx - ls;
    memcpy(rec, &scale, sizeof scale);
    memcpy(rec + 2, &min_lp, sizeof min_lp);
    uint16_t *q = rec + 4;
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    for (int v = 0; v < n_vocab; v++) {
        long r = l[v] > mn ? lrintf(inv * (l[v] - mn)) : 0; /* nearest, ties to even */
        q[v] = (uint16_t)(r > 65535 ? 65535 : r);
    }
    for (size_t v = (size_t)n_vocab; v + 4 < kld_record_len(n_vocab); v++) q[v] = 0;
    *top = mx, *floor_ = mn, *lse = ls;
}

void kld_encode(const float *logits, int n_vocab, uint16_t *rec) {
    float a, b, c;
    encode(logits, n_vocab, rec, &a, &b, &c);
}

double kld_nll(const float *logits, int n_vocab, int32_t next) {
    float mx = logits[0];
    for (int v = 1; v < n_vocab; v++) mx = logits[v] > mx ? logits[v] : mx;
    double sum = 0;
    for (int v = 0; v < n_vocab; v++) sum += exp((double)logits[v] - mx);
    return -((double)logits[next] - mx - log(sum));
}

/* ---- writing ---- */

struct kld_writer {
    atomic_file *af; /* PATH.tmp.XXXXXX until close commits it */
    FILE *f;         /* af's stream */
    int n_vocab, err; /* err: errno of the first failed write, -1 if unknown */
    uint16_t *rec;    /* (kld_record_len) */
    double *nll;      /* (cap) the trailer */
    int64_t n, cap;
};

static void w_put(kld_writer *w, const void *p, size_t bytes) {
    if (!w->err && fwrite(p, 1, bytes, w->f) != bytes) w->err = errno ? errno : -1;
}

bool kld_writer_open(const char *path, int n_ctx, int n_vocab, int n_chunk, const int32_t *tokens,
                     kld_writer **out) {
    *out = NULL;
    kld_writer *w = calloc(1, sizeof *w);
    int64_t cap = (int64_t)n_chunk * (n_ctx - 1 - n_ctx / 2);
    if (!w || !(w->rec = malloc(kld_record_len(n_vocab) * sizeof(uint16_t))) ||
        !(w->nll = malloc((size_t)(cap > 0 ? cap : 1) * sizeof(double)))) {
        kld_writer_close(w, false);
        cli_error(1, "out of memory");
        return false;
    }
    if (atomic_file_open(path, &w->af) != BRISK_OK) {
        cli_error(1, "%s", brisk_last_error());
        kld_writer_close(w, false);
        return false;
    }
    w->f = atomic_file_stream(w->af);
    setvbuf(w->f, NULL, _IOFBF, 1 << 20);
    w->n_vocab = n_vocab;
    w->cap = cap;
    uint32_t c = (uint32_t)n_ctx;
    int32_t hv[2] = {n_vocab, n_chunk};
    w_put(w, KLD_MAGIC, 8);
    w_put(w, &c, sizeof c);
    w_put(w, hv, sizeof hv);
    w_put(w, tokens, (size_t)n_ctx * (size_t)n_chunk * sizeof(int32_t));
    *out = w;
    return true;
}

bool kld_writer_add(kld_writer *w, const float *logits, double nll) {
    if (w->n >= w->cap) {
        if (!w->err) w->err = -1;
        return false;
    }
    w->nll[w->n++] = nll;
    kld_encode(logits, w->n_vocab, w->rec);
    w_put(w, w->rec, kld_record_len(w->n_vocab) * sizeof(uint16_t));
    return !w->err;
}

bool kld_writer_close(kld_writer *w, bool commit) {
    if (!w) return true;
    bool ok = commit;
    if (commit && w->f) {
        w_put(w, KLD_NLL_MAGIC, 8);
        w_put(w, w->nll, (size_t)w->n * sizeof(double));
    }
    if (commit && w->af && w->err) {
        cli_error(1, "writing %s: %s", atomic_file_target(w->af), w->err > 0 ? strerror(w->err) : "write failed");
        ok = false;
    }
    if (ok && w->af) {
        if (atomic_file_commit(w->af) != BRISK_OK) ok = false, cli_error(1, "%s", brisk_last_error());
    } else {
        atomic_file_abort(w->af); /* the path keeps what it held */
    }
    free(w->rec), free(w->nll), free(w);
    return ok;
}

/* ---- reading ---- */

bool kld_base_open(const char *path, int n_chunks_max, kld_base *b) {
    memset(b, 0, sizeof *b);
    b->path = path;
    FILE *f = fopen(path, "rb");
    if (!f) return cli_error(1, "cannot open %s: %s", path, strerror(errno)), false;
    b->f = f;
    char magic[8];
    uint32_t n_ctx;
    int32_t hv[2];
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, KLD_MAGIC, 8) != 0) {
        cli_error(1, "%s is not a logits file (written by --kl-divergence-base: it starts with \"%s\")", path,
                  KLD_MAGIC);
        goto fail;
    }
    if (fread(&n_ctx, sizeof n_ctx, 1, f) != 1 || fread(hv, sizeof hv, 1, f) != 1) {
        cli_error(1, "%s is truncated: its header ends early", path);
        goto fail;
    }
    if (n_ctx < 2 || n_ctx > (1u << 24) || hv[0] < 1 || hv[0] > (1 << 24) || hv[1] < 1) {
        cli_error(1, "%s: corrupt header (n_ctx %u, n_vocab %d, chunks %d)", path, n_ctx, hv[0], hv[1]);
        goto fail;
    }
    const int64_t ctx = n_ctx, n_file = hv[1], scored = ctx - 1 - ctx / 2;
    const int64_t chunk_bytes = scored * (int64_t)kld_record_len(hv[0]) * 2; /* < 2^49 */
    if (n_file > (INT64_MAX / 2) / (chunk_bytes + 4 * ctx)) {
        cli_error(1, "%s: corrupt header (%lld chunks of %lld)", path, (long long)n_file, (long long)ctx);
        goto fail;
    }
    const int64_t rec0 = KLD_HEADER + 4 * ctx * n_file, want = rec0 + n_file * chunk_bytes;
    const int64_t want_nll = want + 8 + 8 * n_file * scored; /* with brisk's trailer */
    int64_t size = -1;
    if (fseeko(f, 0, SEEK_END) == 0) size = ftello(f);
    if (size < 0 || fseeko(f, KLD_HEADER, SEEK_SET) != 0) {
        cli_error(1, "%s: cannot seek: %s", path, strerror(errno));
        goto fail;
    }
    int64_t n_use = n_chunks_max > 0 && n_chunks_max < n_file ? n_chunks_max : n_file;
    if (size > want && size != want_nll) {
        cli_error(1, "%s: %lld bytes after its last record (%lld chunks of %lld over %d tokens: %lld bytes, or %lld "
                  "with brisk's trailer)", path, (long long)(size - want), (long long)n_file, (long long)ctx, hv[0],
                  (long long)want, (long long)want_nll);
        goto fail;
    }
    if (size < rec0 + n_use * chunk_bytes) {
        int64_t have = size < rec0 ? 0 : (size - rec0) / chunk_bytes;
        cli_error(1, "%s is truncated: %lld bytes of %lld; it holds %lld of its %lld chunks%s", path, (long long)size,
                  (long long)want, (long long)have, (long long)n_file,
                  have > 0 ? " (--chunks N compares the first N)" : "");
        goto fail;
    }
    b->n_ctx = (int)n_ctx, b->n_vocab = hv[0], b->n_chunk = (int)n_use;
    b->tokens = malloc((size_t)(ctx * n_use) * sizeof(int32_t));
    if (!b->tokens) {
        cli_error(1, "out of memory");
        goto fail;
    }
    if (fread(b->tokens, sizeof(int32_t), (size_t)(ctx * n_use), f) != (size_t)(ctx * n_use) ||
        fseeko(f, rec0, SEEK_SET) != 0) {
        cli_error(1, "%s: read error: %s", path, strerror(errno));
        goto fail;
    }
    for (int64_t i = 0; i < ctx * n_use; i++)
        if (b->tokens[i] < 0 || b->tokens[i] >= b->n_vocab) {
            cli_error(1, "%s: token %lld is %d, outside the vocabulary of %d", path, (long long)i, b->tokens[i],
                      b->n_vocab);
            goto fail;
        }
    if (size == want_nll) {
        size_t np = (size_t)(n_use * scored);
        if (!(b->nll = malloc((np ? np : 1) * sizeof(double)))) {
            cli_error(1, "out of memory");
            goto fail;
        }
        if (fseeko(f, want, SEEK_SET) != 0 || fread(magic, 1, 8, f) != 8 || memcmp(magic, KLD_NLL_MAGIC, 8) != 0 ||
            fread(b->nll, sizeof(double), np, f) != np || fseeko(f, rec0, SEEK_SET) != 0) {
            cli_error(1, "%s: its trailer is not brisk's (\"%s\" and one -log p per position)", path, KLD_NLL_MAGIC);
            goto fail;
        }
    }
    return true;
fail:
    kld_base_close(b);
    return false;
}

bool kld_base_read(kld_base *b, uint16_t *rec, double *nll) {
    size_t n = kld_record_len(b->n_vocab);
    const int64_t scored = b->n_ctx - 1 - b->n_ctx / 2;
    if (b->next >= b->n_chunk * scored || fread(rec, sizeof(uint16_t), n, b->f) != n) /* size checked: I/O error */
        return cli_error(1, "%s: read error: %s", b->path, feof((FILE *)b->f) ? "unexpected end" : strerror(errno)),
               false;
    if (b->nll) {
        *nll = b->nll[b->next];
    } else { /* llama-perplexity's file: the record's, clamped 16 nats under the top */
        int64_t c = b->next / scored, i = b->n_ctx / 2 + b->next % scored;
        float scale, min_lp;
        rec_head(rec, &scale, &min_lp);
        *nll = -rec_lp(scale, min_lp, rec[4 + b->tokens[c * b->n_ctx + i + 1]]);
    }
    b->next++;
    return true;
}

void kld_base_close(kld_base *b) {
    if (b->f) fclose(b->f);
    free(b->tokens);
    free(b->nll);
    b->f = NULL;
    b->tokens = NULL;
    b->nll = NULL;
}

/* ---- statistics ----
 * The distributions are compared as records (the current logits encoded as the base's were), so
 * like meets like and a run against its own base gives KLD 0 and 100% same top exactly (16-bit
 * steps of 16/65535 nats would otherwise add noise of about 1e-5 to the KLD). Only where the
 * current run's log-probability fell under its own clamp does the KLD use the exact value (the
 * record's would understate the divergence). The perplexities use -log p unclamped (kld_nll;
 * for a base from llama-perplexity, its clamped record). */

void kld_stats_add(kld_stats *s, const uint16_t *base_rec, double nll_b, const float *logits, int n_vocab,
                   int32_t next, uint16_t *scratch) {
    float top, floor_, lse, sb, mb, sc, mc;
    encode(logits, n_vocab, scratch, &top, &floor_, &lse);
    rec_head(base_rec, &sb, &mb);
    rec_head(scratch, &sc, &mc);
    const uint16_t *qb = base_rec + 4, *qc = scratch + 4;
    double kld = 0;
    int tb = 0, tc = 0;
    for (int v = 0; v < n_vocab; v++) {
        tb = qb[v] > qb[tb] ? v : tb;
        tc = qc[v] > qc[tc] ? v : tc;
        const float lpb = rec_lp(sb, mb, qb[v]);
        if (lpb <= -KLD_SPAN) continue; /* p < 1e-7: llama-perplexity leaves these out too */
        const float lpc = logits[v] >= floor_ ? rec_lp(sc, mc, qc[v]) : logits[v] - top - lse;
        kld += exp((double)lpb) * ((double)lpb - lpc);
    }
    const double nll = kld_nll(logits, n_vocab, next);
    const double dp = exp(-nll) - exp(-nll_b);
    s->nll += nll, s->nll2 += nll * nll;
    s->nll_b += nll_b, s->nll_b2 += nll_b * nll_b, s->nll_nll_b += nll * nll_b;
    s->kld += kld, s->kld2 += kld * kld;
    s->dp += dp, s->dp2 += dp * dp, s->dp4 += dp * dp * dp * dp;
    s->same_top += tb == tc;
    if (s->n < s->cap) s->klds[s->n] = (float)kld;
    s->n++;
}

/* Mean of n values from their sum and sum of squares, and the standard error of that mean. */
static void mean_err(double sum, double sum2, int64_t n, double *mean, double *err) {
    *mean = n > 0 ? sum / n : 0;
    double var = n > 0 ? sum2 / n - *mean * *mean : 0;
    *err = var > 0 && n > 10 ? sqrt(var / (n - 1)) : 0;
}

/* The covariance of the two means (ln PPL(Q), ln PPL(base)). */
static double mean_cov(const kld_stats *s) {
    if (s->n < 10) return 0;
    return (s->nll_nll_b / s->n - (s->nll / s->n) * (s->nll_b / s->n)) / (s->n - 1);
}

/* ln(PPL(Q) / PPL(base)) and its error: the two means are correlated (same text). */
static void log_ratio(const kld_stats *s, double *val, double *err) {
    double a, ea, b, eb;
    mean_err(s->nll, s->nll2, s->n, &a, &ea);
    mean_err(s->nll_b, s->nll_b2, s->n, &b, &eb);
    double v = ea * ea + eb * eb - 2 * mean_cov(s);
    *val = a - b;
    *err = v > 0 ? sqrt(v) : 0;
}

void kld_stats_print_chunk(const kld_stats *s, int chunk) {
    if (chunk == 0)
        printf("chunk        PPL              ln(PPL(Q)/PPL(base))      KL divergence            dp RMS            "
               "same top\n");
    double lp, elp, lr, elr, kl, ekl, d2, ed2;
    mean_err(s->nll, s->nll2, s->n, &lp, &elp);
    log_ratio(s, &lr, &elr);
    mean_err(s->kld, s->kld2, s->n, &kl, &ekl);
    mean_err(s->dp2, s->dp4, s->n, &d2, &ed2);
    double rms = sqrt(d2), erms = rms > 0 ? 0.5 / rms * ed2 : 0, top = s->n ? (double)s->same_top / s->n : 0;
    double etop = s->n > 1 ? sqrt(top * (1 - top) / (s->n - 1)) : 0;
    printf("%5d %9.4f ± %8.4f  %10.5f ± %8.5f  %10.5f ± %8.5f  %6.3f ± %5.3f %%  %6.3f ± %5.3f %%\n", chunk + 1,
           exp(lp), exp(lp) * elp, lr, elr, kl, ekl, 100 * rms, 100 * erms, 100 * top, 100 * etop);
    fflush(stdout);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The value at fraction f of sorted v (n), interpolated between neighbours. */
static double percentile(const float *v, int64_t n, double f) {
    double p = f * (double)(n - 1);
    int64_t i = (int64_t)p;
    return i + 1 < n ? v[i] + (p - (double)i) * (v[i + 1] - v[i]) : v[n - 1];
}

void kld_stats_print(const kld_stats *s) {
    double lp, elp, lb, elb, lr, elr, kl, ekl, d2, ed2;
    mean_err(s->nll, s->nll2, s->n, &lp, &elp);
    mean_err(s->nll_b, s->nll_b2, s->n, &lb, &elb);
    log_ratio(s, &lr, &elr);
    mean_err(s->kld, s->kld2, s->n, &kl, &ekl);
    mean_err(s->dp2, s->dp4, s->n, &d2, &ed2);
    const double ppl = exp(lp), ppl_b = exp(lb), cov = mean_cov(s);
    const double dv = ppl * ppl * elp * elp + ppl_b * ppl_b * elb * elb - 2 * ppl * ppl_b * cov;
    printf("\n====== Perplexity statistics (%lld positions) ======\n", (long long)s->n);
    printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", ppl, ppl * elp);
    printf("Mean PPL(base)                : %10.6f ± %10.6f\n", ppl_b, ppl_b * elb);
    if (elp > 0 && elb > 0) printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100 * cov / (elp * elb));
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", lr, elr);
    printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", exp(lr), exp(lr) * elr);
    printf("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n", ppl - ppl_b, dv > 0 ? sqrt(dv) : 0);
    printf("\n====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6f ± %10.6f\n", kl, ekl);
    if (s->n > 0 && s->kld2 == 0) /* a sum of squares of 0: every term is 0, not just under 1e-6 */
        printf("Every position's KLD is exactly 0: the same distributions as the base's records\n");
    if (s->n > 0 && s->n <= s->cap) {
        qsort(s->klds, (size_t)s->n, sizeof(float), cmp_float);
        static const struct { const char *name; double f; } pc[] = {
            {"Maximum", 1}, {"99.9%  ", 0.999}, {"99.0%  ", 0.99}, {"95.0%  ", 0.95}, {"90.0%  ", 0.9},
            {"Median ", 0.5}, {"10.0%  ", 0.1}, {" 1.0%  ", 0.01}, {"Minimum", 0}};
        for (size_t i = 0; i < sizeof pc / sizeof pc[0]; i++)
            printf("%s KLD: %10.6f\n", pc[i].name, percentile(s->klds, s->n, pc[i].f));
    }
    const double rms = sqrt(d2), top = s->n ? (double)s->same_top / s->n : 0;
    printf("\n====== Token probability statistics ======\n");
    printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100 * rms, rms > 0 ? 100 * 0.5 / rms * ed2 : 0);
    printf("Same top p: %6.3f ± %5.3f %%\n", 100 * top, s->n > 1 ? 100 * sqrt(top * (1 - top) / (s->n - 1)) : 0);
}
