/* hf_cache.c — huggingface_hub's cache layout: names, picking, listing and
 * removal. See hf_cache.h for the layout and the picking rules. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/status.h"
#include "hub/hf_cache.h"

enum { MAX_DEPTH = 32 }; /* directories inside a snapshot; a deeper tree is not a model repo */

void hf_files_free(hf_file *files, int n) {
    for (int i = 0; files && i < n; i++) free(files[i].path), free(files[i].oid);
    free(files);
}

void hf_paths_free(char **paths, int n) {
    for (int i = 0; paths && i < n; i++) free(paths[i]);
    free(paths);
}

/* One ORG or NAME: what the hub accepts, and nothing that could climb out of the cache. */
static bool name_valid(const char *s, size_t n) {
    if (n == 0 || n > 96 || s[0] == '.' || s[0] == '-' || s[n - 1] == '.' || s[n - 1] == '-') return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!(isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.')) return false;
        /* "--" separates ORG from NAME in the cache's directory names; ".." is a parent */
        if (i + 1 < n && (c == '-' || c == '.') && s[i + 1] == c) return false;
    }
    return true;
}

bool hf_repo_valid(const char *repo) {
    const char *slash = strchr(repo, '/');
    if (!slash || strchr(slash + 1, '/') || strlen(repo) >= HF_REPO_MAX) return false;
    return name_valid(repo, (size_t)(slash - repo)) && name_valid(slash + 1, strlen(slash + 1));
}

bool hf_rel_path_valid(const char *p) {
    if (!*p || *p == '/' || strlen(p) >= 1024) return false;
    for (const char *s = p;;) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.')) return false;
        if (!e) return true;
        s = e + 1;
    }
}

bool hf_oid_valid(const char *oid) {
    size_t n = strlen(oid);
    if (n != 40 && n != 64) return false;
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)oid[i]) && !(oid[i] >= 'a' && oid[i] <= 'f')) return false;
    return true;
}

brisk_status hf_spec_parse(const char *spec, char repo[HF_REPO_MAX], char quant[HF_QUANT_MAX]) {
    const char *colon = strchr(spec, ':');
    size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
    quant[0] = 0;
    if (n >= HF_REPO_MAX) return bk_fail(BRISK_ERR_INVALID_ARG, "'%s': repo name too long", spec);
    memcpy(repo, spec, n);
    repo[n] = 0;
    if (!hf_repo_valid(repo))
        return bk_fail(BRISK_ERR_INVALID_ARG, "'%s' is not a Hugging Face repo: expected ORG/NAME[:QUANT]", spec);
    if (colon) {
        const char *q = colon + 1;
        if (!*q || strlen(q) >= HF_QUANT_MAX) return bk_fail(BRISK_ERR_INVALID_ARG, "'%s': bad quant after ':'", spec);
        for (const char *c = q; *c; c++)
            if (!isalnum((unsigned char)*c) && *c != '_' && *c != '-')
                return bk_fail(BRISK_ERR_INVALID_ARG, "'%s': a quant is letters, digits and '_' (e.g. Q4_K_M)", spec);
        strcpy(quant, q);
    }
    return BRISK_OK;
}

brisk_status hf_cache_root(char *out, size_t cap) {
    const char *v;
    int n;
    if ((v = getenv("HF_HUB_CACHE")) && *v) n = snprintf(out, cap, "%s", v);
    else if ((v = getenv("HF_HOME")) && *v) n = snprintf(out, cap, "%s/hub", v);
    else if ((v = getenv("XDG_CACHE_HOME")) && *v) n = snprintf(out, cap, "%s/huggingface/hub", v);
    else if ((v = getenv("HOME")) && *v) n = snprintf(out, cap, "%s/.cache/huggingface/hub", v);
    else return bk_fail(BRISK_ERR_INVALID_ARG, "no cache directory: set HF_HOME (or HOME)");
    if (n < 0 || (size_t)n >= cap) return bk_fail(BRISK_ERR_INVALID_ARG, "cache directory path too long");
    return BRISK_OK;
}

bool hf_repo_dir(const char *root, const char *repo, char *out, size_t cap) {
    const char *slash = strchr(repo, '/');
    if (!slash) return false;
    int n = snprintf(out, cap, "%s/models--%.*s--%s", root, (int)(slash - repo), repo, slash + 1);
    return n > 0 && (size_t)n < cap;
}

