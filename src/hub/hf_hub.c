/* hf_hub.c — the hub's HTTP API and resumable, verified downloads with libcurl.
 * See hf_hub.h for the endpoints and the guarantees. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/sha256.h"
#include "base/status.h"
#include "hub/hf_cache.h"
#include "hub/hf_hub.h"

enum { API_MAX = 64 << 20, ERR_MAX = 4096, TOKEN_MAX = 512 };

/* One pull's settings and its curl handle (reused: one connection for every request). */
typedef struct hub {
    CURL *curl;
    char endpoint[1024]; /* no trailing '/' */
    char token[TOKEN_MAX];
    char root[PATH_MAX];
    const hf_hub_opts *o;
    int retries;
    double max_wait;
} hub;

/* What the headers of the last response said (the last response: redirects reset it). */
typedef struct reply {
    long retry_after;      /* seconds; -1: none */
    long long range_start; /* Content-Range's first byte; -1: none */
    char next[2048];       /* Link rel="next" */
    char error[256];       /* X-Error-Message */
} reply;

static void trim(char *s) {
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
}

/* The token: $HF_TOKEN, its old name, else the login file. */
static void find_token(char *out) {
    const char *v = getenv("HF_TOKEN");
    if (!v || !*v) v = getenv("HUGGING_FACE_HUB_TOKEN");
    out[0] = 0;
    if (v && *v) {
        snprintf(out, TOKEN_MAX, "%s", v);
    } else {
        char path[PATH_MAX];
        const char *p = getenv("HF_TOKEN_PATH"), *home = getenv("HF_HOME"), *h = getenv("HOME");
        if (p && *p) snprintf(path, sizeof path, "%s", p);
        else if (home && *home) snprintf(path, sizeof path, "%s/token", home);
        else if (h && *h) snprintf(path, sizeof path, "%s/.cache/huggingface/token", h);
        else return;
        FILE *f = fopen(path, "rb");
        if (!f) return;
        size_t n = fread(out, 1, TOKEN_MAX - 1, f);
        out[n] = 0;
        fclose(f);
    }
    trim(out);
    for (const char *c = out; *c; c++) /* a token is one printable word; never put a newline in a header */
        if (!isgraph((unsigned char)*c)) {
            out[0] = 0;
            return;
        }
}

static size_t on_header(char *p, size_t sz, size_t nm, void *u) {
    reply *r = u;
    size_t n = sz * nm;
    char line[2048];
    snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line - 1 ? n : sizeof line - 1), p);
    trim(line);
    if (!strncmp(line, "HTTP/", 5)) { /* a new response (after a redirect): forget the last one's */
        r->retry_after = -1, r->range_start = -1, r->next[0] = r->error[0] = 0;
    } else if (!strncasecmp(line, "Retry-After:", 12)) {
        char *end;
        long v = strtol(line + 12, &end, 10);
        if (end != line + 12 && v >= 0) r->retry_after = v;
    } else if (!strncasecmp(line, "Content-Range:", 14)) {
        const char *b = strstr(line, "bytes ");
        if (b) r->range_start = strtoll(b + 6, NULL, 10);
    } else if (!strncasecmp(line, "X-Error-Message:", 16)) {
        const char *v = line + 16;
        while (*v == ' ') v++;
        snprintf(r->error, sizeof r->error, "%s", v);
    } else if (!strncasecmp(line, "Link:", 5) && strstr(line, "rel=\"next\"")) {
        const char *a = strchr(line, '<'), *b = a ? strchr(a, '>') : NULL;
        if (a && b && (size_t)(b - a - 1) < sizeof r->next) snprintf(r->next, sizeof r->next, "%.*s", (int)(b - a - 1), a + 1);
    }
    return n;
}

