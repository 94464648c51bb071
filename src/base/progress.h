/* progress.h — the one progress display of brisk's long jobs (load, convert, quantize, synth,
 * calibrate, perplexity, pull): on a terminal a line on stderr redrawn in place at most ten times
 * a second; off a terminal no live line, and the job's summary (progress_end) is a plain line.
 *
 * A progress is a plain struct the caller owns (no allocation). Not thread-safe: one thread draws
 * (the others can count in atomics that the drawing thread reads). */
#ifndef BK_PROGRESS_H
#define BK_PROGRESS_H
#include <stdbool.h>

#include "base/status.h" /* BK_PRINTF */

typedef struct progress {
    const char *label; /* "label: " opens every line; NULL: nothing is drawn at all */
    bool tty;          /* stderr is a terminal: live lines */
    bool drawn;        /* a live line is on the screen */
    double t0, last;   /* seconds (monotonic): the start, the last redraw */
} progress;

/* Starts p; label NULL keeps it quiet (a library caller that was asked for no output). */
void progress_begin(progress *p, const char *label);
/* Seconds since progress_begin. */
double progress_elapsed(const progress *p);
/* On a terminal, redraws "label: <text>" when 0.1 s have passed since the last redraw (or force). */
void progress_update(progress *p, bool force, const char *fmt, ...) BK_PRINTF(3, 4);
/* Erases the live line (a line of the caller's own takes its place). */
void progress_clear(progress *p);
/* Ends the live line, left as it was last drawn. fmt non-NULL: then "label: <text>" as a line of its own, terminal or not
 * (the summary); NULL: only the live line is ended. */
void progress_end(progress *p, const char *fmt, ...) BK_PRINTF(2, 3);
#endif
