//! Writes the kernel's own symbol table into its reserved `.ksyms` section after linking, so
//! exception backtraces inside the guest name functions. Addresses do not move: the section
//! was sized at link time and only its bytes change.

use std::path::Path;

fn u16_at(b: &[u8], o: usize) -> Result<u16, String> {
    b.get(o..o + 2).map(|s| u16::from_le_bytes(s.try_into().unwrap())).ok_or_else(|| "truncated ELF".into())
}
fn u32_at(b: &[u8], o: usize) -> Result<u32, String> {
    b.get(o..o + 4).map(|s| u32::from_le_bytes(s.try_into().unwrap())).ok_or_else(|| "truncated ELF".into())
}
fn u64_at(b: &[u8], o: usize) -> Result<u64, String> {
    b.get(o..o + 8).map(|s| u64::from_le_bytes(s.try_into().unwrap())).ok_or_else(|| "truncated ELF".into())
}

pub struct Section {
    pub name: String,
    pub kind: u32,
    pub offset: usize,
    pub size: usize,
    pub link: u32,
}

pub fn sections(elf: &[u8]) -> Result<Vec<Section>, String> {
    if elf.get(..4) != Some(b"\x7fELF") || elf.get(4) != Some(&2) {
        return Err("not an ELF64 file".into());
    }
    let shoff = u64_at(elf, 0x28)? as usize;
    let shentsize = u16_at(elf, 0x3A)? as usize;
    let shnum = u16_at(elf, 0x3C)? as usize;
    let shstrndx = u16_at(elf, 0x3E)? as usize;
    let mut raw = Vec::new();
    for i in 0..shnum {
        let o = shoff + i * shentsize;
        raw.push((
            u32_at(elf, o)?,
            u32_at(elf, o + 4)?,
            u64_at(elf, o + 0x18)? as usize,
            u64_at(elf, o + 0x20)? as usize,
            u32_at(elf, o + 0x28)?,
        ));
    }
    let strtab_off = raw.get(shstrndx).ok_or("bad section string index")?.2;
    let name_at = |off: u32| -> String {
        let start = strtab_off + off as usize;
        let end = elf[start..].iter().position(|&c| c == 0).map(|p| start + p).unwrap_or(start);
        String::from_utf8_lossy(&elf[start..end]).into_owned()
    };
    Ok(raw
        .into_iter()
        .map(|(name, kind, offset, size, link)| Section { name: name_at(name), kind, offset, size, link })
        .collect())
}

/// Function symbols (address, demangled name without the hash), sorted by address.
pub fn function_symbols(elf: &[u8]) -> Result<Vec<(u64, String)>, String> {
    let secs = sections(elf)?;
    let symtab = secs.iter().find(|s| s.kind == 2).ok_or("the kernel has no symbol table (was it stripped?)")?;
    let strtab = secs.get(symtab.link as usize).ok_or("bad symbol string table")?;
    let mut out = Vec::new();
    for i in 0..symtab.size / 24 {
        let o = symtab.offset + i * 24;
        let name_off = u32_at(elf, o)? as usize;
        let info = elf[o + 4];
        let value = u64_at(elf, o + 8)?;
        if info & 0xF != 2 || value == 0 {
            continue; // functions only
        }
        let start = strtab.offset + name_off;
        let end = elf[start..].iter().position(|&c| c == 0).map(|p| start + p).unwrap_or(start);
        let raw = String::from_utf8_lossy(&elf[start..end]);
        out.push((value, format!("{:#}", rustc_demangle::demangle(&raw))));
    }
    out.sort();
    out.dedup_by_key(|e| e.0);
    Ok(out)
}

/// Copy `src` to `dst` with the `.ksyms` section filled in.
pub fn write_symbolized(src: &Path, dst: &Path) -> Result<usize, String> {
    let mut elf = std::fs::read(src).map_err(|e| format!("cannot read {}: {e}", src.display()))?;
    let syms = function_symbols(&elf)?;
    let secs = sections(&elf)?;
    let space = secs.iter().find(|s| s.name == ".ksyms").ok_or("the kernel has no .ksyms section")?;
    let mut names = Vec::new();
    let mut entries = Vec::new();
    for (addr, name) in &syms {
        entries.extend_from_slice(&addr.to_le_bytes());
        entries.extend_from_slice(&(names.len() as u32).to_le_bytes());
        entries.extend_from_slice(&(name.len() as u32).to_le_bytes());
        names.extend_from_slice(name.as_bytes());
    }
    let mut blob = Vec::new();
    blob.extend_from_slice(b"KSYMTAB1");
    blob.extend_from_slice(&(syms.len() as u32).to_le_bytes());
    blob.extend_from_slice(&((16 + entries.len()) as u32).to_le_bytes());
    blob.extend_from_slice(&entries);
    blob.extend_from_slice(&names);
    if blob.len() > space.size {
        return Err(format!("symbol table needs {} bytes but .ksyms reserves {}; enlarge SPACE in kernel/src/ksyms.rs", blob.len(), space.size));
    }
    elf[space.offset..space.offset + blob.len()].copy_from_slice(&blob);
    std::fs::write(dst, &elf).map_err(|e| format!("cannot write {}: {e}", dst.display()))?;
    Ok(syms.len())
}
