//! The per-CPU area: what the architecture needs of a core, reached through GS (its own
//! address, its index, the system-call entry's scratch fields and the bytes the entry's fast
//! path writes, its descriptor tables). Each area is allocated on its core's NUMA node and
//! aligned to 128 bytes.
//!
//! State that a subsystem above keeps for each core is declared beside that subsystem as a
//! `CoreSlots<T>` (one cache-line-aligned slot per core, indexed by the core's index), so this
//! file knows none of their types: the memory allocator's per-core caches too (`mm::frame`'s
//! frame caches, `mm::heap`'s slab caches), which this file knows nothing of.

use core::arch::asm;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use crate::arch::x86_64::gdt::{Gdt, Tss};
use crate::arch::x86_64::idt::Idt;
use percore::{CachePadded, MAX_CORES};

/// `PerCpu::injectable` outside system calls (and while a call resolves a page fault); inside
/// one it holds the call's number, truncated to a byte (numbers past `abi::INJECT_CALLS` are
/// `NoSuchCall`, which allocates nothing). `mm::inject` reads it to decide where injection
/// applies.
pub const NOT_IN_CALL: u8 = u8::MAX;

#[repr(C, align(128))]
pub struct PerCpu {
    /// Must stay first: `this()` reads it through GS.
    self_ptr: *const PerCpu,
    /// Dense core index (0 = boot processor). Offset 8, read by `cpu_id()`.
    pub index: usize,
    /// Offsets 16..48 are used by the system-call and user-entry assembly.
    user_rsp_scratch: AtomicU64,
    /// Top of the stack system calls and interrupts from user mode run on (= TSS.rsp0).
    pub entry_stack_top: AtomicU64,
    /// Non-zero: end the user context at the next return to user mode.
    pub exit_requested: AtomicU64,
    return_rsp: AtomicU64,
    pub apic_id: u32,
    pub node: u32,
    pub online: AtomicBool,
    pub stats: CachePadded<CpuStats>,
    pub gdt: Gdt,
    pub tss: Tss,
    pub idt: Idt,
    pub kernel_stack_top: u64,
    /// Set while this core has a context (pending or running): `pcore_run` claims it.
    pub busy: AtomicBool,
    /// Exit code of the context that is ending.
    pub exit_code: AtomicU64,
    /// The core's role (`abi::ROLE_*`).
    pub role: AtomicU64,
    /// A kernel core spinning on its work sets this; posters then skip the wake IPI.
    pub polling: AtomicBool,
    /// Set while this core is inside `roles::kernel_core_loop` (from before its first look at
    /// its role to after its last poll): `roles::set_role` waits for it to clear when a kernel
    /// core leaves its role.
    pub in_kernel_loop: AtomicBool,
    /// The core whose context this core's system calls act in: the client core while a kernel
    /// core runs a forwarded call, else this core's own index (`is_acting` tells which). Read
    /// gs-relative on every share lookup (the private share owner check), so it is one load.
    /// Changed only through `act_for`/`stop_acting`, which keep `acting_area` in step.
    acting_index: AtomicUsize,
    /// The area of `acting_index`: this area, or the client's while acting for it. Read
    /// gs-relative at the start of every system call that names an object (`acting`).
    acting_area: AtomicPtr<PerCpu>,
    /// While this core runs a system call (not a page fault inside it), the call's number
    /// (a byte; the number of the entry a `syscall_batch` runs), else
    /// `mm::inject::NOT_IN_CALL`: where command-line fault injection applies, and which call
    /// an injected failure is counted against.
    pub injectable: AtomicU8,
    /// Set while this core runs a system call (`kobj::kref::call_begins`/`call_ends`): only
    /// then is a last drop's borrow-slot scan deferred to the core's next call. Here, beside
    /// `injectable` (set at the same two points), rather than on the orphan list's line: the
    /// system-call path already holds this area's address, so the flag costs one store each
    /// way (the null call's instructions).
    pub in_call: AtomicBool,
    /// This core's list of orphans waiting for their scan is not empty (`kobj::kref`; set and
    /// cleared under the list's lock, beside the list's own count). The system-call path
    /// tests this byte, in the area it already holds, instead of the list's line.
    pub orphans_pending: AtomicBool,
    /// A `wake` (`nr::WAKE`) for this core that its next `wait` has not consumed yet.
    pub wake_pending: AtomicBool,
    /// The Linux personality of the context running here (`personality`), read by
    /// `syscall_entry_linux`: a `syscall` whose return address lies outside
    /// `[linux_native_lo, linux_native_hi)` goes back to user mode at `linux_upcall`.
    /// Meaningful only while the Linux entry is installed (`linux_upcall != 0`).
    pub linux_native_lo: AtomicU64,
    pub linux_native_hi: AtomicU64,
    pub linux_upcall: AtomicU64,
}

