/*
 * Native tests of the cache simulator core against synthetic traces with known answers, and a
 * geometry checker the host tool uses to reject bad --levels before booting anything.
 *
 *   test_cachesim               run the tests; prints "ok NAME" / "FAIL NAME: why" lines and
 *                               a closing "N passed, N failed"; exit status 1 on any failure
 *   test_cachesim --check SPEC  validate "G1/G2/..." (G = SIZE:ASSOC[:LINE]); one-line error
 */
#include "cachesim_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;

#define CHECK_EQ(name, got, want)                                                                  \
    do {                                                                                           \
        unsigned long long g_ = (unsigned long long)(got), w_ = (unsigned long long)(want);        \
        if (g_ == w_) {                                                                            \
            printf("ok %s\n", name);                                                               \
            passed++;                                                                              \
        } else {                                                                                   \
            printf("FAIL %s: got %llu, want %llu\n", name, g_, w_);                                \
            failed++;                                                                              \
        }                                                                                          \
    } while (0)

#define L(n) ((uint64_t)(n) * 64)

static cs_shape single(uint64_t size, uint32_t assoc)
{
    cs_shape s;
    memset(&s, 0, sizeof s);
    s.levels = 1;
    s.level[0] = (cs_geom){size, assoc, 64};
    s.lat[1] = 100;
    return s;
}

static const char *const TWO[] = {"shared", "separate"};
static const int TWO_SHARED[] = {0, 1};

static void test_lru(void)
{
    cs_cache c;
    cs_geom g = {128, 2, 64}; /* one set, two ways */
    cs_cache_init(&c, &g);
    int ev;
    uint64_t victim = 0;
    cs_cache_access(&c, L(1), &ev, &victim);
    cs_cache_access(&c, L(2), &ev, &victim);
    CHECK_EQ("lru: hit on A", cs_cache_access(&c, L(1), &ev, &victim), 1);
    cs_cache_access(&c, L(3), &ev, &victim); /* evicts B, the least recently used */
    CHECK_EQ("lru: C evicts B", victim, L(2));
    CHECK_EQ("lru: A still present", cs_cache_probe(&c, L(1)), 1);
    CHECK_EQ("lru: B gone", cs_cache_probe(&c, L(2)), 0);
    CHECK_EQ("lru: invalidate A", cs_cache_invalidate(&c, L(1)), 1);
    CHECK_EQ("lru: refill after invalidate is a miss without eviction",
             cs_cache_access(&c, L(4), &ev, &victim) == 0 && ev == 0, 1);
    cs_cache_free(&c);
}

/* Sequential loops: 2x the cache misses on every access; half the cache misses only cold. */
static void test_loops(void)
{
    char err[256];
    for (int half = 0; half < 2; half++) {
        cs_model m;
        cs_shape s = single(32 << 10, 8);
        cs_model_init(&m, &s, 2, TWO_SHARED, TWO, err, sizeof err);
        uint64_t lines = half ? 256 : 1024; /* 16 KB or 64 KB */
        for (int pass = 0; pass < 4; pass++)
            for (uint64_t i = 0; i < lines; i++)
                cs_model_access(&m, CS_APP, L(i), 0, 0);
        CHECK_EQ(half ? "loop over half the cache: cold misses only" : "loop over twice the cache: every access misses",
                 m.place[1].st.misses[CS_APP][0][1], half ? 256 : 4096);
        CHECK_EQ("loop: no OS activity, no competition", m.cmp.competition[CS_APP][0], 0);
        cs_model_free(&m);
    }
}

