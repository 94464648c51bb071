/* atomic_file.c — write a temporary file beside the target, fsync, rename into
 * place. See atomic_file.h for why each step is there. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/status.h"

/* Temporary and scratch files that exist right now, for the signal handler
 * to remove. A slot is claimed (2) while its path is copied in and only then
 * published (1), so the handler never reads a half-written path. Two are
 * live at most (a mix's skeleton and its writer's temporary file). */
enum { LIVE_SLOTS = 4 };
static struct {
    atomic_int state; /* 0 free, 2 filling, 1 live */
    char path[PATH_MAX];
} live[LIVE_SLOTS];

/* Registers path; -1 (no cleanup on a signal, nothing worse) if it does not fit. */
static int live_add(const char *path) {
    if (strlen(path) >= PATH_MAX) return -1;
    for (int i = 0; i < LIVE_SLOTS; i++) {
        int expect = 0;
        if (atomic_compare_exchange_strong(&live[i].state, &expect, 2)) {
            strcpy(live[i].path, path);
            atomic_store(&live[i].state, 1);
            return i;
        }
    }
    return -1;
}

static void live_del(int slot) {
    if (slot >= 0) atomic_store(&live[slot].state, 0);
}

static void on_signal(int sig) {
    for (int i = 0; i < LIVE_SLOTS; i++)
        if (atomic_load(&live[i].state) == 1) unlink(live[i].path); /* async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

void atomic_file_remove_on_signal(void) {
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

struct atomic_file {
    FILE *f;
    char *target; /* the path as given, for messages */
    char *dest;   /* where the rename lands: target, or the file a symlink target points to */
    char *tmp;    /* DEST.tmp.XXXXXX; NULL when writing directly (target not a regular file) */
    int slot;     /* in live, or -1 */
};

static void af_free(atomic_file *af) {
    free(af->target);
    free(af->dest);
    free(af->tmp);
    free(af);
}

/* Creates PATH + suffix + six hex digits, new (O_EXCL), with mode less the
 * umask: mkstemp's way, but with a mode, so no umask has to be read (reading
 * it means setting it, a race with every other thread that creates files).
 * -1 and errno on failure. */
