//! Corey §8.2's TCP accept benchmark, driven from the host: boot a guest whose service listens
//! on port 80 (ours: `init=tcpserv`; Linux: `wl=tcpserv`), wait for `tcpserv: ready` on its
//! serial line, put a bounded load on the forwarded port, wait for `tcpserv: done` (the guest
//! stops after `conns` connections) or kill it at a deadline, and return what happened. The
//! bench matrix turns an [`Outcome`] into a record (xtask/src/bench/net.rs).

use std::time::{Duration, Instant};

use crate::host::tcpload::{LoadReport, LoadSpec};
use crate::host::qemu::{Finished, Session, WaitEnd};

/// The guest's readiness line (prefix; ` key=value` words may follow).
pub const READY: &str = "tcpserv: ready";
/// The guest's last line with conns=N (prefix; ` key=value` words follow).
pub const DONE: &str = "tcpserv: done";

/// How much load and how long to wait.
#[derive(Debug, Clone)]
pub struct AcceptSpec {
    /// Connections per measured round.
    pub conns: u64,
    /// Measured rounds (the fastest is the result).
    pub rounds: u64,
    /// Untimed connections first, one at a time (the first connection through QEMU's
    /// user-mode network waits for ARP and can take a second).
    pub warmup: u64,
    pub concurrency: usize,
    /// The load generator's own time bound.
    pub load_time: Duration,
    /// Per-connection timeout.
    pub conn_timeout: Duration,
    /// From QEMU's start to `tcpserv: ready`.
    pub ready_timeout: Duration,
    /// From the end of the load to `tcpserv: done`, and then to QEMU's exit.
    pub done_timeout: Duration,
}

impl AcceptSpec {
    /// What the guest's `conns=` must be: every connection the host will open.
    pub fn guest_conns(&self) -> u64 {
        self.warmup + self.rounds * self.conns
    }
}

impl Default for AcceptSpec {
    fn default() -> Self {
        AcceptSpec {
            conns: 500,
            rounds: 1,
            warmup: 1,
            concurrency: crate::host::tcpload::DEFAULT_CONCURRENCY,
            load_time: Duration::from_secs(60),
            conn_timeout: Duration::from_secs(10),
            ready_timeout: Duration::from_secs(120),
            done_timeout: Duration::from_secs(20),
        }
    }
}

/// What one boot produced.
#[derive(Debug)]
pub struct Outcome {
    /// The `tcpserv: ready` line, if it came.
    pub ready: Option<String>,
    /// One report per measured round (the warm-up is not among them).
    pub rounds: Vec<LoadReport>,
    /// The `tcpserv: done` line, if it came.
    pub done: Option<String>,
    pub finished: Finished,
    /// Why the run is not a clean measurement, if it is not.
    pub problem: Option<String>,
}

impl Outcome {
    /// The guest's `key=value` words from its ready and done lines (done wins on a clash).
    pub fn guest_words(&self) -> Vec<(String, String)> {
        let mut w: Vec<(String, String)> = Vec::new();
        for line in [&self.ready, &self.done].into_iter().flatten() {
            for (k, v) in words(line) {
                match w.iter_mut().find(|(kk, _)| *kk == k) {
                    Some(e) => e.1 = v,
                    None => w.push((k, v)),
                }
            }
        }
        w
    }
}

