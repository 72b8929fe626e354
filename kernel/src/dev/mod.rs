//! Device drivers (issue 15 onward): PCI discovery, the virtio glue, and one file per device
//! kind. The device *objects* programs hold are in `kobj/device.rs`; the drivers here own the
//! hardware state behind them.

pub mod blk;
pub mod net;
pub mod pci;
pub mod virtio;

use virtio_drivers::transport::DeviceType;

/// Walk PCI and map the registers of the devices this kernel drives. Boot only, before the
/// first user address range exists. Prints what it found.
pub fn init(ecam: Option<crate::arch::x86_64::acpi::Ecam>) {
    match pci::init(ecam) {
        Ok(0) => {}
        Ok(n) => {
            let fns = pci::functions();
            let virtio: alloc::vec::Vec<_> = fns.iter().filter(|f| f.virtio.is_some()).collect();
            for f in &virtio {
                if let Some(t) = f.virtio {
                    crate::kprintln!("pci: {} virtio {:?} (hwid {:#x})", f.df, t, f.hwid());
                }
            }
            if virtio.is_empty() {
                crate::kprintln!("pci: {n} functions, no virtio device");
            }
        }
        Err(e) => crate::kprintln!("pci: {e}; no PCI devices"),
    }
}

/// `device_list` entries for the PCI devices this kernel drives.
pub fn list() -> alloc::vec::Vec<abi::DeviceInfo> {
    let mut out = alloc::vec::Vec::new();
    for f in pci::functions() {
        let (kind, name): (u32, &[u8]) = match f.virtio {
            Some(DeviceType::Network) => (abi::DEVICE_NET, b"virtio-net"),
            Some(DeviceType::Block) => (abi::DEVICE_BLOCK, b"virtio-blk"),
            _ => continue,
        };
        let mut n = [0u8; 16];
        n[..name.len()].copy_from_slice(name);
        if out.try_reserve(1).is_ok() {
            out.push(abi::DeviceInfo { hwid: f.hwid(), kind, owner_core: u32::MAX, name: n });
        }
    }
    out
}
