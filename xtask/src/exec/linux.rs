//! Running a static Linux program on the Linux guest (Debian's kernel, booted through PVH on
//! the same QEMU machine as this system), the oracle the conformance suite compares against.
//!
//! The initramfs holds `/init` (linux/init/exec-init.c), the program at `/bin/NAME`, the
//! request's files, and `/exec/argv` and `/exec/stdin`; with `--disk` also the block and ext2
//! modules, and the image is attached as a virtio disk with `snapshot=on` (the image on the
//! host is never written). The init runs the program with pipes as its standard streams and
//! copies what it writes to two more serial ports, which QEMU writes to two files; a fourth
//! port carries the status and the files left under `/tmp` (exec-init.c says the format).
//! QEMU is killed at the request's timeout.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use super::{decode_report, guest_file_path, guest_path, ExecOutput, ExecRequest};
use crate::host::cpio::CpioEntry;
use crate::guest::linux::{fetch_kernel, vmlinux, LinuxVm};

/// The modules the `--disk` root needs (their dependencies follow from `depends=`). ext4
/// asks the crypto layer for crc32c at mount time without naming a module, so
/// `crc32c_generic` is listed itself, first.
const DISK_MODULES: [&str; 4] = ["crc32c_generic", "virtio_pci", "virtio_blk", "ext4"];