/// Per-core counters (NIX's measuring framework, Corey's fault and shootdown counts).
#[derive(Default)]
pub struct CpuStats {
    pub interrupts: AtomicU64,
    pub ipis_received: AtomicU64,
    pub timer_ticks: AtomicU64,
    pub syscalls: AtomicU64,
    pub soft_faults: AtomicU64,
    pub cow_faults: AtomicU64,
    pub tlb_flushes_local: AtomicU64,
    pub shootdown_ipis_sent: AtomicU64,
    pub shootdown_ipis_received: AtomicU64,
    pub syscalls_forwarded: AtomicU64,
    pub syscalls_served: AtomicU64,
    pub active_messages: AtomicU64,
    pub contexts_started: AtomicU64,
    /// Switches from one user context to another on this core (TC time-sharing).
    pub context_switches: AtomicU64,
    /// Core-scheduler messages (grants, releases) run here: core 0 only (`coresched`).
    pub sched_messages: AtomicU64,
    /// Protected procedure calls on this core that ended without a result (the handler
    /// faulted: `context::abort_call`).
    pub ppc_aborts: AtomicU64,
    /// Halts waiting for an interrupt, and the TSC cycles spent halted (`smp::halt`).
    pub halts: AtomicU64,
    pub halted_cycles: AtomicU64,
    /// The TSC when the halt in progress began (0: not halted).
    pub halted_since: AtomicU64,
    /// Address ranges made on this core: picks each new range's reverse-map bucket
    /// (`kobj::ar::next_rmap_bucket`), so ranges made in turn get different ones.
    pub ranges_made: AtomicU64,
}

// SAFETY: fields mutated by several cores are atomics; the rest is written by the owner only.
unsafe impl Sync for PerCpu {}

// The assembly in arch/x86_64/{syscall,idt}.rs and `this()` depend on these offsets.
const _: () = {
    assert!(core::mem::offset_of!(PerCpu, self_ptr) == 0);
    assert!(core::mem::offset_of!(PerCpu, index) == 8);
    assert!(core::mem::offset_of!(PerCpu, user_rsp_scratch) == 16);
    assert!(core::mem::offset_of!(PerCpu, entry_stack_top) == 24);
    assert!(core::mem::offset_of!(PerCpu, exit_requested) == 32);
    assert!(core::mem::offset_of!(PerCpu, return_rsp) == 40);
};

impl PerCpu {
    pub fn new(index: usize, apic_id: u32, node: u32) -> Self {
        Self {
            self_ptr: core::ptr::null(),
            index,
            user_rsp_scratch: AtomicU64::new(0),
            entry_stack_top: AtomicU64::new(0),
            exit_requested: AtomicU64::new(0),
            return_rsp: AtomicU64::new(0),
            apic_id,
            node,
            online: AtomicBool::new(false),
            stats: CachePadded::new(CpuStats::default()),
            gdt: Gdt::empty(),
            tss: Tss::default(),
            idt: Idt::empty(),
            kernel_stack_top: 0,
            busy: AtomicBool::new(false),
            exit_code: AtomicU64::new(0),
            role: AtomicU64::new(abi::ROLE_XC),
            polling: AtomicBool::new(false),
            in_kernel_loop: AtomicBool::new(false),
            acting_index: AtomicUsize::new(index),
            acting_area: AtomicPtr::new(core::ptr::null_mut()),
            injectable: AtomicU8::new(NOT_IN_CALL),
            in_call: AtomicBool::new(false),
            orphans_pending: AtomicBool::new(false),
            wake_pending: AtomicBool::new(false),
            linux_native_lo: AtomicU64::new(0),
            linux_native_hi: AtomicU64::new(0),
            linux_upcall: AtomicU64::new(0),
        }
    }
}

/// How each core's area is laid out: `PerCpu` first, then the room the layer above keeps at a
/// fixed offset behind it (the running context, which system calls reach through GS, so in
/// one load as before: `context::CoreArea`). This file knows only its size and how to make
/// one. Registered once at boot (`set_layout`), before the first area is made.
pub struct AreaLayout {
    /// Bytes of a whole area (a multiple of `PerCpu`'s 128-byte alignment).
    pub size: usize,
    /// Write a whole area at the address given (room for `size` bytes, 128-byte aligned):
    /// `PerCpu::new(index, apic_id, node)` first, then the room behind it.
    pub make: unsafe fn(*mut PerCpu, usize, u32, u32),
}

