/*
 * Native tests of the cache simulator core against synthetic traces with known answers, and a
 * geometry checker the host tool uses to reject bad --levels before booting anything.
 *
 *   test_cachesim               run the tests; prints "ok NAME" / "FAIL NAME: why" lines and
 *                               a closing "N passed, N failed"; exit status 1 on any failure
 *   test_cachesim --check SPEC  validate "G1/G2/..." (G = SIZE:ASSOC[:LINE]); one-line error
 */
#include "cachesim_core.h"
#include "cachesim_mc.h"

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
    cs_shape s = cs_shape_nehalem_like((cs_geom){32 << 10, 4, 64}, (cs_geom){32 << 10, 8, 64}, (cs_geom){256 << 10, 8, 64}, (cs_geom){8 << 20, 16, 64});
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
    cs_shape s = cs_shape_nehalem_like((cs_geom){1024, 2, 64}, (cs_geom){1024, 4, 64}, (cs_geom){4096, 4, 64}, (cs_geom){16384, 8, 64});
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

/* ---- multi-core hierarchies (cachesim_mc.c) ---- */

static mc_model mc_new(const char *preset)
{
    mc_model m;
    mc_shape sh;
    char err[256];
    if (mc_preset(preset, &sh) || mc_init(&m, &sh, err, sizeof err)) {
        printf("FAIL mc: cannot build %s: %s\n", preset, err);
        exit(1);
    }
    return m;
}

/* core reads lines [first, first + n) `passes` times, one access per line */
static void mc_stream(mc_model *m, int core, uint64_t first, uint64_t n, int passes)
{
    for (int p = 0; p < passes; p++)
        for (uint64_t i = 0; i < n; i++)
            mc_access(m, core, CS_APP, L(first + i), 0, 0, 1);
}

/* Two cores of one chip stream disjoint 128 KB sets (fit in L2): only cold misses in L2/L3;
 * the same set: the second core finds it in the shared L3; on the other chip, remotely. */
static void test_mc_private_and_shared(void)
{
    mc_model m = mc_new("nehalem-mc");
    mc_stream(&m, 0, 0, 2048, 4);
    mc_stream(&m, 1, 100000, 2048, 4);
    CHECK_EQ("mc: disjoint sets: core 0 misses L1 on every access (128 KB > 32 KB)", m.st[0][CS_APP].l1d_miss, 8192);
    CHECK_EQ("mc: disjoint sets: core 0 misses L2 only cold", m.st[0][CS_APP].l2_miss, 2048);
    CHECK_EQ("mc: disjoint sets: core 0 misses L3 only cold", m.st[0][CS_APP].l3_miss, 2048);
    CHECK_EQ("mc: disjoint sets: core 1 the same", m.st[1][CS_APP].l3_miss, 2048);
    CHECK_EQ("mc: disjoint sets: cold misses come from memory", m.st[1][CS_APP].served[MC_MEM], 2048);
    mc_free(&m);

    m = mc_new("nehalem-mc");
    mc_stream(&m, 0, 0, 2048, 4);
    mc_stream(&m, 1, 0, 2048, 4);
    mc_stream(&m, 4, 0, 2048, 4);
    CHECK_EQ("mc: same set, same chip: core 1 misses its L2 cold", m.st[1][CS_APP].l2_miss, 2048);
    CHECK_EQ("mc: same set, same chip: the shared L3 has it", m.st[1][CS_APP].l3_miss, 0);
    CHECK_EQ("mc: same set, same chip: served by the L3", m.st[1][CS_APP].served[MC_L3], 2048);
    CHECK_EQ("mc: same set, other chip: core 4 misses its chip's L3", m.st[4][CS_APP].l3_miss, 2048);
    CHECK_EQ("mc: same set, other chip: served remotely", m.st[4][CS_APP].served[MC_REMOTE], 2048);
    CHECK_EQ("mc: latency: remote and L3 hits cost their cycles",
             m.st[4][CS_APP].cycles - (m.st[4][CS_APP].served[MC_L2] * 10 + m.st[4][CS_APP].served[MC_L3] * 38), 2048 * 191);
    mc_free(&m);
}

