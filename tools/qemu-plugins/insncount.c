/*
 * insncount: guest instructions per vCPU inside the marked region, split kernel / user.
 *
 * Each translation block gets one callback carrying its instruction count and whether it is
 * kernel code (high-half address); the callback adds the count to its vCPU's counter if that
 * vCPU is inside the region. Counters are per vCPU and written only by that vCPU's thread, so
 * this plugin is safe under multi-threaded TCG too. A block left early by an exception (a page
 * fault on a load, say) still counts whole: the over-count is at most one block per exception.
 *
 * Arguments: out=PATH (default: stderr); profile=PATH also writes, per translation-block
 * start address, how many instructions ran there inside the region (a flat profile; symbolize
 * the addresses with the kernel's or program's symbol table). The profile table is shared by
 * all vCPUs and updated with atomics; it holds PROFILE_SLOTS distinct blocks and counts the
 * rest as "other". quantum=N,quantum_outside=M: switch vCPUs every N instructions inside the
 * region, M outside (quantum.h; the exact mode of docs/plugins.md; single-threaded TCG only).
 * regions=on also writes one `region` record per region left (a stop marker on a vCPU that was
 * inside): that vCPU's kernel and user instructions since it entered. A guest that measures
 * several paths one after another in one boot gets each path's count (the instruction-count
 * gate, docs/insngate.md). Instructions a vCPU runs while it has stopped itself (2) inside a
 * region started on every vCPU (3) count apart, as its `idle` (a service core's polls that
 * found nothing, when the guest marks only its busy stretches). A vCPU that says after each pass
 * of a polling loop whether the pass found work (markers 6 and 7, marker.h; our kernel core)
 * has its instructions inside the region held as pending until the pass's marker, which adds
 * them to its count (work) or to its `idle`; what is pending at exit counts as work.
 */
#include "qemu_plugin_api.h"
#include "marker.h"
#include "quantum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = MANYCORE_QEMU_PLUGIN_VERSION;

static region_t region;
/* [vcpu][0 = kernel, 1 = user], padded so vCPU threads do not share counter lines */
static struct {
    uint64_t n[2];
    uint64_t tbs;
    uint64_t idle; /* kernel + user instructions while idle (region_idle, or a pass marked idle) */
    uint64_t pending[2]; /* since the last pass marker (split mode), [0 = kernel, 1 = user] */
    uint64_t split; /* this vCPU has sent a pass marker (6 or 7): its passes are split */
    uint8_t pad[8];
} counts[REGION_MAX_VCPUS];
static FILE *out;

/* regions=on: per-region records, kept until exit (a few per benchmark). */
static int regions_on;
static struct {
    uint64_t n[2];
} region_base[REGION_MAX_VCPUS];
struct region_rec {
    unsigned vcpu;
    uint64_t n[2];
};
static struct region_rec *regions;
static size_t nregions, region_cap;
/* quantum=N: the exact-mode vCPU switch (quantum.h; single-threaded TCG only). */
static quantum_t quantum;

#define PROFILE_SLOTS (1u << 16)
static struct {
    uint64_t vaddr; /* 0 = empty */
    uint64_t insns;
} *profile;
static uint64_t profile_other;
static FILE *profile_out;

