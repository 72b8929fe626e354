//! QEMU configuration and launching. Always TCG: KVM on these machines is emulated in
//! software and runs kernel code hundreds of times slower.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// QEMU exit status when the kernel writes `EXIT_SUCCESS` (0x10) to isa-debug-exit.
pub const QEMU_EXIT_SUCCESS: i32 = (0x10 << 1) | 1;
/// ... and when it writes `EXIT_FAILURE` (0x11).
pub const QEMU_EXIT_FAILURE: i32 = (0x11 << 1) | 1;

#[derive(Debug, Clone, PartialEq)]
pub enum BootMedium {
    /// `-kernel ELF` through the PVH note.
    Kernel(PathBuf),
    /// The GRUB ISO under SeaBIOS (`uefi == false`) or OVMF.
    Iso { path: PathBuf, uefi: bool },
}

#[derive(Debug, Clone, PartialEq)]
pub struct VmConfig {
    pub smp: u32,
    pub mem_mib: u64,
    pub numa_nodes: u32,
    pub cmdline: String,
    pub cpu: String,
    /// QEMU machine type and options (default `q35`).
    pub machine: String,
    pub medium: Option<BootMedium>,
    /// The program archive, passed as the boot module (`-initrd`) with `-kernel`.
    pub initrd: Option<PathBuf>,
    pub timeout: Option<Duration>,
    /// Extra raw QEMU arguments (plugins, tracing).
    pub extra: Vec<String>,
    /// The guest NIC on QEMU's restricted user-mode network (`--net`), or no NIC at all.
    pub net: Option<crate::net::NetConfig>,
    /// A raw disk image attached as a `virtio-blk-pci` disk (`--disk IMG`), or no disk.
    pub disk: Option<PathBuf>,
}

impl Default for VmConfig {
    fn default() -> Self {
        Self {
            smp: 2,
            mem_mib: 512,
            numa_nodes: 0,
            cmdline: String::new(),
            cpu: "max".into(),
            machine: "q35".into(),
            medium: None,
            initrd: None,
            timeout: None,
            extra: Vec::new(),
            net: None,
            disk: None,
        }
    }
}