/// A directory of its own for each run (several may run at once).
fn run_dir() -> Result<PathBuf, String> {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = crate::host::env::workspace_root()
        .join("target")
        .join("linux-exec")
        .join(format!("run-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    Ok(d)
}

/// Directory entries for every parent of `path` (relative, no leading slash) not yet made.
fn parents(path: &str, made: &mut BTreeSet<String>, out: &mut Vec<CpioEntry>) {
    let parts: Vec<&str> = path.split('/').collect();
    for i in 1..parts.len() {
        let dir = parts[..i].join("/");
        if !dir.is_empty() && made.insert(dir.clone()) {
            out.push(CpioEntry::Dir(dir));
        }
    }
}

fn host_file(p: &Path) -> Result<(u32, Vec<u8>), String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
    let data = fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok((meta.permissions().mode() & 0o7777, data))
}

/// The initramfs entries after the fixed ones (`build_initramfs_with` adds /init, /dev,
/// /proc, /sys, /tmp): the program, the files, argv and stdin; with a disk, the list of what
/// to copy onto it and the modules (`modules`).
pub fn entries(req: &ExecRequest, modules: Vec<CpioEntry>) -> Result<Vec<CpioEntry>, String> {
    let mut made: BTreeSet<String> = ["dev", "proc", "sys", "tmp"].iter().map(|s| s.to_string()).collect();
    let mut out = Vec::new();
    let prog = guest_path(&req.program);
    let (_, data) = host_file(&req.program)?;
    let mut copy = vec![prog.clone()];
    parents(&prog[1..], &mut made, &mut out);
    out.push(CpioEntry::File { path: prog[1..].to_string(), mode: 0o755, data });
    for (guest, host) in &req.files {
        let g = guest_file_path(guest);
        if g.split('/').any(|c| c == "..") || g == "/init" || g.starts_with("/exec/") {
            return Err(format!("{guest}: not a path a request file may have in the guest"));
        }
        let (mode, data) = host_file(host)?;
        parents(&g[1..], &mut made, &mut out);
        out.push(CpioEntry::File { path: g[1..].to_string(), mode, data });
        copy.push(g);
    }
    let mut argv: Vec<u8> = Vec::new();
    for a in std::iter::once(&prog).chain(req.args.iter()) {
        if a.contains('\0') {
            return Err("an argument holds a NUL byte".into());
        }
        argv.extend_from_slice(a.as_bytes());
        argv.push(0);
    }
    for (path, text) in [("etc/passwd", super::ETC_PASSWD), ("etc/group", super::ETC_GROUP)] {
        if req.disk.is_none() && !copy.iter().any(|c| c[1..] == *path) {
            parents(path, &mut made, &mut out);
            out.push(CpioEntry::File { path: path.into(), mode: 0o644, data: text.as_bytes().to_vec() });
        }
    }
    out.push(CpioEntry::Dir("exec".into()));
    out.push(CpioEntry::File { path: "exec/argv".into(), mode: 0o644, data: argv });
    out.push(CpioEntry::File { path: "exec/stdin".into(), mode: 0o644, data: req.stdin.clone() });
    if req.disk.is_some() {
        out.push(CpioEntry::File { path: "exec/disk".into(), mode: 0o644, data: Vec::new() });
        out.push(CpioEntry::File { path: "exec/copy".into(), mode: 0o644, data: copy.join("\n").into_bytes() });
    }
    if req.net.is_some() {
        // exec-init.c loads the modules and configures eth0 as 10.0.2.15/24 before the program.
        out.push(CpioEntry::File { path: "exec/net".into(), mode: 0o644, data: Vec::new() });
    }
    if !modules.is_empty() {
        out.extend(modules);
    }
    Ok(out)
}

/// Build the init and unpack the kernel (each once; later calls find them), so that runs in
/// parallel share them without racing to write them.
pub fn prepare() -> Result<(), String> {
    super::progs::build_init()?;
    vmlinux(&fetch_kernel()?).map(|_| ())
}

pub fn run(req: &ExecRequest) -> Result<ExecOutput, String> {
    run_inner(req, None)
}

/// `run`, under a QEMU plugin in the exact mode (`plugin`: the `-plugin` argument), for
/// `exec --insncount`.
pub fn run_measured(req: &ExecRequest, plugin: &str) -> Result<ExecOutput, String> {
    run_inner(req, Some(plugin))
}

fn run_inner(req: &ExecRequest, plugin: Option<&str>) -> Result<ExecOutput, String> {
    super::check_request(req)?;
    let init = super::progs::build_init()?;
    let kernel = fetch_kernel()?;
    let elf = vmlinux(&kernel)?;
    let mut roots: Vec<&str> = Vec::new();
    if req.disk.is_some() {
        roots.extend(DISK_MODULES);
    }
    if req.net.is_some() {
        roots.extend(crate::guest::linux_net::ROOTS.iter().filter(|m| !roots.contains(m)).copied().collect::<Vec<_>>());
    }
    let modules = if roots.is_empty() { Vec::new() } else { crate::guest::linux_net::module_entries(crate::guest::linux_net::modules_for(&kernel, &roots)?) };
    let dir = run_dir()?;
    let result = boot(req, &init, &kernel, &elf, modules, &dir, plugin);
    let _ = fs::remove_dir_all(&dir);
    result
}

fn boot(req: &ExecRequest, init: &Path, kernel: &crate::guest::linux::LinuxKernel, elf: &Path, modules: Vec<CpioEntry>, dir: &Path, plugin: Option<&str>) -> Result<ExecOutput, String> {
    let initrd = dir.join("initramfs.cpio");
    crate::guest::linux::build_initramfs_with(init, entries(req, modules)?, &initrd)?;
    let mut vm = LinuxVm::new(kernel, &initrd);
    vm.kernel = elf.to_path_buf();
    vm.smp = req.smp.max(1);
    vm.timeout = req.timeout;
    // Under a loaded host TCG's timer can miss the kernel's IO-APIC timer check, which then
    // panics at boot ("IO-APIC + timer doesn't work!"); the other Linux guests skip it too.
    vm.append = "no_timer_check".into();
    if let Some(p) = plugin {
        vm.single_thread = true;
        vm.exact = true;
        vm.plugins.push(p.to_string());
    }
    vm.net = req.net.clone();
    let (out, err, rep) = (dir.join("stdout"), dir.join("stderr"), dir.join("report"));
    let mut args = vm.qemu_args();
    for f in [&out, &err, &rep] {
        args.extend(["-serial".into(), format!("file:{}", f.display())]);
    }
    if let Some(d) = &req.disk {
        let abs = fs::canonicalize(d).map_err(|e| format!("--disk {}: {e}", d.display()))?;
        args.extend(["-drive".into(), format!("file={},format=raw,if=virtio,snapshot=on", abs.display())]);
    }
    let start = Instant::now();
    let r = crate::host::qemu::run_qemu(&args, req.timeout)?;
    let console = r.serial.clone();
    let tail = || console.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
    if r.timed_out && req.net.is_some() {
        // A server: stopped at the timeout, what it wrote so far is its output.
        return Ok(ExecOutput { stdout: fs::read(&out).unwrap_or_default(), stderr: fs::read(&err).unwrap_or_default(), status: super::TIMEOUT_STATUS, console, files: Vec::new() });
    }
    if r.timed_out {
        return Err(format!("the Linux guest did not finish in {} s (killed); its console ended:\n{}", req.timeout.as_secs(), tail()));
    }
    let report = fs::read_to_string(&rep).unwrap_or_default();
    let (status, files) = decode_report(&report).map_err(|e| {
        let q = r.stderr.lines().next().unwrap_or("").trim().to_string();
        // What the report port and standard output got, to show where the guest stopped.
        let out_tail: String = String::from_utf8_lossy(&fs::read(&out).unwrap_or_default()).lines().rev().take(12).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
        let rep_head: String = report.chars().take(400).collect();
        format!(
            "{e} (QEMU status {:?} after {:.1} s{}); its console ended:\n{}\nthe report port had: {rep_head:?}\nstandard output ended:\n{out_tail}",
            r.exit_code,
            start.elapsed().as_secs_f64(),
            if q.is_empty() { String::new() } else { format!(", QEMU said: {q}") },
            tail()
        )
    })?;
    Ok(ExecOutput {
        stdout: fs::read(&out).map_err(|e| format!("{}: {e}", out.display()))?,
        stderr: fs::read(&err).map_err(|e| format!("{}: {e}", err.display()))?,
        status,
        console,
        files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn req(files: Vec<(String, PathBuf)>) -> ExecRequest {
        ExecRequest {
            program: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"),
            args: vec!["-c".into(), "echo hi".into()],
            files,
            stdin: b"in".to_vec(),
            smp: 1,
            disk: None,
            timeout: Duration::from_secs(1),
            net: None,
        }
    }

    fn names(e: &[CpioEntry]) -> Vec<String> {
        e.iter()
            .map(|e| match e {
                CpioEntry::Dir(p) => format!("{p}/"),
                CpioEntry::File { path, .. } => path.clone(),
                CpioEntry::CharDev { path, .. } => path.clone(),
            })
            .collect()
    }

    #[test]
    fn the_initramfs_holds_program_files_argv_and_stdin() {
        let f = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
        let e = entries(&req(vec![("in.txt".into(), f.clone()), ("/etc/x/y".into(), f)]), Vec::new()).unwrap();
        assert_eq!(names(&e), ["bin/", "bin/Cargo.toml", "tmp/in.txt", "etc/", "etc/x/", "etc/x/y", "etc/passwd", "etc/group", "exec/", "exec/argv", "exec/stdin"]);
        let argv = e.iter().find_map(|e| match e {
            CpioEntry::File { path, data, .. } if path == "exec/argv" => Some(data.clone()),
            _ => None,
        });
        assert_eq!(argv.unwrap(), b"/bin/Cargo.toml\0-c\0echo hi\0");
        let mut bad = req(vec![("../../init".into(), PathBuf::from("Cargo.toml"))]);
        assert!(entries(&bad, Vec::new()).is_err_and(|e| e.contains("not a path")));
        bad.files.clear();
        bad.args.push("a\0b".into());
        assert!(entries(&bad, Vec::new()).is_err_and(|e| e.contains("NUL")));
    }
}
