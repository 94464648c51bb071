/* hf_hub.h — fetching GGUF models from a Hugging Face hub into the local cache
 * (hf_cache.h), over the hub's HTTP API with libcurl:
 *
 *   GET {endpoint}/api/models/{repo}/refs                    branches: main's commit
 *   GET {endpoint}/api/models/{repo}/tree/{commit}?recursive=true
 *                                                            the files: path, size, oid, lfs.oid
 *                                                            (sha256), lfs.size; pages follow
 *                                                            the Link: <...>; rel="next" header
 *   GET {endpoint}/{repo}/resolve/{commit}/{path}            the bytes (a redirect to a CDN,
 *                                                            followed; Range: bytes=N- resumes)
 *
 * The endpoint is $HF_ENDPOINT (default https://huggingface.co); the token, sent as
 * "Authorization: Bearer" to the hub's own host only (curl drops it on a redirect to
 * another host), is $HF_TOKEN, else the file huggingface-cli login writes
 * ($HF_TOKEN_PATH, else $HF_HOME/token). A download goes to blobs/OID.incomplete,
 * resumed from its size when one is there, hashed as it arrives, and is renamed
 * to blobs/OID only when its size and sha256 are what the tree said; a wrong
 * checksum removes the partial file (its bytes cannot be trusted to resume from).
 * A dropped connection, HTTP 429 (after Retry-After, capped) and 5xx are retried
 * with resumption; 401, 403 and 404 fail at once with what to do. Two processes
 * pulling one file: the second fails at once (a lock on the partial file). */
#ifndef BK_HF_HUB_H
#define BK_HF_HUB_H
#include <stdbool.h>
#include <stdint.h>

#include "brisk.h"

/* What a download has done so far, for a progress display. */
typedef struct hf_progress {
    const char *file;     /* the path in the repo */
    int index, count;     /* this file is index (1-based) of count */
    uint64_t done, total; /* bytes of this file present (resumed ones included) and its size */
    uint64_t resumed;     /* bytes that were on disk before this run */
    int retries;          /* requests after the first (a dropped connection resumed, a 429 waited out) */
    double seconds;       /* since this file's transfer began */
    bool finished;        /* the last call for this file: it is whole and checked */
    bool cached;          /* (with finished) it was in the cache already: nothing fetched */
} hf_progress;

typedef struct hf_hub_opts {
    const char *endpoint;   /* NULL: $HF_ENDPOINT, else https://huggingface.co */
    const char *token;      /* NULL: $HF_TOKEN, else the token file (above); "" sends none */
    const char *cache;      /* NULL: hf_cache_root() */
    const char *user_agent; /* NULL: "brisk" */
    int retries;            /* tries after a transient failure without progress; 0: 5 */
    double max_wait;        /* the longest Retry-After obeyed, seconds; 0: 120 */
    void (*progress)(const hf_progress *p, void *user); /* NULL: none; called often, keep it cheap */
    void *user;
} hf_hub_opts;

/* Makes sure the files of repo's quant (hf_select's choice; "" or NULL: the default) at
 * main's current commit are in the cache, fetching what is missing, and records the
 * commit in refs/main. *paths gets their snapshot paths (n of them, split parts in order;
 * hf_paths_free). Errors name the repo, the file and the HTTP status with what to do. */
brisk_status hf_pull(const char *repo, const char *quant, const hf_hub_opts *o, char ***paths, int *n);
#endif
