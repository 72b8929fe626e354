/* The multi-core cache model; see cachemc_core.h. */
#include "cachemc_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mc_preset(const char *name, int ncores, mc_shape *out)
{
    memset(out, 0, sizeof *out);
    out->ncores = ncores;
    if (!strcmp(name, "nehalem")) {
        out->name = "nehalem";
        out->cores_per_chip = 4;
        out->l1i = (cs_geom){32 << 10, 4, 64};
        out->l1d = (cs_geom){32 << 10, 8, 64};
        out->l2 = (cs_geom){256 << 10, 8, 64};
        out->l3 = (cs_geom){8 << 20, 16, 64};
        out->lat_l2 = 10;
        out->lat_l3 = 38;
        out->lat_mem = 191;
        return 0;
    }
    if (!strcmp(name, "amd16")) {
        out->name = "amd16";
        out->cores_per_chip = 4;
        out->l1i = (cs_geom){64 << 10, 2, 64};
        out->l1d = (cs_geom){64 << 10, 2, 64};
        out->l2 = (cs_geom){512 << 10, 16, 64};
        out->l3 = (cs_geom){2 << 20, 32, 64};
        out->lat_l2 = 11;
        out->lat_l3 = 47;
        out->lat_mem = 200;
        out->victim_l3 = 1;
        return 0;
    }
    return -1;
}

static int chips(const mc_shape *sh)
{
    return (sh->ncores + sh->cores_per_chip - 1) / sh->cores_per_chip;
}

int mc_init(mc_model *m, const mc_shape *sh, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    if (sh->ncores < 1 || sh->ncores > MC_MAX_CORES || sh->cores_per_chip < 1) {
        snprintf(err, errlen, "cores=%d, cores per chip=%d: need 1..%d cores and at least 1 a chip", sh->ncores,
                 sh->cores_per_chip, MC_MAX_CORES);
        return -1;
    }
    const cs_geom *gs[] = {&sh->l1i, &sh->l1d, &sh->l2, &sh->l3};
    for (int i = 0; i < 4; i++)
        if (cs_geom_check(gs[i], err, errlen) || gs[i]->line != 64) {
            if (gs[i]->line != 64)
                snprintf(err, errlen, "every level must have 64-byte lines");
            return -1;
        }
    m->sh = *sh;
    for (int c = 0; c < sh->ncores; c++)
        if (cs_cache_init(&m->l1i[c], &sh->l1i) || cs_cache_init(&m->l1d[c], &sh->l1d) || cs_cache_init(&m->l2[c], &sh->l2)) {
            snprintf(err, errlen, "out of memory");
            mc_free(m);
            return -1;
        }
    for (int k = 0; k < chips(sh); k++)
        if (cs_cache_init(&m->l3[k], &sh->l3)) {
            snprintf(err, errlen, "out of memory");
            mc_free(m);
            return -1;
        }
    m->holders_mask = (1u << 22) - 1;
    m->holders = calloc((size_t)m->holders_mask + 1, sizeof *m->holders);
    if (!m->holders) {
        snprintf(err, errlen, "out of memory");
        mc_free(m);
        return -1;
    }
    return 0;
}

void mc_free(mc_model *m)
{
    for (int c = 0; c < MC_MAX_CORES; c++) {
        cs_cache_free(&m->l1i[c]);
        cs_cache_free(&m->l1d[c]);
        cs_cache_free(&m->l2[c]);
        cs_cache_free(&m->l3[c]);
    }
    free(m->holders);
    m->holders = NULL;
}

static inline uint32_t holder_slot(const mc_model *m, uint64_t line)
{
    return (uint32_t)((line * 0x9E3779B97F4A7C15ull) >> 40) & m->holders_mask;
}

void mc_access(mc_model *m, int core, int party, uint64_t addr, int fetch, int write, int count)
{
    if (core < 0 || core >= m->sh.ncores)
        return;
    /* Uncounted accesses go to a scratch record. */
    static mc_stats scratch;
    mc_stats *st = count ? &m->st[core] : &scratch;
    int chip = core / m->sh.cores_per_chip;
    int ev;
    uint64_t victim;
    st->accesses[party]++;
    uint64_t line = addr >> 6;
    uint64_t *h = &m->holders[holder_slot(m, line)];
    if (write && (*h & ~(1ull << core))) {
        /* Invalidate the line everywhere else it may be. */
        for (int c = 0; c < m->sh.ncores; c++) {
            if (c == core || !(*h & (1ull << c)))
                continue;
            int n = cs_cache_invalidate(&m->l1i[c], addr) + cs_cache_invalidate(&m->l1d[c], addr) + cs_cache_invalidate(&m->l2[c], addr);
            if (c / m->sh.cores_per_chip != chip)
                n += cs_cache_invalidate(&m->l3[c / m->sh.cores_per_chip], addr);
            if (n)
                st->invalidations[party]++;
        }
        *h = 0;
    }
    *h |= 1ull << core;
    cs_cache *l1 = fetch ? &m->l1i[core] : &m->l1d[core];
    if (cs_cache_access(l1, addr, &ev, &victim))
        return;
    st->l1_miss[party]++;
    if (cs_cache_access(&m->l2[core], addr, &ev, &victim)) {
        st->cycles[party] += m->sh.lat_l2;
        return;
    }
    st->l2_miss[party]++;
    if (m->sh.victim_l3) {
        /* The line is in the L2 now; the L2's victim goes to the L3; a hit leaves the L3. */
        int l2_evicted = ev;
        uint64_t l2_victim = victim;
        if (cs_cache_invalidate(&m->l3[chip], addr)) {
            st->cycles[party] += m->sh.lat_l3;
        } else {
            st->l3_miss[party]++;
            st->cycles[party] += m->sh.lat_mem;
        }
        if (l2_evicted)
            cs_cache_access(&m->l3[chip], l2_victim, &ev, &victim);
        return;
    }
    if (cs_cache_access(&m->l3[chip], addr, &ev, &victim)) {
        st->cycles[party] += m->sh.lat_l3;
        return;
    }
    st->l3_miss[party]++;
    st->cycles[party] += m->sh.lat_mem;
}

double mc_cpi(const mc_model *m, int core)
{
    const mc_stats *st = &m->st[core];
    uint64_t insns = st->insns[0] + st->insns[1];
    return insns ? (double)(st->cycles[0] + st->cycles[1]) / (double)insns : 0.0;
}
