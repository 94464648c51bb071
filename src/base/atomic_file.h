/* atomic_file.h — files that every brisk command that writes a file the user
 * names (quantize, convert, synth, calibrate, perplexity's logits file) goes
 * through, so that no command ever destroys data:
 *
 *   - the bytes go to a new temporary file beside the target
 *     (TARGET.tmp.XXXXXX, same directory, so the rename stays within one file
 *     system and is atomic); commit flushes and fsyncs it, renames it over
 *     the target and fsyncs the directory. Until then the target is
 *     untouched; a failed or abandoned write removes the temporary file.
 *   - the target is never truncated in place. Renaming over a file that
 *     another process has mapped (a running `brisk serve`) is safe: the old
 *     inode lives on, unlinked, for as long as the mapping does, so the
 *     server keeps its weights. Truncating it instead (fopen "wb") makes
 *     the server's next touch of the lost pages a SIGBUS.
 *   - atomic_file_check_distinct refuses an output that is one of the
 *     command's inputs (same device and inode: the same path, a hard link or
 *     a symlink to it); the rename would otherwise throw the input away.
 *
 * A target that exists and is not a regular file (/dev/null, a FIFO) is
 * written directly: there is nothing to replace atomically, and renaming
 * over a device node would be wrong. A symlink target is resolved, so the
 * file it points to is replaced and the link stays.
 *
 * Ownership: an atomic_file owns its FILE and its temporary file;
 * atomic_file_commit and atomic_file_abort both free it. */
#ifndef BK_ATOMIC_FILE_H
#define BK_ATOMIC_FILE_H
#include <stdio.h>
#include "brisk.h"

typedef struct atomic_file atomic_file;

/* Creates the temporary file beside target, open for binary writing. The
 * published file gets the target's permission bits if it exists, else
 * 0666 less the umask, as fopen would give it. */
brisk_status atomic_file_open(const char *target, atomic_file **out);
FILE *atomic_file_stream(atomic_file *af);       /* owned by af */
const char *atomic_file_target(const atomic_file *af);
/* Flush, fsync, close, rename over the target, fsync the directory. Frees af
 * whatever happens; on failure the temporary file is removed and the target is
 * as it was. A write error already seen on the stream fails the commit. */
brisk_status atomic_file_commit(atomic_file *af);
/* Closes and removes the temporary file; the target is untouched. NULL is fine. */
void atomic_file_abort(atomic_file *af);

/* Fails with "CMD: output TARGET is the input file INPUT; write to another
 * path" if target exists and is the same file as one of the n inputs (NULL
 * entries are skipped; inputs that cannot be stat'ed are left to the code
 * that opens them). Call it before any expensive work. */
brisk_status atomic_file_check_distinct(const char *cmd, const char *target, const char *const *inputs, int n);

/* A new empty scratch file beside near (NEAR.scratch.XXXXXX), for data that
 * must sit in a file only for a moment; *path (malloc'd) goes back through
 * atomic_file_scratch_remove, which removes the file and frees it (NULL is fine). */
brisk_status atomic_file_scratch(const char *near, char **path);
void atomic_file_scratch_remove(char *path);

/* Installs SIGINT, SIGTERM and SIGHUP handlers that remove every temporary and
 * scratch file open at that moment, then die of the signal as before. For
 * the CLI's commands that write files; a library never calls it (the
 * process's signal dispositions are its host's). SIGKILL cannot be caught:
 * it leaves TARGET.tmp.XXXXXX behind, and the target still untouched. */
void atomic_file_remove_on_signal(void);

#endif