/* Write-invalidate: a write removes the other cores' copies; their re-read is served by the
 * shared L3 (same chip) or the writer's chip (other chip). */
static void test_mc_coherence(void)
{
    mc_model m = mc_new("nehalem-mc");
    mc_stream(&m, 0, 0, 64, 1); /* 4 KB: stays in core 0's L1 */
    mc_stream(&m, 4, 0, 64, 1);
    for (uint64_t i = 0; i < 64; i++)
        mc_access(&m, 1, CS_APP, L(i), 0, 1, 1);
    CHECK_EQ("mc: coherence: core 1's writes remove 64 lines from core 0 (L1+L2) and core 4 (L1+L2) and chip 1's L3",
             m.st[1][CS_APP].inval_sent, 64 * 5);
    uint64_t before = m.st[0][CS_APP].l1d_miss;
    mc_stream(&m, 0, 0, 64, 1);
    CHECK_EQ("mc: coherence: core 0's re-read misses its L1 on every line", m.st[0][CS_APP].l1d_miss - before, 64);
    CHECK_EQ("mc: coherence: ... and is served by the shared L3", m.st[0][CS_APP].served[MC_L3], 64);
    uint64_t remote = m.st[4][CS_APP].served[MC_REMOTE];
    mc_stream(&m, 4, 0, 64, 1);
    CHECK_EQ("mc: coherence: core 4 (other chip) re-reads from chip 0", m.st[4][CS_APP].served[MC_REMOTE] - remote, 64);
    uint64_t hits = m.st[1][CS_APP].served[MC_L1];
    for (uint64_t i = 0; i < 64; i++)
        mc_access(&m, 1, CS_APP, L(i), 0, 0, 1);
    CHECK_EQ("mc: coherence: reads keep the writer's copy (core 1 re-reads from L1)", m.st[1][CS_APP].served[MC_L1] - hits, 64);
    mc_free(&m);
}

/* Victim L3: a write also removes the copy a sibling evicted into the chip's L3, so the
 * sibling's next read comes from the writer's cache, not from a stale L3 line. */
static void test_mc_victim_write(void)
{
    mc_model m = mc_new("amd16");
    mc_access(&m, 1, CS_APP, L(0), 0, 0, 1);
    mc_access(&m, 0, CS_APP, L(0), 0, 0, 1);
    mc_stream(&m, 1, 1000000, 16384, 1); /* 1 MB: line 0 leaves core 1's L2 for the L3 */
    CHECK_EQ("mc victim: the evicted line sits in the chip's L3", cs_cache_probe(&m.l3[0], L(0)), 1);
    mc_access(&m, 0, CS_APP, L(0), 0, 1, 1);
    CHECK_EQ("mc victim: core 0's write removes the L3 copy", cs_cache_probe(&m.l3[0], L(0)), 0);
    mc_access(&m, 1, CS_APP, L(0), 0, 0, 1);
    CHECK_EQ("mc victim: core 1's re-read is served by core 0's cache (sibling)", m.st[1][CS_APP].served[MC_SIBLING], 1);
    CHECK_EQ("mc victim: ... at the sibling latency", m.st[1][CS_APP].cycles -
             (m.st[1][CS_APP].served[MC_L2] * 14 + m.st[1][CS_APP].served[MC_L3] * 75 + m.st[1][CS_APP].served[MC_MEM] * 127), 127);
    mc_free(&m);
}

