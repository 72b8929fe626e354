//! Device objects. The machine model has one device today: the COM1 console (hwid 0).
//! `device_buf` transmits bytes from a segment, which is how Corey feeds buffers to devices.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use abi::{DeviceInfo, DeviceStat, Error, CONF_CONSOLE_CRLF, DEVICE_CONSOLE};

pub const CONSOLE_HWID: u64 = 0;

/// Core that allocated the console last (for `device_list`), or u32::MAX.
static CONSOLE_OWNER: AtomicU32 = AtomicU32::new(u32::MAX);
/// Console traffic (the device is shared by nature; its counters are the device's own).
static CONSOLE_OUT: AtomicU64 = AtomicU64::new(0);
static CONSOLE_BUFFERS: AtomicU64 = AtomicU64::new(0);

pub struct Device {
    pub hwid: u64,
    pub kind: u32,
    crlf: AtomicBool,
}

pub fn list() -> [DeviceInfo; 1] {
    let mut name = [0u8; 16];
    name[..4].copy_from_slice(b"com1");
    [DeviceInfo { hwid: CONSOLE_HWID, kind: DEVICE_CONSOLE, owner_core: CONSOLE_OWNER.load(Ordering::Relaxed), name }]
}

impl Device {
    pub fn open(hwid: u64) -> Result<Device, Error> {
        if hwid != CONSOLE_HWID {
            return Err(Error::NotFound);
        }
        CONSOLE_OWNER.store(percore::cpu_id() as u32, Ordering::Relaxed);
        Ok(Device { hwid, kind: DEVICE_CONSOLE, crlf: AtomicBool::new(true) })
    }

    pub fn stat(&self) -> DeviceStat {
        DeviceStat {
            hwid: self.hwid,
            kind: self.kind,
            _pad: 0,
            bytes_out: CONSOLE_OUT.load(Ordering::Relaxed),
            bytes_in: 0,
            buffers: CONSOLE_BUFFERS.load(Ordering::Relaxed),
        }
    }

    pub fn conf(&self, key: u64, value: u64) -> Result<(), Error> {
        match key {
            CONF_CONSOLE_CRLF => match value {
                0 | 1 => {
                    self.crlf.store(value == 1, Ordering::Relaxed);
                    Ok(())
                }
                _ => Err(Error::InvalidArgument),
            },
            _ => Err(Error::Unsupported),
        }
    }

    /// Transmit bytes.
    pub fn transmit(&self, bytes: &[u8]) {
        if self.crlf.load(Ordering::Relaxed) {
            crate::arch::x86_64::serial::write_bytes_locked(bytes);
        } else {
            crate::arch::x86_64::serial::write_raw_locked(bytes);
        }
        CONSOLE_OUT.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    }

    pub fn count_buffer(&self) {
        CONSOLE_BUFFERS.fetch_add(1, Ordering::Relaxed);
    }
}
