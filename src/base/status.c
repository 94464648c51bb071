#include "base/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[512];

brisk_status bk_fail(brisk_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

brisk_status bk_wrap(brisk_status s, const char *fmt, ...) {
    char prefix[256], old[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    snprintf(last_error, sizeof last_error, "%s: %s", prefix, old);
    return s;
}

void bk_clear_error(void) { last_error[0] = 0; }

const char *brisk_last_error(void) { return last_error; }

const char *brisk_status_str(brisk_status s) {
    switch (s) {
    case BRISK_OK: return "ok";
    case BRISK_ERR_INVALID_ARG: return "invalid argument";
    case BRISK_ERR_IO: return "i/o error";
    case BRISK_ERR_FORMAT: return "format error";
    case BRISK_ERR_UNSUPPORTED: return "unsupported";
    case BRISK_ERR_NOMEM: return "out of memory";
    case BRISK_ERR_RANGE: return "out of range";
    case BRISK_ERR_NOT_FOUND: return "not found";
    case BRISK_ERR_BACKEND: return "backend error";
    }
    return "unknown status";
}
