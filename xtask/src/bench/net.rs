//! The host-driven benchmarks (`BenchSpec::host_driven`): Corey §8.2's TCP accept
//! service. One boot per cell, as for the rest of the matrix, but the guest program is the
//! service and the host measures: the guest boots with the NIC (`--net`'s arguments, one
//! forward of a free 127.0.0.1 port to guest port 80), the host waits for `tcpserv: ready`,
//! runs `warmup` untimed connections and then `reps` rounds of `conns` connections
//! (`concurrency` at a time) with the load generator, waits for `tcpserv: done` (the guest
//! stops after all of them) and makes the record from the fastest round
//! (xtask/src/net/tcp_accept.rs does the boot).
//!
//! The record: `ops` = the fastest round's good connections, `ns` = its host wall time (the
//! client's clock: under TCG without icount the guest's clock follows the host's), `workers`
//! = the guest's service cores (its `service_cores=` word, else the vCPUs),
//! `per_core_throughput` = connections/s per service core, `calib_*` from the guest's
//! `tcpserv: done` words (the share-nothing loop run after the connections in the same
//! boot), instructions from the insncount plugin over the measured rounds (the guest marks
//! them) divided by `reps`, and `net`: total connections/s, failures by kind, latency
//! percentiles and every word the guest printed.
//!
//! Ours runs `init=tcpserv -- mode=dedicated|polling conns=N warmup=W`. Until the guest side
//! exists (the program is not in the boot image, or never says `tcpserv: ready` and never
//! mentions tcpserv), its cells are `unavailable` with the reason, never a number.

use std::fs;
use std::path::Path;
use std::time::Duration;

use testdefs::bench_catalog::BenchSpec;
use crate::guest::boot::{add_instructions, Common};
use crate::guest::record::{NetStats, Record, Status};
use crate::guest::tcp_accept::{self, AcceptSpec, Outcome};
use crate::host::vm::{BootMedium, VmConfig};

/// What to boot for one cell.
pub enum Boot<'a> {
    /// Debian's kernel (the PVH vmlinux) with the measurement guest's initramfs that holds
    /// the NIC's modules.
    Linux { kernel: &'a Path, initrd: &'a Path, tuned: bool },
    /// This system's kernel and program archive.
    Ours { kernel: &'a Path, initrd: &'a Path },
}

/// Ours' configuration for a benchmark: the row name says it.
pub fn ours_mode(spec: &BenchSpec) -> &'static str {
    if spec.name.ends_with("_polling") {
        "polling"
    } else {
        "dedicated"
    }
}

/// Why a system cannot run a host-driven benchmark at `cores` vCPUs (then it is not booted).
pub fn unsupported(linux: bool, spec: &BenchSpec, cores: u32) -> Option<&'static str> {
    if linux {
        return spec.name.ends_with("_polling").then_some("Linux has one configuration (a SO_REUSEPORT listener per core): its row is tcp_accept");
    }
    // Both of Corey's configurations give the NIC a kernel core besides the service cores.
    (cores < 2).then_some("needs 2 vCPUs or more: a kernel core for the NIC and at least one service core")
}

fn param(params: &[(String, u64)], k: &str, default: u64) -> u64 {
    params.iter().find(|(kk, _)| kk == k).map(|(_, v)| *v).unwrap_or(default)
}

/// The load for one cell from its parameters; every wait is bounded by `timeout`.
pub fn accept_spec(params: &[(String, u64)], timeout: Duration) -> AcceptSpec {
    AcceptSpec {
        conns: param(params, "conns", 300).max(1),
        rounds: param(params, "reps", 1).max(1),
        warmup: 1,
        concurrency: param(params, "concurrency", 2).clamp(1, crate::host::tcpload::MAX_CONCURRENCY as u64) as usize,
        load_time: timeout,
        conn_timeout: Duration::from_secs(10),
        ready_timeout: timeout,
        done_timeout: Duration::from_secs(30),
    }
}