/* Options every request shares; headers is the caller's to free after the transfer. */
static struct curl_slist *setup(hub *h, const char *url, reply *r, const char *range) {
    CURL *c = h->curl;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_USERAGENT, h->o->user_agent ? h->o->user_agent : "brisk");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    /* a transfer that stalls (under 1 KB/s for 60 s) is dropped and resumed, not waited on forever */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    r->retry_after = -1, r->range_start = -1, r->next[0] = r->error[0] = 0;
    struct curl_slist *hd = NULL;
    char line[TOKEN_MAX + 32];
    if (h->token[0]) {
        snprintf(line, sizeof line, "Authorization: Bearer %s", h->token);
        hd = curl_slist_append(hd, line);
    }
    if (range) {
        snprintf(line, sizeof line, "Range: %s", range);
        hd = curl_slist_append(hd, line);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hd);
    return hd;
}

/* A network failure worth trying again (the hub or the CDN dropped us); not one of ours. */
static bool curl_transient(CURLcode e) {
    return e == CURLE_PARTIAL_FILE || e == CURLE_RECV_ERROR || e == CURLE_SEND_ERROR ||
           e == CURLE_OPERATION_TIMEDOUT || e == CURLE_GOT_NOTHING || e == CURLE_HTTP2 ||
           e == CURLE_HTTP2_STREAM || e == CURLE_SSL_CONNECT_ERROR;
}

static bool http_transient(long code) { return code == 429 || code == 408 || (code >= 500 && code <= 599); }

/* A failed status as one line: what it means here and what to do. */
static brisk_status http_fail(const hub *h, long code, const reply *r, const char *body, const char *what) {
    char hub_says[300] = "";
    if (r->error[0]) snprintf(hub_says, sizeof hub_says, " (%s)", r->error);
    else if (body && *body) {
        cJSON *j = cJSON_Parse(body);
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
        if (cJSON_IsString(e)) snprintf(hub_says, sizeof hub_says, " (%s)", e->valuestring);
        cJSON_Delete(j);
    }
    if (code == 401 || code == 403)
        return bk_fail(BRISK_ERR_IO, "%s: HTTP %ld%s: %s", what, code, hub_says,
                       h->token[0] ? "HF_TOKEN was refused: is it valid, and has it accepted the repo's terms?"
                                   : "the repo is gated or private (or does not exist): set HF_TOKEN");
    if (code == 404)
        return bk_fail(BRISK_ERR_NOT_FOUND, "%s: HTTP 404%s: not found on %s", what, hub_says, h->endpoint);
    if (code == 429)
        return bk_fail(BRISK_ERR_IO, "%s: HTTP 429%s: the hub is rate limiting; try later (an HF_TOKEN raises the limit)",
                       what, hub_says);
    return bk_fail(BRISK_ERR_IO, "%s: HTTP %ld%s", what, code, hub_says);
}

/* Sleeps before try `attempt` (1-based): the server's Retry-After, else 1, 2, 4, ... s. */
static brisk_status backoff(const hub *h, const reply *r, int attempt, const char *what) {
    double wait = r->retry_after >= 0 ? (double)r->retry_after : (double)(1 << (attempt < 6 ? attempt - 1 : 5));
    if (wait > h->max_wait)
        return bk_fail(BRISK_ERR_IO, "%s: the hub asks to wait %.0f s (Retry-After); try again later", what, wait);
    struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
    while (nanosleep(&ts, &ts) && errno == EINTR) {}
    return BRISK_OK;
}

typedef struct membuf {
    char *p;
    size_t n, cap;
} membuf;

static size_t on_mem(char *p, size_t sz, size_t nm, void *u) {
    membuf *b = u;
    size_t n = sz * nm;
    if (b->n + n + 1 > API_MAX) return 0; /* not an API answer; abort */
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *q = realloc(b->p, cap);
        if (!q) return 0;
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return n;
}

/* GET url as JSON, retrying what is transient. *json is the caller's (cJSON_Delete); next (may be
 * NULL) gets the Link rel="next" URL or "". */
