//! `cargo xtask webd cachesim`: Corey's filesum cache experiment (seeds/000 §8.4, fig. 11) in
//! the cache simulator's multi-core models (tools/qemu-plugins/cachesim.c with
//! cachesim_mc.c: `preset=amd16`, `preset=nehalem-mc`). Our webd runs under single-threaded
//! TCG with the plugin, switching vCPUs every 250 instructions (the quantum of the exact mode,
//! docs/plugins.md; the host-driven network keeps host time, so no `-icount`); the host asks for every file's filesum, round after
//! round, on one keep-alive connection; the report gives, per request, the L2 and L3 misses
//! and memory cycles of the cores that sum (the application cores; the front-end in
//! same-core mode), by mode. Evidence kind: deterministic simulation of the guest's
//! physical-address trace (which lines a core touches does not depend on the host's speed;
//! the order in which vCPUs interleave does, a little: see docs/webd.md).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::files::FileSpec;
use super::http::{self, Conn};
use super::run::{self, Artifacts, Running, Sys, WebdBoot};

#[derive(Debug)]
pub struct Opts {
    pub modes: Vec<String>,
    pub preset: String,
    pub files: FileSpec,
    pub rounds: u64,
    pub map: String,
    pub json: Option<PathBuf>,
}

const SMP: u32 = 5;
const APPS: &str = "1-4";

/// `webd cachesim`'s options (options.rs) with the preset's defaults filled in.
pub fn options(a: crate::webd::options::WebdCachesimArgs) -> Result<Opts, String> {
    let modes = if a.modes.is_empty() { run::MODES.iter().map(|m| m.to_string()).collect() } else { a.modes };
    let map = a.map.unwrap_or_else(|| if a.preset == "amd16" { "1:0:4:8:12" } else { "3:0:1:4:5" }.into());
    a.files.validate()?;
    Ok(Opts { modes, preset: a.preset, files: a.files, rounds: a.rounds.clamp(2, 100), map, json: a.json })
}

/// One core's counts from the report (both parties added).
#[derive(Default, Clone, Copy, Debug, PartialEq)]
pub struct CoreCounts {
    pub insns: u64,
    pub l2_miss: u64,
    pub l3_miss: u64,
    pub cycles: u64,
}

/// Parse the simulator's `mcpu model=M vcpu=N ...` lines: vCPU -> counts (os + app). Errors
/// when the report has no `end` line (QEMU died before the plugin wrote it).
pub fn parse_report(text: &str) -> Result<Vec<CoreCounts>, String> {
    if !text.lines().any(|l| l == "end") {
        return Err("the cache simulator's report is incomplete (no `end` line)".into());
    }
    let mut v: Vec<CoreCounts> = Vec::new();
    for l in text.lines().filter(|l| l.starts_with("mcpu ")) {
        let get = |k: &str| -> Result<u64, String> {
            l.split_whitespace().find_map(|w| w.strip_prefix(k).and_then(|r| r.strip_prefix('='))).and_then(|x| x.parse().ok()).ok_or_else(|| format!("report line without {k}: {l}"))
        };
        let c = get("vcpu")? as usize;
        if v.len() <= c {
            v.resize(c + 1, CoreCounts::default());
        }
        v[c].insns += get("insns")?;
        v[c].l2_miss += get("l2_miss")?;
        v[c].l3_miss += get("l3_miss")?;
        v[c].cycles += get("cycles")?;
    }
    Ok(v)
}

/// What one mode measured, per request.
#[derive(Debug)]
pub struct ModeResult {
    pub mode: String,
    pub requests: u64,
    pub cores: Vec<u32>,
    pub l2_per_req: f64,
    pub l3_per_req: f64,
    pub insns_per_req: f64,
    pub mem_cpi: f64,
}

