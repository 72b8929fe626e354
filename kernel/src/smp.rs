//! Starting the application processors, and running a function on every core.

use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use crate::arch::x86_64::{apic, boot, cpu, gdt};
use crate::mm::{frame, phys_to_virt, PAGE_SIZE};
use crate::percpu::{self, CoreSlots, PerCpu};
use crate::log::kprintln;
use crate::time;
use percore::{CachePadded, MAX_CORES};

/// Kernel stack per core: 64 KiB.
const STACK_ORDER: usize = 4;
/// Each IST stack: 16 KiB.
const IST_ORDER: usize = 2;

/// A function posted to other cores' mailboxes. Lives on the poster's stack; the poster
/// waits until `pending` reaches zero before returning, so the pointer never dangles.
pub struct Job {
    run: *const (dyn Fn(usize) + Sync),
    pending: AtomicUsize,
}

/// Jobs posted to each core by the others (a lock-free stack of poster-owned nodes, drained by
/// its owner after a wake IPI).
static MAILBOX: CoreSlots<AtomicPtr<JobNode>> = CoreSlots::new([const { CachePadded::new(AtomicPtr::new(core::ptr::null_mut())) }; MAX_CORES]);

/// One target's link in its mailbox (a lock-free multi-producer stack drained by its owner).
pub struct JobNode {
    next: *mut JobNode,
    job: *const Job,
}

/// Run `f(core_index)` on every online core (this one included) and wait for all of them.
pub fn run_on_all(f: &(dyn Fn(usize) + Sync)) {
    let cores = percpu::online_count();
    run_on(f, 0..cores, true);
}

/// Run `f` on each core in `targets` (and on this core too if `include_self`), then wait.
/// Targets run it from their wake-IPI handler (or their idle loop), so it must be short and
/// must not take locks an interrupted thread of that core could hold. While waiting we
/// serve our own mailbox, so two cores posting to each other cannot deadlock.
pub fn run_on(f: &(dyn Fn(usize) + Sync), targets: impl Iterator<Item = usize> + Clone, include_self: bool) {
    run_on_until(f, targets, include_self, None)
}

/// `run_on` with a deadline for invariant checks: a core that does not answer within
/// `deadline_ms` is a kernel failure, reported, and the machine stops (we cannot return: the
/// posted job lives on this stack).
pub fn run_on_all_or_stop(f: &(dyn Fn(usize) + Sync), deadline_ms: u64) {
    run_on_until(f, 0..percpu::online_count(), true, Some(deadline_ms))
}

