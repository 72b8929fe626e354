//! The Linux baseline guest: fetch Debian's kernel, build an initramfs around one static
//! program, and boot it under the same QEMU configuration as this system (q35, `-cpu max`,
//! TCG). Used by the measurement plugins (docs/plugins.md) and meant for the Linux half of the
//! benchmark suite: [`fetch_kernel`], [`build_initramfs`], [`LinuxVm`], [`run_qemu`].

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::host::cpio::{cpio_newc, CpioEntry};
use crate::host::qemu::{run_qemu, RunOutput};

/// Where the kernel package is cached and unpacked.
pub fn cache_dir() -> PathBuf {
    crate::host::env::workspace_root().join("target").join("linux-cache")
}

/// An unpacked Debian kernel.
#[derive(Debug, Clone)]
pub struct LinuxKernel {
    /// e.g. `6.1.0-56-amd64`
    pub version: String,
    /// The bzImage (`/boot/vmlinuz-*`), which QEMU `-kernel` boots directly.
    pub bzimage: PathBuf,
}

fn find_unpacked(dir: &Path) -> Option<LinuxKernel> {
    let boot = dir.join("boot");
    let entries = fs::read_dir(&boot).ok()?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if let Some(version) = name.strip_prefix("vmlinuz-") {
            return Some(LinuxKernel { version: version.to_string(), bzimage: e.path() });
        }
    }
    None
}

fn run_ok(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{what}: cannot run: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let line = err.lines().find(|l| l.starts_with("E:")).or_else(|| err.lines().last()).unwrap_or("").trim();
        return Err(format!("{what} failed: {line}"));
    }
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}

/// Download (once) and unpack Debian's kernel package into [`cache_dir`]. Only `/boot` is
/// extracted: the bzImage and config are all the guest needs (no modules: the initramfs holds
/// everything, and the drivers used are built in).
pub fn fetch_kernel() -> Result<LinuxKernel, String> {
    let dir = cache_dir();
    let unpacked = dir.join("root");
    if let Some(k) = find_unpacked(&unpacked) {
        return Ok(k);
    }
    fs::create_dir_all(&unpacked).map_err(|e| format!("cannot create {}: {e}", unpacked.display()))?;
    crate::host::env::ensure_tool("apt-get", &["apt"])?;
    crate::host::env::ensure_tool("dpkg-deb", &["dpkg"])?;
    let deps = run_ok(Command::new("apt-cache").args(["depends", "linux-image-amd64"]), "apt-cache depends linux-image-amd64")?;
    let pkg = deps
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|p| p.starts_with("linux-image-"))
        .map(str::to_string)
        .ok_or("linux: apt-cache knows no linux-image-amd64 dependency (run apt-get update, or no Debian archive)")?;
    let have_deb = |dir: &Path| -> Option<PathBuf> {
        fs::read_dir(dir).ok()?.flatten().map(|e| e.path()).find(|p| {
            p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&format!("{pkg}_")) && n.to_string_lossy().ends_with(".deb"))
        })
    };
    let deb = match have_deb(&dir) {
        Some(d) => d,
        None => {
            eprintln!("linux: downloading {pkg} into {}", dir.display());
            run_ok(Command::new("apt-get").current_dir(&dir).args(["download", "-q", &pkg]), &format!("apt-get download {pkg} (no network?)"))?;
            have_deb(&dir).ok_or_else(|| format!("linux: apt-get download {pkg} left no .deb in {}", dir.display()))?
        }
    };
    // dpkg-deb --fsys-tarfile | tar -x ./boot : skip the ~400 MB of modules.
    let tar = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(&deb)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run dpkg-deb: {e}"))?;
    let status = Command::new("tar")
        .current_dir(&unpacked)
        .args(["-x", "./boot"])
        .stdin(tar.stdout.ok_or("dpkg-deb: no stdout")?)
        .status()
        .map_err(|e| format!("cannot run tar: {e}"))?;
    if !status.success() {
        return Err(format!("linux: unpacking {} failed", deb.display()));
    }
    find_unpacked(&unpacked).ok_or_else(|| format!("linux: {} holds no boot/vmlinuz-*", deb.display()))
}

