//! Running one unmodified static Linux program (`cargo xtask exec`): on this system, through
//! the library OS's Linux personality (`ours`), or on the Linux guest (`linux`), with its
//! standard output and error copied to the terminal and its exit status returned, like
//! `qemu-x86_64` does. The conformance suite (`conformance`) runs the same programs on both
//! and compares what they did.
//!
//! `progs` builds the project's own C test programs (linux/progs/*.c) with `musl-gcc -static`
//! and fetches Debian's `busybox-static`; `debsrc` builds libevent and memcached from Debian's
//! source packages; `command` is the command line's side.

#[cfg(test)] // only the host test that keeps docs/linux-abi.md's table in step uses it
pub mod abi_doc;
pub mod abi_suite;
pub mod audit;
pub mod bbsuite;
pub mod command;
pub mod conformance;
pub mod cost;
pub mod fuzz;
pub mod debsrc;
pub mod linux;
pub mod ours;
pub mod progs;
pub mod sockets;

use std::path::PathBuf;
use std::time::Duration;

/// One program to run, the same request for both systems.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// The program on the host (a static x86-64 ELF).
    pub program: PathBuf,
    /// `argv[1..]` (`argv[0]` is the program's path inside the guest).
    pub args: Vec<String>,
    /// Extra files to put beside it: (path inside the guest, host file). A relative path is
    /// relative to `/tmp`, the program's working directory.
    pub files: Vec<(String, PathBuf)>,
    /// Standard input (empty: end of file at once).
    pub stdin: Vec<u8>,
    /// Guest vCPUs.
    pub smp: u32,
    /// Root file system image (ext2); `None`: a fresh root holding the program and `/tmp`.
    pub disk: Option<PathBuf>,
    /// Give up after this long (the run then fails; nothing is left running). With a
    /// network, a program still running then is a server: it is stopped and its output so
    /// far returned with status [`TIMEOUT_STATUS`].
    pub timeout: Duration,
    /// A NIC on QEMU's restricted user-mode network with TCP forwards from 127.0.0.1
    /// (`--net`, `--hostfwd`); `None`: no NIC.
    pub net: Option<crate::host::vm::NetConfig>,
}

/// `/etc/passwd` and `/etc/group` of a fresh root (both systems, without `--disk`): the
/// superuser, whom programs that switch users look up (memcached run as root needs `-u root`).
pub const ETC_PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n";
pub const ETC_GROUP: &str = "root:x:0:\n";

/// The status of a program with a network that was still running at the timeout (a server),
/// as `timeout(1)` reports it.
pub const TIMEOUT_STATUS: i32 = 124;

/// What a program did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The exit status as `wait4` reports it to a shell: the code, or 128 + signal number.
    pub status: i32,
    /// What else the guest printed (kernel console, "unimplemented system call" reports).
    pub console: String,
    /// The files left under `/tmp` after the program (and everything it started) ended, one
    /// line each, sorted by path, depth first (the format of [`file_line`]):
    /// `f MODE SIZE CRC32 PATH`, `d MODE PATH`, `l TARGET PATH` (MODE octal, CRC32 the
    /// IEEE CRC-32 of the contents in 8 hex digits, PATH relative to `/tmp`).
    pub files: Vec<String>,
}

/// Where the program is inside the guest: `/bin/NAME` (so `argv[0]` is a path it can
/// `execve`). NAME is the host file's name.
pub fn guest_path(program: &std::path::Path) -> String {
    format!("/bin/{}", program.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| "prog".into()))
}

/// A request file's path inside the guest: absolute as given, or under `/tmp`.
pub fn guest_file_path(p: &str) -> String {
    if p.starts_with('/') {
        p.to_string()
    } else {
        format!("/tmp/{p}")
    }
}

/// The IEEE CRC-32 (as zlib's `crc32`), which the guests print for each file left behind.
pub fn crc32(data: &[u8]) -> u32 {
    let mut c = 0xffff_ffffu32;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 { 0xedb8_8320 ^ (c >> 1) } else { c >> 1 };
        }
    }
    !c
}

/// One line of [`ExecOutput::files`] for a regular file (what a guest prints for it).
pub fn file_line(mode: u32, data: &[u8], path: &str) -> String {
    format!("f {:o} {} {:08x} {path}", mode & 0o7777, data.len(), crc32(data))
}

