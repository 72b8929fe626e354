/*
 * The exact-mode vCPU quantum (docs/plugins.md, "Exact mode"): make single-threaded TCG
 * switch vCPUs every `quantum` guest instructions, so that the interleaving of the vCPUs, and
 * every count that depends on it, is a function of instruction counts alone.
 *
 * Why the plugin has to do it. QEMU 7.2's round-robin TCG thread (accel/tcg/tcg-accel-ops-rr.c)
 * leaves a vCPU only when it halts, executes `pause`, is kicked, or (under -icount) exhausts
 * its instruction budget, which is the number of instructions to the next QEMU_CLOCK_VIRTUAL
 * timer deadline. 7.2 gives that whole budget to the first vCPU of the round; the next one
 * finds the deadline reached, gets a budget of 0 and only fires the timers. So under -icount a
 * vCPU that spins waiting for another starves it (this is why Linux's SMP boot hangs under
 * icount in 7.2: the boot CPU spins in schedule() while the AP never runs again), and without
 * -icount the slices are host time (the 100 ms kick timer), which is what made the audit's
 * transfer counts depend on the host's load. QEMU 8.1 splits the budget between the vCPUs
 * (commit "accel/tcg/tcg-accel-ops-rr: ensure fairness with icount"); 7.2 does not.
 *
 * How. The 7.2 plugin API has no call to end a vCPU's turn, but registering or unregistering
 * a callback for an event nobody else subscribes to changes QEMU's global plugin event mask,
 * and QEMU then queues an update of that mask on every vCPU (async_run_on_cpu), which kicks the
 * round-robin thread: the running vCPU stops at the start of its next translation block (every
 * block checks the exit request, chained or not) and the round-robin loop moves to the next
 * vCPU. The plugin counts the instructions of each block the running vCPU starts (a block
 * callback) and toggles an idle callback once the vCPU has run `quantum` instructions since
 * its turn began, so a turn is `quantum` instructions rounded up to the end of a block. Where
 * the switch happens is a function of the guest's instruction stream only; together with
 * -icount (guest time = instructions, so interrupts land at the same instructions) and sleep=off
 * the whole run repeats exactly, whatever the host's load.
 *
 * Outside the measured region the quantum is `quantum_outside` (coarser: it only has to keep
 * every vCPU running, e.g. through Linux's SMP boot); 0 turns the mechanism off.
 * Single-threaded TCG only (the state is not locked).
 */
#ifndef MANYCORE_QUANTUM_H
#define MANYCORE_QUANTUM_H

#include "qemu_plugin_api.h"
#include "marker.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    qemu_plugin_id_t id;
    uint64_t quantum;         /* instructions per turn while any vCPU is in the region (0 = off) */
    uint64_t quantum_outside; /* ... while none is (0 = off) */
    int last_vcpu;            /* the vCPU whose turn is being counted */
    uint64_t used;            /* instructions it has started in this turn */
    int registered;           /* the idle callback's state, toggled to force a switch */
    uint64_t kicks;           /* forced switches requested while a vCPU was in the region (outside
                               * it the count would depend on when QEMU stops after the guest's
                               * power-off, which is host time) */
} quantum_t;

static void quantum_idle_cb(qemu_plugin_id_t id, unsigned int vcpu)
{
    (void)id;
    (void)vcpu;
}

static inline void quantum_init(quantum_t *q, qemu_plugin_id_t id)
{
    q->id = id;
    q->last_vcpu = -1;
    q->used = 0;
    q->registered = 0;
    q->kicks = 0;
}

/* Parse `quantum=N` / `quantum_outside=N`; 1 if the argument was one of them (0 on success in
 * *bad, 1 if the number is malformed). */
static inline int quantum_arg(quantum_t *q, const char *arg, int *bad)
{
    uint64_t *field = NULL;
    const char *v = NULL;
    if (!strncmp(arg, "quantum=", 8)) {
        field = &q->quantum;
        v = arg + 8;
    } else if (!strncmp(arg, "quantum_outside=", 16)) {
        field = &q->quantum_outside;
        v = arg + 16;
    } else {
        return 0;
    }
    char *end = NULL;
    unsigned long long n = strtoull(v, &end, 10);
    *bad = !*v || *end || n > (1ull << 40);
    if (!*bad)
        *field = n;
    return 1;
}

/* The arguments every exact-mode plugin takes: `out=PATH` (where the report goes) and the
 * quantum's (`quantum_arg`). 1 if `arg` was one of them and was taken, 0 if it was none of
 * them, -1 after printing why it is bad (prefixed with the plugin's name). */
static inline int plugin_common_arg(const char *plugin, const char *arg, FILE **out, quantum_t *q)
{
    int bad = 0;
    if (!strncmp(arg, "out=", 4)) {
        *out = fopen(arg + 4, "w");
        if (!*out) {
            fprintf(stderr, "%s: cannot write %s\n", plugin, arg + 4);
            return -1;
        }
        return 1;
    }
    if (!quantum_arg(q, arg, &bad))
        return 0;
    if (bad) {
        fprintf(stderr, "%s: `%s`: not a number of instructions\n", plugin, arg);
        return -1;
    }
    return 1;
}

/* At the start of each translation block the running vCPU executes (n instructions). */
static inline void quantum_block(quantum_t *q, const region_t *r, unsigned vcpu, uint64_t n)
{
    /* Off (every timing run, multi-threaded TCG): return before writing anything. The fields
     * below are one global written on every block; under multi-threaded TCG two vCPU threads
     * writing them bounced that host cache line on every translation block and cut a
     * share-nothing guest loop at 2 vCPUs to a tenth of its 1-vCPU rate (docs/results.md,
     * "the 2-vCPU collapse"). */
    if (q->quantum == 0 && q->quantum_outside == 0)
        return;
    uint64_t limit = r->nactive > 0 ? q->quantum : q->quantum_outside;
    if ((int)vcpu != q->last_vcpu) {
        q->last_vcpu = (int)vcpu;
        q->used = 0;
    }
    q->used += n;
    if (limit == 0 || q->used < limit)
        return;
    /* This block runs to its end; the vCPU stops before the next one. */
    q->used = 0;
    q->registered = !q->registered;
    if (r->nactive > 0)
        q->kicks++;
    qemu_plugin_register_vcpu_idle_cb(q->id, q->registered ? quantum_idle_cb : NULL);
}

#endif
