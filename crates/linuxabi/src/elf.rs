//! Checking a static x86-64 ELF executable and planning where its parts go, as Linux's
//! `execve` does for a program without an interpreter: `ET_EXEC` at its own addresses, a
//! static PIE (`ET_DYN` without `PT_INTERP`) at a load base the caller picks (its C library
//! relocates itself from `AT_PHDR`). Pure logic: the library OS's loader maps what [`plan`]
//! returns; host tests check every refusal.

use core::fmt;

pub const PAGE: u64 = 4096;
/// Loadable segments a plan can hold (static programs have two to five).
pub const MAX_LOADS: usize = 16;

pub const PT_LOAD: u32 = 1;
pub const PT_INTERP: u32 = 3;
pub const PT_PHDR: u32 = 6;
pub const PT_TLS: u32 = 7;
pub const PF_X: u32 = 1;
pub const PF_W: u32 = 2;
pub const PF_R: u32 = 4;
pub const ET_EXEC: u16 = 2;
pub const ET_DYN: u16 = 3;
pub const EM_X86_64: u16 = 62;
/// Size of an ELF64 program header.
pub const PHENT: u16 = 56;

/// Why a file is refused. `Display` gives the message the loader prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElfError<'a> {
    /// Not an ELF file (no `\x7fELF`).
    NotElf,
    /// The header, the program headers or a segment's bytes run past the end of the file.
    Truncated,
    /// Not ELF64 little-endian.
    WrongClass,
    /// Another machine than x86-64 (`e_machine`).
    WrongMachine(u16),
    /// Neither `ET_EXEC` nor `ET_DYN` (a relocatable object, a core file).
    WrongType(u16),
    /// Dynamically linked: the interpreter it names.
    Interp(&'a [u8]),
    /// No `PT_LOAD` segment, or more than [`MAX_LOADS`].
    BadLoads,
    /// A segment whose file size exceeds its memory size, or whose end overflows.
    BadSegment,
    /// Two loadable segments cover the same address.
    Overlap,
    /// A segment outside `[min_addr, limit)` (it would cover the runtime or the kernel's half).
    OutsideWindow { lo: u64, hi: u64 },
    /// The entry point is not inside a loadable segment.
    EntryOutside(u64),
}

impl fmt::Display for ElfError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ElfError::NotElf => write!(f, "not an ELF file"),
            ElfError::Truncated => write!(f, "truncated ELF file (headers or segments run past its end)"),
            ElfError::WrongClass => write!(f, "not a 64-bit little-endian ELF file"),
            ElfError::WrongMachine(m) => write!(f, "ELF machine {m} is not x86-64 (62)"),
            ElfError::WrongType(t) => write!(f, "ELF type {t} is not an executable (ET_EXEC or static-PIE ET_DYN)"),
            ElfError::Interp(name) => {
                let name = core::str::from_utf8(name).unwrap_or("(not UTF-8)");
                write!(f, "dynamically linked: needs the interpreter {name}; dynamic loading is not supported (link it with -static)")
            }
            ElfError::BadLoads => write!(f, "no loadable segment, or more than {MAX_LOADS}"),
            ElfError::BadSegment => write!(f, "a loadable segment's sizes are inconsistent (file size above memory size, or its end overflows)"),
            ElfError::Overlap => write!(f, "two loadable segments overlap"),
            ElfError::OutsideWindow { lo, hi } => write!(f, "a loadable segment lies outside [{lo:#x}, {hi:#x}) (it would cover the runtime)"),
            ElfError::EntryOutside(e) => write!(f, "entry point {e:#x} is outside the loaded image"),
        }
    }
}

/// One loadable segment, at its final address (the load bias added).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Load {
    pub vaddr: u64,
    pub memsz: u64,
    pub offset: u64,
    pub filesz: u64,
    /// `PF_R | PF_W | PF_X` bits.
    pub flags: u32,
}

/// Where a program goes and what its auxiliary vector says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub entry: u64,
    /// Added to every address of the file (0 for `ET_EXEC`).
    pub bias: u64,
    /// `AT_PHDR`: the program headers' address in memory.
    pub phdr: u64,
    pub phnum: u16,
    pub loads: [Load; MAX_LOADS],
    pub nloads: usize,
    /// Page-rounded bounds of the whole image.
    pub lo: u64,
    pub hi: u64,
    /// `PT_TLS`: (address, file size, memory size, alignment), if any.
    pub tls: Option<(u64, u64, u64, u64)>,
}

impl Plan {
    pub fn loads(&self) -> &[Load] {
        &self.loads[..self.nloads]
    }