/// `--audit on`: the sharing audit (kernel and user lines) of the same service in a boot of its own
/// (single-threaded TCG, 100 connections one at a time after 1 warm-up), per connection, into
/// `net.audit` (split by `crate::guest::tcp_accept::audit_class`); a failure is a note, not a failed record.
/// Not at 1 vCPU (nothing can cross).
pub fn add_audit(rec: &mut Record, spec: &BenchSpec, cores: u32, timeout: Duration) {
    let Some(net) = rec.net.as_mut() else { return };
    if cores < 2 || rec.status != Status::Ok {
        return;
    }
    if rec.system == "linux-tuned" {
        // The audit boots Linux through `plugin audit`, which has one Linux: as shipped.
        net.audit_note = Some("no sharing audit of the tuned baseline (plugin audit boots Linux as shipped)".into());
        return;
    }
    let mode = if rec.system == "ours" { format!("mode={} ", ours_mode(spec)) } else { String::new() };
    let params = format!("{mode}conns=101 warmup=1");
    match crate::guest::measure::sharing_summary(&rec.system, "tcpserv", cores, &params, timeout, &crate::guest::tcp_accept::audit_class) {
        Ok(s) => {
            let per = |x: u64| (x as f64 / s.ops as f64 * 100.0).round() / 100.0;
            net.audit.insert("transfers".into(), per(s.transfers_kernel + s.transfers_user));
            for class in ["driver", "stack", "ipc", "alloc", "other", "user"] {
                net.audit.insert(class.into(), per(s.by_class.get(class).copied().unwrap_or(0)));
            }
            net.audit.insert("shared_lines".into(), (s.shared_lines_kernel + s.shared_lines_user) as f64);
            net.audit.insert("conns".into(), s.ops as f64);
        }
        Err(e) => net.audit_note = Some(format!("sharing audit failed: {e}")),
    }
}

/// Boot one cell and make its record. `tag` is appended to the log files' names.
pub fn run_one(common: &Common, boot: Boot<'_>, spec: &'static BenchSpec, params: &[(String, u64)], cores: u32, timeout: Duration, tag: &str) -> Record {
    let system = common.system;
    let blank = |status, reason: String| Record::without_result(system, spec, params.to_vec(), cores, status, &reason);
    if let Some(why) = unsupported(matches!(boot, Boot::Linux { .. }), spec, cores) {
        return blank(Status::Unavailable, why.into());
    }
    let acc = accept_spec(params, timeout);
    let net = match crate::host::vm::NetConfig::service() {
        Ok(n) => n,
        Err(e) => return blank(Status::Error, e),
    };
    let port = net.host_port(crate::host::vm::SERVICE_PORT).unwrap_or(0);
    let guest_words = format!("conns={} warmup={}", acc.guest_conns(), acc.warmup);
    let mut cfg = match boot {
        Boot::Linux { kernel, initrd, tuned } => {
            let cmdline = format!("{} wl=tcpserv threads={cores} {guest_words}", crate::guest::linux_sys::cmdline(tuned));
            let extra = vec!["-kernel".into(), kernel.display().to_string(), "-initrd".into(), initrd.display().to_string(), "-append".into(), cmdline];
            VmConfig { extra, ..VmConfig::default() }
        }
        Boot::Ours { kernel, initrd } => VmConfig {
            // With the instruction counter, the kernel core marks its passes (work or empty
            // polls) so its instructions split as the service cores' do.
            cmdline: format!("{}init=tcpserv -- mode={} {guest_words}", if common.plugin().is_ok() { "kcmark " } else { "" }, ours_mode(spec)),
            medium: Some(BootMedium::Kernel(kernel.to_path_buf())),
            initrd: Some(initrd.to_path_buf()),
            ..VmConfig::default()
        },
    };
    cfg.smp = cores;
    cfg.mem_mib = common.mem_mib;
    cfg.net = Some(net);
    let stem = format!("{system}-{}-{cores}{tag}", spec.name);
    let plugin_out = common.logs.join(format!("{stem}.insncount.txt"));
    let _ = fs::remove_file(&plugin_out);
    if let Ok(so) = &common.plugin() {
        cfg.extra.extend(["-plugin".into(), format!("{},out={}", so.display(), plugin_out.display())]);
    }
    let mut args = cfg.qemu_args();
    args.extend(["-serial", "stdio", "-monitor", "none"].map(String::from));
    let o = match tcp_accept::run(&args, port, &acc, false) {
        Ok(o) => o,
        Err(e) => return blank(Status::Error, e),
    };
    let _ = fs::write(common.logs.join(format!("{stem}.serial.txt")), &o.finished.serial);
    let mut rec = record(system, spec, params, cores, &o);
    rec.wall_s = o.finished.elapsed.as_secs_f64();
    if rec.status == Status::Ok {
        add_instructions(&mut rec, &common.plugin(), &plugin_out, params);
    }
    rec
}

/// Our kernel's line saying its kernel cores mark their passes for insncount (`kcmark`).
pub const KCMARK_LINE: &str = "kcmark: kernel cores mark each pass";

/// A guest line saying the configuration asked for is not provided (then the cell is
/// `unavailable` with that line): `tcpserv: unavailable <why>`.
pub const UNAVAILABLE: &str = "tcpserv: unavailable";

/// Whether our kernel's serial output says the `tcpserv` program is not there: it could not
/// start it, or no line but the kernel's own `init:` lines mentions it.
fn guest_side_missing(serial: &str) -> bool {
    serial.contains("init: cannot start `tcpserv`") || !serial.lines().any(|l| l.contains("tcpserv") && !l.trim_start().starts_with("init:") && !l.contains("] init:"))
}

