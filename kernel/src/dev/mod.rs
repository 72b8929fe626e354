//! Device drivers: PCI discovery, the virtio glue, and one file per device
//! kind. The device *objects* programs hold are in `kobj/device.rs`; the drivers here own the
//! hardware state behind them.

pub mod blk;
pub mod net;
pub mod pci;
pub mod virtio;

use alloc::vec::Vec;

use abi::Error;
use virtio_drivers::transport::DeviceType;

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
pub fn list() -> Result<alloc::vec::Vec<abi::DeviceInfo>, abi::Error> {
    let mut out = alloc::vec::Vec::new();
    for f in pci::functions()? {
        let (kind, name): (u32, &[u8]) = match f.virtio {
            Some(DeviceType::Network) => (abi::DEVICE_NET, b"virtio-net"),
            Some(DeviceType::Block) => (abi::DEVICE_BLOCK, b"virtio-blk"),
            _ => continue,
        };
        let mut n = [0u8; 16];
        n[..name.len()].copy_from_slice(name);
        out.try_reserve(1).map_err(|_| abi::Error::NoMemory)?;
        out.push(abi::DeviceInfo { hwid: f.hwid(), kind, owner_core: u32::MAX, name: n });
    }
    Ok(out)
}