static void profile_add(uint64_t vaddr, uint64_t n)
{
    uint64_t key = vaddr + 1; /* never 0 (no block starts at the last byte of the address space) */
    uint32_t h = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 48);
    for (uint32_t probe = 0; probe < 64; probe++) {
        uint32_t i = (h + probe) & (PROFILE_SLOTS - 1);
        uint64_t cur = __atomic_load_n(&profile[i].vaddr, __ATOMIC_ACQUIRE);
        if (cur == 0) {
            uint64_t expected = 0;
            if (__atomic_compare_exchange_n(&profile[i].vaddr, &expected, key, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                cur = key;
            else
                cur = expected;
        }
        if (cur == key) {
            __atomic_fetch_add(&profile[i].insns, n, __ATOMIC_RELAXED);
            return;
        }
    }
    __atomic_fetch_add(&profile_other, n, __ATOMIC_RELAXED);
}

static void count_block(unsigned int vcpu, uint64_t u)
{
    if (counts[vcpu].split)
        counts[vcpu].pending[(u >> 63) ? 0 : 1] += u & 0xffffffff;
    else
        counts[vcpu].n[(u >> 63) ? 0 : 1] += u & 0xffffffff;
    counts[vcpu].tbs++;
}

/* A pass marker (6 or 7) on `vcpu`, from its own thread: what it ran inside the region since its
 * last pass marker was work (counted) or idle polling. */
static void pass_end(unsigned int vcpu, int v)
{
    if (vcpu >= REGION_MAX_VCPUS)
        return;
    if (v == MARKER_WORK_SINCE) {
        counts[vcpu].n[0] += counts[vcpu].pending[0];
        counts[vcpu].n[1] += counts[vcpu].pending[1];
    } else {
        counts[vcpu].idle += counts[vcpu].pending[0] + counts[vcpu].pending[1];
    }
    counts[vcpu].pending[0] = counts[vcpu].pending[1] = 0;
    counts[vcpu].split = 1;
}

static void vcpu_tb_exec(unsigned int vcpu, void *udata)
{
    uint64_t u = (uint64_t)(uintptr_t)udata;
    quantum_block(&quantum, &region, vcpu, u & 0xffffffff);
    if (region_on(&region, vcpu))
        count_block(vcpu, u);
    else if (region_idle(&region, vcpu))
        counts[vcpu].idle += u & 0xffffffff;
}

/* With profile=: udata points at the block's { vaddr, packed count } pair. */
struct tb_info {
    uint64_t vaddr;
    uint64_t packed;
};

static void vcpu_tb_exec_profiled(unsigned int vcpu, void *udata)
{
    const struct tb_info *tb = udata;
    quantum_block(&quantum, &region, vcpu, tb->packed & 0xffffffff);
    if (!region_on(&region, vcpu)) {
        if (region_idle(&region, vcpu))
            counts[vcpu].idle += tb->packed & 0xffffffff;
        return;
    }
    count_block(vcpu, tb->packed);
    profile_add(tb->vaddr, tb->packed & 0xffffffff);
}

static void region_close(unsigned v)
{
    if (nregions == region_cap) {
        size_t cap = region_cap ? region_cap * 2 : 64;
        struct region_rec *r = realloc(regions, cap * sizeof *r);
        if (!r)
            return; /* counted as missing at exit: regions_lost */
        regions = r;
        region_cap = cap;
    }
    regions[nregions].vcpu = v;
    regions[nregions].n[0] = counts[v].n[0] - region_base[v].n[0];
    regions[nregions].n[1] = counts[v].n[1] - region_base[v].n[1];
    nregions++;
}

static uint64_t regions_lost;

static void vcpu_marker(unsigned int vcpu, void *udata)
{
    if ((int)(uintptr_t)udata >= MARKER_WORK_SINCE) {
        pass_end(vcpu, (int)(uintptr_t)udata);
        return;
    }
    if (!regions_on) {
        region_mark(&region, vcpu, (int)(uintptr_t)udata);
        return;
    }
    int nv = region.nvcpus > REGION_MAX_VCPUS ? REGION_MAX_VCPUS : region.nvcpus;
    uint8_t before[REGION_MAX_VCPUS];
    for (int v = 0; v < nv; v++)
        before[v] = region.active[v];
    region_mark(&region, vcpu, (int)(uintptr_t)udata);
    for (int v = 0; v < nv; v++) {
        if (!before[v] && region.active[v]) {
            region_base[v].n[0] = counts[v].n[0];
            region_base[v].n[1] = counts[v].n[1];
        } else if (before[v] && !region.active[v]) {
            size_t had = nregions;
            region_close((unsigned)v);
            if (nregions == had)
                regions_lost++;
        }
    }
}

static void vcpu_tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    uint64_t kernel = (uint64_t)vaddr_is_kernel(qemu_plugin_tb_vaddr(tb));
    uint64_t packed = (uint64_t)n | kernel << 63;
    if (profile) {
        /* One small record per translation; blocks are retranslated rarely, and the records
         * live as long as the run (the plugin API gives no hook for a block's end). */
        struct tb_info *info = malloc(sizeof *info);
        if (info) {
            info->vaddr = qemu_plugin_tb_vaddr(tb);
            info->packed = packed;
            qemu_plugin_register_vcpu_tb_exec_cb(tb, vcpu_tb_exec_profiled, QEMU_PLUGIN_CB_NO_REGS, info);
        } else {
            qemu_plugin_register_vcpu_tb_exec_cb(tb, vcpu_tb_exec, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)packed);
        }
    } else {
        qemu_plugin_register_vcpu_tb_exec_cb(tb, vcpu_tb_exec, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)packed);
    }
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        int mv = marker_value_split(qemu_plugin_insn_haddr(insn), qemu_plugin_insn_vaddr(insn));
        if (mv)
            qemu_plugin_register_vcpu_insn_exec_cb(insn, vcpu_marker, QEMU_PLUGIN_CB_NO_REGS,
                                                   (void *)(uintptr_t)mv);
    }
}

