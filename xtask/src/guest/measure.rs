//! One workload booted under one measurement plugin: the guest (this system or Linux, a named
//! workload or a `--cmdline` guest), its QEMU arguments in the exact mode, the run (a batch
//! run, or a host-driven one with the load generator), and its report and counted operations;
//! and a sharing audit summarised as numbers for other tools ([`sharing_summary`]).

use crate::guest::linux::{self, LinuxVm};
use crate::guest::plugin::{s, build, Built, Record, parse_records, exact_qemu_args, quantum_plugin_args, artifact_dir};
use crate::guest::symbols::{linux_symbols, Symbols};
use std::collections::BTreeMap;
use std::fs;
use std::process::Command;
use std::path::PathBuf;
use std::time::Duration;


#[derive(Debug, Clone, Copy, PartialEq)]
pub enum System {
    Linux,
    Ours,
}

impl System {
    pub(crate) fn parse(v: &str) -> Result<System, String> {
        match v {
            "linux" => Ok(System::Linux),
            "ours" => Ok(System::Ours),
            other => Err(format!("--system: unknown system `{other}` (linux, ours)")),
        }
    }
    pub(crate) fn name(self) -> &'static str {
        match self {
            System::Linux => "linux",
            System::Ours => "ours",
        }
    }
}

/// Linux guest workloads and their default parameters (bounded: each runs in seconds).
pub(crate) const LINUX_WORKLOADS: &[(&str, &str)] = &[
    ("stream", "size=65536 passes=4"),
    ("null", "iters=2000"),
    ("dupclose", "iters=1000"),
    ("dupclose_unshared", "iters=1000"),
    ("counter", "iters=10000"),
    ("private", "iters=10000"),
    ("find", "files=200 passes=2"),
    ("zip", "files=100"),
    ("pipe", "iters=200"),
    ("spawn", "iters=10"),
    // A signal delivered to an empty handler and returned (kill to itself).
    ("signal", "iters=2000"),
    // Corey's filesum without the web server: the known answer of the multi-core cache models.
    ("filesum", "size=1048576 passes=4 stride=64 mode=locality"),
    // Protected procedure calls' Linux equivalents (docs/ppc.md): 8-byte request/response
    // round trips between two processes pinned to CPU 0, over pipes and over a socketpair.
    ("piperr", "iters=2000"),
    ("sockrr", "iters=2000"),
    // Corey's TCP service (docs/net.md): the guest boots with the NIC and the host's load
    // generator drives it (xtask/src/net/tcp_accept.rs); ops = the measured connections.
    ("tcpserv", "conns=101 warmup=1"),
];

pub(crate) struct GuestRun {
    pub(crate) serial: String,
    pub(crate) ops: Option<u64>,
    pub(crate) report: Vec<Record>,
    pub(crate) elapsed: Duration,
}

pub(crate) struct RunSpec<'a> {
    pub(crate) system: System,
    pub(crate) workload: &'a str,
    pub(crate) smp: u32,
    pub(crate) params: &'a str,
    pub(crate) timeout: Duration,
    /// A guest command instead of a named workload (`--cmdline`); `workload` is then only a
    /// name for the output files.
    pub(crate) custom: Option<&'a Custom>,
    /// The exact mode ([`exact_qemu_args`]; off only to time the guest, and for the
    /// host-driven network workloads, whose packets arrive in host time anyway).
    pub(crate) exact: bool,
}


/// Host-driven workloads: the guest serves connections from the host's load generator.
pub(crate) fn host_driven(workload: &str) -> bool {
    workload == "tcpserv" || NET_BENCHES.contains(&workload)
}

/// Is this run in the exact mode? Not when timed, not when the host drives it over the network.
pub(crate) fn is_exact(spec: &RunSpec) -> bool {
    spec.exact && !host_driven(spec.workload) && !spec.custom.is_some_and(|c| c.net.is_some())
}

