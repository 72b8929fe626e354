/*
 * cachemc: the multi-core cache model (cachemc_core.h) as a QEMU 7.2 TCG plugin. Each vCPU is a
 * core with private L1/L2 caches, the cores of a chip share an L3; every instruction fetch and
 * data access a vCPU makes while it is inside the marked region (marker.h: per-vCPU and
 * all-vCPU markers) goes to its core's caches, and the report gives each vCPU's accesses,
 * misses per level, memory cycles and instructions, kernel and user separately.
 *
 * Arguments: out=PATH, preset=nehalem|amd16 (default amd16), cores_per_chip=N (override),
 * warm=on|off (simulate outside the region too, counting only inside; default off),
 * quantum=N,quantum_outside=M (switch vCPUs every N instructions inside the region, M outside:
 * quantum.h, the exact mode of docs/plugins.md; off unless given). The `slices` record says how
 * finely the vCPUs interleaved inside the region.
 * Must run single-threaded TCG (-accel tcg,thread=single): the model is not locked.
 */
#include "qemu_plugin_api.h"
#include "cachemc_core.h"
#include "marker.h"
#include "fast_phys.h"
#include "interleave.h"
#include "quantum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = MANYCORE_QEMU_PLUGIN_VERSION;

static region_t region;
static mc_model model;
static FILE *out;
/* warm=on: simulate every access of every vCPU from the start, count only inside the region
 * (the caches are warm when the region starts, as on a machine that has been serving). */
static int warm;
static uint64_t io_accesses, unknown_fetches;
static quantum_t quantum;
static slice_stats slices;

static void vcpu_tb_exec(unsigned int vcpu, void *udata)
{
    uint64_t n = (uint64_t)(uintptr_t)udata;
    quantum_block(&quantum, &region, vcpu, n);
    slice_block(&slices, vcpu, n, region_on(&region, vcpu));
}

/* Fetch callbacks cover a run of instructions in one 64-byte line: userdata packs the host
 * address | count << 48 | kernel << 63, as in cachesim.c. */
#define RUN_ADDR_MASK ((1ull << 47) - 1)

static void vcpu_fetch(unsigned int vcpu, void *udata)
{
    int on = region_on(&region, vcpu);
    if ((!on && !warm) || (int)vcpu >= model.sh.ncores)
        return;
    uint64_t u = (uint64_t)(uintptr_t)udata;
    int party = (u >> 63) ? CS_OS : CS_APP;
    if (on)
        model.st[vcpu].insns[party] += (u >> 48) & 0x7fff;
    uint64_t host = u & RUN_ADDR_MASK;
    uint64_t pa = host ? fetch_phys(host) : 0;
    if (!pa) {
        unknown_fetches++;
        return;
    }
    mc_access(&model, (int)vcpu, party, pa, 1, 0, on);
}

static void vcpu_mem(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *udata)
{
    (void)udata;
    int on = region_on(&region, vcpu);
    if ((!on && !warm) || (int)vcpu >= model.sh.ncores)
        return;
    struct qemu_plugin_hwaddr *hw = qemu_plugin_get_hwaddr(info, vaddr);
    if (!hw || qemu_plugin_hwaddr_is_io(hw)) {
        io_accesses++;
        return;
    }
    uint64_t pa = fast_phys(hw);
    int party = meminfo_is_user(info) ? CS_APP : CS_OS;
    mc_access(&model, (int)vcpu, party, pa, 0, qemu_plugin_mem_is_store(info), on);
}

static void vcpu_marker(unsigned int vcpu, void *udata)
{
    region_mark(&region, vcpu, (int)(uintptr_t)udata);
}

static void vcpu_tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    qemu_plugin_register_vcpu_tb_exec_cb(tb, vcpu_tb_exec, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)n);
    uint64_t run_line = ~0ull;
    struct qemu_plugin_insn *run_head = NULL;
    uint64_t run_addr = 0, run_count = 0, run_kernel = 0;
    for (size_t i = 0; i <= n; i++) {
        struct qemu_plugin_insn *insn = i < n ? qemu_plugin_tb_get_insn(tb, i) : NULL;
        uint64_t vaddr = 0, haddr = 0, line = ~0ull - 1;
        if (insn) {
            vaddr = qemu_plugin_insn_vaddr(insn);
            haddr = (uint64_t)(uintptr_t)qemu_plugin_insn_haddr(insn);
            line = haddr ? haddr >> 6 : (vaddr >> 6) | (1ull << 62);
        }
        if (line != run_line || run_count == 0x7fff) {
            if (run_head) {
                uint64_t u = (run_addr & RUN_ADDR_MASK) | (run_count << 48) | (run_kernel << 63);
                qemu_plugin_register_vcpu_insn_exec_cb(run_head, vcpu_fetch, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)u);
            }
            run_head = insn;
            run_line = line;
            run_addr = haddr;
            run_count = 0;
            run_kernel = (uint64_t)vaddr_is_kernel(vaddr);
        }
        if (!insn)
            break;
        run_count++;
        qemu_plugin_register_vcpu_mem_cb(insn, vcpu_mem, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_MEM_RW, NULL);
        int mv = marker_value((const uint8_t *)(uintptr_t)haddr, vaddr);
        if (mv)
            qemu_plugin_register_vcpu_insn_exec_cb(insn, vcpu_marker, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)mv);
    }
}