/* Inclusive L3: a line the L3 evicts leaves every core of the chip. */
static void test_mc_inclusion(void)
{
    mc_shape sh;
    mc_preset("nehalem-mc", &sh);
    sh.l3 = (cs_geom){512 << 10, 16, 64}; /* smaller than two cores' L2s + L1s: evictions */
    mc_model m;
    char err[256];
    mc_init(&m, &sh, err, sizeof err);
    mc_stream(&m, 0, 0, 64, 1);                 /* 4 KB in core 0's L1 */
    mc_stream(&m, 1, 1000000, 8192, 1);         /* 512 KB through the shared L3 */
    uint64_t before = m.st[0][CS_APP].l1d_miss;
    mc_stream(&m, 0, 0, 64, 1);
    CHECK_EQ("mc: inclusion: core 1 pushed core 0's lines out of the L3 and so out of core 0's L1",
             m.st[0][CS_APP].l1d_miss - before, 64);
    CHECK_EQ("mc: inclusion: back-invalidations counted", m.back_invalidations >= 64, 1);
    mc_free(&m);
}

/* Corey's filesum (seeds/000 section 8.4) on the AMD model: four cores on four chips, four
 * 1 MB buffers (each fits in a core's L2 + its chip's victim L3, 2.5 MB; all four do not).
 * Locality: each core sums its own buffer 4 times: L3 misses only in the first pass.
 * Random: in pass p core i sums buffer (i + p) mod 4: every pass misses, served by the chip
 * that summed the buffer in the pass before. */
static void test_mc_filesum(void)
{
    const int cores[4] = {0, 4, 8, 12};
    const uint64_t lines = (1 << 20) / 64;
    for (int random = 0; random < 2; random++) {
        mc_model m = mc_new("amd16");
        for (int p = 0; p < 4; p++)
            for (uint64_t i = 0; i < lines; i++)
                for (int c = 0; c < 4; c++) {
                    uint64_t buf = (uint64_t)(random ? (c + p) % 4 : c);
                    mc_access(&m, cores[c], CS_APP, L(buf * 2 * lines + i), 0, 0, 1);
                }
        if (!random) {
            CHECK_EQ("mc filesum: locality: each core misses its chip's L3 only in the first pass", m.st[4][CS_APP].l3_miss, lines);
            CHECK_EQ("mc filesum: locality: later passes hit the victim L3", m.st[4][CS_APP].served[MC_L3], 3 * lines);
        } else {
            CHECK_EQ("mc filesum: random: every pass misses the L3", m.st[4][CS_APP].l3_miss, 4 * lines);
            CHECK_EQ("mc filesum: random: passes 2-4 are served by another chip", m.st[4][CS_APP].served[MC_REMOTE], 3 * lines);
        }
        mc_free(&m);
    }
    /* the same buffers on four cores of one chip: the chip's caches (4 x 512 KB + 2 MB) hold
     * all four buffers only just; random and locality both thrash less than across chips, and
     * cores of one chip find each other's lines in their L2s (sibling transfers) */
    mc_model m = mc_new("amd16");
    for (int p = 0; p < 2; p++)
        for (uint64_t i = 0; i < lines; i++)
            for (int c = 0; c < 2; c++)
                mc_access(&m, c, CS_APP, L((uint64_t)((c + p) % 2) * 2 * lines + i), 0, 0, 1);
    CHECK_EQ("mc filesum: one chip: pass 2 finds the other core's buffer on the chip (L3 or its L2)",
             m.st[0][CS_APP].served[MC_L3] + m.st[0][CS_APP].served[MC_SIBLING], lines);
    mc_free(&m);
}

/* The repeat filter and the holder mask are exact: a random 8-core trace gives identical
 * statistics with and without them, on both policies. */
