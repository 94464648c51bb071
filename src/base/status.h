/* status.h — error reporting for library code.
 * bk_fail() records a formatted one-line message in a thread-local buffer and
 * returns the status, so callers write `return bk_fail(BRISK_ERR_FORMAT, "...")`.
 * The message is read back with brisk_last_error(). */
#ifndef BK_STATUS_H
#define BK_STATUS_H
#include "brisk.h"

#if defined(__GNUC__)
#define BK_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define BK_PRINTF(a, b)
#endif

brisk_status bk_fail(brisk_status s, const char *fmt, ...) BK_PRINTF(2, 3);
/* Prefixes the current message with "context: " and returns s unchanged. */
brisk_status bk_wrap(brisk_status s, const char *fmt, ...) BK_PRINTF(2, 3);
void bk_clear_error(void);

/* Propagate a failing status. */
#define BK_TRY(expr)                                  \
    do {                                              \
        brisk_status bk_try_s_ = (expr);              \
        if (bk_try_s_ != BRISK_OK) return bk_try_s_;  \
    } while (0)

#endif