/* The file name after the last '/'. */
static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static bool ends_with_ci(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcasecmp(s + n - k, suffix);
}

bool hf_gguf_is_model(const char *path) {
    const char *b = base_name(path);
    return ends_with_ci(b, ".gguf") && !strcasestr(b, "mmproj") && !strcasestr(b, "imatrix");
}

bool hf_quant_matches(const char *path, const char *quant) {
    size_t k = strlen(quant);
    if (!k) return false;
    for (const char *s = path; (s = strcasestr(s, quant)); s++) {
        bool left = s == path || !isalnum((unsigned char)s[-1]);
        if (left && (s[k] == '.' || s[k] == '-')) return true;
    }
    return false;
}

/* The length of path's stem without ".gguf" and "-NNNNN-of-NNNNN"; the split's numbers. */
static size_t split_stem(const char *path, int *index, int *count) {
    size_t n = strlen(path);
    *index = *count = 1;
    if (!ends_with_ci(path, ".gguf")) return n;
    n -= 5;
    const char *t = path + n - 15; /* "-00001-of-00003" */
    if (n < 16 || t[0] != '-' || strncasecmp(t + 6, "-of-", 4)) return n;
    for (int i = 1; i < 15; i++)
        if (i < 6 || i > 9 ? !isdigit((unsigned char)t[i]) : 0) return n;
    int a = atoi(t + 1), b = atoi(t + 10);
    if (a < 1 || b < 1 || a > b) return n;
    *index = a, *count = b;
    return n - 15;
}

void hf_gguf_split(const char *path, int *index, int *count) { split_stem(path, index, count); }

void hf_gguf_quant(const char *path, char *out, size_t cap) {
    int index, count;
    size_t n = split_stem(path, &index, &count), s = n;
    const char *b = base_name(path);
    while (s > (size_t)(b - path) && (isalnum((unsigned char)path[s - 1]) || path[s - 1] == '_')) s--;
    out[0] = 0;
    /* a tag follows '-' or '.' and has a digit ("Q4_K_M", "F16", "BF16"); "model.gguf" has none */
    if (s == n || s == (size_t)(b - path) || (path[s - 1] != '-' && path[s - 1] != '.') || n - s >= cap) return;
    bool digit = false;
    for (size_t i = s; i < n; i++) digit |= isdigit((unsigned char)path[i]) != 0;
    if (!digit) return;
    for (size_t i = s; i < n; i++) out[i - s] = (char)toupper((unsigned char)path[i]);
    out[n - s] = 0;
}

/* The first model GGUF matching quant (NULL: any), first split part only; -1 if none. */
static int find_primary(const hf_file *files, int n, const char *quant) {
    for (int i = 0; i < n; i++) {
        int index, count;
        hf_gguf_split(files[i].path, &index, &count);
        if (hf_gguf_is_model(files[i].path) && index == 1 && (!quant || hf_quant_matches(files[i].path, quant)))
            return i;
    }
    return -1;
}

/* "Q4_K_M, Q8_0, F16": the quants among files, for a not-found message. */
static void list_quants(const hf_file *files, int n, char *out, size_t cap) {
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        char q[HF_QUANT_MAX];
        int index, count;
        hf_gguf_split(files[i].path, &index, &count);
        if (!hf_gguf_is_model(files[i].path) || index != 1) continue;
        hf_gguf_quant(files[i].path, q, sizeof q);
        if (!q[0]) snprintf(q, sizeof q, "%s", base_name(files[i].path));
        size_t l = strlen(out);
        snprintf(out + l, cap - l, "%s%s", l ? ", " : "", q);
    }
}

