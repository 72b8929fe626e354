//! Kernel tests for the boot floor: memory, heap, SMP, interrupts, topology, symbols.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::alloc::Layout;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use crate::arch::x86_64::idt::{self, TrapFrame};
use crate::arch::x86_64::{apic, cpu};
use crate::mm::{frame, heap, phys_to_virt, PAGE_SIZE};
use crate::ktest::{kassert, ktest};
use crate::{percpu, smp, time};

/// Per-core expectation of a deliberate exception: vector to expect and bytes to skip.
static EXPECT_VECTOR: [AtomicU64; percore::MAX_CORES] = [const { AtomicU64::new(u64::MAX) }; percore::MAX_CORES];
static SEEN_VECTOR: [AtomicU64; percore::MAX_CORES] = [const { AtomicU64::new(u64::MAX) }; percore::MAX_CORES];

fn exception_hook(f: &mut TrapFrame) -> bool {
    let me = percore::cpu_id();
    if f.cs & 3 != 0 || EXPECT_VECTOR[me].load(Ordering::Relaxed) != f.vector {
        return false;
    }
    EXPECT_VECTOR[me].store(u64::MAX, Ordering::Relaxed);
    SEEN_VECTOR[me].store(f.vector, Ordering::Relaxed);
    if f.vector == 6 {
        f.rip += 2; // skip the ud2
    }
    true
}

pub fn register_handlers() {
    idt::set_exception_hook(exception_hook);
}

/// Trim every core's slabs and report (free pages, live slab objects) at a quiescent point.
pub(crate) fn quiescent_counts() -> (u64, i64) {
    // Memory retired by shared shares (tables, objects' deferred frees) is freed first.
    crate::kobj::share::reclaim_all();
    smp::run_on_all(&|_| heap::trim_local());
    (frame::free_pages(), heap::live_objects())
}

/// The end of a test that must give back everything it took: heap objects and free pages are
/// what `quiescent_counts` said at its start.
pub(crate) fn nothing_leaked_since((pages0, live0): (u64, i64)) -> Result<(), alloc::string::String> {
    let (mut pages1, mut live1) = quiescent_counts();
    // Other cores give back what they freed for this test asynchronously (remote frees and
    // deferred frees travel by active message): recount a few times before calling it a leak.
    // A real leak never converges, so it still fails after the last recount.
    for _ in 0..20 {
        if pages1 == pages0 && live1 == live0 {
            break;
        }
        for _ in 0..200_000 {
            core::hint::spin_loop();
        }
        (pages1, live1) = quiescent_counts();
    }
    kassert!(live1 == live0, "live objects {live1} != {live0}");
    kassert!(pages1 == pages0, "free pages {pages1} != {pages0}");
    Ok(())
}

ktest! {
fn boot_every_core_online() {
    let online = percpu::online_count();
    kassert!(online == percore::core_count(), "online {} != core_count {}", online, percore::core_count());
    for i in 0..online {
        let c = percpu::get(i).ok_or("missing per-CPU area")?;
        kassert!(c.index == i, "core {} has index {}", i, c.index);
        kassert!(c.online.load(Ordering::Acquire), "core {} not online", i);
    }
    Ok(())
}
}

ktest! {
fn percpu_identity_on_every_core() {
    let bad = AtomicUsize::new(0);
    smp::run_on_all(&|i| {
        if percore::cpu_id() != i || percpu::this().index != i || apic::id() != percpu::this().apic_id {
            bad.fetch_add(1, Ordering::Relaxed);
        }
    });
    kassert!(bad.load(Ordering::Relaxed) == 0, "{} cores disagree about their own identity", bad.load(Ordering::Relaxed));
    Ok(())
}
}

ktest! {
fn pages_alloc_free_restores_count() {
    let before = frame::free_pages();
    let mut pages = Vec::new();
    pages.try_reserve(300).map_err(|_| "no memory for the page list")?;
    for i in 0..300u64 {
        let pa = frame::alloc_page().ok_or("alloc_page failed")?;
        kassert!(pa % PAGE_SIZE == 0, "page {pa:#x} not aligned");
        // SAFETY: a freshly allocated page in the physical window.
        unsafe { (phys_to_virt(pa) as *mut u64).write(i) };
        pages.push(pa);
    }
    let mut sorted = pages.clone();
    sorted.sort();
    sorted.dedup();
    kassert!(sorted.len() == pages.len(), "a page was handed out twice");
    for (i, &pa) in pages.iter().enumerate() {
        // SAFETY: we own the page.
        let v = unsafe { (phys_to_virt(pa) as *const u64).read() };
        kassert!(v == i as u64, "page {pa:#x} was overwritten");
        frame::free_page(pa);
    }
    drop(pages);
    drop(sorted);
    kassert!(frame::free_pages() == before, "free pages {} != {} before", frame::free_pages(), before);
    Ok(())
}
}

// Catches: a refill that takes single frames off the node pool's shared lists (the pool's
// lines then cross cores once per batch instead of once per 2 MiB), a carve that hands out a
// page twice or past its block, and a drain that loses the uncarved rest of the block.
ktest! {
fn page_refills_carve_one_whole_block() -> Outcome {
    const BLOCK: usize = 1 << frame::CARVE_ORDER;
    let node = percpu::this().node as usize;
    let mut pages: Vec<u64> = Vec::new();
    pages.try_reserve(BLOCK).map_err(|_| "no memory for the page list")?;
    // Start from an empty cache so the next allocation refills.
    frame::drain_local_cache();
    let pool0 = frame::node_stats(node).0;
    if pool0 < 4 * BLOCK as u64 {
        return Ok(crate::ktest::Outcome::Skipped(alloc::format!("node {node} has only {pool0} free pages")));
    }
    let first = frame::alloc_page().ok_or("alloc_page failed")?;
    pages.push(first);
    let taken = pool0 - frame::node_stats(node).0;
    let block = PAGE_SIZE << frame::CARVE_ORDER;
    let mut bad = None;
    for _ in 1..BLOCK {
        let Some(pa) = frame::alloc_page() else { break };
        if pa & !(block - 1) != first || frame::node_of(pa) != Some(node) {
            bad = Some(pa);
        }
        pages.push(pa);
    }
    let taken_after = pool0 - frame::node_stats(node).0;
    let mut sorted = pages.clone();
    sorted.sort();
    sorted.dedup();
    let distinct = sorted.len();
    drop(sorted);
    for &pa in &pages {
        frame::free_page(pa);
    }
    let got = pages.len();
    frame::drain_local_cache();
    let pool1 = frame::node_stats(node).0;
    // The list's own page was allocated before `pool0`: freeing it now keeps it out of the
    // count (it goes onto this core's stack).
    drop(pages);
    kassert!(taken == BLOCK as u64 && first % block == 0, "the first refill took {taken} pages (first {first:#x}), want one aligned block of {BLOCK}");
    kassert!(got == BLOCK && distinct == BLOCK, "{got} pages from the block, {distinct} distinct, want {BLOCK}");
    kassert!(bad.is_none(), "page {:#x} is not from the carved block at {first:#x} on node {node}", bad.unwrap_or(0));
    kassert!(taken_after == BLOCK as u64, "carving the block took {taken_after} pages from the pool, want {BLOCK}");
    kassert!(pool1 == pool0, "after the drain the pool has {pool1} free pages, {pool0} before");
    Ok(crate::ktest::Outcome::Ran)
}
}

