//! The Linux side of the matrix: Debian's kernel and an initramfs whose `/init` is the static
//! `bench-linux` program. Booting, the plugin and reading the result are `guest`'s, the same
//! as for this system.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use testdefs::bench_catalog::BenchSpec;
use super::boot::{Common, Guest};
use crate::host::vm::VmConfig;

const MUSL: &str = "x86_64-unknown-linux-musl";
const GNU: &str = "x86_64-unknown-linux-gnu";

/// The kernel command line every Linux baseline boots with, before the benchmark's words:
/// serial console, quiet, no address randomization (stable instruction counts), power off on
/// panic, the TSC trusted (TCG's TSC is stable; without it the kernel may fall back to a
/// slower clocksource mid-run), and no boot-time check that the IO-APIC timer ticks within a
/// few host-starved milliseconds (`no_timer_check`: on a host at load 20-36 about one Linux
/// boot in ten panicked with `IO-APIC + timer doesn't work!` before /init; the check is
/// about buggy chipsets, not something the benchmarks measure).
pub const BASE_WORDS: &str = "console=ttyS0 quiet nokaslr panic=-1 tsc=reliable no_timer_check";

/// What `linux-tuned` adds: what a tuned benchmark machine switches off, each because it
/// costs Linux time on the benchmarked paths and ours has no counterpart
/// (docs/bench.md, "The Linux baselines"):
/// - `mitigations=off`: every CPU-vulnerability mitigation (page-table isolation on each
///   kernel entry and exit, retpolines, return-stack stuffing, buffer clearing, SSB);
/// - `lsm=capability`: no security module beyond capabilities (Debian enables landlock,
///   lockdown, yama and AppArmor; each adds hooks to open, stat, mmap, fork ...);
/// - `audit=0`: no system-call auditing context;
/// - `init_on_alloc=0`: pages and slab objects not zeroed on every allocation (Debian's
///   CONFIG_INIT_ON_ALLOC_DEFAULT_ON);
/// - `randomize_kstack_offset=off`: no random kernel-stack offset per system call;
/// - `nowatchdog`: no soft/hard lockup detector timers;
/// - `preempt=none`: the throughput setting of Debian's dynamic preemption.
/// Not `idle=poll`: spinning idle vCPUs would take host CPU time from the busy ones under TCG.
pub const TUNED_WORDS: &str = "mitigations=off lsm=capability audit=0 init_on_alloc=0 randomize_kstack_offset=off nowatchdog preempt=none";

/// The command line of a Linux baseline (the benchmark's words follow).
pub fn cmdline(tuned: bool) -> String {
    if tuned {
        format!("{BASE_WORDS} {TUNED_WORDS}")
    } else {
        BASE_WORDS.to_string()
    }
}

/// The line `bench-linux` prints about the kernel it runs on (before its result line):
/// `bench-config release=R lsm=A,B vuln_NAME=STATE~WITH~SPACES ...`.
pub const CONFIG_PREFIX: &str = "bench-config ";

pub struct LinuxSystem {
    /// Booted with [`TUNED_WORDS`] (`linux-tuned`).
    pub tuned: bool,
    version: String,
    /// The uncompressed vmlinux (booted through its PVH note), or the bzImage if it has none.
    pub(crate) kernel: PathBuf,
    initrd: PathBuf,
    /// The initramfs for the file rows: `initrd`'s program plus the disk's and ext4's modules
    /// (fsimage.rs), or why it could not be made (then those rows are errors with the reason).
    initrd_files: Result<PathBuf, String>,
    pub(crate) common: Common,
}

fn work_dir() -> PathBuf {
    crate::host::env::target_dir().join("bench")
}

/// Build `bench-linux` as a static program: musl if rustup has (or can add) the target,
/// otherwise glibc with a static C runtime.
pub fn build_guest_program() -> Result<PathBuf, String> {
    build_static("bench", "bench-linux")
}