/// Parse a memory size such as `512M`, `2G`, `1048576K` into MiB.
pub fn parse_size_mib(s: &str) -> Result<u64, String> {
    let bad = || format!("malformed size `{s}` (examples: 512M, 2G)");
    let t = s.trim();
    if t.is_empty() {
        return Err(bad());
    }
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => (&t[..i], &t[i..]),
        None => (t, "M"),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let mib = match unit.to_ascii_uppercase().trim_end_matches(['B', 'I']) {
        "K" => {
            if n % 1024 != 0 {
                return Err(format!("size `{s}` is not a whole number of MiB"));
            }
            n / 1024
        }
        "M" | "" => n,
        "G" => n.checked_mul(1024).ok_or_else(bad)?,
        "T" => n.checked_mul(1024 * 1024).ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    if mib == 0 {
        return Err(format!("size `{s}` is zero"));
    }
    Ok(mib)
}

impl VmConfig {
    /// The machine `cargo xtask run ARGS` describes (cli.rs declares the options; the checks
    /// between them are `validate`'s). Errors are one line.
    #[cfg(test)]
    pub fn parse(args: &[String]) -> Result<VmConfig, String> {
        match crate::cli::parse_command("run", args)? {
            crate::cli::Command::Run(r) => r.vm.into_config(),
            _ => unreachable!("parse_command(\"run\") gives a run command"),
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.smp == 0 {
            return Err("--smp: need at least 1 core".into());
        }
        if self.smp > 255 {
            return Err(format!("--smp: {} cores is more than the 255 this system supports", self.smp));
        }
        if self.numa_nodes > self.smp {
            return Err(format!("--numa: {} nodes is more than the {} cores", self.numa_nodes, self.smp));
        }
        if self.numa_nodes > 0 && self.mem_mib < self.numa_nodes as u64 {
            return Err(format!("--numa: {} MiB cannot be split over {} nodes", self.mem_mib, self.numa_nodes));
        }
        if let Some(d) = &self.disk {
            if !d.is_file() {
                return Err(format!("--disk: `{}` is not a file (make one with `cargo xtask fs mkimage DIR IMG`)", d.display()));
            }
            // QEMU splits -drive options at commas; such a path cannot be passed safely.
            if d.to_string_lossy().contains(',') {
                return Err(format!("--disk: `{}`: a path with a comma cannot be given to QEMU", d.display()));
            }
        }
        if self.cpu.is_empty() || self.cpu.starts_with('-') {
            return Err("--cpu: needs a QEMU CPU model name".into());
        }
        Ok(())
    }

    pub fn qemu_args(&self) -> Vec<String> {
        let mut a: Vec<String> = Vec::new();
        let mut push = |s: &str| a.push(s.to_string());
        push("-accel");
        push("tcg,thread=multi");
        push("-machine");
        push(&self.machine);
        push("-cpu");
        push(&self.cpu);
        push("-smp");
        push(&self.smp.to_string());
        push("-m");
        push(&format!("{}M", self.mem_mib));
        push("-display");
        push("none");
        push("-no-reboot");
        push("-device");
        push("isa-debug-exit,iobase=0xf4,iosize=0x04");
        if self.numa_nodes > 0 {
            let n = self.numa_nodes as u64;
            let per = self.mem_mib / n;
            let cpus = self.smp as u64;
            for node in 0..n {
                let mem = if node == 0 { per + self.mem_mib % n } else { per };
                // Spread cores as evenly as possible: the first (cpus % n) nodes get one more.
                let base = cpus / n;
                let extra = cpus % n;
                let first = node * base + node.min(extra);
                let count = base + if node < extra { 1 } else { 0 };
                push("-object");
                push(&format!("memory-backend-ram,id=mem{node},size={mem}M"));
                push("-numa");
                push(&format!("node,nodeid={node},cpus={}-{},memdev=mem{node}", first, first + count - 1));
            }
        }
        match &self.medium {
            Some(BootMedium::Kernel(path)) => {
                push("-kernel");
                push(&path.display().to_string());
                if let Some(initrd) = &self.initrd {
                    push("-initrd");
                    push(&initrd.display().to_string());
                }
                if !self.cmdline.is_empty() {
                    push("-append");
                    push(&self.cmdline);
                }
            }
            Some(BootMedium::Iso { path, uefi }) => {
                if *uefi {
                    push("-bios");
                    push(crate::iso::OVMF_CODE);
                }
                push("-cdrom");
                push(&path.display().to_string());
                push("-boot");
                push("d");
            }
            None => {}
        }
        match &self.net {
            Some(n) => a.extend(n.qemu_args()),
            None => a.extend(crate::net::no_net_args()),
        }
        if let Some(d) = &self.disk {
            a.push("-drive".into());
            a.push(format!("file={},format=raw,if=none,id=d0", d.display()));
            a.push("-device".into());
            a.push("virtio-blk-pci,drive=d0".into());
        }
        a.extend(self.extra.iter().cloned());
        a
    }
}

/// What a captured boot produced.
#[derive(Debug)]
pub struct BootOutput {
    pub serial: String,
    pub status: Option<ExitStatus>,
    pub timed_out: bool,
    pub elapsed: Duration,
}

impl BootOutput {
    pub fn kernel_exit_ok(&self) -> bool {
        self.status.and_then(|s| s.code()) == Some(QEMU_EXIT_SUCCESS)
    }
}

/// Boot with serial on stdout captured (optionally echoed), stdin from `input`, and a hard
/// timeout.
pub fn boot_captured(cfg: &VmConfig, input: Option<&str>, echo: bool) -> Result<BootOutput, String> {
    let mut args = cfg.qemu_args();
    args.extend(["-serial", "stdio", "-monitor", "none"].iter().map(|s| s.to_string()));
    run_captured(&args, cfg.timeout, input, echo)
}

/// Run QEMU with exactly `args` (which must send the serial console to stdio), capturing its
/// output with a hard timeout; see `boot_captured`.
pub fn run_captured(args: &[String], timeout: Option<Duration>, input: Option<&str>, echo: bool) -> Result<BootOutput, String> {
    crate::env::ensure_qemu()?;
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(args);
    cmd.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|e| format!("cannot start qemu-system-x86_64: {e}"))?;
    if let Some(text) = input {
        let mut stdin = child.stdin.take().expect("piped");
        let text = text.to_string();
        std::thread::spawn(move || {
            let _ = stdin.write_all(text.as_bytes());
        });
    }
    let stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let (tx, rx) = mpsc::channel::<(String, Duration)>();
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf).replace('\r', "");
                    if tx.send((line, start.elapsed())).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut serial = String::new();
    let mut timed_out = false;
    let status;
    loop {
        while let Ok((line, _)) = rx.try_recv() {
            if echo {
                print!("{line}");
                let _ = std::io::stdout().flush();
            }
            serial.push_str(&line);
        }
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            status = Some(s);
            break;
        }
        if timeout.is_some_and(|t| start.elapsed() > t) {
            let _ = child.kill();
            status = child.wait().ok();
            timed_out = true;
            break;
        }
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok((line, _)) => {
                if echo {
                    print!("{line}");
                    let _ = std::io::stdout().flush();
                }
                serial.push_str(&line);
            }
            Err(_) => {}
        }
    }
    let _ = reader.join();
    while let Ok((line, _)) = rx.try_recv() {
        if echo {
            print!("{line}");
        }
        serial.push_str(&line);
    }
    let qemu_err = err_reader.join().unwrap_or_default();
    if !timed_out {
        if let Some(code) = status.and_then(|s| s.code()) {
            if code != QEMU_EXIT_SUCCESS && code != QEMU_EXIT_FAILURE && !qemu_err.trim().is_empty() {
                return Err(format!("QEMU failed: {}", qemu_err.lines().next().unwrap_or("").trim()));
            }
        }
    }
    Ok(BootOutput { serial, status, timed_out, elapsed: start.elapsed() })
}

