//! Kernel tests of the drivers through their one interface (`dev::Driver`): a disk in
//! Dedicated mode attached to a kernel core. They need a disk and two cores, which the kernel
//! test boots do not have, so they run only when named (`ktest! { on_request ... }`): the `fs`
//! suite boots `test=kernel::dev::ktests` with its disk; by hand,
//! `cargo xtask run --smp 2 --disk IMG --cmdline "test=kernel::dev::ktests"`.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use abi::{blk_data_offset, blk_done_page, blk_done_parse, blk_slot_word, blk_submit_page, blk_submit_words, blk_tag, Error, BUF_BLK_READ, PAGE_SIZE};
use virtio_drivers::transport::DeviceType;

use super::{DriverRef, SharedMemory};
use crate::kobj::kref::KRef;
use crate::ktest::{kassert, ktest};
use crate::{percpu, time};

/// Pages of the test's request segment: the header, one ring's two pages, one data page.
const PAGES: usize = 4;
const WORDS: usize = PAGES * (PAGE_SIZE as usize / 8);

/// Kernel memory standing in for a program's segment: page-aligned and physically contiguous
/// (a heap allocation above the largest slab class comes from whole frames), shared between
/// the driver (which pins it) and the test (which reads and writes the rings in it).
struct TestMemory(KRef<Vec<AtomicU64>>);

impl TestMemory {
    fn new() -> Result<KRef<Vec<AtomicU64>>, alloc::string::String> {
        let mut v = Vec::new();
        v.try_reserve_exact(WORDS).map_err(|_| "no memory for the test segment")?;
        v.extend((0..WORDS).map(|_| AtomicU64::new(0)));
        kassert!(v.as_ptr() as u64 % PAGE_SIZE == 0, "the test segment is not page-aligned");
        KRef::try_new(v).map_err(|_| "no memory for the test segment".into())
    }

    fn page(mem: &[AtomicU64], p: u64) -> &[AtomicU64] {
        let w = PAGE_SIZE as usize / 8;
        &mem[p as usize * w..(p as usize + 1) * w]
    }
}

impl SharedMemory for TestMemory {
    fn nbytes(&self) -> Result<u64, Error> {
        Ok((PAGES as u64) * PAGE_SIZE)
    }

    fn pin(&self, npages: usize) -> Result<Vec<u64>, Error> {
        if npages > PAGES {
            return Err(Error::OutOfRange);
        }
        let base = crate::mm::virt_to_phys(self.0.as_ptr() as u64);
        let mut v = Vec::new();
        v.try_reserve_exact(npages).map_err(|_| Error::NoMemory)?;
        v.extend((0..npages as u64).map(|i| base + i * PAGE_SIZE));
        Ok(v)
    }

    fn unpin(&self) {}
}

// The disk's kernel core sleeps when it has nothing to do and wakes for a request: with a
// disk attached in Dedicated mode and no request, the kernel core halts again and again
// (bounded halts, `blk::KC_SLEEP_US`) and spends most of a 300 ms window halted; a request
// posted on the ring then still completes. Planted bugs caught: `BlkDev::sleep_after_us`
// returning `None` (the core polls for ever, no halt counted: the state before the disk
// slept); a halt with no bound and nothing to end it (the request never completes).
ktest! {
on_request fn disk_kernel_core_sleeps_when_idle_and_wakes_for_a_request() {
    let cores = percpu::online_count();
    kassert!(cores >= 2, "needs 2 or more cores, the boot has {cores}");
    let Some(f) = super::pci::find_virtio(DeviceType::Block) else {
        return Err("no disk (boot with --disk IMG)".into());
    };
    let kc = cores - 1; // never core 0, which may not be a kernel core
    let area = percpu::get(kc).ok_or_else(|| alloc::format!("core {kc} has no area"))?;
    crate::roles::set_role(kc, abi::ROLE_KC).map_err(|e| alloc::format!("set_role KC: {}", e.as_str()))?;
    let mem = TestMemory::new();
    let r = mem.and_then(|mem| {
        let dev = super::blk::BlkDev::open(f.hwid(), alloc::boxed::Box::new(TestMemory(mem.clone())), 0).map_err(|e| alloc::format!("open: {}", e.as_str()))?;
        dev.conf(abi::CONF_BLK_MODE, abi::BLK_MODE_DEDICATED | 1 << 8).map_err(|e| alloc::format!("Dedicated mode: {}", e.as_str()))?;
        let dev = DriverRef::Blk(KRef::try_new(dev).map_err(|_| "no memory for the driver")?);
        super::attach(kc, &dev).map_err(|e| alloc::format!("attach: {}", e.as_str()))?;
        let r = idle_then_request(&mem, kc, area);
        let _ = super::detach(&dev, None);
        dev.get().shutdown();
        r
    });
    let back = crate::roles::set_role(kc, abi::ROLE_XC);
    r?;
    back.map_err(|e| alloc::format!("set_role XC: {}", e.as_str()))?;
    Ok(())
}
}