/// Build binary `bin` of workspace package `package` as a static Linux program (musl, or
/// glibc with a static C runtime); also used for `metis-linux` (xtask/src/metis.rs).
pub fn build_static(package: &str, bin: &str) -> Result<PathBuf, String> {
    let installed = Command::new("rustup").args(["target", "list", "--installed"]).output().map(|o| String::from_utf8_lossy(&o.stdout).to_string()).unwrap_or_default();
    let musl = installed.lines().any(|l| l.trim() == MUSL)
        || Command::new("rustup").args(["target", "add", MUSL]).status().map(|s| s.success()).unwrap_or(false);
    let target = if musl { MUSL } else { GNU };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(crate::host::env::workspace_root())
        .args(["build", "--quiet", "--release", "-p", package, "--bin", bin, "--target", target])
        // A small /init: no debug info, symbols stripped (the initramfs is copied every boot).
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols");
    if !musl {
        let var = "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS";
        cmd.env(var, "-C target-feature=+crt-static");
    }
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("building {bin} for {target} failed"));
    }
    Ok(crate::host::env::target_dir().join(target).join("release").join(bin))
}

/// Debian's kernel as the baseline boots it: the uncompressed vmlinux through its PVH note,
/// or the bzImage if that cannot be had.
pub fn guest_kernel() -> Result<PathBuf, String> {
    let kernel = crate::guest::linux::fetch_kernel().map_err(|e| format!("linux: cannot get Debian's kernel package: {e}"))?;
    Ok(match pvh_vmlinux(&kernel.bzimage, &work_dir().join(format!("vmlinux-{}", kernel.version))) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("linux: booting the compressed bzImage (slower under TCG): {e}");
            kernel.bzimage
        }
    })
}

/// The kernel inside a bzImage, uncompressed into `out` (once): QEMU boots an ELF kernel with
/// a PVH entry note directly, which skips the real-mode setup and the in-guest decompression
/// (about 15 s per boot under TCG on this host, against a few seconds for the rest of it).
fn pvh_vmlinux(bzimage: &Path, out: &Path) -> Result<PathBuf, String> {
    if out.exists() && fs::metadata(out).and_then(|m| m.modified()).ok() >= fs::metadata(bzimage).and_then(|m| m.modified()).ok() {
        return Ok(out.to_path_buf());
    }
    let image = fs::read(bzimage).map_err(|e| format!("cannot read {}: {e}", bzimage.display()))?;
    // The payload is the first stream with a known compressor's magic, in the order Debian
    // has used them; the decompressor stops at the end of its stream (trailing bytes follow).
    const FORMATS: [(&[u8], &str, &[&str]); 3] = [
        (b"\xfd7zXZ\x00", "xz", &["-dc", "--single-stream"]),
        (b"\x28\xb5\x2f\xfd", "zstd", &["-dc"]),
        (b"\x1f\x8b\x08", "gzip", &["-dc"]),
    ];
    let (at, tool, args) = FORMATS
        .iter()
        .find_map(|(magic, tool, args)| image.windows(magic.len()).position(|w| w == *magic).map(|at| (at, *tool, *args)))
        .ok_or("no compressed payload found in the bzImage")?;
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {tool}: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let payload = image[at..].to_vec();
    // Written from a thread: the decompressor's output pipe fills while we still write.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&payload);
    });
    let result = child.wait_with_output().map_err(|e| format!("{tool}: {e}"))?;
    let _ = writer.join();
    let elf = result.stdout;
    if !has_pvh_note(&elf) {
        return Err(format!("the kernel {tool} unpacked from {} has no PVH entry note", bzimage.display()));
    }
    let tmp = out.with_extension("tmp");
    fs::create_dir_all(out.parent().unwrap_or(Path::new("."))).map_err(|e| e.to_string())?;
    fs::write(&tmp, &elf).and_then(|_| fs::rename(&tmp, out)).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    Ok(out.to_path_buf())
}

