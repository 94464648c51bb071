/* test_hf_cache.c — hub/hf_cache (names, picking, the cache layout offline) and
 * base/sha256 (the digest downloads are checked with). The network side is
 * tests/t_pull.sh's, against tests/hub_server.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/sha256.h"
#include "brisk.h"
#include "hub/hf_cache.h"
#include "test.h"

static bool sha_is(const char *data, size_t len, size_t step, const char *want) {
    sha256_ctx c;
    char hex[65];
    sha256_init(&c);
    for (size_t off = 0; off < len; off += step) sha256_update(&c, data + off, len - off < step ? len - off : step);
    sha256_final_hex(&c, hex);
    return !strcmp(hex, want);
}

/* FIPS 180-4's examples, fed whole and in odd pieces (the partial-block path of sha256_update) */
static void test_sha256(void) {
    CHECK(sha_is("", 0, 1, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    CHECK(sha_is("abc", 3, 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 56 bytes: padding spills a block */
    for (size_t step = 1; step <= 64; step += 7)
        CHECK(sha_is(two, strlen(two), step, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    CHECK(sha_is(a, 1000000, 4099, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
    free(a);
}

static void test_spec_and_names(void) {
    char repo[HF_REPO_MAX], quant[HF_QUANT_MAX];
    CHECK_OK(hf_spec_parse("ggml-org/gemma-3-1b-it-GGUF:q4_k_m", repo, quant));
    CHECK(!strcmp(repo, "ggml-org/gemma-3-1b-it-GGUF") && !strcmp(quant, "q4_k_m"));
    CHECK_OK(hf_spec_parse("unsloth/Qwen3.5-9B-GGUF", repo, quant));
    CHECK(!strcmp(repo, "unsloth/Qwen3.5-9B-GGUF") && !quant[0]);
    const char *bad[] = {"", "name", "/etc/passwd", "a/b/c", "../x", "a/..", "a/.hidden", "a/b--c", "a/b..c",
                         "a/b:", "a/b:Q4 K", "a/b:../x", "a b/c", "-a/b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(hf_spec_parse(bad[i], repo, quant) == BRISK_ERR_INVALID_ARG);
    CHECK(hf_rel_path_valid("a/b.gguf") && !hf_rel_path_valid("/a") && !hf_rel_path_valid("a/../../b") &&
          !hf_rel_path_valid("a//b") && !hf_rel_path_valid("./a") && !hf_rel_path_valid(""));
    CHECK(hf_oid_valid("270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d") &&
          hf_oid_valid("c396b4b0ce4c997408771428c5c424f2e5ec51b3") && !hf_oid_valid("../../etc/passwd") &&
          !hf_oid_valid("C396B4B0CE4C997408771428C5C424F2E5EC51B3"));
}

static void test_quant_rules(void) {
    CHECK(hf_quant_matches("x-Q4_K_M.gguf", "q4_k_m") && hf_quant_matches("Q4_K_M/x.Q4_K_M-00001-of-00002.gguf", "Q4_K_M"));
    CHECK(!hf_quant_matches("x-Q4_K_M.gguf", "Q4_K") && !hf_quant_matches("x-IQ4_K_M.gguf", "Q4_K_M") &&
          !hf_quant_matches("x-Q4_K_M.gguf", ""));
    int ix, n;
    hf_gguf_split("d/x-Q8_0-00002-of-00003.gguf", &ix, &n);
    CHECK(ix == 2 && n == 3);
    hf_gguf_split("x-Q8_0.gguf", &ix, &n);
    CHECK(ix == 1 && n == 1);
    hf_gguf_split("x-00004-of-00003.gguf", &ix, &n); /* not a split: index past the count */
    CHECK(ix == 1 && n == 1);
    char q[HF_QUANT_MAX];
    hf_gguf_quant("d/x-q4_k_m-00001-of-00002.gguf", q, sizeof q);
    CHECK(!strcmp(q, "Q4_K_M"));
    hf_gguf_quant("stories260K.gguf", q, sizeof q);
    CHECK(!q[0]);
    hf_gguf_quant("Llama-3.2-1B.BF16.gguf", q, sizeof q);
    CHECK(!strcmp(q, "BF16"));
    CHECK(!hf_gguf_is_model("mmproj-x-F16.gguf") && !hf_gguf_is_model("README.md") && hf_gguf_is_model("a/x.GGUF"));
}

#define F(p) {(char *)(p), (char *)"", true, 1}
static void test_select(void) {
    hf_file files[] = {F("README.md"), F("mmproj-x-F16.gguf"), F("x-F16.gguf"), F("x-Q8_0.gguf"),
                       F("Q2/x-Q2_K-00002-of-00002.gguf"), F("Q2/x-Q2_K-00001-of-00002.gguf"), F("x-Q4_K_M.gguf"),
                       F("Q3/x-Q3_K-00001-of-00002.gguf")};
    int n = (int)(sizeof files / sizeof files[0]), sel[8], ns;
    CHECK_OK(hf_select(files, n, NULL, sel, &ns));
    CHECK(ns == 1 && sel[0] == 6); /* Q4_K_M before the rest */
    CHECK_OK(hf_select(files, 6, "", sel, &ns));
    CHECK(ns == 1 && sel[0] == 3); /* no Q4_K_M: Q8_0 */
    CHECK_OK(hf_select(files, 3, "", sel, &ns));
    CHECK(ns == 1 && sel[0] == 2); /* neither: the first model, never the mmproj */
    CHECK_OK(hf_select(files, n, "q2_k", sel, &ns));
    CHECK(ns == 2 && sel[0] == 5 && sel[1] == 4); /* parts in order, whatever the listing's */
    CHECK(hf_select(files, n, "Q3_K", sel, &ns) == BRISK_ERR_FORMAT && strstr(brisk_last_error(), "part 2 of 2"));
    CHECK(hf_select(files, n, "Q5_K_M", sel, &ns) == BRISK_ERR_NOT_FOUND && strstr(brisk_last_error(), "Q8_0") &&
          !strstr(brisk_last_error(), "mmproj"));
    CHECK(hf_select(files, 2, NULL, sel, &ns) == BRISK_ERR_NOT_FOUND);
}

static void test_root(void) {
    char root[4096];
    setenv("HF_HUB_CACHE", "/c", 1), setenv("HF_HOME", "/h", 1), setenv("HOME", "/home/u", 1);
    CHECK_OK(hf_cache_root(root, sizeof root));
    CHECK(!strcmp(root, "/c"));
    unsetenv("HF_HUB_CACHE");
    CHECK_OK(hf_cache_root(root, sizeof root));
    CHECK(!strcmp(root, "/h/hub"));
    unsetenv("HF_HOME"), unsetenv("XDG_CACHE_HOME");
    CHECK_OK(hf_cache_root(root, sizeof root));
    CHECK(!strcmp(root, "/home/u/.cache/huggingface/hub"));
    CHECK(hf_repo_dir("/r", "org/name", root, sizeof root) && !strcmp(root, "/r/models--org--name"));
}

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

/* The layout offline: links, refs, find, list and remove, as a pull leaves them. */
static void test_layout(void) {
    char root[] = "/tmp/brisk_hfcache_XXXXXX", dir[4096], p[4096];
    const char *commit = "c396b4b0ce4c997408771428c5c424f2e5ec51b3";
    const char *oa = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const char *ob = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    CHECK(mkdtemp(root) != NULL);
    CHECK(hf_repo_dir(root, "org/m-GGUF", dir, sizeof dir));
    snprintf(p, sizeof p, "%s/blobs", dir);
    CHECK(mkdir(dir, 0777) == 0 && mkdir(p, 0777) == 0);
    snprintf(p, sizeof p, "%s/blobs/%s", dir, oa), put(p, "AAAA");
    snprintf(p, sizeof p, "%s/blobs/%s", dir, ob), put(p, "BB");
    CHECK_OK(hf_cache_link(dir, commit, "m-Q4_K_M.gguf", oa));
    CHECK_OK(hf_cache_link(dir, commit, "sub/m-Q8_0.gguf", ob));
    CHECK_OK(hf_cache_link(dir, commit, "sub/m-Q8_0.gguf", ob)); /* again: replaced, not an error */
    char target[256] = {0};
    snprintf(p, sizeof p, "%s/snapshots/%s/sub/m-Q8_0.gguf", dir, commit);
    CHECK(readlink(p, target, sizeof target - 1) > 0 && !strcmp(target, "../../../blobs/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"));
    char **paths;
    int n;
    CHECK(hf_cache_find(root, "org/m-GGUF", "Q8_0", &paths, &n) == BRISK_ERR_NOT_FOUND); /* no refs/main yet */
    CHECK_OK(hf_cache_ref_write(dir, commit));
    char got[HF_COMMIT_LEN + 1];
    CHECK_OK(hf_cache_ref_read(dir, got));
    CHECK(!strcmp(got, commit));
    CHECK_OK(hf_cache_find(root, "org/m-GGUF", "q8_0", &paths, &n));
    CHECK(n == 1 && !strcmp(paths[0], p));
    hf_paths_free(paths, n);
    hf_cache_entry *e;
    uint64_t partial, freed;
    snprintf(p, sizeof p, "%s/blobs/%s.incomplete", dir, oa), put(p, "123");
    CHECK_OK(hf_cache_list(root, &e, &n, &partial));
    CHECK(n == 2 && partial == 3 && !strcmp(e[0].quant, "Q4_K_M") && e[0].size == 4 && !strcmp(e[1].quant, "Q8_0") &&
          !strcmp(e[1].repo, "org/m-GGUF"));
    free(e);
    CHECK_OK(hf_cache_remove(root, "org/m-GGUF", "Q4_K_M", &freed));
    CHECK(freed == 4 && hf_cache_find(root, "org/m-GGUF", "Q4_K_M", &paths, &n) == BRISK_ERR_NOT_FOUND);
    CHECK(access(p, F_OK) == 0); /* a partial download stays while the repo does */
    CHECK(hf_cache_remove(root, "org/m-GGUF", "Q4_K_M", &freed) == BRISK_ERR_NOT_FOUND);
    CHECK(hf_cache_remove(root, "../x", NULL, &freed) == BRISK_ERR_INVALID_ARG);
    CHECK_OK(hf_cache_remove(root, "org/m-GGUF", "Q8_0", &freed)); /* the last file: the repo goes */
    CHECK(freed == 2 + 3 && access(dir, F_OK) != 0);
    CHECK_OK(hf_cache_list(root, &e, &n, &partial));
    CHECK(n == 0 && partial == 0);
    free(e);
    CHECK(rmdir(root) == 0);
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"sha256", test_sha256},           {"spec_and_names", test_spec_and_names}, {"quant_rules", test_quant_rules},
        {"select", test_select},           {"root", test_root},                     {"layout", test_layout},
    };
    return test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