static void test_inclusion(void)
{
    char err[256];
    for (int incl = 0; incl < 2; incl++) {
        cs_shape s;
        memset(&s, 0, sizeof s);
        s.levels = 2;
        s.level[0] = (cs_geom){128, 2, 64}; /* L1: 1 set x 2 ways */
        s.level[1] = (cs_geom){128, 2, 64}; /* L2: 1 set x 2 ways */
        s.inclusive = incl ? 1u << 1 : 0; /* L2 inclusive of L1 */
        cs_model m;
        const int shared[] = {0};
        const char *const names[] = {"one"};
        cs_model_init(&m, &s, 1, shared, names, err, sizeof err);
        cs_model_access(&m, CS_APP, L(1), 0, 0); /* A */
        cs_model_access(&m, CS_APP, L(2), 0, 0); /* B: L2 order B,A */
        cs_model_access(&m, CS_APP, L(1), 0, 0); /* A hits L1; L2 untouched, A stays LRU there */
        cs_model_access(&m, CS_APP, L(3), 0, 0); /* C: L1 evicts B, L2 evicts A */
        uint64_t before = m.place[0].st.misses[CS_APP][0][1];
        cs_model_access(&m, CS_APP, L(1), 0, 0); /* A again */
        CHECK_EQ(incl ? "inclusive: L2 eviction removes A from L1" : "non-inclusive: A survives in L1",
                 m.place[0].st.misses[CS_APP][0][1] - before, incl ? 1 : 0);
        CHECK_EQ(incl ? "inclusive: one back-invalidation" : "non-inclusive: no back-invalidation",
                 m.place[0].st.back_invalidations, incl ? 1 : 0);
        cs_model_free(&m);
    }
}

static void test_competition_cooperation(void)
{
    char err[256];
    cs_model m;
    cs_shape s = single(128, 2); /* one set, two ways */
    cs_model_init(&m, &s, 2, TWO_SHARED, TWO, err, sizeof err);
    cs_model_access(&m, CS_OS, L(10), 0, 0);  /* X: cold, alone */
    cs_model_access(&m, CS_APP, L(1), 0, 0);  /* A: cold */
    cs_model_access(&m, CS_APP, L(2), 0, 0);  /* B: cold; shared cache now evicted X */
    cs_model_access(&m, CS_OS, L(10), 0, 0);  /* X: hit in the OS's own cache, miss shared */
    CHECK_EQ("competition: OS line evicted by the application", m.cmp.competition[CS_OS][0], 1);
    CHECK_EQ("competition: alone misses are the cold ones (OS)", m.cmp.alone[CS_OS][0], 1);
    CHECK_EQ("competition: alone misses are the cold ones (app)", m.cmp.alone[CS_APP][0], 2);
    cs_model_free(&m);

    cs_model_init(&m, &s, 2, TWO_SHARED, TWO, err, sizeof err);
    cs_model_access(&m, CS_OS, L(5), 0, 1);  /* OS writes a buffer line */
    cs_model_access(&m, CS_APP, L(5), 0, 0); /* app reads it: hit shared, miss separate */
    CHECK_EQ("cooperation: app reads what the OS wrote", m.cmp.cooperation[CS_APP][0], 1);
    cs_model_access(&m, CS_OS, L(5), 0, 1);  /* OS writes again: invalidates app's copy */
    CHECK_EQ("coherence: OS write invalidates the app's separate copy",
             m.place[1].st.coherence_invalidations[CS_OS], 1);
    CHECK_EQ("coherence: no invalidation in a shared cache", m.place[0].st.coherence_invalidations[CS_OS], 0);
    cs_model_access(&m, CS_APP, L(5), 0, 0);
    CHECK_EQ("cooperation: re-read after invalidation", m.cmp.cooperation[CS_APP][0], 2);
    CHECK_EQ("identity: shared misses = alone + competition",
             m.place[0].st.misses[0][0][1] + m.place[0].st.misses[1][0][1],
             m.cmp.alone[0][0] + m.cmp.alone[1][0] + m.cmp.competition[0][0] + m.cmp.competition[1][0]);
    CHECK_EQ("identity: separate misses = alone + cooperation",
             m.place[1].st.misses[0][0][1] + m.place[1].st.misses[1][0][1],
             m.cmp.alone[0][0] + m.cmp.alone[1][0] + m.cmp.cooperation[0][0] + m.cmp.cooperation[1][0]);
    cs_model_free(&m);
}

