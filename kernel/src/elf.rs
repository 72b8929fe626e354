//! Loading a static ELF64 executable into a segment and mapping it into a root address
//! range with the permissions of its program headers.

use alloc::vec::Vec;

use crate::kobj::{ar, segment::Segment, KObject, Kind, ObjRef};
use abi::{Error, INIT_IMAGE_LIMIT, MAP_EXEC, MAP_READ, MAP_WRITE, PAGE_SIZE, USER_BASE};

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

struct Load {
    vaddr: u64,
    offset: u64,
    filesz: u64,
    memsz: u64,
    flags: u64,
}

/// The loaded image: its segment object and entry point.
pub struct Image {
    pub segment: ObjRef,
    pub entry: u64,
}

/// Load `elf` into a new segment (allocated on `home`) and map it into `root`.
pub fn load(elf: &[u8], root: &ObjRef, home: u32) -> Result<Image, &'static str> {
    if elf.get(..4) != Some(b"\x7fELF") || elf.get(4) != Some(&2) || elf.get(5) != Some(&1) {
        return Err("not a little-endian ELF64 file");
    }
    if u16_at(elf, 16) != Some(2) || u16_at(elf, 18) != Some(62) {
        return Err("not an x86-64 executable (ET_EXEC)");
    }
    let entry = u64_at(elf, 24).ok_or("truncated ELF header")?;
    let phoff = u64_at(elf, 32).ok_or("truncated ELF header")? as usize;
    let phentsize = u16_at(elf, 54).ok_or("truncated ELF header")? as usize;
    let phnum = u16_at(elf, 56).ok_or("truncated ELF header")? as usize;
    let mut loads: Vec<Load> = Vec::new();
    for i in 0..phnum {
        let o = phoff.checked_add(i.checked_mul(phentsize).ok_or("bad program headers")?).ok_or("bad program headers")?;
        if u32_at(elf, o).ok_or("truncated program header")? != 1 {
            continue; // PT_LOAD only
        }
        let pflags = u32_at(elf, o + 4).ok_or("truncated program header")?;
        let l = Load {
            offset: u64_at(elf, o + 8).ok_or("truncated program header")?,
            vaddr: u64_at(elf, o + 16).ok_or("truncated program header")?,
            filesz: u64_at(elf, o + 32).ok_or("truncated program header")?,
            memsz: u64_at(elf, o + 40).ok_or("truncated program header")?,
            flags: MAP_READ | if pflags & 2 != 0 { MAP_WRITE } else { 0 } | if pflags & 1 != 0 { MAP_EXEC } else { 0 },
        };
        let end = l.vaddr.checked_add(l.memsz).ok_or("segment wraps")?;
        if l.vaddr < USER_BASE || end > INIT_IMAGE_LIMIT || l.filesz > l.memsz {
            return Err("a loadable segment lies outside the user image area");
        }
        if l.offset.checked_add(l.filesz).is_none_or(|e| e > elf.len() as u64) {
            return Err("a loadable segment extends past the end of the file");
        }
        loads.try_reserve(1).map_err(|_| "out of memory")?;
        loads.push(l);
    }
    if loads.is_empty() {
        return Err("no loadable segments");
    }
    let lo = loads.iter().map(|l| l.vaddr & !(PAGE_SIZE - 1)).min().unwrap_or(0);
    let hi = loads.iter().map(|l| (l.vaddr + l.memsz).div_ceil(PAGE_SIZE) * PAGE_SIZE).max().unwrap_or(0);
    if entry < lo || entry >= hi {
        return Err("entry point outside the image");
    }
    let seg = Segment::new(hi - lo, home).map_err(|_| "out of memory")?;
    for l in &loads {
        seg.write_bytes(l.vaddr - lo, &elf[l.offset as usize..(l.offset + l.filesz) as usize]).map_err(|_| "out of memory")?;
    }
    let seg_obj = KObject::create(b"image", home, Kind::Segment(seg)).map_err(|_| "out of memory")?;
    // Permissions per page (the union where two program headers share a page), mapped as runs.
    let pages = ((hi - lo) / PAGE_SIZE) as usize;
    let mut perms: Vec<u64> = Vec::new();
    perms.try_reserve(pages).map_err(|_| "out of memory")?;
    perms.resize(pages, 0);
    for l in &loads {
        let first = ((l.vaddr & !(PAGE_SIZE - 1)) - lo) / PAGE_SIZE;
        let last = ((l.vaddr + l.memsz).div_ceil(PAGE_SIZE) * PAGE_SIZE - lo) / PAGE_SIZE;
        for p in first..last {
            perms[p as usize] |= l.flags;
        }
    }
    let mut i = 0;
    while i < pages {
        if perms[i] == 0 {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < pages && perms[j] == perms[i] {
            j += 1;
        }
        let voff = lo + i as u64 * PAGE_SIZE;
        ar::set_seg(root, voff, &seg_obj, voff - lo, (j - i) as u64 * PAGE_SIZE, perms[i]).map_err(|e: Error| e.as_str())?;
        i = j;
    }
    Ok(Image { segment: seg_obj, entry })
}