static void test_mc_fast_paths_exact(void)
{
    for (int victim = 0; victim < 2; victim++) {
        mc_shape sh;
        mc_preset(victim ? "amd16" : "nehalem-mc", &sh);
        /* small caches so that every eviction path runs */
        sh.l1i = (cs_geom){1024, 2, 64};
        sh.l1d = (cs_geom){1024, 2, 64};
        sh.l2 = (cs_geom){4096, 4, 64};
        sh.l3 = (cs_geom){16384, 8, 64};
        mc_model a, b;
        char err[256];
        mc_init(&a, &sh, err, sizeof err);
        mc_init(&b, &sh, err, sizeof err);
        uint64_t x = 88172645463325252ull, cur[MC_MAX_CORES] = {0};
        int n = sh.ncores;
        for (int i = 0; i < 400000; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            /* runs of one core (like vCPU turns), mostly local, some shared lines */
            int core = (int)((x >> 50) % (uint64_t)n);
            int party = (int)(x >> 61) & 1, fetch = ((x >> 40) & 7) == 0, write = !fetch && ((x >> 20) & 3) == 0;
            if (((x >> 8) & 15) == 0)
                cur[core] = (x >> 24) % 1024;
            else
                cur[core] = (cur[core] + ((x >> 4) & 1)) % 1024;
            uint64_t line = ((x >> 33) & 7) == 0 ? 1u << 20 | ((x >> 45) & 31) : cur[core] + (uint64_t)core * 1024;
            int count = ((x >> 30) & 15) != 0;
            for (int rep = 0; rep < (int)((x >> 36) & 3); rep++) {
                cs_fast_paths = 1;
                mc_access(&a, core, party, L(line), fetch, write, count);
                cs_fast_paths = 0;
                mc_access(&b, core, party, L(line), fetch, write, count);
            }
        }
        cs_fast_paths = 1;
        CHECK_EQ(victim ? "mc fast paths (victim L3): identical statistics on a random trace"
                        : "mc fast paths (inclusive L3): identical statistics on a random trace",
                 memcmp(a.st, b.st, sizeof a.st) == 0 && a.back_invalidations == b.back_invalidations, 1);
        CHECK_EQ(victim ? "mc fast paths (victim L3): the trace had repeats" : "mc fast paths (inclusive L3): the trace had repeats",
                 a.repeats > 0, 1);
        uint64_t inval = 0, remote = 0, sib = 0;
        for (int c = 0; c < n; c++)
            for (int p = 0; p < CS_PARTIES; p++) {
                inval += b.st[c][p].inval_sent;
                remote += b.st[c][p].served[MC_REMOTE];
                sib += b.st[c][p].served[MC_SIBLING];
            }
        CHECK_EQ("mc fast paths: the trace exercised invalidation and remote service", inval > 0 && remote > 0, 1);
        if (victim)
            CHECK_EQ("mc fast paths (victim L3): the trace exercised sibling service", sib > 0, 1);
        else
            CHECK_EQ("mc fast paths (inclusive L3): the trace exercised back-invalidation", b.back_invalidations > 0, 1);
        mc_free(&a);
        mc_free(&b);
    }
}

static void test_mc_shapes(void)
{
    mc_shape sh;
    char err[256];
    CHECK_EQ("mc: preset nehalem-mc is valid", mc_preset("nehalem-mc", &sh) == 0 && mc_shape_check(&sh, err, sizeof err) == 0, 1);
    CHECK_EQ("mc: preset amd16 is valid", mc_preset("amd16", &sh) == 0 && mc_shape_check(&sh, err, sizeof err) == 0, 1);
    CHECK_EQ("mc: amd16 has 4 chips of 4 cores", sh.ncores == 16 && sh.cores_per_chip == 4, 1);
    CHECK_EQ("mc: unknown preset is refused", mc_preset("pentium", &sh), (uint64_t)-1);
    mc_preset("amd16", &sh);
    sh.cores_per_chip = 3;
    CHECK_EQ("mc: 3 cores per chip does not divide 16", mc_shape_check(&sh, err, sizeof err), (uint64_t)-1);
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
    test_mc_shapes();
    test_mc_private_and_shared();
    test_mc_coherence();
    test_mc_inclusion();
    test_mc_victim_write();
    test_mc_filesum();
    test_mc_fast_paths_exact();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