    /// The page-aligned mappings to make: one run per segment, with a page that two
    /// segments share given to the run that comes first with both segments' permissions.
    /// Returns the number of runs written to `out` (`(start, end, PF_* flags)`).
    pub fn mappings(&self, out: &mut [(u64, u64, u32); MAX_LOADS]) -> usize {
        let mut n = 0;
        for l in self.loads() {
            let mut s = l.vaddr & !(PAGE - 1);
            let e = (l.vaddr + l.memsz).next_multiple_of(PAGE);
            if n > 0 && out[n - 1].1 > s {
                // The previous run ends in this segment's first page: widen it there.
                out[n - 1].2 |= l.flags;
                s = out[n - 1].1;
            }
            if s < e {
                out[n] = (s, e, l.flags);
                n += 1;
            }
        }
        n
    }
}

fn rd<const N: usize>(d: &[u8], o: u64) -> Result<[u8; N], ElfError<'static>> {
    let o = usize::try_from(o).map_err(|_| ElfError::Truncated)?;
    d.get(o..o.checked_add(N).ok_or(ElfError::Truncated)?).and_then(|b| b.try_into().ok()).ok_or(ElfError::Truncated)
}
fn u16_at(d: &[u8], o: u64) -> Result<u16, ElfError<'static>> {
    rd::<2>(d, o).map(u16::from_le_bytes)
}
fn u32_at(d: &[u8], o: u64) -> Result<u32, ElfError<'static>> {
    rd::<4>(d, o).map(u32::from_le_bytes)
}
fn u64_at(d: &[u8], o: u64) -> Result<u64, ElfError<'static>> {
    rd::<8>(d, o).map(u64::from_le_bytes)
}

