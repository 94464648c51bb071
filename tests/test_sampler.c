/* test_sampler.c — the sampler's draws against the exact distributions of its chain
 * (engine/sampler.c: penalties -> grammar mask -> top-k -> top-p -> min-p -> temperature).
 *
 * Each case draws N_DRAWS tokens from fixed logits and compares the counts with the
 * distribution written here from the definitions (in double, not from sampler.c's code):
 * a token the chain removes must never be drawn, and the others pass Pearson's chi-square
 * test at significance ALPHA (df = tokens kept - 1). The seeds are fixed, so a run is
 * deterministic. Each case also proves the test can fail: the same counts against the
 * distribution of a slightly wrong chain (temperature off by 15%, a cutoff one token off,
 * a penalty not applied) must be rejected.
 * Speculative decoding (engine/speculative.c) draws every token with this sampler from the
 * target's logits and keeps a draft token only while the draws equal it; with a greedy
 * drafter (a one-hot q) that is the rejection rule (accept with min(1, p/q) = p(d), else draw
 * from norm(max(0, p - q)) = p without d). speculative_distribution checks the tokens it emits
 * against the target's exact joint distribution, and that a verifier which skips a draw after
 * an accepted draft is rejected. */
#include "brisk.h"
#include "engine/grammar.h"
#include "engine/speculative.h"
#include "test.h"

#define N_DRAWS 20000
#define NV 16
#define ALPHA_Z 3.090 /* the standard normal's upper 1e-3 quantile: ALPHA = 0.001 */

/* Upper ALPHA quantile of chi-square with df degrees of freedom (Wilson-Hilferty; within 3%
 * of the exact value from df 1, on the side of a larger bound there). */
static double chi2_crit(int df) {
    double a = 2.0 / (9.0 * df), t = 1.0 - a + ALPHA_Z * sqrt(a);
    return df * t * t * t;
}

/* The penalised logits: every distinct token of the last repeat_last_n of hist, once:
 * a logit <= 0 times repeat_penalty, else divided by it; then minus count * frequency
 * and presence (llama.cpp's penalties). */
static void penalise(double *l, const brisk_sampler_params *p, const int *hist, int n_hist) {
    int count[NV] = {0}, from = n_hist > p->repeat_last_n ? n_hist - p->repeat_last_n : 0;
    for (int i = from; i < n_hist; i++) count[hist[i]]++;
    for (int t = 0; t < NV; t++) {
        if (!count[t]) continue;
        l[t] = l[t] <= 0 ? l[t] * p->repeat_penalty : l[t] / p->repeat_penalty;
        l[t] -= count[t] * p->frequency_penalty + p->presence_penalty;
    }
}

/* q (NV): the chain's exact distribution over logits after hist (allow: NULL, or which ids a
 * grammar leaves). Top-p and min-p act on the probabilities at temperature 1, as in llama.cpp;
 * top-p keeps the shortest prefix (by logit) whose mass reaches top_p. */
static void expected(const float *logits, const brisk_sampler_params *p, const int *hist, int n_hist,
                     const bool *allow, double *q) {
    double l[NV];
    int order[NV], n = 0;
    for (int t = 0; t < NV; t++) l[t] = logits[t];
    penalise(l, p, hist, n_hist);
    for (int t = 0; t < NV; t++)
        if (!allow || allow[t]) order[n++] = t;
    for (int i = 1; i < n; i++) /* by logit, descending; ties by id */
        for (int j = i; j > 0 && (l[order[j]] > l[order[j - 1]]); j--) {
            int x = order[j];
            order[j] = order[j - 1], order[j - 1] = x;
        }
    if (p->top_k > 0 && p->top_k < n) n = p->top_k;
    double z = 0, cum = 0;
    for (int i = 0; i < n; i++) z += exp(l[order[i]] - l[order[0]]);
    if (p->top_p < 1)
        for (int i = 0; i < n; i++)
            if ((cum += exp(l[order[i]] - l[order[0]]) / z) >= p->top_p) {
                n = i + 1;
                break;
            }
    if (p->min_p > 0)
        for (int i = 1; i < n; i++)
            if (exp(l[order[i]] - l[order[0]]) < p->min_p) {
                n = i;
                break;
            }
    memset(q, 0, NV * sizeof *q);
    double s = 0;
    for (int i = 0; i < n; i++) s += (q[order[i]] = exp((l[order[i]] - l[order[0]]) / p->temp));
    for (int i = 0; i < n; i++) q[order[i]] /= s;
}

