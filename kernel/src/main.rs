//! The kernel: boots on every core, sets up per-core memory, and (for now) runs its tests or
//! halts. See docs/boot.md for the boot sequence.
#![no_std]
#![no_main]

extern crate alloc;

pub mod arch;
pub mod bootinfo;
pub mod ksyms;
pub mod ktest;
pub mod log;
pub mod mm;
pub mod percpu;
pub mod roles;
pub mod coresched;
pub mod dev;
pub mod sched;
pub mod smp;
pub mod time;
pub mod topology;

mod tests;
pub mod context;
pub mod elf;
pub mod init;
pub mod initrd;
pub mod kobj;
pub mod personality;
pub mod syscall;

use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::sync::atomic::Ordering;

use arch::x86_64::acpi;
use arch::x86_64::{apic, cpu, serial};
use mm::frame::NodeRange;
use log::kprintln;
use percpu::PerCpu;

/// Smallest memory we boot with: page maps, per-core areas and stacks need room.
const MIN_USABLE_MIB: u64 = 24;

struct BspArea(UnsafeCell<MaybeUninit<context::CoreArea>>);
// SAFETY: written once by the boot processor before any other core exists.
unsafe impl Sync for BspArea {}
static BSP_AREA: BspArea = BspArea(UnsafeCell::new(MaybeUninit::uninit()));

#[repr(C, align(4096))]
struct IstStacks([[u8; arch::x86_64::gdt::IST_STACK_SIZE]; 3]);
struct BspIst(UnsafeCell<IstStacks>);
// SAFETY: used only as raw stack memory by the boot processor's CPU.
unsafe impl Sync for BspIst {}
static BSP_IST: BspIst = BspIst(UnsafeCell::new(IstStacks([[0; arch::x86_64::gdt::IST_STACK_SIZE]; 3])));

/// Stop with one clear line and the failure exit code.
fn boot_failed(why: &str) -> ! {
    kprintln!("boot: failed: {why}");
    cpu::exit_qemu(false)
}

/// The boot processor's stack for system calls and interrupts from user mode.
#[repr(C, align(4096))]
struct EntryStack([u8; 64 * 1024]);
struct BspEntry(UnsafeCell<EntryStack>);
// SAFETY: used only as raw stack memory by the boot processor's CPU.
unsafe impl Sync for BspEntry {}
static BSP_ENTRY_STACK: BspEntry = BspEntry(UnsafeCell::new(EntryStack([0; 64 * 1024])));

fn setup_bsp_area() -> &'static PerCpu {
    percpu::set_layout(&context::AREA_LAYOUT);
    // SAFETY: single-threaded: we are the only core running, and this runs once.
    let area: &'static mut PerCpu = unsafe {
        let p = (*BSP_AREA.0.get()).as_mut_ptr() as *mut PerCpu;
        percpu::make_area(p, 0, 0, 0);
        &mut *p
    };
    let ist_base = BSP_IST.0.get() as u64;
    for i in 0..3 {
        area.tss.ist[i] = ist_base + ((i + 1) * arch::x86_64::gdt::IST_STACK_SIZE) as u64;
    }
    let entry_top = BSP_ENTRY_STACK.0.get() as u64 + core::mem::size_of::<EntryStack>() as u64;
    area.tss.rsp[0] = entry_top;
    area.entry_stack_top.store(entry_top, Ordering::Relaxed);
    let area = percpu::publish(area);
    percpu::install(area);
    area
}