/// Whether an ELF64 image carries Xen's PHYS32_ENTRY note (type 18, name "Xen"), the PVH entry
/// point QEMU's `-kernel` looks for.
fn has_pvh_note(elf: &[u8]) -> bool {
    const PT_NOTE: u32 = 4;
    const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;
    let u16_at = |o: usize| elf.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u32_at = |o: usize| elf.get(o..o + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let u64_at = |o: usize| elf.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as usize);
    // ELF64, little endian.
    if elf.get(..6) != Some(b"\x7fELF\x02\x01") {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38)) else { return false };
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        if u32_at(ph) != Some(PT_NOTE) {
            continue;
        }
        let (Some(off), Some(size)) = (u64_at(ph + 8), u64_at(ph + 32)) else { continue };
        let mut n = off;
        while n + 12 <= off + size {
            let (Some(namesz), Some(descsz), Some(kind)) = (u32_at(n), u32_at(n + 4), u32_at(n + 8)) else { break };
            let name = elf.get(n + 12..n + 12 + namesz as usize).unwrap_or(&[]);
            if kind == XEN_ELFNOTE_PHYS32_ENTRY && name == b"Xen\0" {
                return true;
            }
            n += 12 + (namesz as usize).div_ceil(4) * 4 + (descsz as usize).div_ceil(4) * 4;
        }
    }
    false
}

/// `program` as /init with the modules the file rows need (virtio-pci, virtio-blk, ext4 and
/// their dependencies, from the kernel package), in target/bench/linux-initramfs-files.cpio.
pub fn files_initramfs(program: &Path) -> Result<PathBuf, String> {
    let k = crate::guest::linux::fetch_kernel()?;
    let out = work_dir().join("linux-initramfs-files.cpio");
    crate::guest::linux::build_initramfs_with(program, super::fsimage::linux_modules(&k)?, &out)?;
    Ok(out)
}

impl LinuxSystem {
    /// Fetch the kernel package (a clear error without network), build the guest program and
    /// its initramfs, and the insncount plugin.
    pub fn prepare(mem_mib: u64, insns: bool, logs: &Path) -> Result<LinuxSystem, String> {
        Self::prepare_baseline(mem_mib, insns, logs, false)
    }

    /// [`LinuxSystem::prepare`] for `linux` (`tuned` false) or `linux-tuned`.
    pub fn prepare_baseline(mem_mib: u64, insns: bool, logs: &Path, tuned: bool) -> Result<LinuxSystem, String> {
        let version = crate::guest::linux::fetch_kernel().map_err(|e| format!("linux: cannot get Debian's kernel package: {e}"))?.version;
        let kernel = guest_kernel()?;
        let program = build_guest_program()?;
        let initrd = work_dir().join("linux-initramfs.cpio");
        crate::guest::linux::build_initramfs(&program, &initrd)?;
        let initrd_files = files_initramfs(&program);
        if let Err(e) = &initrd_files {
            eprintln!("linux: no initramfs for the file rows: {e}");
        }
        let name = if tuned { "linux-tuned" } else { "linux" };
        Ok(LinuxSystem { tuned, version, kernel, initrd, initrd_files, common: Common::prepare(name, mem_mib, insns, logs)? })
    }

    /// This baseline's configuration for results.json: the kernel and command line, and what
    /// the first good boot of the run said about itself (its `bench-config` line, in the
    /// boot's serial log).
    pub fn config(&self, records: &[super::record::Record]) -> super::record::LinuxConfig {
        let mut c = super::record::LinuxConfig { system: self.common.system.into(), kernel: self.version.clone(), cmdline: cmdline(self.tuned), ..Default::default() };
        let said = records.iter().filter(|r| r.system == self.common.system && r.status == super::record::Status::Ok).find_map(|r| {
            let tag = if r.boot >= 1 && records.iter().any(|x| x.boot > 1) { format!("-boot{}", r.boot) } else { String::new() };
            let serial = fs::read_to_string(self.common.logs.join(format!("{}-{}-{}{tag}.serial.txt", r.system, r.benchmark, r.cores))).ok()?;
            parse_config(&serial)
        });
        match said {
            Some((release, lsm, vulns)) => {
                if release != self.version {
                    c.note = Some(format!("the guest said it runs {release}"));
                }
                c.lsm = lsm;
                c.mitigations = vulns;
            }
            None => c.note = Some("no good boot of bench-linux printed its configuration (only host-driven rows ran, or none succeeded)".into()),
        }
        c
    }
}

