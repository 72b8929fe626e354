//! PCI discovery: the configuration space the ACPI MCFG names (ECAM, on QEMU's q35 at
//! 0xB000_0000), walked once at boot. Every function found is recorded (`FUNCTIONS`, for
//! `device_list`), and the memory BARs of the devices this kernel drives are mapped then, since
//! kernel mappings can only be added before the first user address range exists
//! (`boot::map_mmio`).
//!
//! The walk uses the `virtio-drivers` crate's `PciRoot` over its `MmioCam`, so the virtio
//! transport that the device drivers build later reads the same configuration space.

use alloc::vec::Vec;
use percore::TicketLock;
use virtio_drivers::transport::pci::bus::{BarInfo, Cam, Command, DeviceFunction, MmioCam, PciRoot};
use virtio_drivers::transport::pci::virtio_device_type;
use virtio_drivers::transport::DeviceType;

use crate::arch::x86_64::acpi::Ecam;
use crate::arch::x86_64::boot;

/// What the walk found about one function.
#[derive(Clone, Copy, Debug)]
pub struct Function {
    pub df: DeviceFunction,
    pub vendor: u16,
    pub device: u16,
    pub class: u8,
    /// The virtio device type, for virtio functions.
    pub virtio: Option<DeviceType>,
}

impl Function {
    pub fn hwid(&self) -> u64 {
        abi::HWID_PCI_BASE + ((self.df.bus as u64) << 8 | (self.df.device as u64) << 3 | self.df.function as u64)
    }
}

pub type Root = PciRoot<MmioCam<'static>>;

/// The root complex, once found. Taken by a driver to build a transport (rare: at
/// `device_alloc`); nothing on a data path touches it.
static ROOT: TicketLock<Option<Root>> = TicketLock::new(None);
static FUNCTIONS: TicketLock<Vec<Function>> = TicketLock::new(Vec::new());
/// Where the ECAM window is mapped (0: none), for the few configuration reads done outside
/// the crate's `PciRoot` (the interrupt pin).
static ECAM_VA: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Walk the buses the MCFG lists. Returns how many functions were found.
pub fn init(ecam: Option<Ecam>) -> Result<usize, &'static str> {
    let Some(ecam) = ecam else { return Ok(0) };
    // The ECAM window covers 256 buses of 1 MiB each; `MmioCam` assumes all 256 are mapped.
    let base_va = boot::map_mmio(ecam.base, Cam::Ecam.size() as u64)?;
    ECAM_VA.store(base_va, core::sync::atomic::Ordering::Relaxed);
    // SAFETY: `base_va` maps the 256 MiB ECAM region uncached, for the life of the kernel; only
    // this root (kept in `ROOT`, used under its lock) and the transports made from it access it.
    let cam = unsafe { MmioCam::new(base_va as *mut u8, Cam::Ecam) };
    let mut root = PciRoot::new(cam);
    let mut found = Vec::new();
    for bus in ecam.bus_start..=ecam.bus_end {
        for (df, info) in root.enumerate_bus(bus) {
            let f = Function { df, vendor: info.vendor_id, device: info.device_id, class: info.class, virtio: virtio_device_type(&info) };
            if found.try_reserve(1).is_err() {
                return Err("pci: no memory for the device list");
            }
            found.push(f);
        }
    }
    for f in &found {
        if matches!(f.virtio, Some(DeviceType::Network) | Some(DeviceType::Block)) {
            map_bars(&mut root, f.df)?;
        }
    }
    let n = found.len();
    *FUNCTIONS.lock() = found;
    *ROOT.lock() = Some(root);
    Ok(n)
}

/// Map every memory BAR of `df` and make sure the function decodes memory and may master DMA.
fn map_bars(root: &mut Root, df: DeviceFunction) -> Result<(), &'static str> {
    let bars = root.bars(df).map_err(|_| "pci: cannot read a device's BARs")?;
    for bar in bars.iter().flatten() {
        if let BarInfo::Memory { address, size, .. } = bar {
            if *address == 0 || *size == 0 {
                return Err("pci: a virtio device's memory BAR is not assigned (firmware left it at 0)");
            }
            boot::map_mmio(*address, *size)?;
        }
    }
    let (_, cmd) = root.get_status_command(df);
    root.set_command(df, cmd | Command::MEMORY_SPACE | Command::BUS_MASTER);
    Ok(())
}

/// Every function the walk found (`NoMemory` rather than an aborting clone: this runs in
/// `device_list`, where allocation failures are injected and must stay errors).
pub fn functions() -> Result<Vec<Function>, abi::Error> {
    let l = FUNCTIONS.lock();
    let mut out = Vec::new();
    out.try_reserve_exact(l.len()).map_err(|_| abi::Error::NoMemory)?;
    out.extend(l.iter().copied());
    Ok(out)
}

/// The first function of virtio type `t`.
pub fn find_virtio(t: DeviceType) -> Option<Function> {
    FUNCTIONS.lock().iter().find(|f| f.virtio == Some(t)).copied()
}

/// The I/O APIC input a function's legacy interrupt (INTx) reaches, on QEMU's q35 machine:
/// the ICH9 routes INTA-INTD of the device in slot S to PIRQ E-H as `(S + pin) % 4 + 4`, and in
/// APIC mode PIRQ n is global system interrupt 16 + n (QEMU's `ich9_lpc_map_irq` and the _PRT
/// of its ACPI tables). `None` for a function with no interrupt pin or outside bus 0. Another
/// chipset routes differently: its interrupt then never comes, and the sleeping kernel core
/// still wakes by its timer.
pub fn intx_gsi(df: DeviceFunction) -> Option<u32> {
    let va = ECAM_VA.load(core::sync::atomic::Ordering::Relaxed);
    if va == 0 || df.bus != 0 {
        return None;
    }
    let off = (df.device as u64) << 15 | (df.function as u64) << 12 | 0x3D;
    // SAFETY: the ECAM window is mapped uncached for the life of the kernel (`init`), and
    // offset 0x3D of a function's 4 KiB of configuration space is its interrupt pin register.
    let pin = unsafe { core::ptr::read_volatile((va + off) as *const u8) };
    if !(1..=4).contains(&pin) {
        return None;
    }
    Some(16 + (df.device as u32 + pin as u32 - 1) % 4 + 4)
}

/// The function with hwid `hwid`.
pub fn by_hwid(hwid: u64) -> Option<Function> {
    FUNCTIONS.lock().iter().find(|f| f.hwid() == hwid).copied()
}

/// Run `f` with the root complex (`None` if there is none).
pub fn with_root<R>(f: impl FnOnce(&mut Root) -> R) -> Option<R> {
    ROOT.lock().as_mut().map(f)
}