/// A guest command given instead of a named workload (`--system ours --cmdline "init=PROG --
/// ARGS"`), with the machine's extras and, for a guest that serves the host, the host's part:
/// wait for a serial line (`--ready`), run a host command (`--load-cmd`, with the forwarded
/// port in `$PORT` and `{port}`), then stop QEMU with SIGTERM so the plugin still writes its
/// report. Without `--load-cmd` the guest runs until it powers off (or `--timeout`).
#[derive(Debug, Clone, Default)]
pub struct Custom {
    pub cmdline: String,
    pub disk: Option<PathBuf>,
    /// The NIC on QEMU's restricted user network, with its forwards (`--net`, `--hostfwd`).
    pub net: Option<crate::host::vm::NetConfig>,
    pub ready: Option<String>,
    pub load_cmd: Option<String>,
    /// Print the guest's serial lines as they arrive.
    pub echo: bool,
}

/// Run a `--cmdline` guest (see [`Custom`]). `timed_out` is set only when the deadline, not
/// the guest or the end of the load command, ended the run. QEMU is stopped with SIGTERM, so
/// the plugins write their reports ([`Session::terminate`]).
pub(crate) fn run_custom(args: &[String], timeout: Duration, c: &Custom) -> Result<crate::host::qemu::RunOutput, String> {
    use crate::host::qemu::{Echo, Session, WaitEnd};
    use std::time::Instant;
    let mut s = Session::spawn(args, None, if c.echo { Echo::Prefixed("  | ") } else { Echo::Off })?;
    let deadline = s.start + timeout;
    let port = c.net.as_ref().and_then(|n| n.host_port(crate::host::vm::SERVICE_PORT)).or_else(|| c.net.as_ref().and_then(|n| n.forwards.first().map(|f| f.host)));
    if let Some(n) = &c.net {
        print!("{}", n.describe());
    }
    let mut timed_out = false;
    let mut load_problem = None;
    let mut exited = false;
    if let Some(cmd) = &c.load_cmd {
        // Wait for the guest to say it is ready (if asked to), then load it from the host.
        if let Some(ready) = &c.ready {
            match s.wait_for(&|l| l.contains(ready.as_str()), deadline) {
                Ok(_) => {}
                Err(WaitEnd::TimedOut) => timed_out = true,
                Err(WaitEnd::Exited(_)) => exited = true,
            }
        }
        if !timed_out && !exited {
            let cmd = cmd.replace("{port}", &port.map(|p| p.to_string()).unwrap_or_default());
            println!("load: sh -c {cmd:?}");
            let mut load = Command::new("sh");
            load.arg("-c").arg(&cmd);
            if let Some(p) = port {
                load.env("PORT", p.to_string());
            }
            let mut lc = load.spawn().map_err(|e| format!("--load-cmd: cannot start sh: {e}"))?;
            loop {
                s.poll()?;
                if let Some(st) = lc.try_wait().map_err(|e| e.to_string())? {
                    if !st.success() {
                        load_problem = Some(format!("--load-cmd exited with {:?}", st.code()));
                    }
                    break;
                }
                if Instant::now() >= deadline {
                    let _ = lc.kill();
                    let _ = lc.wait();
                    load_problem = Some(format!("--load-cmd still running after {}s: killed", timeout.as_secs()));
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    let f = if c.load_cmd.is_some() || exited {
        // The load is done (or the guest is gone): stop QEMU now.
        s.terminate(Duration::from_secs(60))
    } else {
        // Until the guest powers off, or the deadline.
        loop {
            if s.poll()?.is_some() {
                break s.terminate(Duration::from_secs(60));
            }
            if Instant::now() >= deadline {
                timed_out = true;
                break s.terminate(Duration::from_secs(60));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    if let Some(p) = load_problem {
        return Err(p);
    }
    Ok(crate::host::qemu::RunOutput { serial: f.serial, stderr: f.stderr, exit_code: f.exit_code, timed_out, elapsed: f.elapsed })
}

pub(crate) fn guest_args(spec: &RunSpec, plugin: Option<String>) -> Result<(Vec<String>, Duration), String> {
    match spec.system {
        System::Linux if spec.custom.is_some() => Err("--cmdline: only with --system ours (a Linux guest takes --workload and --params)".into()),
        System::Linux => {
            // A benchmark of the suite that the workload guest does not have (the `metis_*`
            // rows) runs in `bench-linux` as /init, one worker per vCPU, one repetition, its
            // region marked as in `cargo xtask bench`.
            let suite_only = !LINUX_WORKLOADS.iter().any(|(n, _)| *n == spec.workload)
                && testdefs::bench_catalog::find(spec.workload).is_some_and(|b| !b.hidden && !b.kernel_core);
            let defaults = if suite_only {
                ""
            } else {
                LINUX_WORKLOADS.iter().find(|(n, _)| *n == spec.workload).map(|(_, d)| *d).ok_or_else(|| {
                    let names: Vec<&str> = LINUX_WORKLOADS.iter().map(|(n, _)| *n).collect();
                    format!("unknown workload `{}` for linux (known: {}, or a suite benchmark)", spec.workload, names.join(", "))
                })?
            };
            let kernel = linux::fetch_kernel()?;
            let tcp = spec.workload == "tcpserv";
            let initrd = if tcp {
                crate::guest::linux_net::initramfs(&kernel)?
            } else if suite_only && testdefs::bench_catalog::uses_files(spec.workload) {
                // The file rows: bench-linux with the disk's modules (and the image, below).
                crate::guest::linux_sys::files_initramfs(&crate::guest::linux_sys::build_guest_program()?)?
            } else if suite_only {
                let out = artifact_dir().join("bench-linux-initramfs.cpio");
                linux::build_initramfs(&crate::guest::linux_sys::build_guest_program()?, &out)?;
                out
            } else {
                linux::guest_initramfs()?
            };
            let mut vm = LinuxVm::new(&kernel, &initrd);
            if tcp {
                vm.net = Some(crate::host::vm::NetConfig::service()?);
            }
            vm.smp = spec.smp;
            // One host thread runs all vCPUs round-robin (the plugins' tables are not locked).
            vm.single_thread = true;
            // The exact mode; with several vCPUs the plugin's quantum (plugin_arg) keeps 7.2's
            // round-robin scheduler from starving the APs under icount.
            vm.exact = spec.exact && !tcp;
            // The guest takes the first occurrence of a key: the caller's parameters win.
            vm.append = if suite_only {
                format!("bench={} workers={} reps=1 {}", spec.workload, spec.smp, spec.params)
            } else {
                format!("wl={} threads={} {} {}", spec.workload, spec.smp, spec.params, defaults)
            };
            vm.plugins.extend(plugin);
            vm.timeout = spec.timeout;
            let mut args = vm.qemu_args();
            if suite_only {
                // A file row gets the benchmark image as `cargo xtask bench` attaches it.
                if let Some(disk) = crate::guest::fsimage::disk_for(spec.workload) {
                    args.extend(disk?);
                }
            }
            Ok((args, vm.timeout))
        }
        System::Ours => {
            let kernel = crate::host::env::build_kernel()?;
            // A benchmark of the suite (`cargo xtask bench --list`) runs in `bench-ours`, one
            // worker per vCPU, one repetition; any other name is a `microbench` benchmark,
            // which the kernel runs for `bench=NAME` (one core).
            let cmdline = if let Some(c) = spec.custom {
                c.cmdline.clone()
            } else if spec.workload == "tcpserv" {
                // The guest takes the first occurrence of a key: the caller's parameters win.
                format!("init=tcpserv -- {} mode=dedicated conns=101 warmup=1", spec.params)
            } else if testdefs::bench_catalog::find(spec.workload).is_some_and(|b| !b.hidden) {
                format!("init=bench-ours -- {} reps=1 {}", spec.workload, spec.params)
            } else {
                format!("bench={} {}", spec.workload, spec.params)
            };
            let cfg = crate::host::vm::VmConfig {
                smp: spec.smp,
                medium: Some(crate::host::vm::BootMedium::Kernel(kernel)),
                initrd: Some(crate::host::user::build_initrd()?),
                cmdline: cmdline.trim().to_string(),
                extra: plugin.map(|p| vec!["-plugin".to_string(), p]).unwrap_or_default(),
                net: if let Some(c) = spec.custom {
                    c.net.clone()
                } else if spec.workload == "tcpserv" {
                    Some(crate::host::vm::NetConfig::service()?)
                } else {
                    None
                },
                disk: spec.custom.and_then(|c| c.disk.clone()),
                ..Default::default()
            };
            cfg.validate()?;
            let mut args: Vec<String> =
                cfg.qemu_args().into_iter().map(|a| if a == "tcg,thread=multi" { "tcg,thread=single".to_string() } else { a }).collect();
            args.extend(["-serial", "stdio", "-monitor", "none"].iter().map(|x| x.to_string()));
            if spec.custom.is_none() {
                // A file row of the suite gets the benchmark image (snapshot=on), as in `cargo xtask bench`.
                if let Some(disk) = crate::guest::fsimage::disk_for(spec.workload) {
                    args.extend(disk?);
                }
            }
            if is_exact(spec) {
                args.extend(exact_qemu_args());
            }
            Ok((args, spec.timeout))
        }
    }
}

pub(crate) fn parse_ops(serial: &str) -> Option<u64> {
    if let Some(n) = crate::guest::tcp_accept::measured_conns(serial) {
        return Some(n);
    }
    serial
        .lines()
        .filter(|l| l.starts_with("workload ") || l.starts_with("bench ") || l.starts_with("bench-result "))
        .filter_map(|l| parse_records(l).pop())
        .find_map(|r| r.get("ops").and_then(|v| v.parse().ok()))
}

/// Where `plugin`'s report for `spec` goes, and the `-plugin` argument that writes it there.
pub(crate) fn plugin_arg(built: &Built, spec: &RunSpec, plugin: &str, extra: &[String]) -> Result<(PathBuf, String), String> {
    let runs = artifact_dir().join("runs");
    fs::create_dir_all(&runs).map_err(|e| format!("cannot create {}: {e}", runs.display()))?;
    let out = runs.join(format!("{plugin}-{}-{}-{}.txt", spec.system.name(), spec.workload, spec.smp));
    let _ = fs::remove_file(&out);
    let mut arg = format!("{},out={}", s(built.plugin(plugin)), s(&out));
    // Fine, repeatable vCPU interleaving (exact mode); the host-driven runs get it too: their
    // packets arrive in host time, but the slices stay a few hundred instructions.
    for e in quantum_plugin_args(spec.smp).iter().chain(extra) {
        arg.push(',');
        arg.push_str(e);
    }
    Ok((out, arg))
}

/// Boot the guest with `plugin` (name, extra plugin arguments) and return its parsed report.
pub(crate) fn run_with_plugin(built: &Built, spec: &RunSpec, plugin: &str, extra: &[String]) -> Result<GuestRun, String> {
    let (out, arg) = plugin_arg(built, spec, plugin, extra)?;
    let (args, timeout) = guest_args(spec, Some(arg))?;
    let run = if let Some(c) = spec.custom {
        run_custom(&args, timeout, c)?
    } else if spec.workload == "tcpserv" {
        crate::guest::tcp_accept::run_batch(&args, timeout)?
    } else {
        crate::host::qemu::run_qemu(&args, timeout)?
    };
    // Linux's workload and ours' bench-ours report a failed or unavailable benchmark on a line
    // of their own (the region markers may have run around it).
    if let Some(line) = run.serial.lines().find(|l| l.starts_with("workload-error") || l.starts_with("bench-error")) {
        return Err(format!("{} guest: {line}", spec.system.name()));
    }
    if run.timed_out {
        return Err(format!("{} guest with {plugin} timed out after {}s", spec.system.name(), timeout.as_secs()));
    }
    let text = fs::read_to_string(&out).unwrap_or_default();
    if !text.lines().any(|l| l == "end") {
        let why = run.stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("no message").trim().to_string();
        return Err(format!("{plugin}: no report from the plugin (QEMU exit {:?}: {why})", run.exit_code));
    }
    let report = parse_records(&text);
    let starts = report.first().map(|r| r.u("starts")).unwrap_or(0);
    if starts == 0 && spec.custom.is_some() {
        return Err(format!("{plugin}: the guest command never executed the region marker (port 0x501; tools/qemu-plugins/marker.h)"));
    }
    if starts == 0 {
        return Err(match spec.system {
            System::Linux => format!("{plugin}: workload `{}` never executed the region marker (port 0x501)", spec.workload),
            System::Ours => format!(
                "{plugin}: this system's kernel never executed the region marker (port 0x501) for bench `{}`: it does not implement that benchmark yet",
                spec.workload
            ),
        });
    }
    Ok(GuestRun { ops: parse_ops(&run.serial), serial: run.serial, report, elapsed: run.elapsed })
}

/// The host-driven benchmarks (Corey's TCP service): the audit boots the service
/// with its NIC and loads it from the host while the plugin watches.
pub(crate) const NET_BENCHES: [&str; 2] = ["tcp_accept", "tcp_accept_polling"];

/// `run_with_plugin` for a host-driven benchmark: boot `tcpserv` (ours: Dedicated for
/// `tcp_accept`, Polling for `tcp_accept_polling`; Linux: its SO_REUSEPORT service) under
/// single-threaded TCG with the plugin, open `conns` connections (params, default 100) after
/// one warm-up, and report the measured connections as the operations. The guest marks the
/// measured connections (region markers), so the plugin's counts are theirs. Packet arrival
/// depends on the host, so counts vary between runs more than a closed benchmark's: quote
/// several runs.
pub(crate) fn run_net_with_plugin(built: &Built, spec: &RunSpec, plugin: &str, extra: &[String]) -> Result<GuestRun, String> {
    use crate::guest::tcp_accept::{self, AcceptSpec};
    let (out, arg) = plugin_arg(built, spec, plugin, extra)?;
    let conns = spec.params.split_whitespace().find_map(|w| w.strip_prefix("conns=")).map(|v| v.parse::<u64>().map_err(|_| format!("conns={v}: not a number"))).transpose()?.unwrap_or(100);
    let acc = AcceptSpec { conns, rounds: 1, warmup: 1, ready_timeout: spec.timeout, ..AcceptSpec::default() };
    let net = crate::host::vm::NetConfig::service()?;
    let port = net.host_port(crate::host::vm::SERVICE_PORT).ok_or("no forward to the service port")?;
    let mut guest_words = format!("conns={} warmup={}", acc.guest_conns(), acc.warmup);
    // Ours: `idle=poll` (Corey's pure polling) or `idle=sleep` (the default) passes through.
    if let Some(w) = spec.params.split_whitespace().find(|w| w.starts_with("idle=")) {
        if spec.system == System::Ours {
            guest_words.push(' ');
            guest_words.push_str(w);
        }
    }
    let mut cfg = match spec.system {
        System::Ours => {
            let mode = if spec.workload == "tcp_accept_polling" { "polling" } else { "dedicated" };
            crate::host::vm::VmConfig {
                medium: Some(crate::host::vm::BootMedium::Kernel(crate::host::env::build_kernel()?)),
                initrd: Some(crate::host::user::build_initrd()?),
                cmdline: format!("init=tcpserv -- mode={mode} {guest_words}"),
                ..Default::default()
            }
        }
        System::Linux => {
            if spec.workload != "tcp_accept" {
                return Err(format!("{}: Linux has one configuration, `tcp_accept`", spec.workload));
            }
            let k = linux::fetch_kernel()?;
            let initrd = crate::guest::linux_net::initramfs(&k)?;
            let kernel = crate::guest::linux_sys::guest_kernel()?;
            let cmdline = format!("console=ttyS0 quiet nokaslr panic=-1 tsc=reliable wl=tcpserv threads={} {guest_words}", spec.smp);
            let extra = vec!["-kernel".into(), s(&kernel), "-initrd".into(), s(&initrd), "-append".into(), cmdline];
            crate::host::vm::VmConfig { extra, ..Default::default() }
        }
    };
    cfg.smp = spec.smp;
    cfg.net = Some(net);
    cfg.extra.extend(["-plugin".to_string(), arg]);
    let mut args: Vec<String> = cfg.qemu_args().into_iter().map(|a| if a == "tcg,thread=multi" { "tcg,thread=single".to_string() } else { a }).collect();
    args.extend(["-serial", "stdio", "-monitor", "none"].iter().map(|x| x.to_string()));
    let o = tcp_accept::run(&args, port, &acc, false)?;
    if let Some(p) = &o.problem {
        return Err(format!("{} {}: {p}", spec.system.name(), spec.workload));
    }
    let good: u64 = o.rounds.iter().map(|r| r.ok).sum();
    let text = fs::read_to_string(&out).unwrap_or_default();
    if !text.lines().any(|l| l == "end") {
        return Err(format!("{plugin}: no report from the plugin (QEMU exit {:?})", o.finished.exit_code));
    }
    let report = parse_records(&text);
    if report.first().map(|r| r.u("starts")).unwrap_or(0) == 0 {
        return Err(format!("{plugin}: the guest never executed the region marker for {}", spec.workload));
    }
    Ok(GuestRun { ops: Some(good), serial: o.finished.serial, report, elapsed: o.finished.elapsed })
}

pub(crate) fn symbols_for(system: System) -> Result<Symbols, String> {
    match system {
        System::Linux => linux_symbols(),
        System::Ours => {
            Symbols::from_elf_file(&crate::host::env::build_kernel()?)
        }
    }
}

/// A sharing audit of one workload, summarised for other tools (the tcp_accept benchmark's
/// `--audit on`): what `plugin audit` prints, as numbers.
#[derive(Debug, Clone)]
pub struct SharingSummary {
    pub ops: u64,
    /// Line transfers between vCPUs in the region, kernel and user lines.
    pub transfers_kernel: u64,
    pub transfers_user: u64,
    /// Lines written by one vCPU and touched by another, kernel and user.
    pub shared_lines_kernel: u64,
    pub shared_lines_user: u64,
    /// Transfers by the class `classify` gives the kernel code that first wrote each line;
    /// user lines (no kernel symbol to name them) under `user`.
    pub by_class: BTreeMap<String, u64>,
}

pub fn sharing_summary(system: &str, workload: &str, smp: u32, params: &str, timeout: Duration, classify: &dyn Fn(&str) -> &'static str) -> Result<SharingSummary, String> {
    let system = System::parse(system)?;
    let built = build()?;
    let spec = RunSpec { system, workload, smp, params, timeout, exact: true, custom: None };
    let syms = symbols_for(system)?;
    // User lines too: this system's packet rings between cores live in shared user segments.
    let run = run_with_plugin(&built, &spec, "sharing", &[])?;
    let head = run.report.first().cloned().ok_or("sharing: empty report")?;
    let mut by_class: BTreeMap<String, u64> = BTreeMap::new();
    for r in run.report.iter().filter(|r| r.kind == "line") {
        let class = if r.get("mode") == Some("u") { "user" } else { classify(&syms.name(r.u("pc")).unwrap_or_default()) };
        *by_class.entry(class.to_string()).or_default() += r.u("transfers");
    }
    Ok(SharingSummary {
        ops: run.ops.filter(|&n| n > 0).ok_or("sharing: the guest reported no operations")?,
        transfers_kernel: head.u("transfers_kernel"),
        transfers_user: head.u("transfers_user"),
        shared_lines_kernel: head.u("shared_kernel"),
        shared_lines_user: head.u("shared_user"),
        by_class,
    })
}

/// One plugin run for another tool (`cargo xtask model`): `plugin` with its `extra` arguments
/// on `workload` (a suite benchmark, a Linux workload, or a host-driven network benchmark) in
/// the exact mode where the workload allows it. Returns the parsed report and the operations
/// the guest reported.
pub fn run_report(system: &str, workload: &str, smp: u32, params: &str, timeout: Duration, plugin: &str, extra: &[String]) -> Result<(Vec<crate::guest::plugin::Record>, Option<u64>), String> {
    let built = build()?;
    let spec = RunSpec { system: System::parse(system)?, workload, smp, params, timeout, exact: true, custom: None };
    let run = if NET_BENCHES.contains(&workload) { run_net_with_plugin(&built, &spec, plugin, extra)? } else { run_with_plugin(&built, &spec, plugin, extra)? };
    Ok((run.report, run.ops))
}
