//! The catalog of `cargo xtask mutants`: named semantic mutations, each a bug a test suite
//! should catch. Keep each change small and each snippet unique in its file (the host test
//! `the_catalog_matches_the_tree` fails when one no longer matches exactly once). Grouped by
//! crate, so that consecutive mutants rebuild the same crate. Checks run in order until one
//! fails: put the cheapest first. docs/testing.md lists the catalog with the last run.

use super::{Check, Mutant};

/// `cargo test -p percore` (host: unit tests, stress tests on threads, property tests).
const PERCORE_HOST: Check = Check::Cargo(&["-p", "percore"]);
/// The buffer cache's table on the host (crate `bcache`: its unit tests and `tests/table.rs`).
const BCACHE_HOST: Check = Check::Cargo(&["-p", "bcache"]);
/// The ext2 crate's own tests (memory images made by the test itself; no e2fsprogs).
const EXT2_CRATE: Check = Check::Cargo(&["-p", "ext2"]);
/// The ext2 crate on `mke2fs` images (`xtask/src/fs/tests.rs`, `groups_tests.rs`: the tests
/// need mke2fs and e2fsck, which `cargo xtask` installs). The ext2 allocation mutants have no
/// guest check: the `fs` suite's image has one block group, so only the host's four-group
/// tests (`fs::groups_tests`) can see them.
const EXT2_HOST: Check = Check::Cargo(&["-p", "xtask", "--", "fs::"]);

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
        file: "kernel/src/kobj/ar/mod.rs",
        original: "if self.kind == ArKind::Root && voff < abi::USER_BASE {",
        replacement: "if false && self.kind == ArKind::Root && voff < abi::USER_BASE {",
        checks: &[Check::Suite("utest smp=1")],
        plants: "a root range maps page 0, so a null pointer in user mode is valid memory",
    },
    Mutant {
        name: "segment_map_past_its_pages",
        file: "kernel/src/kobj/segment.rs",
        original: "                    return Ok(Register::Wait);\n                }\n                if gi < PAGE_LINES && w & G_EXISTS == 0 {",
        replacement: "                    return Ok(Register::Wait);\n                }\n                if false && gi < PAGE_LINES && w & G_EXISTS == 0 {",
        checks: &[Check::Suite("kernel smp=2")],
        // `ar_set_seg` also refuses early when the segment does not cover the mapping
        // (`Segment::covers`, before any reference is taken); dropping only that check is an
        // equivalent mutant (this one still refuses), so the catalog plants the bug here, in
        // the check that holds against a racing shrink.
        plants: "a mapping registers pages the segment does not have (past its end, or taken by a shrink racing the map)",
    },
    Mutant {
        name: "unmap_without_flush",
        file: "kernel/src/kobj/ar/map.rs",
        original: "        if flush {\n            flush_cores(&ar.shootdown_targets());",
        replacement: "        if false && flush {\n            flush_cores(&ar.shootdown_targets());",
        checks: &[Check::Suite("utest smp=2")],
        plants: "ar_unmap clears page-table entries but flushes no TLB: stale translations keep the memory reachable",
    },
    Mutant {
        name: "shootdown_ignores_parents",
        file: "kernel/src/kobj/ar/mod.rs",
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
        file: "user/libos/src/fd/private.rs",
        original: "t.slots[slot].generation = t.slots[slot].generation.wrapping_add(1) & GEN_MASK;",
        replacement: "t.slots[slot].generation &= GEN_MASK;",
        checks: &[Check::Suite("ltest smp=2")],
        plants: "a closed private descriptor's slot is reused under the same generation: the stale descriptor reaches the new file",
    },
    Mutant {
        name: "eventfd_semaphore_ignored",
        file: "user/libos/src/fd/eventfd.rs",
        original: "let (new, got) = if flags & EFD_SEMAPHORE != 0 { (cur - 1, 1) } else { (0, cur) };",
        replacement: "let (new, got) = (0, cur);",
        checks: &[Check::Suite("ltest smp=2")],
        plants: "an eventfd read in EFD_SEMAPHORE mode returns the whole count and resets it instead of 1",
    },
    Mutant {
        name: "readiness_change_wakes_nobody",
        file: "user/libos/src/fd/ready.rs",
        original: "if word.load(Ordering::Relaxed) != 0 {",
        replacement: "if false && word.load(Ordering::Relaxed) != 0 {",
        checks: &[Check::Suite("ltest smp=2")],
        plants: "a pipe or eventfd change never wakes the cores sleeping on its waiters word (they see it only when their nap times out)",
    },
    Mutant {
        name: "pipe_write_wakes_nobody",
        file: "user/libos/src/fd/pipe.rs",
        original: "let mut done = ring_put(va, data, whole);\n        if done != 0 {\n            notify(waiters_at(va));\n        }",
        replacement: "let mut done = ring_put(va, data, whole);",
        checks: &[Check::Suite("ltest smp=2")],
        plants: "a pipe write that finds room wakes no reader sleeping on the ring (the reader sees the bytes only when its nap times out)",
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

    // ---- the network: rings and steering ---------------------------------------------------
    Mutant {
        name: "net_steer_ignores_ip_options",
        file: "abi/src/net.rs",
        original: "let sport = u16::from_be_bytes([ip[ihl], ip[ihl + 1]]);",
        replacement: "let sport = u16::from_be_bytes([ip[20], ip[21]]);",
        checks: &[Check::Cargo(&["-p", "abi"])],
        plants: "steering reads the source port 20 bytes into the IP header whatever its length: a frame with IP options goes to the wrong channel",
    },
    Mutant {
        name: "net_rx_ring_trusts_consumer_count",
        file: "kernel/src/dev/net.rs",
        original: "        if fresh < cached || fresh > p {\n            self.stopped(c, \"consumer count impossible\");",
        replacement: "        if false && (fresh < cached || fresh > p) {\n            self.stopped(c, \"consumer count impossible\");",
        checks: &[Check::Suite("nettest smp=2")],
        plants: "the kernel believes any consumer count a program writes on a ring it fills, so it overwrites entries the program has not read",
    },
    Mutant {
        name: "net_rx_lands_on_unsteered_channel",
        file: "kernel/src/dev/net.rs",
        original: "let c = abi::net_steer(&head[..n], self.nchannels);",
        replacement: "let c = abi::net_steer(&head[..n], self.nchannels.min(1));",
        checks: &[Check::Suite("webd")],
        plants: "every received frame goes to channel 0's RX ring, not to the channel its flow is steered to",
    },
    // ---- the block driver and the virtio glue -----------------------------------------------
    Mutant {
        name: "blk_disk_bound_twice",
        file: "kernel/src/dev/blk.rs",
        original: "            if t.contains(&hwid) {\n                return Err(Error::Busy);",
        replacement: "            if false && t.contains(&hwid) {\n                return Err(Error::Busy);",
        checks: &[Check::Suite("fs")],
        plants: "a disk already bound to a device object can be bound again: two objects drive one virtqueue",
    },
    Mutant {
        name: "blk_ring_request_over_the_rings",
        file: "kernel/src/dev/blk.rs",
        original: "if offset < blk_data_offset(n) {",
        replacement: "if false && offset < blk_data_offset(n) {",
        checks: &[Check::Suite("fs")],
        plants: "a Dedicated-mode request may name the segment's header and ring pages as its buffer: a read DMAs over the rings",
    },
    Mutant {
        name: "blk_ring_trusts_completion_count",
        file: "kernel/src/dev/blk.rs",
        original: "        if fresh < seen || fresh > put {\n            self.stop_ring(r, \"completion count impossible\");",
        replacement: "        if false && (fresh < seen || fresh > put) {\n            self.stop_ring(r, \"completion count impossible\");",
        checks: &[Check::Suite("fs")],
        plants: "the kernel core believes an impossible completion count and overwrites completions the program has not read",
    },
    Mutant {
        name: "blk_every_page_to_the_first_sector",
        file: "kernel/src/dev/blk.rs",
        original: "((a.sector + a.done / BLK_SECTOR) as usize, buf)",
        replacement: "(a.sector as usize, buf)",
        checks: &[Check::Suite("fs")],
        plants: "a Dedicated-mode request over several pages reads or writes every page at its first sector",
    },
    Mutant {
        name: "virtio_dma_pages_never_freed",
        file: "kernel/src/dev/virtio.rs",
        original: "frame::free_frames(paddr as u64, order_of(pages));",
        replacement: "let _ = (paddr, pages);",
        checks: &[Check::Suite("fs")],
        plants: "the virtio glue never gives a device's DMA pages (its virtqueues) back when the device object goes",
    },
    // ---- ext2 allocation (blocks and inodes, every group) ----------------------------------
    Mutant {
        name: "ext2_blocks_only_from_the_goal_group",
        file: "crates/ext2/src/write.rs",
        original: "            let g = (goal + k) % ng;\n            if self.groups[g].free_blocks == 0 {",
        replacement: "            let g = (goal + k * 0) % ng;\n            if self.groups[g].free_blocks == 0 {",
        checks: &[EXT2_CRATE, EXT2_HOST],
        plants: "block allocation looks only in the goal group: NoSpace while other groups have free blocks",
    },
    Mutant {
        name: "ext2_inodes_only_from_the_goal_group",
        file: "crates/ext2/src/write.rs",
        original: "            let g = (goal + k) % ng;\n            if self.groups[g].free_inodes == 0 {",
        replacement: "            let g = (goal + k * 0) % ng;\n            if self.groups[g].free_inodes == 0 {",
        checks: &[EXT2_CRATE, EXT2_HOST],
        plants: "inode allocation looks only in the goal group: NoSpace while other groups have free inodes",
    },
    Mutant {
        name: "ext2_freed_block_cleared_in_group_0",
        file: "crates/ext2/src/write.rs",
        original: "let g = (rel / self.sb.blocks_per_group as u64) as usize;",
        replacement: "let g = (rel / self.sb.blocks_per_group as u64) as usize * 0;",
        checks: &[EXT2_CRATE, EXT2_HOST],
        plants: "freeing a block of group g > 0 clears a bit in group 0's bitmap (and counts it free there)",
    },
    Mutant {
        name: "ext2_freed_inode_cleared_in_group_0",
        file: "crates/ext2/src/write.rs",
        original: "let g = (idx / ipg) as usize;",
        replacement: "let g = (idx / ipg) as usize * 0;",
        checks: &[EXT2_CRATE, EXT2_HOST],
        plants: "freeing an inode of group g > 0 clears a bit in group 0's inode bitmap",
    },
    // ---- the buffer cache -------------------------------------------------------------------
    Mutant {
        name: "bcache_evicts_dirty_pages",
        file: "crates/bcache/src/lib.rs",
        original: "if (0..PARTS).any(|k| p_flags(p, k) & DIRTY != 0) {",
        replacement: "if false && (0..PARTS).any(|k| p_flags(p, k) & DIRTY != 0) {",
        checks: &[BCACHE_HOST],
        plants: "the clock hand evicts a dirty page without writing it back: the write is lost",
    },
    Mutant {
        name: "bcache_hit_ignores_the_tag",
        file: "crates/bcache/src/lib.rs",
        original: "if self.page(s).try_read(first, mid) != Some(block + 1) {",
        replacement: "if self.page(s).try_read(first, mid).is_none() {",
        checks: &[BCACHE_HOST],
        plants: "a lock-free page read accepts whatever block the slot holds now, not only the block it looked up",
    },
    // ---- the library OS's protected procedure calls -------------------------------------------
    Mutant {
        name: "ppc_gate_names_without_core",
        file: "user/libos/src/ppc.rs",
        original: "name.push_u64(core)?;",
        replacement: "name.push_u64(0)?;",
        checks: &[Check::Suite("ppctest smp=2 roles=tc:0-1")],
        plants: "serve_cores names every core's gate `SERVICE@0`: clients of other cores cannot find theirs",
    },
    Mutant {
        name: "ppc_result_past_i64_not_refused",
        file: "user/libos/src/ppc.rs",
        original: "Ok(v) if v > i64::MAX as u64 => abi::encode(Err(Error::OutOfRange)),",
        replacement: "Ok(v) if false && v > i64::MAX as u64 => abi::encode(Err(Error::OutOfRange)),",
        checks: &[Check::Suite("ppctest smp=2 roles=tc:0-1")],
        plants: "a handler's result above i64::MAX reaches the caller as an error code instead of OutOfRange",
    },
    // ---- Metis --------------------------------------------------------------------------------
    Mutant {
        name: "metis_split_starts_inside_a_word",
        file: "mapreduce/src/words.rs",
        original: "if s > 0 && s < len && is_letter(input[s - 1]) {",
        replacement: "if false && s > 0 && s < len && is_letter(input[s - 1]) {",
        checks: &[Check::Cargo(&["-p", "mapreduce"])],
        plants: "a worker's split may start inside a word: its tail is counted as a word of its own",
    },
    Mutant {
        name: "metis_reduce_keeps_duplicate_keys",
        file: "mapreduce/src/lib.rs",
        original: "while j < total && table::key_cmp(unsafe { (*refs[j].e).key() }, key).is_eq() {",
        replacement: "while false && j < total && table::key_cmp(unsafe { (*refs[j].e).key() }, key).is_eq() {",
        checks: &[Check::Cargo(&["-p", "mapreduce"]), Check::Suite("metis")],
        plants: "reduce does not combine one key's entries from different workers: the output repeats keys",
    },
    // ---- webd ---------------------------------------------------------------------------------
    Mutant {
        name: "webd_path_climbs_out",
        file: "webcore/src/http.rs",
        original: "\"..\" => return Err(Status::BadRequest),",
        replacement: "\"..\" => {}",
        checks: &[Check::Cargo(&["-p", "webcore"])],
        plants: "a request path's `..` segment is dropped instead of refused (a request may name a file outside the served tree)",
    },
    Mutant {
        name: "webd_filesum_lanes_overflow",
        file: "webcore/src/sum.rs",
        original: "const WORDS_PER_FOLD: usize = 128;",
        replacement: "const WORDS_PER_FOLD: usize = 512;",
        checks: &[Check::Cargo(&["-p", "webcore"])],
        plants: "filesum folds its 16-bit lanes too late: a lane overflows on bright data and the sum is wrong",
    },
    // ---- the commutativity models ---------------------------------------------------------------
    Mutant {
        name: "commute_model_ignores_the_final_state",
        file: "xtask/src/commute/pipeline.rs",
        original: "Verdict { commutes: ra1 == ra2 && rb1 == rb2 && s1 == s2,",
        replacement: "Verdict { commutes: ra1 == ra2 && rb1 == rb2,",
        checks: &[Check::Cargo(&["-p", "xtask", "--", "commute::"])],
        plants: "the models (kernel calls and POSIX calls, one `decide`) say two calls commute when their results agree, though the states they leave differ",
    },
    Mutant {
        name: "commute_posix_link_keeps_the_count",
        file: "xtask/src/commute/posix_model.rs",
        original: "nlink += 1;\n                Ok(\"0\".into())",
        replacement: "nlink += 0;\n                Ok(\"0\".into())",
        checks: &[Check::Cargo(&["-p", "xtask", "--", "commute::"])],
        plants: "the POSIX model's link does not raise the file's link count: stat and link commute in the model",
    },
    // ---- the Linux personality's signals ----------------------------------------------------------
    Mutant {
        name: "linux_sigreturn_keeps_handler_fp",
        file: "user/libos/src/linux/signal.rs",
        original: "        upcall::fxrstor(&mut fx);",
        replacement: "        let _ = &mut fx;",
        checks: &[Check::Suite("linux-conformance")],
        plants: "rt_sigreturn leaves the handler's x87/SSE registers in place of the program's (sigself's register check)",
    },
    Mutant {
        name: "linux_fault_not_reflected",
        file: "kernel/src/context.rs",
        original: "if from_user && reflect_fault(f, addr) {",
        replacement: "if false && from_user && reflect_fault(f, addr) {",
        checks: &[Check::Suite("linux-conformance")],
        plants: "a Linux program's bad access ends its runtime with it instead of becoming SIGSEGV (sigself, sigself-segv, signals-segv)",
    },
    // ---- the Linux personality's processes ---------------------------------------------------------
    Mutant {
        name: "tc_fpu_not_switched",
        file: "kernel/src/sched.rs",
        original: "    cpu::fxsave(&mut saved.fpu);\n    cpu::fxrstor(&next.fpu);\n",
        replacement: "",
        checks: &[Check::Suite("linux-conformance")],
        plants: "a time-sharing core switches contexts without saving and loading their x87/SSE registers: two Linux processes on one core see each other's (case fpswitch)",
    },
    Mutant {
        name: "linux_fork_pipe_end_kept",
        file: "user/libos/src/linux/pipe.rs",
        original: "                let _ = fd::close(*n);\n                mine",
        replacement: "                mine",
        checks: &[Check::Suite("linux-conformance")],
        plants: "a forked child keeps the session's open file of each pipe end it was given: a write end stays open after every process closed its own, and the reader never sees end of file (cases procs, pipe2proc, sh)",
    },
];