/* Pearson's statistic of counts (n bins, n_draws draws) against q; a draw where q is 0:
 * INFINITY. Bins expecting fewer than min_expected draws are pooled into one (the statistic's
 * chi-square law needs a few per bin); *df: the bins kept, less one. */
static double chi2_bins(const int *counts, const double *q, int n, int n_draws, double min_expected, int *df) {
    double x = 0, pool_e = 0;
    int bins = 0, pool_c = 0;
    for (int t = 0; t < n; t++) {
        if (q[t] == 0) {
            if (counts[t]) return INFINITY;
            continue;
        }
        double e = q[t] * n_draws;
        if (e < min_expected) {
            pool_e += e, pool_c += counts[t];
            continue;
        }
        x += (counts[t] - e) * (counts[t] - e) / e;
        bins++;
    }
    if (pool_e > 0) x += (pool_c - pool_e) * (pool_c - pool_e) / pool_e, bins++;
    *df = bins - 1;
    return x;
}
static double chi2(const int *counts, const double *q, int *df) { return chi2_bins(counts, q, NV, N_DRAWS, 0, df); }

/* A 16-token row; at temperature 1 its probabilities by logit are .248 .166 .136 .101 .083
 * .061 .050 .041 ... (cumulative .651 at 4 tokens, .733 at 5, .795 at 6). Every cutoff below
 * is at least 0.009 of a logit from a token: far beyond float rounding in sampler.c. */
static const float row[NV] = {2.0f, 1.6f, 1.1f, 0.9f, 0.4f, 0.2f, -0.3f, -0.5f,
                              -0.9f, -1.2f, -1.5f, 1.4f, -2.0f, -2.4f, 0.6f, -0.1f};

/* Draws N_DRAWS tokens with p after accepting hist (drawing accepts nothing, so the history
 * stays), checks them against expected(p), and checks that the counts reject expected(wrong). */
static void check_case(const char *name, const brisk_sampler_params *p, const brisk_sampler_params *wrong,
                       const int *hist, int n_hist) {
    brisk_sampler *s = NULL;
    CHECK_OK(brisk_sampler_new(p, NV, &s));
    if (!s) return;
    for (int i = 0; i < n_hist; i++) brisk_sampler_accept(s, hist[i]);
    int counts[NV] = {0};
    for (int i = 0; i < N_DRAWS; i++) {
        brisk_token t = brisk_sampler_sample(s, row);
        CHECK(t >= 0 && t < NV);
        if (t >= 0 && t < NV) counts[t]++;
    }
    brisk_sampler_free(s);
    double q[NV], qw[NV];
    int df = 0, dfw = 0;
    expected(row, p, hist, n_hist, NULL, q);
    expected(row, wrong, hist, n_hist, NULL, qw);
    double x = chi2(counts, q, &df), xw = chi2(counts, qw, &dfw);
    printf("  %-26s %2d kept: chi2 %6.2f (df %2d, bound %5.2f); the wrong chain's: ", name, df + 1, x, df,
           chi2_crit(df > 0 ? df : 1));
    if (isinf(xw)) printf("draws it never makes\n");
    else printf("%.1f (bound %.2f)\n", xw, chi2_crit(dfw > 0 ? dfw : 1));
    CHECK(isfinite(x) && (df == 0 || x <= chi2_crit(df)));
    CHECK(isinf(xw) || (dfw > 0 && xw > chi2_crit(dfw)));
}

