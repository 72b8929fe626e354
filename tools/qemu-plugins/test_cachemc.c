/* Known-answer tests of the multi-core cache model (cachemc_core.c), run natively. */
#include "cachemc_core.h"

#include <stdio.h>
#include <stdlib.h>

static int failed, passed;

#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        if (cond) {                                                                               \
            passed++;                                                                             \
        } else {                                                                                  \
            failed++;                                                                             \
            printf("FAILED %s:%d: ", __FILE__, __LINE__);                                          \
            printf(__VA_ARGS__);                                                                  \
            printf("\n");                                                                         \
        }                                                                                         \
    } while (0)

static mc_model m;

static void init(const char *preset, int ncores, int per_chip)
{
    mc_shape sh;
    char err[256];
    if (mc_preset(preset, ncores, &sh)) {
        printf("no preset %s\n", preset);
        exit(1);
    }
    if (per_chip)
        sh.cores_per_chip = per_chip;
    if (mc_init(&m, &sh, err, sizeof err)) {
        printf("init: %s\n", err);
        exit(1);
    }
}

/* Read `bytes` from `base` on core `core`, `passes` times (one access per line). */
static void stream(int core, uint64_t base, uint64_t bytes, int passes)
{
    for (int p = 0; p < passes; p++)
        for (uint64_t a = 0; a < bytes; a += 64)
            mc_access(&m, core, CS_APP, base + a, 0, 0, 1);
}

