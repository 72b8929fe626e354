//! Device drivers: PCI discovery, the virtio glue, one file per device kind, and the one
//! interface the rest of the kernel drives them through (`Driver`). The device *objects*
//! programs hold are in `kobj/device.rs`; the drivers here own the hardware state behind them.
//!
//! A device kind is one file (its driver, implementing `Driver`) plus one entry in `KINDS`
//! (how `device_alloc` opens it and how `device_list` names it) and one variant of
//! `DriverRef`. Nothing else names a kind: the system calls, the device objects and the kernel
//! core's loop (`roles.rs`) reach every driver through `DriverRef::get` and the functions
//! below, which keep the drivers attached to each kernel core (`pcore_add_device`) and do, for
//! every attached driver at once, what the kernel core's adaptive polling needs: poll, the
//! idle stretch before sleeping, arm the wake-up interrupt, disarm it.

pub mod blk;
mod ktests;
pub mod net;
pub mod pci;
pub mod virtio;

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::kobj::kref::KRef;
use abi::{DeviceBuf, DeviceStat, Error};
use percore::{CachePadded, TicketLock, MAX_CORES};
use virtio_drivers::transport::DeviceType;

/// What arming a driver's wake-up interrupt found (`Driver::arm`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Armed {
    /// The device's interrupt will end the coming halt.
    Yes,
    /// Work is already waiting (or the driver is busy): do not sleep.
    Work,
    /// No interrupt line: sleep on a short timer instead.
    NoLine,
}

/// A device driver as the kernel core polling it and the device object holding it see it.
///
/// The kernel core's loop (`roles::kernel_core_loop`) polls every attached driver; when all
/// have been idle for the shortest of their `sleep_after_us`, it announces that it sleeps
/// (`set_asleep`), polls once more, arms every driver's interrupt (`arm`) and halts, bounded by
/// the shortest `sleep_bound_us`; after the halt it disarms them (`disarm`).
pub trait Driver: Send + Sync {
    /// One round of the kernel core's poll (interrupts off): true if anything moved.
    fn poll(&self) -> bool;
    /// Microseconds of empty polls before the kernel core may sleep; `None`: never sleep (pure
    /// polling, Corey's kernel cores).
    fn sleep_after_us(&self) -> Option<u64>;
    /// The longest halt while asleep: `armed` says every attached driver's interrupt is armed.
    fn sleep_bound_us(&self, armed: bool) -> u64;
    /// Publish to the device's program that its kernel core sleeps (or polls again). The
    /// caller fences and polls once more after announcing a sleep.
    fn set_asleep(&self, _asleep: bool) {}
    /// Arm the device's interrupt to end the halt of the core with `apic_id` (interrupts off):
    /// acknowledge it, look once more for work (`Work` if there is), route it.
    fn arm(&self, apic_id: u32) -> Armed;
    /// Mask the interrupt again after the halt.
    fn disarm(&self);
    /// The core this driver is attached to (`u32::MAX`: none); the driver's own field, written
    /// only here.
    fn attached(&self) -> &AtomicU32;
    /// Whether `pcore_add_device` may attach it now (`NotPermitted` if not).
    fn can_attach(&self) -> Result<(), Error> {
        Ok(())
    }
    /// The kernel-core loop of the core it is attached to runs (`Some(core)`) or not (`None`),
    /// or it was detached (`None`); called under that core's list lock, so the calls are
    /// ordered.
    fn serving(&self, _core: Option<usize>) {}
    /// The device object is gone: reset the device and give everything back, now.
    fn shutdown(&self);
    fn stat(&self) -> DeviceStat;
    fn conf(&self, key: u64, value: u64) -> Result<(), Error>;
    /// `device_buf` on the device.
    fn buf(&self, b: &DeviceBuf) -> Result<u64, Error>;
}

/// A driver held by a device object and by the kernel core polling it: its own allocation, so
/// the kernel core can hold it without keeping the device object (and the shares that hold the
/// device) alive. The one place that lists the kinds by type.
#[derive(Clone)]
pub enum DriverRef {
    Net(KRef<net::NetDev>),
    Blk(KRef<blk::BlkDev>),
}

impl DriverRef {
    /// The driver behind the reference.
    #[inline]
    pub fn get(&self) -> &dyn Driver {
        match self {
            DriverRef::Net(d) => &**d,
            DriverRef::Blk(d) => &**d,
        }
    }

    /// Whether both name the same driver.
    pub fn same(&self, other: &DriverRef) -> bool {
        core::ptr::addr_eq(self.get() as *const dyn Driver, other.get() as *const dyn Driver)
    }
}

