//! Running a static Linux program on this system: the program (and `req.files`) go into a
//! fresh ext2 root image with `/tmp` (or a copy of `req.disk` with them written in), the
//! kernel boots with the Linux personality's runtime as the first program
//! (`init=linuxrt -- --framed ...`, user/apps/src/bin/linuxrt.rs), and the serial output is
//! split back into the program's standard output and error, its exit status, and the rest
//! (`decode`). Standard input is a file in the image the runtime serves as descriptor 0.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{ExecOutput, ExecRequest};
use crate::host::vm::{BootMedium, VmConfig};

/// Where the program goes in the guest: `/bin/NAME` (its `argv[0]`).
pub fn guest_path(program: &Path) -> String {
    format!("/bin/{}", program.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "prog".into()))
}

/// Where standard input's bytes go in the image.
const STDIN_PATH: &str = "/.stdin";

pub fn run(req: &ExecRequest) -> Result<ExecOutput, String> {
    let (kernel, initrd) = prepare()?;
    run_with(&kernel, &initrd, req)
}

/// Build the kernel and the boot image (with the runtime) once for several runs; returns
/// their paths.
pub fn prepare() -> Result<(PathBuf, PathBuf), String> {
    let kernel = crate::host::env::build_kernel()?;
    crate::host::env::ensure_qemu()?;
    let initrd = crate::host::user::build_initrd()?;
    Ok((kernel, initrd))
}

/// The runtime's command-line word for one argument: spaces and `%` escaped (`linuxrt`).
fn escape(s: &str) -> String {
    s.replace('%', "%25").replace(' ', "%20")
}

/// The kernel command line that runs `req` under the runtime (`runs` times: a leak check
/// that is exact from the second run on, for tests).
#[cfg(test)]
pub fn cmdline(req: &ExecRequest, runs: u32) -> Result<String, String> {
    cmdline_with(req, runs, &Extra::default())
}

/// Kernel options before `init=` and runtime options after `--framed` (both space-separated
/// words; empty: none), for runs that need them (the Linux fuzzer's fault injection).
#[derive(Debug, Clone, Default)]
pub struct Extra {
    pub kernel: String,
    pub runtime: String,
}

fn cmdline_with(req: &ExecRequest, runs: u32, extra: &Extra) -> Result<String, String> {
    // The Linux guest's init runs the program in /tmp, where relative request files go.
    let mut c = String::new();
    if !extra.kernel.is_empty() {
        c.push_str(&extra.kernel);
        c.push(' ');
    }
    c.push_str("init=linuxrt -- --framed");
    if !extra.runtime.is_empty() {
        c.push(' ');
        c.push_str(&extra.runtime);
    }
    c.push_str(" --cwd /tmp");
    if runs > 1 {
        c.push_str(&format!(" --runs {runs}"));
    }
    if req.net.is_some() {
        c.push_str(" --net");
    }
    if !req.stdin.is_empty() {
        c.push_str(" --stdin ");
        c.push_str(STDIN_PATH);
    }
    c.push(' ');
    c.push_str(&escape(&guest_path(&req.program)));
    for a in &req.args {
        if a.is_empty() || a.chars().any(|ch| ch.is_control()) {
            return Err(format!("argument {a:?}: empty arguments and control characters cannot pass the kernel command line"));
        }
        c.push(' ');
        c.push_str(&escape(a));
    }
    Ok(c)
}

static RUNS: AtomicU64 = AtomicU64::new(0);

