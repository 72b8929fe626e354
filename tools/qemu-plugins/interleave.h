/*
 * How finely single-threaded TCG interleaves the vCPUs inside the marked region: a "slice" is
 * a run of translation blocks executed by one vCPU before another vCPU executes one. The
 * plugins that model cross-vCPU effects (sharing, cachesim's multi-core presets) report the
 * number of slices and their length distribution, so a run shows the interleaving its counts
 * were taken under (docs/plugins.md, "Exact mode").
 *
 * Only the instructions of vCPUs inside the region count; a turn of any other vCPU ends a slice.
 * A block left
 * early by an exception counts whole (as in insncount). Single-threaded TCG only: the state is
 * not locked.
 */
#ifndef MANYCORE_INTERLEAVE_H
#define MANYCORE_INTERLEAVE_H

#include <stdint.h>
#include <stdio.h>

#define SLICE_BUCKETS 24 /* bucket b: slices of [2^b, 2^(b+1)) instructions; the last is open */

typedef struct {
    int last_vcpu;              /* -1 before the first block */
    uint64_t cur;               /* instructions in the current slice */
    uint64_t slices;            /* completed slices (vCPU switches) */
    uint64_t insns;             /* instructions in completed slices */
    uint64_t max;
    uint64_t hist[SLICE_BUCKETS];
} slice_stats;

static inline void slice_init(slice_stats *s)
{
    for (int i = 0; i < SLICE_BUCKETS; i++)
        s->hist[i] = 0;
    s->last_vcpu = -1;
    s->cur = s->slices = s->insns = s->max = 0;
}

static inline void slice_close(slice_stats *s)
{
    if (s->cur == 0)
        return;
    int b = 63 - __builtin_clzll(s->cur);
    if (b >= SLICE_BUCKETS)
        b = SLICE_BUCKETS - 1;
    s->hist[b]++;
    s->slices++;
    s->insns += s->cur;
    if (s->cur > s->max)
        s->max = s->cur;
    s->cur = 0;
}

/* Every block a vCPU starts (n instructions; in_region: that vCPU is inside the region). A
 * block of another vCPU ends the current slice even if it runs outside the region. */
static inline void slice_block(slice_stats *s, unsigned vcpu, uint64_t n, int in_region)
{
    if ((int)vcpu != s->last_vcpu) {
        slice_close(s);
        s->last_vcpu = (int)vcpu;
    }
    if (in_region)
        s->cur += n;
}

/* A `slices` record: the quantum asked for, the forced switches (quantum.h), count, mean, max and the histogram as b<K>=N (slices of 2^K..2^(K+1)-1). */
static inline void slice_report(FILE *f, slice_stats *s, uint64_t quantum, uint64_t kicks)
{
    slice_close(s);
    fprintf(f, "slices quantum=%llu kicks=%llu count=%llu insns=%llu mean=%llu max=%llu", (unsigned long long)quantum,
            (unsigned long long)kicks,
            (unsigned long long)s->slices, (unsigned long long)s->insns,
            (unsigned long long)(s->slices ? s->insns / s->slices : 0), (unsigned long long)s->max);
    for (int b = 0; b < SLICE_BUCKETS; b++)
        if (s->hist[b])
            fprintf(f, " b%d=%llu", b, (unsigned long long)s->hist[b]);
    fprintf(f, "\n");
}

#endif
