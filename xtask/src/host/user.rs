//! User programs: build every binary of `user/apps` for `x86_64-unknown-none` (release, static,
//! linked at 0x400000 by user/link.ld) and pack them into `target/initrd.cpio`, a newc cpio
//! archive whose file names are the program names. QEMU passes the archive as `-initrd` (a
//! PVH module; GRUB `module2`), and the kernel looks programs up by name (`init=NAME`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::host::env::{target_dir, workspace_root};

/// Code generation for user programs: a fixed link address (no PIE, code model small, the
/// default) and frame pointers for backtraces. Passed through
/// `CARGO_TARGET_X86_64_UNKNOWN_NONE_RUSTFLAGS`, so user builds get their own target dir.
/// `USER_BASE` and `INIT_IMAGE_LIMIT` (xtask does not depend on the abi crate).
const USER_BASE: u64 = 0x1000;
const INIT_IMAGE_LIMIT: u64 = 1 << 30;

pub const USER_RUSTFLAGS: &str = "-C relocation-model=static -C force-frame-pointers=yes";

/// Target directory of user builds (never the kernel's: different flags).
pub fn user_target_dir() -> PathBuf {
    target_dir().join("user")
}

/// Where `build_initrd` writes the archive.
pub fn initrd_path() -> PathBuf {
    target_dir().join("initrd.cpio")
}

/// Names of the programs in `user/apps/src/bin` (one per `NAME.rs`), sorted.
pub fn program_names() -> Result<Vec<String>, String> {
    let dir = workspace_root().join("user/apps/src/bin");
    let mut names = Vec::new();
    for e in fs::read_dir(&dir).map_err(|e| format!("user: cannot list {}: {e}", dir.display()))? {
        let path = e.map_err(|e| format!("user: {e}"))?.path();
        if path.extension().and_then(|x| x.to_str()) == Some("rs") {
            if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
                names.push(stem.to_string());
            }
        }
    }
    names.sort();
    if names.is_empty() {
        return Err(format!("user: no programs in {}", dir.display()));
    }
    Ok(names)
}

/// Build all user programs (release) and return the directory holding the binaries.
pub fn build_programs() -> Result<PathBuf, String> {
    crate::host::env::ensure_bare_target()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(workspace_root())
        .env("CARGO_TARGET_X86_64_UNKNOWN_NONE_RUSTFLAGS", USER_RUSTFLAGS)
        .arg("build")
        .arg("--target-dir")
        .arg(user_target_dir())
        .args(["--quiet", "--release", "-p", "apps", "--bins", "--target", "x86_64-unknown-none"])
        .status()
        .map_err(|e| format!("user: cannot run cargo: {e}"))?;
    if !status.success() {
        return Err("user: building user programs failed".into());
    }
    Ok(user_target_dir().join("x86_64-unknown-none/release"))
}

/// Check that `data` is what the kernel can load: a static x86-64 ELF executable (`ET_EXEC`)
/// whose loadable segments lie in `[USER_BASE, INIT_IMAGE_LIMIT)`.
pub fn check_program(name: &str, data: &[u8]) -> Result<(), String> {
    let u16_at = |o: usize| data.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| data.get(o..o + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()));
    let u64_at = |o: usize| data.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
    if data.get(..4) != Some(b"\x7fELF") || data.get(4) != Some(&2) {
        return Err(format!("user: {name} is not a 64-bit ELF file"));
    }
    if u16_at(16) != Some(2) || u16_at(18) != Some(62) {
        return Err(format!("user: {name} is not a static x86-64 executable (ET_EXEC); is it a PIE?"));
    }
    let (phoff, phentsize, phnum) = match (u64_at(32), u16_at(54), u16_at(56)) {
        (Some(o), Some(s), Some(n)) => (o as usize, s as usize, n as usize),
        _ => return Err(format!("user: {name}: truncated ELF header")),
    };
    let mut loads = 0;
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        let (Some(ty), Some(vaddr), Some(memsz)) = (u32_at(ph), u64_at(ph + 16), u64_at(ph + 40)) else {
            return Err(format!("user: {name}: truncated program header {i}"));
        };
        if ty == 3 {
            return Err(format!("user: {name} asks for a dynamic loader (PT_INTERP)"));
        }
        if ty == 1 && memsz > 0 {
            loads += 1;
            let end = vaddr.saturating_add(memsz);
            if vaddr < USER_BASE || end > INIT_IMAGE_LIMIT {
                return Err(format!(
                    "user: {name}: segment {vaddr:#x}..{end:#x} is outside [{:#x}, {:#x})",
                    USER_BASE,
                    INIT_IMAGE_LIMIT
                ));
            }
        }
    }
    if loads == 0 {
        return Err(format!("user: {name} has no loadable segments"));
    }
    Ok(())
}