/// The uncompressed kernel ELF inside a bzImage, so QEMU `-kernel` boots Linux through its PVH
/// entry (the `XEN_ELFNOTE_PHYS32_ENTRY` note) as it boots this system, instead of running the
/// bzImage's own decompressor in the guest (about 15 s of emulated xz under TCG).
///
/// The payload is found through the setup header (boot protocol 2.08+: `payload_offset` and
/// `payload_length`, relative to the protected-mode code after the `setup_sects` sectors), and
/// its format is told by its magic number. Debian's kernels use xz (`CONFIG_KERNEL_XZ`, with
/// the x86 BCJ filter), the only format decoded here; the others are named in the error. The
/// payload's last four bytes are the uncompressed length (the kernel build appends it), checked
/// against what the decoder produced. The output is cut to the ELF's own extent: with
/// `CONFIG_RELOCATABLE` the relocation table follows it, which the PVH path does not use.
pub fn extract_vmlinux(bzimage: &[u8]) -> Result<Vec<u8>, String> {
    let u16_at = |o: usize| bzimage.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| bzimage.get(o..o + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()));
    if bzimage.get(0x202..0x206) != Some(b"HdrS") {
        return Err("not a bzImage: no \"HdrS\" setup header at 0x202".into());
    }
    let version = u16_at(0x206).unwrap_or(0);
    if version < 0x208 {
        return Err(format!("bzImage boot protocol {}.{:02} has no payload fields (2.08 or later needed)", version >> 8, version & 0xff));
    }
    let setup_sects = match bzimage[0x1f1] {
        0 => 4,
        n => n as usize,
    };
    let pm_start = (setup_sects + 1) * 512;
    let (Some(off), Some(len)) = (u32_at(0x248), u32_at(0x24c)) else {
        return Err("bzImage: truncated setup header".into());
    };
    let start = pm_start + off as usize;
    let payload = start
        .checked_add(len as usize)
        .and_then(|end| bzimage.get(start..end))
        .ok_or_else(|| format!("bzImage: payload {start:#x}+{len:#x} lies past the file's {:#x} bytes", bzimage.len()))?;
    const XZ_MAGIC: &[u8] = b"\xfd7zXZ\x00";
    if !payload.starts_with(XZ_MAGIC) {
        let kind = match payload {
            [0x1f, 0x8b, ..] => "gzip",
            [0x28, 0xb5, 0x2f, 0xfd, ..] => "zstd",
            [0x5d, 0x00, ..] => "lzma",
            [b'B', b'Z', b'h', ..] => "bzip2",
            [0x02, 0x21, 0x4c, 0x18, ..] => "lz4",
            [0x89, b'L', b'Z', b'O', ..] => "lzo",
            _ => "unknown",
        };
        return Err(format!("bzImage: the payload at {start:#x} is {kind}-compressed; only xz (Debian's CONFIG_KERNEL_XZ) is decoded"));
    }
    if payload.len() < XZ_MAGIC.len() + 4 {
        return Err("bzImage: payload too short".into());
    }
    let (stream, size_tail) = payload.split_at(payload.len() - 4);
    let expected = u32::from_le_bytes(size_tail.try_into().unwrap()) as usize;
    let out = xz_decompress(stream, expected)?;
    if out.len() != expected {
        return Err(format!("bzImage: the payload decompressed to {} bytes; its size trailer says {expected}", out.len()));
    }
    let end = elf_extent(&out)?;
    let mut elf = out;
    elf.truncate(end);
    Ok(elf)
}

/// Decode one xz stream (stopping at its end: what follows is not xz). `size_hint` presizes
/// the output; an output that would pass twice the hint is refused as corrupt.
fn xz_decompress(stream: &[u8], size_hint: usize) -> Result<Vec<u8>, String> {
    let limit = size_hint.saturating_mul(2).max(1 << 20);
    let mut dec = xz4rust::XzDecoder::in_heap();
    let mut out = Vec::with_capacity(size_hint);
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = 0;
    loop {
        let r = dec.decode(&stream[pos..], &mut buf).map_err(|e| format!("bzImage: xz payload: {e:?} at compressed byte {pos}"))?;
        pos += r.input_consumed();
        out.extend_from_slice(&buf[..r.output_produced()]);
        if out.len() > limit {
            return Err(format!("bzImage: xz payload decodes to more than {limit} bytes"));
        }
        if r.is_end_of_stream() {
            return Ok(out);
        }
        if !r.made_progress() {
            return Err(format!("bzImage: xz payload ends early (at compressed byte {pos} of {})", stream.len()));
        }
    }
}