/// `(release, lsm, vulnerabilities)` from a boot's `bench-config` line; a vulnerability's
/// state has its spaces as `~` on the line and gets them back here.
pub fn parse_config(serial: &str) -> Option<(String, String, std::collections::BTreeMap<String, String>)> {
    let line = serial.lines().find_map(|l| l.trim().strip_prefix(CONFIG_PREFIX))?;
    let (mut release, mut lsm, mut vulns) = (String::new(), String::new(), std::collections::BTreeMap::new());
    for (k, v) in line.split_whitespace().filter_map(|w| w.split_once('=')) {
        match k {
            "release" => release = v.into(),
            "lsm" => lsm = v.into(),
            _ => {
                if let Some(name) = k.strip_prefix("vuln_") {
                    vulns.insert(name.to_string(), v.replace('~', " "));
                }
            }
        }
    }
    Some((release, lsm, vulns))
}

impl Guest for LinuxSystem {
    fn common(&self) -> &Common {
        &self.common
    }

    /// Debian's kernel with `bench-linux` as `/init`, which reads `words` from /proc/cmdline.
    fn vm(&self, words: &str) -> VmConfig {
        let cmdline = format!("{} {words}", cmdline(self.tuned));
        // A file row boots the initramfs with the disk's modules (bench-linux loads them and
        // mounts the image); without one, bench-linux says so and the cell is an error.
        let bench = words.split_whitespace().find_map(|w| w.strip_prefix("bench=")).unwrap_or("");
        let initrd = match &self.initrd_files {
            Ok(f) if testdefs::bench_catalog::uses_files(bench) => f,
            _ => &self.initrd,
        };
        let extra = vec!["-kernel".into(), self.kernel.display().to_string(), "-initrd".into(), initrd.display().to_string(), "-append".into(), cmdline];
        VmConfig { extra, ..VmConfig::default() }
    }

    fn unsupported(&self, spec: &BenchSpec, _cores: u32) -> Option<&'static str> {
        unsupported(spec)
    }

    fn ended_cleanly(&self, serial: &str, qemu_exit: Option<i32>) -> Result<(), String> {
        ended_cleanly(serial, qemu_exit)
    }
}

/// `bench-linux` powers the machine off only when its benchmark succeeded; otherwise, as
/// pid 1, it exits with 1, which makes the kernel panic (`Attempted to kill init!
/// exitcode=0x00000100`) and QEMU stop (`panic=-1`, `-no-reboot`). So the kernel's power-off
/// line, with no panic and QEMU's exit code 0, says the program succeeded and the guest
/// powered off normally.
pub(crate) fn ended_cleanly(serial: &str, qemu_exit: Option<i32>) -> Result<(), String> {
    if let Some(l) = serial.lines().find(|l| l.contains("Kernel panic")) {
        return Err(format!("the guest kernel panicked: {}", l.trim()));
    }
    if !serial.lines().any(|l| l.contains("reboot: Power down")) {
        return Err("the guest did not power off (no `reboot: Power down` line)".into());
    }
    if qemu_exit != Some(0) {
        return Err(format!("QEMU exit {qemu_exit:?} after the guest powered off, want 0"));
    }
    Ok(())
}