/// Build all user programs and pack them into `target/initrd.cpio`; returns its path.
pub fn build_initrd() -> Result<PathBuf, String> {
    let bin_dir = build_programs()?;
    let mut programs = Vec::new();
    for name in program_names()? {
        let path = bin_dir.join(&name);
        let data = fs::read(&path).map_err(|e| format!("user: cannot read {}: {e}", path.display()))?;
        check_program(&name, &data)?;
        programs.push((name, loadable_image(&data)));
    }
    let out = initrd_path();
    write_archive(&out, &programs)?;
    Ok(out)
}

/// What the archive holds of a checked program: the ELF up to the end of the last byte any
/// program header names (the header, the program headers, every segment's file bytes), with
/// the section header fields cleared (`e_shoff`, `e_shnum`, `e_shstrndx`). The kernel's loader
/// reads only program headers, and the debug information and section headers after the
/// segments were 95% of every program (hello: 6.9 MB of which 66 KB text and 109 KB data; the
/// archive 190 MB for 25 programs, which needed a 256 MiB guest for the shell). The files in
/// `target/user/x86_64-unknown-none/release/` keep everything, for gdb and symbol lookups
/// (the POSIX checker's user symbols read `bench-ours` there). `data` must have passed
/// `check_program`; a header that names bytes past the file keeps the file whole.
pub fn loadable_image(data: &[u8]) -> Vec<u8> {
    let u16_at = |o: usize| data.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u64_at = |o: usize| data.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(32), u16_at(54), u16_at(56)) else {
        return data.to_vec();
    };
    let mut end = (phoff as usize).saturating_add(phentsize as usize * phnum as usize).max(64);
    for i in 0..phnum as usize {
        let ph = phoff as usize + i * phentsize as usize;
        let (Some(off), Some(filesz)) = (u64_at(ph + 8), u64_at(ph + 32)) else { return data.to_vec() };
        if filesz > 0 {
            end = end.max(off.saturating_add(filesz) as usize);
        }
    }
    if end > data.len() {
        return data.to_vec();
    }
    let mut out = data[..end].to_vec();
    out[40..48].fill(0); // e_shoff
    out[60..64].fill(0); // e_shnum, e_shstrndx
    out
}

/// Write `programs` (name, ELF bytes) as a newc archive at `out`.
///
/// Several commands of one test run build the archive at the same path while others boot
/// from it (the busybox suite boots beside its init check). A plain rewrite truncates the
/// file under a QEMU that is reading it, and that boot finds half its programs ("no such
/// program in the boot image"). So the archive is written to a file of this process and
/// thread and renamed over `out` (atomic on one file system: a reader sees the old file or
/// the new one), and an archive whose bytes are already there is left alone.
pub fn write_archive(out: &Path, programs: &[(String, Vec<u8>)]) -> Result<(), String> {
    let bytes = pack(programs);
    if fs::read(out).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let name = out.file_name().and_then(|n| n.to_str()).unwrap_or("archive");
    let tmp = out.with_file_name(format!(".{name}.{}.{:?}.tmp", std::process::id(), std::thread::current().id()));
    fs::write(&tmp, &bytes).map_err(|e| format!("user: cannot write {}: {e}", tmp.display()))?;
    fs::rename(&tmp, out).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        format!("user: cannot move {} to {}: {e}", tmp.display(), out.display())
    })
}