static brisk_sampler_params plain(float temp) {
    brisk_sampler_params p = brisk_sampler_default_params();
    p.temp = temp, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f, p.seed = 42;
    return p;
}

static void test_temperature(void) {
    brisk_sampler_params p = plain(0.7f), w = p;
    w.temp = 0.7f * 1.15f;
    check_case("temperature 0.7", &p, &w, NULL, 0);
    p = plain(1.6f), w = p;
    w.temp = 1.6f / 1.15f;
    check_case("temperature 1.6", &p, &w, NULL, 0);
}

static void test_top_k(void) {
    brisk_sampler_params p = plain(1.3f), w = p;
    p.top_k = 5, w.top_k = 6;
    check_case("top-k 5, temp 1.3", &p, &w, NULL, 0);
    w.top_k = 4;
    check_case("top-k 5 (vs 4)", &p, &w, NULL, 0);
}

static void test_top_p(void) {
    /* top-p 0.66 keeps 5 tokens (.651 at 4); 0.74 would keep 6, 0.58 four */
    brisk_sampler_params p = plain(1.0f), w = p;
    p.top_p = 0.66f, w.top_p = 0.74f;
    check_case("top-p 0.66", &p, &w, NULL, 0);
    p.temp = 0.5f, w = p, w.top_p = 0.58f;
    check_case("top-p 0.66, temp 0.5", &p, &w, NULL, 0);
}

static void test_min_p(void) {
    /* relative to the top token at temperature 1: exp(l - 2) >= min_p */
    brisk_sampler_params p = plain(0.9f), w = p;
    p.min_p = 0.2f, w.min_p = 0.3f; /* 0.2 keeps logits >= 2 + ln 0.2 = 0.39: 7 tokens; 0.3: 5 */
    check_case("min-p 0.2, temp 0.9", &p, &w, NULL, 0);
    p.min_p = 0.05f, w = p, w.temp = 0.9f * 1.15f;
    check_case("min-p 0.05", &p, &w, NULL, 0);
}

static void test_chain_defaults(void) {
    brisk_sampler_params p = brisk_sampler_default_params(), w; /* temp .8, top-k 40, top-p .95, min-p .05 */
    p.seed = 7;
    w = p, w.top_p = 1.0f;
    check_case("llama.cpp's defaults", &p, &w, NULL, 0);
    p.top_k = 3, w = p, w.temp = 0.8f * 1.15f;
    check_case("defaults, top-k 3", &p, &w, NULL, 0);
}

/* Penalties on a history with repeats, a token of negative logit and one that fell out of
 * the window (repeat_last_n): each against the chain without that penalty. */
static void test_penalties(void) {
    static const int hist[] = {4, 0, 0, 11, 7, 0, 1, 11};
    int n = (int)(sizeof hist / sizeof *hist);
    brisk_sampler_params p = plain(1.0f), w;
    p.repeat_penalty = 1.5f, p.repeat_last_n = 7; /* token 4 is out of the window */
    w = p, w.repeat_penalty = 1.0f;
    check_case("repeat penalty 1.5", &p, &w, hist, n);
    w = p, w.repeat_last_n = 8;
    check_case("repeat window 7 (vs 8)", &p, &w, hist, n);
    p = plain(1.0f), p.frequency_penalty = 0.3f, p.presence_penalty = 0.4f, p.repeat_last_n = 64;
    w = p, w.frequency_penalty = 0;
    check_case("frequency 0.3, presence 0.4", &p, &w, hist, n);
    w = p, w.presence_penalty = 0;
    check_case("presence (vs none)", &p, &w, hist, n);
}

/* A grammar's mask over stories260K's 512-token vocabulary: tokens it removes are never
 * drawn, the others in the chain's proportions (softmax over the allowed tokens only). */
