//! The machine QEMU emulates: its configuration ([`VmConfig`]) and the QEMU arguments for
//! it, including the guest NIC (one place, shared by `run`, `bench`, the Linux baseline and
//! the tests). Always TCG: KVM on these machines is emulated in software and runs kernel code
//! hundreds of times slower.
//!
//! The contract with the guest network: one `virtio-net-pci` NIC on QEMU's user-mode network
//! with `restrict=on` (the guest reaches nothing outside QEMU; guest 10.0.2.15/24, gateway
//! 10.0.2.2), and host ports forwarded from 127.0.0.1 only.

use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::time::Duration;

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
    pub net: Option<NetConfig>,
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
                    push(crate::host::iso::OVMF_CODE);
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
            None => a.extend(no_net_args()),
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

/// The guest port the TCP service listens on.
pub const SERVICE_PORT: u16 = 80;

/// One host-to-guest TCP forward: `127.0.0.1:host` on the host to `guest` in the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forward {
    pub host: u16,
    pub guest: u16,
}

/// The guest's network: QEMU's user-mode stack (restricted) with TCP forwards from 127.0.0.1.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetConfig {
    pub forwards: Vec<Forward>,
}

impl NetConfig {
    /// One forward from a free host port to the service port (the default of `--net`).
    pub fn service() -> Result<NetConfig, String> {
        Ok(NetConfig { forwards: vec![Forward { host: free_port()?, guest: SERVICE_PORT }] })
    }

    /// The host port forwarded to `guest`, if any.
    pub fn host_port(&self, guest: u16) -> Option<u16> {
        self.forwards.iter().find(|f| f.guest == guest).map(|f| f.host)
    }

    /// The QEMU arguments: the NIC and its netdev. Everything the guest can reach is inside
    /// QEMU (`restrict=on`); the host listens on 127.0.0.1 only.
    pub fn qemu_args(&self) -> Vec<String> {
        let mut netdev = String::from("user,id=n0,restrict=on");
        for f in &self.forwards {
            netdev.push_str(&format!(",hostfwd=tcp:127.0.0.1:{}-:{}", f.host, f.guest));
        }
        vec!["-netdev".into(), netdev, "-device".into(), "virtio-net-pci,netdev=n0".into()]
    }

    /// What `run` prints, one line per forward: `net: 127.0.0.1:PORT -> guest:80`.
    pub fn describe(&self) -> String {
        self.forwards.iter().map(|f| format!("net: 127.0.0.1:{} -> guest:{}\n", f.host, f.guest)).collect()
    }
}

/// QEMU's arguments for a guest without a network: no NIC at all. (Without this, QEMU adds a
/// default NIC on an unrestricted user-mode network.)
pub fn no_net_args() -> Vec<String> {
    vec!["-nic".into(), "none".into()]
}

/// A TCP port on 127.0.0.1 that is free now (the OS picks it; QEMU binds it a moment later,
/// and says so if someone else took it in between).
pub fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| format!("net: cannot find a free port on 127.0.0.1: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| format!("net: {e}"))
}

/// `--hostfwd HOSTPORT:GUESTPORT`.
pub fn parse_hostfwd(v: &str) -> Result<Forward, String> {
    let bad = |why: &str| format!("--hostfwd: `{v}` {why} (want HOSTPORT:GUESTPORT, e.g. 8080:80)");
    let (h, g) = v.split_once(':').ok_or_else(|| bad("has no `:`"))?;
    let port = |s: &str, which: &str| -> Result<u16, String> {
        s.trim().parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(|| bad(&format!("has a bad {which} port `{s}`")))
    };
    Ok(Forward { host: port(h, "host")?, guest: port(g, "guest")? })
}

/// Build the network of `--net` / `--hostfwd` options: with no forward named, the default
/// one (a free host port to guest port 80). Two forwards from one host port are an error.
pub fn from_options(forwards: Vec<Forward>) -> Result<NetConfig, String> {
    if forwards.is_empty() {
        return NetConfig::service();
    }
    for (i, f) in forwards.iter().enumerate() {
        if forwards[..i].iter().any(|g| g.host == f.host) {
            return Err(format!("--hostfwd: host port {} is forwarded twice", f.host));
        }
    }
    Ok(NetConfig { forwards })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn always_tcg() {
        let a = VmConfig::default().qemu_args();
        assert!(a.windows(2).any(|w| w[0] == "-accel" && w[1].starts_with("tcg")));
        assert!(!a.iter().any(|s| s.contains("kvm")));
    }

    #[test]
    fn nic_on_restricted_user_net_forwarding_from_localhost_only() {
        let n = NetConfig { forwards: vec![Forward { host: 5555, guest: 80 }, Forward { host: 5556, guest: 7 }] };
        let a = n.qemu_args();
        assert_eq!(a[0], "-netdev");
        assert_eq!(a[1], "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:5555-:80,hostfwd=tcp:127.0.0.1:5556-:7");
        assert_eq!(&a[2..], ["-device", "virtio-net-pci,netdev=n0"]);
        assert_eq!(n.describe(), "net: 127.0.0.1:5555 -> guest:80\nnet: 127.0.0.1:5556 -> guest:7\n");
        assert_eq!(n.host_port(7), Some(5556));
        // Every netdev is restricted and every forward binds 127.0.0.1 (a planted `0.0.0.0`
        // or a dropped `restrict=on` fails here).
        for w in a.iter().filter(|s| s.starts_with("user,")) {
            assert!(w.contains("restrict=on"));
            assert!(w.split(',').filter(|p| p.starts_with("hostfwd=")).all(|p| p.starts_with("hostfwd=tcp:127.0.0.1:")));
        }
    }

    #[test]
    fn hostfwd_parsing() {
        assert_eq!(parse_hostfwd("8080:80").unwrap(), Forward { host: 8080, guest: 80 });
        for bad in ["8080", "x:80", "8080:", "0:80", "70000:80", "80:0", ""] {
            let e = parse_hostfwd(bad).unwrap_err();
            assert!(e.starts_with("--hostfwd:"), "{bad}: {e}");
        }
        assert!(from_options(vec![Forward { host: 1, guest: 80 }, Forward { host: 1, guest: 81 }]).unwrap_err().contains("twice"));
        let d = from_options(Vec::new()).unwrap();
        assert_eq!(d.forwards.len(), 1);
        assert_eq!(d.forwards[0].guest, 80);
        assert_ne!(d.forwards[0].host, 0);
    }
}