/// Pack files into a newc archive: regular files, mode 0755, no directories.
pub fn pack(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let entries: Vec<crate::host::cpio::CpioEntry> = files
        .iter()
        .map(|(name, data)| crate::host::cpio::CpioEntry::File { path: name.clone(), mode: 0o755, data: data.clone() })
        .collect();
    crate::host::cpio::cpio_newc(&entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal newc reader, independent of the writer: (name, mode, data) per entry, up to
    /// the trailer. Checks the magic, the padding and that the trailer ends the archive.
    fn parse(mut a: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let total = a.len();
        loop {
            assert!(a.len() >= 110, "truncated header at offset {}", total - a.len());
            assert_eq!(&a[..6], b"070701", "bad magic at offset {}", total - a.len());
            let field = |i: usize| u32::from_str_radix(std::str::from_utf8(&a[6 + 8 * i..14 + 8 * i]).unwrap(), 16).unwrap();
            let mode = field(1);
            let size = field(6) as usize;
            let namesize = field(11) as usize;
            let name = std::str::from_utf8(&a[110..110 + namesize - 1]).unwrap().to_string();
            assert_eq!(a[110 + namesize - 1], 0, "name not NUL-terminated");
            let data_start = (110 + namesize).next_multiple_of(4);
            let data = a[data_start..data_start + size].to_vec();
            let next = (data_start + size).next_multiple_of(4);
            assert!(a[110 + namesize..data_start].iter().all(|&b| b == 0), "non-zero name padding");
            if name == "TRAILER!!!" {
                assert_eq!(next, a.len(), "bytes after the trailer");
                return out;
            }
            assert!(a[data_start + size..next].iter().all(|&b| b == 0), "non-zero data padding");
            out.push((name, mode, data));
            a = &a[next..];
        }
    }

    #[test]
    fn cpio_round_trip() {
        let files: Vec<(String, Vec<u8>)> = vec![
            ("hello".into(), b"\x7fELF hello".to_vec()),
            ("utest".into(), vec![]),
            ("a".into(), (0..=255u8).cycle().take(5000).collect()),
            ("exactly4".into(), b"abcd".to_vec()),
        ];
        let archive = pack(&files);
        assert_eq!(archive.len() % 4, 0);
        let back = parse(&archive);
        assert_eq!(back.len(), files.len());
        for ((name, data), (bname, bmode, bdata)) in files.iter().zip(&back) {
            assert_eq!(name, bname);
            assert_eq!(*bmode, 0o100755, "{name}: regular file, mode 755");
            assert_eq!(data, bdata, "{name}: contents");
        }
    }

    /// The archive is replaced whole (never truncated in place under a reader: an open
    /// handle keeps the old bytes), and no temporary file is left beside it.
    #[test]
    fn write_archive_replaces_the_file_whole() {
        let dir = std::env::temp_dir().join(format!("xtask-archive-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let out = dir.join("initrd.cpio");
        let first = vec![("a".to_string(), vec![1u8; 100])];
        let second = vec![("b".to_string(), vec![2u8; 10])];
        write_archive(&out, &first).unwrap();
        let reader = fs::File::open(&out).unwrap();
        write_archive(&out, &second).unwrap();
        let mut old = Vec::new();
        std::io::Read::read_to_end(&mut &reader, &mut old).unwrap();
        assert_eq!(parse(&old)[0].0, "a", "a reader opened before keeps the old archive");
        assert_eq!(parse(&fs::read(&out).unwrap())[0].0, "b");
        write_archive(&out, &second).unwrap();
        let names: Vec<_> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("initrd.cpio")], "only the archive is left");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn empty_archive_is_just_the_trailer() {
        assert!(parse(&pack(&[])).is_empty());
    }

    fn elf(ty: u16, segs: &[(u32, u64, u64)]) -> Vec<u8> {
        let mut d = vec![0u8; 64 + 56 * segs.len()];
        d[..4].copy_from_slice(b"\x7fELF");
        d[4] = 2;
        d[16..18].copy_from_slice(&ty.to_le_bytes());
        d[18..20].copy_from_slice(&62u16.to_le_bytes());
        d[32..40].copy_from_slice(&64u64.to_le_bytes());
        d[54..56].copy_from_slice(&56u16.to_le_bytes());
        d[56..58].copy_from_slice(&(segs.len() as u16).to_le_bytes());
        for (i, &(pt, vaddr, memsz)) in segs.iter().enumerate() {
            let ph = 64 + 56 * i;
            d[ph..ph + 4].copy_from_slice(&pt.to_le_bytes());
            d[ph + 16..ph + 24].copy_from_slice(&vaddr.to_le_bytes());
            d[ph + 40..ph + 48].copy_from_slice(&memsz.to_le_bytes());
        }
        d
    }

    /// A program with a segment at file offset 0x1000 (0x200 bytes) and 0x3000 bytes of
    /// "debug information" and section headers after it: the image keeps the headers and the
    /// segment byte for byte, drops the rest, clears the section header fields, and still
    /// passes `check_program`. A header naming bytes past the file keeps the file whole.
    #[test]
    fn loadable_image_keeps_segments_and_drops_the_rest() {
        let mut d = elf(2, &[(1, 0x40_1000, 0x400)]);
        d.resize(0x4200, 0xdb);
        d[64 + 8..64 + 16].copy_from_slice(&0x1000u64.to_le_bytes()); // p_offset
        d[64 + 32..64 + 40].copy_from_slice(&0x200u64.to_le_bytes()); // p_filesz
        for (i, b) in d[0x1000..0x1200].iter_mut().enumerate() {
            *b = i as u8;
        }
        d[40..48].copy_from_slice(&0x4000u64.to_le_bytes()); // e_shoff
        d[60..62].copy_from_slice(&3u16.to_le_bytes()); // e_shnum
        d[62..64].copy_from_slice(&2u16.to_le_bytes()); // e_shstrndx
        let img = loadable_image(&d);
        assert_eq!(img.len(), 0x1200);
        assert_eq!(&img[..40], &d[..40]);
        assert_eq!(&img[48..60], &d[48..60]);
        assert_eq!(&img[64..0x1200], &d[64..0x1200], "program headers and segment bytes unchanged");
        assert!(img[40..48].iter().chain(&img[60..64]).all(|&b| b == 0), "section header fields cleared");
        assert!(check_program("img", &img).is_ok());
        let mut past = d.clone();
        past[64 + 32..64 + 40].copy_from_slice(&0x9000u64.to_le_bytes());
        assert_eq!(loadable_image(&past), past);
    }

    #[test]
    fn program_checks() {
        assert!(check_program("ok", &elf(2, &[(1, 0x40_0000, 0x1000)])).is_ok());
        assert!(check_program("pie", &elf(3, &[(1, 0x40_0000, 0x1000)])).is_err());
        assert!(check_program("high", &elf(2, &[(1, 1 << 30, 0x1000)])).is_err());
        assert!(check_program("low", &elf(2, &[(1, 0, 0x1000)])).is_err());
        assert!(check_program("interp", &elf(2, &[(3, 0, 0), (1, 0x40_0000, 0x1000)])).is_err());
        assert!(check_program("noload", &elf(2, &[])).is_err());
        assert!(check_program("text", b"#!/bin/sh\n").is_err());
    }
}
