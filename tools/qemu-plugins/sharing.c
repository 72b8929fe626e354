/*
 * sharing: an mtrace-style audit of which 64-byte physical lines cross between vCPUs inside
 * the marked region.
 *
 * For every line touched: the set of vCPUs that read it, the set that wrote it, read and write
 * counts, whether it was touched in kernel or user mode, the first virtual address seen (the
 * host names the kernel symbol from it), and "transfers": accesses that, under an MSI-like
 * protocol with one private cache per vCPU, would have to fetch the line from another vCPU's
 * cache (a read by a vCPU without a copy while others hold it; a write while others hold it).
 * Transfers per operation are the deterministic stand-in for Corey's L3 misses per operation.
 *
 * Run with -accel tcg,thread=single (the table is not locked) and -icount so the run repeats.
 * Arguments: out=PATH (default: stderr), kernel_only=on (only kernel-mode accesses),
 * quantum=N,quantum_outside=M (switch vCPUs every N instructions inside the region, M outside:
 * quantum.h, the exact mode of docs/plugins.md). The report's `slices` record says how finely
 * the vCPUs actually interleaved inside the region (interleave.h).
 */
#include "qemu_plugin_api.h"
#include "marker.h"
#include "fast_phys.h"
#include "interleave.h"
#include "quantum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = MANYCORE_QEMU_PLUGIN_VERSION;

#define LINE_SHIFT 6
#define MAX_TRACKED_VCPUS 64

typedef struct {
    uint64_t line; /* physical line number + 1; 0 = empty slot */
    uint64_t vaddr;
    uint64_t pc; /* instruction that first wrote it (or first touched it, if never written) */
    uint64_t readers, writers, holders; /* vCPU bitmasks; holders = current valid copies */
    uint64_t reads, writes, transfers;
    uint8_t modes; /* 1 = kernel, 2 = user */
} line_t;

static region_t region;
static line_t *table;
static uint64_t cap, used;
static FILE *out;
static int kernel_only;
static uint64_t ignored_vcpu, io_accesses;
static slice_stats slices;
static quantum_t quantum;
/* Each vCPU's last line: consecutive accesses to one line skip the hash lookup. */
static struct {
    uint64_t line;
    line_t *entry;
} last[MAX_TRACKED_VCPUS];

static line_t *lookup(uint64_t line)
{
    uint64_t key = line + 1;
    uint64_t h = (key * 0x9e3779b97f4a7c15ull) >> 20;
    for (uint64_t i = h & (cap - 1);; i = (i + 1) & (cap - 1)) {
        if (table[i].line == key)
            return &table[i];
        if (table[i].line == 0) {
            table[i].line = key;
            used++;
            return &table[i];
        }
    }
}

static void grow(void)
{
    line_t *old = table;
    uint64_t oldcap = cap;
    cap *= 2;
    table = calloc(cap, sizeof(line_t));
    if (!table) {
        fprintf(stderr, "sharing: out of memory at %llu lines\n", (unsigned long long)used);
        abort();
    }
    used = 0;
    for (uint64_t i = 0; i < oldcap; i++) {
        if (old[i].line) {
            line_t *n = lookup(old[i].line - 1);
            *n = old[i];
        }
    }
    free(old);
    for (int v = 0; v < MAX_TRACKED_VCPUS; v++)
        last[v].line = ~0ull; /* entries moved */
}

static void vcpu_mem(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *udata)
{
    uint64_t pc = (uint64_t)(uintptr_t)udata;
    if (!region_on(&region, vcpu))
        return;
    if (vcpu >= MAX_TRACKED_VCPUS) {
        ignored_vcpu++;
        return;
    }
    int user = meminfo_is_user(info);
    if (kernel_only && user)
        return;
    struct qemu_plugin_hwaddr *hw = qemu_plugin_get_hwaddr(info, vaddr);
    if (!hw || qemu_plugin_hwaddr_is_io(hw)) {
        io_accesses++;
        return;
    }
    uint64_t ln = fast_phys(hw) >> LINE_SHIFT;
    line_t *l;
    if (last[vcpu].line == ln) {
        l = last[vcpu].entry;
    } else {
        if (used * 2 >= cap)
            grow();
        l = lookup(ln);
        last[vcpu].line = ln;
        last[vcpu].entry = l;
    }
    uint64_t bit = 1ull << vcpu;
    if (l->modes == 0 || (!user && !(l->modes & 1)))
        l->vaddr = vaddr; /* prefer a kernel address: that is what gets a symbol */
    l->modes |= user ? 2 : 1;
    int store = qemu_plugin_mem_is_store(info);
    if (l->pc == 0 || (store && l->writes == 0))
        l->pc = pc;
    if (store) {
        l->writes++;
        l->writers |= bit;
        if (l->holders & ~bit)
            l->transfers++;
        l->holders = bit;
    } else {
        l->reads++;
        l->readers |= bit;
        if (!(l->holders & bit)) {
            if (l->holders)
                l->transfers++;
            l->holders |= bit;
        }
    }
}

static int popcount(uint64_t x) { return __builtin_popcountll(x); }

/*
 * Epoch marker (MARKER_EPOCH): write the lines written by one vCPU and touched by another
 * since the last epoch as `epoch seq=N lines=L shared=K` followed by K `line` records, then
 * forget every line, so the next test starts from an empty table (docs/commute.md). Only the
 * commutativity checker emits it; without it the report is the one of the whole run.
 */
static uint64_t epochs;