/// Usable RAM split by NUMA node: RAM minus the first MiB (trampoline, firmware), the
/// kernel image and the boot module, clipped to the mapped physical window.
fn usable_ranges(bi: &bootinfo::BootInfo, acpi: &acpi::AcpiInfo, out: &mut [NodeRange; 256]) -> (usize, u64) {
    let window_end: u64 = mm::mapped_phys_end();
    let mut reserved = [mm::kernel_image_phys(), (0, 0)];
    if let Some(m) = bi.module {
        reserved[1] = (m.start & !4095, (m.end + 4095) & !4095);
    }
    reserved.sort();
    let mut n = 0;
    let mut dropped = 0u64;
    let mut push = |start: u64, end: u64, node: u32, n: &mut usize| {
        let start = (start + 4095) & !4095;
        let end = end & !4095;
        if end > start && *n < out.len() {
            out[*n] = NodeRange { start, end, node };
            *n += 1;
        }
    };
    for r in bi.ram() {
        if r.end > window_end {
            dropped += r.end - r.start.max(window_end);
        }
        // Subtract the reserved ranges (sorted) from [start, end).
        let (mut cur, end) = (r.start.max(1 << 20), r.end.min(window_end));
        let mut pieces = [(0u64, 0u64); 3];
        let mut np = 0;
        for &(rs, re) in &reserved {
            if re <= rs || re <= cur || rs >= end {
                continue;
            }
            if rs > cur {
                pieces[np] = (cur, rs);
                np += 1;
            }
            cur = cur.max(re);
        }
        if cur < end {
            pieces[np] = (cur, end);
            np += 1;
        }
        for &(s, e) in &pieces[..np] {
            if !acpi.has_srat || acpi.mem_count == 0 {
                push(s, e, 0, &mut n);
                continue;
            }
            // Split by SRAT memory affinity; anything not covered goes to node 0.
            let mut cur = s;
            while cur < e {
                let hit = acpi.mem[..acpi.mem_count].iter().find(|m| m.start <= cur && cur < m.end);
                match hit {
                    Some(m) => {
                        let stop = m.end.min(e);
                        push(cur, stop, m.node, &mut n);
                        cur = stop;
                    }
                    None => {
                        let next = acpi.mem[..acpi.mem_count].iter().filter(|m| m.start > cur).map(|m| m.start).min().unwrap_or(e).min(e);
                        push(cur, next, 0, &mut n);
                        cur = next;
                    }
                }
            }
        }
    }
    (n, dropped)
}