static LAYOUT: AtomicPtr<AreaLayout> = AtomicPtr::new(core::ptr::null_mut());

/// Register the areas' layout (once, before the first area is made).
pub fn set_layout(layout: &'static AreaLayout) {
    LAYOUT.store(layout as *const AreaLayout as *mut AreaLayout, Ordering::Release);
}

fn layout() -> &'static AreaLayout {
    let p = LAYOUT.load(Ordering::Acquire);
    assert!(!p.is_null(), "percpu: an area is made before its layout is registered");
    // SAFETY: only `&'static AreaLayout` values are stored in LAYOUT.
    unsafe { &*p }
}

/// Bytes of one core's area (`AreaLayout::size`).
pub fn area_size() -> usize {
    layout().size
}

/// Make a core's area at `p` with the registered layout.
///
/// # Safety
/// `p` must be valid for writes of `area_size()` bytes, 128-byte aligned, and not in use.
pub unsafe fn make_area(p: *mut PerCpu, index: usize, apic_id: u32, node: u32) {
    // SAFETY: the caller's guarantee is the one `make` needs.
    unsafe { (layout().make)(p, index, apic_id, node) }
}

static CPUS: [AtomicPtr<PerCpu>; MAX_CORES] = [const { AtomicPtr::new(core::ptr::null_mut()) }; MAX_CORES];
static ONLINE: AtomicUsize = AtomicUsize::new(0);

/// Publish a core's area so other cores can find it (the boot processor does this for every
/// core before starting it, so `all()` sees every core that exists).
pub fn publish(area: &'static mut PerCpu) -> &'static PerCpu {
    // Every area is made with the registered layout, so the room behind it is there.
    let _ = layout();
    area.self_ptr = area as *const PerCpu;
    *area.acting_area.get_mut() = area as *mut PerCpu;
    CPUS[area.index].store(area, Ordering::Release);
    area
}

/// Make `area` the calling core's per-CPU area (GS base).
pub fn install(area: &'static PerCpu) {
    crate::arch::x86_64::cpu::wrmsr(crate::arch::x86_64::cpu::MSR_GS_BASE, area as *const PerCpu as u64);
    crate::arch::x86_64::cpu::wrmsr(crate::arch::x86_64::cpu::MSR_KERNEL_GS_BASE, 0);
}

/// Mutable access to a published area's descriptor tables, for the core that owns it while
/// it sets itself up (GDT, TSS and IDT are written once, by their owner, before use).
pub fn tables_of(area: &'static PerCpu) -> (&'static mut Gdt, &'static mut Tss, &'static mut Idt) {
    let p = area as *const PerCpu as *mut PerCpu;
    // SAFETY: only the owning core calls this, once, during its bring-up, before anything
    // else reads these three fields; they are disjoint fields of a 'static allocation.
    unsafe { (&mut (*p).gdt, &mut (*p).tss, &mut (*p).idt) }
}

/// Count a core as online (after its area is fully set up).
pub fn mark_online(area: &PerCpu) {
    area.online.store(true, Ordering::Release);
    ONLINE.fetch_add(1, Ordering::AcqRel);
}

pub fn online_count() -> usize {
    ONLINE.load(Ordering::Acquire)
}

/// The calling core's area.
#[inline(always)]
pub fn this() -> &'static PerCpu {
    let p: *const PerCpu;
    // SAFETY: GS base points at this core's PerCpu (installed before any caller runs), whose
    // first field is its own address.
    unsafe {
        asm!("mov {}, gs:[0]", out(reg) p, options(nostack, readonly, preserves_flags));
        &*p
    }
}

/// The calling core's dense index, for `percore::cpu_id()` (which reaches it through a
/// function pointer; kernel code on hot paths calls this directly: one gs-relative load).
#[inline(always)]
pub fn current_index() -> usize {
    let i: usize;
    // SAFETY: as for `this`; offset 8 is `index`.
    unsafe { asm!("mov {}, gs:[8]", out(reg) i, options(nostack, readonly, preserves_flags)) }
    i
}