ktest! {
fn large_frames_are_aligned_and_exhaustion_is_a_value() {
    let before = frame::free_pages();
    let mut frames = Vec::new();
    frames.try_reserve(8192).map_err(|_| "no memory for the frame list")?;
    // Take 2 MiB frames until the allocator says no: it must say so with None.
    while let Some(pa) = frame::alloc_large() {
        kassert!(pa % (2 << 20) == 0, "2 MiB frame {pa:#x} misaligned");
        if frames.len() == frames.capacity() {
            frame::free_large(pa);
            break;
        }
        frames.push(pa);
    }
    kassert!(!frames.is_empty(), "no 2 MiB frame at all");
    for &pa in &frames {
        frame::free_large(pa);
    }
    drop(frames);
    kassert!(frame::free_pages() == before, "free pages {} != {} before", frame::free_pages(), before);
    Ok(())
}
}

ktest! {
fn heap_classes_alignment_and_reuse() {
    let (pages0, live0) = quiescent_counts();
    for &size in &[1usize, 8, 16, 24, 33, 64, 100, 128, 255, 512, 1000, 2048, 2049, 4096, 10000, 100_000] {
        for &align in &[1usize, 8, 64, 4096] {
            let layout = Layout::from_size_align(size, align).map_err(|_| "bad layout")?;
            let p = heap::try_alloc(layout).ok_or("try_alloc failed")?;
            kassert!(p as usize % align == 0, "size {size} align {align}: {p:p} misaligned");
            // SAFETY: p is a fresh allocation of `size` bytes.
            unsafe { core::ptr::write_bytes(p, 0xA5, size) };
            heap::free(p, layout);
        }
    }
    let v: Vec<Box<[u8; 48]>> = (0..1000).map(|i| Box::new([i as u8; 48])).collect();
    for (i, b) in v.iter().enumerate() {
        kassert!(b[47] == i as u8, "box {i} corrupted");
    }
    drop(v);
    nothing_leaked_since((pages0, live0))
}
}

ktest! {
fn injected_allocation_failure_is_a_value() {
    let (pages0, live0) = quiescent_counts();
    frame::set_fail_one_in(1);
    let page = frame::alloc_page();
    let large = frame::alloc_large();
    let mut v: Vec<u8> = Vec::new();
    let reserve = v.try_reserve(1 << 20);
    frame::set_fail_one_in(0);
    kassert!(page.is_none() && large.is_none(), "allocation succeeded under injected failure");
    kassert!(reserve.is_err(), "Vec::try_reserve succeeded under injected failure");
    drop(v);
    let (pages1, live1) = quiescent_counts();
    kassert!(pages1 == pages0 && live1 == live0, "counts moved: pages {pages0}->{pages1}, live {live0}->{live1}");
    Ok(())
}
}

/// A tiny xorshift generator: tests are reproducible per core.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

const STRESS_SIZES: [usize; 9] = [16, 24, 40, 64, 100, 200, 500, 1500, 3000];

fn stress_alloc(rng: &mut Rng) -> Option<*mut u8> {
    let size = STRESS_SIZES[(rng.next() % STRESS_SIZES.len() as u64) as usize];
    let p = heap::try_alloc(Layout::from_size_align(size, 8).ok()?)?;
    // SAFETY: fresh allocation of at least 16 bytes: record its size and a check word.
    unsafe {
        (p as *mut usize).write(size);
        (p as *mut u64).add(1).write(p as u64 ^ 0x5EED);
    }
    Some(p)
}

fn stress_free(p: *mut u8) -> bool {
    // SAFETY: p came from stress_alloc and is exclusively ours after the swap.
    let (size, check) = unsafe { ((p as *const usize).read(), (p as *const u64).add(1).read()) };
    let ok = check == p as u64 ^ 0x5EED;
    if let Ok(l) = Layout::from_size_align(size, 8) {
        heap::free(p, l);
    }
    ok
}