static brisk_status get_json(hub *h, const char *url, const char *what, cJSON **json, char *next, size_t next_cap) {
    for (int attempt = 1;; attempt++) {
        membuf b = {0};
        reply r;
        struct curl_slist *hd = setup(h, url, &r, NULL);
        hd = curl_slist_append(hd, "Accept: application/json");
        curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, hd);
        curl_easy_setopt(h->curl, CURLOPT_WRITEFUNCTION, on_mem);
        curl_easy_setopt(h->curl, CURLOPT_WRITEDATA, &b);
        CURLcode e = curl_easy_perform(h->curl);
        curl_slist_free_all(hd);
        long code = 0;
        curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &code);
        brisk_status s = BRISK_OK;
        bool again = e != CURLE_OK ? curl_transient(e) : http_transient(code);
        if (again && attempt <= h->retries) {
            free(b.p);
            BK_TRY(backoff(h, &r, attempt, what));
            continue;
        }
        if (e != CURLE_OK) s = bk_fail(BRISK_ERR_IO, "%s: %s: %s", what, h->endpoint, curl_easy_strerror(e));
        else if (code != 200) s = http_fail(h, code, &r, b.p, what);
        else if (!(*json = cJSON_Parse(b.p ? b.p : ""))) s = bk_fail(BRISK_ERR_FORMAT, "%s: the answer is not JSON", what);
        if (s == BRISK_OK && next) snprintf(next, next_cap, "%s", r.next);
        free(b.p);
        return s;
    }
}

/* main's commit (else the first branch's) from /api/models/REPO/refs. */
static brisk_status repo_commit(hub *h, const char *repo, char commit[HF_COMMIT_LEN + 1]) {
    char url[2048], what[HF_REPO_MAX + 32];
    snprintf(url, sizeof url, "%s/api/models/%s/refs", h->endpoint, repo);
    snprintf(what, sizeof what, "%s", repo);
    cJSON *j;
    BK_TRY(get_json(h, url, what, &j, NULL, 0));
    const cJSON *br;
    commit[0] = 0;
    cJSON_ArrayForEach(br, cJSON_GetObjectItemCaseSensitive(j, "branches")) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(br, "name");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(br, "targetCommit");
        if (!cJSON_IsString(name) || !cJSON_IsString(c) || strlen(c->valuestring) != HF_COMMIT_LEN ||
            !hf_oid_valid(c->valuestring))
            continue;
        if (!commit[0] || !strcmp(name->valuestring, "main")) strcpy(commit, c->valuestring);
        if (!strcmp(name->valuestring, "main")) break;
    }
    cJSON_Delete(j);
    return commit[0] ? BRISK_OK : bk_fail(BRISK_ERR_FORMAT, "%s: the hub lists no branch with a commit", repo);
}

/* Appends the files of one tree page to *files. */
static brisk_status tree_page(const cJSON *arr, hf_file **files, int *n, int *cap) {
    if (!cJSON_IsArray(arr)) return bk_fail(BRISK_ERR_FORMAT, "the tree is not a JSON array");
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
        const cJSON *path = cJSON_GetObjectItemCaseSensitive(it, "path");
        const cJSON *lfs = cJSON_GetObjectItemCaseSensitive(it, "lfs");
        const cJSON *src = cJSON_IsObject(lfs) ? lfs : it; /* an LFS file's oid and size are its content's */
        const cJSON *oid = cJSON_GetObjectItemCaseSensitive(src, "oid");
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(src, "size");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "file") || !cJSON_IsString(path) ||
            !cJSON_IsString(oid) || !cJSON_IsNumber(size) || size->valuedouble < 0)
            continue;
        /* a path that would climb out of the snapshot or an oid that is not a hash is skipped, not trusted */
        if (!hf_rel_path_valid(path->valuestring) || !hf_oid_valid(oid->valuestring)) continue;
        if (*n == *cap) {
            int c = *cap ? 2 * *cap : 64;
            hf_file *v = realloc(*files, (size_t)c * sizeof *v);
            if (!v) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
            *files = v, *cap = c;
        }
        hf_file *f = &(*files)[*n];
        f->path = strdup(path->valuestring), f->oid = strdup(oid->valuestring);
        f->size = (uint64_t)size->valuedouble;
        f->lfs = src == lfs && strlen(oid->valuestring) == 64;
        if (!f->path || !f->oid) {
            free(f->path), free(f->oid);
            return bk_fail(BRISK_ERR_NOMEM, "out of memory");
        }
        (*n)++;
    }
    return BRISK_OK;
}