/* The paper's placements on the Nehalem shape: a line the OS writes and the app then reads
 * costs nothing on one core, an L3 access on two cores, memory on two chips. */
static void test_placement_latency(void)
{
    char err[256];
    cs_shape s;
    memset(&s, 0, sizeof s);
    s.levels = 3;
    s.split_l1 = 1;
    s.l1i = (cs_geom){32 << 10, 4, 64};
    s.level[0] = (cs_geom){32 << 10, 8, 64};
    s.level[1] = (cs_geom){256 << 10, 8, 64};
    s.level[2] = (cs_geom){8 << 20, 16, 64};
    s.lat[1] = 10;
    s.lat[2] = 38;
    s.lat[3] = 191;
    s.inclusive = 1u << 2;
    const int shared[] = {0, 2, 3};
    const char *const names[] = {"same-core", "two-cores", "two-chips"};
    cs_model m;
    if (cs_model_init(&m, &s, 3, shared, names, err, sizeof err)) {
        printf("FAIL nehalem init: %s\n", err);
        failed++;
        return;
    }
    cs_model_access(&m, CS_APP, L(7), 0, 0); /* app has the line */
    cs_model_access(&m, CS_OS, L(7), 0, 1);  /* OS writes it */
    uint64_t c0 = m.place[0].st.cycles[CS_APP], c1 = m.place[1].st.cycles[CS_APP], c2 = m.place[2].st.cycles[CS_APP];
    cs_model_access(&m, CS_APP, L(7), 0, 0); /* app reads it back */
    CHECK_EQ("placement: same core re-read hits L1", m.place[0].st.cycles[CS_APP] - c0, 0);
    CHECK_EQ("placement: two cores re-read costs the L3", m.place[1].st.cycles[CS_APP] - c1, 38);
    CHECK_EQ("placement: two chips re-read costs memory", m.place[2].st.cycles[CS_APP] - c2, 191);
    m.insns[CS_APP] = 2;
    m.insns[CS_OS] = 1;
    /* two-chips: app 191 (cold) + 191, OS 191 (cold, own chip) = 573 cycles over 3 insns */
    CHECK_EQ("placement: CPI is cycles over instructions (x1000)", (uint64_t)(cs_model_cpi(&m, 2) * 1000 + 0.5), 191000);
    cs_model_free(&m);
}

/* The fast paths are exact: a random trace with locality, OS and app, fetches and writes, on a
 * small three-level shape (so that every eviction path runs) gives identical statistics with
 * and without them. */