fn elf64_header(elf: &[u8]) -> Result<(), String> {
    if elf.get(..4) != Some(b"\x7fELF") {
        return Err("the bzImage payload is not an ELF file".into());
    }
    if elf.get(4) != Some(&2) || elf.get(5) != Some(&1) {
        return Err("the kernel ELF is not 64-bit little-endian".into());
    }
    if elf.get(18..20) != Some(&62u16.to_le_bytes()) {
        return Err("the kernel ELF is not for x86-64".into());
    }
    if elf.len() < 64 {
        return Err("the kernel ELF header is truncated".into());
    }
    Ok(())
}

fn le(elf: &[u8], off: usize, n: usize) -> Option<u64> {
    let b = elf.get(off..off.checked_add(n)?)?;
    Some(b.iter().rev().fold(0u64, |a, &x| (a << 8) | x as u64))
}

/// Program headers as (type, file offset, file size).
fn program_headers(elf: &[u8]) -> Result<Vec<(u32, u64, u64)>, String> {
    elf64_header(elf)?;
    let (phoff, phentsize, phnum) = (le(elf, 32, 8).unwrap_or(0) as usize, le(elf, 54, 2).unwrap_or(0) as usize, le(elf, 56, 2).unwrap_or(0) as usize);
    if phnum == 0 || phentsize < 56 {
        return Err("the kernel ELF has no program headers".into());
    }
    (0..phnum)
        .map(|i| {
            let ph = phoff.saturating_add(i * phentsize);
            match (le(elf, ph, 4), le(elf, ph + 8, 8), le(elf, ph + 32, 8)) {
                (Some(t), Some(o), Some(s)) => Ok((t as u32, o, s)),
                _ => Err(format!("the kernel ELF's program header {i} lies past its end")),
            }
        })
        .collect()
}

/// Where the ELF file ends: past its last segment's bytes and its section header table.
fn elf_extent(elf: &[u8]) -> Result<usize, String> {
    let phdrs = program_headers(elf)?;
    let mut end = (le(elf, 32, 8).unwrap_or(0) + 56 * phdrs.len() as u64).max(64);
    for (_, off, size) in phdrs {
        end = end.max(off.saturating_add(size));
    }
    let (shoff, shentsize, shnum) = (le(elf, 40, 8).unwrap_or(0), le(elf, 58, 2).unwrap_or(0), le(elf, 60, 2).unwrap_or(0));
    if shoff != 0 {
        end = end.max(shoff.saturating_add(shentsize * shnum));
    }
    if end > elf.len() as u64 {
        return Err(format!("the kernel ELF names bytes up to {end:#x} but the payload holds {:#x}", elf.len()));
    }
    Ok(end as usize)
}

/// Xen's ELF note type for the 32-bit PVH entry point (`XEN_ELFNOTE_PHYS32_ENTRY`), which
/// QEMU's `-kernel` looks for in an ELF kernel (this system's kernel has one too).
pub const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;