#[no_mangle]
extern "C" fn kernel_entry(protocol: u32, info_phys: u32) -> ! {
    time::record_boot_start();
    serial::init();
    let bsp = setup_bsp_area();
    percore::cpu::set_cpu_id_provider(percpu::current_index);
    percore::cpu::set_irq_ops(cpu::irq_save, cpu::irq_restore);
    percore::cpu::set_cycle_counter(cpu::rdtsc);
    let (g, t, i) = percpu::tables_of(bsp);
    arch::x86_64::gdt::load(g, t);
    arch::x86_64::idt::load(i);
    arch::x86_64::idt::set_fault_handler(context::handle_exception);
    roles::set_dispatch(syscall::dispatch);

    let bi = match bootinfo::parse(protocol, info_phys as u64) {
        Ok(b) => b,
        Err(e) => boot_failed(e),
    };
    if cpu::cpuid(1, 0).edx & (1 << 9) == 0 {
        boot_failed("CPU lacks a local APIC, which SMP and timers need");
    }
    if cpu::cpuid(1, 0).edx & (1 << 4) == 0 {
        boot_failed("CPU lacks a time-stamp counter");
    }
    apic::init_local();
    let bsp_apic = apic::id();
    let acpi = match acpi::parse(bi.rsdp, bsp_apic) {
        Ok(a) => a,
        Err(e) => boot_failed(e),
    };

    // Map RAM above 4 GiB into the physical window, taking page directories from the first
    // usable range above the kernel image.
    let ram_end = bi.ram().iter().map(|r| r.end).max().unwrap_or(0);
    if ram_end > 4 << 30 {
        let (_, kend) = mm::kernel_image_phys();
        let mut next = (kend + 4095) & !4095;
        let limit = bi.ram().iter().find(|r| r.start <= next && next < r.end).map(|r| r.end.min(4 << 30)).unwrap_or(next);
        let take = || {
            if next + 4096 <= limit {
                next += 4096;
                Some(next - 4096)
            } else {
                None
            }
        };
        match arch::x86_64::boot::extend_phys_window(ram_end, take) {
            Ok(end) => mm::set_mapped_phys_end(end),
            Err(e) => boot_failed(e),
        }
        // The page directories now sit right after the image: keep them out of the pools.
        mm::reserve_after_kernel(next);
    }

    // Physical memory, by node.
    let mut ranges = [NodeRange { start: 0, end: 0, node: 0 }; 256];
    let (nranges, dropped) = usable_ranges(&bi, &acpi, &mut ranges);
    let usable: u64 = ranges[..nranges].iter().map(|r| r.end - r.start).sum();
    if usable < MIN_USABLE_MIB << 20 {
        // No heap yet: format straight to the console.
        kprintln!("boot: failed: too little memory: {} MiB usable, need at least {} MiB", usable >> 20, MIN_USABLE_MIB);
        cpu::exit_qemu(false);
    }
    mm::set_ram_end(bi.ram().iter().map(|r| r.end).max().unwrap_or(0));
    if let Err(e) = mm::frame::init(&ranges[..nranges], acpi.node_count) {
        boot_failed(e);
    }
    if let Some(m) = bi.module {
        initrd::set(m.start, m.end - m.start);
    }
    if dropped > 0 {
        kprintln!("mm: {} MiB above 4 GiB not used yet (the physical window maps 4 GiB)", dropped >> 20);
    }
    for a in 0..acpi.node_count {
        for b in 0..acpi.node_count {
            let d = acpi.slit.as_ref().map(|m| m[a][b]).unwrap_or(if a == b { 10 } else { 20 });
            topology::set_numa_distance(a, b, d);
        }
    }

    if time::calibrate_tsc().is_none() {
        kprintln!("time: PIT did not count; assuming a 1 GHz TSC");
    }
    apic::calibrate_timer();
    sched::register_handlers();
    if let Some((base, gsi_base)) = acpi.ioapic {
        arch::x86_64::ioapic::set_base(base, gsi_base);
    }
    serial::enable_rx_interrupt(acpi.com1_gsi);
    tests::register_handlers();

    // The boot processor's own record, then everyone else.
    let cpus: alloc::vec::Vec<(u32, u32)> = acpi.cpus[..acpi.cpu_count].iter().map(|c| (c.apic_id, c.node)).collect();
    // The boot processor's node is known only now, from the SRAT.
    set_bsp_node(bsp, cpus[0].1);
    smp::init_this_core(bsp);
    let online = smp::start_aps(&cpus, roles::idle_loop);
    percore::cpu::set_core_count(online);
    kobj::share::init_reclaim(online);

    // The identity map was only needed to switch modes and start APs.
    arch::x86_64::boot::remove_identity_map();
    smp::run_on_all(&|_| cpu::flush_tlb_local());

    let usable_mib = mm::frame::free_pages() * mm::PAGE_SIZE / (1 << 20);
    kprintln!(
        "boot: {}/{} cores online, {} MiB usable, {} NUMA nodes, {} ms",
        online,
        acpi.cpu_count,
        usable_mib,
        acpi.node_count,
        time::uptime_ns() / 1_000_000
    );
    kprintln!(
        "boot: via {}, {} APIC, TSC {} MHz, LAPIC timer {} kHz, {} kernel symbols, cmdline \"{}\"",
        bi.protocol,
        if apic::is_x2apic() { "x2" } else { "x" },
        time::tsc_per_ms() / 1000,
        apic::timer_ticks_per_ms(),
        ksyms::count(),
        bi.cmdline()
    );

    // Devices: before any user address range exists (kernel mappings are copied into each).
    dev::init(acpi.ecam);

    if let Some(spec) = bi.option("roles") {
        match roles::apply_boot_policy(spec) {
            Ok(()) => kprintln!("roles: {spec}"),
            Err(why) => bootinfo::boot_option_error(&alloc::format!("roles={spec} not applied: {why}; every core stays XC")),
        }
    }
    if bi.has_flag("kcmark") {
        roles::mark_kernel_core_passes();
        // The benchmark harness looks for this line (xtask/src/bench/net.rs, KCMARK_LINE).
        kprintln!("kcmark: kernel cores mark each pass of their loop as work or idle for insncount");
    }
    if let Some(value) = bi.option("sched") {
        match coresched::apply_boot_option(value) {
            Ok(()) => kprintln!("sched: core 0 grants cores (core_request, core_release)"),
            Err(why) => bootinfo::boot_option_error(&alloc::format!("sched={value} not applied: {why}; the core scheduler stays off")),
        }
    }
    match bi.option("crash") {
        Some("pagefault") => deliberate_page_fault(),
        Some("panic") => panic!("deliberate panic requested on the command line"),
        Some(other) => kprintln!("kernel: unknown crash={other} (known: pagefault, panic); ignored"),
        None => {}
    }
    if bi.has_flag("topology") {
        topology::print();
    }
    if bi.has_flag("test") {
        let ok = ktest::run_all(bi.option("test").filter(|f| !f.is_empty()));
        finish(ok);
    }
    // `bench=NAME k=v...` (what the measurement tools pass): run the microbench program.
    if bi.option("init").is_none() {
        if let Some(bench) = bi.option("bench").filter(|n| !n.is_empty()) {
            let mut args = alloc::string::String::from(bench);
            for w in bi.cmdline().split_whitespace().filter(|w| w.starts_with("iters=")) {
                args.push(' ');
                args.push_str(w);
            }
            let ok = init::run("microbench", &args, bi.option("inject"), bi.option("inject_from"));
            finish(ok);
        }
    }
    if let Some(name) = bi.option("init").filter(|n| !n.is_empty()) {
        // Everything after `--` is the program's arguments.
        let args = bi.cmdline().split_once(" -- ").map(|(_, a)| a).unwrap_or("");
        // A path (`init=/bin/busybox -- sh`) names a static Linux program on the root file
        // system: the Linux runtime of the boot image runs it (docs/linux-exec.md).
        let ok = if name.starts_with('/') {
            let words = alloc::format!("{name} {args}");
            init::run("linuxrt", words.trim_end(), bi.option("inject"), bi.option("inject_from"))
        } else {
            init::run(name, args, bi.option("inject"), bi.option("inject_from"))
        };
        finish(ok);
    }
    kprintln!("kernel: boot complete; no init= program given, halting");
    finish(true)
}

