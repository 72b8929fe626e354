/*
 * cachesim: CachEMU (seeds/004) as a QEMU 7.2 TCG plugin.
 *
 * Every instruction fetch and data access inside the marked region is fed, with its address,
 * to one or more cache models (cachesim_core.c). Each access belongs to the OS (kernel mode)
 * or the application (user mode); each model simulates several placements of the two at once
 * on the same trace, so competition and cooperation are counted access by access.
 *
 * Arguments (-plugin cachesim.so,ARG=VALUE,...):
 *   out=PATH          where the report goes (default: stderr)
 *   preset=nehalem    3 levels: L1I 32K 4-way, L1D 32K 8-way, L2 256K 8-way, L3 8M 16-way
 *                     (the L3 inclusive); 10/38/191 cycles; same-core, two-cores, two-chips.
 *   preset=sweep      single-level unified 8-way caches 4K..16M; shared vs separate.
 *   levels=G1/G2/...  custom unified hierarchy, each G = SIZE:ASSOC[:LINE]
 *   inclusive=on|off  back-invalidate lower levels on eviction (custom levels; default on)
 *   Several presets may be given (preset=nehalem,preset=sweep).
 *   quantum=N,quantum_outside=M  switch vCPUs every N instructions inside the region, M outside
 *                     (quantum.h: the exact mode of docs/plugins.md)
 *
 * Addresses: data accesses use the guest physical address (qemu_plugin_hwaddr_phys_addr).
 * The 7.2 API gives no guest-physical address for instruction fetches, only the host pointer
 * of the guest RAM holding the code (qemu_plugin_insn_haddr). Main RAM is one block mapped
 * contiguously, so host - physical is a constant learned from data accesses (fast_phys.h);
 * fetches are simulated at their guest-physical address once it is known (the report counts
 * how many: fetch_runs_phys of fetch_runs), at their host address before that.
 *
 * Must run single-threaded TCG (-accel tcg,thread=single): the models are not locked.
 */
#include "qemu_plugin_api.h"
#include "cachesim_core.h"
#include "marker.h"
#include "fast_phys.h"
#include "interleave.h"
#include "quantum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = MANYCORE_QEMU_PLUGIN_VERSION;

#define MAX_MODELS 24

static region_t region;
static cs_model models[MAX_MODELS];
static const char *model_names[MAX_MODELS];
static char model_name_buf[MAX_MODELS][32];
static int nmodels;
static FILE *out;
static uint64_t insns[CS_PARTIES];
static uint64_t fetch_runs[CS_PARTIES];
static uint64_t fetch_runs_phys; /* fetches simulated at their guest-physical address */
static uint64_t data_accesses_io;
/* Cross-check of the two ways to tell kernel from user: the MMU index of a data access and
 * the half of the address space the accessing instruction lives in. */
static uint64_t mmu_user_insn_kernel, mmu_kernel_insn_user, mmu_checked;
static unsigned min_line_shift = 6;

/* See cs_repeat in cachesim_core.h: exact, keeps stack and loop traffic cheap. */
static cs_repeat repeat;
/* The exact-mode vCPU switch (quantum.h) and the interleaving it produced (interleave.h). */
static quantum_t quantum;
static slice_stats slices;

/* Fetch callbacks cover a run of consecutive instructions that start in one line (of the
 * smallest line size among the models): userdata packs host address | count << 48 | kernel
 * << 63. Repeated fetches of the line just fetched always hit and do not change LRU order. */
#define RUN_ADDR_MASK ((1ull << 47) - 1)

static void vcpu_fetch(unsigned int vcpu, void *udata)
{
    if (!region_on(&region, vcpu))
        return;
    uint64_t u = (uint64_t)(uintptr_t)udata;
    int party = (u >> 63) ? CS_OS : CS_APP;
    uint64_t addr = u & RUN_ADDR_MASK;
    insns[party] += (u >> 48) & 0x7fff;
    fetch_runs[party]++;
    if (addr == 0)
        return; /* code not in RAM (no host pointer): counted, not simulated */
    uint64_t pa = fetch_phys(addr);
    if (pa) {
        addr = pa;
        fetch_runs_phys++;
    }
    if (cs_repeat_access(&repeat, addr, min_line_shift, party, 1, 0))
        return;
    for (int i = 0; i < nmodels; i++)
        cs_model_access(&models[i], party, addr, 1, 0);
}