fn idle_then_request(mem: &[AtomicU64], kc: usize, area: &percpu::PerCpu) -> Result<(), alloc::string::String> {
    // The header names the kernel core once its loop serves the disk.
    let header = TestMemory::page(mem, 0);
    let serving = time::Deadline::after_ms(5_000);
    while header[2].load(Ordering::Acquire) != kc as u64 {
        kassert!(!serving.expired(), "the header does not name core {kc} after 5 s");
        core::hint::spin_loop();
    }
    // Past the idle stretch (2 ms of empty polls), then a window of 300 ms.
    pause_ms(20);
    let (h0, c0, t0) = (area.stats.halts.load(Ordering::Relaxed), area.stats.halted_cycles.load(Ordering::Relaxed), crate::arch::x86_64::cpu::rdtsc());
    pause_ms(300);
    let (h1, c1, t1) = (area.stats.halts.load(Ordering::Relaxed), area.stats.halted_cycles.load(Ordering::Relaxed), crate::arch::x86_64::cpu::rdtsc());
    let halted_pct = (c1 - c0) * 100 / (t1 - t0).max(1);
    crate::log::kprintln!("dev ktest: idle disk kernel core {kc}: {} halts, {halted_pct}% of 300 ms halted", h1 - h0);
    kassert!(h1 - h0 >= 10, "the kernel core halted {} times in 300 ms with an idle disk (it polls)", h1 - h0);
    kassert!(halted_pct >= 50, "the kernel core was halted only {halted_pct}% of 300 ms with an idle disk");
    // A request posted while it sleeps: one page read into the data page.
    let sub = TestMemory::page(mem, blk_submit_page(0));
    let at = blk_slot_word(0);
    for (k, v) in blk_submit_words(BUF_BLK_READ, 0, blk_data_offset(1), PAGE_SIZE).iter().enumerate() {
        sub[at + 1 + k].store(*v, Ordering::Relaxed);
    }
    sub[at].store(blk_tag(0), Ordering::Release);
    let done = TestMemory::page(mem, blk_done_page(0));
    let answered = time::Deadline::after_ms(5_000);
    while done[at].load(Ordering::Acquire) != blk_tag(0) {
        kassert!(!answered.expired(), "a request posted while the kernel core slept got no completion in 5 s");
        core::hint::spin_loop();
    }
    let (seq, res) = blk_done_parse([done[at + 1].load(Ordering::Relaxed), done[at + 2].load(Ordering::Relaxed), done[at + 3].load(Ordering::Relaxed)]);
    kassert!(seq == 0 && res == Ok(PAGE_SIZE), "completion {seq}: {res:?}, expected 0: Ok({PAGE_SIZE})");
    Ok(())
}

/// Let `ms` milliseconds pass with this core halted (in halts of at most 10 ms), so that the
/// window measures the kernel core alone.
fn pause_ms(ms: u64) {
    use crate::arch::x86_64::cpu;
    let d = time::Deadline::after_ms(ms);
    let on = cpu::interrupts_enabled();
    while !d.expired() {
        cpu::disable_interrupts();
        crate::smp::halt_at_most(percpu::this(), 10_000);
    }
    if on {
        cpu::enable_interrupts();
    }
}
