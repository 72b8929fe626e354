//! `cargo xtask linux fetch|modules|initramfs|run`: the Linux baseline guest by hand
//! (the guest itself: guest/linux.rs).

use crate::host::args::{at_least_one, hostfwd};
use crate::guest::linux::{build_initramfs, fetch_kernel, guest_initramfs, run_workload, LinuxVm};
use crate::host::qemu::Session;
use std::path::Path;
use std::time::Instant;
use std::path::PathBuf;
use std::time::Duration;

/// `cargo xtask linux ...` (the command line: [`LinuxCommand`], below).
pub fn main(cmd: LinuxCommand) -> Result<(), crate::host::outcome::Failure> {
    match cmd {
        LinuxCommand::Fetch => crate::host::outcome::work(fetch_kernel().map(|k| println!("{} {}", k.version, k.bzimage.display()))),
        LinuxCommand::Modules => crate::host::outcome::work(crate::guest::linux_net::print_modules()),
        LinuxCommand::Initramfs { init, out } => {
            let out = out.unwrap_or_else(|| crate::guest::plugin::artifact_dir().join("initramfs.cpio"));
            crate::host::outcome::work(build_initramfs(&init, &out).map(|()| println!("{}", out.display())))
        }
        LinuxCommand::Run(a) => {
            if a.load.is_some() && (a.wl != "tcpserv" || !(a.net || !a.hostfwd.is_empty())) {
                return Err(crate::host::outcome::Failure::Usage("linux run: --load needs --wl tcpserv and --net".into()));
            }
            crate::host::outcome::work(run_command(a))
        }
    }
}

fn run_command(a: LinuxRunArgs) -> Result<(), String> {
    let wl = a.wl;
    let kernel = fetch_kernel()?;
    let mut vm = LinuxVm::new(&kernel, Path::new(""));
    if let Some(n) = a.smp {
        vm.smp = n;
    }
    if let Some(m) = a.mem {
        vm.mem_mib = m;
    }
    if let Some(t) = a.timeout {
        vm.timeout = Duration::from_secs(t);
    }
    let extra = a.append.unwrap_or_default();
    let net = a.net || !a.hostfwd.is_empty();
    let (forwards, load) = (a.hostfwd, a.load);
    let concurrency = a.concurrency.map_or(crate::host::tcpload::DEFAULT_CONCURRENCY, |c| c.min(usize::MAX as u64) as usize);
    vm.initrd = if net { crate::guest::linux_net::initramfs(&kernel)? } else { guest_initramfs()? };
    if net {
        vm.net = Some(crate::host::vm::from_options(forwards)?);
    }
    let accept = load.map(|conns| crate::guest::tcp_accept::AcceptSpec { conns, concurrency, ready_timeout: vm.timeout, ..Default::default() });
    let conns = accept.as_ref().map(|a| format!(" conns={} warmup={}", a.guest_conns(), a.warmup)).unwrap_or_default();
    vm.append = format!("wl={wl} threads={}{conns} {extra}", vm.smp);
    if let Some(n) = &vm.net {
        print!("{}", n.describe());
        let port = n.host_port(crate::host::vm::SERVICE_PORT);
        if let (Some(spec), Some(port)) = (&accept, port) {
            let o = crate::guest::tcp_accept::run(&vm.qemu_args(), port, spec, true)?;
            for l in &o.rounds {
                print!("{}", l.summary());
            }
            println!("linux: guest ran {:.1}s", o.finished.elapsed.as_secs_f64());
            return o.problem.map_or(Ok(()), |p| Err(format!("linux run: {p}")));
        }
        if load.is_some() {
            return Err("--load: no forward to guest port 80".into());
        }
        // Serve until the guest stops or the timeout: the serial line as it comes.
        let s = Session::start(&vm.qemu_args(), true)?;
        let f = s.finish(Instant::now() + vm.timeout);
        println!("linux: guest ran {:.1}s{}", f.elapsed.as_secs_f64(), if f.killed { " (killed at --timeout)".to_string() } else { format!(" (QEMU status {:?})", f.exit_code) });
        return Ok(());
    }
    let out = run_workload(&vm)?;
    print!("{}", out.serial);
    println!("linux: guest ran {:.1}s", out.elapsed.as_secs_f64());
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The command line of `linux`

#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct LinuxArgs {
    #[command(subcommand)]
    pub command: LinuxCommand,
}

#[derive(clap::Subcommand, Debug, Clone, PartialEq)]
pub enum LinuxCommand {
    /// Download Debian's kernel package (the one linux-image-amd64 depends on) into
    /// target/linux-cache and unpack its /boot (never installs into /boot); prints the version
    /// and bzImage path
    Fetch,
    /// The NIC's modules (virtio-net, virtio-pci and their depends=) in load order, each checked
    /// to carry the bzImage's release in its vermagic
    Modules,
    /// Pack BIN as /init (plus /dev/console, /proc, /tmp) into a newc cpio
    Initramfs {
        /// The static program to run as /init
        #[arg(long, value_name = "BIN")]
        init: PathBuf,
        /// Where the archive goes (default target/qemu-plugins/initramfs.cpio)
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Boot the measurement guest (tools/qemu-plugins/guest) running a workload; print its serial output
    #[command(long_about = "Boot the measurement guest (tools/qemu-plugins/guest) running workload NAME (default null) \
and print its serial output. --net adds the virtio-net NIC (its modules unpacked from the kernel package into the \
initramfs) on QEMU's restricted user-mode network, forwarding a free port on 127.0.0.1 to guest port 80 (or --hostfwd); \
for `--wl tcpserv` (Corey's TCP accept service), --load N waits for `tcpserv: ready`, opens N connections with the load \
generator (C at a time, default 2), and waits for the guest's `tcpserv: done`.")]
    Run(LinuxRunArgs),
}

#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct LinuxRunArgs {
    /// The guest workload (tools/qemu-plugins/guest)
    #[arg(long, value_name = "NAME", default_value = "null")]
    pub wl: String,
    /// vCPUs, 1..=64
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub smp: Option<u32>,
    /// Guest memory in MiB
    #[arg(long, value_name = "MIB", value_parser = at_least_one)]
    pub mem: Option<u64>,
    /// Added to the kernel command line
    #[arg(long, value_name = "\"...\"", allow_hyphen_values = true)]
    pub append: Option<String>,
    /// Kill the guest after SECS
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// A NIC on QEMU's restricted user-mode network (forwards a free port to guest port 80)
    #[arg(long)]
    pub net: bool,
    /// Forward 127.0.0.1:H to guest port G (repeatable; implies --net)
    #[arg(long, value_name = "H:G", value_parser = hostfwd, action = clap::ArgAction::Append)]
    pub hostfwd: Vec<crate::host::vm::Forward>,
    /// With --wl tcpserv --net: drive the guest with N connections (the accept benchmark)
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub load: Option<u64>,
    /// With --load: connections at once
    #[arg(long, value_name = "C", value_parser = clap::value_parser!(u64).range(1..))]
    pub concurrency: Option<u64>,
}
