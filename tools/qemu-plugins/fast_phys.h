/*
 * Guest-physical address of a RAM access, fast.
 *
 * In QEMU 7.2 qemu_plugin_hwaddr_phys_addr() finds the RAM block of the access's host pointer
 * on every call; measured on a zip run it makes a data callback ~5x more expensive than the
 * callback itself. The host-pointer -> guest-physical mapping of RAM never changes while the VM
 * runs, so we cache it per 4 KB page. The host pointer is read from the (opaque) hwaddr record
 * using 7.2's layout (include/qemu/plugin-memory.h: two bools, then a union whose RAM member
 * is the host address). That reliance is checked, not trusted: a new page's cached value must
 * agree with the official call in its page offset, and one hit in 1024 is re-derived through
 * the official call; any disagreement turns the cache off for the rest of the run (reported
 * as fast_phys=off), so results never depend on the layout guess.
 */
#ifndef MANYCORE_FAST_PHYS_H
#define MANYCORE_FAST_PHYS_H

#include "qemu_plugin_api.h"

struct hwaddr_layout_7_2 {
    bool is_io;
    bool is_store;
    union {
        struct {
            void *section;
            uint64_t offset;
        } io;
        struct {
            void *hostaddr;
        } ram;
    } v;
};

#define PA_CACHE_SLOTS (1u << 14)
static struct {
    uint64_t host_page_plus1;
    uint64_t phys_page;
} pa_cache[PA_CACHE_SLOTS];
static int pa_cache_off;
static uint64_t pa_cache_hits;

/*
 * Instruction fetches have only a host pointer in the 7.2 API. Guest RAM from 1 MB up to the
 * PCI hole is one RAM block ("pc.ram") mapped contiguously in the host, so host - guest
 * physical is one constant there; learned from data accesses (official call), it turns a fetch's
 * host pointer into its guest-physical address. A second, different constant in that range means
 * the assumption failed: translation stops (ram_offset_conflicts in the report).
 */
#define RAM_LOW (1ull << 20)
#define RAM_HIGH 0xe0000000ull
static uint64_t ram_offset;
static int ram_offset_known;
static uint64_t ram_offset_conflicts;

static inline void learn_ram_offset(uint64_t host, uint64_t pa)
{
    if (pa < RAM_LOW || pa >= RAM_HIGH)
        return;
    uint64_t off = host - pa;
    if (!ram_offset_known) {
        ram_offset = off;
        ram_offset_known = 1;
    } else if (off != ram_offset) {
        ram_offset_conflicts++;
    }
}

/* Guest-physical address of code at host pointer `host`, or 0 if unknown. */
static inline uint64_t fetch_phys(uint64_t host)
{
    if (!ram_offset_known || ram_offset_conflicts)
        return 0;
    uint64_t pa = host - ram_offset;
    return (pa >= RAM_LOW && pa < RAM_HIGH) ? pa : 0;
}

/* hw must be a RAM access (qemu_plugin_hwaddr_is_io() false). */
static inline uint64_t fast_phys(const struct qemu_plugin_hwaddr *hw)
{
    if (pa_cache_off)
        return qemu_plugin_hwaddr_phys_addr(hw);
    uint64_t host = (uint64_t)(uintptr_t)((const struct hwaddr_layout_7_2 *)(const void *)hw)->v.ram.hostaddr;
    uint64_t hp = host >> 12;
    unsigned slot = (unsigned)(hp & (PA_CACHE_SLOTS - 1));
    if (pa_cache[slot].host_page_plus1 == hp + 1) {
        uint64_t pa = (pa_cache[slot].phys_page << 12) | (host & 0xfff);
        if ((++pa_cache_hits & 1023) == 0) {
            uint64_t official = qemu_plugin_hwaddr_phys_addr(hw);
            if (official != pa) {
                pa_cache_off = 1;
                return official;
            }
        }
        return pa;
    }
    uint64_t pa = qemu_plugin_hwaddr_phys_addr(hw);
    if (host == 0 || (pa & 0xfff) != (host & 0xfff)) {
        pa_cache_off = 1; /* the layout guess does not hold: never use the cache */
        return pa;
    }
    pa_cache[slot].host_page_plus1 = hp + 1;
    pa_cache[slot].phys_page = pa >> 12;
    learn_ram_offset(host, pa);
    return pa;
}

#endif