static void print_line(FILE *f, const line_t *l)
{
    fprintf(f, "line pa=0x%llx vaddr=0x%llx pc=0x%llx mode=%s readers=0x%llx writers=0x%llx reads=%llu writes=%llu transfers=%llu\n",
            (unsigned long long)((l->line - 1) << LINE_SHIFT), (unsigned long long)l->vaddr, (unsigned long long)l->pc,
            l->modes == 3 ? "ku" : (l->modes & 1 ? "k" : "u"), (unsigned long long)l->readers,
            (unsigned long long)l->writers, (unsigned long long)l->reads, (unsigned long long)l->writes,
            (unsigned long long)l->transfers);
}

static void epoch_dump(void)
{
    FILE *f = out ? out : stderr;
    uint64_t shared = 0;
    for (uint64_t i = 0; i < cap; i++)
        if (table[i].line && table[i].writers && popcount(table[i].readers | table[i].writers) >= 2)
            shared++;
    fprintf(f, "epoch seq=%llu lines=%llu shared=%llu\n", (unsigned long long)epochs++, (unsigned long long)used, (unsigned long long)shared);
    for (uint64_t i = 0; i < cap; i++)
        if (table[i].line && table[i].writers && popcount(table[i].readers | table[i].writers) >= 2)
            print_line(f, &table[i]);
    memset(table, 0, cap * sizeof(line_t));
    used = 0;
    for (int v = 0; v < MAX_TRACKED_VCPUS; v++)
        last[v].line = ~0ull;
}

static void vcpu_marker(unsigned int vcpu, void *udata)
{
    int v = (int)(uintptr_t)udata;
    if (v == MARKER_EPOCH)
        epoch_dump();
    else
        region_mark(&region, vcpu, v);
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
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        qemu_plugin_register_vcpu_mem_cb(insn, vcpu_mem, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_MEM_RW,
                                         (void *)(uintptr_t)qemu_plugin_insn_vaddr(insn));
        int mv = marker_value(qemu_plugin_insn_haddr(insn), qemu_plugin_insn_vaddr(insn));
        if (mv)
            qemu_plugin_register_vcpu_insn_exec_cb(insn, vcpu_marker, QEMU_PLUGIN_CB_NO_REGS,
                                                   (void *)(uintptr_t)mv);
    }
}

static int by_transfers(const void *a, const void *b)
{
    const line_t *x = *(const line_t *const *)a, *y = *(const line_t *const *)b;
    if (x->transfers != y->transfers)
        return x->transfers < y->transfers ? 1 : -1;
    return x->line < y->line ? -1 : x->line > y->line;
}

static void plugin_exit(qemu_plugin_id_t id, void *p)
{
    (void)id;
    (void)p;
    FILE *f = out ? out : stderr;
    uint64_t touched[3] = {0}, shared[3] = {0}, transfers[3] = {0};
    uint64_t nshared = 0;
    for (uint64_t i = 0; i < cap; i++) {
        line_t *l = &table[i];
        if (!l->line)
            continue;
        int m = l->modes & 1 ? 0 : 1; /* a line touched in kernel mode at all counts as kernel */
        touched[m]++;
        transfers[m] += l->transfers;
        if (l->writers && popcount(l->readers | l->writers) >= 2) {
            shared[m]++;
            nshared++;
        }
    }
    line_t **list = calloc(nshared ? nshared : 1, sizeof *list);
    uint64_t k = 0;
    for (uint64_t i = 0; i < cap && list; i++) {
        line_t *l = &table[i];
        if (l->line && l->writers && popcount(l->readers | l->writers) >= 2)
            list[k++] = l;
    }
    if (list)
        qsort(list, k, sizeof *list, by_transfers);
    fprintf(f, "sharing version=1 starts=%llu stops=%llu kernel_only=%d lines_kernel=%llu lines_user=%llu "
               "shared_kernel=%llu shared_user=%llu transfers_kernel=%llu transfers_user=%llu io_accesses=%llu "
               "ignored_vcpu=%llu fast_phys=%s\n",
            (unsigned long long)region.starts, (unsigned long long)region.stops, kernel_only,
            (unsigned long long)touched[0], (unsigned long long)touched[1], (unsigned long long)shared[0],
            (unsigned long long)shared[1], (unsigned long long)transfers[0], (unsigned long long)transfers[1],
            (unsigned long long)io_accesses, (unsigned long long)ignored_vcpu, pa_cache_off ? "off" : "on");
    slice_report(f, &slices, quantum.quantum, quantum.kicks);
    for (uint64_t i = 0; i < k; i++)
        print_line(f, list[i]);
    fprintf(f, "end\n");
    fflush(f);
    free(list);
    if (out)
        fclose(out);
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    quantum_init(&quantum, id);
    for (int i = 0; i < argc; i++) {
        int common = plugin_common_arg("sharing", argv[i], &out, &quantum);
        if (common < 0)
            return -1;
        if (common)
            continue;
        if (!strcmp(argv[i], "kernel_only=on")) {
            kernel_only = 1;
        } else {
            fprintf(stderr, "sharing: unknown argument `%s` (out=PATH, kernel_only=on, quantum=N, quantum_outside=N)\n", argv[i]);
            return -1;
        }
    }
    region.nvcpus = info->system_emulation ? info->system.max_vcpus : 1;
    cap = 1 << 16;
    slice_init(&slices);
    for (int v = 0; v < MAX_TRACKED_VCPUS; v++)
        last[v].line = ~0ull;
    table = calloc(cap, sizeof(line_t));
    if (!table)
        return -1;
    qemu_plugin_register_vcpu_tb_trans_cb(id, vcpu_tb_trans);
    qemu_plugin_register_atexit_cb(id, plugin_exit, NULL);
    return 0;
}
