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
 *   preset=nehalem-mc 2 chips x 4 cores, per core L1I/L1D/L2 as nehalem, an 8M inclusive L3 per chip
 *   preset=amd16      4 chips x 4 cores (Corey's machine): L1 64K 2-way, L2 512K 16-way, a 2M 32-way
 *                     victim L3 per chip. Multi-core: vCPU i drives core i (cachesim_mc.h); per-vCPU
 *                     misses, cycles and memory CPI, kernel and user ("mcpu" records).
 *   map=C0:C1:...     vCPU i drives core Ci instead (e.g. map=0:4:8:12: one vCPU per amd16 chip)
 *   scope=region|all  multi-core models: simulate only inside the region (default), or every
 *                     access after the first marker, counting only inside the region
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
#include "cachesim_mc.h"
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
/*
 * Multi-core models (preset=nehalem-mc, preset=amd16; cachesim_mc.h): each vCPU drives the
 * core map[vcpu] (default vCPU i -> core i; map=0,4,8,12 places four vCPUs on four chips of
 * amd16). Statistics count the accesses a vCPU makes inside the region; scope=all also
 * simulates (without counting) every access after the first marker, so that work outside the
 * region (a request loop's polling, other requests) leaves its lines in the caches as it
 * would on hardware. Instructions and region entries are kept per vCPU for the per-core CPI.
 */
#define MAX_MC 4
static mc_model mcs[MAX_MC];
static char mc_names[MAX_MC][32];
static int nmc;
static int core_map[REGION_MAX_VCPUS];
static int scope_all;
static uint64_t vcpu_insns[REGION_MAX_VCPUS][CS_PARTIES];
static uint64_t vcpu_regions[REGION_MAX_VCPUS];
static uint64_t mc_unmapped; /* accesses of vCPUs without a core in some model */

/* The exact-mode vCPU switch (quantum.h) and the interleaving it produced (interleave.h). */
static quantum_t quantum;
static slice_stats slices;

/* Fetch callbacks cover a run of consecutive instructions that start in one line (of the
 * smallest line size among the models): userdata packs host address | count << 48 | kernel
 * << 63. Repeated fetches of the line just fetched always hit and do not change LRU order. */
#define RUN_ADDR_MASK ((1ull << 47) - 1)

/* Feed the multi-core models: count only inside the region. */
static void mc_feed(unsigned int vcpu, int on, int party, uint64_t addr, int fetch, int write)
{
    int core = vcpu < REGION_MAX_VCPUS ? core_map[vcpu] : -1;
    for (int i = 0; i < nmc; i++) {
        if (core < 0 || core >= mcs[i].sh.ncores) {
            if (on)
                mc_unmapped++;
            continue;
        }
        mc_access(&mcs[i], core, party, addr, fetch, write, on);
    }
}

/* Is this vCPU's access simulated at all? (on: inside the region) */
static inline int mc_wants(int on) { return nmc && (on || (scope_all && region.starts > 0)); }

static void vcpu_fetch(unsigned int vcpu, void *udata)
{
    int on = region_on(&region, vcpu);
    if (!on && !mc_wants(0))
        return;
    uint64_t u = (uint64_t)(uintptr_t)udata;
    int party = (u >> 63) ? CS_OS : CS_APP;
    uint64_t addr = u & RUN_ADDR_MASK;
    if (on) {
        insns[party] += (u >> 48) & 0x7fff;
        if (vcpu < REGION_MAX_VCPUS)
            vcpu_insns[vcpu][party] += (u >> 48) & 0x7fff;
        fetch_runs[party]++;
    }
    if (addr == 0)
        return; /* code not in RAM (no host pointer): counted, not simulated */
    uint64_t pa = fetch_phys(addr);
    if (pa) {
        addr = pa;
        if (on)
            fetch_runs_phys++;
    }
    if (mc_wants(on))
        mc_feed(vcpu, on, party, addr, 1, 0);
    if (!on || !nmodels || cs_repeat_access(&repeat, addr, min_line_shift, party, 1, 0))
        return;
    for (int i = 0; i < nmodels; i++)
        cs_model_access(&models[i], party, addr, 1, 0);
}

static void vcpu_mem(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *udata)
{
    int on = region_on(&region, vcpu);
    if (!on && !mc_wants(0))
        return;
    struct qemu_plugin_hwaddr *hw = qemu_plugin_get_hwaddr(info, vaddr);
    if (!hw || qemu_plugin_hwaddr_is_io(hw)) {
        if (on)
            data_accesses_io++;
        return;
    }
    uint64_t pa = fast_phys(hw);
    int user = meminfo_is_user(info);
    int party = user ? CS_APP : CS_OS;
    int write = qemu_plugin_mem_is_store(info);
    if (mc_wants(on))
        mc_feed(vcpu, on, party, pa, 0, write);
    if (!on)
        return;
    int insn_kernel = (int)(uintptr_t)udata;
    mmu_checked++;
    if (user && insn_kernel)
        mmu_user_insn_kernel++;
    if (!user && !insn_kernel)
        mmu_kernel_insn_user++;
    if (!nmodels || cs_repeat_access(&repeat, pa, min_line_shift, party, 0, write))
        return;
    for (int i = 0; i < nmodels; i++)
        cs_model_access(&models[i], party, pa, 0, write);
}

static void vcpu_marker(unsigned int vcpu, void *udata)
{
    int v = (int)(uintptr_t)udata;
    region_mark(&region, vcpu, v);
    if (v == MARKER_START_CPU && vcpu < REGION_MAX_VCPUS)
        vcpu_regions[vcpu]++;
    else if (v == MARKER_START_ALL)
        for (int i = 0; i < region.nvcpus && i < REGION_MAX_VCPUS; i++)
            vcpu_regions[i]++;
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

static void geom_str(char *buf, size_t n, const cs_geom *g)
{
    snprintf(buf, n, "%llu:%u:%u", (unsigned long long)g->size, g->assoc, g->line);
}

/* `mc` records (one per multi-core model) and `mcpu` records (per vCPU and party). */
static void mc_report(FILE *f)
{
    int nv = region.nvcpus > REGION_MAX_VCPUS ? REGION_MAX_VCPUS : region.nvcpus;
    for (int i = 0; i < nmc; i++) {
        mc_model *m = &mcs[i];
        const mc_shape *sh = &m->sh;
        char g1i[48], g1d[48], g2[48], g3[48];
        geom_str(g1i, sizeof g1i, &sh->l1i);
        geom_str(g1d, sizeof g1d, &sh->l1d);
        geom_str(g2, sizeof g2, &sh->l2);
        geom_str(g3, sizeof g3, &sh->l3);
        fprintf(f, "mc model=%s cores=%d chips=%d cores_per_chip=%d l3=%s l1i=%s l1d=%s l2=%s l3_size=%s lat_l2=%u lat_l3=%u "
                   "lat_sibling=%u lat_remote=%u lat_mem=%u scope=%s repeats=%llu back_inval=%llu unmapped=%llu\n",
                mc_names[i], sh->ncores, m->nchips, sh->cores_per_chip, sh->victim_l3 ? "victim" : "inclusive", g1i, g1d, g2, g3,
                sh->lat[MC_L2], sh->lat[MC_L3], sh->lat[MC_SIBLING], sh->lat[MC_REMOTE], sh->lat[MC_MEM],
                scope_all ? "all" : "region", (unsigned long long)m->repeats, (unsigned long long)m->back_invalidations,
                (unsigned long long)mc_unmapped);
        for (int v = 0; v < nv; v++) {
            int core = core_map[v];
            if (core < 0 || core >= sh->ncores)
                continue;
            for (int party = 0; party < CS_PARTIES; party++) {
                const mc_stats *st = &m->st[core][party];
                uint64_t ins = vcpu_insns[v][party];
                fprintf(f, "mcpu model=%s vcpu=%d core=%d chip=%d party=%s regions=%llu insns=%llu fetches=%llu data=%llu "
                           "writes=%llu l1i_miss=%llu l1d_miss=%llu l2_miss=%llu l3_miss=%llu from_l2=%llu from_l3=%llu "
                           "from_sibling=%llu from_remote=%llu from_mem=%llu cycles=%llu mem_cpi=%.6f inval_sent=%llu\n",
                        mc_names[i], v, core, core / sh->cores_per_chip, party_name(party),
                        (unsigned long long)vcpu_regions[v], (unsigned long long)ins, (unsigned long long)st->fetches,
                        (unsigned long long)st->data, (unsigned long long)st->writes, (unsigned long long)st->l1i_miss,
                        (unsigned long long)st->l1d_miss, (unsigned long long)st->l2_miss, (unsigned long long)st->l3_miss,
                        (unsigned long long)st->served[MC_L2], (unsigned long long)st->served[MC_L3],
                        (unsigned long long)st->served[MC_SIBLING], (unsigned long long)st->served[MC_REMOTE],
                        (unsigned long long)st->served[MC_MEM], (unsigned long long)st->cycles,
                        ins ? (double)st->cycles / (double)ins : 0.0, (unsigned long long)st->inval_sent);
            }
        }
    }
}

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
    mc_report(f);
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
    cs_shape sh = cs_shape_nehalem_like((cs_geom){32 << 10, 4, 64}, (cs_geom){32 << 10, 8, 64}, (cs_geom){256 << 10, 8, 64}, (cs_geom){8 << 20, 16, 64});
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

static int add_mc(const char *name, const mc_shape *sh)
{
    char err[256];
    if (nmc >= MAX_MC) {
        fprintf(stderr, "cachesim: at most %d multi-core presets\n", MAX_MC);
        return -1;
    }
    if (mc_init(&mcs[nmc], sh, err, sizeof err)) {
        fprintf(stderr, "cachesim: preset %s: %s\n", name, err);
        return -1;
    }
    snprintf(mc_names[nmc], sizeof mc_names[nmc], "%s", name);
    nmc++;
    return 0;
}

/* map=C0:C1:...: vCPU i drives core Ci (a colon list: QEMU splits plugin arguments at commas). */
static int parse_map(const char *spec)
{
    int v = 0;
    const char *p = spec;
    while (*p) {
        char *end = NULL;
        long c = strtol(p, &end, 10);
        if (end == p || c < 0 || c >= MC_MAX_CORES || (*end && *end != ':')) {
            fprintf(stderr, "cachesim: map=%s: want core numbers 0..%d separated by ':'\n", spec, MC_MAX_CORES - 1);
            return -1;
        }
        if (v >= REGION_MAX_VCPUS) {
            fprintf(stderr, "cachesim: map=%s: more than %d vCPUs\n", spec, REGION_MAX_VCPUS);
            return -1;
        }
        for (int u = 0; u < v; u++)
            if (core_map[u] == c) {
                fprintf(stderr, "cachesim: map=%s: core %ld is given to two vCPUs\n", spec, c);
                return -1;
            }
        core_map[v++] = (int)c;
        p = *end ? end + 1 : end;
    }
    if (v == 0) {
        fprintf(stderr, "cachesim: map= needs at least one core\n");
        return -1;
    }
    for (int u = v; u < REGION_MAX_VCPUS; u++)
        core_map[u] = -1; /* vCPUs beyond the list drive no core */
    return 0;
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    int inclusive = 1;
    const char *levels = NULL;
    int want_nehalem = 0, want_sweep = 0;
    mc_shape mcshape;
    for (int v = 0; v < REGION_MAX_VCPUS; v++)
        core_map[v] = v;
    quantum_init(&quantum, id);
    slice_init(&slices);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int common = plugin_common_arg("cachesim", a, &out, &quantum);
        if (common < 0)
            return -1;
        if (common)
            continue;
        if (!strcmp(a, "preset=nehalem")) {
            want_nehalem = 1;
        } else if (!strcmp(a, "preset=sweep")) {
            want_sweep = 1;
        } else if (!strncmp(a, "preset=", 7) && !mc_preset(a + 7, &mcshape)) {
            if (add_mc(a + 7, &mcshape))
                return -1;
        } else if (!strncmp(a, "map=", 4)) {
            if (parse_map(a + 4))
                return -1;
        } else if (!strcmp(a, "scope=all")) {
            scope_all = 1;
        } else if (!strcmp(a, "scope=region")) {
            scope_all = 0;
        } else if (!strncmp(a, "levels=", 7)) {
            levels = a + 7;
        } else if (!strcmp(a, "inclusive=on")) {
            inclusive = 1;
        } else if (!strcmp(a, "inclusive=off")) {
            inclusive = 0;
        } else {
            fprintf(stderr, "cachesim: unknown argument `%s` (out=, preset=nehalem|sweep|nehalem-mc|amd16, levels=, inclusive=, "
                            "map=, scope=region|all, quantum=, quantum_outside=)\n", a);
            return -1;
        }
    }
    if (!want_nehalem && !want_sweep && !levels && !nmc)
        want_nehalem = 1;
    for (int i = 0; i < nmc; i++) {
        unsigned shift = mcs[i].line_shift;
        if (shift < min_line_shift)
            min_line_shift = shift;
    }
    if ((want_nehalem && add_nehalem()) || (want_sweep && add_sweep()) || (levels && add_custom(levels, inclusive)))
        return -1;
    region.nvcpus = info->system_emulation ? info->system.max_vcpus : 1;
    cs_repeat_init(&repeat);
    qemu_plugin_register_vcpu_tb_trans_cb(id, vcpu_tb_trans);
    qemu_plugin_register_atexit_cb(id, plugin_exit, NULL);
    return 0;
}