static void test_grammar_mask(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/data/stories260K/stories260K.gguf", test_shared_dir());
    if (!test_need_file(path)) return;
    brisk_model_params mp = brisk_model_default_params();
    mp.vocab_only = true;
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(path, &mp, &m));
    if (!m) return;
    int nv = brisk_n_vocab(m), n_allowed = 0;
    brisk_grammar *g = NULL;
    CHECK_OK(brisk_grammar_new(m, "root ::= [a-e] [a-z]*\n", NULL, &g));
    const uint32_t *mask = g ? grammar_mask(g, &n_allowed) : NULL;
    CHECK(mask && n_allowed > 1);
    float *lg = malloc((size_t)nv * sizeof *lg);
    int *counts = calloc((size_t)nv, sizeof *counts), *ids = malloc((size_t)nv * sizeof *ids);
    if (!mask || !lg || !counts || !ids || n_allowed < 2) goto out;
    /* logits that favour tokens the grammar removes, so a leak shows */
    int n_ok = 0;
    for (int t = 0; t < nv; t++) {
        bool ok = mask[t >> 5] >> (t & 31) & 1;
        lg[t] = ok ? (float)((t * 7) % 11) * 0.1f : 3.0f;
        if (ok) ids[n_ok++] = t;
    }
    CHECK(n_ok == n_allowed);
    brisk_sampler_params p = plain(1.0f);
    brisk_sampler *s = NULL;
    CHECK_OK(brisk_sampler_new(&p, nv, &s));
    if (!s) goto out;
    brisk_sampler_set_grammar(s, g); /* the sampler owns it now */
    g = NULL;
    int leaked = 0;
    for (int i = 0; i < N_DRAWS; i++) {
        brisk_token t = brisk_sampler_sample(s, lg);
        if (t < 0 || t >= nv || !(mask[t >> 5] >> (t & 31) & 1)) leaked++;
        else counts[t]++;
    }
    double z = 0, x = 0, xw = 0;
    for (int i = 0; i < n_ok; i++) z += exp(lg[ids[i]]);
    for (int i = 0; i < n_ok; i++) {
        double e = exp(lg[ids[i]]) / z * N_DRAWS, ew = (double)N_DRAWS / n_ok; /* wrong: uniform */
        x += (counts[ids[i]] - e) * (counts[ids[i]] - e) / e;
        xw += (counts[ids[i]] - ew) * (counts[ids[i]] - ew) / ew;
    }
    printf("  grammar mask: %d of %d tokens allowed, %d draws outside, chi2 %.1f (df %d, bound %.1f); "
           "uniform over them: %.1f\n", n_ok, nv, leaked, x, n_ok - 1, chi2_crit(n_ok - 1), xw);
    CHECK(leaked == 0);
    CHECK(x <= chi2_crit(n_ok - 1));
    CHECK(xw > chi2_crit(n_ok - 1));
    brisk_sampler_free(s);
out:
    brisk_grammar_free(g);
    free(lg);
    free(counts);
    free(ids);
    brisk_model_free(m);
}

/* ---- speculative decoding ---- */

#define SPEC_K 4 /* top-k of the chain: 4 x 4 x 4 joint outcomes of the first three tokens */

typedef struct {
    brisk_token tok[3];
    int n;
} spec_rec;
static bool spec_emit3(void *user, brisk_token t) {
    spec_rec *r = user;
    if (r->n == 3) return false;
    r->tok[r->n++] = t;
    return true;
}

/* The chain's top-SPEC_K tokens after ctx's sequence 0 plus toks (n of them, decoded then cut
 * back), at temperature 1: ids, probabilities (exact, in double) and the argmax (the greedy
 * drafter's pick). */