brisk_status hf_select(const hf_file *files, int n, const char *quant, int *sel, int *n_sel) {
    *n_sel = 0;
    int p = -1;
    if (quant && *quant) p = find_primary(files, n, quant);
    else {
        static const char *const order[] = {"Q4_K_M", "Q8_0", NULL}; /* llama.cpp's, then any */
        for (int k = 0; p < 0 && k < 3; k++) p = find_primary(files, n, order[k]);
    }
    if (p < 0) {
        char have[512];
        list_quants(files, n, have, sizeof have);
        if (quant && *quant)
            return bk_fail(BRISK_ERR_NOT_FOUND, "no GGUF of quant %s (there %s: %s)", quant, have[0] ? "are" : "is",
                           have[0] ? have : "none");
        return bk_fail(BRISK_ERR_NOT_FOUND, "no model GGUF file");
    }
    int index, count;
    size_t stem = split_stem(files[p].path, &index, &count);
    for (int part = 1; part <= count; part++) {
        int found = -1;
        for (int i = 0; i < n && found < 0; i++) {
            int ix, cx;
            size_t st = split_stem(files[i].path, &ix, &cx);
            if (ix == part && cx == count && st == stem && !strncmp(files[i].path, files[p].path, stem)) found = i;
        }
        if (found < 0)
            return bk_fail(BRISK_ERR_FORMAT, "%s: part %d of %d is missing", files[p].path, part, count);
        sel[(*n_sel)++] = found;
    }
    return BRISK_OK;
}

brisk_status hf_cache_ref_read(const char *repo_dir, char commit[HF_COMMIT_LEN + 1]) {
    char path[PATH_MAX], buf[128] = {0};
    snprintf(path, sizeof path, "%s/refs/main", repo_dir);
    FILE *f = fopen(path, "rb");
    if (!f) return bk_fail(BRISK_ERR_NOT_FOUND, "%s: %s", path, strerror(errno));
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    while (n && isspace((unsigned char)buf[n - 1])) buf[--n] = 0;
    if (n != HF_COMMIT_LEN || !hf_oid_valid(buf)) return bk_fail(BRISK_ERR_FORMAT, "%s: not a commit id", path);
    memcpy(commit, buf, HF_COMMIT_LEN + 1);
    return BRISK_OK;
}

/* mkdir -p of path's directories up to (not including) its last component. */
static brisk_status mkdirs_for(const char *path) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; (s = strchr(s, '/')); s++) {
        *s = 0;
        if (mkdir(p, 0777) && errno != EEXIST) return bk_fail(BRISK_ERR_IO, "mkdir %s: %s", p, strerror(errno));
        *s = '/';
    }
    return BRISK_OK;
}

brisk_status hf_cache_ref_write(const char *repo_dir, const char *commit) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/refs/main", repo_dir);
    BK_TRY(mkdirs_for(path));
    atomic_file *af;
    BK_TRY(atomic_file_open(path, &af));
    fputs(commit, atomic_file_stream(af)); /* huggingface_hub writes it without a newline */
    return atomic_file_commit(af);
}

brisk_status hf_cache_link(const char *repo_dir, const char *commit, const char *path, const char *oid) {
    char link[PATH_MAX], tmp[PATH_MAX + 32], target[PATH_MAX] = "";
    int n = snprintf(link, sizeof link, "%s/snapshots/%s/%s", repo_dir, commit, path);
    if (n < 0 || (size_t)n >= sizeof link) return bk_fail(BRISK_ERR_INVALID_ARG, "%s: path too long", path);
    /* ../../blobs/OID from snapshots/COMMIT/, one more ../ for each directory inside the repo */
    for (const char *s = path; (s = strchr(s, '/')); s++) strcat(target, "../");
    strcat(target, "../../blobs/");
    strcat(target, oid);
    BK_TRY(mkdirs_for(link));
    /* a fresh link renamed over the old one: never a moment without a link */
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", link, (long)getpid());
    unlink(tmp);
    if (symlink(target, tmp)) return bk_fail(BRISK_ERR_IO, "symlink %s: %s", tmp, strerror(errno));
    if (rename(tmp, link)) {
        int e = errno;
        unlink(tmp);
        return bk_fail(BRISK_ERR_IO, "rename %s: %s", link, strerror(e));
    }
    return BRISK_OK;
}

/* A growing list of files. */
typedef struct file_list {
    hf_file *v;
    int n, cap;
} file_list;

static brisk_status list_push(file_list *l, const char *path, const char *oid, uint64_t size) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        hf_file *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
        l->v = v, l->cap = cap;
    }
    hf_file *f = &l->v[l->n];
    f->path = strdup(path), f->oid = strdup(oid), f->size = size, f->lfs = strlen(oid) == 64;
    if (!f->path || !f->oid) {
        free(f->path), free(f->oid);
        return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    l->n++;
    return BRISK_OK;
}

