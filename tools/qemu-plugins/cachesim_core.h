/*
 * CachEMU-style cache simulator core (seeds/004): set-associative LRU caches, multi-level
 * hierarchies, and the OS/application placements. No QEMU dependency: the same file is
 * compiled into the cachesim plugin and into the native test binary (test_cachesim.c), so the
 * logic that produces the published numbers is the logic the synthetic-trace tests check.
 */
#ifndef MANYCORE_CACHESIM_CORE_H
#define MANYCORE_CACHESIM_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CS_MAX_LEVELS 4
#define CS_MAX_PLACEMENTS 3
#define CS_PARTIES 2 /* 0 = OS (kernel mode), 1 = application (user mode) */
#define CS_OS 0
#define CS_APP 1

/* One cache's shape. size and line in bytes. */
typedef struct {
    uint64_t size;
    uint32_t assoc;
    uint32_t line;
} cs_geom;

/* A set-associative cache with true LRU. Each set is an array of `assoc` tags ordered from
 * most to least recently used; 0 means an empty way (tags are stored as line number + 1). */
typedef struct {
    cs_geom g;
    uint32_t sets;
    uint32_t line_shift;
    uint64_t *ways;
} cs_cache;

/* Check a geometry; on error write one line to err and return -1. */
int cs_geom_check(const cs_geom *g, char *err, size_t errlen);
/* Parse "SIZE:ASSOC[:LINE]" e.g. "32K:8:64", "8M:16". Returns -1 with a message on error. */
int cs_geom_parse(const char *s, cs_geom *g, char *err, size_t errlen);

int cs_cache_init(cs_cache *c, const cs_geom *g);
void cs_cache_free(cs_cache *c);
/* Look up a physical address; on a miss, install it as MRU. Returns 1 on hit, 0 on miss. On a
 * miss that evicts a valid line, *victim receives the evicted address (line-aligned) and
 * *evicted is set to 1. */
int cs_cache_access(cs_cache *c, uint64_t addr, int *evicted, uint64_t *victim);
/* Present without touching LRU order? */
int cs_cache_probe(const cs_cache *c, uint64_t addr);
/* Drop the line holding addr if present. Returns 1 if it was present. */
int cs_cache_invalidate(cs_cache *c, uint64_t addr);

/*
 * A hierarchy shape: `levels` levels; level 0 may be split into instruction and data caches
 * (split_l1), the others are unified. lat[i] is the extra cycles an access satisfied at level i
 * costs over an L1 hit (lat[0] = 0), and lat[levels] is memory.
 */
typedef struct {
    int levels;
    int split_l1;
    cs_geom l1i;            /* used when split_l1 */
    cs_geom level[CS_MAX_LEVELS]; /* level[0] is L1D when split_l1, the unified L1 otherwise */
    uint32_t lat[CS_MAX_LEVELS + 1];
    /* Bit l set: a line evicted from level l (l >= 1) is back-invalidated from the levels
     * below it (inclusion). Nehalem: only the L3 (bit 2); its L2 is non-inclusive. */
    unsigned inclusive;
} cs_shape;

/* Three levels, a split L1 (instruction cache `l1i`, data cache `l1d`), `l2` and an inclusive
 * `l3`, with Nehalem's latencies: 10 cycles to the L2, 38 to the L3, 191 to memory. The
 * `nehalem` preset with Nehalem's geometries; the tests with smaller ones. */
static inline cs_shape cs_shape_nehalem_like(cs_geom l1i, cs_geom l1d, cs_geom l2, cs_geom l3)
{
    cs_shape s;
    memset(&s, 0, sizeof s);
    s.levels = 3;
    s.split_l1 = 1;
    s.l1i = l1i;
    s.level[0] = l1d;
    s.level[1] = l2;
    s.level[2] = l3;
    s.lat[1] = 10;
    s.lat[2] = 38;
    s.lat[3] = 191;
    s.inclusive = 1u << 2; /* Nehalem's L3 is inclusive of the cores' L1/L2; its L2 is not of L1 */
    return s;
}