/// The physical PVH entry address from the ELF's `Xen` note of type 18, or an error saying
/// why QEMU could not boot the file through PVH.
pub fn pvh_entry(elf: &[u8]) -> Result<u64, String> {
    for (ty, off, size) in program_headers(elf)? {
        if ty != 4 {
            continue; // PT_NOTE only
        }
        let notes = usize::try_from(off)
            .ok()
            .zip(usize::try_from(size).ok())
            .and_then(|(o, s)| elf.get(o..o.checked_add(s)?))
            .ok_or("the kernel ELF's note segment lies past its end")?;
        let mut p = 0usize;
        while p + 12 <= notes.len() {
            let (namesz, descsz, ntype) = (le(notes, p, 4).unwrap() as usize, le(notes, p + 4, 4).unwrap() as usize, le(notes, p + 8, 4).unwrap() as u32);
            let name_at = p + 12;
            let desc_at = name_at + namesz.div_ceil(4) * 4;
            let next = desc_at.saturating_add(descsz.div_ceil(4) * 4);
            let (Some(name), Some(desc)) = (notes.get(name_at..name_at + namesz), notes.get(desc_at..desc_at.saturating_add(descsz))) else {
                return Err("the kernel ELF has a truncated note".into());
            };
            if name == b"Xen\0" && ntype == XEN_ELFNOTE_PHYS32_ENTRY {
                let entry = match descsz {
                    4 | 8 => le(desc, 0, descsz).unwrap(),
                    n => return Err(format!("the kernel ELF's PVH entry note has {n} bytes (4 or 8 expected)")),
                };
                if entry == 0 || entry >= 1 << 32 {
                    return Err(format!("the kernel ELF's PVH entry {entry:#x} is not a 32-bit physical address"));
                }
                return Ok(entry);
            }
            p = next;
        }
    }
    Err("the kernel ELF has no PVH entry note (Xen note type 18, XEN_ELFNOTE_PHYS32_ENTRY; CONFIG_PVH off?): QEMU cannot boot it with -kernel".into())
}

/// The kernel package's vmlinux (from [`extract_vmlinux`]), unpacked once into [`cache_dir`]
/// beside the bzImage and checked for the PVH entry note.
pub fn vmlinux(kernel: &LinuxKernel) -> Result<PathBuf, String> {
    let out = cache_dir().join(format!("vmlinux-{}", kernel.version));
    if let Ok(data) = fs::read(&out) {
        if pvh_entry(&data).is_ok() {
            return Ok(out);
        }
    }
    let image = fs::read(&kernel.bzimage).map_err(|e| format!("cannot read {}: {e}", kernel.bzimage.display()))?;
    let elf = extract_vmlinux(&image).map_err(|e| format!("{}: {e}", kernel.bzimage.display()))?;
    pvh_entry(&elf).map_err(|e| format!("{}: {e}", kernel.bzimage.display()))?;
    let tmp = out.with_extension("tmp");
    fs::write(&tmp, &elf).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    fs::rename(&tmp, &out).map_err(|e| format!("cannot rename {} to {}: {e}", tmp.display(), out.display()))?;
    Ok(out)
}

/// Build an initramfs whose /init is `init_binary` (a static program), plus the nodes it needs
/// before it can mount anything: /dev/console (so init has stdio), /proc, /tmp, /sys.
pub fn build_initramfs(init_binary: &Path, out: &Path) -> Result<(), String> {
    build_initramfs_with(init_binary, Vec::new(), out)
}

