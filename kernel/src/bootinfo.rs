//! What the boot loader tells us: memory map, command line, RSDP. Both PVH (QEMU -kernel)
//! and Multiboot2 (GRUB) are read into one `BootInfo`.

use core::sync::atomic::{AtomicBool, Ordering};

use crate::arch::x86_64::boot::{BOOT_MULTIBOOT2, BOOT_PVH};
use crate::mm::{read_phys, read_phys_bytes};

pub const MAX_REGIONS: usize = 128;
const CMDLINE_MAX: usize = 512;

#[derive(Clone, Copy, Debug, Default)]
pub struct Region {
    pub start: u64,
    pub end: u64,
}

pub struct BootInfo {
    pub protocol: &'static str,
    pub ram: [Region; MAX_REGIONS],
    pub ram_count: usize,
    cmdline_buf: [u8; CMDLINE_MAX],
    cmdline_len: usize,
    pub rsdp: Option<u64>,
    /// The first boot module (the program archive), as a physical range.
    pub module: Option<Region>,
}

impl BootInfo {
    pub fn cmdline(&self) -> &str {
        core::str::from_utf8(&self.cmdline_buf[..self.cmdline_len]).unwrap_or("")
    }

    pub fn ram(&self) -> &[Region] {
        &self.ram[..self.ram_count]
    }

    /// Whether the command line contains `word` as a whole word or `word=...`.
    pub fn has_flag(&self, word: &str) -> bool {
        self.cmdline().split_whitespace().any(|w| w == word || w.split('=').next() == Some(word))
    }

    /// The value of `key=value` on the command line.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.cmdline().split_whitespace().find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
    }

    fn add_ram(&mut self, start: u64, len: u64) {
        let end = start.saturating_add(len);
        if end <= start || self.ram_count == MAX_REGIONS {
            return;
        }
        self.ram[self.ram_count] = Region { start, end };
        self.ram_count += 1;
    }

    fn set_cmdline_from_phys(&mut self, pa: u64) {
        let mut n = 0;
        while n < CMDLINE_MAX {
            match read_phys::<u8>(pa + n as u64) {
                Some(0) | None => break,
                Some(b) => {
                    self.cmdline_buf[n] = b;
                    n += 1;
                }
            }
        }
        self.cmdline_len = n;
    }
}

/// Parse the boot protocol's information block. Errors are one-line reasons.
pub fn parse(protocol: u32, info_phys: u64) -> Result<BootInfo, &'static str> {
    let mut bi = BootInfo {
        protocol: "unknown",
        ram: [Region::default(); MAX_REGIONS],
        ram_count: 0,
        cmdline_buf: [0; CMDLINE_MAX],
        cmdline_len: 0,
        rsdp: None,
        module: None,
    };
    match protocol {
        BOOT_PVH => {
            bi.protocol = "PVH";
            let magic: u32 = read_phys(info_phys).ok_or("PVH start info outside memory")?;
            if magic != 0x336E_C578 {
                return Err("bad PVH start-info magic");
            }
            let version: u32 = read_phys(info_phys + 4).ok_or("bad PVH start info")?;
            let cmdline: u64 = read_phys(info_phys + 24).ok_or("bad PVH start info")?;
            let rsdp: u64 = read_phys(info_phys + 32).ok_or("bad PVH start info")?;
            let nr_modules: u32 = read_phys(info_phys + 12).ok_or("bad PVH start info")?;
            let modlist: u64 = read_phys(info_phys + 16).ok_or("bad PVH start info")?;
            if nr_modules > 0 && modlist != 0 {
                let paddr: u64 = read_phys(modlist).ok_or("bad PVH module list")?;
                let size: u64 = read_phys(modlist + 8).ok_or("bad PVH module list")?;
                if size > 0 {
                    bi.module = Some(Region { start: paddr, end: paddr.saturating_add(size) });
                }
            }
            if cmdline != 0 {
                bi.set_cmdline_from_phys(cmdline);
            }
            if rsdp != 0 {
                bi.rsdp = Some(rsdp);
            }
            if version < 1 {
                return Err("PVH start info has no memory map (version 0)");
            }
            let memmap: u64 = read_phys(info_phys + 40).ok_or("bad PVH start info")?;
            let entries: u32 = read_phys(info_phys + 48).ok_or("bad PVH start info")?;
            for i in 0..entries as u64 {
                let e = memmap + i * 24;
                let addr: u64 = read_phys(e).ok_or("bad PVH memory map")?;
                let size: u64 = read_phys(e + 8).ok_or("bad PVH memory map")?;
                let ty: u32 = read_phys(e + 16).ok_or("bad PVH memory map")?;
                if ty == 1 {
                    bi.add_ram(addr, size);
                }
            }
        }
        BOOT_MULTIBOOT2 => {
            bi.protocol = "Multiboot2";
            let total: u32 = read_phys(info_phys).ok_or("Multiboot2 info outside memory")?;
            let mut off = 8u64;
            while off + 8 <= total as u64 {
                let tag = info_phys + off;
                let ty: u32 = read_phys(tag).ok_or("bad Multiboot2 tag")?;
                let size: u32 = read_phys(tag + 4).ok_or("bad Multiboot2 tag")?;
                if ty == 0 || size < 8 {
                    break;
                }
                match ty {
                    1 => bi.set_cmdline_from_phys(tag + 8),
                    3 if bi.module.is_none() => {
                        let start: u32 = read_phys(tag + 8).ok_or("bad module tag")?;
                        let end: u32 = read_phys(tag + 12).ok_or("bad module tag")?;
                        if end > start {
                            bi.module = Some(Region { start: start as u64, end: end as u64 });
                        }
                    }
                    6 => {
                        let esize: u32 = read_phys(tag + 8).ok_or("bad memory map tag")?;
                        if esize < 24 {
                            return Err("bad Multiboot2 memory map entry size");
                        }
                        let mut e = tag + 16;
                        while e + esize as u64 <= tag + size as u64 {
                            let base: u64 = read_phys(e).ok_or("bad memory map")?;
                            let len: u64 = read_phys(e + 8).ok_or("bad memory map")?;
                            let ty: u32 = read_phys(e + 16).ok_or("bad memory map")?;
                            if ty == 1 {
                                bi.add_ram(base, len);
                            }
                            e += esize as u64;
                        }
                    }
                    14 | 15 => {
                        // The tag carries a copy of the RSDP; prefer the ACPI 2.0 one.
                        if ty == 15 || bi.rsdp.is_none() {
                            bi.rsdp = Some(tag + 8);
                        }
                    }
                    _ => {}
                }
                off += (size as u64 + 7) & !7;
            }
        }
        _ => return Err("unknown boot protocol"),
    }
    let mut probe = [0u8; 1];
    if !read_phys_bytes(0, &mut probe) {
        return Err("physical window not mapped");
    }
    Ok(bi)
}

static BOOT_OPTION_FAILED: AtomicBool = AtomicBool::new(false);

/// A command-line option that could not be applied (`roles=`, `sched=`, `inject=`): one line,
/// `boot: error: WHAT`, and the boot goes on without it, but its final exit status says
/// failure (`finish`). So no test, benchmark or fuzz run made under a configuration it did not
/// get can pass, whatever it prints.
pub fn boot_option_error(what: &str) {
    crate::log::kprintln!("boot: error: {what}");
    BOOT_OPTION_FAILED.store(true, Ordering::Release);
}

/// Whether some command-line option could not be applied (`boot_option_error`).
pub fn boot_option_failed() -> bool {
    BOOT_OPTION_FAILED.load(Ordering::Acquire)
}