static void vcpu_mem(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *udata)
{
    if (!region_on(&region, vcpu))
        return;
    struct qemu_plugin_hwaddr *hw = qemu_plugin_get_hwaddr(info, vaddr);
    if (!hw || qemu_plugin_hwaddr_is_io(hw)) {
        data_accesses_io++;
        return;
    }
    uint64_t pa = fast_phys(hw);
    int user = meminfo_is_user(info);
    int insn_kernel = (int)(uintptr_t)udata;
    mmu_checked++;
    if (user && insn_kernel)
        mmu_user_insn_kernel++;
    if (!user && !insn_kernel)
        mmu_kernel_insn_user++;
    int party = user ? CS_APP : CS_OS;
    int write = qemu_plugin_mem_is_store(info);
    if (cs_repeat_access(&repeat, pa, min_line_shift, party, 0, write))
        return;
    for (int i = 0; i < nmodels; i++)
        cs_model_access(&models[i], party, pa, 0, write);
}

static void vcpu_marker(unsigned int vcpu, void *udata)
{
    region_mark(&region, vcpu, (int)(uintptr_t)udata);
}

static void vcpu_tb_exec(unsigned int vcpu, void *udata)
{
    uint64_t n = (uint64_t)(uintptr_t)udata;
    quantum_block(&quantum, &region, vcpu, n);
    slice_block(&slices, vcpu, n, region_on(&region, vcpu));
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
            line = haddr ? haddr >> min_line_shift : (vaddr >> min_line_shift) | (1ull << 62);
        }
        if (line != run_line || run_count == 0x7fff) {
            if (run_head) {
                uint64_t u = (run_addr & RUN_ADDR_MASK) | (run_count << 48) | (run_kernel << 63);
                qemu_plugin_register_vcpu_insn_exec_cb(run_head, vcpu_fetch, QEMU_PLUGIN_CB_NO_REGS,
                                                       (void *)(uintptr_t)u);
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
        qemu_plugin_register_vcpu_mem_cb(insn, vcpu_mem, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_MEM_RW,
                                         (void *)(uintptr_t)vaddr_is_kernel(vaddr));
        int mv = marker_value((const uint8_t *)(uintptr_t)haddr, vaddr);
        if (mv)
            qemu_plugin_register_vcpu_insn_exec_cb(insn, vcpu_marker, QEMU_PLUGIN_CB_NO_REGS,
                                                   (void *)(uintptr_t)mv);
    }
}

static const char *party_name(int p) { return p == CS_OS ? "os" : "app"; }

