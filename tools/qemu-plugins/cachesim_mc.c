/* Multi-core cache hierarchies; see cachesim_mc.h. Plain C, no QEMU. */
#include "cachesim_mc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MC_HOLDER_SLOTS (1u << 16) /* 512 KB of core masks */

static uint64_t *holder_slot(mc_model *m, uint64_t line)
{
    return &m->holders[(line * 0x9e3779b97f4a7c15ull) >> 48 & (MC_HOLDER_SLOTS - 1)];
}

int mc_shape_check(const mc_shape *sh, char *err, size_t errlen)
{
    char inner[200];
    if (sh->ncores < 1 || sh->ncores > MC_MAX_CORES) {
        snprintf(err, errlen, "%d cores: need 1..%d", sh->ncores, MC_MAX_CORES);
        return -1;
    }
    if (sh->cores_per_chip < 1 || sh->ncores % sh->cores_per_chip != 0) {
        snprintf(err, errlen, "%d cores per chip does not divide %d cores", sh->cores_per_chip, sh->ncores);
        return -1;
    }
    const cs_geom *g[4] = {&sh->l1i, &sh->l1d, &sh->l2, &sh->l3};
    const char *names[4] = {"L1I", "L1D", "L2", "L3"};
    for (int i = sh->split_l1 ? 0 : 1; i < 4; i++) {
        if (cs_geom_check(g[i], inner, sizeof inner)) {
            snprintf(err, errlen, "%s: %s", names[i], inner);
            return -1;
        }
        if (g[i]->line != sh->l1d.line) {
            snprintf(err, errlen, "%s: all caches need the same line size", names[i]);
            return -1;
        }
    }
    return 0;
}