/// Put a freshly opened driver in its own allocation (`NoMemory`, never a panic).
fn boxed<T>(d: T, wrap: fn(KRef<T>) -> DriverRef) -> Result<DriverRef, Error> {
    KRef::try_new(d).map(wrap).map_err(|_| Error::NoMemory)
}

fn open_net(hwid: u64, seg: Box<dyn SharedMemory>, arg: u64) -> Result<DriverRef, Error> {
    boxed(net::NetDev::open(hwid, seg, arg)?, DriverRef::Net)
}

fn open_blk(hwid: u64, seg: Box<dyn SharedMemory>, arg: u64) -> Result<DriverRef, Error> {
    boxed(blk::BlkDev::open(hwid, seg, arg)?, DriverRef::Blk)
}

/// One device kind this kernel drives: the virtio type PCI reports, the `abi::DEVICE_*` kind
/// and name `device_list` gives, the name of its device objects, and how `device_alloc` opens
/// one over a segment (with the call's last argument).
pub struct Kind {
    pub virtio: DeviceType,
    pub kind: u32,
    pub list_name: &'static [u8],
    pub object_name: &'static [u8],
    pub open: fn(u64, Box<dyn SharedMemory>, u64) -> Result<DriverRef, Error>,
}

/// Every device kind: adding one is one file and one entry here (and a `DriverRef` variant).
pub static KINDS: [Kind; 2] = [
    Kind { virtio: DeviceType::Network, kind: abi::DEVICE_NET, list_name: b"virtio-net", object_name: b"vnic", open: open_net },
    Kind { virtio: DeviceType::Block, kind: abi::DEVICE_BLOCK, list_name: b"virtio-blk", object_name: b"vblk", open: open_blk },
];

/// The kind of the PCI device with hwid `hwid`: `None` if no PCI device has that hwid,
/// `Some(Err(NotFound))` for a PCI device of a kind this kernel does not drive.
pub fn kind_of(hwid: u64) -> Option<Result<&'static Kind, Error>> {
    let f = pci::by_hwid(hwid)?;
    Some(KINDS.iter().find(|k| f.virtio == Some(k.virtio)).ok_or(Error::NotFound))
}

/// The memory a device shares with the program that made it (a segment), as a driver sees it:
/// its size, and its first pages pinned in place while the device uses them. The
/// kernel-object layer hands one to a driver (`kobj::device`); drivers know nothing else of
/// kernel objects.
pub trait SharedMemory: Send + Sync {
    /// Bytes the memory holds now.
    fn nbytes(&self) -> Result<u64, Error>;
    /// Pin its first `npages` pages (made if not there yet): their physical addresses.
    fn pin(&self, npages: usize) -> Result<Vec<u64>, Error>;
    /// Give back one `pin`.
    fn unpin(&self);
}

/// Walk PCI and map the registers of the devices this kernel drives. Boot only, before the
/// first user address range exists. Prints what it found.
pub fn init(ecam: Option<crate::arch::x86_64::acpi::Ecam>) {
    match pci::init(ecam) {
        Ok(0) => {}
        Ok(n) => {
            let fns = pci::functions().unwrap_or_default();
            let mut virtio = 0;
            for f in &fns {
                if let Some(t) = f.virtio {
                    crate::log::kprintln!("pci: {} virtio {:?} (hwid {:#x})", f.df, t, f.hwid());
                    virtio += 1;
                }
            }
            if virtio == 0 {
                crate::log::kprintln!("pci: {n} functions, no virtio device");
            }
        }
        Err(e) => crate::log::kprintln!("pci: {e}; no PCI devices"),
    }
}

/// `device_list` entries for the PCI devices this kernel drives.
pub fn list() -> Result<Vec<abi::DeviceInfo>, Error> {
    let mut out = Vec::new();
    for f in pci::functions()? {
        let Some(k) = KINDS.iter().find(|k| f.virtio == Some(k.virtio)) else { continue };
        let mut n = [0u8; 16];
        n[..k.list_name.len()].copy_from_slice(k.list_name);
        out.try_reserve(1).map_err(|_| Error::NoMemory)?;
        out.push(abi::DeviceInfo { hwid: f.hwid(), kind: k.kind, owner_core: u32::MAX, name: n });
    }
    Ok(out)
}

// ---- A device's interrupt line, used only to end a kernel core's halt

