//! The catalog of `cargo xtask mutants`: named semantic mutations, each a bug a test suite
//! should catch. Keep each change small and each snippet unique in its file (the host test
//! `the_catalog_matches_the_tree` fails when one no longer matches exactly once). Grouped by
//! crate, so that consecutive mutants rebuild the same crate. Checks run in order until one
//! fails: put the cheapest first. docs/testing.md lists the catalog with the last run.

use super::{Check, Mutant};

/// `cargo test -p percore` (host: unit tests, stress tests on threads, property tests).
const PERCORE_HOST: Check = Check::Cargo(&["-p", "percore"]);

pub const CATALOG: &[Mutant] = &[
    // ---- kernel: capability and ownership checks in shares --------------------------------
    Mutant {
        name: "share_private_any_core",
        file: "kernel/src/kobj/share.rs",
        original: "Some(o) if o != crate::percpu::acting_index() => Err(Error::NotPermitted),",
        replacement: "Some(o) if false && o != crate::percpu::acting_index() => Err(Error::NotPermitted),",
        checks: &[Check::Suite("isolation smp=2")],
        plants: "a core's private share answers every other core (reads, adds and deletes through it)",
    },
    Mutant {
        name: "share_remove_while_lent",
        file: "kernel/src/kobj/share.rs",
        original: "if self.lending.load(Ordering::Relaxed) != 0 {",
        replacement: "if false && self.lending.load(Ordering::Relaxed) != 0 {",
        checks: &[Check::Suite("kernel smp=1")],
        plants: "a private share removes (and may free) an entry that a system call has borrowed without a reference",
    },
    Mutant {
        name: "gate_cycle_unchecked",
        file: "kernel/src/syscall.rs",
        original: "Kind::Gate(g) => g.members.iter().any(|m| reaches(m, target, depth)),",
        replacement: "Kind::Gate(_) => false,",
        checks: &[Check::Suite("ppctest")],
        plants: "a gate can be put into a share its own handler holds: a reference cycle that is never freed",
    },
    // ---- kernel: the system-call path's cost (the instruction-count gate) ---------------------
    Mutant {
        name: "syscall_common_path_off",
        file: "kernel/src/arch/x86_64/syscall.rs",
        original: "    cmpq ${role_xc}, %gs:{role}\n    jne 20f",
        replacement: "    cmpq ${role_xc}, %gs:{role}\n    jmp 20f",
        checks: &[Check::Suite("insngate")],
        plants: "every system call takes syscall_dispatch instead of the entry's common path: correct, but 24 instructions more per call",
    },
    // ---- kernel: address ranges, faults and TLB shootdowns ----------------------------------
    Mutant {
        name: "ar_page_zero_mappable",
        file: "kernel/src/kobj/ar.rs",
        original: "if self.kind == ArKind::Root && voff < abi::USER_BASE {",
        replacement: "if false && self.kind == ArKind::Root && voff < abi::USER_BASE {",
        checks: &[Check::Suite("utest smp=1")],
        plants: "a root range maps page 0, so a null pointer in user mode is valid memory",
    },
    Mutant {
        name: "ar_map_past_segment_end",
        file: "kernel/src/kobj/ar.rs",
        original: "if !seg.covers(seg_end) {",
        replacement: "if false && !seg.covers(seg_end) {",
        checks: &[Check::Suite("utest smp=1")],
        plants: "a mapping may run past its segment's end (faults there find no page)",
    },
    Mutant {
        name: "unmap_without_flush",
        file: "kernel/src/kobj/ar.rs",
        original: "        if flush {\n            flush_cores(&ar.shootdown_targets());",
        replacement: "        if false && flush {\n            flush_cores(&ar.shootdown_targets());",
        checks: &[Check::Suite("utest smp=2")],
        plants: "ar_unmap clears page-table entries but flushes no TLB: stale translations keep the memory reachable",
    },
    Mutant {
        name: "shootdown_ignores_parents",
        file: "kernel/src/kobj/ar.rs",
        original: "for p in parents.iter().flatten() {",
        replacement: "for p in parents.iter().flatten().take(0) {",
        checks: &[Check::Suite("utest smp=2")],
        plants: "a shootdown in a linked range reaches only cores running it as their root, not cores whose root links it",
    },
    // ---- kernel: copy-on-write ---------------------------------------------------------------
    Mutant {
        name: "cow_shared_page_writable",
        file: "kernel/src/kobj/segment.rs",
        original: "Ok((f.pa, KRef::strong_count(f) == 1, copied))",
        replacement: "Ok((f.pa, true, copied))",
        checks: &[Check::Suite("utest smp=1")],
        plants: "a page shared copy-on-write is mapped writable on a read fault: a write reaches the other copy",
    },
    Mutant {
        name: "cow_source_not_write_protected",
        file: "kernel/src/syscall.rs",
        original: "ar::write_protect(&ar_obj, voff, len);",
        replacement: "let _ = (&ar_obj, voff, len);",
        checks: &[Check::Suite("utest smp=1")],
        plants: "segment_copy (copy-on-write) leaves the source's writable mappings writable: its writes leak into the copy",
    },
    // ---- kernel: frame and slab allocators ---------------------------------------------------
    Mutant {
        name: "buddy_counts_one_page_per_block",
        file: "kernel/src/mm/frame.rs",
        original: "self.free_pages -= 1 << order;",
        replacement: "self.free_pages -= 1;",
        checks: &[Check::Suite("kernel smp=1")],
        plants: "the buddy allocator takes one page off its free count for a block of any order",
    },
    Mutant {
        name: "frame_refill_takes_single_frames",
        file: "kernel/src/mm/frame.rs",
        original: "if let Some((pfn, order)) = b.alloc_carve(CARVE_ORDER, MIN_CARVE_ORDER) {",
        replacement: "if let Some((pfn, order)) = b.alloc_carve(CARVE_ORDER, MIN_CARVE_ORDER).filter(|_| false) {",
        checks: &[Check::Suite("kernel smp=1")],
        plants: "a core refills its frame cache with single frames off the node pool's shared lists, not by carving a 2 MiB block of its own",
    },
    Mutant {
        name: "slab_ignores_alignment",
        file: "kernel/src/mm/heap.rs",
        original: "let need = layout.size().max(layout.align()).max(1);",
        replacement: "let need = layout.size().max(1);",
        checks: &[Check::Suite("kernel smp=1")],
        plants: "the kernel heap picks a size class by size alone, so an over-aligned object comes back misaligned",
    },
    Mutant {
        name: "slab_remote_frees_never_drained",
        file: "kernel/src/mm/heap.rs",
        original: "if unsafe { cache_of(caches, slot, class) }.partial.is_null() {\n            drain_remote(class, caches);",
        replacement: "if false && unsafe { cache_of(caches, slot, class) }.partial.is_null() {\n            drain_remote(class, caches);",
        checks: &[Check::Suite("kernel smp=2")],
        plants: "objects freed by other cores are never taken back from the remote-free list (a leak that grows)",
    },
    // ---- kernel: the scheduler and the core scheduler ---------------------------------------
    Mutant {
        name: "tc_tick_never_switches",
        file: "kernel/src/sched.rs",
        original: "if !(tick || yielded) || area.role.load(Ordering::Acquire) != ROLE_TC {",
        replacement: "if !yielded || area.role.load(Ordering::Acquire) != ROLE_TC {",
        checks: &[Check::Suite("tctest smp=3 roles=tc:0-1")],
        plants: "a time-shared core switches contexts only when one yields, never on a timer tick",
    },
    Mutant {
        name: "tc_halt_halts_every_queued",
        file: "kernel/src/sched.rs",
        original: "if t.ctx.pcore.key() == pcore_key && t.halt.is_none() {",
        replacement: "if t.halt.is_none() {",
        checks: &[Check::Suite("tctest smp=3 roles=tc:0-1")],
        plants: "halting one queued context on a TC halts every context queued there",
    },
    Mutant {
        name: "coresched_grant_not_enforced",
        file: "kernel/src/coresched.rs",
        original: "if holder == 0 || Ok(holder) == owner() {",
        replacement: "if true || holder == 0 || Ok(holder) == owner() {",
        checks: &[Check::Suite("schedtest smp=4 sched=core0")],
        plants: "with sched=core0, any program may run contexts on a core granted to another",
    },
    // ---- kernel: roles -----------------------------------------------------------------------
    Mutant {
        name: "ac_forwards_to_former_kc",
        file: "kernel/src/roles.rs",
        original: "if server == NO_CORE || !is_kc(server) {",
        replacement: "if server == NO_CORE {",
        checks: &[Check::Suite("roletest smp=4 roles=kc:1,ac:2,kc:3")],
        plants: "an application core keeps forwarding to a core that has stopped being a kernel core",
    },
    Mutant {
        name: "roles_spec_offline_core",
        file: "kernel/src/roles.rs",
        original: "if a > b || b >= online {",
        replacement: "if a > b {",
        checks: &[Check::Suite("bad-boots")],
        plants: "roles= naming a core that is not online is not refused as a whole before any core changes",
    },
    // ---- kernel: protected procedure calls (gates) -------------------------------------------
    Mutant {
        name: "gate_any_core",
        file: "kernel/src/kobj/gate.rs",
        original: "if g.core as usize != me {",
        replacement: "if false && g.core as usize != me {",
        checks: &[Check::Suite("ppctest")],
        plants: "a gate registered for one core can be called from another (its call state is per core)",
    },
    Mutant {
        name: "gate_entered_while_busy",
        file: "kernel/src/kobj/gate.rs",
        original: "&& !g.busy.swap(true, Ordering::Acquire)",
        replacement: "&& !(g.busy.swap(true, Ordering::Acquire) && false)",
        checks: &[Check::Suite("ppctest")],
        plants: "a gate already in a call can be entered again, overwriting the first caller's saved state",
    },
    Mutant {
        name: "gate_depth_off_by_one",
        file: "kernel/src/kobj/gate.rs",
        original: "c.ppc_depth < PPC_MAX_DEPTH as u32 &&",
        replacement: "c.ppc_depth <= PPC_MAX_DEPTH as u32 &&",
        checks: &[Check::Suite("ppctest")],
        plants: "nested calls may go one deeper than PPC_MAX_DEPTH",
    },
    // ---- kernel: reclamation -----------------------------------------------------------------
    Mutant {
        name: "reclaim_all_without_grace_period",
        file: "kernel/src/kobj/share.rs",
        original: "    let Some(d) = reclaim() else { return };\n    d.synchronize();",
        replacement: "    let Some(d) = reclaim() else { return };",
        checks: &[Check::Suite("kernel smp=2")],
        plants: "reclaim_all frees only what is already past its grace period, so memory retired moments ago is counted as leaked",
    },
    // ---- library OS: cfork, descriptors, heap ------------------------------------------------
    Mutant {
        name: "cfork_copies_shared_segments",
        file: "user/libos/src/cfork.rs",
        original: "let seg = if opts.segments.contains(&m.target) {",
        replacement: "let seg = if false && opts.segments.contains(&m.target) {",
        checks: &[Check::Suite("ltest smp=2")],
        plants: "cfork copies (copy-on-write) the segments the caller asked to share with the child",
    },
    Mutant {
        name: "fd_slot_reused_same_generation",
        file: "user/libos/src/fd.rs",
        original: "t.slots[slot].generation = t.slots[slot].generation.wrapping_add(1) & GEN_MASK;",
        replacement: "t.slots[slot].generation &= GEN_MASK;",
        checks: &[Check::Suite("ltest smp=2")],
        plants: "a closed private descriptor's slot is reused under the same generation: the stale descriptor reaches the new file",
    },
    Mutant {
        name: "heap_remote_free_into_local_list",
        file: "user/libos/src/heap.rs",
        original: "if me() == Some(owner) {",
        replacement: "if me().is_some() {",
        checks: &[Check::Suite("ltest smp=2")],
        plants: "a block freed on another core goes on the freeing core's list instead of its owner's",
    },
    // ---- percore: locks, counters, rings, reclamation ----------------------------------------
    Mutant {
        name: "ticket_lock_no_wait",
        file: "percore/src/spin.rs",
        original: "while self.serving.load(Ordering::Acquire) != ticket {",
        replacement: "while false && self.serving.load(Ordering::Acquire) != ticket {",
        checks: &[PERCORE_HOST],
        plants: "a ticket lock taken while held does not wait for its turn: no mutual exclusion",
    },
    Mutant {
        name: "sloppy_acquire_without_batch",
        file: "percore/src/counter.rs",
        original: "self.central.fetch_add(v + self.batch, Ordering::AcqRel);",
        replacement: "self.central.fetch_add(v, Ordering::AcqRel);",
        checks: &[PERCORE_HOST],
        plants: "a sloppy counter's core takes a batch of spares without counting them in the central count",
    },
    Mutant {
        name: "spsc_overwrites_when_full",
        file: "percore/src/spsc.rs",
        original: "if self.sent - self.consumed_seen < n {",
        replacement: "if self.sent - self.consumed_seen <= n {",
        checks: &[PERCORE_HOST],
        plants: "the ring's producer thinks a full ring has room and overwrites the oldest unread message",
    },
    Mutant {
        name: "spsc_tag_relaxed",
        file: "percore/src/spsc.rs",
        original: "slot.tag.store(self.sent + 1, Ordering::Release);",
        replacement: "slot.tag.store(self.sent + 1, Ordering::Relaxed);",
        checks: &[Check::Suite("loom")],
        plants: "the ring publishes a slot's tag without release ordering: the consumer may read the message before it is written",
    },
    Mutant {
        name: "reclaim_visit_ignores_readers",
        file: "percore/src/reclaim.rs",
        original: "if c.active[v.parity].load(Ordering::SeqCst) != 0 {",
        replacement: "if false && c.active[v.parity].load(Ordering::SeqCst) != 0 {",
        checks: &[PERCORE_HOST],
        plants: "the reclamation token passes a core whose operations are still running: memory is freed under a reader",
    },
    Mutant {
        name: "reclaim_grace_one_visit_short",
        file: "percore/src/reclaim.rs",
        original: "now.wrapping_sub(r.stamp) > n",
        replacement: "now.wrapping_sub(r.stamp) >= n",
        checks: &[Check::Suite("loom")],
        plants: "a retired object is freed after n-1 visits, counting the visit that was under way when it was retired",
    },
];
