/*
 * The measured-region marker protocol, shared by every plugin (documented in docs/plugins.md).
 *
 * A guest marks its measured region by executing exactly this instruction sequence:
 *
 *     66 ba 01 05      mov  $0x501, %dx      (or: ba 01 05 00 00   mov $0x501, %edx)
 *     b0 VV            mov  $VV, %al
 *     ee               out  %al, (%dx)
 *
 * QEMU 7.2's plugin API cannot read registers or see port I/O, so the plugins recognise the
 * marker by its bytes when the `out` is translated, and attach a callback that fires each time
 * that `out` executes, on the vCPU that executes it. Nothing is decoded at run time, so the
 * sequence must be emitted literally (see guest/workload.c and MARKER_ASM below); the port
 * write itself goes to an unassigned port and is ignored by the machine.
 *
 * VV: 1 = start measuring on this vCPU, 2 = stop on this vCPU,
 *     3 = start on every vCPU,         4 = stop on every vCPU,
 *     5 = epoch: a plugin that keeps per-test records (sharing) reports what it gathered since
 *         the last epoch and starts afresh (the commutativity checker, docs/commute.md, runs
 *         many two-core tests in one boot); the region state does not change.
 *     6 = the instructions this vCPU ran since its last 6 or 7 were work,
 *     7 = ... were idle polling: a polling loop that learns only at the end of a pass whether
 *         the pass found work (our kernel core, `kcmark` on its command line) says so after
 *         each pass. Only insncount reads 6 and 7 (marker_value_split); the region state does
 *         not change, so the other plugins and the exact mode's scheduling do not see them.
 */
#ifndef MANYCORE_MARKER_H
#define MANYCORE_MARKER_H

#include <stdint.h>
#include <string.h>

#define MARKER_PORT 0x501
#define MARKER_START_CPU 1
#define MARKER_STOP_CPU 2
#define MARKER_START_ALL 3
#define MARKER_STOP_ALL 4
#define MARKER_EPOCH 5
#define MARKER_WORK_SINCE 6
#define MARKER_IDLE_SINCE 7

#define MARKER_ASM(v) "movw $0x501, %%dx\n\tmovb $" #v ", %%al\n\toutb %%al, %%dx\n\t"

/*
 * Given the host pointer to a translated `out %al,(%dx)` (0xee) and its guest virtual address,
 * return the marker value VV if the bytes before it are the marker prefix, else 0. The prefix
 * is read from the same guest page only (host pointers are contiguous within a page), so a
 * sequence straddling a page boundary is not recognised: emitters keep it within a page.
 */
static inline int marker_value_split(const uint8_t *out_insn, uint64_t vaddr);

static inline int marker_value(const uint8_t *out_insn, uint64_t vaddr)
{
    int v = marker_value_split(out_insn, vaddr);
    return v <= MARKER_EPOCH ? v : 0;
}

/* As marker_value, but also the pass markers 6 and 7 (insncount's busy/idle split). */
static inline int marker_value_split(const uint8_t *out_insn, uint64_t vaddr)
{
    if (!out_insn || out_insn[0] != 0xee)
        return 0;
    uint64_t off = vaddr & 0xfff;
    int v = 0;
    if (off >= 6) {
        const uint8_t *p = out_insn - 6;
        if (p[0] == 0x66 && p[1] == 0xba && p[2] == 0x01 && p[3] == 0x05 && p[4] == 0xb0)
            v = p[5];
    }
    if (!v && off >= 7) {
        const uint8_t *p = out_insn - 7;
        if (p[0] == 0xba && p[1] == 0x01 && p[2] == 0x05 && p[3] == 0 && p[4] == 0 && p[5] == 0xb0)
            v = p[6];
    }
    return (v >= MARKER_START_CPU && v <= MARKER_IDLE_SINCE) ? v : 0;
}

/* Kernel or user by instruction address: x86-64 kernels (Linux, ours) live in the high half. */
static inline int vaddr_is_kernel(uint64_t vaddr) { return (vaddr >> 63) != 0; }

/* In QEMU 7.2 on x86 the low 4 bits of the memory-info word are the MMU index; 2 and 3 are
 * the user-mode indices (MMU_USER64_IDX, MMU_USER32_IDX). */
static inline int meminfo_is_user(uint32_t info)
{
    unsigned idx = info & 0xf;
    return idx == 2 || idx == 3;
}

/*
 * Which vCPUs are inside the marked region. One instance per plugin; vCPU indices beyond
 * REGION_MAX_VCPUS are never measured (the host refuses such runs).
 */
#define REGION_MAX_VCPUS 256
typedef struct {
    volatile uint8_t active[REGION_MAX_VCPUS];
    uint64_t starts, stops; /* marker executions seen */
    int nvcpus;
    int nactive; /* vCPUs inside the region now (the exact-mode scheduler's quantum depends on it) */
    int run;     /* between a start and a stop on every vCPU (3 and 4): a vCPU that stopped
                    itself in there (2) is idle, not gone (insncount's idle counts) */
} region_t;

static inline void region_mark(region_t *r, unsigned vcpu, int v)
{
    switch (v) {
    case MARKER_START_CPU:
        if (vcpu < REGION_MAX_VCPUS && !r->active[vcpu]) {
            r->active[vcpu] = 1;
            r->nactive++;
        }
        r->starts++;
        break;
    case MARKER_STOP_CPU:
        if (vcpu < REGION_MAX_VCPUS && r->active[vcpu]) {
            r->active[vcpu] = 0;
            r->nactive--;
        }
        r->stops++;
        break;
    case MARKER_START_ALL:
        memset((void *)r->active, 1, sizeof r->active);
        r->nactive = REGION_MAX_VCPUS;
        r->run = 1;
        r->starts++;
        break;
    case MARKER_STOP_ALL:
        memset((void *)r->active, 0, sizeof r->active);
        r->nactive = 0;
        r->run = 0;
        r->stops++;
        break;
    }
}

static inline int region_on(const region_t *r, unsigned vcpu)
{
    return vcpu < REGION_MAX_VCPUS && r->active[vcpu];
}

/* Inside a run opened on every vCPU (3) but stopped on this one (2): a guest marks a vCPU's
 * stretches with nothing to do this way (tcpserv's polls that find nothing). */
static inline int region_idle(const region_t *r, unsigned vcpu)
{
    return r->run && vcpu < REGION_MAX_VCPUS && !r->active[vcpu];
}

#endif