/* Every file of the repo at commit, following the tree's pages. */
static brisk_status repo_tree(hub *h, const char *repo, const char *commit, hf_file **files, int *n) {
    char url[2048], next[2048];
    snprintf(url, sizeof url, "%s/api/models/%s/tree/%s?recursive=true", h->endpoint, repo, commit);
    int cap = 0;
    *files = NULL, *n = 0;
    for (int page = 0; page < 10000; page++) {
        cJSON *j;
        brisk_status s = get_json(h, url, repo, &j, next, sizeof next);
        if (s == BRISK_OK) s = tree_page(j, files, n, &cap);
        cJSON_Delete(j);
        if (s != BRISK_OK) {
            hf_files_free(*files, *n);
            *files = NULL, *n = 0;
            return s;
        }
        if (!next[0]) return BRISK_OK;
        snprintf(url, sizeof url, "%s", next);
    }
    return bk_fail(BRISK_ERR_FORMAT, "%s: the tree's pages do not end", repo);
}

/* One file's transfer into its .incomplete file. */
typedef struct xfer {
    hub *h;
    int fd;
    sha256_ctx sha;
    uint64_t have;   /* bytes in the file (and hashed) */
    uint64_t resumed;
    hf_progress prog;
    double t0;
    bool started;    /* the body of the final response has begun */
    bool to_err;     /* the response is an error: its body is a message, not the file */
    bool overrun;    /* more bytes than the tree's size */
    bool io_error;
    int err_no;
    membuf err;
} xfer;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Empties the partial file: its bytes are not the start of what the server now sends. */
static bool restart(xfer *x) {
    if (ftruncate(x->fd, 0) || lseek(x->fd, 0, SEEK_SET)) {
        x->io_error = true, x->err_no = errno;
        return false;
    }
    sha256_init(&x->sha);
    x->have = x->resumed = 0;
    x->prog.done = x->prog.resumed = 0;
    return true;
}

static size_t on_body(char *p, size_t sz, size_t nm, void *u) {
    xfer *x = u;
    size_t n = sz * nm;
    if (!x->started) {
        long code = 0;
        curl_easy_getinfo(x->h->curl, CURLINFO_RESPONSE_CODE, &code);
        x->started = true;
        x->to_err = code != 200 && code != 206;
        /* a 200 to a Range request is the whole file from byte 0 */
        if (code == 200 && x->have > 0 && !restart(x)) return 0;
    }
    if (x->to_err) { /* the hub's message, kept short; the rest is read and dropped */
        if (x->err.n + n < ERR_MAX) on_mem(p, 1, n, &x->err);
        return n;
    }
    if (x->have + n > x->prog.total) {
        x->overrun = true;
        return 0;
    }
    for (size_t off = 0; off < n;) {
        ssize_t w = write(x->fd, p + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            x->io_error = true, x->err_no = w < 0 ? errno : EIO;
            return 0;
        }
        off += (size_t)w;
    }
    sha256_update(&x->sha, p, n);
    x->have += n;
    x->prog.done = x->have;
    x->prog.seconds = now_s() - x->t0;
    if (x->h->o->progress) x->h->o->progress(&x->prog, x->h->o->user);
    return n;
}