fn run_on_until(f: &(dyn Fn(usize) + Sync), targets: impl Iterator<Item = usize> + Clone, include_self: bool, deadline_ms: Option<u64>) {
    let me = percpu::this();
    // SAFETY: the lifetime is erased only for the duration of this call: we wait for every
    // target to finish (pending == 0) before returning, so `f` outlives every use.
    let run: *const (dyn Fn(usize) + Sync) = unsafe { core::mem::transmute(f as *const (dyn Fn(usize) + Sync + '_)) };
    let job = Job { run, pending: AtomicUsize::new(0) };
    // One node per possible target, left uninitialised: zeroing 4 KiB on every message was
    // most of a one-target message's cost. A node is written whole before it is published.
    let mut nodes = [const { core::mem::MaybeUninit::<JobNode>::uninit() }; MAX_CORES];
    for t in targets.clone() {
        if t == me.index || t >= MAX_CORES {
            continue;
        }
        let Some(target) = percpu::get(t).filter(|c| c.online.load(Ordering::Acquire)) else { continue };
        job.pending.fetch_add(1, Ordering::AcqRel);
        let node = nodes[t].write(JobNode { next: core::ptr::null_mut(), job: &job }) as *mut JobNode;
        let head = MAILBOX.of(target);
        let mut cur = head.load(Ordering::Acquire);
        loop {
            // SAFETY: the node is initialised (just written) and ours until the target takes
            // it, which it can only do after the CAS below publishes it.
            unsafe { (*node).next = cur };
            match head.compare_exchange_weak(cur, node, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        apic::send_ipi(target.apic_id, apic::VECTOR_WAKE);
    }
    if include_self {
        f(me.index);
    }
    let deadline = deadline_ms.map(time::Deadline::after_ms);
    while job.pending.load(Ordering::Acquire) != 0 {
        run_mailbox(me);
        if deadline.as_ref().is_some_and(|d| d.expired()) {
            kprintln!("smp: {} core(s) did not answer an active message within {} ms", job.pending.load(Ordering::Acquire), deadline_ms.unwrap_or(0));
            cpu::exit_qemu(false);
        }
        core::hint::spin_loop();
    }
}

/// Whether a job waits in this core's mailbox.
pub fn mailbox_pending(area: &PerCpu) -> bool {
    !MAILBOX.of(area).load(Ordering::Acquire).is_null()
}

/// Run every job posted to this core. Returns true if any ran.
pub fn run_mailbox(area: &PerCpu) -> bool {
    // A look before the swap: pollers call this in a loop, and an empty mailbox should not
    // cost a write to a line other cores post to.
    if !mailbox_pending(area) {
        return false;
    }
    let mut n = MAILBOX.of(area).swap(core::ptr::null_mut(), Ordering::AcqRel);
    let any = !n.is_null();
    while !n.is_null() {
        // SAFETY: the poster keeps the node, the Job and the function alive until we
        // decrement pending; we read `next` before that.
        unsafe {
            let next = (*n).next;
            let job = (*n).job;
            let f = &*(*job).run;
            f(area.index);
            area.stats.active_messages.fetch_add(1, Ordering::Relaxed);
            (*job).pending.fetch_sub(1, Ordering::AcqRel);
            n = next;
        }
    }
    any
}

/// Halt this core until an interrupt comes, counting the halt and the TSC cycles spent
/// halted (`CoreStats::halts`, `halted_cycles`). Called with interrupts off after the caller
/// looked for work: `sti; hlt` is atomic with respect to an interrupt raised after that look,
/// so no wake-up is lost. Returns with interrupts on, after the interrupt's handler ran.
pub fn halt(area: &PerCpu) {
    let t0 = cpu::rdtsc();
    // Readers add the halt in progress (`core_stats`): a core halted for a whole window
    // shows it. Cleared before the total grows, so a reader may miss a moment, never count
    // one twice.
    area.stats.halted_since.store(t0, Ordering::Relaxed);
    cpu::enable_and_halt();
    let t1 = cpu::rdtsc();
    area.stats.halted_since.store(0, Ordering::Relaxed);
    area.stats.halts.fetch_add(1, Ordering::Relaxed);
    area.stats.halted_cycles.fetch_add(t1.saturating_sub(t0), Ordering::Relaxed);
}

/// Halt until an interrupt, for at most `timeout_us`: a one-shot timer bounds it unless the
/// core's periodic tick already does. Called with interrupts off; returns with them off.
pub fn halt_at_most(area: &PerCpu, timeout_us: u64) {
    let periodic = apic::timer_hz() != 0;
    if !periodic {
        apic::timer_oneshot_us(timeout_us);
    }
    halt(area);
    cpu::disable_interrupts();
    if !periodic {
        apic::timer_periodic_us(0);
    }
}

fn alloc_zeroed(order: usize, node: u32) -> Option<u64> {
    let _ = node; // allocation prefers the calling core's node; per-node placement is a TODO
    let pa = frame::alloc_frames(order)?;
    // SAFETY: freshly allocated frames, mapped in the physical window.
    unsafe { core::ptr::write_bytes(phys_to_virt(pa) as *mut u8, 0, (PAGE_SIZE as usize) << order) };
    Some(pa)
}

/// Allocate and publish a per-CPU area with its stacks for core `index`.
pub fn prepare_area(index: usize, apic_id: u32, node: u32) -> Option<&'static PerCpu> {
    let size = percpu::area_size() as u64;
    let order = (size.div_ceil(PAGE_SIZE)).next_power_of_two().trailing_zeros() as usize;
    let pa = alloc_zeroed(order, node)?;
    let stack = alloc_zeroed(STACK_ORDER, node)?;
    let entry_stack = alloc_zeroed(STACK_ORDER, node)?;
    let ist: [u64; 3] = [alloc_zeroed(IST_ORDER, node)?, alloc_zeroed(IST_ORDER, node)?, alloc_zeroed(IST_ORDER, node)?];
    let ptr = phys_to_virt(pa) as *mut PerCpu;
    // SAFETY: the frames are ours, large enough for a whole area, and page-aligned (>= 128).
    let area: &'static mut PerCpu = unsafe {
        percpu::make_area(ptr, index, apic_id, node);
        &mut *ptr
    };
    area.kernel_stack_top = phys_to_virt(stack) + (PAGE_SIZE << STACK_ORDER);
    for (i, s) in ist.iter().enumerate() {
        area.tss.ist[i] = phys_to_virt(*s) + (PAGE_SIZE << IST_ORDER);
    }
    let entry_top = phys_to_virt(entry_stack) + (PAGE_SIZE << STACK_ORDER);
    area.tss.rsp[0] = entry_top;
    area.entry_stack_top.store(entry_top, Ordering::Relaxed);
    Some(percpu::publish(area))
}

/// Per-core setup shared by the boot processor and the others: descriptor tables, APIC,
/// topology, then online.
pub fn init_this_core(area: &'static PerCpu) {
    let (g, t, i) = percpu::tables_of(area);
    gdt::load(g, t);
    crate::arch::x86_64::idt::load(i);
    crate::arch::x86_64::syscall::init_core();
    apic::init_local();
    let topo = crate::topology::detect(apic::id(), area.node);
    crate::topology::set(area, topo);
    percpu::mark_online(area);
}

/// What a started processor runs once it is online (`start_aps`' `then`): a `fn() -> !`,
/// set before the first processor starts.
static AP_MAIN: AtomicUsize = AtomicUsize::new(0);

#[no_mangle]
extern "C" fn ap_entry(index: u32) -> ! {
    let Some(area) = percpu::get(index as usize) else { cpu::halt_forever() };
    percpu::install(area);
    init_this_core(area);
    let main = AP_MAIN.load(Ordering::Acquire);
    if main == 0 {
        cpu::halt_forever()
    }
    // SAFETY: only `fn() -> !` values are stored in AP_MAIN.
    let main: fn() -> ! = unsafe { core::mem::transmute::<usize, fn() -> !>(main) };
    main()
}

extern "C" {
    fn ap_trampoline_entry();
}

core::arch::global_asm!(
    r#"
    .section .text.ap_trampoline_entry, "ax"
    .global ap_trampoline_entry
ap_trampoline_entry:
    /* rsp = this core's stack, edi = core index (set by the trampoline) */
    and $-16, %rsp
    call ap_entry
1:  cli
    hlt
    jmp 1b
"#,
    options(att_syntax)
);

/// Start every processor in `cpus` (index 0 is us); each runs `then` once it is online (the
/// layers above decide what a core does). Returns how many came online in total.
pub fn start_aps(cpus: &[(u32, u32)], then: fn() -> !) -> usize {
    AP_MAIN.store(then as usize, Ordering::Release);
    // Copy the trampoline template below 1 MiB.
    let (tmpl, len, slots_off) = boot::trampoline_template();
    // SAFETY: the first MiB is excluded from the page pools; 0x8000.. is ours, and the
    // template is a byte range in the kernel image.
    unsafe {
        core::ptr::copy_nonoverlapping(phys_to_virt(tmpl) as *const u8, phys_to_virt(boot::TRAMPOLINE_PHYS) as *mut u8, len);
    }
    let slot = |off: usize| (phys_to_virt(boot::TRAMPOLINE_PHYS) + (slots_off + off) as u64) as *mut u64;
    // SAFETY: the slots lie inside the copied trampoline.
    unsafe {
        slot(boot::TRAMP_SLOT_CR3).write_volatile(boot::boot_pml4_phys());
        slot(boot::TRAMP_SLOT_EFER).write_volatile(boot::efer_extra() as u64);
        slot(boot::TRAMP_SLOT_ENTRY).write_volatile(ap_trampoline_entry as *const () as u64);
    }
    // INIT every AP once, then one wait, then start them one by one (they share the slots).
    for &(apic_id, _) in &cpus[1..] {
        apic::send_init(apic_id);
        apic::send_init_deassert(apic_id);
    }
    time::spin_us(10_000);
    for (index, &(apic_id, node)) in cpus.iter().enumerate().skip(1) {
        let Some(area) = prepare_area(index, apic_id, node) else {
            kprintln!("smp: out of memory preparing core {index}; not starting it");
            continue;
        };
        // SAFETY: as above; no AP is reading the slots now (the previous one is online).
        unsafe {
            slot(boot::TRAMP_SLOT_STACK).write_volatile(area.kernel_stack_top);
            slot(boot::TRAMP_SLOT_CPU).write_volatile(index as u64);
        }
        let page = (boot::TRAMPOLINE_PHYS >> 12) as u8;
        apic::send_sipi(apic_id, page);
        let quick = time::Deadline::after_ms(100);
        while !area.online.load(Ordering::Acquire) && !quick.expired() {
            core::hint::spin_loop();
        }
        if !area.online.load(Ordering::Acquire) {
            apic::send_sipi(apic_id, page);
            // TCG with many vCPUs on few host cores can be slow to schedule the new vCPU.
            let slow = time::Deadline::after_ms(5_000);
            while !area.online.load(Ordering::Acquire) && !slow.expired() {
                core::hint::spin_loop();
            }
        }
        if !area.online.load(Ordering::Acquire) {
            kprintln!("smp: core {index} (APIC id {apic_id}) did not come online");
        }
    }
    percpu::online_count()
}