ktest! {
fn memory_stress_all_cores_cross_frees() {
    let cores = percpu::online_count();
    let slots: Vec<AtomicPtr<u8>> = (0..cores * 64).map(|_| AtomicPtr::new(core::ptr::null_mut())).collect();
    let page_slots: Vec<AtomicU64> = (0..cores * 16).map(|_| AtomicU64::new(0)).collect();
    let (pages0, live0) = quiescent_counts();
    let corrupt = AtomicUsize::new(0);
    let ops = AtomicU64::new(0);
    let oom = AtomicBool::new(false);
    // Long enough to interleave thoroughly; scaled down with many vCPUs on a small host.
    let millis = if cores <= 2 { 2000 } else { 3000 };
    smp::run_on_all(&|i| {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (i as u64 + 1) * 0x1234_5677);
        let deadline = time::Deadline::after_ms(millis);
        let mut n = 0u64;
        while !deadline.expired() || n < 1000 {
            n += 1;
            if rng.next() % 4 == 0 {
                let Some(pa) = frame::alloc_page() else { oom.store(true, Ordering::Relaxed); continue };
                // SAFETY: fresh page.
                unsafe { (phys_to_virt(pa) as *mut u64).write(pa) };
                let old = page_slots[(rng.next() % page_slots.len() as u64) as usize].swap(pa, Ordering::AcqRel);
                if old != 0 {
                    // SAFETY: the slot gave us exclusive ownership of `old`.
                    if unsafe { (phys_to_virt(old) as *const u64).read() } != old {
                        corrupt.fetch_add(1, Ordering::Relaxed);
                    }
                    frame::free_page(old);
                }
            } else {
                let Some(p) = stress_alloc(&mut rng) else { oom.store(true, Ordering::Relaxed); continue };
                let old = slots[(rng.next() % slots.len() as u64) as usize].swap(p, Ordering::AcqRel);
                if !old.is_null() && !stress_free(old) {
                    corrupt.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        ops.fetch_add(n, Ordering::Relaxed);
    });
    for s in &slots {
        let p = s.swap(core::ptr::null_mut(), Ordering::AcqRel);
        if !p.is_null() && !stress_free(p) {
            corrupt.fetch_add(1, Ordering::Relaxed);
        }
    }
    for s in &page_slots {
        let pa = s.swap(0, Ordering::AcqRel);
        if pa != 0 {
            frame::free_page(pa);
        }
    }
    let (pages1, live1) = quiescent_counts();
    crate::log::kprintln!(
        "stress: {} alloc/free operations on {} cores; free pages {} -> {}, live objects {} -> {}",
        ops.load(Ordering::Relaxed), cores, pages0, pages1, live0, live1
    );
    kassert!(corrupt.load(Ordering::Relaxed) == 0, "{} corrupted objects", corrupt.load(Ordering::Relaxed));
    kassert!(!oom.load(Ordering::Relaxed), "ran out of memory during the stress");
    kassert!(live1 == live0, "slab objects leaked: {live0} -> {live1}");
    kassert!(pages1 == pages0, "pages leaked: {pages0} -> {pages1}");
    Ok(())
}
}

// Catches: objects freed by another core never taken back from the owner's remote-free list
// (mutant `slab_remote_frees_never_drained`). The leak checks above cannot see it, since
// `quiescent_counts` trims every core first, which drains those lists; here nothing trims.
// This core allocates a batch, another core frees all of it (remote frees), four times over:
// from the second round on every object must come from what the other core gave back, so
// the slabs hold no more pages than after the first round.
ktest! {
fn remote_frees_are_reused_without_a_trim() -> Outcome {
    let cores = percpu::online_count();
    if cores < 2 {
        return Ok(crate::ktest::Outcome::Skipped(alloc::format!("needs 2 or more cores, the boot has {cores}")));
    }
    let (pages0, live0) = quiescent_counts();
    let me = percpu::this().index;
    let other = (me + 1) % cores;
    // 2000 objects of the 256-byte class: over a hundred one-page slabs a round.
    const N: usize = 2000;
    let layout = Layout::from_size_align(256, 8).map_err(|_| "layout")?;
    let ptrs: Vec<AtomicPtr<u8>> = (0..N).map(|_| AtomicPtr::new(core::ptr::null_mut())).collect();
    let mut after_first = 0;
    for round in 0..4 {
        for p in &ptrs {
            let Some(obj) = heap::try_alloc(layout) else {
                // Give back what this round took before failing.
                for q in &ptrs {
                    let o = q.swap(core::ptr::null_mut(), Ordering::AcqRel);
                    if !o.is_null() {
                        heap::free(o, layout);
                    }
                }
                return Err(alloc::format!("round {round}: the kernel heap ran out"));
            };
            p.store(obj, Ordering::Release);
        }
        if round == 0 {
            after_first = heap::slab_pages();
        }
        smp::run_on(
            &|_| {
                for p in &ptrs {
                    heap::free(p.swap(core::ptr::null_mut(), Ordering::AcqRel), layout);
                }
            },
            core::iter::once(other),
            false,
        );
    }
    let grown = heap::slab_pages() - after_first;
    kassert!(grown <= 0, "slabs grew by {grown} pages over three rounds of reusing remotely freed objects");
    drop(ptrs);
    nothing_leaked_since((pages0, live0))?;
    Ok(crate::ktest::Outcome::Ran)
}
}

ktest! {
fn exceptions_are_delivered_on_every_core() {
    let bad = AtomicUsize::new(0);
    smp::run_on_all(&|i| {
        for (vector, trigger) in [(3u64, 0u8), (6u64, 1u8)] {
            SEEN_VECTOR[i].store(u64::MAX, Ordering::Relaxed);
            EXPECT_VECTOR[i].store(vector, Ordering::Relaxed);
            // SAFETY: the exception hook recognises the expected vector on this core and
            // resumes after the instruction (int3 traps past itself; ud2 is skipped).
            unsafe {
                if trigger == 0 {
                    core::arch::asm!("int3");
                } else {
                    core::arch::asm!("ud2");
                }
            }
            if SEEN_VECTOR[i].load(Ordering::Relaxed) != vector {
                bad.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    kassert!(bad.load(Ordering::Relaxed) == 0, "{} exceptions not delivered", bad.load(Ordering::Relaxed));
    Ok(())
}
}

ktest! {
fn ipis_reach_every_core() {
    let cores = percpu::online_count();
    let me = percpu::this().index;
    for t in (0..cores).filter(|&t| t != me) {
        let c = percpu::get(t).ok_or("missing core")?;
        let before = c.stats.ipis_received.load(Ordering::Relaxed);
        apic::send_ipi(c.apic_id, apic::VECTOR_WAKE);
        let d = time::Deadline::after_ms(5000);
        while c.stats.ipis_received.load(Ordering::Relaxed) == before && !d.expired() {
            core::hint::spin_loop();
        }
        kassert!(c.stats.ipis_received.load(Ordering::Relaxed) > before, "core {t} did not take the IPI");
    }
    Ok(())
}
}

ktest! {
fn lapic_timer_fires_on_every_core() {
    kassert!(apic::timer_ticks_per_ms() > 0, "timer not calibrated");
    let missed = AtomicUsize::new(0);
    smp::run_on_all(&|_| {
        let stats = &percpu::this().stats;
        let before = stats.timer_ticks.load(Ordering::Relaxed);
        apic::timer_oneshot_us(500);
        cpu::enable_interrupts();
        let d = time::Deadline::after_ms(5000);
        while stats.timer_ticks.load(Ordering::Relaxed) == before && !d.expired() {
            core::hint::spin_loop();
        }
        cpu::disable_interrupts();
        if stats.timer_ticks.load(Ordering::Relaxed) == before {
            missed.fetch_add(1, Ordering::Relaxed);
        }
    });
    kassert!(missed.load(Ordering::Relaxed) == 0, "{} cores never saw their timer", missed.load(Ordering::Relaxed));
    Ok(())
}
}

/// The NUMA placement tests below check that memory comes from a given node, which says
/// nothing on a boot with one node (every page is on node 0). They skip there, and on a boot
/// with two or more nodes they must have checked every node that has a core: a test that
/// found every node too full to check passed without checking anything.
fn numa_nodes_with_cores() -> Result<u64, crate::ktest::Outcome> {
    let nodes = frame::node_count();
    if nodes < 2 {
        return Err(crate::ktest::Outcome::Skipped(alloc::format!("needs 2 or more NUMA nodes, the boot has {nodes}")));
    }
    Ok(percpu::all().take(percpu::online_count()).fold(0u64, |set, c| set | node_bit(c.node as usize)))
}

fn node_bit(node: usize) -> u64 {
    1u64.checked_shl(node as u32).unwrap_or(0)
}

/// The end of a NUMA placement test: every node with a core was checked.
fn every_node_checked(want: u64, checked: u64) -> Result<crate::ktest::Outcome, alloc::string::String> {
    kassert!(checked == want, "checked nodes {checked:#b}, want every node with a core: {want:#b}");
    Ok(crate::ktest::Outcome::Ran)
}

ktest! {
fn locality_matrix_is_consistent() {
    use crate::topology::{locality_get, Locality};
    let n = percpu::online_count();
    for i in 0..n {
        let (l, d) = locality_get(i, i).ok_or("no locality for self")?;
        kassert!(l == Locality::SameCore && d == 10, "core {i} is not local to itself: {l:?}/{d}");
        for j in 0..n {
            let a = locality_get(i, j).ok_or("missing pair")?;
            let b = locality_get(j, i).ok_or("missing pair")?;
            kassert!(a == b, "locality({i},{j}) = {a:?} but locality({j},{i}) = {b:?}");
            let (ni, nj) = (percpu::get(i).unwrap().node, percpu::get(j).unwrap().node);
            kassert!((a.0 == Locality::OtherNode) == (ni != nj), "cores {i},{j}: nodes {ni},{nj} but {a:?}");
        }
    }
    Ok(())
}
}

ktest! {
fn numa_pages_come_from_the_local_node() -> Outcome {
    let want = match numa_nodes_with_cores() {
        Ok(w) => w,
        Err(skip) => return Ok(skip),
    };
    let wrong = AtomicUsize::new(0);
    let checked = AtomicU64::new(0);
    smp::run_on_all(&|_| {
        let node = percpu::this().node as usize;
        // Only meaningful when the local node still has free memory (a full node falls back
        // to another; the check below fails if that left a node unchecked).
        if frame::node_stats(node).0 < 1024 {
            return;
        }
        let mut got = 0;
        for _ in 0..8 {
            if let Some(pa) = frame::alloc_page() {
                got += 1;
                if frame::node_of(pa) != Some(node) {
                    wrong.fetch_add(1, Ordering::Relaxed);
                }
                frame::free_page(pa);
            }
        }
        if got == 8 {
            checked.fetch_or(node_bit(node), Ordering::Relaxed);
        }
    });
    kassert!(wrong.load(Ordering::Relaxed) == 0, "{} pages came from a remote node", wrong.load(Ordering::Relaxed));
    every_node_checked(want, checked.load(Ordering::Relaxed))
}
}

ktest! {
fn object_metadata_comes_from_the_memid_node() -> Outcome {
    use crate::kobj::{share::Share, KObject, Kind};
    let want = match numa_nodes_with_cores() {
        Ok(w) => w,
        Err(skip) => return Ok(skip),
    };
    let (pages0, live0) = quiescent_counts();
    let mut checked = 0u64;
    for c in percpu::all().take(percpu::online_count()) {
        let node = c.node as usize;
        // Only meaningful when that node still has free memory.
        if frame::node_stats(node).0 < 1024 {
            continue;
        }
        let home = c.index as u32;
        let me = percpu::this().index;
        let obj = KObject::create(b"ktest-meta", home, Kind::Share(Share::new_private(me, home))).map_err(|e| alloc::format!("create: {e:?}"))?;
        let seg = crate::kobj::segment::Segment::new(64 * crate::mm::PAGE_SIZE, home).map_err(|e| alloc::format!("segment: {e:?}"))?;
        let seg = KObject::create(b"ktest-meta-seg", home, Kind::Segment(seg)).map_err(|e| alloc::format!("create: {e:?}"))?;
        obj.as_share().map_err(|e| alloc::format!("{e:?}"))?.insert(seg.clone()).map_err(|e| alloc::format!("insert: {e:?}"))?;
        let table = obj.as_share().map_err(|e| alloc::format!("{e:?}"))?.table_addrs().ok_or("no table after an insert")?;
        let pages = seg.as_segment().map_err(|e| alloc::format!("{e:?}"))?.page_list_addr();
        for (what, va) in [("object", &*obj as *const KObject as u64), ("share table", table[0]), ("share slots", table[1]), ("segment page list", pages)] {
            let at = frame::node_of(crate::mm::virt_to_phys(va));
            kassert!(at == Some(node), "memid core {} (node {node}): {what} on node {at:?}", c.index);
        }
        drop(seg);
        drop(obj);
        // Raw node-placed allocations of every size class, freed from this core.
        for size in [24usize, 200, 1000, 2048, 5000] {
            let layout = Layout::from_size_align(size, 8).map_err(|_| "bad layout")?;
            let p = heap::try_alloc_on_node(layout, node).ok_or("try_alloc_on_node failed")?;
            let got = frame::node_of(crate::mm::virt_to_phys(p as u64));
            heap::free(p, layout);
            kassert!(got == Some(node), "size {size} for node {node} came from node {got:?}");
        }
        checked |= node_bit(node);
    }
    nothing_leaked_since((pages0, live0))?;
    every_node_checked(want, checked)
}
}

ktest! {
fn ticket_lock_counts_exactly_across_cores() {
    let lock = percore::TicketLock::new(0u64);
    const PER_CORE: u64 = 2000;
    smp::run_on_all(&|_| {
        for _ in 0..PER_CORE {
            *lock.lock() += 1;
        }
    });
    let want = PER_CORE * percpu::online_count() as u64;
    let got = *lock.lock();
    kassert!(got == want, "counter {got} != {want}");
    Ok(())
}
}

ktest! {
fn kernel_symbols_resolve() {
    kassert!(crate::ksyms::count() > 0, "no symbol table (was the kernel built through xtask?)");
    let addr = ktest_symbol_probe as *const () as u64;
    let (name, off) = crate::ksyms::lookup(addr + 1).ok_or("probe address not found")?;
    kassert!(name.contains("ktest_symbol_probe") && off == 1, "resolved to {name}+{off:#x}");
    Ok(())
}
}

#[inline(never)]
fn ktest_symbol_probe() -> u64 {
    core::hint::black_box(42)
}

ktest! {
fn percore_selftest_on_every_core() {
    // The percore crate's all-cores stress (locks, RW lock, seqlock, counters, clustered
    // objects, reclamation, object cache), the same routine its host tests run on threads.
    let cores = percpu::online_count();
    let st = percore::selftest::SelfTest::new(cores, 2000);
    let failed = AtomicUsize::new(0);
    smp::run_on_all(&|c| {
        if let Err(e) = st.run_on_core(c) {
            crate::log::kprintln!("selftest on core {c}: {e:?}");
            failed.fetch_add(1, Ordering::Relaxed);
        }
    });
    kassert!(failed.load(Ordering::Relaxed) == 0, "{} cores failed the percore self-test", failed.load(Ordering::Relaxed));
    st.check().map_err(|e| alloc::format!("{e:?}"))?;
    Ok(())
}
}

ktest! {
fn segment_pages_come_from_the_memid_node() -> Outcome {
    // Corey's memid: a segment allocated for core C gets its pages from C's NUMA node, even
    // when another core touches them first.
    let want = match numa_nodes_with_cores() {
        Ok(w) => w,
        Err(skip) => return Ok(skip),
    };
    let (pages0, _) = quiescent_counts();
    let mut checked = 0u64;
    for c in 0..percpu::online_count() {
        let node = percpu::get(c).ok_or("missing core")?.node as usize;
        if frame::node_stats(node).0 < 256 {
            continue; // that node is nearly full; nothing to learn
        }
        let seg = crate::kobj::segment::Segment::new(4 * PAGE_SIZE, c as u32).map_err(|e| e.as_str())?;
        for i in 0..4 {
            let (pa, _, _) = seg.fault_page(i, true, (0, 0), &mut None).map_err(|e| e.as_str())?;
            kassert!(frame::node_of(pa) == Some(node), "page for core {c} came from node {:?}, want {node}", frame::node_of(pa));
        }
        drop(seg);
        checked |= node_bit(node);
    }
    let (pages1, _) = quiescent_counts();
    kassert!(pages1 == pages0, "pages leaked: {pages0} -> {pages1}");
    every_node_checked(want, checked)
}
}

ktest! {
fn private_share_table_survives_churn_and_guards_lent_entries() {
    use crate::kobj::{segment::Segment, share::Share, KObject, Kind};
    let (pages0, live0) = quiescent_counts();
    let me = percpu::this().index;
    let err = |e: abi::Error| alloc::format!("{e:?}");
    let share = KObject::create(b"ktest-churn", me as u32, Kind::Share(Share::new_private(me, me as u32))).map_err(err)?;
    let sh = share.as_share().map_err(err)?;
    // Objects come and go in an order that breaks clusters in the middle and at their ends,
    // so removals move later entries back (a private table keeps no tombstones).
    let mut objs = alloc::vec::Vec::new();
    for i in 0..64u64 {
        let o = KObject::create(b"ktest-churn-obj", me as u32, Kind::Segment(Segment::new(PAGE_SIZE, me as u32).map_err(err)?)).map_err(err)?;
        let present = i % 3 != 0;
        if present {
            sh.insert(o.clone()).map_err(err)?;
        }
        objs.push((o, present));
    }
    for round in 0..20u64 {
        for (i, (o, present)) in objs.iter_mut().enumerate() {
            if (i as u64 * 7 + round) % 5 == 0 {
                if *present {
                    kassert!(sh.remove(o.id).map_err(err)?.is_some(), "remove of a present entry returned nothing");
                } else {
                    sh.insert(o.clone()).map_err(err)?;
                }
                *present = !*present;
            }
        }
        for (o, present) in &objs {
            let found = sh.get(o.id).is_ok();
            kassert!(found == *present, "round {round}: id {:#x} found={found}, want {present}", o.id);
        }
        let want = objs.iter().filter(|(_, p)| *p).count();
        kassert!(sh.len() == want, "round {round}: len {} want {want}", sh.len());
        kassert!(sh.tombstones() == 0, "round {round}: {} tombstones in a private table", sh.tombstones());
    }
    // A lent entry cannot be removed while it is lent, and can be afterwards.
    let (o, _) = objs.iter().find(|(_, p)| *p).ok_or("no present entry")?;
    {
        let lent = sh.lend(o.id).map_err(err)?.ok_or("lend found nothing")?;
        kassert!(lent.is_lent(), "first lend was not a lend");
        kassert!(lent.id == o.id, "lent {:#x}, want {:#x}", lent.id, o.id);
        let busy = sh.remove(o.id).err();
        kassert!(busy == Some(abi::Error::Busy), "remove while lent: {busy:?}");
        // Lends nest, and while any is out no entry can be removed.
        let second = sh.lend(o.id).map_err(err)?.ok_or("second lend found nothing")?;
        kassert!(second.is_lent(), "second lend was not a lend");
        let other = objs.iter().find(|(x, p)| *p && x.id != o.id).map(|(x, _)| x.id).ok_or("no second present entry")?;
        drop(lent);
        let busy = sh.remove(other).err();
        kassert!(busy == Some(abi::Error::Busy), "remove of another entry while one lend is out: {busy:?}");
        drop(second);
        kassert!(sh.remove(other).map_err(err)?.is_some(), "remove after both lends ended failed");
    }
    kassert!(sh.remove(o.id).map_err(err)?.is_some(), "remove after the lend failed");
    drop(objs);
    drop(share);
    nothing_leaked_since((pages0, live0))
}
}

ktest! {
fn private_share_removal_keeps_every_probe_path() {
    // A small private table (8 slots while it holds up to 4 entries) has long clusters that
    // wrap around its end. A removal moves later entries of the cluster back (no tombstones
    // in a private table); after every change every present entry must still be found, every
    // removed one not, and no slot may hold a tombstone.
    use crate::kobj::{segment::Segment, share::Share, KObject, Kind};
    let (pages0, live0) = quiescent_counts();
    let me = percpu::this().index;
    let err = |e: abi::Error| alloc::format!("{e:?}");
    let share = KObject::create(b"ktest-shift", me as u32, Kind::Share(Share::new_private(me, me as u32))).map_err(err)?;
    let sh = share.as_share().map_err(err)?;
    let mut objs = Vec::new();
    for _ in 0..12 {
        let o = KObject::create(b"ktest-shift-obj", me as u32, Kind::Segment(Segment::new(0, me as u32).map_err(err)?)).map_err(err)?;
        objs.push((o, false));
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut removals = 0;
    for step in 0..2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // At most 4 present: the table stays at 8 slots, half full at most.
        let present = objs.iter().filter(|(_, p)| *p).count();
        let i = (x % objs.len() as u64) as usize;
        let (o, p) = &mut objs[i];
        if *p {
            kassert!(sh.remove(o.id).map_err(err)?.is_some(), "step {step}: remove of a present entry returned nothing");
            *p = false;
            removals += 1;
        } else if present < 4 {
            sh.insert(o.clone()).map_err(err)?;
            *p = true;
        }
        for (o, p) in &objs {
            let found = sh.get(o.id).is_ok();
            kassert!(found == *p, "step {step}: id {:#x} found={found}, want {p}", o.id);
        }
        kassert!(sh.tombstones() == 0, "step {step}: {} tombstones in a private table", sh.tombstones());
    }
    kassert!(removals > 500, "only {removals} removals");
    for (o, p) in &objs {
        if *p {
            sh.remove(o.id).map_err(err)?;
        }
    }
    kassert!(sh.len() == 0, "{} entries left", sh.len());
    drop(objs);
    drop(share);
    nothing_leaked_since((pages0, live0))
}
}

ktest! {
fn shared_share_lookups_race_removals_and_frees() {
    use crate::kobj::{segment::Segment, share::Share, KObject, Kind};
    let cores = percpu::online_count();
    let (pages0, live0) = quiescent_counts();
    let err = |e: abi::Error| alloc::format!("{e:?}");
    let share = KObject::create(b"ktest-race", 0, Kind::Share(Share::new_shared(0).map_err(err)?)).map_err(err)?;
    const IDS: usize = 16;
    let ids: Vec<AtomicU64> = (0..IDS).map(|_| AtomicU64::new(0)).collect();
    let done = AtomicBool::new(false);
    let wrong = AtomicUsize::new(0);
    let failed_removes = AtomicUsize::new(0);
    let found = AtomicU64::new(0);
    let writes = AtomicU64::new(0);
    smp::run_on_all(&|i| {
        let Ok(sh) = share.as_share() else { return };
        if i == 0 {
            // The writer: each object is made, published, looked up by the others, removed and
            // dropped, its last reference going while readers may still hold its pointer.
            let deadline = time::Deadline::after_ms(1500);
            let mut n = 0usize;
            while !deadline.expired() || n < 2000 {
                let Ok(seg) = Segment::new(PAGE_SIZE, 0) else { break };
                let Ok(o) = KObject::create(b"ktest-race-obj", 0, Kind::Segment(seg)) else { break };
                let id = o.id;
                if sh.insert(o).is_err() {
                    break;
                }
                let old = ids[n % IDS].swap(id, Ordering::AcqRel);
                // Only the writer removes, so the entry it published must still be there.
                if old != 0 && sh.remove(old).is_err() {
                    failed_removes.fetch_add(1, Ordering::Relaxed);
                }
                n += 1;
            }
            writes.store(n as u64, Ordering::Relaxed);
            done.store(true, Ordering::Release);
        } else {
            let mut k = i;
            while !done.load(Ordering::Acquire) {
                let id = ids[k % IDS].load(Ordering::Acquire);
                k += 1;
                if id == 0 {
                    continue;
                }
                match sh.get(id) {
                    Ok(o) if o.id == id => {
                        found.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(abi::Error::NoSuchObject) => {}
                    _ => {
                        wrong.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    });
    for slot in &ids {
        let id = slot.swap(0, Ordering::AcqRel);
        if id != 0 {
            drop(share.as_share().map_err(err)?.remove(id).map_err(err)?);
        }
    }
    kassert!(wrong.load(Ordering::Relaxed) == 0, "{} lookups returned a wrong object or error", wrong.load(Ordering::Relaxed));
    kassert!(failed_removes.load(Ordering::Relaxed) == 0, "{} removes of a published object failed", failed_removes.load(Ordering::Relaxed));
    kassert!(writes.load(Ordering::Relaxed) >= 2000, "only {} objects made", writes.load(Ordering::Relaxed));
    kassert!(cores < 2 || found.load(Ordering::Relaxed) > 0, "readers never found a live object");
    drop(share);
    drop(ids);
    nothing_leaked_since((pages0, live0))
}
}

ktest! {
fn freeing_the_loaded_root_range_leaves_it_first() {
    // A kernel core running a ring batch can hold the last reference to the ring's range
    // (the owner exited meanwhile) and drop it with the range's root still in CR3. The drop
    // must load the kernel's root before the page tables go: otherwise this core translates
    // through freed frames that any core may reuse (roletest's intermittent silent stop).
    use crate::kobj::{ar::AddressRange, Kind, KObject};
    let me = percpu::current_index() as u32;
    let range = AddressRange::new(abi::ArKind::Root, me).map_err(|e| alloc::format!("range: {e:?}"))?;
    let table = range.table;
    let obj = KObject::create(b"loaded-root", me, Kind::Ar(range)).map_err(|e| alloc::format!("object: {e:?}"))?;
    let kernel_root = crate::arch::x86_64::boot::boot_pml4_phys();
    crate::arch::x86_64::paging::load_root(table);
    let loaded = cpu::read_cr3() & !0xFFF;
    drop(obj);
    let after = cpu::read_cr3() & !0xFFF;
    // Whatever happened, never go on with a freed root.
    crate::arch::x86_64::paging::load_kernel_root();
    kassert!(loaded == table, "the range's root was not loaded: cr3 {loaded:#x}, table {table:#x}");
    kassert!(after == kernel_root, "after the last reference went, cr3 is {after:#x}, not the kernel root {kernel_root:#x} (the range's table was {table:#x})");
    Ok(())
}
}

ktest! {
fn segment_copy_races_resize_and_writes() {
    // An eager copy reads the source without its lock (`Segment::duplicate`, seqlock reader
    // side) while core 0 resizes the segment (4 <-> 8 pages) and rewrites every page with a
    // new byte in one `write_bytes`. Every copy must be one state the writer made: 4 or 8
    // pages, the first 4 all one byte, the last 4 (at 8 pages) that byte or zero (just grown).
    // A copy that mixed two states (torn by a write or a resize) fails; nothing may leak.
    use crate::kobj::segment::Segment;
    let cores = percpu::online_count();
    let (pages0, live0) = quiescent_counts();
    let p = PAGE_SIZE as usize;
    let seg = Segment::new(4 * PAGE_SIZE, 0).map_err(|e| alloc::format!("segment: {e:?}"))?;
    seg.write_bytes(0, &alloc::vec![1u8; 4 * p]).map_err(|e| alloc::format!("write: {e:?}"))?;
    let done = AtomicBool::new(false);
    let bad = AtomicUsize::new(0);
    let copies = AtomicU64::new(0);
    let first_bad = AtomicU64::new(0);
    smp::run_on_all(&|i| {
        if i == 0 {
            let deadline = time::Deadline::after_ms(1000);
            let mut g = 2u8;
            let mut big = false;
            let buf = alloc::vec![0u8; 8 * p];
            let mut n = 0u32;
            while !deadline.expired() || n < 200 {
                big = !big;
                let pages = if big { 8 } else { 4 };
                if seg.set_nbytes(pages as u64 * PAGE_SIZE).is_err() {
                    break;
                }
                let fill: alloc::vec::Vec<u8> = buf[..pages * p].iter().map(|_| g).collect();
                if seg.write_bytes(0, &fill).is_err() {
                    break;
                }
                g = if g == 255 { 2 } else { g + 1 };
                n += 1;
            }
            done.store(true, Ordering::Release);
        } else {
            let mut page = alloc::vec![0u8; p];
            while !done.load(Ordering::Acquire) {
                let Ok((copy, maps)) = seg.duplicate(false, i as u32) else { continue };
                drop(maps);
                copies.fetch_add(1, Ordering::Relaxed);
                let size = copy.nbytes();
                let npages = (size / PAGE_SIZE) as usize;
                let mut ok = size == 4 * PAGE_SIZE || size == 8 * PAGE_SIZE;
                let mut first = None;
                let mut tail = None;
                for k in 0..npages.min(8) {
                    if copy.read_bytes((k * p) as u64, &mut page).is_err() {
                        ok = false;
                        break;
                    }
                    let b = page[0];
                    if page.iter().any(|&x| x != b) {
                        ok = false; // a torn page
                    }
                    let want = if k < 4 { &mut first } else { &mut tail };
                    match *want {
                        None => *want = Some(b),
                        Some(w) if w != b => ok = false,
                        Some(_) => {}
                    }
                }
                if let (Some(f), Some(t)) = (first, tail) {
                    if t != f && t != 0 {
                        ok = false;
                    }
                }
                if !ok {
                    bad.fetch_add(1, Ordering::Relaxed);
                    first_bad.store(size, Ordering::Relaxed);
                }
            }
        }
    });
    kassert!(bad.load(Ordering::Relaxed) == 0, "{} of {} copies mixed two states (e.g. size {:#x})", bad.load(Ordering::Relaxed), copies.load(Ordering::Relaxed), first_bad.load(Ordering::Relaxed));
    kassert!(cores < 2 || copies.load(Ordering::Relaxed) > 0, "no copy was made");
    drop(seg);
    nothing_leaked_since((pages0, live0))
}
}

ktest! {
fn segment_readers_take_no_lock() {
    // The reader side writes nothing of the segment: an eager copy and a refused shrink
    // succeed while this core holds the segment's lock (the locked paths would wait for it
    // forever), and a copy started while a writer is active falls back to the lock. The
    // summaries the lock-free shrink check reads follow pins (a stale one refuses wrongly).
    use crate::kobj::segment::Segment;
    let (pages0, live0) = quiescent_counts();
    let seg = Segment::new(4 * PAGE_SIZE, 0).map_err(|e| alloc::format!("segment: {e:?}"))?;
    seg.write_bytes(PAGE_SIZE, b"hello").map_err(|e| alloc::format!("write: {e:?}"))?;
    let pins = seg.pin(2).map_err(|e| alloc::format!("pin: {e:?}"))?;
    kassert!(pins.len() == 2, "pin gave {} pages", pins.len());
    {
        let _held = seg.inner.lock();
        let copy = seg.copy_without_lock(0).ok_or("the lock-free copy gave up with no writer")?.map_err(|e| alloc::format!("copy: {e:?}"))?;
        let mut b = [0u8; 5];
        copy.read_bytes(PAGE_SIZE, &mut b).map_err(|e| alloc::format!("read: {e:?}"))?;
        kassert!(&b == b"hello", "copy read {b:?}");
        kassert!(copy.nbytes() == 4 * PAGE_SIZE, "copy size {:#x}", copy.nbytes());
        let r = seg.set_nbytes(PAGE_SIZE);
        kassert!(r == Err(abi::Error::Busy), "shrinking below a pin under the held lock gave {r:?}");
    }
    let during = seg.copy_without_lock_during_write(0);
    kassert!(during.is_none(), "a copy during a write did not fall back to the lock");
    seg.unpin();
    let r = seg.set_nbytes(PAGE_SIZE);
    kassert!(r.is_ok(), "shrinking after the unpin gave {r:?}");
    kassert!(seg.nbytes() == PAGE_SIZE, "size {:#x} after the shrink", seg.nbytes());
    drop(pins);
    drop(seg);
    nothing_leaked_since((pages0, live0))
}
}

ktest! {
fn segment_mapping_past_the_end_is_refused() {
    // `add_map` checks the mapping against the pages under the segment's lock (the caller's
    // check reads the size without it, so a shrink in between could leave a mapping past the
    // end), and the mapping summary a refused shrink reads without the lock follows
    // `add_map`/`remove_map`.
    use crate::kobj::kref::KRef;
    use crate::kobj::segment::{SegMap, Segment};
    use crate::kobj::{KObject, Kind};
    let err = |e: abi::Error| alloc::format!("{e:?}");
    let (pages0, live0) = quiescent_counts();
    let seg = Segment::new(2 * PAGE_SIZE, 0).map_err(err)?;
    let holder = KObject::create(b"ktest-map", 0, Kind::Segment(Segment::new(0, 0).map_err(err)?)).map_err(err)?;
    let map = |soff: u64, len: u64| SegMap { ar: crate::kobj::kref::KLink::from_raw(KRef::as_raw(&holder)).expect("non-null"), ar_key: 1, voff: 0, soff, len };
    let r = seg.add_map(map(PAGE_SIZE, 2 * PAGE_SIZE), 0);
    kassert!(r == Err(abi::Error::OutOfRange), "a mapping past the end gave {r:?}");
    let r = seg.add_map(map(PAGE_SIZE, u64::MAX), 0);
    kassert!(r == Err(abi::Error::OutOfRange), "an overflowing mapping gave {r:?}");
    seg.add_map(map(PAGE_SIZE, PAGE_SIZE), 0).map_err(err)?;
    let r = seg.set_nbytes(PAGE_SIZE);
    kassert!(r == Err(abi::Error::Busy), "shrinking under the mapping gave {r:?}");
    seg.remove_map(1, 0, 0);
    let r = seg.set_nbytes(PAGE_SIZE);
    kassert!(r.is_ok(), "shrinking after the unmap gave {r:?}");
    drop(seg);
    drop(holder);
    nothing_leaked_since((pages0, live0))
}
}

/// A root with a 1 GiB range linked at 1 GiB and, inside it, a 2 MiB range at 6 MiB mapping
/// `seg`'s first four pages read-write: (root, mid, leaf).
fn nested_ranges(seg: &crate::kobj::ObjRef) -> Result<(crate::kobj::ObjRef, crate::kobj::ObjRef, crate::kobj::ObjRef), alloc::string::String> {
    use crate::kobj::{ar, ar::AddressRange, KObject, Kind};
    use abi::ArKind;
    let me = percpu::current_index() as u32;
    let err = |e: abi::Error| alloc::format!("{e:?}");
    let root = KObject::create(b"ktest-walk-root", me, Kind::Ar(AddressRange::new(ArKind::Root, me).map_err(err)?)).map_err(err)?;
    let mid = KObject::create(b"ktest-walk-mid", me, Kind::Ar(AddressRange::new(ArKind::Span1G, me).map_err(err)?)).map_err(err)?;
    let leaf = KObject::create(b"ktest-walk-leaf", me, Kind::Ar(AddressRange::new(ArKind::Span2M, me).map_err(err)?)).map_err(err)?;
    ar::set_seg(&leaf, 0, seg, 0, 4 * PAGE_SIZE, abi::MAP_READ | abi::MAP_WRITE).map_err(err)?;
    ar::set_ar(&mid, 6 << 20, &leaf).map_err(err)?;
    ar::set_ar(&root, 1 << 30, &mid).map_err(err)?;
    Ok((root, mid, leaf))
}

// Catches: a fault walk that leaks (or double-drops) a counted reference to a range it passes
// (the counts of the ranges below the root are checked after faults, errors included); a
// range's teardown that frees a child range's table as its own (free pages above the start:
// a double free), that misses its intermediate tables (below the start: a leak), or that
// forgets a table `set_ar` unhooked from its tree (a leak); a fault through a link that was
// unmapped that finds anything but `NotMapped`.
ktest! {
fn nested_fault_walk_counts_nothing_and_teardown_frees_every_table() {
    use crate::arch::x86_64::paging::{index, read_entry, PTE_PRESENT, PTE_WRITE};
    use crate::kobj::{ar, ar::AddressRange, ar::FaultError, kref::KRef, segment::Segment, KObject, Kind};
    let me = percpu::current_index() as u32;
    let err = |e: abi::Error| alloc::format!("{e:?}");
    let (pages0, live0) = quiescent_counts();
    let seg = KObject::create(b"ktest-walk-seg", me, Kind::Segment(Segment::new(8 * PAGE_SIZE, me).map_err(err)?)).map_err(err)?;
    let (root, mid, leaf) = nested_ranges(&seg)?;
    // A table of mid's own that a later link replaces: map a page at 10 MiB, fault it in
    // (mid makes the page table), unmap it, link a second 2 MiB range over the slot.
    ar::set_seg(&mid, 10 << 20, &seg, 4 * PAGE_SIZE, PAGE_SIZE, abi::MAP_READ).map_err(err)?;
    let r = ar::fault::resolve_fault(&root, (1 << 30) + (10 << 20), false, false);
    kassert!(r == Ok(false), "fault on mid's own mapping: {r:?}");
    ar::unmap(&mid, 10 << 20, PAGE_SIZE).map_err(err)?;
    let leaf2 = KObject::create(b"ktest-walk-leaf2", me, Kind::Ar(AddressRange::new(abi::ArKind::Span2M, me).map_err(err)?)).map_err(err)?;
    ar::set_ar(&mid, 10 << 20, &leaf2).map_err(err)?;
    drop(leaf2); // mid's link holds it now
    let (mid_n, leaf_n) = (KRef::strong_count(&mid), KRef::strong_count(&leaf));
    let base = (1 << 30) + (6 << 20);
    // Through root and mid into leaf: the page table entry is written in leaf's table.
    let r = ar::fault::resolve_fault(&root, base + PAGE_SIZE, true, false);
    kassert!(r == Ok(false), "write fault through two links: {r:?}");
    let leaf_table = leaf.as_ar().map_err(err)?.table;
    let e = read_entry(leaf_table, index(1, PAGE_SIZE));
    kassert!(e & PTE_PRESENT != 0 && e & PTE_WRITE != 0, "leaf's entry after the fault: {e:#x}");
    let r = ar::fault::resolve_fault(&root, base + 5 * PAGE_SIZE, false, false);
    kassert!(r == Err(FaultError::NotMapped), "fault past leaf's mapping: {r:?}");
    let r = ar::fault::resolve_fault(&root, base, false, true);
    kassert!(r == Err(FaultError::Protection), "fetch from a mapping without MAP_EXEC: {r:?}");
    let r = ar::fault::resolve_fault(&root, (1 << 30) + (10 << 20), false, false);
    kassert!(r == Err(FaultError::NotMapped), "fault into the empty second leaf: {r:?}");
    kassert!(
        KRef::strong_count(&mid) == mid_n && KRef::strong_count(&leaf) == leaf_n,
        "counts after the walks: mid {} (was {mid_n}), leaf {} (was {leaf_n})",
        KRef::strong_count(&mid),
        KRef::strong_count(&leaf)
    );
    // Only the links hold mid and leaf now; unlinking mid frees both (and leaf2).
    drop(mid);
    drop(leaf);
    ar::unmap(&root, 1 << 30, 1 << 30).map_err(err)?;
    let r = ar::fault::resolve_fault(&root, base + PAGE_SIZE, false, false);
    kassert!(r == Err(FaultError::NotMapped), "fault through the unmapped link: {r:?}");
    drop(root);
    drop(seg);
    nothing_leaked_since((pages0, live0))
}
}

// Catches: a walk that takes a counted reference or borrow of the child and never gives it
// back (the child is never dropped: live objects and pages above the start), a walk that
// returns anything but success or `NotMapped` while the link comes and goes, and an unmap or
// teardown that leaks under the race. Does NOT reliably catch a walk that lets go of the
// parent's lock before keeping the child alive (planted once, 2026-11-29: the test passed;
// the freed child is read from unpoisoned heap memory or a reused slot, which looks fine).
// Core 0 links a fresh 1 GiB range whose only counted reference is the link, then unlinks it;
// core 1 faults through the root meanwhile. Each fault must succeed or be `NotMapped`.
ktest! {
fn fault_walk_races_the_unmap_of_its_parent_link() -> Outcome {
    use crate::kobj::{ar, ar::AddressRange, ar::FaultError, segment::Segment, KObject, Kind};
    let cores = percpu::online_count();
    if cores < 2 {
        return Ok(crate::ktest::Outcome::Skipped("needs two cores".into()));
    }
    let err = |e: abi::Error| alloc::format!("{e:?}");
    let (pages0, live0) = quiescent_counts();
    let seg = KObject::create(b"ktest-race-seg", 0, Kind::Segment(Segment::new(4 * PAGE_SIZE, 0).map_err(err)?)).map_err(err)?;
    let root = KObject::create(b"ktest-race-root", 0, Kind::Ar(AddressRange::new(abi::ArKind::Root, 0).map_err(err)?)).map_err(err)?;
    let done = AtomicBool::new(false);
    let wrong = AtomicUsize::new(0);
    let resolved = AtomicU64::new(0);
    let links = AtomicU64::new(0);
    smp::run_on_all(&|i| {
        if i == 0 {
            let deadline = time::Deadline::after_ms(1500);
            let mut n = 0u64;
            while !deadline.expired() || n < 300 {
                let Ok(a) = AddressRange::new(abi::ArKind::Span1G, 0) else { break };
                let Ok(child) = KObject::create(b"ktest-race-child", 0, Kind::Ar(a)) else { break };
                if ar::set_seg(&child, 0, &seg, 0, 4 * PAGE_SIZE, abi::MAP_READ).is_err() || ar::set_ar(&root, 1 << 30, &child).is_err() {
                    wrong.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                drop(child); // the link holds the only counted reference
                for _ in 0..(n % 7) * 200 {
                    core::hint::spin_loop();
                }
                if ar::unmap(&root, 1 << 30, 1 << 30).is_err() {
                    wrong.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                n += 1;
            }
            links.store(n, Ordering::Relaxed);
            done.store(true, Ordering::Release);
        } else if i == 1 {
            // One faulting core: the walks all take the root's ticket lock, and with more vCPUs
            // than host cores a ticket handed to a descheduled vCPU stalls everyone (the
            // 8-vCPU boot timed out with seven walkers, and took 18 s under load with two).
            let mut k = i as u64;
            while !done.load(Ordering::Acquire) {
                match ar::fault::resolve_fault(&root, (1 << 30) + (k % 4) * PAGE_SIZE, false, false) {
                    Ok(false) => {
                        resolved.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(FaultError::NotMapped) => {}
                    _ => {
                        wrong.fetch_add(1, Ordering::Relaxed);
                    }
                }
                k += 1;
            }
        }
    });
    kassert!(wrong.load(Ordering::Relaxed) == 0, "{} wrong fault results or failed links", wrong.load(Ordering::Relaxed));
    kassert!(links.load(Ordering::Relaxed) >= 300, "only {} links made", links.load(Ordering::Relaxed));
    kassert!(resolved.load(Ordering::Relaxed) > 0, "no fault ever went through the link");
    drop(root);
    drop(seg);
    nothing_leaked_since((pages0, live0))?;
    Ok(crate::ktest::Outcome::Ran)
}
}

// A kernel core that leaves its role has left its polling loop when `set_role` returns: a
// caller may then queue work on its card or rings that nobody must take. Before 2026-11-29
// `set_role` returned after the wake IPI, and the loop's last turn could still poll (the
// intermittent `net_kernel_core_leaves_and_returns`). Planted bug caught: drop the wait in
// `roles::set_role` and round 0 fails (the core is still in its loop right after the IPI).
ktest! {
fn kernel_core_has_left_its_loop_when_set_role_returns() -> Outcome {
    let cores = percpu::online_count();
    if cores < 2 {
        return Ok(crate::ktest::Outcome::Skipped(alloc::format!("needs 2 or more cores, the boot has {cores}")));
    }
    let other = cores - 1; // never core 0, which may not be a kernel core
    let area = percpu::get(other).ok_or_else(|| alloc::format!("core {other} has no area"))?;
    for round in 0..100 {
        crate::roles::set_role(other, abi::ROLE_KC).map_err(|e| alloc::format!("round {round}: set_role KC: {}", e.as_str()))?;
        let entered = time::Deadline::after_ms(5_000);
        while !area.in_kernel_loop.load(Ordering::Acquire) {
            if entered.expired() {
                let _ = crate::roles::set_role(other, abi::ROLE_XC);
                return Err(alloc::format!("round {round}: core {other} did not enter its kernel-core loop in 5 s"));
            }
            core::hint::spin_loop();
        }
        crate::roles::set_role(other, abi::ROLE_XC).map_err(|e| alloc::format!("round {round}: set_role XC: {}", e.as_str()))?;
        kassert!(!area.in_kernel_loop.load(Ordering::SeqCst), "round {round}: core {other} is still in its kernel-core loop after set_role returned");
    }
    Ok(crate::ktest::Outcome::Ran)
}
}