static void spec_dist(brisk_context *ctx, int nv, const brisk_token *prompt, int np, const brisk_token *toks,
                      int n, int *ids, double *p) {
    brisk_batch_entry b[16];
    int m = 0;
    for (int i = 0; i < np; i++) b[m] = (brisk_batch_entry){prompt[i], m, 0, false}, m++;
    for (int i = 0; i < n; i++) b[m] = (brisk_batch_entry){toks[i], m, 0, false}, m++;
    b[m - 1].logits = true;
    CHECK_OK(brisk_seq_clear(ctx, 0));
    CHECK_OK(brisk_decode(ctx, b, m));
    const float *lg = brisk_get_logits(ctx, m - 1);
    for (int j = 0; j < SPEC_K; j++) { /* the j-th largest; ties to the lower id */
        int best = -1;
        for (int v = 0; lg && v < nv; v++) {
            bool taken = false;
            for (int q = 0; q < j; q++) taken |= ids[q] == v;
            if (!taken && (best < 0 || lg[v] > lg[best])) best = v;
        }
        ids[j] = best;
    }
    double z = 0;
    for (int j = 0; lg && j < SPEC_K; j++) z += (p[j] = exp((double)lg[ids[j]] - lg[ids[0]]));
    for (int j = 0; j < SPEC_K; j++) p[j] = lg ? p[j] / z : 0;
}

/* A verifier that, where its draw rejects the draft (rank 0 of p), draws again from all of p:
 * the probability of rank r. */
static double redraw(const double *p, int r) { return r == 0 ? p[0] + (1 - p[0]) * p[0] : (1 - p[0]) * p[r]; }

/* The first three tokens of spec_generate with a draft model (stories260K drafting for itself,
 * greedily: drafts that the target's draws accept with p(d) and reject otherwise, both often),
 * temperature 1 and top-k 4, over many runs, against the target's exact joint distribution
 * p(t1) p(t2 | t1) p(t3 | t1 t2) by chi-square. Token 2 is the first one verified against a
 * draft, token 3 comes from the draft's position when token 2 accepted it. The same counts must
 * reject a verifier that, after an accepted draft, keeps the next draft without a draw. */