static int make_unique(const char *path, const char *suffix, mode_t mode, char **out) {
    static atomic_uint counter;
    size_t n = strlen(path) + strlen(suffix) + 7;
    char *p = malloc(n);
    if (!p) {
        errno = ENOMEM;
        return -1;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned seed = (unsigned)ts.tv_nsec ^ (unsigned)getpid() * 2654435761u;
    for (int tries = 0; tries < 1000; tries++) {
        unsigned r = (seed + atomic_fetch_add(&counter, 1) * 0x9e3779b9u) * 2246822519u;
        snprintf(p, n, "%s%s%06x", path, suffix, (r ^ r >> 15) & 0xffffff);
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
        if (fd >= 0) {
            *out = p;
            return fd;
        }
        if (errno != EEXIST) break;
    }
    int e = errno;
    free(p);
    errno = e;
    return -1;
}

brisk_status atomic_file_open(const char *target, atomic_file **out) {
    *out = NULL;
    if (!target || !*target) return bk_fail(BRISK_ERR_INVALID_ARG, "no output path");
    atomic_file *af = calloc(1, sizeof *af);
    if (!af || !(af->target = strdup(target))) {
        free(af);
        return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    af->slot = -1;
    struct stat st;
    if (lstat(target, &st) == 0 && S_ISLNK(st.st_mode)) af->dest = realpath(target, NULL);
    if (!af->dest && !(af->dest = strdup(target))) {
        af_free(af);
        return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    bool exists = stat(af->dest, &st) == 0;
    if (exists && !S_ISREG(st.st_mode)) {
        if (!(af->f = fopen(af->dest, "wb"))) {
            int e = errno;
            af_free(af);
            return bk_fail(BRISK_ERR_IO, "%s: cannot write: %s", target, strerror(e));
        }
        *out = af;
        return BRISK_OK;
    }
    /* The rename needs only the directory's permission; a target the user
     * cannot write stays as protected as it was when fopen opened it. */
    if (exists && access(af->dest, W_OK) != 0) {
        int e = errno;
        af_free(af);
        return bk_fail(BRISK_ERR_IO, "%s: cannot write: %s", target, strerror(e));
    }
    int fd = make_unique(af->dest, ".tmp.", 0666, &af->tmp); /* as fopen would create it */
    if (fd < 0) {
        int e = errno;
        af_free(af);
        return bk_fail(BRISK_ERR_IO, "%s: cannot create a temporary file beside it: %s", target, strerror(e));
    }
    af->slot = live_add(af->tmp);
    /* a replaced file keeps its permissions, as it did when fopen truncated it */
    if ((exists && fchmod(fd, st.st_mode & 07777) != 0) || !(af->f = fdopen(fd, "wb"))) {
        int e = errno;
        close(fd);
        unlink(af->tmp);
        live_del(af->slot);
        af_free(af);
        return bk_fail(BRISK_ERR_IO, "%s: cannot write a temporary file beside it: %s", target, strerror(e));
    }
    *out = af;
    return BRISK_OK;
}

FILE *atomic_file_stream(atomic_file *af) { return af->f; }

const char *atomic_file_target(const atomic_file *af) { return af->target; }

void atomic_file_abort(atomic_file *af) {
    if (!af) return;
    if (af->f) fclose(af->f);
    if (af->tmp) unlink(af->tmp);
    live_del(af->slot); /* after the unlink: a signal in between finds nothing left */
    af_free(af);
}

/* Makes the rename itself durable. Best effort: by now the target has been
 * replaced, so a failure here (some file systems refuse to fsync a directory)
 * must not be reported as if the target were untouched. */
static void sync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    (void)fsync(fd);
    close(fd);
}

brisk_status atomic_file_commit(atomic_file *af) {
    if (!af) return bk_fail(BRISK_ERR_INVALID_ARG, "atomic_file_commit: no file");
    int e = 0;
    if (ferror(af->f)) e = EIO;
    else if (fflush(af->f) != 0) e = errno ? errno : EIO;
    else if (af->tmp && fsync(fileno(af->f)) != 0) e = errno;
    if (fclose(af->f) != 0 && !e) e = errno ? errno : EIO;
    af->f = NULL;
    brisk_status s = BRISK_OK;
    if (e) s = bk_fail(BRISK_ERR_IO, "%s: write failed: %s", af->target, strerror(e));
    else if (af->tmp && rename(af->tmp, af->dest) != 0)
        s = bk_fail(BRISK_ERR_IO, "%s: cannot rename %s over it: %s", af->target, af->tmp, strerror(errno));
    else if (af->tmp) {
        live_del(af->slot); /* only now: up to the rename a signal removes the temporary file */
        af->slot = -1;
        free(af->tmp);
        af->tmp = NULL; /* published: nothing left to remove */
        sync_dir(af->dest);
    }
    atomic_file_abort(af);
    return s;
}

brisk_status atomic_file_check_distinct(const char *cmd, const char *target, const char *const *inputs, int n) {
    struct stat t, in;
    if (!target || stat(target, &t) != 0) return BRISK_OK; /* nothing there yet: nothing to lose */
    for (int i = 0; i < n; i++)
        if (inputs[i] && stat(inputs[i], &in) == 0 && in.st_dev == t.st_dev && in.st_ino == t.st_ino)
            return bk_fail(BRISK_ERR_INVALID_ARG, "%s: output %s is the input file %s; write to another path", cmd,
                           target, inputs[i]);
    return BRISK_OK;
}

brisk_status atomic_file_scratch(const char *near, char **path) {
    *path = NULL;
    int fd = make_unique(near, ".scratch.", 0600, path);
    if (fd < 0) return bk_fail(BRISK_ERR_IO, "%s: cannot create a scratch file beside it: %s", near, strerror(errno));
    close(fd);
    live_add(*path);
    return BRISK_OK;
}

void atomic_file_scratch_remove(char *path) {
    if (!path) return;
    unlink(path);
    for (int i = 0; i < LIVE_SLOTS; i++)
        if (atomic_load(&live[i].state) == 1 && !strcmp(live[i].path, path)) live_del(i);
    free(path);
}