/// `cargo xtask run`.
pub fn run_command(mut cfg: VmConfig, gdb_port: Option<u16>) -> Result<(), String> {
    // Boot into the shell unless the command line names another first program.
    if !cfg.cmdline.split_whitespace().any(|w| w.starts_with("init=")) {
        cfg.cmdline = if cfg.cmdline.trim().is_empty() { "init=sh".into() } else { format!("{} init=sh", cfg.cmdline.trim()) };
    }
    match cfg.medium {
        None => {
            cfg.medium = Some(BootMedium::Kernel(crate::env::build_kernel()?));
            cfg.initrd = Some(crate::user::build_initrd()?);
        }
        Some(BootMedium::Iso { ref path, uefi }) => {
            crate::iso::build_iso_with(path, &cfg.cmdline)?;
            if uefi {
                crate::iso::ensure_ovmf()?;
            }
        }
        Some(BootMedium::Kernel(_)) => {}
    }
    crate::env::ensure_qemu()?;
    if let Some(net) = &cfg.net {
        print!("{}", net.describe());
        let _ = std::io::stdout().flush();
    }
    if let Some(port) = gdb_port {
        crate::gdb::check_port_free(port)?;
        cfg.extra.extend(crate::gdb::qemu_args(port));
        let symbols = match &cfg.medium {
            Some(BootMedium::Kernel(k)) => k.clone(),
            // The ISO boots the same kernel ELF, built by the same step.
            _ => crate::env::build_kernel()?,
        };
        println!("gdb: QEMU waits for a debugger on 127.0.0.1:{port}, stopped before the first instruction. In another terminal:");
        println!("  {}", crate::gdb::command_line(crate::gdb::debugger(), &symbols, port));
        let _ = std::io::stdout().flush();
    }
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stdin());
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
                            if tail.windows(4).any(|w| w == b"sh> ") {
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
            let _ = to_guest.write_all(&with_halt(&input));
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

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size_mib("512M").unwrap(), 512);
        assert_eq!(parse_size_mib("2G").unwrap(), 2048);
        assert_eq!(parse_size_mib("2GiB").unwrap(), 2048);
        assert_eq!(parse_size_mib("64").unwrap(), 64);
        assert_eq!(parse_size_mib("2048K").unwrap(), 2);
        for bad in ["", "M", "12Q", "-5M", "1.5G", "0M", "1000K"] {
            assert!(parse_size_mib(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn bad_options_rejected() {
        assert!(VmConfig::parse(&args(&["--smp", "0"])).is_err());
        assert!(VmConfig::parse(&args(&["--smp", "256"])).is_err());
        assert!(VmConfig::parse(&args(&["--smp", "x"])).is_err());
        assert!(VmConfig::parse(&args(&["--smp", "2", "--numa", "3"])).is_err());
        assert!(VmConfig::parse(&args(&["--mem", "lots"])).is_err());
        assert!(VmConfig::parse(&args(&["--smp"])).is_err());
        assert!(VmConfig::parse(&args(&["--uefi"])).is_err());
        assert!(VmConfig::parse(&args(&["--foo"])).unwrap_err().contains("--foo"));
        let cfg = VmConfig::parse(&args(&["--smp", "255", "--numa", "5"])).unwrap();
        assert_eq!((cfg.smp, cfg.numa_nodes), (255, 5));
    }

    #[test]
    fn numa_split_covers_every_core_and_all_memory() {
        let cfg = VmConfig { smp: 7, mem_mib: 1000, numa_nodes: 3, ..Default::default() };
        let a = cfg.qemu_args();
        let nodes: Vec<&String> = a.iter().filter(|s| s.starts_with("node,")).collect();
        assert_eq!(nodes.len(), 3);
        assert!(nodes[0].contains("cpus=0-2"));
        assert!(nodes[1].contains("cpus=3-4"));
        assert!(nodes[2].contains("cpus=5-6"));
        let total: u64 = a
            .iter()
            .filter_map(|s| s.strip_prefix("memory-backend-ram,"))
            .map(|s| s.split("size=").nth(1).unwrap().trim_end_matches('M').parse::<u64>().unwrap())
            .sum();
        assert_eq!(total, 1000);
    }

    #[test]
    fn net_options_add_the_nic_and_nothing_else_has_one() {
        let cfg = VmConfig::parse(&args(&["--net"])).unwrap();
        let a = cfg.qemu_args();
        let port = cfg.net.as_ref().unwrap().host_port(80).expect("default forward to guest port 80");
        assert!(a.iter().any(|s| s == &format!("user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{port}-:80")));
        assert!(a.windows(2).any(|w| w[0] == "-device" && w[1] == "virtio-net-pci,netdev=n0"));
        let cfg = VmConfig::parse(&args(&["--hostfwd", "8080:80", "--hostfwd", "8081:7"])).unwrap();
        assert_eq!(cfg.net.unwrap().forwards.len(), 2, "--hostfwd implies --net, no default forward added");
        assert!(VmConfig::parse(&args(&["--hostfwd", "80"])).unwrap_err().contains("--hostfwd"));
        assert!(VmConfig::parse(&args(&["--hostfwd"])).unwrap_err().contains("--hostfwd"));
        // Without --net: no NIC at all (QEMU's default one would be on an unrestricted network).
        let a = VmConfig::default().qemu_args();
        assert!(a.windows(2).any(|w| w[0] == "-nic" && w[1] == "none"));
        assert!(!a.iter().any(|s| s.contains("netdev")));
    }

    #[test]
    fn disk_option_attaches_a_virtio_blk_disk_and_nothing_else_has_one() {
        let dir = crate::env::target_dir().join("qemu-disk-test");
        std::fs::create_dir_all(&dir).unwrap();
        let img = dir.join("d.img");
        std::fs::write(&img, vec![0u8; 4096]).unwrap();
        let cfg = VmConfig::parse(&args(&["--disk", img.to_str().unwrap()])).unwrap();
        let a = cfg.qemu_args();
        assert!(a.windows(2).any(|w| w[0] == "-drive" && w[1] == format!("file={},format=raw,if=none,id=d0", img.display())));
        assert!(a.windows(2).any(|w| w[0] == "-device" && w[1] == "virtio-blk-pci,drive=d0"));
        assert!(!VmConfig::default().qemu_args().iter().any(|s| s.contains("virtio-blk") || s.starts_with("-drive")));
        assert!(VmConfig::parse(&args(&["--disk", "/nonexistent/x.img"])).unwrap_err().contains("--disk"));
        assert!(VmConfig::parse(&args(&["--disk"])).unwrap_err().contains("--disk"));
        let comma = dir.join("a,b.img");
        std::fs::write(&comma, b"x").unwrap();
        assert!(VmConfig::parse(&args(&["--disk", comma.to_str().unwrap()])).unwrap_err().contains("comma"));
    }

    #[test]
    fn always_tcg() {
        let a = VmConfig::default().qemu_args();
        assert!(a.windows(2).any(|w| w[0] == "-accel" && w[1].starts_with("tcg")));
        assert!(!a.iter().any(|s| s.contains("kvm")));
    }
}