/// What a static Linux program file is, or why it cannot run (checked before any boot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElfKind {
    /// `ET_EXEC`, no interpreter.
    Static,
    /// `ET_DYN` with no `PT_INTERP` (static-PIE).
    StaticPie,
}

/// Check that `data` is a static x86-64 Linux executable: an ELF, 64-bit little-endian,
/// x86-64, an executable or static-PIE, with no `PT_INTERP` (a dynamic program is refused
/// naming its interpreter).
pub fn inspect_elf(data: &[u8]) -> Result<ElfKind, String> {
    if data.get(..4) != Some(b"\x7fELF") {
        return Err("not an ELF file".into());
    }
    if data.len() < 64 {
        return Err("a truncated ELF file (shorter than its 64-byte header)".into());
    }
    if data[4] != 2 || data[5] != 1 {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let u16_at = |o: usize| u16::from_le_bytes([data[o], data[o + 1]]);
    let machine = u16_at(18);
    if machine != 62 {
        return Err(format!("an ELF file for machine {machine}, not x86-64 (62)"));
    }
    let ty = u16_at(16);
    if ty != 2 && ty != 3 {
        return Err(format!("an ELF file of type {ty}, not an executable (ET_EXEC or ET_DYN)"));
    }
    let phoff = u64::from_le_bytes(data[32..40].try_into().unwrap()) as usize;
    let (phentsize, phnum) = (u16_at(54) as usize, u16_at(56) as usize);
    if phentsize < 56 {
        return Err("an ELF file with no program headers".into());
    }
    for i in 0..phnum {
        let ph = phoff.checked_add(i * phentsize).filter(|&p| p.checked_add(56).is_some_and(|e| e <= data.len()));
        let Some(ph) = ph else { return Err(format!("a truncated ELF file (program header {i} lies past its end)")) };
        if u32::from_le_bytes(data[ph..ph + 4].try_into().unwrap()) == 3 {
            let off = u64::from_le_bytes(data[ph + 8..ph + 16].try_into().unwrap()) as usize;
            let len = u64::from_le_bytes(data[ph + 32..ph + 40].try_into().unwrap()) as usize;
            let interp = off
                .checked_add(len)
                .and_then(|end| data.get(off..end))
                .map(|b| String::from_utf8_lossy(b.split(|&c| c == 0).next().unwrap_or(b)).to_string())
                .unwrap_or_else(|| "?".into());
            return Err(format!("a dynamically linked program (its interpreter is {interp}); only static programs run (link with -static)"));
        }
    }
    Ok(if ty == 2 { ElfKind::Static } else { ElfKind::StaticPie })
}

/// Check the program file of `req` before anything boots.
pub fn check_request(req: &ExecRequest) -> Result<ElfKind, String> {
    let data = std::fs::read(&req.program).map_err(|e| format!("{}: {e}", req.program.display()))?;
    let kind = inspect_elf(&data).map_err(|e| format!("{}: {e}", req.program.display()))?;
    for (guest, host) in &req.files {
        if !host.is_file() {
            return Err(format!("{} (for {guest} in the guest): not a file", host.display()));
        }
    }
    if let Some(d) = &req.disk {
        if !d.is_file() {
            return Err(format!("--disk {}: no such image", d.display()));
        }
    }
    Ok(kind)
}

/// The guest's report (exec-init.c, the `ttyS3` lines): the status and the files left
/// behind; an error the guest reported, or a report cut short, is an error.
pub fn decode_report(report: &str) -> Result<(i32, Vec<String>), String> {
    let mut status = None;
    let mut files = Vec::new();
    for line in report.lines() {
        if let Some(e) = line.strip_prefix("error ") {
            return Err(format!("the guest could not run the program: {e}"));
        } else if let Some(s) = line.strip_prefix("status ") {
            status = Some(s.trim().parse::<i32>().map_err(|_| format!("the guest reported a malformed status: {line:?}"))?);
        } else if let Some(f) = line.strip_prefix("file ") {
            files.push(f.to_string());
        } else if line == "end" {
            return status.map(|s| (s, files)).ok_or_else(|| "the guest's report has no status line".into());
        }
    }
    Err(match status {
        None => "the guest ended without reporting the program's status".into(),
        Some(_) => "the guest's report was cut short (no `end` line)".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF header plus `phdrs` (type, offset, size), and `tail` bytes after them.
    pub(crate) fn elf(ty: u16, machine: u16, phdrs: &[(u32, u64, u64)], tail: &[u8]) -> Vec<u8> {
        let mut e = vec![0u8; 64];
        e[..8].copy_from_slice(b"\x7fELF\x02\x01\x01\x00");
        e[16..18].copy_from_slice(&ty.to_le_bytes());
        e[18..20].copy_from_slice(&machine.to_le_bytes());
        e[32..40].copy_from_slice(&64u64.to_le_bytes());
        e[54..56].copy_from_slice(&56u16.to_le_bytes());
        e[56..58].copy_from_slice(&(phdrs.len() as u16).to_le_bytes());
        for &(t, off, size) in phdrs {
            let mut ph = vec![0u8; 56];
            ph[..4].copy_from_slice(&t.to_le_bytes());
            ph[8..16].copy_from_slice(&off.to_le_bytes());
            ph[32..40].copy_from_slice(&size.to_le_bytes());
            e.extend_from_slice(&ph);
        }
        e.extend_from_slice(tail);
        e
    }

    #[test]
    fn static_programs_pass_and_others_are_named() {
        assert_eq!(inspect_elf(&elf(2, 62, &[(1, 0, 64)], &[])), Ok(ElfKind::Static));
        assert_eq!(inspect_elf(&elf(3, 62, &[(1, 0, 64)], &[])), Ok(ElfKind::StaticPie));
        let interp = b"/lib64/ld-linux-x86-64.so.2\0";
        let dynamic = elf(3, 62, &[(1, 0, 64), (3, 64 + 2 * 56, interp.len() as u64)], interp);
        let e = inspect_elf(&dynamic).unwrap_err();
        assert!(e.contains("dynamically linked") && e.contains("/lib64/ld-linux-x86-64.so.2"), "{e}");
        assert!(inspect_elf(b"#!/bin/sh\necho hi\n").unwrap_err().contains("not an ELF"));
        assert!(inspect_elf(&elf(2, 183, &[], &[])).unwrap_err().contains("machine 183"));
        assert!(inspect_elf(&elf(1, 62, &[], &[])).unwrap_err().contains("type 1"));
        assert!(inspect_elf(&elf(2, 62, &[(1, 0, 64)], &[])[..40]).unwrap_err().contains("truncated"));
        // Program headers said to lie past the end of the file.
        let mut cut = elf(2, 62, &[(1, 0, 64), (1, 0, 64)], &[]);
        cut.truncate(64 + 56 + 10);
        assert!(inspect_elf(&cut).unwrap_err().contains("program header 1"), "{:?}", inspect_elf(&cut));
    }

    #[test]
    fn the_report_gives_status_and_files() {
        let r = "status 139\nfile d 755 sub\nfile f 644 3 352441c2 sub/a\nend\n";
        assert_eq!(decode_report(r), Ok((139, vec!["d 755 sub".to_string(), "f 644 3 352441c2 sub/a".to_string()])));
        // The CRC the guest prints is zlib's: crc32("abc") = 0x352441c2.
        assert_eq!(file_line(0o100644, b"abc", "sub/a"), "f 644 3 352441c2 sub/a");
        assert!(decode_report("status 0\nfile d 755 x\n").unwrap_err().contains("cut short"));
        assert!(decode_report("").unwrap_err().contains("without reporting"));
        assert!(decode_report("end\n").unwrap_err().contains("no status"));
        assert!(decode_report("status x\nend\n").unwrap_err().contains("malformed"));
        assert!(decode_report("error mount /dev/vda: No such device\n").unwrap_err().contains("mount /dev/vda"));
    }

    #[test]
    fn guest_paths() {
        assert_eq!(guest_path(std::path::Path::new("/x/target/busybox")), "/bin/busybox");
        assert_eq!(guest_file_path("in.txt"), "/tmp/in.txt");
        assert_eq!(guest_file_path("/etc/motd"), "/etc/motd");
    }
}
