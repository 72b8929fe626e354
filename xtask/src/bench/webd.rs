//! The `webd_filesum_MODE_SIZE` rows (Corey §8.4 figure 12): webd with filesum,
//! driven from the host like `tcp_accept` (xtask/src/bench/net.rs). One row per mode
//! (random, locality, same-core) and file size (64 KiB, 512 KiB, 1 MiB); `files` files of
//! that size (default 8, Corey's), each request `/filesum/NAME` for the files in turn, every
//! answer checked against the host's sum.
//!
//! Per cell: one boot (webd_run::prepare/start), `warmup` untimed requests on one connection
//! (every file summed once), then `reps` rounds of `requests` requests on `conns` keep-alive
//! connections (opened before the clock starts); the guest is told to expect exactly those
//! and stops by itself (`webd: done`, with the in-boot calibration), and ours' leak check
//! must pass. The record: `ops`/`ns` = the fastest round's good requests and its host wall
//! time, `workers` = front-end cores (ours: core 0, driving the card itself; Linux: every
//! thread, one per vCPU), so `per_core_throughput` is requests/s per front-end core;
//! calibration from the guest's words; `net` holds requests/s, failures by kind, latency and
//! the guest's words (the same object as tcp_accept's, `conns_per_s` being requests/s).
//!
//! Ours at 2 vCPUs is 1 front-end + 1 application core. Linux runs random mode only (a
//! thread per vCPU, each serving and summing); its locality and same-core cells are
//! `unavailable`. At 1 vCPU only random mode runs: ours has no application core then, and its
//! front-end sums each file itself (as Linux's one thread does); the other modes are
//! `unavailable` there without a boot.

use std::fs;
use std::time::Duration;

use testdefs::bench_catalog::BenchSpec;
use crate::guest::boot::{add_instructions, Common};
use crate::guest::record::{NetStats, Record, Status};
use crate::webd::files::FileSpec;
use crate::webd::load::{self, WebLoadReport, WebLoadSpec};
use crate::webd::run::{self as webd_run, Artifacts, Running, Sys, WebdBoot};

/// Whether a catalog entry is one of these rows.
pub fn is_webd(spec: &BenchSpec) -> bool {
    spec.name.starts_with("webd_filesum_")
}

/// The mode and file size a row's name says: `webd_filesum_same_core_512k` → ("same-core", 512 KiB).
pub fn row(spec: &BenchSpec) -> Option<(&'static str, u64)> {
    let rest = spec.name.strip_prefix("webd_filesum_")?;
    let (mode, size) = rest.rsplit_once('_')?;
    let mode = match mode {
        "random" => "random",
        "locality" => "locality",
        "same_core" => "same-core",
        _ => return None,
    };
    Some((mode, crate::webd::files::parse_size(size).ok()?))
}

/// Why a system cannot run a row at `cores` vCPUs (then it is not booted).
pub fn unsupported(linux: bool, spec: &BenchSpec, cores: u32) -> Option<String> {
    let Some((mode, _)) = row(spec) else { return Some(format!("{}: not a webd row", spec.name)) };
    if linux && mode != "random" {
        return Some(format!("Linux runs random mode only: it has no way to keep a file's data in one core's cache (beyond thread affinity) and no protected procedure call ({mode})"));
    }
    if cores < 2 && mode != "random" {
        return Some(format!("{mode} mode needs 2 vCPUs or more: a front-end core and an application core (at 1 vCPU random mode runs, the front-end summing itself)"));
    }
    None
}

fn param(params: &[(String, u64)], k: &str, default: u64) -> u64 {
    params.iter().find(|(kk, _)| kk == k).map(|(_, v)| *v).unwrap_or(default)
}