/* Hashes the bytes already in the partial file, to go on from them. */
static brisk_status hash_existing(xfer *x, const char *path) {
    enum { CHUNK = 1 << 20 };
    char *buf = malloc(CHUNK);
    if (!buf) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    uint64_t off = 0;
    while (off < x->have) {
        size_t want = x->have - off < CHUNK ? (size_t)(x->have - off) : CHUNK;
        ssize_t r = pread(x->fd, buf, want, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            free(buf);
            return bk_fail(BRISK_ERR_IO, "%s: %s", path, r < 0 ? strerror(errno) : "shorter than it was");
        }
        sha256_update(&x->sha, buf, (size_t)r);
        off += (uint64_t)r;
    }
    free(buf);
    return lseek(x->fd, (off_t)x->have, SEEK_SET) < 0 ? bk_fail(BRISK_ERR_IO, "%s: %s", path, strerror(errno)) : BRISK_OK;
}

/* {endpoint}/{repo}/resolve/{commit}/{path}, each path part URL-escaped. */
static bool file_url(hub *h, const char *repo, const char *commit, const char *path, char *url, size_t cap) {
    int n = snprintf(url, cap, "%s/%s/resolve/%s", h->endpoint, repo, commit);
    for (const char *s = path; n > 0 && (size_t)n < cap;) {
        const char *e = strchr(s, '/');
        int len = e ? (int)(e - s) : (int)strlen(s);
        char *esc = curl_easy_escape(h->curl, s, len);
        if (!esc) return false;
        n += snprintf(url + n, cap - (size_t)n, "/%s", esc);
        curl_free(esc);
        if (!e) break;
        s = e + 1;
    }
    return n > 0 && (size_t)n < cap;
}

/* Runs the transfer until it is whole, retrying and resuming what is transient. */
static brisk_status transfer(xfer *x, const char *url, const char *what) {
    hub *h = x->h;
    for (int attempt = 1;; attempt++) {
        char range[64];
        snprintf(range, sizeof range, "bytes=%llu-", (unsigned long long)x->have);
        reply r;
        uint64_t before = x->have;
        struct curl_slist *hd = setup(h, url, &r, x->have ? range : NULL);
        curl_easy_setopt(h->curl, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h->curl, CURLOPT_WRITEDATA, x);
        x->started = x->to_err = x->overrun = x->io_error = false;
        x->err.n = 0;
        CURLcode e = curl_easy_perform(h->curl);
        curl_slist_free_all(hd);
        long code = 0;
        curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &code);
        if (x->io_error) return bk_fail(BRISK_ERR_IO, "%s: writing the download: %s", what, strerror(x->err_no));
        if (x->overrun) return bk_fail(BRISK_ERR_FORMAT, "%s: the server sent more than the %llu bytes the hub lists",
                                       what, (unsigned long long)x->prog.total);
        if (e == CURLE_OK && code == 416 && x->have) { /* our offset is past the server's file: start over */
            if (!restart(x)) return bk_fail(BRISK_ERR_IO, "%s: %s", what, strerror(x->err_no));
            continue;
        }
        if (e == CURLE_OK && code == 206 && before && r.range_start != (long long)before)
            return bk_fail(BRISK_ERR_FORMAT, "%s: asked for bytes from %llu, the server sent from %lld", what,
                           (unsigned long long)before, r.range_start);
        if (e == CURLE_OK && !x->to_err && x->have == x->prog.total) return BRISK_OK;
        bool progress = x->have > before;
        bool again = e != CURLE_OK ? curl_transient(e) : x->to_err ? http_transient(code) : true; /* short body */
        if (progress) attempt = 1; /* a transfer that moves is never given up on */
        if (!again || attempt > h->retries) {
            if (e != CURLE_OK) return bk_fail(BRISK_ERR_IO, "%s: %s (%llu of %llu bytes; run again to resume)", what,
                                              curl_easy_strerror(e), (unsigned long long)x->have,
                                              (unsigned long long)x->prog.total);
            if (x->to_err) return http_fail(h, code, &r, x->err.p, what);
            return bk_fail(BRISK_ERR_IO, "%s: the transfer ended at %llu of %llu bytes", what,
                           (unsigned long long)x->have, (unsigned long long)x->prog.total);
        }
        BK_TRY(backoff(h, &r, attempt, what));
        x->prog.retries++;
    }
}