/*
 * One placement of the OS and the application: levels below `first_shared` are private to each
 * party, levels from it upward are one cache both use. first_shared = 0: same core (everything
 * shared); = 2 with 3 levels: two cores of one chip (private L1/L2, shared L3);
 * = levels: two chips (nothing shared).
 */
typedef struct {
    uint64_t accesses[CS_PARTIES][2];            /* [party][0 = fetch, 1 = data] */
    uint64_t misses[CS_PARTIES][CS_MAX_LEVELS][2]; /* misses at each level, fetch/data */
    uint64_t cycles[CS_PARTIES];                 /* extra cycles over perfect L1 */
    uint64_t coherence_invalidations[CS_PARTIES]; /* lines this party's writes removed from the other's private caches */
    uint64_t back_invalidations;
} cs_place_stats;

typedef struct {
    const char *name;
    int first_shared;
    /* cache[party][level]; shared levels point at the same cs_cache for both parties */
    cs_cache *cache[CS_PARTIES][CS_MAX_LEVELS];
    cs_cache *l1i[CS_PARTIES];
    cs_cache storage[CS_PARTIES][CS_MAX_LEVELS + 1];
    cs_place_stats st;
} cs_placement;

/*
 * Competition and cooperation at each level, comparing the most-shared placement (index 0)
 * with the most-separate one (last index), access by access (seeds/004 section 2.3):
 *   alone       - misses in both: the party would miss with a cache of its own too;
 *   competition - hit when separate, miss when shared: the other party evicted the line;
 *   cooperation - miss when separate, hit when shared: the other party brought the line in
 *                 (or, separate, its write invalidated our copy). Misses sharing avoids.
 * Shared misses = alone + competition; separate misses = alone + cooperation.
 */
typedef struct {
    uint64_t alone[CS_PARTIES][CS_MAX_LEVELS];
    uint64_t competition[CS_PARTIES][CS_MAX_LEVELS];
    uint64_t cooperation[CS_PARTIES][CS_MAX_LEVELS];
} cs_compare;

typedef struct {
    cs_shape shape;
    int nplace;
    cs_placement place[CS_MAX_PLACEMENTS];
    cs_compare cmp;
    uint64_t insns[CS_PARTIES];
    /* Which parties ever touched a line (hashed, direct-mapped; a collision only adds a party):
     * a write needs no coherence invalidation when the other party never touched its line. */
    uint8_t *touched;
    uint32_t line_shift;
} cs_model;

/* Shortcuts that never change a count (L1-MRU fast path, coherence-scan filter). On by
 * default; the native tests turn them off to check that they are exact. */
extern int cs_fast_paths;

/*
 * Repeat filter: an access by the same party, of the same kind (fetch/data), to the line of
 * the immediately preceding access hits the MRU way of L1 in every placement of every model
 * and changes no state (a write only if that line was already written in this run of repeats:
 * the first write has already invalidated the other party's copies). The caller counts such
 * accesses instead of simulating them and adds the counts with cs_model_add_repeats().
 */
typedef struct {
    uint64_t line;
    int party, fetch, wrote;
    uint64_t repeats[CS_PARTIES][2];
} cs_repeat;

void cs_repeat_init(cs_repeat *r);
/* 1 if the access is a repeat (counted in r), 0 if it must be simulated. */
int cs_repeat_access(cs_repeat *r, uint64_t addr, unsigned line_shift, int party, int fetch, int write);
void cs_model_add_repeats(cs_model *m, const cs_repeat *r);

/* Build a model with the given placements (first_shared values, most shared first). */
int cs_model_init(cs_model *m, const cs_shape *shape, int nplace, const int *first_shared,
                  const char *const *names, char *err, size_t errlen);
void cs_model_free(cs_model *m);
/* One access by `party` to physical address addr. fetch: instruction fetch; write: store. */
void cs_model_access(cs_model *m, int party, uint64_t addr, int fetch, int write);
/* Memory cycles per instruction of a placement (all parties' cycles over all instructions). */
double cs_model_cpi(const cs_model *m, int place);

#endif