/// Make the root image for `req` in `dir`; returns its path.
pub fn root_image(req: &ExecRequest, dir: &Path) -> Result<PathBuf, String> {
    let img = dir.join("root.img");
    let mut files: Vec<(String, PathBuf)> = vec![(guest_path(&req.program), req.program.clone())];
    files.extend(req.files.iter().map(|(guest, host)| (super::guest_file_path(guest), host.clone())));
    let stdin_file = dir.join("stdin");
    if !req.stdin.is_empty() {
        std::fs::write(&stdin_file, &req.stdin).map_err(|e| format!("{}: {e}", stdin_file.display()))?;
        files.push((STDIN_PATH.into(), stdin_file));
    }
    match &req.disk {
        None => {
            let root = dir.join("root");
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(root.join("tmp")).map_err(|e| format!("{}: {e}", root.display()))?;
            std::fs::create_dir_all(root.join("etc")).map_err(|e| format!("{}: {e}", root.display()))?;
            std::fs::write(root.join("etc/passwd"), super::ETC_PASSWD).map_err(|e| format!("{}: {e}", root.display()))?;
            std::fs::write(root.join("etc/group"), super::ETC_GROUP).map_err(|e| format!("{}: {e}", root.display()))?;
            for (guest, host) in &files {
                let to = root.join(guest.trim_start_matches('/'));
                if let Some(p) = to.parent() {
                    std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))?;
                }
                std::fs::copy(host, &to).map_err(|e| format!("{} -> {}: {e}", host.display(), to.display()))?;
            }
            crate::host::ext2img::mkimage(&root, &img, None)?;
        }
        Some(disk) => {
            std::fs::copy(disk, &img).map_err(|e| format!("{} -> {}: {e}", disk.display(), img.display()))?;
            crate::host::ext2img::ensure_e2fsprogs()?;
            for (guest, host) in &files {
                // debugfs: make the parent directories, drop an old file, write the new one.
                let mut script = String::new();
                let mut at = String::new();
                let parts: Vec<&str> = guest.trim_start_matches('/').split('/').collect();
                for d in &parts[..parts.len().saturating_sub(1)] {
                    at.push('/');
                    at.push_str(d);
                    script.push_str(&format!("mkdir {at}\n"));
                }
                script.push_str(&format!("rm {guest}\nwrite {} {guest}\n", host.display()));
                let out = std::process::Command::new("debugfs")
                    .args(["-w", "-f", "-"])
                    .arg(&img)
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .and_then(|mut c| {
                        use std::io::Write;
                        c.stdin.take().map(|mut s| s.write_all(script.as_bytes())).transpose()?;
                        c.wait()
                    })
                    .map_err(|e| format!("debugfs: {e}"))?;
                if !out.success() {
                    return Err(format!("debugfs could not write {guest} into {}", img.display()));
                }
            }
        }
    }
    Ok(img)
}

pub fn run_with(kernel: &Path, initrd: &Path, req: &ExecRequest) -> Result<ExecOutput, String> {
    run_times(kernel, initrd, req, 1)
}

/// `run_with`, the program run `runs` times in one boot (its output repeated; the status is
/// the last run's).
pub fn run_times(kernel: &Path, initrd: &Path, req: &ExecRequest, runs: u32) -> Result<ExecOutput, String> {
    run_inner(kernel, initrd, req, runs, None, &Extra::default())
}

/// `run_times` with kernel and runtime options of `extra` (a run that times out is an error
/// quoting the console, as for `run_times`).
pub fn run_extra(kernel: &Path, initrd: &Path, req: &ExecRequest, runs: u32, extra: &Extra) -> Result<ExecOutput, String> {
    run_inner(kernel, initrd, req, runs, None, extra)
}

/// `run`, under a QEMU plugin in the exact mode (`plugin`: the `-plugin` argument;
/// single-threaded TCG, instruction-based time, docs/plugins.md), for `exec --insncount`.
pub fn run_measured(req: &ExecRequest, plugin: &str) -> Result<ExecOutput, String> {
    let (kernel, initrd) = prepare()?;
    run_inner(&kernel, &initrd, req, 1, Some(plugin), &Extra::default())
}

/// `run_measured` with kernel and runtime options (`exec --audit`'s marked region).
pub fn run_measured_extra(req: &ExecRequest, plugin: &str, extra: &Extra) -> Result<ExecOutput, String> {
    let (kernel, initrd) = prepare()?;
    run_inner(&kernel, &initrd, req, 1, Some(plugin), extra)
}

