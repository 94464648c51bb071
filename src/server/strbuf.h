/* strbuf.h — a growable byte buffer for building responses. The buffer owns
 * its bytes (sb_free); after an allocation failure `failed` is set and further
 * appends are dropped, so callers check once at the end. */
#ifndef BK_SERVER_STRBUF_H
#define BK_SERVER_STRBUF_H
#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

typedef struct strbuf {
    char *p;      /* (cap) NUL-terminated when len > 0 */
    size_t len, cap;
    bool failed;
} strbuf;

void sb_append(strbuf *b, const char *s, size_t n);
void sb_puts(strbuf *b, const char *s);
void sb_printf(strbuf *b, const char *fmt, ...) BK_PRINTF(2, 3);
void sb_reset(strbuf *b); /* len = 0, keeps the memory */
void sb_free(strbuf *b);
/* Moves the bytes out (caller frees; "" when empty), leaving b empty. NULL on failure. */
char *sb_take(strbuf *b);
#endif