/// Ours' webd switches a row's `--param`s ask for: `wake=0`, front-ends do not wake sleeping
/// application cores (webd's `--wake off`), to measure what the wake saves; `steal=N` (random
/// mode only: in locality mode a file's data stays with its home core, and same-core mode has
/// no application core), a front-end sums a file itself when the application core has N of
/// its requests unanswered (`steal=0`: never, Corey's configuration).
fn guest_switches(params: &[(String, u64)], mode: &str) -> Vec<String> {
    let mut v = Vec::new();
    if param(params, "wake", 1) == 0 {
        v.extend(["--wake".into(), "off".into()]);
    }
    if mode == "random" {
        if let Some((_, n)) = params.iter().find(|(k, _)| k == "steal") {
            v.extend(["--steal".into(), n.to_string()]);
        }
    }
    v
}

/// Boot one cell and make its record. `tag` is appended to the log files' names.
/// `tuned`: the Linux baseline's kernel command line gets `linux_sys::TUNED_WORDS`.
#[allow(clippy::too_many_arguments)]
pub fn run_one(common: &Common, art: &Artifacts, spec: &'static BenchSpec, params: &[(String, u64)], cores: u32, timeout: Duration, tag: &str, tuned: bool) -> Record {
    let system = common.system;
    let blank = |status, reason: String| Record::without_result(system, spec, params.to_vec(), cores, status, &reason);
    let linux = matches!(art, Artifacts::Linux { .. });
    if let Some(why) = unsupported(linux, spec, cores) {
        return blank(Status::Unavailable, why);
    }
    let Some((mode, size)) = row(spec) else { return blank(Status::Error, "not a webd row".into()) };
    let files = FileSpec { count: param(params, "files", 8).max(1), size };
    if let Err(e) = files.validate() {
        return blank(Status::Error, format!("files: {e}"));
    }
    let (requests, reps, warmup) = (param(params, "requests", 400).max(1), param(params, "reps", 1).max(1), param(params, "warmup", 8));
    let conns = param(params, "conns", 8).clamp(1, load::MAX_CONNS as u64) as usize;
    let stem = format!("{system}-{}-{cores}{tag}", spec.name);
    let plugin_out = common.logs.join(format!("{stem}.insncount.txt"));
    let _ = fs::remove_file(&plugin_out);
    let mut extra = Vec::new();
    if let Ok(so) = &common.plugin() {
        extra.extend(["-plugin".into(), format!("{},out={}", so.display(), plugin_out.display())]);
    }
    let b = WebdBoot {
        system: if linux { Sys::Linux } else { Sys::Ours },
        mode: mode.into(),
        files,
        smp: cores,
        mem_mib: common.mem_mib,
        frontends: None,
        apps: None,
        kc: None,
        requests: Some(requests * reps),
        warmup,
        extra,
        guest_extra: if linux { Vec::new() } else { guest_switches(params, mode) },
    };
    let mut p = match webd_run::prepare(&b, art) {
        Ok(p) => p,
        Err(e) => return blank(Status::Error, e),
    };
    if linux {
        // The baseline's command line as the other rows boot it (tuned or not): the kernel's
        // words before webd-linux's `--`.
        let Some(append) = p.args.iter_mut().skip_while(|a| *a != "-append").nth(1) else { return blank(Status::Error, "webd: the Linux boot has no -append".into()) };
        let Some((_, guest)) = append.split_once(" -- ") else { return blank(Status::Error, format!("webd: unexpected Linux command line `{append}`")) };
        *append = format!("{} -- {guest}", crate::guest::linux_sys::cmdline(tuned));
    }
    let r = match Running::start(&p, timeout, false) {
        Ok(r) => r,
        Err(nr) => {
            let _ = fs::write(common.logs.join(format!("{stem}.serial.txt")), &nr.finished.serial);
            let status = if nr.unavailable { Status::Unavailable } else { Status::Error };
            return blank(status, nr.why);
        }
    };
    let paths: Vec<String> = r.sums.keys().map(|n| format!("/filesum/{n}")).collect();
    let base = WebLoadSpec { port: r.port, conns: 1, requests: warmup.max(1), max_time: timeout, timeout: Duration::from_secs(30), paths, no_keepalive: false, expect: Some(r.sums.clone()), steer: Vec::new(), steer_channels: 1 };
    let mut problem = None;
    let mut rounds: Vec<WebLoadReport> = Vec::new();
    let mut plan = Vec::new();
    if warmup > 0 {
        plan.push(("warm-up", WebLoadSpec { requests: warmup, ..base.clone() }));
    }
    for _ in 0..reps {
        plan.push(("load", WebLoadSpec { requests, conns, ..base.clone() }));
    }
    for (what, ls) in plan {
        match load::run(&ls) {
            Ok(l) => {
                if l.failed() > 0 || l.ok == 0 {
                    problem = Some(format!("{what}: {} of {} requests failed ({}){}", l.failed(), l.attempted, l.failure_words(), l.first_failure.as_deref().map(|f| format!("; first: {f}")).unwrap_or_default()));
                } else if l.stopped_by_time {
                    problem = Some(format!("{what}: the {} s bound stopped it after {} of {} requests", timeout.as_secs(), l.attempted, ls.requests));
                }
                if what == "load" {
                    rounds.push(l);
                }
            }
            Err(e) => problem = Some(e),
        }
        if problem.is_some() {
            break;
        }
    }
    // Exactly what the guest expects was sent when nothing failed: no top-up then.
    let told = if problem.is_some() { requests * reps } else { 0 };
    let o = r.finish(told, Duration::from_secs(60));
    let _ = fs::write(common.logs.join(format!("{stem}.serial.txt")), &o.finished.serial);
    let mut rec = record(system, spec, params, cores, &o, &rounds, problem);
    rec.wall_s = o.finished.elapsed.as_secs_f64();
    if rec.status == Status::Ok {
        add_instructions(&mut rec, &common.plugin(), &plugin_out, params);
    }
    rec
}

