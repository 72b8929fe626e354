//! The command line of `cargo xtask exec` and `cargo xtask linux-progs`, and what they do.
//! `exec` reads its standard input to end of file, runs the program on the chosen system,
//! copies the program's standard output and error to its own, and exits with the program's
//! status, as `qemu-x86_64` does. Everything that can be checked on the host (the program is
//! a static x86-64 ELF, the files exist) is checked before anything boots.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use super::{ExecOutput, ExecRequest};
use crate::host::outcome::Failure;

#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
#[command(long_about = "Run one static x86-64 Linux program from the host on this system (--system ours, the default: the library \
OS's Linux personality) or on the Linux guest (--system linux: Debian's kernel on the same QEMU machine), like qemu-x86_64: \
standard input is read to end of file (from a pipe, or the terminal until Ctrl-D), the program's standard output and error \
are copied to this command's, and this command exits with the program's status (128 + N when signal N killed it). The \
program is /bin/NAME in the guest (argv[0]), on a fresh writable root with /tmp, its working directory; with --disk IMG \
the ext2 image is the root (the program copied in; the image on the host is not changed). --conformance runs the \
conformance suite instead (linux/accepted-differences.txt, docs/linux-exec.md).")]
pub struct ExecArgs {
    /// Where to run it: ours or linux (with --conformance: both, ours or linux; default both)
    #[arg(long, value_name = "SYSTEM", value_parser = ["ours", "linux", "both"])]
    pub system: Option<String>,
    /// Guest vCPUs, 1..=64
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64), default_value_t = 1)]
    pub smp: u32,
    /// An ext2 image to use as the root file system
    #[arg(long, value_name = "IMG")]
    pub disk: Option<PathBuf>,
    /// Kill the guest after S seconds (the command then fails)
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..=3600), default_value_t = 120)]
    pub timeout: u64,
    /// Also print the guest's console (kernel messages) on standard error
    #[arg(long)]
    pub console: bool,
    /// Also print the files left under /tmp (type, mode, size, CRC-32, path) on standard error
    #[arg(long)]
    pub files: bool,
    /// Run the conformance suite (every case on both systems, compared) instead of one program
    #[arg(long, conflicts_with_all = ["program", "disk"])]
    pub conformance: bool,
    /// Count the guest instructions between the program's region markers (port 0x501) under
    /// the insncount plugin, exact mode, 1 vCPU, on ours, linux or both (the same-binary cost
    /// comparison; per operation when the program prints `workload name=NAME ops=N`)
    #[arg(long, conflicts_with = "conformance")]
    pub insncount: bool,
    /// The sharing audit on ours: the kernel cache lines one vCPU writes and another touches
    /// while the program runs (the sharing plugin, exact mode, kernel accesses; docs/linux-abi.md)
    #[arg(long, conflicts_with_all = ["conformance", "insncount"])]
    pub audit: bool,
    /// A file for the guest, GUEST=HOST (GUEST relative to /tmp unless absolute); repeatable
    #[arg(long = "file", value_name = "GUEST=HOST")]
    pub file: Vec<String>,
    /// Run the socket cases instead of one program: linux/progs/epollserv.c driven by a host
    /// client on each system (compared), then memcached under a bounded checked load
    #[arg(long, conflicts_with_all = ["program", "disk", "conformance"])]
    pub sockets: bool,
    /// With --sockets: memcached requests (sets and gets; every value read back is checked)
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub requests: u64,
    /// With --sockets: after memcached's load, leave it idle S seconds (no connection open) and
    /// print the QEMU process's host CPU time over them, and the runtime's readiness-wait
    /// counts (ours); the epoll server case is skipped
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(0..=600), default_value_t = 0)]
    pub idle_secs: u64,
    /// With --conformance: only the cases whose name contains PATTERN
    #[arg(long, value_name = "PATTERN")]
    pub only: Option<String>,
    /// Give the guest a NIC on QEMU's restricted user-mode network (with no --hostfwd: a free
    /// host port to guest port 80); a program still running at --timeout is then stopped and
    /// exec exits with 124
    #[arg(long)]
    pub net: bool,
    /// Forward 127.0.0.1:HOST on the host to guest port GUEST (TCP; implies --net; repeatable)
    #[arg(long, value_name = "HOST:GUEST", value_parser = crate::host::args::hostfwd, action = clap::ArgAction::Append)]
    pub hostfwd: Vec<crate::host::vm::Forward>,
    /// The program (a static x86-64 ELF on the host)
    #[arg(value_name = "PROGRAM", required_unless_present_any = ["conformance", "sockets"])]
    pub program: Option<PathBuf>,
    /// Its arguments (argv[1..]); options after PROGRAM are the program's
    #[arg(value_name = "ARGS", trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<String>,
}