static void report(void)
{
    FILE *f = out ? out : stderr;
    fprintf(f, "cachesim version=1 starts=%llu stops=%llu insns_os=%llu insns_app=%llu io_accesses=%llu "
               "mmu_checked=%llu mmu_user_insn_kernel=%llu mmu_kernel_insn_user=%llu repeats=%llu fast_phys=%s "
               "fetch_runs=%llu fetch_runs_phys=%llu ram_offset_conflicts=%llu\n",
            (unsigned long long)region.starts, (unsigned long long)region.stops, (unsigned long long)insns[0],
            (unsigned long long)insns[1], (unsigned long long)data_accesses_io, (unsigned long long)mmu_checked,
            (unsigned long long)mmu_user_insn_kernel, (unsigned long long)mmu_kernel_insn_user,
            (unsigned long long)(repeat.repeats[0][0] + repeat.repeats[0][1] + repeat.repeats[1][0] + repeat.repeats[1][1]), pa_cache_off ? "off" : "on",
            (unsigned long long)(fetch_runs[0] + fetch_runs[1]), (unsigned long long)fetch_runs_phys,
            (unsigned long long)ram_offset_conflicts);
    slice_report(f, &slices, quantum.quantum, quantum.kicks);
    for (int i = 0; i < nmodels; i++) {
        cs_model *m = &models[i];
        cs_model_add_repeats(m, &repeat);
        m->insns[0] = insns[0];
        m->insns[1] = insns[1];
        const cs_shape *sh = &m->shape;
        fprintf(f, "model name=%s levels=%d split_l1=%d inclusive_mask=%u", model_names[i], sh->levels, sh->split_l1,
                sh->inclusive & ((1u << sh->levels) - 1));
        if (sh->split_l1)
            fprintf(f, " l1i=%llu:%u:%u", (unsigned long long)sh->l1i.size, sh->l1i.assoc, sh->l1i.line);
        for (int l = 0; l < sh->levels; l++)
            fprintf(f, " l%d=%llu:%u:%u lat%d=%u", l + 1, (unsigned long long)sh->level[l].size, sh->level[l].assoc,
                    sh->level[l].line, l + 1, sh->lat[l]);
        fprintf(f, " lat_mem=%u\n", sh->lat[sh->levels]);
        for (int p = 0; p < m->nplace; p++) {
            const cs_place_stats *st = &m->place[p].st;
            for (int party = 0; party < CS_PARTIES; party++) {
                fprintf(f, "place model=%s placement=%s party=%s fetches=%llu data=%llu cycles=%llu coherence_inval=%llu",
                        model_names[i], m->place[p].name, party_name(party),
                        (unsigned long long)st->accesses[party][0], (unsigned long long)st->accesses[party][1],
                        (unsigned long long)st->cycles[party], (unsigned long long)st->coherence_invalidations[party]);
                for (int l = 0; l < sh->levels; l++)
                    fprintf(f, " l%d_fetch_miss=%llu l%d_data_miss=%llu", l + 1,
                            (unsigned long long)st->misses[party][l][0], l + 1,
                            (unsigned long long)st->misses[party][l][1]);
                fprintf(f, "\n");
            }
            fprintf(f, "cpi model=%s placement=%s mem_cpi=%.6f back_inval=%llu\n", model_names[i], m->place[p].name,
                    cs_model_cpi(m, p), (unsigned long long)st->back_invalidations);
        }
        for (int l = 0; l < sh->levels; l++)
            for (int party = 0; party < CS_PARTIES; party++)
                fprintf(f, "cmp model=%s level=%d party=%s alone=%llu competition=%llu cooperation=%llu\n",
                        model_names[i], l + 1, party_name(party), (unsigned long long)m->cmp.alone[party][l],
                        (unsigned long long)m->cmp.competition[party][l],
                        (unsigned long long)m->cmp.cooperation[party][l]);
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
}

static int add_model(const char *name, const cs_shape *sh, int nplace, const int *shared, const char *const *pnames)
{
    char err[256];
    if (nmodels >= MAX_MODELS) {
        fprintf(stderr, "cachesim: too many models (max %d)\n", MAX_MODELS);
        return -1;
    }
    snprintf(model_name_buf[nmodels], sizeof model_name_buf[nmodels], "%s", name);
    model_names[nmodels] = model_name_buf[nmodels];
    if (cs_model_init(&models[nmodels], sh, nplace, shared, pnames, err, sizeof err)) {
        fprintf(stderr, "cachesim: model %s: %s\n", name, err);
        return -1;
    }
    unsigned shift = 0;
    while ((1u << shift) < sh->level[0].line)
        shift++;
    if (shift < min_line_shift)
        min_line_shift = shift;
    nmodels++;
    return 0;
}

static const char *const NEHALEM_PLACES[] = {"same-core", "two-cores", "two-chips"};
static const char *const TWO_PLACES[] = {"shared", "separate"};

static int add_nehalem(void)
{
    cs_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.levels = 3;
    sh.split_l1 = 1;
    sh.l1i = (cs_geom){32 << 10, 4, 64};
    sh.level[0] = (cs_geom){32 << 10, 8, 64};
    sh.level[1] = (cs_geom){256 << 10, 8, 64};
    sh.level[2] = (cs_geom){8 << 20, 16, 64};
    sh.lat[0] = 0;
    sh.lat[1] = 10;
    sh.lat[2] = 38;
    sh.lat[3] = 191;
    sh.inclusive = 1u << 2; /* Nehalem's L3 is inclusive of the cores' L1/L2; its L2 is not of L1 */
    const int shared[] = {0, 2, 3};
    return add_model("nehalem", &sh, 3, shared, NEHALEM_PLACES);
}

static int add_sweep(void)
{
    for (uint64_t size = 4 << 10; size <= (16ull << 20); size <<= 1) {
        cs_shape sh;
        memset(&sh, 0, sizeof sh);
        sh.levels = 1;
        sh.level[0] = (cs_geom){size, 8, 64};
        sh.lat[0] = 0;
        sh.lat[1] = 191;
        const int shared[] = {0, 1};
        char name[32];
        if (size >= (1 << 20))
            snprintf(name, sizeof name, "sweep-%lluM", (unsigned long long)(size >> 20));
        else
            snprintf(name, sizeof name, "sweep-%lluK", (unsigned long long)(size >> 10));
        if (add_model(name, &sh, 2, shared, TWO_PLACES))
            return -1;
    }
    return 0;
}

static int add_custom(const char *spec, int inclusive)
{
    cs_shape sh;
    memset(&sh, 0, sizeof sh);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *tok = strtok_r(buf, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
        char err[256];
        if (sh.levels >= CS_MAX_LEVELS) {
            fprintf(stderr, "cachesim: levels=%s: at most %d levels\n", spec, CS_MAX_LEVELS);
            return -1;
        }
        if (cs_geom_parse(tok, &sh.level[sh.levels], err, sizeof err)) {
            fprintf(stderr, "cachesim: %s\n", err);
            return -1;
        }
        sh.levels++;
    }
    if (sh.levels == 0) {
        fprintf(stderr, "cachesim: levels= needs at least one SIZE:ASSOC[:LINE]\n");
        return -1;
    }
    static const uint32_t lat[] = {0, 10, 38, 191, 191};
    for (int l = 1; l <= sh.levels; l++)
        sh.lat[l] = l == sh.levels ? 191 : lat[l];
    sh.inclusive = inclusive ? ~1u : 0; /* every level above L1 includes the ones below */
    if (sh.levels == 1) {
        const int shared[] = {0, 1};
        return add_model("custom", &sh, 2, shared, TWO_PLACES);
    }
    /* same core; private below the last level; nothing shared */
    static const char *const names[] = {"same-core", "shared-last-level", "separate"};
    const int shared[] = {0, sh.levels - 1, sh.levels};
    return add_model("custom", &sh, 3, shared, names);
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    int inclusive = 1;
    const char *levels = NULL;
    int want_nehalem = 0, want_sweep = 0;
    int bad = 0;
    quantum_init(&quantum, id);
    slice_init(&slices);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "out=", 4)) {
            out = fopen(a + 4, "w");
            if (!out) {
                fprintf(stderr, "cachesim: cannot write %s\n", a + 4);
                return -1;
            }
        } else if (!strcmp(a, "preset=nehalem")) {
            want_nehalem = 1;
        } else if (!strcmp(a, "preset=sweep")) {
            want_sweep = 1;
        } else if (!strncmp(a, "levels=", 7)) {
            levels = a + 7;
        } else if (!strcmp(a, "inclusive=on")) {
            inclusive = 1;
        } else if (!strcmp(a, "inclusive=off")) {
            inclusive = 0;
        } else if (quantum_arg(&quantum, a, &bad)) {
            if (bad) {
                fprintf(stderr, "cachesim: `%s`: not a number of instructions\n", a);
                return -1;
            }
        } else {
            fprintf(stderr, "cachesim: unknown argument `%s` (out=, preset=nehalem|sweep, levels=, inclusive=)\n", a);
            return -1;
        }
    }
    if (!want_nehalem && !want_sweep && !levels)
        want_nehalem = 1;
    if ((want_nehalem && add_nehalem()) || (want_sweep && add_sweep()) || (levels && add_custom(levels, inclusive)))
        return -1;
    region.nvcpus = info->system_emulation ? info->system.max_vcpus : 1;
    cs_repeat_init(&repeat);
    qemu_plugin_register_vcpu_tb_trans_cb(id, vcpu_tb_trans);
    qemu_plugin_register_atexit_cb(id, plugin_exit, NULL);
    return 0;
}