static void plugin_exit(qemu_plugin_id_t id, void *p)
{
    (void)id;
    (void)p;
    FILE *f = out ? out : stderr;
    int nv = region.nvcpus > REGION_MAX_VCPUS ? REGION_MAX_VCPUS : region.nvcpus;
    /* A pass not closed by its marker before exit: counted as work (never claimed idle). */
    for (int v = 0; v < nv; v++)
        pass_end((unsigned)v, MARKER_WORK_SINCE);
    fprintf(f, "insncount version=1 starts=%llu stops=%llu vcpus=%d quantum=%llu kicks=%llu\n", (unsigned long long)region.starts,
            (unsigned long long)region.stops, nv, (unsigned long long)quantum.quantum, (unsigned long long)quantum.kicks);
    for (int v = 0; v < nv; v++)
        fprintf(f, "vcpu index=%d kernel=%llu user=%llu blocks=%llu idle=%llu\n", v, (unsigned long long)counts[v].n[0],
                (unsigned long long)counts[v].n[1], (unsigned long long)counts[v].tbs, (unsigned long long)counts[v].idle);
    if (regions_on) {
        for (size_t i = 0; i < nregions; i++)
            fprintf(f, "region index=%zu vcpu=%u kernel=%llu user=%llu\n", i, regions[i].vcpu,
                    (unsigned long long)regions[i].n[0], (unsigned long long)regions[i].n[1]);
        fprintf(f, "regions count=%zu lost=%llu\n", nregions, (unsigned long long)regions_lost);
    }
    fprintf(f, "end\n");
    fflush(f);
    if (out)
        fclose(out);
    if (profile_out) {
        for (uint32_t i = 0; i < PROFILE_SLOTS; i++)
            if (profile[i].vaddr && profile[i].insns)
                fprintf(profile_out, "0x%016llx %llu\n", (unsigned long long)(profile[i].vaddr - 1),
                        (unsigned long long)profile[i].insns);
        if (profile_other)
            fprintf(profile_out, "other %llu\n", (unsigned long long)profile_other);
        fclose(profile_out);
    }
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    quantum_init(&quantum, id);
    for (int i = 0; i < argc; i++) {
        int common = plugin_common_arg("insncount", argv[i], &out, &quantum);
        if (common < 0)
            return -1;
        if (common)
            continue;
        if (!strncmp(argv[i], "profile=", 8)) {
            profile_out = fopen(argv[i] + 8, "w");
            profile = calloc(PROFILE_SLOTS, sizeof *profile);
            if (!profile_out || !profile) {
                fprintf(stderr, "insncount: cannot write profile %s\n", argv[i] + 8);
                return -1;
            }
        } else if (!strcmp(argv[i], "regions=on")) {
            regions_on = 1;
        } else {
            fprintf(stderr, "insncount: unknown argument `%s` (out=PATH, profile=PATH, regions=on, quantum=N, quantum_outside=N)\n", argv[i]);
            return -1;
        }
    }
    region.nvcpus = info->system_emulation ? info->system.max_vcpus : 1;
    qemu_plugin_register_vcpu_tb_trans_cb(id, vcpu_tb_trans);
    qemu_plugin_register_atexit_cb(id, plugin_exit, NULL);
    return 0;
}
