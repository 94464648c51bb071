/* test_atomic_file.c — base/atomic_file: the target is replaced whole or not
 * at all, never truncated under a process that maps it, never one of the
 * inputs; failures and signals leave no temporary file. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "brisk.h"
#include "test.h"

static char dir_[256];

static const char *path_of(const char *name) {
    static char p[16][512]; /* a ring: a test holds a few paths at once */
    static int k;
    if (!dir_[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(dir_, sizeof dir_, "%s/brisk_afile_XXXXXX", t ? t : "/tmp");
        if (!mkdtemp(dir_)) abort();
    }
    k = (k + 1) % 16;
    snprintf(p[k], sizeof p[k], "%s/%s", dir_, name);
    return p[k];
}

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

static bool holds(const char *path, const char *text) {
    char *s = test_read_file(path, NULL);
    bool ok = s && !strcmp(s, text);
    free(s);
    return ok;
}

/* Entries of the test directory besides the ones named (temporary files left over). */
static int n_entries(void) {
    DIR *d = opendir(dir_);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

static brisk_status write_text(const char *path, const char *text) {
    atomic_file *af = NULL;
    brisk_status s = atomic_file_open(path, &af);
    if (s != BRISK_OK) return s;
    fputs(text, atomic_file_stream(af));
    return atomic_file_commit(af);
}

static void test_commit_and_abort(void) {
    const char *t = path_of("a.bin");
    mode_t old = umask(022);
    CHECK_OK(write_text(t, "one"));
    struct stat st;
    CHECK(stat(t, &st) == 0 && (st.st_mode & 0777) == 0644); /* as fopen would have made it */
    CHECK(holds(t, "one") && n_entries() == 1);
    chmod(t, 0600);
    CHECK_OK(write_text(t, "two"));
    CHECK(stat(t, &st) == 0 && (st.st_mode & 0777) == 0600); /* the old file's permissions carry over */
    CHECK(holds(t, "two") && n_entries() == 1);
    atomic_file *af = NULL;
    CHECK_OK(atomic_file_open(t, &af));
    fputs("three", atomic_file_stream(af));
    CHECK(n_entries() == 2 && holds(t, "two")); /* the bytes go beside the target */
    atomic_file_abort(af);
    CHECK(holds(t, "two") && n_entries() == 1);
    atomic_file_abort(NULL);
    umask(old);
    unlink(t);
}

static void test_failures_leave_target(void) {
    const char *t = path_of("b.bin");
    put(t, "keep");
    /* a write error the stream saw (here: reading a write-only stream sets its error flag) fails the commit */
    atomic_file *af = NULL;
    CHECK_OK(atomic_file_open(t, &af));
    FILE *f = atomic_file_stream(af);
    fputs("lost", f);
    char c;
    CHECK(fread(&c, 1, 1, f) == 0 && ferror(f));
    CHECK(atomic_file_commit(af) == BRISK_ERR_IO);
    CHECK(holds(t, "keep") && n_entries() == 1);
    CHECK(write_text(path_of("no/such/dir/x.bin"), "x") == BRISK_ERR_IO);
    CHECK(strstr(brisk_last_error(), "temporary file") != NULL);
    CHECK(write_text(dir_, "x") != BRISK_OK); /* a directory is not replaced */
    CHECK(n_entries() == 1);
    if (geteuid() != 0) { /* root writes anything: the check means nothing there */
        chmod(t, 0444);
        CHECK(write_text(t, "over") == BRISK_ERR_IO);
        CHECK(holds(t, "keep"));
    }
    unlink(t);
}

/* The bug this module fixes: writing over a model that another process maps.
 * The mapping keeps reading the old bytes (a truncation would SIGBUS it). */
static void test_mapped_target(void) {
    const char *t = path_of("c.bin");
    char big[8192];
    memset(big, 'o', sizeof big - 1);
    big[sizeof big - 1] = 0;
    put(t, big);
    FILE *f = fopen(t, "rb");
    const char *map = f ? mmap(NULL, sizeof big - 1, PROT_READ, MAP_SHARED, fileno(f), 0) : MAP_FAILED;
    if (f) fclose(f);
    CHECK(map != MAP_FAILED);
    if (map == MAP_FAILED) return;
    CHECK_OK(write_text(t, "n"));
    CHECK(holds(t, "n"));
    CHECK(map[0] == 'o' && map[sizeof big - 2] == 'o'); /* the last page too */
    munmap((void *)map, sizeof big - 1);
    unlink(t);
}

static void test_links_and_devices(void) {
    const char *t = path_of("d.bin"), *l = path_of("d.link");
    put(t, "target");
    CHECK(symlink("d.bin", l) == 0);
    CHECK_OK(write_text(l, "via link")); /* the file it points to is replaced; the link stays */
    struct stat st;
    CHECK(lstat(l, &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(holds(t, "via link") && n_entries() == 2);
    CHECK_OK(write_text("/dev/null", "x")); /* written directly: never renamed over */
    CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
    unlink(l);
    unlink(t);
}

static void test_check_distinct(void) {
    const char *in = path_of("in.gguf"), *hard = path_of("hard.gguf"), *sym = path_of("sym.gguf");
    const char *other = path_of("other.gguf"), *none = path_of("none.gguf");
    put(in, "model");
    put(other, "other");
    CHECK(link(in, hard) == 0 && symlink("in.gguf", sym) == 0);
    const char *inputs[3] = {NULL, path_of("missing"), in};
    CHECK(atomic_file_check_distinct("quantize", in, inputs, 3) == BRISK_ERR_INVALID_ARG);
    CHECK(strstr(brisk_last_error(), "quantize: output ") && strstr(brisk_last_error(), "is the input file"));
    CHECK(atomic_file_check_distinct("quantize", hard, inputs, 3) == BRISK_ERR_INVALID_ARG);
    CHECK(atomic_file_check_distinct("quantize", sym, inputs, 3) == BRISK_ERR_INVALID_ARG);
    CHECK_OK(atomic_file_check_distinct("quantize", other, inputs, 3));
    CHECK_OK(atomic_file_check_distinct("quantize", none, inputs, 3));
    CHECK_OK(atomic_file_check_distinct("quantize", in, inputs, 0));
    CHECK(holds(in, "model"));
    unlink(sym), unlink(hard), unlink(other), unlink(in);
}

static void test_scratch_and_signal(void) {
    char *s = NULL;
    CHECK_OK(atomic_file_scratch(path_of("e.gguf"), &s));
    CHECK(s && strstr(s, "e.gguf.scratch.") && access(s, F_OK) == 0);
    atomic_file_scratch_remove(s);
    CHECK(n_entries() == 0);
    atomic_file_scratch_remove(NULL);
    /* a child killed by SIGTERM in the middle of writing leaves nothing behind */
    const char *t = path_of("f.bin");
    put(t, "old");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        atomic_file_remove_on_signal();
        atomic_file *af = NULL;
        char *sc = NULL;
        if (atomic_file_open(t, &af) != BRISK_OK || atomic_file_scratch(t, &sc) != BRISK_OK) _exit(3);
        fputs("half", atomic_file_stream(af));
        raise(SIGTERM);
        _exit(4); /* not reached */
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM); /* it still dies of the signal */
    CHECK(holds(t, "old") && n_entries() == 1);
    unlink(t);
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"commit_and_abort", test_commit_and_abort},
        {"failures_leave_target", test_failures_leave_target},
        {"mapped_target", test_mapped_target},
        {"links_and_devices", test_links_and_devices},
        {"check_distinct", test_check_distinct},
        {"scratch_and_signal", test_scratch_and_signal},
    };
    int rc = test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
    rmdir(dir_);
    return rc;
}