/// Why Linux cannot run a benchmark: the kernel-core ones need a core that runs other cores'
/// system calls, which Linux does not have.
pub fn unsupported(spec: &BenchSpec) -> Option<&'static str> {
    spec.kernel_core.then_some("Linux has no kernel cores (no core runs another core's system calls)")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches: a Linux cell `ok` from its result line although the program failed (it
    /// then exits as pid 1 and the kernel panics) or the guest never powered off.
    #[test]
    fn a_cell_needs_the_guest_to_power_off() {
        let good = "bench-result name=x\nbench-done\n[    3.1] reboot: Power down\n";
        assert!(ended_cleanly(good, Some(0)).is_ok());
        let failed = "bench-error name=x msg=y\nbench-done\n[    3.1] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100\n";
        assert!(ended_cleanly(failed, Some(0)).unwrap_err().contains("exitcode=0x00000100"));
        assert!(ended_cleanly("bench-result name=x\nbench-done\n", Some(0)).unwrap_err().contains("did not power off"));
        assert!(ended_cleanly(good, Some(1)).is_err());
        assert!(ended_cleanly(good, None).is_err());
    }

    /// Catches: the tuned baseline booting without its words, a vulnerability state read
    /// with underscores, the configuration line missed.
    #[test]
    fn tuned_command_line_and_the_guest_s_configuration_line() {
        assert!(!cmdline(false).contains("mitigations"));
        let t = cmdline(true);
        assert!(t.starts_with(BASE_WORDS) && t.contains("mitigations=off") && t.contains("lsm=capability"), "{t}");
        let serial = "noise\nbench-config release=6.1.0-57-amd64 lsm=capability vuln_meltdown=Not~affected vuln_spectre_v1=Mitigation:~__user~pointer~sanitization vuln_spectre_v2=Vulnerable\nbench-result name=x\n";
        let (rel, lsm, v) = parse_config(serial).unwrap();
        assert_eq!((rel.as_str(), lsm.as_str()), ("6.1.0-57-amd64", "capability"));
        assert_eq!(v["meltdown"], "Not affected");
        assert_eq!(v["spectre_v2"], "Vulnerable");
        assert_eq!(v["spectre_v1"], "Mitigation: __user pointer sanitization");
        assert!(parse_config("bench-result name=x\n").is_none());
    }

    #[test]
    fn kernel_core_benchmarks_are_unavailable_on_linux() {
        for b in testdefs::bench_catalog::BENCHES {
            assert_eq!(unsupported(b).is_some(), b.kernel_core, "{}", b.name);
        }
        assert!(unsupported(testdefs::bench_catalog::find("nullsyscall_forwarded").unwrap()).is_some_and(|w| w.contains("no kernel cores")));
    }

    /// A minimal ELF64 with one PT_NOTE segment holding `notes` (name, type).
    fn elf_with_notes(notes: &[(&[u8], u32)]) -> Vec<u8> {
        let mut body = Vec::new();
        for (name, kind) in notes {
            body.extend((name.len() as u32).to_le_bytes());
            body.extend(4u32.to_le_bytes());
            body.extend(kind.to_le_bytes());
            body.extend(*name);
            body.resize(body.len().div_ceil(4) * 4, 0);
            body.extend([0u8; 4]);
        }
        let mut e = vec![0u8; 0x40 + 0x38];
        e[..6].copy_from_slice(b"\x7fELF\x02\x01");
        e[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        e[0x36..0x38].copy_from_slice(&0x38u16.to_le_bytes());
        e[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        e[0x40..0x44].copy_from_slice(&4u32.to_le_bytes());
        e[0x48..0x50].copy_from_slice(&((0x40 + 0x38) as u64).to_le_bytes());
        e[0x60..0x68].copy_from_slice(&(body.len() as u64).to_le_bytes());
        e.extend(body);
        e
    }

    #[test]
    fn finds_the_pvh_entry_note() {
        assert!(has_pvh_note(&elf_with_notes(&[(b"Xen\0", 6), (b"Xen\0", 18)])));
        assert!(!has_pvh_note(&elf_with_notes(&[(b"Xen\0", 6), (b"GNU\0", 18)])));
        assert!(!has_pvh_note(&elf_with_notes(&[])));
        assert!(!has_pvh_note(b"MZ not an ELF"));
        let mut cut = elf_with_notes(&[(b"Xen\0", 18)]);
        cut.truncate(0x80);
        assert!(!has_pvh_note(&cut), "a truncated image is not read past its end");
    }
}