fn one_mode(o: &Opts, art: &Artifacts, so: &Path, mode: &str) -> Result<ModeResult, String> {
    let out = crate::host::env::workspace_root().join("target").join("webd").join(format!("cachesim-{mode}-{}-{}.txt", o.preset, o.files.name()));
    let _ = std::fs::remove_file(&out);
    let n = o.files.count;
    let same_core = mode == "same-core";
    let b = WebdBoot {
        system: Sys::Ours,
        mode: mode.into(),
        files: o.files,
        smp: SMP,
        mem_mib: 1024,
        frontends: Some("0".into()),
        apps: if same_core { None } else { Some(APPS.into()) },
        kc: None,
        requests: Some((o.rounds - 1) * n),
        warmup: n,
        extra: vec![
            "-plugin".into(),
            format!("{},out={},preset={},map={},scope=all,{}", so.display(), out.display(), o.preset, o.map, crate::guest::plugin::quantum_plugin_args(SMP).join(",")),
        ],
        guest_extra: Vec::new(),
    };
    let mut p = run::prepare(&b, art)?;
    // The model is not locked: one thread runs every vCPU.
    for a in p.args.iter_mut() {
        if a == "tcg,thread=multi" {
            *a = "tcg,thread=single".into();
        }
    }
    let t0 = Instant::now();
    let r = Running::start(&p, Duration::from_secs(900), false).map_err(|nr| format!("{mode}: webd did not come up: {}", nr.why))?;
    let mut conn = Conn::open(r.port, Duration::from_secs(60)).map_err(|(f, w)| format!("{mode}: connect: {}: {w}", f.name()))?;
    for round in 0..o.rounds {
        for (name, want) in &r.sums {
            let target = format!("/filesum/{name}");
            conn.send(&http::request("GET", &target, true), Duration::from_secs(60)).map_err(|(f, w)| format!("{mode}: {target}: {}: {w}", f.name()))?;
            let resp = conn.read_response(Instant::now() + Duration::from_secs(120), false).map_err(|(f, w)| format!("{mode}: {target}: {}: {w}", f.name()))?;
            let got = String::from_utf8_lossy(&resp.body).trim().to_string();
            if resp.status != 200 || got != want.sum.to_string() {
                return Err(format!("{mode}: round {round}: {target}: {} `{got}`, want {}", resp.status, want.sum));
            }
        }
    }
    drop(conn);
    let cores: Vec<u32> = if same_core { r.frontends.clone() } else { r.apps.clone() };
    let outcome = r.finish((o.rounds - 1) * n, Duration::from_secs(120));
    outcome.verdict(Sys::Ours)?;
    let text = std::fs::read_to_string(&out).map_err(|e| format!("{mode}: {}: {e}", out.display()))?;
    let counts = parse_report(&text)?;
    let sum = |f: fn(&CoreCounts) -> u64| cores.iter().map(|&c| counts.get(c as usize).map(f).unwrap_or(0)).sum::<u64>();
    let measured = (o.rounds - 1) * n;
    let (l2, l3, insns, cycles) = (sum(|c| c.l2_miss), sum(|c| c.l3_miss), sum(|c| c.insns), sum(|c| c.cycles));
    if insns == 0 {
        return Err(format!("{mode}: the summing cores executed nothing inside the marked region (markers missing?)"));
    }
    println!("   {mode}: {} s, report {}", t0.elapsed().as_secs(), out.display());
    Ok(ModeResult {
        mode: mode.into(),
        requests: measured,
        cores,
        l2_per_req: l2 as f64 / measured as f64,
        l3_per_req: l3 as f64 / measured as f64,
        insns_per_req: insns as f64 / measured as f64,
        mem_cpi: cycles as f64 / insns as f64,
    })
}