/// Where `exec` runs one program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    Ours,
    Linux,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Ours => "ours",
            System::Linux => "linux",
        }
    }

    pub fn run(self, req: &ExecRequest) -> Result<ExecOutput, String> {
        match self {
            System::Ours => super::ours::run(req),
            System::Linux => super::linux::run(req),
        }
    }
}

/// The systems the options name: one for a program (default ours), one or both for the
/// conformance suite (default both).
pub fn systems(a: &ExecArgs) -> Result<Vec<System>, String> {
    if a.only.is_some() && !a.conformance {
        return Err("--only picks conformance cases: it goes with --conformance".into());
    }
    let both = a.conformance || a.sockets;
    match (a.system.as_deref(), both) {
        (None | Some("ours"), false) => Ok(vec![System::Ours]),
        (Some("linux"), _) => Ok(vec![System::Linux]),
        (Some("both"), false) if a.insncount => Ok(vec![System::Ours, System::Linux]),
        (Some("both"), false) => Err("--system both compares the two systems: it goes with --conformance (one program runs on ours or linux)".into()),
        (None | Some("both"), true) => Ok(vec![System::Ours, System::Linux]),
        (Some("ours"), true) => Ok(vec![System::Ours]),
        (Some(other), _) => Err(format!("--system {other}: ours, linux or both")),
    }
}

/// The request the options describe (the program checked, standard input given).
pub fn request(a: &ExecArgs, stdin: Vec<u8>) -> Result<ExecRequest, String> {
    let program = a.program.clone().ok_or("no PROGRAM given")?;
    if !program.exists() {
        return Err(format!("{}: no such file", program.display()));
    }
    if program.is_dir() {
        return Err(format!("{}: a directory, not a program", program.display()));
    }
    let mut files = Vec::new();
    for f in &a.file {
        let (guest, host) = f.split_once('=').ok_or_else(|| format!("--file {f}: expected GUEST=HOST"))?;
        files.push((guest.to_string(), PathBuf::from(host)));
    }
    let req = ExecRequest { program, args: a.args.clone(), files, stdin, smp: a.smp, disk: a.disk.clone(), timeout: Duration::from_secs(a.timeout), net: None };
    let req = if a.net || !a.hostfwd.is_empty() { ExecRequest { net: Some(crate::host::vm::from_options(a.hostfwd.clone())?), ..req } } else { req };
    super::check_request(&req)?;
    Ok(req)
}

/// `cargo xtask exec ...`: on success this process ends with the program's status.
pub fn main(a: ExecArgs) -> Result<(), Failure> {
    let systems = systems(&a).map_err(Failure::Usage)?;
    if a.conformance {
        return crate::host::outcome::work(super::conformance::command(&systems, a.only.as_deref()));
    }
    if a.sockets {
        return crate::host::outcome::work(super::sockets::command(&systems, a.smp, a.requests, a.idle_secs));
    }
    // Everything about the program is checked before standard input is read or a guest boots.
    let probe = request(&a, Vec::new()).map_err(Failure::Usage)?;
    if a.audit {
        if systems != [System::Ours] {
            return Err(Failure::Usage("--audit runs on ours only (cargo xtask plugin audit --system linux audits the Linux guest)".into()));
        }
        return crate::host::outcome::work(super::audit::command(&probe));
    }
    if a.insncount {
        // The measured program reads no standard input.
        return crate::host::outcome::work(super::cost::command(&systems, &probe));
    }
    let mut stdin = Vec::new();
    let tty = std::io::stdin().is_terminal();
    if tty {
        eprintln!("xtask exec: reading standard input until end of file (Ctrl-D), then running {}", probe.program.display());
    }
    std::io::stdin().read_to_end(&mut stdin).map_err(|e| Failure::Work(format!("reading standard input: {e}")))?;
    let req = ExecRequest { stdin, ..probe };
    if let Some(n) = &req.net {
        eprint!("{}", n.describe().replace("net: ", "xtask exec: "));
    }
    let out = systems[0].run(&req).map_err(|e| Failure::Work(format!("exec --system {}: {e}", systems[0].name())))?;
    if a.console {
        eprint!("{}", out.console);
    }
    if a.files {
        for f in &out.files {
            eprintln!("xtask exec: left behind: {f}");
        }
    }
    let _ = std::io::stdout().write_all(&out.stdout);
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().write_all(&out.stderr);
    let _ = std::io::stderr().flush();
    std::process::exit(out.status.clamp(0, 255));
}