/* The whole files under dir (a snapshot's), rel the path so far inside the repo. */
static brisk_status walk_snapshot(const char *dir, const char *rel, int depth, file_list *l) {
    if (depth > MAX_DEPTH) return BRISK_OK;
    DIR *d = opendir(dir);
    if (!d) return bk_fail(BRISK_ERR_IO, "%s: %s", dir, strerror(errno));
    brisk_status s = BRISK_OK;
    for (struct dirent *e; s == BRISK_OK && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || strstr(e->d_name, ".tmp.")) continue;
        char full[PATH_MAX], sub[PATH_MAX], target[PATH_MAX];
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        struct stat ls, st;
        if (lstat(full, &ls)) continue;
        if (S_ISDIR(ls.st_mode)) {
            s = walk_snapshot(full, sub, depth + 1, l);
            continue;
        }
        if (stat(full, &st) || !S_ISREG(st.st_mode)) continue; /* a dangling link: its blob is gone */
        const char *oid = "";
        ssize_t k;
        if (S_ISLNK(ls.st_mode) && (k = readlink(full, target, sizeof target - 1)) > 0) {
            target[k] = 0;
            oid = base_name(target);
        }
        s = list_push(l, sub, oid, (uint64_t)st.st_size);
    }
    closedir(d);
    return s;
}

brisk_status hf_cache_snapshot(const char *repo_dir, const char *commit, hf_file **files, int *n) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/snapshots/%s", repo_dir, commit);
    file_list l = {0};
    brisk_status s = walk_snapshot(dir, "", 0, &l);
    if (s != BRISK_OK) {
        hf_files_free(l.v, l.n);
        return s;
    }
    *files = l.v, *n = l.n;
    return BRISK_OK;
}

brisk_status hf_cache_find(const char *root, const char *repo, const char *quant, char ***paths, int *n) {
    char dir[PATH_MAX], commit[HF_COMMIT_LEN + 1];
    *paths = NULL, *n = 0;
    if (!hf_repo_dir(root, repo, dir, sizeof dir)) return bk_fail(BRISK_ERR_INVALID_ARG, "path too long");
    BK_TRY(hf_cache_ref_read(dir, commit));
    hf_file *files;
    int nf, ns = 0;
    BK_TRY(hf_cache_snapshot(dir, commit, &files, &nf));
    int *sel = malloc(((size_t)nf + 1) * sizeof *sel);
    char **out = calloc((size_t)nf + 1, sizeof *out);
    brisk_status s = sel && out ? hf_select(files, nf, quant, sel, &ns) : bk_fail(BRISK_ERR_NOMEM, "out of memory");
    for (int i = 0; s == BRISK_OK && i < ns; i++)
        if (asprintf(&out[i], "%s/snapshots/%s/%s", dir, commit, files[sel[i]].path) < 0)
            out[i] = NULL, s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
    free(sel);
    hf_files_free(files, nf);
    if (s != BRISK_OK) {
        hf_paths_free(out, ns);
        return s;
    }
    *paths = out, *n = ns;
    return BRISK_OK;
}

/* Appends the model GGUFs of one snapshot to *entries, split parts folded into their first. */
static brisk_status list_snapshot(const char *repo, const char *repo_dir, const char *commit,
                                  hf_cache_entry **entries, int *n, int *cap) {
    hf_file *files;
    int nf;
    BK_TRY(hf_cache_snapshot(repo_dir, commit, &files, &nf));
    brisk_status s = BRISK_OK;
    for (int i = 0; s == BRISK_OK && i < nf; i++) {
        int index, count;
        size_t stem = split_stem(files[i].path, &index, &count);
        if (!hf_gguf_is_model(files[i].path) || index != 1) continue;
        if (*n == *cap) {
            int c = *cap ? 2 * *cap : 16;
            hf_cache_entry *v = realloc(*entries, (size_t)c * sizeof *v);
            if (!v) {
                s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
                break;
            }
            *entries = v, *cap = c;
        }
        hf_cache_entry *e = &(*entries)[(*n)++];
        memset(e, 0, sizeof *e);
        snprintf(e->repo, sizeof e->repo, "%s", repo);
        snprintf(e->commit, sizeof e->commit, "%s", commit);
        snprintf(e->path, sizeof e->path, "%s", files[i].path);
        hf_gguf_quant(files[i].path, e->quant, sizeof e->quant);
        for (int j = 0; j < nf; j++) { /* the parts: same stem, same count */
            int ij, cj;
            size_t sj = split_stem(files[j].path, &ij, &cj);
            if (cj == count && sj == stem && !strncmp(files[j].path, files[i].path, stem))
                e->n_files++, e->size += files[j].size;
        }
    }
    hf_files_free(files, nf);
    return s;
}