/// ` key=value` words of a line.
pub fn words(line: &str) -> Vec<(String, String)> {
    line.split_whitespace().filter_map(|w| w.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn last_line(serial: &str) -> String {
    serial.lines().rev().find(|l| !l.trim().is_empty()).map(|l| l.trim().to_string()).unwrap_or_else(|| "(no output)".into())
}

/// A guest line that means the service will not come up.
fn guest_failed(line: &str) -> bool {
    line.starts_with("tcpserv-error") || line.starts_with("tcpserv: unavailable") || line.starts_with("workload-error") || line.contains("KERNEL PANIC")
}

impl Outcome {
    /// The fastest measured round.
    pub fn best(&self) -> Option<&LoadReport> {
        self.rounds.iter().max_by(|a, b| a.conns_per_s().total_cmp(&b.conns_per_s()))
    }
}

/// Boot `qemu_args` (serial on stdio, with a forward of 127.0.0.1:`port` to the guest's port
/// 80), load it once `tcpserv: ready` appears, and collect the result. Every step is bounded:
/// at most ready_timeout + load_time + conn_timeout + 2 × done_timeout.
pub fn run(qemu_args: &[String], port: u16, spec: &AcceptSpec, echo: bool) -> Result<Outcome, String> {
    let mut s = Session::start(qemu_args, echo)?;
    let ready = s.wait_for(&|l| l.starts_with(READY) || guest_failed(l), s.start + spec.ready_timeout);
    let (ready, mut problem) = match ready {
        Ok(l) if l.starts_with(READY) => (Some(l), None),
        Ok(l) => (None, Some(format!("the guest failed before `{READY}`: {l}"))),
        Err(WaitEnd::Exited(code)) => (None, Some(format!("the guest stopped (QEMU status {code:?}) without printing `{READY}`; last line: {}", last_line(&s.serial)))),
        Err(WaitEnd::TimedOut) => (None, Some(format!("no `{READY}` within {} s; last line: {}", spec.ready_timeout.as_secs(), last_line(&s.serial)))),
    };
    let mut rounds = Vec::new();
    let mut done = None;
    if ready.is_some() {
        let warm = LoadSpec { port, conns: spec.warmup.max(1), concurrency: 1, max_time: spec.load_time, timeout: spec.conn_timeout, abort_every: 0 };
        let mut plan = Vec::new();
        if spec.warmup > 0 {
            plan.push(("warm-up", warm.clone()));
        }
        for _ in 0..spec.rounds {
            plan.push(("load", LoadSpec { conns: spec.conns, concurrency: spec.concurrency, ..warm.clone() }));
        }
        for (what, ls) in plan {
            let l = crate::host::tcpload::run(&ls)?;
            if problem.is_none() {
                if l.failures.total() > 0 || l.ok == 0 {
                    problem = Some(format!(
                        "{what}: {} of {} connections failed ({}){}",
                        l.failures.total(),
                        l.attempted,
                        l.failures.words(),
                        l.first_failure.as_deref().map(|f| format!("; first: {f}")).unwrap_or_default()
                    ));
                } else if l.stopped_by_time {
                    problem = Some(format!("{what}: the {} s bound stopped it after {} of {} connections", spec.load_time.as_secs(), l.attempted, ls.conns));
                }
            }
            if what == "load" {
                rounds.push(l);
            }
            if problem.is_some() {
                break;
            }
        }
        match s.wait_for(&|l| l.starts_with(DONE) || guest_failed(l), Instant::now() + spec.done_timeout) {
            Ok(l) if l.starts_with(DONE) => done = Some(l),
            Ok(l) => problem = problem.or(Some(format!("the guest failed: {l}"))),
            Err(WaitEnd::Exited(code)) => problem = problem.or(Some(format!("the guest stopped (QEMU status {code:?}) without `{DONE}`"))),
            Err(WaitEnd::TimedOut) => problem = problem.or(Some(format!("no `{DONE}` within {} s of the load's end", spec.done_timeout.as_secs()))),
        }
    }
    let finished = s.finish(Instant::now() + spec.done_timeout);
    // A guest that never came up may have been refused by QEMU itself (a taken port, say).
    if ready.is_none() {
        if let (Some(p), Some(q)) = (problem.as_mut(), finished.stderr.lines().find(|l| !l.trim().is_empty())) {
            p.push_str(&format!("; QEMU: {}", q.trim()));
        }
    }
    Ok(Outcome { ready, rounds, done, finished, problem })
}

/// The connections the guest served after its warm-up, from its `tcpserv: done` line
/// (`conns=` minus `warmup=`): what a plugin run divides by.
pub fn measured_conns(serial: &str) -> Option<u64> {
    let line = serial.lines().find(|l| l.starts_with(DONE))?;
    let w = words(line);
    let get = |k: &str| w.iter().find(|(kk, _)| kk == k).and_then(|(_, v)| v.parse::<u64>().ok());
    Some(get("conns")?.saturating_sub(get("warmup").unwrap_or(0)))
}

/// For the measurement plugins (`cargo xtask plugin ... --bench tcpserv`): boot `qemu_args`
/// (with a forward to guest port 80 among them), and once the guest is ready open as many
/// connections as its `conns=` asks for, one at a time (the plugins run single-threaded TCG,
/// slowly), then wait for it to power off. The output as `run_qemu` gives it.
pub fn run_batch(qemu_args: &[String], timeout: Duration) -> Result<crate::host::qemu::RunOutput, String> {
    let port = qemu_args
        .iter()
        .find_map(|a| a.split(',').find_map(|p| p.strip_prefix("hostfwd=tcp:127.0.0.1:")).and_then(|p| p.strip_suffix(&format!("-:{}", crate::host::vm::SERVICE_PORT))))
        .and_then(|p| p.parse::<u16>().ok())
        .ok_or("tcpserv: no forward to guest port 80 in the QEMU arguments")?;
    let want = |key: &str| -> Option<u64> {
        let line = qemu_args.iter().find(|a| a.contains(&format!(" {key}=")) || a.starts_with(&format!("{key}=")))?;
        line.split_whitespace().find_map(|w| w.strip_prefix(&format!("{key}="))).and_then(|v| v.parse().ok())
    };
    let (conns, warmup) = (want("conns").unwrap_or(101), want("warmup").unwrap_or(0));
    let spec = AcceptSpec {
        conns: conns.saturating_sub(warmup).max(1),
        rounds: 1,
        warmup,
        concurrency: 1,
        load_time: timeout,
        conn_timeout: Duration::from_secs(120),
        ready_timeout: timeout,
        done_timeout: Duration::from_secs(120),
    };
    let start = Instant::now();
    let o = run(qemu_args, port, &spec, false)?;
    let mut serial = o.finished.serial;
    if let Some(p) = &o.problem {
        // The caller looks for this prefix to report a failed guest.
        serial.push_str(&format!("workload-error: tcpserv: {p}\n"));
    }
    Ok(crate::host::qemu::RunOutput { serial, stderr: o.finished.stderr, exit_code: o.finished.exit_code, timed_out: o.finished.killed && o.done.is_none(), elapsed: start.elapsed() })
}

/// Which part of the network path a kernel function belongs to, for the sharing audit's
/// split of cross-core lines per connection (driver, stack, IPC): by the name of the
/// code that first wrote the line (the only code the sharing plugin records per line).
/// Linux's names and this system's (`dev::`, `net::`, rings and mailboxes) are both listed.
/// `alloc`: lines first written by an allocator or by memset/memcpy (fresh objects, e.g.
/// sockets and packet buffers zeroed on allocation, whose owner the first writer does not
/// name); anything else (scheduler, locks, timers) is `other`. A heuristic.
pub fn audit_class(code: &str) -> &'static str {
    let name = code.split('+').next().unwrap_or("").to_ascii_lowercase();
    if name.contains("::") {
        // This system's Rust paths.
        let any = |pats: &[&str]| pats.iter().any(|p| name.contains(p));
        return if any(&["::dev::", "virtio", "virtqueue"]) {
            "driver"
        } else if any(&["alloc", "slab", "frame", "memset", "memcpy", "page_cache"]) {
            "alloc"
        } else if any(&["::net::", "smoltcp"]) {
            "stack"
        } else if any(&["::smp::", "::roles::", "mailbox", "active_msg", "::ring", "ring::", "forward", "::ipi", "ipi::"]) {
            "ipc"
        } else {
            "other"
        };
    }
    // Linux's C names, by prefix.
    let starts = |pats: &[&str]| pats.iter().any(|p| name.trim_start_matches('_').starts_with(p));
    if starts(&["memset", "memcpy", "memmove", "clear_page", "copy_page", "get_page_from_freelist", "prep_new_page", "kmem_cache", "kmalloc", "slab", "alloc_pages", "rmqueue"]) {
        "alloc"
    } else if starts(&["virtio", "virtnet", "vring", "vp_", "napi", "netif_", "net_rx", "dev_", "sch_", "qdisc", "fq_codel", "start_xmit", "validate_xmit"]) {
        "driver"
    } else if starts(&["tcp", "inet", "ip_", "ipv4", "sk_", "sock", "skb", "kfree_skb", "reqsk", "dst_", "neigh", "arp", "lock_sock", "release_sock", "csk_"]) {
        "stack"
    } else if starts(&["llist", "smp_call", "send_call_function", "ttwu", "try_to_wake_up", "wake_up", "autoremove_wake"]) {
        "ipc"
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_classes() {
        assert_eq!(audit_class("napi_complete_done+0xba"), "driver");
        assert_eq!(audit_class("__dev_queue_xmit+0xb0a"), "driver");
        assert_eq!(audit_class("inet_reqsk_alloc+0xf2"), "stack");
        assert_eq!(audit_class("tcp_v4_rcv+0x10"), "stack");
        assert_eq!(audit_class("llist_add_batch+0x9"), "ipc");
        assert_eq!(audit_class("memset_erms+0x9"), "alloc");
        assert_eq!(audit_class("native_queued_spin_lock_slowpath+0x1"), "other");
        assert_eq!(audit_class("finish_task_switch.isra.0+0xbc"), "other", "not `sk_` inside a word");
        assert_eq!(audit_class("__dev_queue_xmit"), "driver");
        assert_eq!(audit_class("kernel::dev::virtio_net::rx+0x1"), "driver");
        assert_eq!(audit_class("libos::net::poll"), "stack");
        assert_eq!(audit_class("kernel::smp::run_mailbox+0x12"), "ipc");
        assert_eq!(audit_class("kernel::roles::serve_one"), "ipc");
        assert_eq!(audit_class(""), "other");
    }

    #[test]
    fn guest_words_merge_ready_and_done() {
        let o = Outcome {
            ready: Some("tcpserv: ready cores=2 port=80".into()),
            rounds: Vec::new(),
            done: Some("tcpserv: done conns=10 core0=6 core1=4 cores=2".into()),
            finished: Finished { serial: String::new(), stderr: String::new(), exit_code: None, killed: false, elapsed: Duration::ZERO },
            problem: None,
        };
        let w = o.guest_words();
        let get = |k: &str| w.iter().find(|(kk, _)| kk == k).map(|(_, v)| v.as_str());
        assert_eq!((get("cores"), get("port"), get("conns"), get("core1")), (Some("2"), Some("80"), Some("10"), Some("4")));
        assert!(guest_failed("tcpserv-error: bind port 80: Address in use"));
        assert_eq!(measured_conns("x\ntcpserv: done conns=101 warmup=1 core0=101\n"), Some(100));
        assert_eq!(measured_conns("tcpserv: ready\n"), None);
        assert!(!guest_failed("tcpserv: ready"));
    }
}