/// The record for a finished boot (no instructions yet).
pub fn record(system: &str, spec: &BenchSpec, params: &[(String, u64)], cores: u32, o: &Outcome) -> Record {
    let mut rec = Record::without_result(system, spec, params.to_vec(), cores, Status::Ok, "");
    rec.reason = None;
    let words = o.guest_words();
    let word = |k: &str| words.iter().find(|(kk, _)| kk == k).and_then(|(_, v)| v.parse::<u64>().ok());
    if o.ready.is_some() || !o.rounds.is_empty() {
        let mut stats = NetStats { guest: words.iter().cloned().collect(), ..NetStats::default() };
        for r in &o.rounds {
            stats.attempted += r.attempted;
            stats.slow_connects += r.slow_connects;
            for (k, v) in r.failures.words().split_whitespace().filter_map(|w| w.split_once('=')) {
                *stats.failures.entry(k.to_string()).or_insert(0) += v.parse::<u64>().unwrap_or(0);
            }
        }
        if let Some(best) = o.best() {
            stats.conns_per_s = (best.conns_per_s() * 100.0).round() / 100.0;
            for (k, p) in [("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("max", 100.0)] {
                if let Some(d) = best.percentile(p) {
                    stats.latency_us.insert(k.into(), d.as_micros() as u64);
                }
            }
        }
        if o.finished.serial.contains(KCMARK_LINE) {
            stats.guest.insert(crate::bench::report::KCMARK_WORD.into(), "on".into());
        }
        rec.net = Some(stats);
    }
    let unavailable_line = o.finished.serial.lines().find(|l| l.starts_with(UNAVAILABLE)).map(str::trim);
    let why_not = match (&o.ready, &o.problem) {
        // Ours without the guest side: the kernel could not start the program, or nothing but
        // the kernel's init lines ever spoke of it.
        (None, Some(p)) if system == "ours" && guest_side_missing(&o.finished.serial) => {
            Some((Status::Unavailable, format!("ours: the guest side of the network is not there yet (no `{}`): {p}", tcp_accept::READY)))
        }
        // The guest says itself that it cannot run this configuration.
        (None, Some(_)) if unavailable_line.is_some() => Some((Status::Unavailable, format!("{system}: {}", unavailable_line.unwrap_or("")))),
        (_, Some(p)) => Some((Status::Error, p.clone())),
        (None, None) => Some((Status::Error, "no readiness line".to_string())),
        (Some(_), None) => None,
    };
    if let Some((status, why)) = why_not {
        rec.status = status;
        rec.reason = Some(why);
        return rec;
    }
    // `ok` only if the guest program exited 0 and the guest powered off normally.
    let f = &o.finished;
    let ended = if system == "ours" { crate::guest::ours::program_ended_cleanly("tcpserv", &f.serial, f.exit_code) } else { crate::guest::linux_sys::ended_cleanly(&f.serial, f.exit_code) };
    if let Err(why) = ended {
        rec.status = Status::Error;
        rec.reason = Some(why);
        return rec;
    }
    let Some(best) = o.best() else {
        rec.status = Status::Error;
        rec.reason = Some("no measured round".into());
        return rec;
    };
    rec.ops = Some(best.ok);
    rec.ns = Some(best.elapsed.as_nanos() as u64);
    rec.workers = Some(word("service_cores").filter(|&n| n > 0).unwrap_or(cores as u64));
    rec.calib_ops = word("calib_ops");
    rec.calib_ns = word("calib_ns");
    rec
}

#[cfg(test)]
mod tests {
    use testdefs::bench_catalog as catalog;
    use super::*;
    use crate::host::tcpload::{self as load, LoadSpec};
    use crate::host::qemu::Finished;

    fn finished(serial: &str) -> Finished {
        Finished { serial: serial.into(), stderr: String::new(), exit_code: Some(0), killed: false, elapsed: Duration::from_secs(3) }
    }

    #[test]
    fn a_served_run_is_a_record_per_service_core() {
        // A real round against a local server, so the record carries real numbers.
        let port = load::tests::server(20, load::tests::Serve::Good);
        let round = load::run(&LoadSpec { port, conns: 20, concurrency: 2, max_time: Duration::from_secs(10), timeout: Duration::from_secs(2), abort_every: 0 }).unwrap();
        let spec = catalog::find("tcp_accept").unwrap();
        let o = Outcome {
            ready: Some("tcpserv: ready cores=2 port=80".into()),
            rounds: vec![round],
            done: Some("tcpserv: done conns=21 core0=11 core1=10 service_cores=1 calib_ops=8000000 calib_ns=40000000".into()),
            finished: Finished {
                exit_code: Some(crate::host::vm::QEMU_EXIT_SUCCESS),
                ..finished("tcpserv: ready\ntcpserv: done\n[0] init: `tcpserv` exited with code 0\n")
            },
            problem: None,
        };
        let p = vec![("conns".to_string(), 20), ("concurrency".to_string(), 2), ("reps".to_string(), 1)];
        let r = record("ours", spec, &p, 2, &o);
        assert_eq!(r.status, Status::Ok, "{:?}", r.reason);
        assert_eq!((r.ops, r.workers), (Some(20), Some(1)), "workers = the guest's service cores");
        let n = r.net.as_ref().unwrap();
        assert_eq!(n.attempted, 20);
        assert_eq!(n.failures.values().sum::<u64>(), 0);
        assert!(n.latency_us["p50"] <= n.latency_us["max"]);
        assert_eq!(n.guest["core1"], "10");
        assert!(r.per_core_throughput().unwrap() > 0.0 && r.calibrated_throughput().is_some());
        let mut r = r;
        r.instructions_note = Some("insncount plugin off in this test".into());
        let n = r.net.as_mut().unwrap();
        n.audit.insert("transfers".into(), 322.43);
        n.audit.insert("driver".into(), 41.5);
        n.audit_note = Some("a note".into());
        // The record survives results.json.
        let back = Record::from_json(&r.to_json()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn ours_without_a_guest_side_is_unavailable_and_failures_are_errors() {
        let spec = catalog::find("tcp_accept").unwrap();
        let p = vec![("conns".to_string(), 5)];
        let none = Outcome {
            ready: None,
            rounds: Vec::new(),
            done: None,
            finished: finished("init: cannot start `tcpserv`: no such program\n"),
            problem: Some("the guest stopped without printing `tcpserv: ready`".into()),
        };
        let r = record("ours", spec, &p, 2, &none);
        assert_eq!(r.status, Status::Unavailable);
        assert!(r.reason.as_deref().unwrap().contains("not there yet"));
        assert_eq!(r.per_core_throughput(), None);
        // Linux failing to come up is an error, and so is ours once tcpserv speaks.
        assert_eq!(record("linux", spec, &p, 2, &none).status, Status::Error);
        let started = Outcome { finished: finished("[0] init: starting `tcpserv` on core 0\n[0] init: `tcpserv` exited with code 0\n"), ..none };
        assert_eq!(record("ours", spec, &p, 2, &started).status, Status::Unavailable, "only init lines mention it");
        let broken = Outcome { finished: finished("tcpserv-error: bind: Address in use\n"), ..started };
        assert_eq!(record("ours", spec, &p, 2, &broken).status, Status::Error);
        let unprovided = Outcome { finished: finished("tcpserv: unavailable mode=polling is not written yet\n"), ..broken };
        let r = record("ours", spec, &p, 2, &unprovided);
        assert_eq!(r.status, Status::Unavailable);
        assert!(r.reason.unwrap().contains("mode=polling is not written yet"));
        // Failed connections: an error, failures kept in `net`, no throughput.
        let port = load::tests::server(3, load::tests::Serve::Wrong);
        let round = load::run(&LoadSpec { port, conns: 3, concurrency: 1, max_time: Duration::from_secs(10), timeout: Duration::from_secs(2), abort_every: 0 }).unwrap();
        let bad = Outcome {
            ready: Some("tcpserv: ready".into()),
            rounds: vec![round],
            done: None,
            finished: finished("tcpserv: ready\n"),
            problem: Some("load: 3 of 3 connections failed".into()),
        };
        let r = record("linux", spec, &p, 2, &bad);
        assert_eq!(r.status, Status::Error);
        assert_eq!(r.net.as_ref().unwrap().failures["wrong_bytes"], 3);
        assert!(crate::guest::record::check_schema(&serde_json::from_str(&r.to_json()).unwrap()).is_ok());
    }

    #[test]
    fn where_each_system_can_run() {
        let acc = catalog::find("tcp_accept").unwrap();
        let pol = catalog::find("tcp_accept_polling").unwrap();
        assert!(unsupported(true, acc, 1).is_none());
        assert!(unsupported(true, pol, 2).is_some());
        assert!(unsupported(false, acc, 1).is_some());
        assert!(unsupported(false, pol, 2).is_none());
        assert_eq!((ours_mode(acc), ours_mode(pol)), ("dedicated", "polling"));
        let a = accept_spec(&[("conns".into(), 7), ("reps".into(), 3)], Duration::from_secs(60));
        assert_eq!(a.guest_conns(), 1 + 3 * 7);
    }
}
