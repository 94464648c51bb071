/* progress.c — the progress line of progress.h. */
#include "base/progress.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void progress_begin(progress *p, const char *label) {
    *p = (progress){.label = label, .tty = label && isatty(2), .t0 = now_s()};
    p->last = p->t0 - 1; /* the first update draws */
}

double progress_elapsed(const progress *p) { return now_s() - p->t0; }

void progress_update(progress *p, bool force, const char *fmt, ...) {
    if (!p->tty) return;
    double t = now_s();
    if (!force && t - p->last < 0.1) return;
    p->last = t;
    /* \033[K clears what a longer previous line left */
    fprintf(stderr, "\r\033[K%s: ", p->label);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fflush(stderr);
    p->drawn = true;
}

void progress_clear(progress *p) {
    if (p->drawn) fputs("\r\033[K", stderr);
    p->drawn = false;
}

void progress_end(progress *p, const char *fmt, ...) {
    if (!p->label) return;
    if (p->drawn) fputs(fmt ? "\r\033[K" : "\n", stderr);
    p->drawn = false;
    if (!fmt) return;
    fprintf(stderr, "%s: ", p->label);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}
