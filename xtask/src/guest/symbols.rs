//! Names for addresses: a kernel's symbols from its ELF file, and Linux's from a
//! /proc/kallsyms dump of one boot of the measurement guest (cached).

use crate::guest::linux::{self, LinuxVm};
use std::time::Duration;
use std::fs;


/// Sorted kernel symbols; names an address by the nearest symbol at or below it.
pub struct Symbols {
    syms: Vec<(u64, String)>,
}

impl Symbols {
    pub fn from_pairs(mut syms: Vec<(u64, String)>) -> Symbols {
        syms.sort();
        syms.dedup_by_key(|p| p.0);
        Symbols { syms }
    }

    /// Parse /proc/kallsyms lines (`addr type name`).
    pub fn from_kallsyms(text: &str) -> Symbols {
        Symbols::from_pairs(
            text.lines()
                .filter_map(|l| {
                    let mut w = l.split_whitespace();
                    let a = u64::from_str_radix(w.next()?, 16).ok()?;
                    let _ty = w.next()?;
                    Some((a, w.next()?.to_string()))
                })
                .filter(|(a, _)| *a != 0)
                .collect(),
        )
    }

    /// The symbol table (SHT_SYMTAB) of an ELF64 little-endian file.
    /// The symbols of the ELF file at `path` (a kernel, a user program).
    pub fn from_elf_file(path: &std::path::Path) -> Result<Symbols, String> {
        let data = fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Symbols::from_elf(&data).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn from_elf(data: &[u8]) -> Result<Symbols, String> {
        let rd = |o: usize, n: usize| -> Result<u64, String> {
            let b = data.get(o..o + n).ok_or("ELF: truncated")?;
            Ok(b.iter().rev().fold(0u64, |acc, x| (acc << 8) | *x as u64))
        };
        if data.get(..4) != Some(b"\x7fELF") || data.get(4) != Some(&2) {
            return Err("not an ELF64 file".into());
        }
        let shoff = rd(0x28, 8)? as usize;
        let shentsize = rd(0x3a, 2)? as usize;
        let shnum = rd(0x3c, 2)? as usize;
        let mut syms = Vec::new();
        for i in 0..shnum {
            let sh = shoff + i * shentsize;
            if rd(sh + 4, 4)? != 2 {
                continue; // not SHT_SYMTAB
            }
            let (off, size, link, entsize) = (rd(sh + 0x18, 8)? as usize, rd(sh + 0x20, 8)? as usize, rd(sh + 0x28, 4)? as usize, rd(sh + 0x38, 8)? as usize);
            let strsh = shoff + link * shentsize;
            let stroff = rd(strsh + 0x18, 8)? as usize;
            for j in 0..size / entsize.max(1) {
                let e = off + j * entsize;
                let name_off = rd(e, 4)? as usize;
                let info = rd(e + 4, 1)? as u8;
                let value = rd(e + 8, 8)?;
                if value == 0 || !(matches!(info & 0xf, 1 | 2)) {
                    continue; // only objects and functions
                }
                let name: Vec<u8> = data.get(stroff + name_off..).unwrap_or(&[]).iter().take_while(|b| **b != 0).copied().collect();
                syms.push((value, String::from_utf8_lossy(&name).to_string()));
            }
        }
        Ok(Symbols::from_pairs(syms))
    }

    /// `name+0xoff` for a kernel-image address; None for the direct map, heap and user space.
    pub fn name(&self, addr: u64) -> Option<String> {
        if addr < 0xffff_ffff_8000_0000 {
            return None;
        }
        let i = self.syms.partition_point(|(a, _)| *a <= addr);
        let (a, n) = self.syms.get(i.checked_sub(1)?)?;
        let off = addr - a;
        if off > (1 << 20) {
            return None;
        }
        Some(if off == 0 { n.clone() } else { format!("{n}+{off:#x}") })
    }

    pub fn len(&self) -> usize {
        self.syms.len()
    }

    /// [`Symbols::name`] for any address (e.g. a user program's symbols), within `max_off`
    /// bytes of the symbol.
    pub fn name_any(&self, addr: u64, max_off: u64) -> Option<String> {
        let i = self.syms.partition_point(|(a, _)| *a <= addr);
        let (a, n) = self.syms.get(i.checked_sub(1)?)?;
        let off = addr - a;
        (off <= max_off).then(|| if off == 0 { n.clone() } else { format!("{n}+{off:#x}") })
    }
}

/// Linux kernel symbols: dumped once from /proc/kallsyms of a guest booted with nokaslr, so
/// the addresses match every later boot, and cached next to the kernel.
pub fn linux_symbols() -> Result<Symbols, String> {
    let kernel = linux::fetch_kernel()?;
    let cache = linux::cache_dir().join(format!("kallsyms-{}.txt", kernel.version));
    if let Ok(text) = fs::read_to_string(&cache) {
        return Ok(Symbols::from_kallsyms(&text));
    }
    eprintln!("plugin: dumping the Linux guest's /proc/kallsyms once (cached in {})", cache.display());
    let initrd = linux::guest_initramfs()?;
    let mut vm = LinuxVm::new(&kernel, &initrd);
    vm.append = "wl=kallsyms".into();
    vm.timeout = Duration::from_secs(600);
    let out = linux::run_workload(&vm)?;
    let body = out
        .serial
        .split_once("kallsyms-begin\n")
        .and_then(|(_, rest)| rest.split_once("kallsyms-end"))
        .map(|(b, _)| b.to_string())
        .ok_or("plugin: the guest printed no kallsyms")?;
    fs::write(&cache, &body).map_err(|e| format!("cannot write {}: {e}", cache.display()))?;
    Ok(Symbols::from_kallsyms(&body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kallsyms_lookup() {
        let s = Symbols::from_kallsyms("ffffffff82000000 D foo\nffffffff82000040 D bar\nffffffff81000000 T text\n");
        assert_eq!(s.name(0xffff_ffff_8200_0000).as_deref(), Some("foo"));
        assert_eq!(s.name(0xffff_ffff_8200_0048).as_deref(), Some("bar+0x8"));
        assert_eq!(s.name(0xff11_0000_0400_0000), None); // direct map: no symbol
        assert_eq!(s.name(0x1000), None);
    }
}