/// The area whose context system calls on this core act in: our own, or while a kernel core
/// runs a forwarded call, the client's.
#[inline(always)]
pub fn acting() -> &'static PerCpu {
    let p: *const PerCpu;
    // SAFETY: as for `this`: GS points at this core's PerCpu, and `acting_area` is a field of
    // it (an AtomicPtr; a plain aligned load is an atomic load on x86-64) that only this core
    // writes. It holds a published area's address from `publish` on (areas are published
    // before their core runs anything) and is only ever set to published areas, which are
    // 'static.
    unsafe {
        asm!("mov {}, gs:[{off}]", out(reg) p, off = const core::mem::offset_of!(PerCpu, acting_area), options(nostack, readonly, preserves_flags));
        &*p
    }
}

/// `acting().index` in one gs-relative load: the index of the core whose context this core's
/// system calls act in (on the path of every share lookup, for the private-share check).
#[inline(always)]
pub fn acting_index() -> usize {
    let i: usize;
    // SAFETY: as for `this`: GS points at this core's PerCpu, and `acting_index` is a field
    // of it (an AtomicUsize; a plain aligned load is an atomic load on x86-64). Only this core
    // writes it.
    unsafe {
        asm!("mov {}, gs:[{off}]", out(reg) i, off = const core::mem::offset_of!(PerCpu, acting_index), options(nostack, readonly, preserves_flags))
    }
    i
}

impl PerCpu {
    /// Start acting for `client`'s context (a kernel core serving a forwarded call).
    pub fn act_for(&self, client: &'static PerCpu) {
        self.acting_area.store(client as *const PerCpu as *mut PerCpu, Ordering::Release);
        self.acting_index.store(client.index, Ordering::Release);
    }

    /// Whether this core is running a forwarded call in another core's context (its own
    /// core only reads this).
    #[inline]
    pub fn is_acting(&self) -> bool {
        self.acting_index.load(Ordering::Acquire) != self.index
    }

    /// Act for this core's own context again.
    pub fn stop_acting(&self) {
        self.acting_index.store(self.index, Ordering::Release);
        self.acting_area.store(self as *const PerCpu as *mut PerCpu, Ordering::Release);
    }
}

/// Another core's area, if it exists.
#[inline]
pub fn get(index: usize) -> Option<&'static PerCpu> {
    let p = CPUS.get(index)?.load(Ordering::Acquire);
    // SAFETY: areas are published once, never freed, and 'static.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Every published area, in index order.
pub fn all() -> impl Iterator<Item = &'static PerCpu> {
    (0..MAX_CORES).map_while(get)
}

/// State a subsystem keeps for every core, declared beside the subsystem that owns it:
/// `static X: CoreSlots<T> = CoreSlots::new([const { CachePadded::new(T::new()) }; MAX_CORES]);`.
/// One slot per possible core, each on its own cache lines (`CachePadded`), found by the
/// core's index (one gs-relative load, then the slot's fixed address).
pub struct CoreSlots<T>([CachePadded<T>; MAX_CORES]);

impl<T> CoreSlots<T> {
    pub const fn new(slots: [CachePadded<T>; MAX_CORES]) -> Self {
        CoreSlots(slots)
    }

    /// The calling core's slot.
    #[inline(always)]
    pub fn this(&self) -> &T {
        let i = current_index();
        // SAFETY: a core's index is below MAX_CORES (`publish` stores its area at that index
        // of a MAX_CORES array, and GS points at a published area before any caller runs).
        unsafe { self.0.get_unchecked(i) }
    }

    /// The slot of the core whose context this core's system calls act in (`acting_index`).
    #[inline(always)]
    pub fn acting(&self) -> &T {
        let i = acting_index();
        // SAFETY: as for `this`: `acting_index` only ever holds a published core's index.
        unsafe { self.0.get_unchecked(i) }
    }

    /// The calling core's slot and the core's index, from one gs-relative load (the
    /// allocator's paths need both).
    #[inline(always)]
    pub fn this_and_index(&self) -> (&T, usize) {
        let i = current_index();
        // SAFETY: as for `this`.
        (unsafe { self.0.get_unchecked(i) }, i)
    }

    /// The slot of core `index`, if there can be such a core.
    #[inline]
    pub fn get(&self, index: usize) -> Option<&T> {
        self.0.get(index).map(|s| &**s)
    }

    /// The slot of core `area`.
    #[inline(always)]
    pub fn of(&self, area: &PerCpu) -> &T {
        self.at(area.index)
    }

    /// The slot of core `index` (an index below MAX_CORES: a core's `index`).
    #[inline]
    pub fn at(&self, index: usize) -> &T {
        &self.0[index]
    }
}