int mc_init(mc_model *m, const mc_shape *sh, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    if (mc_shape_check(sh, err, errlen))
        return -1;
    m->sh = *sh;
    m->nchips = sh->ncores / sh->cores_per_chip;
    m->l1i = calloc((size_t)sh->ncores, sizeof(cs_cache));
    m->l1d = calloc((size_t)sh->ncores, sizeof(cs_cache));
    m->l2 = calloc((size_t)sh->ncores, sizeof(cs_cache));
    m->l3 = calloc((size_t)m->nchips, sizeof(cs_cache));
    m->holders = calloc(MC_HOLDER_SLOTS, sizeof(uint64_t));
    int ok = m->l1i && m->l1d && m->l2 && m->l3 && m->holders;
    for (int c = 0; ok && c < sh->ncores; c++)
        ok = (!sh->split_l1 || !cs_cache_init(&m->l1i[c], &sh->l1i)) && !cs_cache_init(&m->l1d[c], &sh->l1d) &&
             !cs_cache_init(&m->l2[c], &sh->l2);
    for (int h = 0; ok && h < m->nchips; h++)
        ok = !cs_cache_init(&m->l3[h], &sh->l3);
    if (!ok) {
        mc_free(m);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    unsigned shift = 0;
    while ((1u << shift) < sh->l1d.line)
        shift++;
    m->line_shift = shift;
    for (int c = 0; c < MC_MAX_CORES; c++)
        m->last[c].line = ~0ull;
    return 0;
}

void mc_free(mc_model *m)
{
    for (int c = 0; c < m->sh.ncores; c++) {
        if (m->l1i)
            cs_cache_free(&m->l1i[c]);
        if (m->l1d)
            cs_cache_free(&m->l1d[c]);
        if (m->l2)
            cs_cache_free(&m->l2[c]);
    }
    for (int h = 0; h < m->nchips && m->l3; h++)
        cs_cache_free(&m->l3[h]);
    free(m->l1i);
    free(m->l1d);
    free(m->l2);
    free(m->l3);
    free(m->holders);
    m->l1i = m->l1d = m->l2 = m->l3 = NULL;
    m->holders = NULL;
}

/* The line left core k's L1 (or the core lost it altogether): its repeat entry is stale. */
static void forget(mc_model *m, int k, uint64_t line)
{
    if (m->last[k].line == line)
        m->last[k].line = ~0ull;
}

/* Remove addr from core k's private caches; returns the number of copies removed. */
static uint64_t drop_private(mc_model *m, int k, uint64_t addr, uint64_t line)
{
    uint64_t n = (uint64_t)cs_cache_invalidate(&m->l1d[k], addr) + (uint64_t)cs_cache_invalidate(&m->l2[k], addr);
    if (m->sh.split_l1)
        n += (uint64_t)cs_cache_invalidate(&m->l1i[k], addr);
    forget(m, k, line);
    return n;
}

static int holds_private(const mc_model *m, int k, uint64_t addr)
{
    return cs_cache_probe(&m->l2[k], addr) || cs_cache_probe(&m->l1d[k], addr) ||
           (m->sh.split_l1 && cs_cache_probe(&m->l1i[k], addr));
}

/* Where a miss in core's own chip L3 is served from. mask: cores that may hold the line. */
static int miss_source(const mc_model *m, int core, uint64_t addr, uint64_t mask)
{
    int cpc = m->sh.cores_per_chip, chip = core / cpc;
    if (m->sh.victim_l3) {
        for (int k = chip * cpc; k < (chip + 1) * cpc; k++)
            if (k != core && (mask >> k & 1) && holds_private(m, k, addr))
                return MC_SIBLING;
    }
    for (int h = 0; h < m->nchips; h++) {
        if (h == chip)
            continue;
        if (cs_cache_probe(&m->l3[h], addr))
            return MC_REMOTE;
        if (m->sh.victim_l3)
            for (int k = h * cpc; k < (h + 1) * cpc; k++)
                if ((mask >> k & 1) && holds_private(m, k, addr))
                    return MC_REMOTE;
    }
    return MC_MEM;
}

void mc_access(mc_model *m, int core, int party, uint64_t addr, int fetch, int write, int count)
{
    const mc_shape *sh = &m->sh;
    uint64_t line = addr >> m->line_shift;
    mc_stats scratch, *s = count ? &m->st[core][party] : &scratch;
    int kind_fetch = fetch && sh->split_l1;
    if (cs_fast_paths && m->last[core].line == line && m->last[core].fetch == kind_fetch &&
        (!write || m->last[core].wrote)) {
        if (count) {
            if (fetch)
                s->fetches++;
            else
                s->data++;
            s->writes += (uint64_t)write;
            s->served[MC_L1]++;
        }
        m->repeats++;
        return;
    }
    uint64_t *slot = holder_slot(m, line);
    uint64_t mask = cs_fast_paths ? *slot : ~0ull;
    uint64_t self = 1ull << core;
    /* Another core's repeat entry for this line no longer tells the truth: a read here means
     * its next write must invalidate us, a write here removes its copy. */
    uint64_t others = mask & ~self;
    for (int k = 0; others && k < sh->ncores; k++)
        if (others >> k & 1)
            forget(m, k, line);
    if (fetch)
        s->fetches++;
    else
        s->data++;
    s->writes += (uint64_t)write;
    int cpc = sh->cores_per_chip, chip = core / cpc;
    cs_cache *l1 = kind_fetch ? &m->l1i[core] : &m->l1d[core];
    int ev;
    uint64_t victim;
    int where = MC_L1;
    if (!cs_cache_access(l1, addr, &ev, &victim)) {
        if (kind_fetch)
            s->l1i_miss++;
        else
            s->l1d_miss++;
        int ev2;
        uint64_t v2;
        if (cs_cache_access(&m->l2[core], addr, &ev2, &v2)) {
            where = MC_L2;
        } else {
            s->l2_miss++;
            if (!sh->victim_l3) {
                int ev3;
                uint64_t v3;
                if (cs_cache_access(&m->l3[chip], addr, &ev3, &v3)) {
                    where = MC_L3;
                } else {
                    s->l3_miss++;
                    where = miss_source(m, core, addr, mask);
                    if (ev3) {
                        /* inclusion: the L3's victim leaves every core of the chip */
                        uint64_t vmask = cs_fast_paths ? *holder_slot(m, v3 >> m->line_shift) : ~0ull;
                        for (int k = chip * cpc; k < (chip + 1) * cpc; k++)
                            if (vmask >> k & 1)
                                m->back_invalidations += drop_private(m, k, v3, v3 >> m->line_shift);
                    }
                }
            } else {
                if (cs_cache_invalidate(&m->l3[chip], addr)) {
                    where = MC_L3; /* moves up into this core's L2 (done above) */
                } else {
                    s->l3_miss++;
                    where = miss_source(m, core, addr, mask);
                }
                if (ev2) {
                    /* the L2's victim goes into the chip's L3, whose own victim goes to memory */
                    int ev3;
                    uint64_t v3;
                    cs_cache_access(&m->l3[chip], v2, &ev3, &v3);
                }
            }
        }
    }
    s->served[where]++;
    s->cycles += sh->lat[where];
    *slot |= self;
    if (write) {
        /* write-invalidate: every other copy goes */
        uint64_t others_now = (cs_fast_paths ? *slot : ~0ull) & ~self;
        for (int k = 0; others_now && k < sh->ncores; k++)
            if (others_now >> k & 1)
                s->inval_sent += drop_private(m, k, addr, line);
        for (int h = 0; h < m->nchips; h++)
            if (h != chip || sh->victim_l3)
                s->inval_sent += (uint64_t)cs_cache_invalidate(&m->l3[h], addr);
    }
    m->last[core].line = line;
    m->last[core].fetch = kind_fetch;
    m->last[core].wrote = write;
}

void mc_stats_add(mc_stats *into, const mc_stats *s)
{
    into->fetches += s->fetches;
    into->data += s->data;
    into->writes += s->writes;
    into->l1i_miss += s->l1i_miss;
    into->l1d_miss += s->l1d_miss;
    into->l2_miss += s->l2_miss;
    into->l3_miss += s->l3_miss;
    for (int w = 0; w < MC_WHERE; w++)
        into->served[w] += s->served[w];
    into->cycles += s->cycles;
    into->inval_sent += s->inval_sent;
}

int mc_preset(const char *name, mc_shape *sh)
{
    memset(sh, 0, sizeof *sh);
    sh->split_l1 = 1;
    if (!strcmp(name, "nehalem-mc")) {
        /* Two Nehalem chips (e.g. a 2-socket Xeon 5500) of 4 cores: the existing `nehalem`
         * preset's caches and latencies per core, the L3 shared per chip and inclusive. A miss
         * served by the other chip costs what memory does: no separate figure is used. */
        sh->ncores = 8;
        sh->cores_per_chip = 4;
        sh->l1i = (cs_geom){32 << 10, 4, 64};
        sh->l1d = (cs_geom){32 << 10, 8, 64};
        sh->l2 = (cs_geom){256 << 10, 8, 64};
        sh->l3 = (cs_geom){8 << 20, 16, 64};
        sh->victim_l3 = 0;
        sh->lat[MC_L2] = 10;
        sh->lat[MC_L3] = 38;
        sh->lat[MC_SIBLING] = 38; /* unused: an inclusive L3 holds what its cores hold */
        sh->lat[MC_REMOTE] = 191;
        sh->lat[MC_MEM] = 191;
        return 0;
    }
    if (!strcmp(name, "amd16")) {
        /* Corey's machine (seeds/000 section 2, fig. 2): four quad-core 2 GHz Opterons (family
         * 10h), a private L1 and L2 per core, a 2 MB L3 per chip. Geometry of that processor:
         * L1I and L1D 64 KB 2-way, L2 512 KB 16-way, L3 2 MB 32-way, 64-byte lines; the L3 is
         * a victim cache of the chip's L2s. Latencies: the figure's numbers are not in the
         * seeds/000 text copy; these keep the order the text states (the local L3 is faster
         * than another core's cache on the chip, inter-chip is slower) -- docs/plugins.md. */
        sh->ncores = 16;
        sh->cores_per_chip = 4;
        sh->l1i = (cs_geom){64 << 10, 2, 64};
        sh->l1d = (cs_geom){64 << 10, 2, 64};
        sh->l2 = (cs_geom){512 << 10, 16, 64};
        sh->l3 = (cs_geom){2 << 20, 32, 64};
        sh->victim_l3 = 1;
        sh->lat[MC_L2] = 14;
        sh->lat[MC_L3] = 75;
        sh->lat[MC_SIBLING] = 127;
        sh->lat[MC_REMOTE] = 200;
        sh->lat[MC_MEM] = 127;
        return 0;
    }
    return -1;
}
