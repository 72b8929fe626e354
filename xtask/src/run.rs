//! `cargo xtask run`: boot the kernel (or the ISO) into the shell under QEMU, interactive on a
//! terminal, or with piped input sent to the guest serial after the shell's first prompt.

use std::path::PathBuf;
use crate::host::args::{hostfwd, mem_size, tcp_port};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::host::vm::{BootMedium, VmConfig, QEMU_EXIT_FAILURE, QEMU_EXIT_SUCCESS};

/// `cargo xtask run`.
pub fn run_command(mut cfg: VmConfig, gdb_port: Option<u16>) -> Result<(), String> {
    // Boot into the shell unless the command line names another first program.
    if !cfg.cmdline.split_whitespace().any(|w| w.starts_with("init=")) {
        cfg.cmdline = if cfg.cmdline.trim().is_empty() { "init=sh".into() } else { format!("{} init=sh", cfg.cmdline.trim()) };
    }
    match cfg.medium {
        None => {
            cfg.medium = Some(BootMedium::Kernel(crate::host::env::build_kernel()?));
            cfg.initrd = Some(crate::host::user::build_initrd()?);
        }
        Some(BootMedium::Iso { ref path, uefi }) => {
            crate::host::iso::build_iso_with(path, &cfg.cmdline)?;
            if uefi {
                crate::host::iso::ensure_ovmf()?;
            }
        }
        Some(BootMedium::Kernel(_)) => {}
    }
    crate::host::env::ensure_qemu()?;
    if let Some(net) = &cfg.net {
        print!("{}", net.describe());
        let _ = std::io::stdout().flush();
    }
    if let Some(port) = gdb_port {
        crate::host::gdb::check_port_free(port)?;
        cfg.extra.extend(crate::host::gdb::qemu_args(port));
        let symbols = match &cfg.medium {
            Some(BootMedium::Kernel(k)) => k.clone(),
            // The ISO boots the same kernel ELF, built by the same step.
            _ => crate::host::env::build_kernel()?,
        };
        println!("gdb: QEMU waits for a debugger on 127.0.0.1:{port}, stopped before the first instruction. In another terminal:");
        println!("  {}", crate::host::gdb::command_line(crate::host::gdb::debugger(), &symbols, port));
        let _ = std::io::stdout().flush();
    }
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stdin());
    // A Linux program as the first program (`init=/PATH`): the Linux runtime runs it with the
    // console as its standard input; it has no `sh> ` prompt and no `halt` command.
    let linux_init = linux_first_program(&cfg.cmdline);
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(cfg.qemu_args());
    if interactive {
        // mon:stdio multiplexes the monitor: Ctrl-A X quits, Ctrl-A C switches to the monitor.
        cmd.args(["-serial", "mon:stdio"]);
    } else {
        cmd.args(["-serial", "stdio", "-monitor", "none"]);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    }
    let mut child = cmd.spawn().map_err(|e| format!("cannot start qemu-system-x86_64: {e}"))?;
    if !interactive {
        // Guest output is passed through, watching for the shell's first prompt: input sent
        // while the kernel boots can be lost (the UART is reset), so it waits for the prompt
        // (or a minute, for a first program that never prints one).
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        let mut from_guest = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            let mut out = std::io::stdout();
            let mut buf = [0u8; 4096];
            let mut tail: Vec<u8> = Vec::new();
            let mut ready = Some(ready_tx);
            loop {
                match from_guest.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let _ = out.write_all(&buf[..n]);
                        let _ = out.flush();
                        if ready.is_some() {
                            tail.extend_from_slice(&buf[..n]);
                            if tail.windows(4).any(|w| w == b"sh> ") || (linux_init && tail.windows(READY_LINUX.len()).any(|w| w == READY_LINUX)) {
                                let _ = ready.take().map(|t| t.send(()));
                            }
                            if tail.len() > 8192 {
                                tail.drain(..tail.len() - 8);
                            }
                        }
                    }
                }
            }
        });
        // Piped input goes to the guest serial; the shell cannot see an end of input on a
        // serial line, so after it ends make sure a `halt` line follows.
        let mut to_guest = child.stdin.take().expect("piped");
        std::thread::spawn(move || {
            let mut input = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut input);
            let _ = ready_rx.recv_timeout(Duration::from_secs(60));
            let _ = to_guest.write_all(&if linux_init { input } else { with_halt(&input) });
            let _ = to_guest.flush();
            // Keep the pipe open: QEMU reads it as the guest drains its receive FIFO.
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        });
    }
    let status = match cfg.timeout {
        None => child.wait().map_err(|e| e.to_string())?,
        Some(t) => {
            let start = Instant::now();
            loop {
                if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
                    break s;
                }
                if start.elapsed() > t {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("timed out after {} s", t.as_secs()));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    match status.code() {
        Some(QEMU_EXIT_SUCCESS) => Ok(()),
        Some(QEMU_EXIT_FAILURE) => Err("the kernel stopped with a failure".into()),
        Some(0) => Ok(()), // closed from the QEMU monitor
        Some(c) => Err(format!("QEMU exited with status {c}")),
        None => Err("QEMU was killed by a signal".into()),
    }
}

/// The kernel's line when the Linux runtime starts a first program given by path: piped
/// input may go from then on (the serial port is set up; what the program has not read yet
/// waits in QEMU).
const READY_LINUX: &[u8] = b"init: starting `linuxrt`";

/// Whether the command line's first program is a Linux program given by its path
/// (`init=/bin/busybox -- sh`; the kernel runs it with `linuxrt`).
pub fn linux_first_program(cmdline: &str) -> bool {
    let before_args = cmdline.split_once(" -- ").map_or(cmdline, |(k, _)| k);
    before_args.split_whitespace().any(|w| w.strip_prefix("init=").is_some_and(|p| p.starts_with('/')))
}

/// Piped shell input with a `halt` line at the end unless its last line is one already.
pub fn with_halt(input: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(input);
    let last = text.lines().map(str::trim).filter(|l| !l.is_empty()).next_back();
    let mut out = input.to_vec();
    if last != Some("halt") {
        if !out.is_empty() && !out.ends_with(b"\n") {
            out.push(b'\n');
        }
        out.extend_from_slice(b"halt\n");
    }
    out
}

// ---------------------------------------------------------------------------------------
// The command line of `run`

/// The virtual machine's options (`run`).
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct VmArgs {
    /// Virtual CPUs, 1..=255
    #[arg(long, allow_negative_numbers = true, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=255))]
    pub smp: u32,
    /// Guest memory, e.g. 512M, 2G
    #[arg(long, value_name = "SIZE", default_value = "512M", value_parser = mem_size)]
    pub mem: u64,
    /// Split cores and memory evenly over NODES NUMA nodes (at most one node per core)
    #[arg(long, allow_negative_numbers = true, value_name = "NODES", value_parser = clap::value_parser!(u32).range(1..=255))]
    pub numa: Option<u32>,
    /// Kernel command line (e.g. "topology"); `init=sh` is added unless it names a first program
    #[arg(long, value_name = "\"...\"", allow_hyphen_values = true)]
    pub cmdline: Option<String>,
    /// QEMU -cpu model
    #[arg(long, value_name = "MODEL", default_value = "max")]
    pub cpu: String,
    /// Boot the GRUB ISO instead of -kernel
    #[arg(long)]
    pub iso: bool,
    /// With --iso: boot under OVMF (UEFI) instead of SeaBIOS
    #[arg(long, requires = "iso")]
    pub uefi: bool,
    /// Kill QEMU after SECS seconds (default: none)
    #[arg(long, allow_negative_numbers = true, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Add a virtio-net NIC on QEMU's restricted user-mode network (guest 10.0.2.15/24); forwards
    /// a free port on 127.0.0.1 to guest port 80 unless --hostfwd is given, and prints
    /// `net: 127.0.0.1:PORT -> guest:80`
    #[arg(long)]
    pub net: bool,
    /// Attach the raw image IMG as a virtio-blk disk (make one with `cargo xtask fs mkimage DIR IMG`)
    #[arg(long, value_name = "IMG")]
    pub disk: Option<PathBuf>,
    /// Forward 127.0.0.1:H on the host to guest port G (repeatable; implies --net)
    #[arg(long, value_name = "H:G", value_parser = hostfwd, action = clap::ArgAction::Append)]
    pub hostfwd: Vec<crate::host::vm::Forward>,
}

impl VmArgs {
    /// The machine these options describe; the checks between options (NUMA nodes against
    /// cores and memory, the disk image) are made here.
    pub fn into_config(self) -> Result<crate::host::vm::VmConfig, String> {
        use crate::host::vm::{BootMedium, VmConfig};
        let d = VmConfig::default();
        let cfg = VmConfig {
            smp: self.smp,
            mem_mib: self.mem,
            numa_nodes: self.numa.unwrap_or(0),
            cmdline: self.cmdline.unwrap_or_default(),
            cpu: self.cpu,
            timeout: self.timeout.map(std::time::Duration::from_secs),
            net: if self.net || !self.hostfwd.is_empty() { Some(crate::host::vm::from_options(self.hostfwd)?) } else { None },
            disk: self.disk,
            medium: self.iso.then(|| BootMedium::Iso { path: crate::host::iso::default_iso_path(), uefi: self.uefi }),
            ..d
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct RunArgs {
    #[command(flatten)]
    pub vm: VmArgs,
    /// QEMU's gdb stub on 127.0.0.1:PORT (default 1234), stopped before the first instruction;
    /// prints the gdb command line that loads the kernel's symbols and runs to kernel_entry
    /// (docs/boot.md, Debugging)
    #[arg(long, allow_negative_numbers = true, value_name = "PORT", num_args = 0..=1, default_missing_value = "1234", value_parser = tcp_port)]
    pub gdb: Option<u16>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn piped_input_ends_with_halt() {
        assert_eq!(with_halt(b"run hello\n"), b"run hello\nhalt\n");
        assert_eq!(with_halt(b"run hello"), b"run hello\nhalt\n");
        assert_eq!(with_halt(b"run hello\nhalt\n"), b"run hello\nhalt\n");
        assert_eq!(with_halt(b""), b"halt\n");
    }

    #[test]
    fn a_path_as_init_is_a_linux_program() {
        assert!(linux_first_program("init=/bin/busybox -- sh"));
        assert!(linux_first_program("smp=2 init=/bin/busybox"));
        assert!(!linux_first_program("init=sh"));
        assert!(!linux_first_program("init=linuxrt -- /bin/busybox sh"));
        // A path among the program's own arguments is not the first program.
        assert!(!linux_first_program("init=sh -- init=/bin/x"));
    }

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    /// `run --gdb [PORT]` as cli.rs declares it: the port (or Some(crate::host::gdb::DEFAULT_PORT) for a bare
    /// `--gdb`), and the other options. Errors are one line.
    fn take_option(args: &[String]) -> Result<(Option<u16>, u32), String> {
        crate::host::args::parse_args::<RunArgs>("run", args).map(|r| (r.gdb, r.vm.smp))
    }

    /// Catches `--gdb` eating the next option, a bad port accepted, or a default port other
    /// than DEFAULT_PORT.
    #[test]
    fn gdb_option_parses() {
        assert_eq!(take_option(&args("--smp 3")).unwrap(), (None, 3));
        assert_eq!(take_option(&args("--gdb")).unwrap(), (Some(crate::host::gdb::DEFAULT_PORT), 2));
        assert_eq!(take_option(&args("--gdb --smp 4")).unwrap(), (Some(crate::host::gdb::DEFAULT_PORT), 4));
        assert_eq!(take_option(&args("--smp 4 --gdb 4321")).unwrap(), (Some(4321), 4));
        assert_eq!(take_option(&args("--gdb=9000 --smp 5")).unwrap(), (Some(9000), 5));
        for bad in ["--gdb 0", "--gdb 65536", "--gdb 12ab", "--gdb=", "--gdb=x"] {
            let e = take_option(&args(bad)).unwrap_err();
            assert!(e.contains("--gdb") && e.contains("1..=65535") && !e.contains('\n'), "{bad}: {e}");
        }
    }
}