/* Bytes of the regular files in a repo dir's blobs/: all of them (what removing it frees), or only
 * the partial downloads (*.incomplete). */
static uint64_t blob_bytes(const char *repo_dir, bool partial_only) {
    char dir[PATH_MAX], p[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/blobs", repo_dir);
    DIR *d = opendir(dir);
    uint64_t total = 0;
    struct stat st;
    for (struct dirent *e; d && (e = readdir(d));) {
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if ((!partial_only || ends_with_ci(e->d_name, ".incomplete")) && !lstat(p, &st) && S_ISREG(st.st_mode))
            total += (uint64_t)st.st_size;
    }
    if (d) closedir(d);
    return total;
}

static int entry_cmp(const void *a, const void *b) {
    const hf_cache_entry *x = a, *y = b;
    int c = strcmp(x->repo, y->repo);
    return c ? c : strcmp(x->path, y->path);
}

brisk_status hf_cache_list(const char *root, hf_cache_entry **entries, int *n, uint64_t *partial) {
    *entries = NULL, *n = 0, *partial = 0;
    DIR *d = opendir(root);
    if (!d) return errno == ENOENT ? BRISK_OK : bk_fail(BRISK_ERR_IO, "%s: %s", root, strerror(errno));
    int cap = 0;
    brisk_status s = BRISK_OK;
    for (struct dirent *e; s == BRISK_OK && (e = readdir(d));) {
        const char *name = e->d_name, *sep;
        char repo[HF_REPO_MAX], dir[PATH_MAX], snaps[PATH_MAX];
        if (strncmp(name, "models--", 8) || !(sep = strstr(name + 8, "--"))) continue;
        snprintf(repo, sizeof repo, "%.*s/%s", (int)(sep - name - 8), name + 8, sep + 2);
        if (!hf_repo_valid(repo) || !hf_repo_dir(root, repo, dir, sizeof dir)) continue;
        *partial += blob_bytes(dir, true);
        snprintf(snaps, sizeof snaps, "%s/snapshots", dir);
        DIR *sd = opendir(snaps);
        for (struct dirent *c; s == BRISK_OK && sd && (c = readdir(sd));)
            if (c->d_name[0] != '.') s = list_snapshot(repo, dir, c->d_name, entries, n, &cap);
        if (sd) closedir(sd);
    }
    closedir(d);
    if (s != BRISK_OK) {
        free(*entries);
        *entries = NULL, *n = 0;
        return s;
    }
    if (*n) qsort(*entries, (size_t)*n, sizeof **entries, entry_cmp);
    return BRISK_OK;
}

/* rm -r of path without following any link (a link is removed, never what it names). */
static brisk_status remove_tree(const char *path, int depth) {
    struct stat st;
    if (lstat(path, &st)) return errno == ENOENT ? BRISK_OK : bk_fail(BRISK_ERR_IO, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        if (depth > MAX_DEPTH + 4) return bk_fail(BRISK_ERR_IO, "%s: too deep", path);
        DIR *d = opendir(path);
        if (!d) return bk_fail(BRISK_ERR_IO, "%s: %s", path, strerror(errno));
        brisk_status s = BRISK_OK;
        for (struct dirent *e; s == BRISK_OK && (e = readdir(d));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[PATH_MAX];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            s = remove_tree(sub, depth + 1);
        }
        closedir(d);
        if (s == BRISK_OK && rmdir(path)) return bk_fail(BRISK_ERR_IO, "rmdir %s: %s", path, strerror(errno));
        return s;
    }
    if (unlink(path)) return bk_fail(BRISK_ERR_IO, "rm %s: %s", path, strerror(errno));
    return BRISK_OK;
}

/* Removes dir and its parents up to (not including) stop while they are empty. */
static void prune_empty(char *dir, const char *stop) {
    size_t k = strlen(stop);
    while (strlen(dir) > k && !rmdir(dir)) {
        char *s = strrchr(dir, '/');
        if (!s) break;
        *s = 0;
    }
}

/* Unlinks quant's model GGUFs in every snapshot; collects the oids every remaining link names. */
static brisk_status unlink_quant(const char *dir, const char *quant, int *removed, file_list *kept) {
    char snaps[PATH_MAX];
    snprintf(snaps, sizeof snaps, "%s/snapshots", dir);
    DIR *sd = opendir(snaps);
    brisk_status s = BRISK_OK;
    for (struct dirent *c; s == BRISK_OK && sd && (c = readdir(sd));) {
        if (c->d_name[0] == '.') continue;
        char snap[PATH_MAX];
        snprintf(snap, sizeof snap, "%s/%s", snaps, c->d_name);
        file_list l = {0};
        s = walk_snapshot(snap, "", 0, &l);
        for (int i = 0; s == BRISK_OK && i < l.n; i++) {
            if (!(hf_gguf_is_model(l.v[i].path) && hf_quant_matches(l.v[i].path, quant))) {
                s = list_push(kept, l.v[i].path, l.v[i].oid, 0);
                continue;
            }
            char p[PATH_MAX];
            snprintf(p, sizeof p, "%s/%s", snap, l.v[i].path);
            if (unlink(p)) s = bk_fail(BRISK_ERR_IO, "rm %s: %s", p, strerror(errno));
            char *slash = strrchr(p, '/');
            *slash = 0;
            prune_empty(p, snaps);
            (*removed)++;
        }
        hf_files_free(l.v, l.n);
    }
    if (sd) closedir(sd);
    return s;
}

brisk_status hf_cache_remove(const char *root, const char *repo, const char *quant, uint64_t *freed) {
    char dir[PATH_MAX];
    struct stat st;
    *freed = 0;
    if (!hf_repo_valid(repo)) return bk_fail(BRISK_ERR_INVALID_ARG, "'%s' is not ORG/NAME", repo);
    if (!hf_repo_dir(root, repo, dir, sizeof dir)) return bk_fail(BRISK_ERR_INVALID_ARG, "path too long");
    /* a real directory of the cache, not a link that leads elsewhere */
    if (lstat(dir, &st) || !S_ISDIR(st.st_mode)) return bk_fail(BRISK_ERR_NOT_FOUND, "%s is not in %s", repo, root);
    if (!quant || !*quant) {
        *freed = blob_bytes(dir, false);
        return remove_tree(dir, 0);
    }
    file_list kept = {0};
    int removed = 0;
    brisk_status s = unlink_quant(dir, quant, &removed, &kept);
    if (s == BRISK_OK && !removed) s = bk_fail(BRISK_ERR_NOT_FOUND, "no %s:%s in %s", repo, quant, root);
    if (s == BRISK_OK && kept.n == 0) { /* nothing left in any snapshot: the repo goes */
        *freed = blob_bytes(dir, false);
        s = remove_tree(dir, 0);
    } else if (s == BRISK_OK) { /* the blobs no remaining link names; partial downloads stay */
        char blobs[PATH_MAX], p[PATH_MAX];
        snprintf(blobs, sizeof blobs, "%s/blobs", dir);
        DIR *d = opendir(blobs);
        for (struct dirent *e; d && (e = readdir(d));) {
            if (!hf_oid_valid(e->d_name)) continue;
            bool used = false;
            for (int i = 0; i < kept.n && !used; i++) used = !strcmp(kept.v[i].oid, e->d_name);
            snprintf(p, sizeof p, "%s/%s", blobs, e->d_name);
            if (!used && !lstat(p, &st) && S_ISREG(st.st_mode) && !unlink(p)) *freed += (uint64_t)st.st_size;
        }
        if (d) closedir(d);
    }
    hf_files_free(kept.v, kept.n);
    return s;
}