pub fn command(o: Opts) -> Result<(), String> {
    let so = crate::guest::plugin::build()?.cachesim;
    let art = Artifacts::build(Sys::Ours)?;
    println!(
        "webd cachesim: preset {}, vCPUs -> cores {}, {} files of {} KiB, {} rounds (first one warms up), {SMP} vCPUs, application cores {APPS}",
        o.preset,
        o.map,
        o.files.count,
        o.files.size >> 10,
        o.rounds
    );
    let mut results = Vec::new();
    for m in &o.modes {
        results.push(one_mode(&o, &art, &so, m)?);
    }
    println!("{:<10} {:>8} {:>12} {:>12} {:>14} {:>9}  cores", "mode", "requests", "L2 miss/req", "L3 miss/req", "instrs/req", "mem CPI");
    for r in &results {
        println!("{:<10} {:>8} {:>12.0} {:>12.0} {:>14.0} {:>9.3}  {:?}", r.mode, r.requests, r.l2_per_req, r.l3_per_req, r.insns_per_req, r.mem_cpi, r.cores);
    }
    let find = |m: &str| results.iter().find(|r| r.mode == m);
    if let (Some(rnd), Some(loc)) = (find("random"), find("locality")) {
        println!(
            "random / locality: L3 misses per request {:.2}x, memory CPI {:.2}x (targets, docs/webd.md: >= 3x and >= 1.5x)",
            rnd.l3_per_req / loc.l3_per_req.max(1e-9),
            rnd.mem_cpi / loc.mem_cpi.max(1e-9)
        );
    }
    let json = format!(
        "{{\"preset\":\"{}\",\"map\":\"{}\",\"files\":\"{}\",\"rounds\":{},\"smp\":{SMP},\"modes\":[{}]}}",
        o.preset,
        o.map,
        o.files.name(),
        o.rounds,
        results
            .iter()
            .map(|r| format!(
                "{{\"mode\":\"{}\",\"requests\":{},\"l2_miss_per_req\":{:.1},\"l3_miss_per_req\":{:.1},\"insns_per_req\":{:.0},\"mem_cpi\":{:.4}}}",
                r.mode, r.requests, r.l2_per_req, r.l3_per_req, r.insns_per_req, r.mem_cpi
            ))
            .collect::<Vec<_>>()
            .join(",")
    );
    let path = o.json.clone().unwrap_or_else(|| crate::host::env::workspace_root().join("target").join("webd").join(format!("cachesim-{}-{}.json", o.preset, o.files.name())));
    std::fs::write(&path, format!("{json}\n")).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("{json}");
    println!("written to {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_report_and_adds_parties() {
        let t = "cachesim version=1 starts=1\n\
                 mcpu model=amd16 vcpu=0 core=1 chip=0 party=os regions=1 insns=10 l2_miss=2 l3_miss=1 cycles=200 mem_cpi=20.0\n\
                 mcpu model=amd16 vcpu=0 core=1 chip=0 party=app regions=1 insns=20 l2_miss=4 l3_miss=3 cycles=600 mem_cpi=30.0\n\
                 mcpu model=amd16 vcpu=1 core=0 chip=0 party=os regions=1 insns=1 l2_miss=0 l3_miss=0 cycles=0 mem_cpi=0\n\
                 end\n";
        let v = parse_report(t).unwrap();
        assert_eq!(v[0], CoreCounts { insns: 30, l2_miss: 6, l3_miss: 4, cycles: 800 });
        assert_eq!(v[1].insns, 1);
        assert!(parse_report("mcpu vcpu=0 insns=1\n").is_err(), "a report cut short is an error");
        assert!(parse_report("mcpu model=amd16 vcpu=0 party=os insns=x\nend\n").is_err());
    }

    /// `cargo xtask webd cachesim ARGS` through clap (options.rs), then the defaults.
    fn parse(args: &[String]) -> Result<Opts, String> {
        match crate::host::args::parse_args::<crate::webd::options::WebdArgs>("webd", &[&["cachesim".to_string()], args].concat())? {
            crate::webd::options::WebdArgs { command: crate::webd::options::WebdCommand::Cachesim(c) } => super::options(c),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn options() {
        let o = parse(&["--modes".into(), "random,locality".into(), "--files".into(), "4x512K".into()]).unwrap();
        assert_eq!(o.modes, vec!["random", "locality"]);
        assert_eq!((o.files.count, o.files.size), (4, 512 << 10));
        assert!(parse(&["--modes".into(), "fast".into()]).is_err());
        assert!(parse(&["--preset".into(), "pentium".into()]).is_err());
        assert!(parse(&["--rounds".into()]).unwrap_err().contains("--rounds"));
        assert!(parse(&["--rounds".into(), "x".into()]).unwrap_err().contains("--rounds"));
        assert!(parse(&["--files".into(), "8".into()]).unwrap_err().contains("--files"));
        assert!(parse(&["--map".into(), "1:2".into()]).is_err(), "one core per vCPU");
        assert_eq!(parse(&["--preset".into(), "nehalem-mc".into()]).unwrap().map, "3:0:1:4:5");
    }
}
