/* common.h — helpers shared by the subcommands: strict number parsing,
 * reading files, time, memory. */
#ifndef BK_CLI_COMMON_H
#define BK_CLI_COMMON_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Parse the value of flag `flag`; on failure print an error and return false. */
bool cli_int(const char *flag, const char *s, long lo, long hi, int *out);
bool cli_u64(const char *flag, const char *s, uint64_t *out);
bool cli_float(const char *flag, const char *s, double lo, double hi, float *out);
/* Returns the next argument after argv[*i] or NULL (and prints an error). */
const char *cli_next(int argc, char **argv, int *i);
/* Reads a whole file or stdin (path "-") into a NUL-terminated buffer; caller frees. */
char *cli_read_all(const char *path, size_t *len);
/* Tokenizes text into a new array (caller frees *ids); prints the error and
 * returns false on failure. */
struct brisk_model;
bool cli_tokenize(const struct brisk_model *m, const char *text, size_t len, bool add_special,
                  bool parse_special, int32_t **ids, int64_t *n);
double cli_now(void);         /* seconds, monotonic */
double cli_peak_rss_mb(void); /* peak resident set size */
int cli_default_threads(void);
#endif