/// `cargo xtask linux-progs`: build (or fetch) every program and print where each is.
pub fn linux_progs() -> Result<(), String> {
    for (name, path) in super::progs::build_all()? {
        println!("{name:<10} {}", path.display());
    }
    println!("{:<10} {}", "memcached", super::debsrc::memcached()?.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cargo xtask exec ...` (`line` starts with the word `exec`).
    fn p(line: &str) -> Result<ExecArgs, String> {
        let words: Vec<String> = line.split_whitespace().skip(1).map(String::from).collect();
        crate::host::args::parse_args::<ExecArgs>("exec", &words)
    }

    #[test]
    fn the_command_line() {
        let a = p("exec --system linux --smp 4 --timeout 30 prog -l -a /tmp").unwrap();
        assert_eq!((a.system.as_deref(), a.smp, a.timeout), (Some("linux"), 4, 30));
        assert_eq!(a.program, Some(PathBuf::from("prog")));
        // Options after the program are the program's, even ones exec also has.
        assert_eq!(a.args, ["-l", "-a", "/tmp"]);
        let b = p("exec busybox sh -c echo --smp 2").unwrap();
        assert_eq!(b.smp, 1);
        assert_eq!(b.args, ["sh", "-c", "echo", "--smp", "2"]);
        assert_eq!(systems(&b), Ok(vec![System::Ours]));
        assert_eq!(systems(&p("exec --conformance").unwrap()), Ok(vec![System::Ours, System::Linux]));
        assert_eq!(systems(&p("exec --conformance --system linux").unwrap()), Ok(vec![System::Linux]));
        assert!(systems(&p("exec --system both prog").unwrap()).unwrap_err().contains("--conformance"));
        assert_eq!(systems(&p("exec --insncount --system both prog").unwrap()), Ok(vec![System::Ours, System::Linux]));
        assert!(p("exec --insncount --conformance").is_err());
        // Refused while parsing: no program, a bad system, --smp 0, a program with --conformance.
        assert!(p("exec").is_err());
        assert!(p("exec --system windows prog").is_err());
        assert!(p("exec --smp 0 prog").is_err());
        assert!(p("exec --conformance prog").is_err());
        assert!(systems(&p("exec --only x prog").unwrap()).unwrap_err().contains("--conformance"));
    }

    #[test]
    fn bad_programs_are_refused_before_any_boot() {
        let a = |prog: &str| p(&format!("exec {prog}")).unwrap();
        assert!(request(&a("/no/such/prog"), Vec::new()).unwrap_err().contains("no such file"));
        assert!(request(&a(env!("CARGO_MANIFEST_DIR")), Vec::new()).unwrap_err().contains("directory"));
        let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        assert!(request(&a(manifest), Vec::new()).unwrap_err().contains("not an ELF"));
        // The host's own dynamically linked tools are refused naming their interpreter.
        if let Ok(data) = std::fs::read("/bin/sh") {
            if super::super::inspect_elf(&data).is_err() {
                let e = request(&a("/bin/sh"), Vec::new()).unwrap_err();
                assert!(e.contains("interpreter is /lib"), "{e}");
            }
        }
    }
}