/// The vector a device's INTx line arrives on while a core sleeps waiting for it.
pub const VECTOR_DEVICE_LINE: u8 = 0xE1;
/// I/O APIC inputs a device line may use (PCI INTx lines are 16-23 on this machine).
const MAX_LINES: usize = 32;
/// The inputs some device's line uses: the interrupt masks each of them.
static LINES: [AtomicBool; MAX_LINES] = [const { AtomicBool::new(false) }; MAX_LINES];

/// A device's interrupt: it only ends a halt (the kernel core then polls). A line stays
/// asserted until its driver acknowledges the device, so every device line is masked before
/// the EOI (`Line::arm` routes and unmasks one again). Devices may share a line; masking one
/// that is masked already does nothing.
fn line_interrupt(_f: &mut crate::arch::x86_64::idt::TrapFrame) {
    LINE_INTERRUPTS.fetch_add(1, Ordering::Relaxed);
    for (gsi, used) in LINES.iter().enumerate() {
        if used.load(Ordering::Relaxed) {
            crate::arch::x86_64::ioapic::mask(gsi as u32);
        }
    }
    crate::arch::x86_64::apic::eoi();
}

/// Device-line interrupts taken so far, on every core: a sleeper that armed a line and woke
/// for another reason (a timer tick) sees the count unchanged and may sleep again.
static LINE_INTERRUPTS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// How many device-line interrupts every core has taken so far.
pub fn line_interrupts() -> u64 {
    LINE_INTERRUPTS.load(Ordering::Relaxed)
}

/// A PCI function's INTx line (its I/O APIC input), or none known.
#[derive(Clone, Copy)]
pub struct Line(u32);

impl Line {
    /// The line of function `df`.
    pub fn of(df: virtio_drivers::transport::pci::bus::DeviceFunction) -> Line {
        match pci::intx_gsi(df) {
            Some(g) if (g as usize) < MAX_LINES => {
                LINES[g as usize].store(true, Ordering::Relaxed);
                crate::arch::x86_64::idt::register_handler(VECTOR_DEVICE_LINE, line_interrupt);
                Line(g)
            }
            _ => Line(u32::MAX),
        }
    }

    pub fn exists(&self) -> bool {
        self.0 != u32::MAX
    }

    /// Route the line to the core with `apic_id`, level-triggered and unmasked (the caller
    /// acknowledged the device and looked for work after that). False if there is no line.
    pub fn arm(&self, apic_id: u32) -> bool {
        self.exists() && crate::arch::x86_64::ioapic::route_level(self.0, VECTOR_DEVICE_LINE, apic_id)
    }

    /// Mask the line again.
    pub fn disarm(&self) {
        if self.exists() {
            crate::arch::x86_64::ioapic::mask(self.0);
        }
    }
}

// ---- Which kernel core polls each driver (`pcore_add_device`; the loop is in roles.rs)

/// The drivers attached to each core. Only that core polls its list; attach and detach take the
/// lock.
static POLLED: [CachePadded<TicketLock<Vec<DriverRef>>>; MAX_CORES] = [const { CachePadded::new(TicketLock::new(Vec::new())) }; MAX_CORES];

/// Whether each core runs its kernel-core loop now: set by `kernel_core_running` as the loop
/// starts and cleared as it ends, under `POLLED[core]`'s lock. A driver is told its core serves
/// it (`Driver::serving`) only while this says so: a core whose *role* is kernel core may not
/// have entered its loop yet (it was running a context when the role changed, and looks at its
/// role only when that context leaves), and a program told that core serves it would wait on a
/// device nobody polls.
static SERVING: [AtomicBool; MAX_CORES] = [const { AtomicBool::new(false) }; MAX_CORES];

/// `pcore_add_device` of a driver: `core` polls it while it is a kernel core. `NoSuchCore` for
/// a core not online, the driver's refusal (`can_attach`), `Busy` if it is attached already.
pub fn attach(core: usize, dev: &DriverRef) -> Result<(), Error> {
    let target = crate::percpu::get(core).filter(|c| c.online.load(Ordering::Acquire)).ok_or(Error::NoSuchCore)?;
    let d = dev.get();
    d.can_attach()?;
    if d.attached().compare_exchange(u32::MAX, core as u32, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return Err(Error::Busy);
    }
    let mut list = POLLED[core].lock();
    if list.try_reserve(1).is_err() {
        d.attached().store(u32::MAX, Ordering::Release);
        return Err(Error::NoMemory);
    }
    list.push(dev.clone());
    if SERVING[core].load(Ordering::Acquire) {
        d.serving(Some(core));
    }
    drop(list);
    // A kernel core asleep in its idle halt would not look at its list until something woke it.
    // Always, not only when `polling` is clear: a core between its last empty look at the list
    // and its announcement that it stops polling would otherwise halt with the device attached
    // (and a disk's requests time out as `NoSuchCore`). The IPI waits in the core's APIC while
    // its interrupts are off, so it ends that halt at once; attaching is rare.
    if target.role.load(Ordering::Acquire) == abi::ROLE_KC {
        crate::arch::x86_64::apic::send_ipi(target.apic_id, crate::arch::x86_64::apic::VECTOR_WAKE);
    }
    Ok(())
}