fn run_inner(kernel: &Path, initrd: &Path, req: &ExecRequest, runs: u32, plugin: Option<&str>, extra: &Extra) -> Result<ExecOutput, String> {
    if !req.program.is_file() {
        return Err(format!("{}: no such file", req.program.display()));
    }
    let dir = crate::host::env::target_dir().join("linux-exec").join(format!("ours-{}-{}", std::process::id(), RUNS.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let img = root_image(req, &dir)?;
    let cfg = VmConfig {
        smp: req.smp.max(1),
        cmdline: cmdline_with(req, runs, extra)?,
        medium: Some(BootMedium::Kernel(kernel.to_path_buf())),
        initrd: Some(initrd.to_path_buf()),
        disk: Some(img),
        timeout: Some(req.timeout),
        net: req.net.clone(),
        ..Default::default()
    };
    let out = match plugin {
        None => crate::host::qemu::boot_captured(&cfg, None, false)?,
        Some(p) => {
            // The exact mode needs single-threaded TCG.
            let mut args: Vec<String> = cfg.qemu_args().into_iter().map(|a| if a == "tcg,thread=multi" { "tcg,thread=single".to_string() } else { a }).collect();
            args.extend(["-serial", "stdio", "-monitor", "none", "-plugin", p].iter().map(|s| s.to_string()));
            args.extend(crate::guest::plugin::exact_qemu_args());
            crate::host::qemu::run_captured(&args, cfg.timeout, None, false)?
        }
    };
    // The files left under /tmp, read from the image the guest wrote (as the Linux guest's
    // init lists them), before the run's folder goes.
    let files = list_tmp(&dir.join("root.img"));
    let _ = std::fs::remove_dir_all(&dir);
    let mut r = decode(&out.serial)?;
    if out.timed_out && req.net.is_some() {
        // A server: stopped at the timeout, what it wrote so far is its output.
        return Ok(ExecOutput { stdout: r.stdout, stderr: r.stderr, status: super::TIMEOUT_STATUS, console: r.console, files: files.unwrap_or_default() });
    }
    if out.timed_out {
        return Err(format!("{}: timed out after {:?}; console:\n{}", req.program.display(), req.timeout, r.console));
    }
    match r.status {
        Some(s) => Ok(ExecOutput { stdout: std::mem::take(&mut r.stdout), stderr: std::mem::take(&mut r.stderr), status: s, console: r.console, files: files? }),
        None => Err(format!("{}: the runtime reported no exit status; console:\n{}", req.program.display(), r.console)),
    }
}

/// The files under `/tmp` of the ext2 image `img`, one line each in the form the Linux
/// guest's init prints them (`f MODE SIZE CRC32 PATH`, `d MODE PATH`, `l TARGET PATH`,
/// `o MODE PATH`; paths relative to /tmp, names in byte order, depth first).
pub fn list_tmp(img: &Path) -> Result<Vec<String>, String> {
    let mut fs = ext2::Ext2::mount(crate::host::ext2img::ImageFile::open(img)?).map_err(|e| format!("{}: {e:?}", img.display()))?;
    let tmp = fs.resolve(b"/tmp").map_err(|e| format!("{}: /tmp: {e:?}", img.display()))?;
    let mut lines = Vec::new();
    list_dir(&mut fs, &tmp, "", 0, &mut lines)?;
    Ok(lines)
}

fn list_dir<D: ext2::Disk>(fs: &mut ext2::Ext2<D>, dir: &ext2::Inode, rel: &str, depth: u32, lines: &mut Vec<String>) -> Result<(), String> {
    let mut entries = fs.read_dir(dir).map_err(|e| format!("/tmp/{rel}: {e:?}"))?;
    entries.retain(|e| e.name != b"." && e.name != b"..");
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    for e in entries {
        let name = String::from_utf8_lossy(&e.name);
        let sub = if rel.is_empty() { name.to_string() } else { format!("{rel}/{name}") };
        let ino = fs.inode(e.ino).map_err(|err| format!("/tmp/{sub}: {err:?}"))?;
        let mode = u32::from(ino.mode);
        if ino.is_reg() {
            let mut data = vec![0u8; ino.size as usize];
            let mut at = 0;
            while at < data.len() {
                match fs.read(&ino, at as u64, &mut data[at..]) {
                    Ok(0) => break,
                    Ok(n) => at += n,
                    Err(err) => return Err(format!("/tmp/{sub}: {err:?}")),
                }
            }
            lines.push(super::file_line(mode, &data, &sub));
        } else if ino.is_dir() {
            lines.push(format!("d {:o} {sub}", mode & 0o7777));
            if depth < 32 {
                list_dir(fs, &ino, &sub, depth + 1, lines)?;
            }
        } else if ino.is_symlink() {
            let target = fs.read_link(&ino).map_err(|err| format!("/tmp/{sub}: {err:?}"))?;
            lines.push(format!("l {} {sub}", String::from_utf8_lossy(&target)));
        } else {
            lines.push(format!("o {:o} {sub}", mode & 0o7777));
        }
    }
    Ok(())
}

/// The serial output split apart.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub status: Option<i32>,
    pub console: String,
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// Split serial output into the runtime's records (`\x1eO` hex: standard output, `\x1eE`:
/// standard error, `\x1eS` decimal: the exit status) and the console's other lines. A record
/// that does not decode is an error (the streams would be wrong).
pub fn decode(serial: &str) -> Result<Decoded, String> {
    let mut d = Decoded::default();
    for line in serial.lines() {
        let line = line.trim_end_matches('\r');
        let Some(pos) = line.find('\x1e') else {
            d.console.push_str(line);
            d.console.push('\n');
            continue;
        };
        // Text before the record (a console line the record interrupted) stays console.
        if pos > 0 {
            d.console.push_str(&line[..pos]);
            d.console.push('\n');
        }
        let rec = &line[pos + 1..];
        let bad = || format!("a malformed output record on the serial line: {rec:?}");
        match rec.as_bytes().first() {
            Some(b'O') => d.stdout.extend(unhex(&rec[1..]).ok_or_else(bad)?),
            Some(b'E') => d.stderr.extend(unhex(&rec[1..]).ok_or_else(bad)?),
            Some(b'S') => d.status = Some(rec[1..].trim().parse().map_err(|_| bad())?),
            _ => return Err(bad()),
        }
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_split_into_streams_and_status() {
        let serial = "kernel: boot\n\x1eO68690a\n\x1eE6f6f7073\nlinuxrt: exit status 3\n\x1eO00ff\n\x1eS3\n";
        let d = decode(serial).unwrap();
        assert_eq!(d.stdout, b"hi\n\x00\xff");
        assert_eq!(d.stderr, b"oops");
        assert_eq!(d.status, Some(3));
        assert_eq!(d.console, "kernel: boot\nlinuxrt: exit status 3\n");
    }

    #[test]
    fn a_broken_record_is_an_error() {
        assert!(decode("\x1eO6g\n").is_err());
        assert!(decode("\x1eO123\n").is_err());
        assert!(decode("\x1eSx\n").is_err());
        assert!(decode("\x1eQ00\n").is_err());
    }

    #[test]
    fn arguments_are_escaped_for_the_command_line() {
        let req = ExecRequest {
            program: "/x/hello".into(),
            args: vec!["a b".into(), "50%".into()],
            files: vec![],
            stdin: b"in".to_vec(),
            smp: 1,
            disk: None,
            timeout: std::time::Duration::from_secs(1),
            net: None,
        };
        assert_eq!(cmdline(&req, 1).unwrap(), "init=linuxrt -- --framed --cwd /tmp --stdin /.stdin /bin/hello a%20b 50%25");
        assert_eq!(cmdline(&req, 2).unwrap(), "init=linuxrt -- --framed --cwd /tmp --runs 2 --stdin /.stdin /bin/hello a%20b 50%25");
        let bad = ExecRequest { args: vec!["".into()], ..req };
        assert!(cmdline(&bad, 1).is_err());
    }
}
