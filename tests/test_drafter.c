/* test_drafter.c — the n-gram drafters' lookups on crafted token sequences
 * (engine/drafter.h): prompt lookup takes the longest suffix that recurs and
 * its most recent occurrence, copies past the history's end with overlap, and
 * proposes nothing without a match; the n-gram cache proposes a clear
 * favourite only, learns incrementally as it does from scratch; replay
 * proposes its reference then wrong tokens. The end-to-end checks (the same
 * text as plain decoding, acceptance on a repeated passage) are in
 * tests/t_spec.sh. */
#include "engine/drafter.h"
#include "test.h"

#define N(a) ((int32_t)(sizeof(a) / sizeof *(a)))

static void test_lookup_longest(void) {
    /* "1 2 3" recurs at 0 (then 9); the shorter "2 3" recurs later, at 5 (then 7): longest wins */
    brisk_token h[] = {1, 2, 3, 9, 5, 2, 3, 7, 8, 1, 2, 3};
    brisk_token out[8];
    int m, k = drafter_lookup_search(h, N(h), 1, 4, 3, out, &m);
    CHECK(k == 3 && m == 3);
    CHECK(out[0] == 9 && out[1] == 5 && out[2] == 2);
    /* with the longest allowed n-gram 2, "2 3" at 5 is the match */
    k = drafter_lookup_search(h, N(h), 1, 2, 2, out, &m);
    CHECK(k == 2 && m == 2 && out[0] == 7 && out[1] == 8);
}

static void test_lookup_recent(void) {
    /* "4 5" occurs at 0 (then 6) and at 3 (then 7): the most recent wins */
    brisk_token h[] = {4, 5, 6, 4, 5, 7, 4, 5};
    brisk_token out[4];
    int m, k = drafter_lookup_search(h, N(h), 2, 4, 1, out, &m);
    CHECK(k == 1 && m == 2 && out[0] == 7);
}

static void test_lookup_none(void) {
    brisk_token h[] = {1, 2, 3, 4, 5, 2};
    brisk_token out[4] = {0};
    int m = -1;
    CHECK(drafter_lookup_search(h, N(h), 2, 4, 4, out, &m) == 0 && m == 0); /* "5 2" never recurs */
    CHECK(drafter_lookup_search(h, N(h), 1, 4, 4, out, &m) == 4 && m == 1); /* "2" does, at 1 */
    CHECK(out[0] == 3 && out[1] == 4 && out[2] == 5 && out[3] == 2);
    CHECK(drafter_lookup_search(h, 1, 1, 4, 4, out, &m) == 0);                               /* one token */
    /* the interface: a lookup drafter proposes nothing either */
    drafter *d = NULL;
    CHECK_OK(drafter_new_lookup(2, 4, &d));
    int k = -1;
    if (d) CHECK_OK(drafter_draft(d, h, N(h), 4, out, &k));
    CHECK(k == 0);
    drafter_free(d);
    CHECK(drafter_new_lookup(3, 2, &d) == BRISK_ERR_INVALID_ARG && d == NULL);
}

static void test_lookup_overlap(void) {
    /* a loop: "7 8" recurs at 0; what followed runs into the suffix, then into the proposal itself */
    brisk_token h[] = {7, 8, 7, 8};
    brisk_token out[6];
    int m, k = drafter_lookup_search(h, N(h), 1, 4, 6, out, &m);
    CHECK(k == 6 && m == 2);
    for (int i = 0; i < 6; i++) CHECK(out[i] == (i % 2 ? 8 : 7));
}

static void test_cache_favourite(void) {
    /* "1" was followed by 2, 2, 3 (2 at 67% >= 66%); "1 2" by 1 twice */
    brisk_token h[] = {1, 2, 1, 2, 1, 3, 1};
    drafter *d = NULL;
    CHECK_OK(drafter_new_cache(64, &d));
    if (!d) return;
    brisk_token out[4];
    int k = 0;
    CHECK_OK(drafter_begin(d, h, N(h)));
    CHECK_OK(drafter_draft(d, h, N(h), 2, out, &k));
    CHECK(k == 2 && out[0] == 2 && out[1] == 1);
    drafter_free(d);
    /* "1" followed by 2 and 3 once each (50% < 66%), no longer n-gram seen: nothing */
    brisk_token h2[] = {1, 2, 1, 3, 1};
    CHECK_OK(drafter_new_cache(64, &d));
    if (!d) return;
    CHECK_OK(drafter_begin(d, h2, N(h2)));
    k = -1;
    CHECK_OK(drafter_draft(d, h2, N(h2), 4, out, &k));
    CHECK(k == 0);
    drafter_free(d);
}

static void test_cache_incremental(void) {
    /* learning the history in two syncs proposes what learning it at once does; a 4-gram
     * seen once (the largest size, 50% rule, one sighting enough) outranks a 1-gram */
    brisk_token h[] = {5, 6, 7, 8, 9, 6, 6, 6, 1, 5, 6, 7, 8};
    drafter *a = NULL, *b = NULL;
    CHECK_OK(drafter_new_cache(64, &a));
    CHECK_OK(drafter_new_cache(64, &b));
    if (!a || !b) goto out;
    CHECK_OK(drafter_begin(a, h, N(h)));
    CHECK_OK(drafter_begin(b, h, 4));
    CHECK_OK(drafter_sync(b, h, 9));
    CHECK_OK(drafter_sync(b, h, N(h)));
    brisk_token oa[4], ob[4];
    int ka = 0, kb = 0;
    CHECK_OK(drafter_draft(a, h, N(h), 4, oa, &ka));
    CHECK_OK(drafter_draft(b, h, N(h), 4, ob, &kb));
    CHECK(ka == kb && ka >= 2 && oa[0] == 9 && oa[1] == 6);
    for (int i = 0; i < ka && i < kb; i++) CHECK(oa[i] == ob[i]);
out:
    drafter_free(a);
    drafter_free(b);
}

static void test_replay(void) {
    brisk_token ref[] = {10, 11, 12, 13, 14, 15, 19};
    drafter *d = NULL;
    CHECK_OK(drafter_new_replay(ref, N(ref), 2, 20, &d));
    if (!d) return;
    brisk_token out[4];
    int k = 0;
    CHECK_OK(drafter_draft(d, ref, 2, 4, out, &k));
    CHECK(k == 4 && out[0] == 12 && out[1] == 13 && out[2] == 15 && out[3] == 16);
    CHECK_OK(drafter_draft(d, ref, 5, 2, out, &k));
    CHECK(k == 2 && out[0] == 15 && out[1] == 19);
    drafter_free(d);
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"lookup_longest", test_lookup_longest}, {"lookup_recent", test_lookup_recent},
        {"lookup_none", test_lookup_none},       {"lookup_overlap", test_lookup_overlap},
        {"cache_favourite", test_cache_favourite}, {"cache_incremental", test_cache_incremental},
        {"replay", test_replay},
    };
    return test_main(cases, sizeof cases / sizeof *cases, argc, argv);
}
