/* CachEMU-style cache simulator core; see cachesim_core.h. Plain C99, no QEMU, no glib. */
#include "cachesim_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cs_fast_paths = 1;

#define CS_TOUCHED_SLOTS (1u << 16) /* 64 KB: stays in the host L2; collisions only cost scans */

static int is_pow2(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

static unsigned log2u(uint64_t x)
{
    unsigned n = 0;
    while (x > 1) {
        x >>= 1;
        n++;
    }
    return n;
}

int cs_geom_check(const cs_geom *g, char *err, size_t errlen)
{
    if (!is_pow2(g->line) || g->line < 8) {
        snprintf(err, errlen, "line size %u is not a power of two >= 8", g->line);
        return -1;
    }
    if (g->assoc == 0 || g->assoc > 64) {
        snprintf(err, errlen, "associativity %u is not in 1..64", g->assoc);
        return -1;
    }
    uint64_t way_bytes = (uint64_t)g->assoc * g->line;
    if (g->size == 0 || g->size % way_bytes != 0) {
        snprintf(err, errlen, "size %llu is not a multiple of assoc*line = %llu", (unsigned long long)g->size,
                 (unsigned long long)way_bytes);
        return -1;
    }
    uint64_t sets = g->size / way_bytes;
    /* The set index is a bit field of the address: the set count must be a power of two. */
    if (!is_pow2(sets)) {
        snprintf(err, errlen, "size %llu / (%u ways * %u B) = %llu sets, not a power of two",
                 (unsigned long long)g->size, g->assoc, g->line, (unsigned long long)sets);
        return -1;
    }
    if (sets > (1u << 24)) {
        snprintf(err, errlen, "%llu sets is more than this simulator allows (2^24)", (unsigned long long)sets);
        return -1;
    }
    return 0;
}

static int parse_u64_suffix(const char *s, const char *end, uint64_t *out)
{
    if (s == end)
        return -1;
    uint64_t v = 0;
    const char *p = s;
    while (p < end && *p >= '0' && *p <= '9') {
        v = v * 10 + (uint64_t)(*p - '0');
        if (v > (1ull << 40))
            return -1;
        p++;
    }
    if (p == s)
        return -1;
    if (p < end) {
        switch (*p) {
        case 'k': case 'K': v <<= 10; break;
        case 'm': case 'M': v <<= 20; break;
        case 'g': case 'G': v <<= 30; break;
        default: return -1;
        }
        p++;
        if (p < end && (*p == 'B' || *p == 'b'))
            p++;
    }
    if (p != end)
        return -1;
    *out = v;
    return 0;
}

int cs_geom_parse(const char *s, cs_geom *g, char *err, size_t errlen)
{
    const char *c1 = strchr(s, ':');
    if (!c1) {
        snprintf(err, errlen, "cache `%s`: expected SIZE:ASSOC[:LINE], e.g. 32K:8:64", s);
        return -1;
    }
    const char *c2 = strchr(c1 + 1, ':');
    const char *end = s + strlen(s);
    uint64_t size, assoc, line = 64;
    if (parse_u64_suffix(s, c1, &size) || parse_u64_suffix(c1 + 1, c2 ? c2 : end, &assoc) ||
        (c2 && parse_u64_suffix(c2 + 1, end, &line)) || assoc > 64 || line > 4096) {
        snprintf(err, errlen, "cache `%s`: expected SIZE:ASSOC[:LINE], e.g. 32K:8:64", s);
        return -1;
    }
    g->size = size;
    g->assoc = (uint32_t)assoc;
    g->line = (uint32_t)line;
    char inner[200];
    if (cs_geom_check(g, inner, sizeof inner)) {
        snprintf(err, errlen, "cache `%s`: %s", s, inner);
        return -1;
    }
    return 0;
}

int cs_cache_init(cs_cache *c, const cs_geom *g)
{
    c->g = *g;
    c->sets = (uint32_t)(g->size / ((uint64_t)g->assoc * g->line));
    c->line_shift = log2u(g->line);
    c->ways = calloc((size_t)c->sets * g->assoc, sizeof(uint64_t));
    return c->ways ? 0 : -1;
}

void cs_cache_free(cs_cache *c)
{
    free(c->ways);
    c->ways = NULL;
}

int cs_cache_access(cs_cache *c, uint64_t addr, int *evicted, uint64_t *victim)
{
    uint64_t line = addr >> c->line_shift;
    uint64_t tag = line + 1;
    uint32_t a = c->g.assoc;
    uint64_t *w = &c->ways[(size_t)(line & (c->sets - 1)) * a];
    *evicted = 0;
    if (w[0] == tag)
        return 1; /* MRU hit: the common case, nothing moves */
    /* Shift ways down by one from the front until the tag (hit) or the end (miss); explicit
     * loops because a libc memmove call costs more than moving at most 63 words. */
    uint64_t carry = w[0];
    w[0] = tag;
    for (uint32_t i = 1; i < a; i++) {
        uint64_t cur = w[i];
        w[i] = carry;
        if (cur == tag)
            return 1;
        if (cur == 0)
            return 0; /* ways are kept compact: an empty way ends the valid ones */
        carry = cur;
    }
    if (carry != 0) {
        *evicted = 1;
        *victim = (carry - 1) << c->line_shift;
    }
    return 0;
}

int cs_cache_probe(const cs_cache *c, uint64_t addr)
{
    uint64_t line = addr >> c->line_shift;
    const uint64_t *w = &c->ways[(size_t)(line & (c->sets - 1)) * c->g.assoc];
    for (uint32_t i = 0; i < c->g.assoc; i++)
        if (w[i] == line + 1)
            return 1;
    return 0;
}

int cs_cache_invalidate(cs_cache *c, uint64_t addr)
{
    uint64_t line = addr >> c->line_shift;
    uint32_t a = c->g.assoc;
    uint64_t *w = &c->ways[(size_t)(line & (c->sets - 1)) * a];
    for (uint32_t i = 0; i < a; i++) {
        if (w[i] == line + 1) {
            memmove(&w[i], &w[i + 1], (a - 1 - i) * sizeof(uint64_t));
            w[a - 1] = 0;
            return 1;
        }
    }
    return 0;
}

int cs_model_init(cs_model *m, const cs_shape *shape, int nplace, const int *first_shared,
                  const char *const *names, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->shape = *shape;
    if (shape->levels < 1 || shape->levels > CS_MAX_LEVELS) {
        snprintf(err, errlen, "%d cache levels: need 1..%d", shape->levels, CS_MAX_LEVELS);
        return -1;
    }
    if (nplace < 1 || nplace > CS_MAX_PLACEMENTS) {
        snprintf(err, errlen, "%d placements: need 1..%d", nplace, CS_MAX_PLACEMENTS);
        return -1;
    }
    char inner[200];
    for (int l = 0; l < shape->levels; l++) {
        if (cs_geom_check(&shape->level[l], inner, sizeof inner)) {
            snprintf(err, errlen, "level %d: %s", l + 1, inner);
            return -1;
        }
        if (shape->level[l].line != shape->level[0].line) {
            snprintf(err, errlen, "level %d: all levels need the same line size", l + 1);
            return -1;
        }
    }
    if (shape->split_l1 && cs_geom_check(&shape->l1i, inner, sizeof inner)) {
        snprintf(err, errlen, "L1I: %s", inner);
        return -1;
    }
    m->nplace = nplace;
    m->touched = calloc(CS_TOUCHED_SLOTS, 1);
    if (!m->touched) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    m->line_shift = log2u(shape->level[0].line);
    for (int p = 0; p < nplace; p++) {
        cs_placement *pl = &m->place[p];
        pl->name = names[p];
        pl->first_shared = first_shared[p];
        if (first_shared[p] < 0 || first_shared[p] > shape->levels) {
            snprintf(err, errlen, "placement %s: shared from level %d of %d", names[p], first_shared[p] + 1,
                     shape->levels);
            return -1;
        }
        for (int party = 0; party < CS_PARTIES; party++) {
            for (int l = 0; l < shape->levels; l++) {
                if (l >= pl->first_shared && party > 0) {
                    pl->cache[party][l] = pl->cache[0][l]; /* shared level: one cache */
                    continue;
                }
                if (cs_cache_init(&pl->storage[party][l], &shape->level[l])) {
                    snprintf(err, errlen, "out of memory");
                    return -1;
                }
                pl->cache[party][l] = &pl->storage[party][l];
            }
            if (shape->split_l1) {
                if (pl->first_shared == 0 && party > 0) {
                    pl->l1i[party] = pl->l1i[0];
                } else {
                    if (cs_cache_init(&pl->storage[party][CS_MAX_LEVELS], &shape->l1i)) {
                        snprintf(err, errlen, "out of memory");
                        return -1;
                    }
                    pl->l1i[party] = &pl->storage[party][CS_MAX_LEVELS];
                }
            }
        }
    }
    return 0;
}

void cs_model_free(cs_model *m)
{
    free(m->touched);
    m->touched = NULL;
    for (int p = 0; p < m->nplace; p++)
        for (int party = 0; party < CS_PARTIES; party++)
            for (int l = 0; l <= CS_MAX_LEVELS; l++)
                cs_cache_free(&m->place[p].storage[party][l]);
}

static cs_cache *level_cache(cs_placement *pl, const cs_shape *sh, int party, int level, int fetch)
{
    if (level == 0 && fetch && sh->split_l1)
        return pl->l1i[party];
    return pl->cache[party][level];
}

/* Returns the level that satisfied the access (shape->levels = memory). */
static int place_access(cs_placement *pl, const cs_shape *sh, int party, uint64_t addr, int fetch, int write,
                        int other_may_hold)
{
    int sat = sh->levels;
    int kind = fetch ? 0 : 1;
    pl->st.accesses[party][kind]++;
    for (int l = 0; l < sh->levels; l++) {
        cs_cache *c = level_cache(pl, sh, party, l, fetch);
        int evicted;
        uint64_t victim;
        if (cs_cache_access(c, addr, &evicted, &victim)) {
            sat = l;
            break;
        }
        pl->st.misses[party][l][kind]++;
        if (evicted && l > 0 && (sh->inclusive >> l & 1)) {
            /* Inclusion: a line leaving level l leaves every cache below it that feeds it
             * (both parties' when level l is shared). Collect them once each. */
            cs_cache *below[2 * CS_MAX_LEVELS + 2];
            int n = 0;
            for (int q = 0; q < CS_PARTIES; q++) {
                if (pl->cache[q][l] != c)
                    continue;
                for (int k = 0; k <= l; k++) {
                    cs_cache *cand[2] = {k < l ? pl->cache[q][k] : NULL,
                                         (k == 0 && sh->split_l1) ? pl->l1i[q] : NULL};
                    for (int j = 0; j < 2; j++) {
                        int dup = cand[j] == NULL;
                        for (int i = 0; i < n && !dup; i++)
                            dup = below[i] == cand[j];
                        if (!dup)
                            below[n++] = cand[j];
                    }
                }
            }
            for (int i = 0; i < n; i++)
                pl->st.back_invalidations += (uint64_t)cs_cache_invalidate(below[i], victim);
        }
    }
    if (write && other_may_hold) {
        /* Coherence (seeds/004 2.2): a write removes the line from the other party's caches,
         * only those it does not share with the writer. */
        int other = 1 - party;
        for (int l = 0; l < pl->first_shared && l < sh->levels; l++) {
            pl->st.coherence_invalidations[party] += (uint64_t)cs_cache_invalidate(pl->cache[other][l], addr);
            if (l == 0 && sh->split_l1)
                pl->st.coherence_invalidations[party] += (uint64_t)cs_cache_invalidate(pl->l1i[other], addr);
        }
    }
    pl->st.cycles[party] += sh->lat[sat];
    return sat;
}

void cs_model_access(cs_model *m, int party, uint64_t addr, int fetch, int write)
{
    int sat[CS_MAX_PLACEMENTS];
    uint64_t line = addr >> m->line_shift;
    uint8_t *t = &m->touched[(line * 0x9e3779b97f4a7c15ull) >> 48 & (CS_TOUCHED_SLOTS - 1)];
    *t |= (uint8_t)(1u << party);
    int other_may_hold = cs_fast_paths ? (*t >> (1 - party)) & 1 : 1;
    /* Fast path: the line is the MRU way of this party's L1 in every placement. Then the access
     * hits everywhere and changes nothing, except that a write must still invalidate the other
     * party's copies when it may hold one. */
    if (cs_fast_paths && !(write && other_may_hold)) {
        int all_mru = 1;
        for (int p = 0; p < m->nplace && all_mru; p++) {
            const cs_cache *c = level_cache(&m->place[p], &m->shape, party, 0, fetch);
            uint64_t cl = addr >> c->line_shift;
            all_mru = c->ways[(size_t)(cl & (c->sets - 1)) * c->g.assoc] == cl + 1;
        }
        if (all_mru) {
            int kind = fetch ? 0 : 1;
            for (int p = 0; p < m->nplace; p++)
                m->place[p].st.accesses[party][kind]++;
            return; /* L1 hit in every placement: no miss, no cycles, no comparison entries */
        }
    }
    for (int p = 0; p < m->nplace; p++)
        sat[p] = place_access(&m->place[p], &m->shape, party, addr, fetch, write, other_may_hold);
    int shared = sat[0], separate = sat[m->nplace - 1];
    for (int l = 0; l < m->shape.levels; l++) {
        int shared_hit = shared <= l, separate_hit = separate <= l;
        if (!shared_hit && !separate_hit)
            m->cmp.alone[party][l]++;
        else if (!shared_hit)
            m->cmp.competition[party][l]++;
        else if (!separate_hit)
            m->cmp.cooperation[party][l]++;
    }
}

double cs_model_cpi(const cs_model *m, int place)
{
    uint64_t insns = m->insns[0] + m->insns[1];
    if (insns == 0)
        return 0.0;
    const cs_place_stats *st = &m->place[place].st;
    return (double)(st->cycles[0] + st->cycles[1]) / (double)insns;
}

void cs_repeat_init(cs_repeat *r)
{
    memset(r, 0, sizeof *r);
    r->line = ~0ull;
    r->party = -1;
    r->fetch = -1;
}

int cs_repeat_access(cs_repeat *r, uint64_t addr, unsigned line_shift, int party, int fetch, int write)
{
    uint64_t line = addr >> line_shift;
    if (line == r->line && party == r->party && fetch == r->fetch) {
        if (!write || r->wrote) {
            r->repeats[party][fetch ? 0 : 1]++;
            return 1;
        }
        r->wrote = 1;
        return 0;
    }
    r->line = line;
    r->party = party;
    r->fetch = fetch;
    r->wrote = write;
    return 0;
}

void cs_model_add_repeats(cs_model *m, const cs_repeat *r)
{
    for (int p = 0; p < m->nplace; p++)
        for (int party = 0; party < CS_PARTIES; party++)
            for (int k = 0; k < 2; k++)
                m->place[p].st.accesses[party][k] += r->repeats[party][k];
}