/// [`build_initramfs`] with more entries after the fixed ones (e.g. the NIC's modules).
pub fn build_initramfs_with(init_binary: &Path, more: Vec<CpioEntry>, out: &Path) -> Result<(), String> {
    let data = fs::read(init_binary).map_err(|e| format!("initramfs: cannot read {}: {e}", init_binary.display()))?;
    if data.get(..4) != Some(b"\x7fELF") {
        return Err(format!("initramfs: {} is not an ELF program", init_binary.display()));
    }
    let mut entries = vec![
        CpioEntry::Dir("dev".into()),
        CpioEntry::CharDev { path: "dev/console".into(), major: 5, minor: 1 },
        CpioEntry::Dir("proc".into()),
        CpioEntry::Dir("sys".into()),
        CpioEntry::Dir("tmp".into()),
        CpioEntry::File { path: "init".into(), mode: 0o755, data },
    ];
    entries.extend(more);
    if let Some(parent) = out.parent() {
        fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    fs::write(out, cpio_newc(&entries)).map_err(|e| format!("cannot write {}: {e}", out.display()))
}

/// A Linux guest boot: the same machine as this system's runs (q35, -cpu max, TCG), with the
/// knobs the measurements need.
#[derive(Debug, Clone)]
pub struct LinuxVm {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub smp: u32,
    pub mem_mib: u64,
    /// Appended to the fixed part of the command line (console, quiet, nokaslr, panic).
    pub append: String,
    /// Single-threaded TCG: required by the cachesim and sharing plugins.
    pub single_thread: bool,
    /// The exact mode (docs/plugins.md, [`crate::guest::plugin::exact_qemu_args`]): instruction-based
    /// guest time, a fixed random seed and guest clock, single-threaded TCG, so a run repeats
    /// exactly whatever the host's load. (With several vCPUs the plugin's `quantum=` must also
    /// be given, or 7.2's round-robin scheduler starves all but one vCPU under icount.)
    pub exact: bool,
    /// `-plugin` arguments, e.g. `/path/cachesim.so,out=/tmp/x,preset=nehalem`.
    pub plugins: Vec<String>,
    pub timeout: Duration,
    /// The NIC on QEMU's restricted user-mode network; none without it (the VM is
    /// `-nodefaults`, so QEMU adds no NIC of its own).
    pub net: Option<crate::host::vm::NetConfig>,
}

impl LinuxVm {
    pub fn new(kernel: &LinuxKernel, initrd: &Path) -> Self {
        LinuxVm {
            kernel: kernel.bzimage.clone(),
            initrd: initrd.to_path_buf(),
            smp: 1,
            mem_mib: 512,
            append: String::new(),
            single_thread: false,
            exact: false,
            plugins: Vec::new(),
            timeout: Duration::from_secs(300),
            net: None,
        }
    }

    /// The full qemu-system-x86_64 argument list.
    pub fn qemu_args(&self) -> Vec<String> {
        // icount needs single-threaded TCG.
        let accel = if self.single_thread || self.exact { "tcg,thread=single" } else { "tcg,thread=multi" };
        // nokaslr: kernel addresses match /proc/kallsyms from an earlier boot, so symbols can
        // be cached. panic=-1 with -no-reboot ends QEMU on a guest crash instead of hanging.
        let cmdline = format!("console=ttyS0 quiet nokaslr panic=-1 tsc=reliable {}", self.append).trim().to_string();
        let mut a: Vec<String> = [
            "-accel", accel, "-machine", "q35", "-cpu", "max", "-display", "none", "-serial", "stdio", "-monitor", "none",
            "-no-reboot", "-nodefaults",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(["-smp".into(), self.smp.to_string(), "-m".into(), format!("{}M", self.mem_mib)]);
        if self.exact {
            a.extend(crate::guest::plugin::exact_qemu_args());
        }
        a.extend(["-kernel".into(), self.kernel.display().to_string(), "-initrd".into(), self.initrd.display().to_string()]);
        a.extend(["-append".into(), cmdline]);
        for p in &self.plugins {
            a.extend(["-plugin".into(), p.clone()]);
        }
        if let Some(n) = &self.net {
            a.extend(n.qemu_args());
        }
        a
    }
}


/// The measurement guest's initramfs (the workload program from tools/qemu-plugins/guest).
pub fn guest_initramfs() -> Result<PathBuf, String> {
    let init = crate::guest::plugin::build_guest()?;
    let out = crate::guest::plugin::artifact_dir().join("guest-initramfs.cpio");
    build_initramfs(&init, &out)?;
    Ok(out)
}

/// Boot the guest once with workload `wl` and return its serial output (checked for errors).
pub fn run_workload(vm: &LinuxVm) -> Result<RunOutput, String> {
    let out = run_qemu(&vm.qemu_args(), vm.timeout)?;
    if out.timed_out {
        return Err(format!("linux guest timed out after {}s", vm.timeout.as_secs()));
    }
    if let Some(line) = out.serial.lines().find(|l| l.starts_with("workload-error")) {
        return Err(format!("linux guest: {line}"));
    }
    if out.exit_code != Some(0) {
        let why = out.stderr.lines().next().unwrap_or("").trim().to_string();
        return Err(format!("QEMU exited with {:?}: {why}", out.exit_code));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qemu_args_have_plugins_and_icount() {
        let k = LinuxKernel { version: "x".into(), bzimage: "/k".into() };
        let mut vm = LinuxVm::new(&k, Path::new("/i"));
        vm.exact = true;
        vm.plugins.push("/p.so,out=/o".into());
        let a = vm.qemu_args();
        assert!(a.windows(2).any(|w| w[0] == "-accel" && w[1] == "tcg,thread=single"));
        assert!(a.windows(2).any(|w| w[0] == "-plugin" && w[1] == "/p.so,out=/o"));
        // the exact mode: instruction-based time without sleeping, a fixed seed and clock
        assert!(a.windows(2).any(|w| w[0] == "-icount" && w[1] == "shift=3,align=off,sleep=off"));
        assert!(a.windows(2).any(|w| w[0] == "-seed"));
        assert!(a.windows(2).any(|w| w[0] == "-rtc" && w[1].contains("clock=vm") && w[1].contains("base=2")));
    }
}

#[cfg(test)]
mod vmlinux_tests {
    use super::*;

    /// A small kernel-like ELF: the header, a PT_LOAD of x86 code full of `call rel32`
    /// (E8), which the xz x86 BCJ filter rewrites, so a decoder that skipped the filter would
    /// give other bytes, and a PT_NOTE with a GNU note and then Xen's note of type `xen_type`
    /// whose 8-byte value is 0x1000850.
    pub(super) fn fixture_elf(xen_type: u32) -> Vec<u8> {
        let text_off = 0x100usize;
        let text: Vec<u8> = (0..800u32).flat_map(|i| [0xe8, (i * 7) as u8, (i >> 3) as u8, 0, 0]).collect();
        let mut notes = Vec::new();
        for (name, ty, desc) in [(&b"GNU\0"[..], 3u32, vec![0x5au8; 20]), (&b"Xen\0"[..], xen_type, 0x1000850u64.to_le_bytes().to_vec())] {
            notes.extend_from_slice(&(name.len() as u32).to_le_bytes());
            notes.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            notes.extend_from_slice(&ty.to_le_bytes());
            notes.extend_from_slice(name);
            notes.extend_from_slice(&desc);
        }
        let note_off = text_off + text.len();
        let mut e = vec![0u8; 64];
        e[..8].copy_from_slice(b"\x7fELF\x02\x01\x01\x00");
        e[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
        e[18..20].copy_from_slice(&62u16.to_le_bytes()); // x86-64
        e[20..24].copy_from_slice(&1u32.to_le_bytes());
        e[24..32].copy_from_slice(&0x1000000u64.to_le_bytes());
        e[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
        e[52..54].copy_from_slice(&64u16.to_le_bytes());
        e[54..56].copy_from_slice(&56u16.to_le_bytes());
        e[56..58].copy_from_slice(&2u16.to_le_bytes());
        e[58..60].copy_from_slice(&64u16.to_le_bytes());
        for (ty, off, size, paddr) in [(1u32, text_off, text.len(), 0x1000000u64), (4, note_off, notes.len(), 0)] {
            let mut ph = vec![0u8; 56];
            ph[..4].copy_from_slice(&ty.to_le_bytes());
            ph[8..16].copy_from_slice(&(off as u64).to_le_bytes());
            ph[16..24].copy_from_slice(&(0xffffffff80000000u64 + paddr).to_le_bytes());
            ph[24..32].copy_from_slice(&paddr.to_le_bytes());
            ph[32..40].copy_from_slice(&(size as u64).to_le_bytes());
            ph[40..48].copy_from_slice(&(size as u64).to_le_bytes());
            e.extend_from_slice(&ph);
        }
        e.resize(text_off, 0);
        e.extend_from_slice(&text);
        e.extend_from_slice(&notes);
        e
    }

    /// `fixture_elf(18)` followed by 64 bytes of 0xaa (standing for the relocation table the
    /// kernel build appends), compressed as the kernel build does: `xz --format=xz
    /// --check=crc32 --x86 --lzma2=dict=1MiB`.
    const FIXTURE_XZ: &[u8] = include_bytes!("../../testdata/vmlinux-fixture.xz");
    const UNCOMPRESSED_LEN: u32 = 4316 + 64;

    /// A bzImage around `payload`: 2 setup sectors after the boot sector, the payload 0x100
    /// bytes into the protected-mode code, boot protocol 2.15.
    fn bzimage(payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 3 * 512 + 0x100];
        b[0x1f1] = 2;
        b[0x202..0x206].copy_from_slice(b"HdrS");
        b[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes());
        b[0x248..0x24c].copy_from_slice(&0x100u32.to_le_bytes());
        b[0x24c..0x250].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        b.extend_from_slice(payload);
        b.extend_from_slice(&[0x11; 300]); // what follows the payload in a real image
        b
    }

    fn payload(size: u32) -> Vec<u8> {
        let mut p = FIXTURE_XZ.to_vec();
        p.extend_from_slice(&size.to_le_bytes());
        p
    }

    #[test]
    fn unpacks_the_elf_and_finds_the_pvh_entry() {
        assert_eq!(fixture_elf(18).len() + 64, UNCOMPRESSED_LEN as usize);
        let elf = extract_vmlinux(&bzimage(&payload(UNCOMPRESSED_LEN))).unwrap();
        // Exactly the ELF: the x86 filter undone, the trailing table cut off.
        assert!(elf == fixture_elf(18), "decoded ELF differs from the fixture's source");
        assert_eq!(pvh_entry(&elf), Ok(0x1000850));
    }

    #[test]
    fn bad_images_are_refused_with_a_reason() {
        let good = bzimage(&payload(UNCOMPRESSED_LEN));
        let err = |img: &[u8]| extract_vmlinux(img).unwrap_err();
        assert!(err(&[0u8; 0x300]).contains("HdrS"));
        assert!(err(&good[..0x300]).contains("past the file"));
        let mut old = good.clone();
        old[0x206..0x208].copy_from_slice(&0x0206u16.to_le_bytes());
        assert!(err(&old).contains("2.08"), "{}", err(&old));
        let mut long = good.clone();
        long[0x24c..0x250].copy_from_slice(&0x10_0000u32.to_le_bytes());
        assert!(err(&long).contains("past the file"), "{}", err(&long));
        assert!(err(&bzimage(&payload(UNCOMPRESSED_LEN + 1))).contains("size trailer"));
        let mut gz = payload(UNCOMPRESSED_LEN);
        gz[..2].copy_from_slice(&[0x1f, 0x8b]);
        assert!(err(&bzimage(&gz)).contains("gzip"));
        // A flipped bit in the compressed data: the stream's CRC32 (or the LZMA2 decoder) refuses it.
        let mut bad = payload(UNCOMPRESSED_LEN);
        bad[600] ^= 0x10;
        assert!(err(&bzimage(&bad)).contains("xz payload"), "{}", err(&bzimage(&bad)));
        // Cut short: the decoder runs out of input.
        let short = [&FIXTURE_XZ[..FIXTURE_XZ.len() - 40], &UNCOMPRESSED_LEN.to_le_bytes()[..]].concat();
        assert!(err(&bzimage(&short)).contains("xz payload"), "{}", err(&bzimage(&short)));
    }

    #[test]
    fn an_elf_without_the_pvh_note_is_refused() {
        assert!(pvh_entry(&fixture_elf(17)).unwrap_err().contains("no PVH entry note"));
        let mut truncated = fixture_elf(18);
        truncated.truncate(200);
        assert!(pvh_entry(&truncated).is_err());
        assert!(pvh_entry(b"MZ not an elf").unwrap_err().contains("not an ELF"));
        // A 4-byte entry value is read too (QEMU accepts both sizes).
        let mut four = fixture_elf(18);
        let n = four.len();
        // Rewrite the Xen note as descsz 4: its value then ends 4 bytes early, so the note
        // segment is 4 bytes shorter.
        four[n - 8 - 4 - 12 + 4..n - 8 - 4 - 12 + 8].copy_from_slice(&4u32.to_le_bytes());
        four.truncate(n - 4);
        let ph_note = 64 + 56;
        let size = u64::from_le_bytes(four[ph_note + 32..ph_note + 40].try_into().unwrap()) - 4;
        four[ph_note + 32..ph_note + 40].copy_from_slice(&size.to_le_bytes());
        assert_eq!(pvh_entry(&four), Ok(0x1000850));
    }
}