static brisk_status fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return bk_fail(BRISK_ERR_IO, "%s: %s", dir, strerror(errno));
    int r = fsync(fd);
    close(fd);
    return r ? bk_fail(BRISK_ERR_IO, "fsync %s: %s", dir, strerror(errno)) : BRISK_OK;
}

/* blobs/OID of f, fetched unless present; prog's index and count are filled by the caller. */
static brisk_status fetch_blob(hub *h, const char *repo, const char *dir, const char *commit, const hf_file *f,
                               hf_progress prog) {
    char blobs[PATH_MAX], blob[PATH_MAX], part[PATH_MAX], url[4096], what[1400];
    snprintf(blobs, sizeof blobs, "%s/blobs", dir);
    snprintf(blob, sizeof blob, "%s/%s", blobs, f->oid);
    snprintf(part, sizeof part, "%s.incomplete", blob);
    snprintf(what, sizeof what, "%s/%s", repo, f->path);
    prog.total = f->size;
    struct stat st;
    if (!stat(blob, &st) && S_ISREG(st.st_mode) && (uint64_t)st.st_size == f->size) {
        prog.done = f->size, prog.finished = prog.cached = true;
        if (h->o->progress) h->o->progress(&prog, h->o->user);
        return BRISK_OK;
    }
    if (!file_url(h, repo, commit, f->path, url, sizeof url)) return bk_fail(BRISK_ERR_INVALID_ARG, "%s: URL too long", what);
    if (mkdir(dir, 0777) && errno != EEXIST) return bk_fail(BRISK_ERR_IO, "mkdir %s: %s", dir, strerror(errno));
    if (mkdir(blobs, 0777) && errno != EEXIST) return bk_fail(BRISK_ERR_IO, "mkdir %s: %s", blobs, strerror(errno));
    xfer x = {.h = h, .prog = prog};
    x.fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (x.fd < 0) return bk_fail(BRISK_ERR_IO, "%s: %s", part, strerror(errno));
    brisk_status s = BRISK_OK;
    if (flock(x.fd, LOCK_EX | LOCK_NB)) {
        s = bk_fail(BRISK_ERR_IO, "%s: another process is downloading it (%s is locked)", what, part);
        goto out;
    }
    sha256_init(&x.sha);
    if (fstat(x.fd, &st)) {
        s = bk_fail(BRISK_ERR_IO, "%s: %s", part, strerror(errno));
        goto out;
    }
    x.have = (uint64_t)st.st_size;
    if (x.have > f->size && !restart(&x)) {
        s = bk_fail(BRISK_ERR_IO, "%s: %s", part, strerror(x.err_no));
        goto out;
    }
    if (x.have && (s = hash_existing(&x, part)) != BRISK_OK) goto out;
    x.resumed = x.prog.resumed = x.prog.done = x.have;
    x.t0 = now_s();
    /* a whole partial file (a run that died before the rename) is only checked */
    if (x.have < f->size && (s = transfer(&x, url, what)) != BRISK_OK) goto out;
    char got[65];
    sha256_final_hex(&x.sha, got);
    if (f->lfs && strcmp(got, f->oid)) {
        unlink(part); /* its bytes are wrong somewhere: resuming from them would only repeat this */
        s = bk_fail(BRISK_ERR_FORMAT, "%s: checksum mismatch: the hub lists sha256 %s, the download has %s; "
                    "the partial file was removed, run again to fetch it afresh", what, f->oid, got);
        goto out;
    }
    if (fsync(x.fd)) {
        s = bk_fail(BRISK_ERR_IO, "fsync %s: %s", part, strerror(errno));
        goto out;
    }
    if (rename(part, blob)) {
        s = bk_fail(BRISK_ERR_IO, "rename %s: %s", part, strerror(errno));
        goto out;
    }
    s = fsync_dir(blobs);
    x.prog.finished = true;
    x.prog.seconds = now_s() - x.t0;
    if (s == BRISK_OK && h->o->progress) h->o->progress(&x.prog, h->o->user);
out:
    close(x.fd); /* releases the lock */
    free(x.err.p);
    return s;
}