/// The record for a finished boot (no instructions yet).
pub fn record(system: &str, spec: &BenchSpec, params: &[(String, u64)], cores: u32, o: &webd_run::WebdOutcome, rounds: &[WebLoadReport], problem: Option<String>) -> Record {
    let mut rec = Record::without_result(system, spec, params.to_vec(), cores, Status::Ok, "");
    rec.reason = None;
    let words = o.guest_words();
    let word = |k: &str| words.iter().find(|(kk, _)| kk == k).map(|(_, v)| v.clone());
    let num = |k: &str| word(k).and_then(|v| v.parse::<u64>().ok());
    let best = rounds.iter().max_by(|a, b| a.requests_per_s().total_cmp(&b.requests_per_s()));
    let mut stats = NetStats { guest: words.iter().cloned().collect(), ..NetStats::default() };
    for r in rounds {
        stats.attempted += r.attempted;
        for (f, n) in &r.failures {
            *stats.failures.entry(f.name().to_string()).or_insert(0) += n;
        }
    }
    if let Some(b) = best {
        stats.conns_per_s = (b.requests_per_s() * 100.0).round() / 100.0;
        for (k, p) in [("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("max", 100.0)] {
            if let Some(d) = b.percentile(p) {
                stats.latency_us.insert(k.into(), d.as_micros() as u64);
            }
        }
    }
    rec.net = Some(stats);
    // Both Linux baselines (`linux`, `linux-tuned`) end as Linux does.
    let sys = if system == "ours" { Sys::Ours } else { Sys::Linux };
    if let Some(why) = problem.or_else(|| o.verdict(sys).err()) {
        rec.status = Status::Error;
        rec.reason = Some(why);
        return rec;
    }
    let Some(best) = best else {
        rec.status = Status::Error;
        rec.reason = Some("no measured round".into());
        return rec;
    };
    rec.ops = Some(best.ok);
    rec.ns = Some(best.elapsed.as_nanos() as u64);
    // Requests/s per front-end core: the front-end list of the ready line (ours' done line
    // gives counts under the same names).
    let ready_words = crate::guest::tcp_accept::words(&o.ready);
    let ready_list = |k: &str| ready_words.iter().find(|(kk, _)| kk == k).and_then(|(_, v)| webd_run::parse_cores(v).ok()).map(|v| v.len() as u64);
    let frontends = ready_list("frontends").filter(|&n| n > 0);
    rec.workers = Some(frontends.unwrap_or(cores as u64));
    rec.calib_ops = num("calib_ops");
    rec.calib_ns = num("calib_ns");
    // The calibration ran on `calib_cores` cores (Linux says so; ours runs it on every
    // front-end and application core: the done line's `frontends=` and `apps=` counts). The
    // record's is per worker (Record::calib_per_core_throughput divides by workers), so scale
    // it to the workers: steps per calibrating core times front-ends.
    let calib_cores = num("calib_cores").or_else(|| (system == "ours").then(|| num("frontends").unwrap_or(0) + num("apps").unwrap_or(0)));
    if let (Some(ops), Some(cc), Some(w)) = (rec.calib_ops, calib_cores.filter(|&c| c > 0), rec.workers) {
        rec.calib_ops = Some(ops / cc * w);
    }
    rec
}

#[cfg(test)]
mod tests {
    use testdefs::bench_catalog as catalog;
    use super::*;

    #[test]
    fn rows_name_their_mode_and_size() {
        let names: Vec<&str> = catalog::BENCHES.iter().filter(|b| is_webd(b)).map(|b| b.name).collect();
        assert_eq!(names.len(), 9, "{names:?}");
        for m in ["random", "locality", "same_core"] {
            for s in ["64k", "512k", "1m"] {
                let n = format!("webd_filesum_{m}_{s}");
                let spec = catalog::find(&n).unwrap_or_else(|| panic!("{n} is not in the catalog"));
                assert!(spec.host_driven);
                let (mode, size) = row(spec).unwrap();
                assert_eq!(mode, m.replace('_', "-"));
                assert_eq!(size, crate::webd::files::parse_size(s).unwrap());
            }
        }
        let spec = catalog::find("webd_filesum_locality_1m").unwrap();
        assert!(unsupported(true, spec, 2).unwrap().contains("random mode only"));
        assert!(unsupported(false, spec, 1).unwrap().contains("2 vCPUs"));
        assert!(unsupported(false, spec, 2).is_none());
        assert!(unsupported(true, catalog::find("webd_filesum_random_64k").unwrap(), 2).is_none());
        // Random mode runs at 1 vCPU (ours' front-end sums itself; Linux's one thread).
        assert!(unsupported(false, catalog::find("webd_filesum_random_64k").unwrap(), 1).is_none());
        assert!(unsupported(false, catalog::find("webd_filesum_same_core_64k").unwrap(), 1).unwrap().contains("2 vCPUs"));
    }

    #[test]
    fn params_become_webd_switches() {
        let p = |v: &[(&str, u64)]| v.iter().map(|(k, n)| (k.to_string(), *n)).collect::<Vec<_>>();
        assert!(guest_switches(&p(&[("wake", 1)]), "random").is_empty());
        assert_eq!(guest_switches(&p(&[("wake", 0), ("steal", 0)]), "random"), ["--wake", "off", "--steal", "0"]);
        assert_eq!(guest_switches(&p(&[("wake", 1), ("steal", 2)]), "random"), ["--steal", "2"]);
        // Locality keeps a file's sums on its home core whatever `steal` says.
        assert!(guest_switches(&p(&[("steal", 2)]), "locality").is_empty());
    }

    fn outcome(ready: &str, done: Option<&str>, exit: i32) -> webd_run::WebdOutcome {
        let finished = crate::host::qemu::Finished { serial: String::new(), stderr: String::new(), exit_code: Some(exit), killed: false, elapsed: Duration::from_secs(3) };
        webd_run::WebdOutcome { ready: ready.into(), done: done.map(String::from), finished, problem: None, topped_up: 0 }
    }

    /// A real round against a local server, so the record carries real numbers; workers are
    /// the ready line's front-ends (not the done line's count), and the calibration is scaled
    /// from the cores it ran on to the workers.
    #[test]
    fn a_served_run_is_a_record_per_front_end_core() {
        let port = crate::webd::load::tests::server(2, crate::webd::load::tests::Serve::Good);
        let spec_l = WebLoadSpec { port, conns: 2, requests: 20, paths: vec!["/filesum/a".into()], ..WebLoadSpec::default() };
        let round = load::run(&spec_l).unwrap();
        let spec = catalog::find("webd_filesum_random_64k").unwrap();
        let p = vec![("requests".to_string(), 20), ("reps".to_string(), 1)];
        // Ours: frontends=0 apps=1 on the ready line; the done line's frontends=1 apps=1 are
        // counts; the calibration ran on both cores.
        let o = outcome(
            "webd: ready mode=random port=80 frontends=0 apps=1 kc=-1 net=inline files=8 bytes=524288",
            Some("webd: done requests=20 errors=0 mode=random frontends=1 apps=1 ms=100 calib_ops=8000000 calib_ns=40000000 fe0=2/20/0/0/1 app1=20/1"),
            crate::host::vm::QEMU_EXIT_SUCCESS,
        );
        let mut r = record("ours", spec, &p, 2, &o, std::slice::from_ref(&round), None);
        assert_eq!(r.status, Status::Ok, "{:?}", r.reason);
        r.instructions_note = Some("insncount plugin off in this test".into());
        assert_eq!((r.ops, r.workers, r.calib_ops), (Some(20), Some(1), Some(4_000_000)));
        assert!(r.per_core_throughput().unwrap() > 0.0 && r.calibrated_throughput().is_some());
        assert_eq!(r.net.as_ref().unwrap().guest["fe0"], "2/20/0/0/1");
        let back = Record::from_json(&r.to_json()).unwrap();
        assert_eq!(back, r);
        assert!(crate::guest::record::check_schema(&serde_json::from_str(&r.to_json()).unwrap()).is_ok());
        // Linux: two front-end threads, calibration on both: per worker as it is.
        let o = outcome(
            "webd: ready mode=random port=80 frontends=0,1 apps=0,1 kc=-1 files=8 bytes=1 system=linux",
            Some("webd: done requests=20 errors=0 mode=random frontends=0,1 apps=0,1 ms=1 calib_ops=8000000 calib_ns=1 calib_cores=2"),
            0,
        );
        let r = record("linux", spec, &p, 2, &o, std::slice::from_ref(&round), None);
        assert_eq!((r.status, r.workers, r.calib_ops), (Status::Ok, Some(2), Some(8_000_000)));
        // The tuned baseline is judged as Linux (it powers off with QEMU's exit 0).
        assert_eq!(record("linux-tuned", spec, &p, 2, &o, std::slice::from_ref(&round), None).status, Status::Ok);
        // A leak (ours' exit status says so), a failed round, or no round: errors.
        let leaked = outcome("webd: ready frontends=0 apps=1", Some("webd: done requests=20 frontends=1 apps=1"), crate::host::vm::QEMU_EXIT_FAILURE);
        assert_eq!(record("ours", spec, &p, 2, &leaked, std::slice::from_ref(&round), None).status, Status::Error);
        let r = record("ours", spec, &p, 2, &o, std::slice::from_ref(&round), Some("load: 3 of 20 requests failed".into()));
        assert_eq!((r.status, r.ops), (Status::Error, None));
        assert_eq!(record("linux", spec, &p, 2, &o, &[], None).status, Status::Error);
    }
}