static void test_speculative_distribution(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/data/stories260K/stories260K.gguf", test_shared_dir());
    if (!test_need_file(path)) return;
    bool san = getenv("SAN") && !strcmp(getenv("SAN"), "1");
    const int n_runs = san ? 2000 : 10000; /* SAN: memory errors and a coarser check */
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(path, NULL, &m));
    if (!m) return;
    int nv = brisk_n_vocab(m);
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = 32;
    cp.n_threads = 1;
    brisk_context *target = NULL, *draft = NULL, *ref = NULL;
    brisk_sampler *smp = NULL;
    CHECK_OK(brisk_context_new(m, &cp, &target));
    CHECK_OK(brisk_context_new(m, &cp, &draft));
    CHECK_OK(brisk_context_new(m, &cp, &ref));
    brisk_sampler_params sp = plain(1.0f);
    sp.top_k = SPEC_K;
    CHECK_OK(brisk_sampler_new(&sp, nv, &smp));
    int *counts = calloc(SPEC_K * SPEC_K * SPEC_K, sizeof *counts);
    if (!target || !draft || !ref || !smp || !counts) goto out;
    const brisk_token prompt[] = {1, 296}; /* BOS and a token after which the next is spread (top .32) */
    const int np = 2;
    /* the exact joint and the wrong verifier's, over (i1, i2, i3): ranks in each step's top-k */
    int id1[SPEC_K], id2[SPEC_K][SPEC_K], id3[SPEC_K][SPEC_K][SPEC_K];
    double p1[SPEC_K], p2[SPEC_K][SPEC_K], p3[SPEC_K][SPEC_K][SPEC_K];
    double q[SPEC_K * SPEC_K * SPEC_K], qw[SPEC_K * SPEC_K * SPEC_K], qr[SPEC_K * SPEC_K * SPEC_K];
    spec_dist(ref, nv, prompt, np, NULL, 0, id1, p1);
    for (int a = 0; a < SPEC_K; a++) {
        brisk_token t[2] = {id1[a], 0};
        spec_dist(ref, nv, prompt, np, t, 1, id2[a], p2[a]);
        for (int b = 0; b < SPEC_K; b++) {
            t[1] = id2[a][b];
            spec_dist(ref, nv, prompt, np, t, 2, id3[a][b], p3[a][b]);
            for (int c = 0; c < SPEC_K; c++) {
                int i = (a * SPEC_K + b) * SPEC_K + c;
                q[i] = p1[a] * p2[a][b] * p3[a][b][c];
                /* wrong: token 2 equal to the draft (rank 0, the greedy pick) keeps the draft's
                 * next token (rank 0 again) without a draw */
                qw[i] = p1[a] * p2[a][b] * (b == 0 ? (c == 0) : p3[a][b][c]);
                /* wrong: a rejected draft is drawn again (from p, not from p without the draft),
                 * at tokens 2 and 3, each verified against a draft (the greedy pick, rank 0) */
                qr[i] = p1[a] * redraw(p2[a], b) * redraw(p3[a][b], c);
            }
        }
    }
    int outside = 0;
    spec_stats total = {0};
    for (int r = 0; r < n_runs; r++) {
        CHECK_OK(brisk_seq_clear(target, 0));
        CHECK_OK(brisk_seq_clear(draft, 0));
        drafter *dr = NULL;
        CHECK_OK(drafter_new_model(draft, 0, nv, 0.0f, &dr));
        if (!dr) break;
        spec_rec rec = {{0}, 0};
        spec_stats st;
        brisk_status s = spec_generate(target, dr, smp, prompt, np, SPEC_K, 1, cp.n_ctx, spec_emit3, &rec, &st);
        drafter_free(dr);
        CHECK(s == BRISK_OK && rec.n == 3);
        if (s != BRISK_OK || rec.n != 3) break;
        total.drafted += st.drafted, total.accepted += st.accepted;
        int a = 0, b = 0, c = 0;
        while (a < SPEC_K && id1[a] != rec.tok[0]) a++;
        if (a < SPEC_K)
            while (b < SPEC_K && id2[a][b] != rec.tok[1]) b++;
        if (a < SPEC_K && b < SPEC_K)
            while (c < SPEC_K && id3[a][b][c] != rec.tok[2]) c++;
        if (a == SPEC_K || b == SPEC_K || c == SPEC_K) outside++;
        else counts[(a * SPEC_K + b) * SPEC_K + c]++;
    }
    int df = 0, dfw = 0, n = SPEC_K * SPEC_K * SPEC_K;
    int dfr = 0;
    double x = chi2_bins(counts, q, n, n_runs, 5, &df), xw = chi2_bins(counts, qw, n, n_runs, 5, &dfw),
           xr = chi2_bins(counts, qr, n, n_runs, 5, &dfr);
    printf("  speculative, %d runs: p(t1) top %.2f, drafts %lld accepted %lld (%.0f%%), %d outside the top-k; "
           "chi2 %.1f (df %d, bound %.1f); a rejected draft drawn again: %.1f (bound %.1f); a draw skipped after "
           "an accepted draft: %s%.1f\n",
           n_runs, p1[0], (long long)total.drafted, (long long)total.accepted,
           total.drafted ? 100.0 * total.accepted / total.drafted : 0.0, outside, x, df, chi2_crit(df > 0 ? df : 1),
           xr, chi2_crit(dfr > 0 ? dfr : 1), isinf(xw) ? "draws it never makes " : "", isinf(xw) ? 0.0 : xw);
    CHECK(dfr > 0 && xr > chi2_crit(dfr));
    CHECK(outside == 0);
    CHECK(total.accepted > 0 && total.accepted < total.drafted); /* both branches of the verifier ran */
    CHECK(df > 0 && x <= chi2_crit(df));
    CHECK(isinf(xw) || (dfw > 0 && xw > chi2_crit(dfw)));
out:
    free(counts);
    brisk_sampler_free(smp);
    brisk_context_free(ref);
    brisk_context_free(draft);
    brisk_context_free(target);
    brisk_model_free(m);
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"temperature", test_temperature}, {"top_k", test_top_k},       {"top_p", test_top_p},
        {"min_p", test_min_p},             {"defaults", test_chain_defaults}, {"penalties", test_penalties},
        {"grammar_mask", test_grammar_mask}, {"speculative_distribution", test_speculative_distribution},
    };
    return test_main(cases, sizeof cases / sizeof *cases, argc, argv);
}