brisk_status hf_pull(const char *repo, const char *quant, const hf_hub_opts *o, char ***paths, int *n) {
    static const hf_hub_opts none = {0};
    hub h = {.o = o ? o : &none};
    *paths = NULL, *n = 0;
    if (!hf_repo_valid(repo)) return bk_fail(BRISK_ERR_INVALID_ARG, "'%s' is not a repo (ORG/NAME)", repo);
    const char *ep = h.o->endpoint ? h.o->endpoint : getenv("HF_ENDPOINT");
    snprintf(h.endpoint, sizeof h.endpoint, "%s", ep && *ep ? ep : "https://huggingface.co");
    for (size_t k = strlen(h.endpoint); k && h.endpoint[k - 1] == '/';) h.endpoint[--k] = 0;
    if (h.o->token) snprintf(h.token, sizeof h.token, "%s", h.o->token);
    else find_token(h.token);
    if (h.o->cache) snprintf(h.root, sizeof h.root, "%s", h.o->cache);
    else BK_TRY(hf_cache_root(h.root, sizeof h.root));
    h.retries = h.o->retries > 0 ? h.o->retries : 5;
    h.max_wait = h.o->max_wait > 0 ? h.o->max_wait : 120;
    char dir[PATH_MAX], commit[HF_COMMIT_LEN + 1];
    if (!hf_repo_dir(h.root, repo, dir, sizeof dir)) return bk_fail(BRISK_ERR_INVALID_ARG, "cache path too long");
    if (curl_global_init(CURL_GLOBAL_DEFAULT)) return bk_fail(BRISK_ERR_IO, "libcurl failed to start");
    if (!(h.curl = curl_easy_init())) return bk_fail(BRISK_ERR_NOMEM, "libcurl failed to start");
    hf_file *files = NULL;
    int nf = 0, ns = 0, *sel = NULL;
    brisk_status s = repo_commit(&h, repo, commit);
    if (s == BRISK_OK) s = repo_tree(&h, repo, commit, &files, &nf);
    if (s == BRISK_OK && !(sel = malloc(((size_t)nf + 1) * sizeof *sel))) s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
    if (s == BRISK_OK && (s = hf_select(files, nf, quant, sel, &ns)) != BRISK_OK) bk_wrap(s, "%s", repo);
    if (s == BRISK_OK && mkdir(h.root, 0777) && errno != EEXIST) { /* the parent of a fresh HF_HOME may be missing */
        char up[PATH_MAX];
        snprintf(up, sizeof up, "%s", h.root);
        for (char *p = up + 1; (p = strchr(p, '/')); p++) *p = 0, mkdir(up, 0777), *p = '/';
        if (mkdir(h.root, 0777) && errno != EEXIST) s = bk_fail(BRISK_ERR_IO, "mkdir %s: %s", h.root, strerror(errno));
    }
    for (int i = 0; s == BRISK_OK && i < ns; i++) {
        hf_progress p = {.file = files[sel[i]].path, .index = i + 1, .count = ns};
        s = fetch_blob(&h, repo, dir, commit, &files[sel[i]], p);
        if (s == BRISK_OK) s = hf_cache_link(dir, commit, files[sel[i]].path, files[sel[i]].oid);
    }
    if (s == BRISK_OK) s = hf_cache_ref_write(dir, commit);
    char **out = s == BRISK_OK ? calloc((size_t)ns + 1, sizeof *out) : NULL;
    if (s == BRISK_OK && !out) s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
    for (int i = 0; s == BRISK_OK && i < ns; i++)
        if (asprintf(&out[i], "%s/snapshots/%s/%s", dir, commit, files[sel[i]].path) < 0)
            out[i] = NULL, s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
    if (s == BRISK_OK) *paths = out, *n = ns;
    else hf_paths_free(out, ns);
    free(sel);
    hf_files_free(files, nf);
    curl_easy_cleanup(h.curl);
    return s;
}
