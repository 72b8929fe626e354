/*
 * A multi-core cache model (issue 18: Corey's filesum, seeds/000 fig. 11): every simulated core
 * has private L1I, L1D and L2 caches; the cores of one chip share an L3. vCPU i is core i; core
 * i is on chip i / cores_per_chip. Counts are per core and per party (OS = kernel mode, app =
 * user mode). No QEMU dependency: compiled into the cachemc plugin and into test_cachemc.
 *
 * What is modelled:
 * - set-associative true-LRU caches (cachesim_core's cs_cache), 64-byte lines;
 * - a miss allocates the line in every level it missed in (non-inclusive, no back-invalidation),
 *   or, with a victim L3 (amd16), in the L2 only, the L3 taking what the L2 evicts;
 * - coherence by invalidation: a write removes the line from every other core's L1I, L1D and L2
 *   and from the other chips' L3s (a core-to-core transfer is then an L3 hit on the same chip or
 *   a miss to memory on another chip: there is no cache-to-cache latency class);
 * - latencies: extra cycles over an L1 hit for an access satisfied by L2, L3 or memory.
 * Not modelled: prefetchers, write-back traffic, DRAM banks, the interconnect.
 */
#ifndef MANYCORE_CACHEMC_CORE_H
#define MANYCORE_CACHEMC_CORE_H

#include "cachesim_core.h"

#define MC_MAX_CORES 64

typedef struct {
    const char *name;
    int ncores;
    int cores_per_chip;
    cs_geom l1i, l1d, l2, l3;
    uint32_t lat_l2, lat_l3, lat_mem; /* extra cycles over an L1 hit */
    /* The L3 is a victim cache (AMD's): lines come into the L2 from memory, go to the L3 when
     * the L2 evicts them, and leave the L3 for the L2 on a hit, so a core's L2 and L3 hold
     * different lines (capacity L2 + L3). Otherwise a miss allocates in every level. */
    int victim_l3;
} mc_shape;

typedef struct {
    uint64_t insns[CS_PARTIES];
    uint64_t accesses[CS_PARTIES];
    uint64_t l1_miss[CS_PARTIES];
    uint64_t l2_miss[CS_PARTIES];
    uint64_t l3_miss[CS_PARTIES];
    uint64_t cycles[CS_PARTIES];
    uint64_t invalidations[CS_PARTIES]; /* lines this core's writes removed from other caches */
} mc_stats;

typedef struct {
    mc_shape sh;
    cs_cache l1i[MC_MAX_CORES], l1d[MC_MAX_CORES], l2[MC_MAX_CORES];
    cs_cache l3[MC_MAX_CORES];
    mc_stats st[MC_MAX_CORES];
    /* Which cores may hold a line (hashed, direct-mapped; a collision only adds cores), so a
     * write scans only the caches that might have its line. */
    uint64_t *holders;
    uint32_t holders_mask;
} mc_model;

/* Presets: "nehalem" (4 cores a chip: 32K/8 L1D, 32K/4 L1I, 256K/8 L2, 8M/16 L3; +10/+38/+191
 * cycles) and "amd16" (after seeds/000 fig. 2, the 16-core AMD: 4 cores a chip, 64K/2 L1I and
 * L1D, 512K/16 L2, 2M/32 victim L3; +11/+47/+200 cycles at 2 GHz). Returns -1 for an unknown name. */
int mc_preset(const char *name, int ncores, mc_shape *out);
int mc_init(mc_model *m, const mc_shape *sh, char *err, size_t errlen);
void mc_free(mc_model *m);
/* One access by core `core` (party CS_OS/CS_APP) to physical address addr; counted in the
 * core's statistics only when `count` (an uncounted access still moves lines: warming). */
void mc_access(mc_model *m, int core, int party, uint64_t addr, int fetch, int write, int count);
/* Memory cycles per instruction of one core (both parties), 0 without instructions. */
double mc_cpi(const mc_model *m, int core);

#endif
