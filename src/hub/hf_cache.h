/* hf_cache.h — the Hugging Face hub's local cache, in huggingface_hub's own
 * layout so that brisk, llama.cpp and the Python tools share one copy of
 * every file:
 *
 *   ROOT = $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub,
 *          else ~/.cache/huggingface/hub
 *   ROOT/models--ORG--NAME/
 *       refs/main                    the commit that main pointed to when last pulled (40 hex, no newline)
 *       blobs/OID                    a file's bytes, named by its LFS sha256 (64 hex) or, for a file
 *                                    outside LFS, its git blob id (40 hex); one copy for every snapshot
 *       blobs/OID.incomplete         a download under way or interrupted; resumed from its size
 *       snapshots/COMMIT/PATH        a relative symlink to ../../blobs/OID (one more ../ per
 *                                    directory in PATH): the repo's tree as of COMMIT
 *
 * A blob appears only by a rename once its size and sha256 are checked, and a
 * snapshot link only once its blob is there, so a path in snapshots/ is always
 * a whole file. This module owns no network code (hf_hub.h does the fetching):
 * it names, picks, lists and removes. Everything here works offline.
 *
 * Picking files (hf_select) follows llama.cpp's `-hf REPO[:QUANT]`: the quant
 * matches a file's path case-insensitively where it is followed by '.' or '-'
 * (and, stricter than llama.cpp, preceded by a non-alphanumeric, so Q4_K_M never
 * picks IQ4_K_M); without one, Q4_K_M, then Q8_0, then the first model GGUF.
 * mmproj/imatrix files are never the model; a split GGUF (-00001-of-0000N) is
 * picked by its first part and brings all N. */
#ifndef BK_HF_CACHE_H
#define BK_HF_CACHE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "brisk.h"

enum { HF_REPO_MAX = 256, HF_QUANT_MAX = 64, HF_COMMIT_LEN = 40 };

/* A file of a repo, as the hub's tree lists it or as a snapshot holds it. */
typedef struct hf_file {
    char *path;    /* inside the repo, '/'-separated: "Q4_K_M/x-00001-of-00002.gguf" (owned) */
    char *oid;     /* the blob's name: LFS sha256 (64 hex) or git blob id (40 hex) (owned) */
    bool lfs;      /* oid is the sha256 of the bytes, checked after a download */
    uint64_t size; /* bytes */
} hf_file;
void hf_files_free(hf_file *files, int n); /* NULL is fine */

/* "ORG/NAME[:QUANT]" into repo and quant ("" when none). BRISK_ERR_INVALID_ARG with why
 * for anything else (a path, "..", a third component, characters the hub refuses). */
brisk_status hf_spec_parse(const char *spec, char repo[HF_REPO_MAX], char quant[HF_QUANT_MAX]);
bool hf_repo_valid(const char *repo);    /* ORG/NAME: [A-Za-z0-9._-], no "..", no "--", no edge '.'/'-' */
bool hf_rel_path_valid(const char *p);   /* a repo file's path: relative, no "." or ".." or empty part */
bool hf_oid_valid(const char *oid);      /* 40 or 64 lower-case hex digits */

/* The cache root (see above) into out; BRISK_ERR_INVALID_ARG when it does not fit or no
 * variable names a home. Does not create it. */
brisk_status hf_cache_root(char *out, size_t cap);
/* ROOT/models--ORG--NAME into out; false if it does not fit. */
bool hf_repo_dir(const char *root, const char *repo, char *out, size_t cap);

/* File-name rules of the picking (see above). */
bool hf_gguf_is_model(const char *path);
bool hf_quant_matches(const char *path, const char *quant);
void hf_gguf_split(const char *path, int *index, int *count); /* 1, 1 when not split */
void hf_gguf_quant(const char *path, char *out, size_t cap);   /* "Q4_K_M" from "x-q4_k_m.gguf"; "" if none */

/* The files of quant (NULL or "": the default order) among files: their indices into sel
 * (room for n), split parts in order. BRISK_ERR_NOT_FOUND naming the quants there are;
 * BRISK_ERR_FORMAT for a split with a part missing. */
brisk_status hf_select(const hf_file *files, int n, const char *quant, int *sel, int *n_sel);

/* refs/main of a repo dir: *commit gets 40 hex digits; BRISK_ERR_NOT_FOUND when absent. */
brisk_status hf_cache_ref_read(const char *repo_dir, char commit[HF_COMMIT_LEN + 1]);
brisk_status hf_cache_ref_write(const char *repo_dir, const char *commit); /* atomic */
/* snapshots/COMMIT/PATH -> ../../blobs/OID, made atomically (a new link renamed into
 * place); the directories on the way are created. The blob must be there. */
brisk_status hf_cache_link(const char *repo_dir, const char *commit, const char *path, const char *oid);
/* The whole files of snapshots/COMMIT (links whose blob is present), malloc'd; hf_files_free. */
brisk_status hf_cache_snapshot(const char *repo_dir, const char *commit, hf_file **files, int *n);

/* Offline resolution: the snapshot that refs/main names and the files of quant there
 * (as hf_select picks), as paths into the snapshot (*paths: n malloc'd strings in a malloc'd
 * array; hf_paths_free). BRISK_ERR_NOT_FOUND when the cache lacks them. */
brisk_status hf_cache_find(const char *root, const char *repo, const char *quant, char ***paths, int *n);
void hf_paths_free(char **paths, int n);

/* One cached model: a repo's snapshot files of one quant (split parts together). */
typedef struct hf_cache_entry {
    char repo[HF_REPO_MAX];
    char quant[HF_QUANT_MAX]; /* "" for a GGUF without a quant in its name */
    char commit[HF_COMMIT_LEN + 1];
    char path[1024];          /* the first file, in the repo */
    int n_files;
    uint64_t size;            /* bytes of all its files */
} hf_cache_entry;
/* Every cached model GGUF under root, sorted by repo then quant; plus *partial: bytes in
 * interrupted downloads (blobs/ *.incomplete). An absent root is an empty cache. */
brisk_status hf_cache_list(const char *root, hf_cache_entry **entries, int *n, uint64_t *partial);
/* Removes a repo's GGUFs of quant from every snapshot ("" or NULL: the whole repo, partial
 * downloads included), then the blobs no snapshot names any more and directories left
 * empty. Only ever touches ROOT/models--ORG--NAME, never follows a link out of it.
 * *freed gets the bytes of blobs removed. BRISK_ERR_NOT_FOUND when there is nothing. */
brisk_status hf_cache_remove(const char *root, const char *repo, const char *quant, uint64_t *freed);
#endif