/// Set when a command-line option could not be applied.
/// Power off with the run's verdict: success only if `ok` and every command-line option was
/// applied.
fn finish(ok: bool) -> ! {
    let option_failed = bootinfo::boot_option_failed();
    if option_failed {
        kprintln!("kernel: exit status failure: a command-line option was not applied (the `boot: error:` line above)");
    }
    cpu::exit_qemu(ok && !option_failed)
}

/// `crash=pagefault`: touch an unmapped address so the exception report can be checked.
#[inline(never)]
fn deliberate_page_fault() {
    // SAFETY: not safe by design: address 0x10 is unmapped (the identity map is gone), so this
    // faults and the exception handler reports and stops the machine. Only reached on request.
    unsafe { core::arch::asm!("mov rax, [0x10]", out("rax") _) };
}

fn set_bsp_node(bsp: &'static PerCpu, node: u32) {
    let p = bsp as *const PerCpu as *mut PerCpu;
    // SAFETY: single-threaded boot; no other core reads the BSP's area yet.
    unsafe { (*p).node = node };
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    cpu::disable_interrupts();
    serial::write_fmt_emergency(format_args!("[{}] KERNEL PANIC: {}\n", percore::cpu_id(), info));
    arch::x86_64::idt::backtrace_from(cpu::frame_pointer());
    cpu::exit_qemu(false)
}