/// Check `file` and plan its loading. A static PIE goes at `pie_base` (page-aligned);
/// every segment must end up inside `[min_addr, limit)`.
pub fn plan(file: &[u8], pie_base: u64, min_addr: u64, limit: u64) -> Result<Plan, ElfError<'_>> {
    if file.len() < 4 || &file[..4] != b"\x7fELF" {
        return Err(ElfError::NotElf);
    }
    if file.len() < 64 {
        return Err(ElfError::Truncated);
    }
    if file[4] != 2 || file[5] != 1 {
        return Err(ElfError::WrongClass);
    }
    let etype = u16_at(file, 16)?;
    let machine = u16_at(file, 18)?;
    if machine != EM_X86_64 {
        return Err(ElfError::WrongMachine(machine));
    }
    if etype != ET_EXEC && etype != ET_DYN {
        return Err(ElfError::WrongType(etype));
    }
    let entry = u64_at(file, 24)?;
    let phoff = u64_at(file, 32)?;
    let phentsize = u16_at(file, 54)?;
    let phnum = u16_at(file, 56)?;
    if phentsize != PHENT {
        return Err(ElfError::WrongClass);
    }
    let ph_end = phoff.checked_add(u64::from(phnum) * u64::from(PHENT)).ok_or(ElfError::Truncated)?;
    if ph_end > file.len() as u64 {
        return Err(ElfError::Truncated);
    }
    let mut loads = [Load::default(); MAX_LOADS];
    let mut n = 0;
    let mut phdr_vaddr = None;
    let mut tls = None;
    for i in 0..u64::from(phnum) {
        let o = phoff + i * u64::from(PHENT);
        let ptype = u32_at(file, o)?;
        let flags = u32_at(file, o + 4)?;
        let (offset, vaddr, filesz, memsz, align) = (u64_at(file, o + 8)?, u64_at(file, o + 16)?, u64_at(file, o + 32)?, u64_at(file, o + 40)?, u64_at(file, o + 48)?);
        match ptype {
            PT_INTERP => {
                let end = offset.checked_add(filesz).filter(|&e| e <= file.len() as u64).ok_or(ElfError::Truncated)?;
                let name = &file[offset as usize..end as usize];
                let name = name.split(|&b| b == 0).next().unwrap_or(name);
                return Err(ElfError::Interp(name));
            }
            PT_PHDR => phdr_vaddr = Some(vaddr),
            PT_TLS => tls = Some((vaddr, filesz, memsz, align)),
            PT_LOAD => {
                if n == MAX_LOADS {
                    return Err(ElfError::BadLoads);
                }
                if filesz > memsz || vaddr.checked_add(memsz).is_none() {
                    return Err(ElfError::BadSegment);
                }
                if offset.checked_add(filesz).is_none_or(|e| e > file.len() as u64) {
                    return Err(ElfError::Truncated);
                }
                loads[n] = Load { vaddr, memsz, offset, filesz, flags };
                n += 1;
            }
            _ => {}
        }
    }
    if n == 0 {
        return Err(ElfError::BadLoads);
    }
    let loads_sorted = {
        let l = &mut loads[..n];
        l.sort_unstable_by_key(|l| l.vaddr);
        for w in l.windows(2) {
            if w[0].vaddr + w[0].memsz > w[1].vaddr {
                return Err(ElfError::Overlap);
            }
        }
        l[0].vaddr & !(PAGE - 1)
    };
    let bias = if etype == ET_DYN { pie_base.wrapping_sub(loads_sorted) } else { 0 };
    let window = ElfError::OutsideWindow { lo: min_addr, hi: limit };
    for l in &mut loads[..n] {
        l.vaddr = l.vaddr.checked_add(bias).ok_or(window)?;
        let end = l.vaddr.checked_add(l.memsz).ok_or(window)?;
        if l.vaddr < min_addr || end > limit {
            return Err(window);
        }
    }
    let entry = entry.wrapping_add(bias);
    if !loads[..n].iter().any(|l| (l.vaddr..l.vaddr + l.memsz).contains(&entry)) {
        return Err(ElfError::EntryOutside(entry));
    }
    // AT_PHDR: PT_PHDR's address, else the headers' place inside the segment that loads them.
    let phdr = match phdr_vaddr {
        Some(v) => v.wrapping_add(bias),
        None => loads[..n]
            .iter()
            .find(|l| phoff >= l.offset && ph_end <= l.offset + l.filesz)
            .map(|l| l.vaddr + (phoff - l.offset))
            .unwrap_or(0),
    };
    let lo = loads[0].vaddr & !(PAGE - 1);
    let hi = loads[..n].iter().map(|l| (l.vaddr + l.memsz).next_multiple_of(PAGE)).max().unwrap_or(lo);
    let tls = tls.map(|(v, f, m, a)| (v.wrapping_add(bias), f, m, a));
    Ok(Plan { entry, bias, phdr, phnum, loads, nloads: n, lo, hi, tls })
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    /// A minimal ELF64 executable: header, `phdrs` program headers right after it, then
    /// `body` bytes; `entry`.
    fn elf(etype: u16, machine: u16, entry: u64, phdrs: &[(u32, u32, u64, u64, u64, u64)], tail: &[u8]) -> Vec<u8> {
        let mut f = std::vec![0u8; 64];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = 2;
        f[5] = 1;
        f[6] = 1;
        f[16..18].copy_from_slice(&etype.to_le_bytes());
        f[18..20].copy_from_slice(&machine.to_le_bytes());
        f[24..32].copy_from_slice(&entry.to_le_bytes());
        f[32..40].copy_from_slice(&64u64.to_le_bytes());
        f[52..54].copy_from_slice(&64u16.to_le_bytes());
        f[54..56].copy_from_slice(&PHENT.to_le_bytes());
        f[56..58].copy_from_slice(&(phdrs.len() as u16).to_le_bytes());
        for &(t, fl, off, va, filesz, memsz) in phdrs {
            let mut p = [0u8; 56];
            p[0..4].copy_from_slice(&t.to_le_bytes());
            p[4..8].copy_from_slice(&fl.to_le_bytes());
            p[8..16].copy_from_slice(&off.to_le_bytes());
            p[16..24].copy_from_slice(&va.to_le_bytes());
            p[32..40].copy_from_slice(&filesz.to_le_bytes());
            p[40..48].copy_from_slice(&memsz.to_le_bytes());
            f.extend_from_slice(&p);
        }
        f.extend_from_slice(tail);
        f.resize(f.len().max(0x3000), 0);
        f
    }

    const TEXT: (u32, u32, u64, u64, u64, u64) = (PT_LOAD, PF_R | PF_X, 0, 0x400000, 0x1000, 0x1000);
    const DATA: (u32, u32, u64, u64, u64, u64) = (PT_LOAD, PF_R | PF_W, 0x1f00, 0x401f00, 0x100, 0x2000);
    const LIMIT: u64 = 0x2000_0000;

    #[test]
    fn an_exec_file_is_planned_at_its_addresses() {
        let f = elf(ET_EXEC, EM_X86_64, 0x400100, &[TEXT, DATA], &[]);
        let p = plan(&f, 0x1000_0000, 0x10000, LIMIT).unwrap();
        assert_eq!((p.entry, p.bias, p.lo, p.hi, p.nloads), (0x400100, 0, 0x400000, 0x404000, 2));
        // The headers sit at offset 64 of the first segment.
        assert_eq!(p.phdr, 0x400040);
        let mut m = [(0, 0, 0); MAX_LOADS];
        let n = p.mappings(&mut m);
        assert_eq!(&m[..n], &[(0x400000, 0x401000, PF_R | PF_X), (0x401000, 0x404000, PF_R | PF_W)]);
    }

    #[test]
    fn segments_sharing_a_page_get_one_run_with_both_permissions() {
        let data = (PT_LOAD, PF_R | PF_W, 0x800, 0x400800, 0x100, 0x1000);
        let text = (PT_LOAD, PF_R | PF_X, 0, 0x400000, 0x800, 0x800);
        let f = elf(ET_EXEC, EM_X86_64, 0x400100, &[text, data], &[]);
        let p = plan(&f, 0, 0x10000, LIMIT).unwrap();
        let mut m = [(0, 0, 0); MAX_LOADS];
        let n = p.mappings(&mut m);
        assert_eq!(&m[..n], &[(0x400000, 0x401000, PF_R | PF_W | PF_X), (0x401000, 0x402000, PF_R | PF_W)]);
    }

    #[test]
    fn a_static_pie_is_moved_to_the_base() {
        let text = (PT_LOAD, PF_R | PF_X, 0, 0, 0x1000, 0x1000);
        let f = elf(ET_DYN, EM_X86_64, 0x100, &[text], &[]);
        let p = plan(&f, 0x1000_0000, 0x10000, LIMIT).unwrap();
        assert_eq!((p.bias, p.entry, p.lo, p.phdr), (0x1000_0000, 0x1000_0100, 0x1000_0000, 0x1000_0040));
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        let good = elf(ET_EXEC, EM_X86_64, 0x400100, &[TEXT, DATA], &[]);
        assert_eq!(plan(b"#!/bin/sh\n", 0, 0x10000, LIMIT), Err(ElfError::NotElf));
        assert_eq!(plan(&good[..40], 0, 0x10000, LIMIT), Err(ElfError::Truncated));
        // Program headers past the end.
        assert_eq!(plan(&good[..100], 0, 0x10000, LIMIT), Err(ElfError::Truncated));
        // A segment's bytes past the end.
        assert_eq!(plan(&good[..0x1f80], 0, 0x10000, LIMIT), Err(ElfError::Truncated));
        let mut c32 = good.clone();
        c32[4] = 1;
        assert_eq!(plan(&c32, 0, 0x10000, LIMIT), Err(ElfError::WrongClass));
        assert_eq!(plan(&elf(ET_EXEC, 183, 0x400100, &[TEXT], &[]), 0, 0x10000, LIMIT), Err(ElfError::WrongMachine(183)));
        assert_eq!(plan(&elf(1, EM_X86_64, 0x400100, &[TEXT], &[]), 0, 0x10000, LIMIT), Err(ElfError::WrongType(1)));
        let over = (PT_LOAD, PF_R, 0, 0x400800, 0x100, 0x100);
        assert_eq!(plan(&elf(ET_EXEC, EM_X86_64, 0x400100, &[TEXT, over], &[]), 0, 0x10000, LIMIT), Err(ElfError::Overlap));
        let runtime = (PT_LOAD, PF_R, 0, 0x1fff_f000, 0x100, 0x2000);
        assert_eq!(plan(&elf(ET_EXEC, EM_X86_64, 0x400100, &[TEXT, runtime], &[]), 0, 0x10000, LIMIT), Err(ElfError::OutsideWindow { lo: 0x10000, hi: LIMIT }));
        let huge = (PT_LOAD, PF_R, 0, 0x400000, 0x100, u64::MAX - 0x1000);
        assert_eq!(plan(&elf(ET_EXEC, EM_X86_64, 0x400100, &[huge], &[]), 0, 0x10000, LIMIT), Err(ElfError::BadSegment));
        let fat = (PT_LOAD, PF_R, 0, 0x400000, 0x200, 0x100);
        assert_eq!(plan(&elf(ET_EXEC, EM_X86_64, 0x400100, &[fat], &[]), 0, 0x10000, LIMIT), Err(ElfError::BadSegment));
        assert_eq!(plan(&elf(ET_EXEC, EM_X86_64, 0x900000, &[TEXT], &[]), 0, 0x10000, LIMIT), Err(ElfError::EntryOutside(0x900000)));
        assert_eq!(plan(&elf(ET_EXEC, EM_X86_64, 0x400100, &[], &[]), 0, 0x10000, LIMIT), Err(ElfError::BadLoads));
    }

    #[test]
    fn an_interpreter_is_named_in_the_refusal() {
        let name = b"/lib/ld-musl-x86_64.so.1\0";
        let interp = (PT_INTERP, PF_R, 0x2000, 0, name.len() as u64, name.len() as u64);
        let mut f = elf(ET_DYN, EM_X86_64, 0x100, &[interp, TEXT], &[]);
        f[0x2000..0x2000 + name.len()].copy_from_slice(name);
        let e = plan(&f, 0x1000_0000, 0x10000, LIMIT).unwrap_err();
        assert_eq!(e, ElfError::Interp(b"/lib/ld-musl-x86_64.so.1"));
        let msg = std::format!("{e}");
        assert!(msg.contains("/lib/ld-musl-x86_64.so.1") && msg.contains("dynamic loading is not supported"), "{msg}");
    }
}