int main(void)
{
    /* 1. Locality vs random, filesum's shape (amd16: 512K L2 + 2M L3 a chip), each core its own
     * chip: 4 cores, 8 "files" of 1 MiB. Locality: core c sums files 2c and 2c+1 (2 MiB: fits in
     * its L2+L3), 8 rounds. Random-like: every core sums every file. L3 misses must differ by far
     * more than 3x (the target; cold misses only in locality). */
    init("amd16", 4, 1);
    for (int r = 0; r < 8; r++)
        for (int c = 0; c < 4; c++)
            for (int f = 2 * c; f < 2 * c + 2; f++)
                stream(c, (uint64_t)f << 20, 1 << 20, 1);
    uint64_t loc = 0;
    for (int c = 0; c < 4; c++)
        loc += m.st[c].l3_miss[CS_APP];
    CHECK(loc == 8 * 16384, "locality: only the cold misses, 8 files x 16384 lines (got %llu)", (unsigned long long)loc);
    mc_free(&m);
    init("amd16", 4, 1);
    for (int r = 0; r < 8; r++)
        for (int c = 0; c < 4; c++)
            for (int f = 2 * c; f < 2 * c + 2; f++)
                stream(c, (uint64_t)((f + 2 * r) % 8) << 20, 1 << 20, 1);
    uint64_t rnd = 0;
    for (int c = 0; c < 4; c++)
        rnd += m.st[c].l3_miss[CS_APP];
    CHECK(rnd == 8 * 8 * 16384, "rotating files: 8 MiB through 2.5 MiB of cache misses on every line (got %llu)", (unsigned long long)rnd);
    CHECK(mc_cpi(&m, 0) == 0.0, "no instructions counted by the model itself: cpi 0");
    mc_free(&m);

    /* 1b. The victim L3 (amd16) adds the L2's capacity: 2.25 MiB read over and over fits in
     * 512K + 2M; with allocation in every level (nehalem-style) the same loop in caches of
     * the same sizes misses on every line (LRU with a cyclic pattern larger than the L3). */
    init("amd16", 1, 1);
    stream(0, 0, (2 << 20) + (256 << 10), 4);
    CHECK(m.st[0].l3_miss[CS_APP] == 36864, "victim L3: only the cold misses (got %llu)", (unsigned long long)m.st[0].l3_miss[CS_APP]);
    mc_free(&m);
    {
        mc_shape sh;
        char err[256];
        mc_preset("amd16", 1, &sh);
        sh.victim_l3 = 0;
        if (mc_init(&m, &sh, err, sizeof err))
            return 1;
        stream(0, 0, (2 << 20) + (256 << 10), 4);
        CHECK(m.st[0].l3_miss[CS_APP] == 4 * 36864, "allocate-in-all: every pass misses (got %llu)", (unsigned long long)m.st[0].l3_miss[CS_APP]);
        mc_free(&m);
    }

    /* 2. A chip's cores share its L3: core 1 reads what core 0 brought in, L3 hits (no misses).
     * (nehalem: lines are allocated in the L3 on the way in.) */
    init("nehalem", 4, 4);
    stream(0, 0, 256 << 10, 1);
    stream(1, 0, 256 << 10, 1);
    CHECK(m.st[0].l3_miss[CS_APP] == 4096, "core 0: cold misses (got %llu)", (unsigned long long)m.st[0].l3_miss[CS_APP]);
    CHECK(m.st[1].l3_miss[CS_APP] == 0 && m.st[1].l2_miss[CS_APP] == 4096, "core 1: L2 misses, L3 hits (got l2 %llu l3 %llu)",
          (unsigned long long)m.st[1].l2_miss[CS_APP], (unsigned long long)m.st[1].l3_miss[CS_APP]);
    CHECK(m.st[1].cycles[CS_APP] == 4096ull * 38, "core 1: L3 latency each (got %llu)", (unsigned long long)m.st[1].cycles[CS_APP]);
    mc_free(&m);

    /* 2b. amd16's victim L3 is shared too: what core 0's L2 evicted, core 1 finds in the L3. */
    init("amd16", 4, 4);
    stream(0, 0, 1 << 20, 1);  /* the first 512K leave core 0's L2 for the chip's L3 */
    stream(1, 0, 256 << 10, 1);
    CHECK(m.st[1].l3_miss[CS_APP] == 0, "core 1: L3 hits on core 0's victims (got %llu misses)", (unsigned long long)m.st[1].l3_miss[CS_APP]);
    mc_free(&m);

    /* 3. Coherence: core 1 writes lines core 0 holds; core 0's next reads miss its L1/L2 again. */
    init("amd16", 8, 4);
    stream(0, 0, 4096, 1); /* 64 lines into core 0 */
    stream(0, 0, 4096, 1);
    CHECK(m.st[0].l1_miss[CS_APP] == 64, "core 0: second pass hits (got %llu)", (unsigned long long)m.st[0].l1_miss[CS_APP]);
    for (uint64_t a = 0; a < 4096; a += 64)
        mc_access(&m, 5, CS_APP, a, 0, 1, 1); /* core 5: another chip */
    CHECK(m.st[5].invalidations[CS_APP] == 64, "core 5's writes invalidated 64 lines (got %llu)", (unsigned long long)m.st[5].invalidations[CS_APP]);
    stream(0, 0, 4096, 1);
    CHECK(m.st[0].l3_miss[CS_APP] == 128, "core 0: the written lines miss all the way again (got %llu)", (unsigned long long)m.st[0].l3_miss[CS_APP]);
    /* A core that writes only its own lines invalidates nothing. */
    for (uint64_t a = 1 << 20; a < (1 << 20) + 4096; a += 64)
        mc_access(&m, 2, CS_APP, a, 0, 1, 1);
    CHECK(m.st[2].invalidations[CS_APP] == 0, "private writes: no invalidations");
    mc_free(&m);

    /* 4. Uncounted (warming) accesses move lines but count nothing. */
    init("amd16", 2, 1);
    for (uint64_t a = 0; a < 4096; a += 64)
        mc_access(&m, 0, CS_APP, a, 0, 0, 0);
    CHECK(m.st[0].accesses[CS_APP] == 0, "warming counts nothing");
    stream(0, 0, 4096, 1);
    CHECK(m.st[0].accesses[CS_APP] == 64 && m.st[0].l1_miss[CS_APP] == 0, "warmed lines hit (got %llu misses)", (unsigned long long)m.st[0].l1_miss[CS_APP]);
    mc_free(&m);

    /* 5. Bad shapes are refused. */
    mc_shape sh;
    char err[256];
    CHECK(mc_preset("pentium", 4, &sh) == -1, "unknown preset refused");
    mc_preset("nehalem", 65, &sh);
    CHECK(mc_init(&m, &sh, err, sizeof err) == -1, "65 cores refused");

    printf("cachemc: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
