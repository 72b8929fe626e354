/*
 * Multi-core cache hierarchies for cachesim (docs/plugins.md): every simulated core has private L1
 * (split I/D) and L2 caches, the cores of one chip share an L3, and each vCPU drives its own
 * core. Per-core, per-party (kernel/user) counts of accesses, misses at each level, where the
 * L3 misses were served from, and cycles, so that memory CPI can be computed per vCPU.
 *
 * Coherence (a write-invalidate model, no MESI states): a write by core c removes the line
 * from every other core's L1I, L1D and L2, and from every other chip's L3 (and, with a victim
 * L3, from its own chip's L3, which may hold a copy a sibling evicted). Reads never invalidate.
 * A miss in the own chip's L3 is served, in this order of preference, by a sibling core's
 * private cache (victim L3 only: an inclusive L3 already holds every line its cores hold), by
 * another chip's caches ("remote"), or by memory; each has its own latency.
 *
 * Two L3 policies:
 *   inclusive (Nehalem): every line a core loads is installed in L1, L2 and the chip's L3;
 *     a line evicted from the L3 is removed from every core of that chip (back-invalidation).
 *   victim (AMD family 10h): the L3 holds the lines the chip's L2s evict; an L3 hit moves the
 *     line back into the core's L2 (and out of the L3), a miss loads L1 and L2 only. The chip
 *     then caches up to its L2s plus its L3.
 * L1 and L2 allocate on a miss and are not inclusive of each other (no back-invalidation
 * between them), in both policies.
 *
 * No QEMU dependency: compiled into the plugin and into the native test program.
 */
#ifndef MANYCORE_CACHESIM_MC_H
#define MANYCORE_CACHESIM_MC_H

#include "cachesim_core.h"

#include <stddef.h>
#include <stdint.h>

#define MC_MAX_CORES 64

/* Where an access was satisfied, in increasing cost. */
enum { MC_L1, MC_L2, MC_L3, MC_SIBLING, MC_REMOTE, MC_MEM, MC_WHERE };

typedef struct {
    int ncores;
    int cores_per_chip;
    int split_l1;       /* L1I separate from L1D (fetches go to L1I) */
    int victim_l3;      /* 0: inclusive L3; 1: victim L3 (see above) */
    cs_geom l1i, l1d, l2, l3;
    /* extra cycles over an L1 hit for an access satisfied at each place (lat[MC_L1] = 0) */
    uint32_t lat[MC_WHERE];
} mc_shape;

typedef struct {
    uint64_t fetches, data, writes;
    uint64_t l1i_miss, l1d_miss, l2_miss, l3_miss;
    uint64_t served[MC_WHERE]; /* accesses satisfied at each place */
    uint64_t cycles;           /* sum of lat[] over the accesses */
    uint64_t inval_sent;       /* copies this core's writes removed from other cores / chips */
} mc_stats;

typedef struct {
    mc_shape sh;
    int nchips;
    cs_cache *l1i, *l1d, *l2; /* [ncores] (l1i unused without split_l1) */
    cs_cache *l3;             /* [nchips] */
    mc_stats st[MC_MAX_CORES][CS_PARTIES];
    uint64_t back_invalidations; /* inclusive L3: copies removed from cores when the L3 evicted */
    /* Per-core repeat filter: the core's previous access (line, fetch or data, whether a
     * write of that line was already simulated). An access by the same core of the same kind
     * to the same line is an L1 MRU hit that changes nothing; it is counted, not simulated.
     * Any other core's access to that line, and any removal of it from this core's L1, resets
     * the entry. */
    struct {
        uint64_t line;
        int fetch, wrote;
    } last[MC_MAX_CORES];
    uint64_t repeats;
    /* Hashed line -> cores that may hold it (bit per core; collisions only add probes). Keeps
     * a write's invalidation sweep and the sibling/remote search to the cores that matter. */
    uint64_t *holders;
    unsigned line_shift;
} mc_model;

/* Check a shape; on error write one line to err and return -1. */
int mc_shape_check(const mc_shape *sh, char *err, size_t errlen);
int mc_init(mc_model *m, const mc_shape *sh, char *err, size_t errlen);
void mc_free(mc_model *m);
/*
 * One access by `core` (0..ncores-1), party CS_OS/CS_APP, to physical address addr. count: add
 * it to the statistics (0 = simulate only, e.g. to warm the caches outside the region).
 */
void mc_access(mc_model *m, int core, int party, uint64_t addr, int fetch, int write, int count);
/* Sum of two stats (for totals). */
void mc_stats_add(mc_stats *into, const mc_stats *s);

/* Presets (docs/plugins.md): fill sh and return 0, or -1 for an unknown name. */
int mc_preset(const char *name, mc_shape *sh);

#endif