static void report(void)
{
    FILE *f = out ? out : stderr;
    const mc_shape *sh = &model.sh;
    fprintf(f, "cachemc version=1 warm=%d preset=%s cores=%d cores_per_chip=%d l1i=%llu:%u l1d=%llu:%u l2=%llu:%u l3=%llu:%u "
               "lat_l2=%u lat_l3=%u lat_mem=%u starts=%llu stops=%llu io_accesses=%llu unknown_fetches=%llu fast_phys=%s\n",
            warm, sh->name, sh->ncores, sh->cores_per_chip, (unsigned long long)sh->l1i.size, sh->l1i.assoc,
            (unsigned long long)sh->l1d.size, sh->l1d.assoc, (unsigned long long)sh->l2.size, sh->l2.assoc,
            (unsigned long long)sh->l3.size, sh->l3.assoc, sh->lat_l2, sh->lat_l3, sh->lat_mem,
            (unsigned long long)region.starts, (unsigned long long)region.stops, (unsigned long long)io_accesses,
            (unsigned long long)unknown_fetches, pa_cache_off ? "off" : "on");
    slice_report(f, &slices, quantum.quantum, quantum.kicks);
    for (int c = 0; c < sh->ncores; c++) {
        const mc_stats *st = &model.st[c];
        for (int p = 0; p < CS_PARTIES; p++)
            fprintf(f, "core vcpu=%d chip=%d party=%s insns=%llu accesses=%llu l1_miss=%llu l2_miss=%llu l3_miss=%llu cycles=%llu inval=%llu\n",
                    c, c / sh->cores_per_chip, p == CS_OS ? "os" : "app", (unsigned long long)st->insns[p],
                    (unsigned long long)st->accesses[p], (unsigned long long)st->l1_miss[p],
                    (unsigned long long)st->l2_miss[p], (unsigned long long)st->l3_miss[p],
                    (unsigned long long)st->cycles[p], (unsigned long long)st->invalidations[p]);
        fprintf(f, "cpi vcpu=%d mem_cpi=%.6f\n", c, mc_cpi(&model, c));
    }
    fprintf(f, "end\n");
    fflush(f);
}

static void plugin_exit(qemu_plugin_id_t id, void *p)
{
    (void)id;
    (void)p;
    report();
    if (out)
        fclose(out);
    mc_free(&model);
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    const char *preset = "amd16";
    int per_chip = 0, bad = 0;
    quantum_init(&quantum, id);
    slice_init(&slices);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "out=", 4)) {
            out = fopen(a + 4, "w");
            if (!out) {
                fprintf(stderr, "cachemc: cannot write %s\n", a + 4);
                return -1;
            }
        } else if (!strncmp(a, "preset=", 7)) {
            preset = a + 7;
        } else if (!strcmp(a, "warm=on")) {
            warm = 1;
        } else if (!strcmp(a, "warm=off")) {
            warm = 0;
        } else if (!strncmp(a, "cores_per_chip=", 15)) {
            per_chip = atoi(a + 15);
            if (per_chip < 1) {
                fprintf(stderr, "cachemc: cores_per_chip=%s: a whole number from 1\n", a + 15);
                return -1;
            }
        } else if (quantum_arg(&quantum, a, &bad)) {
            if (bad) {
                fprintf(stderr, "cachemc: `%s`: not a number of instructions\n", a);
                return -1;
            }
        } else {
            fprintf(stderr, "cachemc: unknown argument `%s` (out=, preset=nehalem|amd16, cores_per_chip=, warm=on|off, quantum=, quantum_outside=)\n", a);
            return -1;
        }
    }
    int ncores = info->system_emulation ? info->system.max_vcpus : 1;
    if (ncores > MC_MAX_CORES) {
        fprintf(stderr, "cachemc: %d vCPUs; the model has at most %d cores\n", ncores, MC_MAX_CORES);
        return -1;
    }
    mc_shape sh;
    if (mc_preset(preset, ncores, &sh)) {
        fprintf(stderr, "cachemc: unknown preset `%s` (nehalem or amd16)\n", preset);
        return -1;
    }
    if (per_chip)
        sh.cores_per_chip = per_chip;
    char err[256];
    if (mc_init(&model, &sh, err, sizeof err)) {
        fprintf(stderr, "cachemc: %s\n", err);
        return -1;
    }
    region.nvcpus = ncores;
    qemu_plugin_register_vcpu_tb_trans_cb(id, vcpu_tb_trans);
    qemu_plugin_register_atexit_cb(id, plugin_exit, NULL);
    return 0;
}
