/* kld.h — the base-logits file of `brisk perplexity --kl-divergence-base`
 * and the statistics of `--kl-divergence` against it.
 *
 * The layout is llama-perplexity's (--kl-divergence-base, as its source
 * tools/perplexity/perplexity.cpp reads and writes it), so that either program
 * may read what the other wrote (not yet tried against its binary). All fields
 * little-endian:
 *
 *   char     magic[8]   "_logits_"
 *   uint32   n_ctx      tokens per chunk
 *   int32    n_vocab    logits per position
 *   int32    n_chunk
 *   int32    tokens[n_chunk * n_ctx]   the text as evaluated (the first token of
 *                                      each chunk is replaced by BOS when the model adds one)
 *   then for each chunk, for each scored position i in [n_ctx / 2, n_ctx - 1)
 *   (the logits that predict token i + 1), one record of nv = 2 * ((n_vocab + 1) / 2) + 4 uint16:
 *     float  scale, min_lp   (the first 4 uint16)
 *     uint16 q[n_vocab]      (then padding to nv)
 *   where log p(v) = scale * q[v] + min_lp. Log-probabilities more than 16 nats
 *   under the top one are clamped to it (q = 0): 16 bits cover a span of 16 nats.
 *   brisk then appends what the records cannot hold, which llama-perplexity
 *   (reading no further than its records) ignores:
 *   char     magic[8]   "_nll_f64"
 *   double   nll[n_chunk * (n_ctx - 1 - n_ctx / 2)]   -log p(next token), unclamped
 *   so that PPL(base) is the base run's perplexity even where the text holds
 *   tokens the model finds very unlikely (clamped, they would lower it).
 *
 * Ownership: a kld_writer owns a temporary file beside its path (an
 * atomic_file, base/atomic_file.h) until
 * kld_writer_close publishes it (rename: the path is replaced whole or not at
 * all); a kld_base owns its open file and the token array. Functions that
 * return bool print a one-line error (cli_error) on failure. */
#ifndef BK_CLI_KLD_H
#define BK_CLI_KLD_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* uint16 per record: the two floats, the log-probabilities, padding to an even count. */
static inline size_t kld_record_len(int n_vocab) { return 2 * (((size_t)n_vocab + 1) / 2) + 4; }

/* Encodes one position's logits (n_vocab) as a record (kld_record_len uint16). */
void kld_encode(const float *logits, int n_vocab, uint16_t *rec);
/* -log p(next) from one position's logits: the perplexity's term, in double. */
double kld_nll(const float *logits, int n_vocab, int32_t next);

typedef struct kld_writer kld_writer;
/* Starts the file: header and tokens (n_chunk * n_ctx), into PATH.tmp.XXXXXX. At most
 * n_chunk * (n_ctx - 1 - n_ctx / 2) positions follow. */
bool kld_writer_open(const char *path, int n_ctx, int n_vocab, int n_chunk, const int32_t *tokens,
                     kld_writer **out);
/* Appends one position's record (encoded from its logits); nll: its kld_nll, for the trailer. */
bool kld_writer_add(kld_writer *w, const float *logits, double nll);
/* commit: writes the trailer, flushes, syncs and renames onto the path (false, with a message, if any of it or an
 * earlier write failed). Else (or on failure) the temporary file is removed. Frees w; NULL is a no-op. */
bool kld_writer_close(kld_writer *w, bool commit);

typedef struct kld_base {
    int n_ctx, n_vocab, n_chunk; /* n_chunk: those compared (the file may hold more) */
    int32_t *tokens;             /* (n_chunk * n_ctx) */
    double *nll;                 /* (n_chunk * (n_ctx - 1 - n_ctx / 2)) the trailer's, or NULL (llama-perplexity's file) */
    int64_t next;                /* records read */
    void *f;                     /* FILE *, at the next record */
    const char *path;
} kld_base;
/* Opens and checks a base file: the header, its size for the chunks compared (all, or the first
 * n_chunks_max when > 0) and every token id against its n_vocab (the caller compares that with
 * the model's); reads the tokens and the trailer. */
bool kld_base_open(const char *path, int n_chunks_max, kld_base *b);
/* Reads the next record (kld_record_len(b->n_vocab) uint16) and its position's unclamped -log
 * p(next) (from the record when the file has no trailer). */
bool kld_base_read(kld_base *b, uint16_t *rec, double *nll);
void kld_base_close(kld_base *b);

/* Running sums over positions: the current run's logits against the base's record. */
typedef struct kld_stats {
    double nll, nll2, nll_b, nll_b2, nll_nll_b; /* -log p(next token): current, base */
    double kld, kld2;
    double dp, dp2, dp4;                        /* p(next) current - base */
    int64_t n, same_top;
    float *klds;                                /* (cap) each position's KLD, for percentiles */
    int64_t cap;
} kld_stats;
/* One position: the base's record and -log p(next), the current logits. scratch: a record's
 * worth of uint16 (the current logits encoded). */
void kld_stats_add(kld_stats *s, const uint16_t *base_rec, double nll_base, const float *logits, int n_vocab,
                   int32_t next, uint16_t *scratch);
/* One line of running values after a chunk (llama-perplexity's columns); the header when chunk is 0. */
void kld_stats_print_chunk(const kld_stats *s, int chunk);
/* The final report on stdout. */
void kld_stats_print(const kld_stats *s);
#endif