/// `pcore_del_device` (`only`: provided it is attached to that core), or the device object
/// going (`None`): stop polling it. `NotFound` if it is not attached (there).
pub fn detach(dev: &DriverRef, only: Option<usize>) -> Result<(), Error> {
    let d = dev.get();
    let core = d.attached().load(Ordering::Acquire);
    if core == u32::MAX || only.is_some_and(|c| c != core as usize) {
        return Err(Error::NotFound);
    }
    let removed = {
        let mut list = POLLED[core as usize].lock();
        let r = list.iter().position(|x| x.same(dev)).map(|i| list.swap_remove(i));
        if list.is_empty() {
            // A core with nothing attached holds no memory for its list.
            *list = Vec::new();
        }
        d.attached().store(u32::MAX, Ordering::Release);
        d.serving(None);
        r
    };
    // The list's reference goes outside the lock (the last one resets the device).
    drop(removed);
    Ok(())
}

/// `core`'s kernel-core loop starts (`on`) or ends: every driver attached to it is told
/// (`Driver::serving`), under the list's lock, which `attach` holds while it reads `SERVING`.
pub fn kernel_core_running(core: usize, on: bool) {
    let list = POLLED[core].lock();
    SERVING[core].store(on, Ordering::Release);
    for d in list.iter() {
        d.get().serving(on.then_some(core));
    }
}

/// A kernel core's poll of its drivers: `None` if it has none, else whether anything moved.
/// Each driver is polled outside the list lock (attach and detach do not wait for a round).
pub fn poll_attached(core: usize) -> Option<bool> {
    let mut did = false;
    let mut i = 0;
    loop {
        let dev = {
            let list = POLLED[core].lock();
            match list.get(i) {
                Some(d) => d.clone(),
                None if i == 0 => return None,
                None => break,
            }
        };
        did |= dev.get().poll();
        i += 1;
    }
    Some(did)
}

/// How long kernel core `core` keeps polling its drivers with nothing happening before it
/// sleeps (the shortest of theirs), or `None` if one of them asks for pure polling.
pub fn sleep_after_us(core: usize) -> Option<u64> {
    let list = POLLED[core].lock();
    let mut after: Option<u64> = None;
    for d in list.iter() {
        let us = d.get().sleep_after_us()?;
        after = Some(after.map_or(us, |a| a.min(us)));
    }
    after
}

/// The longest halt of kernel core `core` asleep (the shortest of its drivers' bounds).
pub fn sleep_bound_us(core: usize, armed: Armed) -> u64 {
    let list = POLLED[core].lock();
    list.iter().map(|d| d.get().sleep_bound_us(armed == Armed::Yes)).min().unwrap_or(abi::NET_KC_SLEEP_US)
}

/// Tell the programs of every driver kernel core `core` polls that it sleeps (or polls again);
/// after setting it, the caller looks at the devices once more (`poll_attached`).
pub fn set_asleep_attached(core: usize, asleep: bool) {
    for d in POLLED[core].lock().iter() {
        d.get().set_asleep(asleep);
    }
    core::sync::atomic::fence(Ordering::SeqCst);
}

/// `Driver::arm` for every driver kernel core `core` polls: `Yes` only if every one is armed,
/// `Work` as soon as one has work.
pub fn arm_attached(core: usize, apic_id: u32) -> Armed {
    let list = POLLED[core].lock();
    let mut r = Armed::Yes;
    for d in list.iter() {
        match d.get().arm(apic_id) {
            Armed::Yes => {}
            Armed::Work => return Armed::Work,
            Armed::NoLine => r = Armed::NoLine,
        }
    }
    if list.is_empty() {
        Armed::NoLine
    } else {
        r
    }
}

/// `Driver::disarm` for every driver kernel core `core` polls (after its halt).
pub fn disarm_attached(core: usize) {
    for d in POLLED[core].lock().iter() {
        d.get().disarm();
    }
}