static void test_fast_paths_exact(void)
{
    char err[256];
    cs_shape s;
    memset(&s, 0, sizeof s);
    s.levels = 3;
    s.split_l1 = 1;
    s.l1i = (cs_geom){1024, 2, 64};
    s.level[0] = (cs_geom){1024, 4, 64};
    s.level[1] = (cs_geom){4096, 4, 64};
    s.level[2] = (cs_geom){16384, 8, 64};
    s.lat[1] = 10;
    s.lat[2] = 38;
    s.lat[3] = 191;
    s.inclusive = 1u << 2;
    const int shared[] = {0, 2, 3};
    const char *const names[] = {"same-core", "two-cores", "two-chips"};
    cs_model a, b, c; /* a: fast paths; b: none; c: fast paths and the repeat filter */
    cs_repeat rep;
    cs_repeat_init(&rep);
    cs_fast_paths = 1;
    cs_model_init(&a, &s, 3, shared, names, err, sizeof err);
    cs_model_init(&c, &s, 3, shared, names, err, sizeof err);
    cs_fast_paths = 0;
    cs_model_init(&b, &s, 3, shared, names, err, sizeof err);
    uint64_t x = 88172645463325252ull, cur[2] = {0, 0};
    for (int i = 0; i < 300000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int party = (int)(x >> 60) & 1, fetch = ((x >> 40) & 7) == 0, write = !fetch && ((x >> 20) & 3) == 0;
        /* mostly near the party's current position, sometimes a jump, sometimes shared lines */
        if (((x >> 8) & 15) == 0)
            cur[party] = (x >> 24) % 2048;
        else
            cur[party] = (cur[party] + ((x >> 4) & 3)) % 2048;
        uint64_t line = ((x >> 33) & 7) == 0 ? 4096 + ((x >> 45) & 7) : cur[party] + (uint64_t)party * 2048;
        cs_fast_paths = 1;
        cs_model_access(&a, party, L(line), fetch, write);
        if (!cs_repeat_access(&rep, L(line), 6, party, fetch, write))
            cs_model_access(&c, party, L(line), fetch, write);
        cs_fast_paths = 0;
        cs_model_access(&b, party, L(line), fetch, write);
    }
    cs_fast_paths = 1;
    cs_model_add_repeats(&c, &rep);
    int same = 1, same_rep = 1;
    for (int p = 0; p < 3; p++)
        same_rep &= memcmp(&c.place[p].st, &b.place[p].st, sizeof c.place[p].st) == 0;
    same_rep &= memcmp(&c.cmp, &b.cmp, sizeof c.cmp) == 0;
    CHECK_EQ("repeat filter: identical statistics on a random trace", same_rep, 1);
    CHECK_EQ("repeat filter: the trace had repeats", rep.repeats[0][1] + rep.repeats[1][1] > 0, 1);
    for (int p = 0; p < 3; p++)
        same &= memcmp(&a.place[p].st, &b.place[p].st, sizeof a.place[p].st) == 0;
    same &= memcmp(&a.cmp, &b.cmp, sizeof a.cmp) == 0;
    CHECK_EQ("fast paths: identical statistics on a random trace", same, 1);
    CHECK_EQ("fast paths: the trace exercised coherence", b.place[2].st.coherence_invalidations[0] > 0, 1);
    CHECK_EQ("fast paths: the trace exercised inclusion", b.place[0].st.back_invalidations > 0, 1);
    cs_model_free(&a);
    cs_model_free(&b);
    cs_model_free(&c);
}

static void test_geometry(void)
{
    cs_geom g;
    char err[256];
    CHECK_EQ("geometry: 32K:8:64 is fine", cs_geom_parse("32K:8:64", &g, err, sizeof err), 0);
    CHECK_EQ("geometry: 32K:8 has 64 sets", g.size / (g.assoc * g.line), 64);
    CHECK_EQ("geometry: 48K:8 (96 sets) is rejected", cs_geom_parse("48K:8", &g, err, sizeof err), (uint64_t)-1);
    CHECK_EQ("geometry: the error names the set count", strstr(err, "96 sets") != NULL, 1);
    CHECK_EQ("geometry: associativity 0 is rejected", cs_geom_parse("32K:0", &g, err, sizeof err), (uint64_t)-1);
    CHECK_EQ("geometry: line 48 is rejected", cs_geom_parse("32K:8:48", &g, err, sizeof err), (uint64_t)-1);
    CHECK_EQ("geometry: junk is rejected", cs_geom_parse("big", &g, err, sizeof err), (uint64_t)-1);
}

static int check_spec(const char *spec)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    int n = 0;
    uint32_t line = 0;
    for (char *tok = strtok_r(buf, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
        cs_geom g;
        char err[256];
        if (cs_geom_parse(tok, &g, err, sizeof err)) {
            printf("%s\n", err);
            return 1;
        }
        if (n > 0 && g.line != line) {
            printf("cache `%s`: all levels need the same line size\n", tok);
            return 1;
        }
        line = g.line;
        if (++n > CS_MAX_LEVELS) {
            printf("at most %d levels\n", CS_MAX_LEVELS);
            return 1;
        }
    }
    if (n == 0) {
        printf("--levels needs SIZE:ASSOC[:LINE][/...]\n");
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--check"))
        return check_spec(argv[2]);
    test_lru();
    test_loops();
    test_inclusion();
    test_competition_cooperation();
    test_placement_latency();
    test_fast_paths_exact();
    test_geometry();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
