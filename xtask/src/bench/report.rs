//! The report: a Markdown table (per-core throughput, instructions per operation, the
//! ours/Linux ratio), the per-core scaling ratios divided by the share-nothing calibration,
//! and one SVG plot per benchmark (converted to PNG with rsvg-convert).

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::process::Command;

use testdefs::bench_catalog::{self as catalog, BENCHES};
use crate::guest::record::{Record, Status};
use super::stats::{self, CellSummary, PairSummary, Spread};
use crate::guest::record::System;

/// 1234567.0 -> "1.23M": short numbers for tables and axes.
pub fn si(x: f64) -> String {
    let (v, suffix) = match x.abs() {
        a if a >= 1e9 => (x / 1e9, "G"),
        a if a >= 1e6 => (x / 1e6, "M"),
        a if a >= 1e3 => (x / 1e3, "k"),
        _ => (x, ""),
    };
    if v.abs() >= 100.0 {
        format!("{v:.0}{suffix}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}{suffix}")
    } else {
        format!("{v:.2}{suffix}")
    }
}

/// One cell's per-core throughput: the value of a single boot, or `median [min–max]` over
/// its good boots; `noisy` when max/min of its calibrated value exceeds 1.5; failed boots
/// counted. A cell without a good boot shows its (first) status.
pub(super) fn cell(c: Option<&CellSummary>, records: &[Record]) -> String {
    let Some(c) = c else { return "-".into() };
    let mut out = match &c.per_core {
        Some(s) => range(s, si),
        None => records
            .iter()
            .find(|r| r.system == c.system && r.benchmark == c.benchmark && r.cores == c.cores && r.status != Status::Ok)
            .map(|r| r.status.as_str().to_string())
            .unwrap_or_else(|| "-".into()),
    };
    if c.noisy {
        out.push_str(" noisy");
    }
    if c.failed > 0 && c.boots > 1 {
        let _ = write!(out, " ({}/{} failed)", c.failed, c.boots);
    }
    out
}

/// `median [min–max]`, or the one value when there is one.
pub(super) fn range(s: &Spread, f: fn(f64) -> String) -> String {
    if s.n > 1 {
        format!("{} [{}–{}]", f(s.median), f(s.min), f(s.max))
    } else {
        f(s.median)
    }
}

/// Three significant digits (calibrated values are small: operations per calibration step).
pub(super) fn sig(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let d = (2 - x.abs().log10().floor() as i32).max(0) as usize;
    format!("{x:.d$}")
}

fn two(x: f64) -> String {
    format!("{x:.2}")
}

/// The ours/Linux ratio: the median of the per-pair ratios with their range.
pub(super) fn pair_cell(p: Option<&PairSummary>, value: fn(&PairSummary) -> Option<&Spread>, noisy: bool) -> String {
    match p.and_then(|p| value(p).map(|s| (p, s))) {
        Some((p, s)) => format!("{}{}", range(s, two), if noisy && p.noisy { " noisy" } else { "" }),
        None => "-".into(),
    }
}

pub(super) fn ratio(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into())
}

pub(super) fn summary<'a>(cells: &'a [CellSummary], sys: &str, bench: &str, n: u32) -> Option<&'a CellSummary> {
    cells.iter().find(|c| c.system == sys && c.benchmark == bench && c.cores == n)
}

pub fn table(records: &[Record], smp: &[u32]) -> String {
    let cells = stats::summarize(records);
    let pairs = stats::pairs(records);
    let boots = cells.iter().map(|c| c.boots).max().unwrap_or(1);
    let mut t = String::new();
    let mut benches: Vec<&str> = Vec::new();
    for r in records {
        if !benches.contains(&r.benchmark.as_str()) {
            benches.push(&r.benchmark);
        }
    }
    let _ = writeln!(t, "Per-vCPU throughput (ops/s per vCPU of the guest, the same divisor on both systems; TCG, emulated timing; rows above 2 vCPUs are functional only); insns/op = guest instructions (kernel + user) per operation, insncount plugin, deterministic\n");
    if boots > 1 {
        let _ = writeln!(t, "{boots} boots per cell: each number is `median [min–max]` over the cell's good boots (failed boots counted in the cell); insns/op from the first good boot (exact, the same in every boot); ours/LINUX = median [range] of the per-pair ratios, boot k of ours over boot k of that Linux (booted back to back); `noisy` = max/min of the calibrated value above {}, or the host's load average differing by more than {} per host CPU between the boots compared (do not quote)\n", stats::NOISY, stats::NOISY_LOAD_PER_CPU);
    }
    let _ = writeln!(t, "calibrated: each side's throughput divided by the share-nothing loop run in its own boot (corrects for the host's load differing between the two boots)");
    let _ = writeln!(t, "path (ours): `kernel path` = ours enters its kernel on every operation; `library path` = ours serves it in the library OS without entering the kernel while Linux makes a system call (not a faster system call); `user code (both)` = the same user code on both (from the exact counts: xtask/src/bench/paths.rs)");
    let _ = writeln!(t, "per service core: ours' throughput per worker where that differs from per vCPU (kernel-core rows, tcp_accept, webd); a second view, never the ratio's divisor; host load = the host's 1-minute load average over the row's boots, median [min–max]\n");
    let linuxes: Vec<&str> = crate::guest::record::LINUX_NAMES.iter().copied().filter(|l| records.iter().any(|r| r.system == *l)).collect();
    let service = records.iter().any(|r| r.per_service_core_throughput().is_some());
    let mut head = String::from("| benchmark | vCPUs | path (ours) |");
    let mut rule = String::from("| --- | ---: | --- |");
    for l in &linuxes {
        let _ = write!(head, " {l} ops/s/vCPU | {l} insns/op |");
        rule.push_str(" ---: | ---: |");
    }
    head.push_str(" ours ops/s/vCPU |");
    rule.push_str(" ---: |");
    if service {
        head.push_str(" ours ops/s per service core |");
        rule.push_str(" ---: |");
    }
    head.push_str(" ours insns/op |");
    rule.push_str(" ---: |");
    for l in &linuxes {
        let _ = write!(head, " ours/{l} | ours/{l} calibrated |");
        rule.push_str(" ---: | ---: |");
    }
    head.push_str(" host load |");
    rule.push_str(" ---: |");
    let _ = writeln!(t, "{head}\n{rule}");
    let insns = |sys: &str, b: &str, n: u32| {
        records.iter().filter(|r| r.system == sys && r.benchmark == b && r.cores == n).find_map(|r| r.instructions_per_op()).map(si).unwrap_or_else(|| "-".into())
    };
    for b in &benches {
        for &n in smp {
            let label = if n > 2 { format!("{n} (functional)") } else { n.to_string() };
            let mut row = format!("| {b} | {label} | {} |", super::paths::label(records, b, n));
            for l in &linuxes {
                let _ = write!(row, " {} | {} |", cell(summary(&cells, l, b, n), records), insns(l, b, n));
            }
            let o = summary(&cells, "ours", b, n);
            let _ = write!(row, " {} |", cell(o, records));
            if service {
                let _ = write!(row, " {} |", o.and_then(|c| c.per_service_core_throughput.as_ref()).map(|s| range(s, si)).unwrap_or_else(|| "-".into()));
            }
            let _ = write!(row, " {} |", insns("ours", b, n));
            for l in &linuxes {
                let p = pairs.iter().find(|p| p.linux == *l && p.benchmark == *b && p.cores == n);
                let _ = write!(row, " {} | {} |", pair_cell(p, |p| p.ratio.as_ref(), false), pair_cell(p, |p| p.calibrated_ratio.as_ref(), true));
            }
            let loads: Vec<f64> = records.iter().filter(|r| r.benchmark == *b && r.cores == n && r.status == Status::Ok).filter_map(|r| r.host.as_ref().map(|h| h.load1())).collect();
            let _ = writeln!(row, " {} |", stats::spread(&loads).map(|s| range(&s, |x| format!("{x:.1}"))).unwrap_or_else(|| "-".into()));
            t.push_str(&row);
        }
    }
    // Every cell without a number says why, once per benchmark, system and reason.
    let mut why: Vec<String> = Vec::new();
    for r in records.iter().filter(|r| r.status != Status::Ok) {
        let line = format!("- {} on {}: {} ({})", r.benchmark, r.system, r.status.as_str(), r.reason.as_deref().unwrap_or("no reason given"));
        if !why.contains(&line) {
            why.push(line);
        }
    }
    if !why.is_empty() {
        let _ = writeln!(t, "\nRuns without a result:\n");
        for line in why {
            let _ = writeln!(t, "{line}");
        }
    }
    // The rows too wide to support a claim, and why.
    let noisy: Vec<String> = cells
        .iter()
        .filter(|c| c.noisy)
        .map(|c| {
            let (what, s) = match (&c.calibrated, &c.per_core) {
                (Some(s), _) => ("calibrated", s),
                (None, Some(s)) => ("per-core (no calibration)", s),
                (None, None) => ("-", &Spread { n: 0, median: 0.0, min: 0.0, max: 0.0, iqr_over_median: 0.0 }),
            };
            let load = c.host_load1.as_ref().map(|l| format!("; host load {:.1}–{:.1}", l.min, l.max)).unwrap_or_default();
            format!("- {} on {} at {} vCPU(s): {what} {}–{} over {} boots (max/min {:.2}){load}", c.benchmark, c.system, c.cores, sig(s.min), sig(s.max), s.n, s.max_over_min())
        })
        .chain(pairs.iter().filter(|p| p.noisy).map(|p| {
            let s = p.calibrated_ratio.as_ref().or(p.ratio.as_ref());
            format!("- {} ours/{} at {} vCPU(s): paired ratio {} over {} pairs", p.benchmark, p.linux, p.cores, s.map(|s| format!("{:.2}–{:.2} (max/min {:.2})", s.min, s.max, s.max_over_min())).unwrap_or_default(), s.map(|s| s.n).unwrap_or(0))
        }))
        .collect();
    if !noisy.is_empty() {
        let _ = writeln!(t, "\nNoisy (max/min of the calibrated value above {}, or the host's load apart by more than {} per host CPU; not a result):\n", stats::NOISY, stats::NOISY_LOAD_PER_CPU);
        for line in noisy {
            let _ = writeln!(t, "{line}");
        }
    }
    t.push_str(&net_table(records));
    t.push_str(&phase_table(records));
    // Scaling: each larger vCPU count over the smallest, raw and divided by the share-nothing
    // calibration measured in the same boots (it shows what the emulator and the host's load
    // alone lose); from the cells' medians.
    let Some(&base) = smp.first() else { return t };
    let others: Vec<u32> = smp.iter().copied().filter(|&n| n != base).collect();
    if others.is_empty() {
        return t;
    }
    fn raw(c: &CellSummary) -> Option<&Spread> {
        c.per_core.as_ref()
    }
    fn calibrated(c: &CellSummary) -> Option<&Spread> {
        c.calibrated.as_ref()
    }
    let _ = writeln!(t);
    for sys in ["linux", "linux-tuned", "ours"].into_iter().filter(|s| records.iter().any(|r| r.system == *s)) {
        for &n in &others {
            let c = stats::scaling_of_medians(&cells, sys, catalog::CALIBRATION, base, n, raw);
            let _ = writeln!(
                t,
                "Calibration ({sys}): share-nothing user-only loop (`calib` boots), per-core throughput {n} vCPUs / {base} vCPU = {}{}",
                ratio(c),
                if c.is_none() { " (not measured)" } else { "" }
            );
        }
    }
    let _ = writeln!(t, "\nPer-core scaling: raw = per-core throughput at N vCPUs / at {base}; calibrated = the same for throughput divided by the share-nothing loop run in each record's own boot (1.00 = scales like a share-nothing loop){}\n", if boots > 1 { "; ratios of the cells' medians, then in brackets the ratio per round (boot k at N over boot k at the base, same round): median [min–max]" } else { "" });
    let mut head = String::from("| benchmark |");
    let mut rule = String::from("| --- |");
    for &n in &others {
        for sys in ["linux", "linux-tuned", "ours"].into_iter().filter(|s| records.iter().any(|r| r.system == *s)) {
            let _ = write!(head, " {sys} raw {n}/{base} | {sys} calibrated {n}/{base} |");
            rule.push_str(" ---: | ---: |");
        }
    }
    let _ = writeln!(t, "{head}\n{rule}");
    for b in &benches {
        let mut row = format!("| {b} |");
        for &n in &others {
            for sys in ["linux", "linux-tuned", "ours"].into_iter().filter(|s| records.iter().any(|r| r.system == *s)) {
                let r = stats::scaling_of_medians(&cells, sys, b, base, n, raw);
                let c = stats::scaling_of_medians(&cells, sys, b, base, n, calibrated);
                // With several boots, the per-round ratios' range as well.
                let rounds = |v: fn(&Record) -> Option<f64>| match stats::scaling_per_round(records, sys, b, base, n, v) {
                    Some(s) if s.n > 1 => format!(" (rounds {} [{}–{}])", two(s.median), two(s.min), two(s.max)),
                    _ => String::new(),
                };
                let _ = write!(row, " {}{} | {}{} |", ratio(r), rounds(Record::per_core_throughput), ratio(c), rounds(Record::calibrated_throughput));
            }
        }
        let _ = writeln!(t, "{row}");
    }
    t
}

/// Phased benchmarks (the `metis_*` rows): where each boot's time went, phase by phase
/// (Corey figure 10's split), with soft faults; "calibrated" is the phases' ms times the
/// boot's calibration rate (steps/ns per core), comparable between boots and systems.
fn phase_table(records: &[Record]) -> String {
    let rows: Vec<&Record> = records.iter().filter(|r| r.status == Status::Ok && !r.phases.is_empty()).collect();
    let Some(first) = rows.first() else { return String::new() };
    let names: Vec<&str> = first.phases.iter().map(|p| p.name.as_str()).collect();
    let mut t = String::new();
    let _ = writeln!(t, "\nPhases of the phased rows (TCG guest time of the fastest repetition, soft page faults; calibrated = the phases' ms x the boot's calibration steps/ns per core)\n");
    let mut head = String::from("| benchmark | system | vCPUs | boot |");
    let mut rule = String::from("| --- | --- | ---: | ---: |");
    for n in &names {
        let _ = write!(head, " {n} ms | {n} faults |");
        rule.push_str(" ---: | ---: |");
    }
    let _ = writeln!(t, "{head} calibrated |\n{rule} ---: |");
    for r in rows {
        let mut row = format!("| {} | {} | {} | {} |", r.benchmark, r.system, r.cores, r.boot);
        for n in &names {
            match r.phases.iter().find(|p| p.name == *n) {
                Some(p) => {
                    let _ = write!(row, " {:.1} | {} |", p.ns as f64 / 1e6, p.faults);
                }
                None => row.push_str(" - | - |"),
            }
        }
        let ms: f64 = r.phases.iter().map(|p| p.ns as f64 / 1e6).sum();
        let cal = match (r.calib_ops, r.calib_ns.filter(|&n| n > 0), r.workers.filter(|&w| w > 0)) {
            (Some(o), Some(ns), Some(w)) => format!("{:.0}", ms * o as f64 / ns as f64 / w as f64),
            _ => "-".into(),
        };
        let _ = writeln!(t, "{row} {cal} |");
    }
    t
}

/// The host-driven network benchmarks' own view: what the load generator saw in
/// the fastest round (connections/s of all service cores, latency) and every failure.
fn net_table(records: &[Record]) -> String {
    let rows: Vec<&Record> = records.iter().filter(|r| r.net.is_some()).collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut t = String::new();
    let _ = writeln!(t, "\nTCP service seen from the host (load generator on 127.0.0.1 through QEMU's user-mode network; fastest round; latency = connect to EOF; webd_* rows: requests instead of connections, service cores = front-end cores, latency = request to response)");
    let _ = writeln!(t, "conns/s/vCPU divides both systems by the guest's vCPUs (the comparison); per service core is a second view. insns/conn (insncount, per connection, from the cell's counting boot): busy = the service cores while they had work (ours' mark only their busy stretches; Linux's vCPUs all serve and halt when idle, so their count is their work); idle polling = the service cores' polls that found nothing (insncount's `idle`; Linux: none, its idle vCPUs halt; `-` where the report predates the split); kernel core busy / idle polling = ours' kernel core (drives the card; webd rows with `kc=-1` have none, and their busy and idle polling columns cover the front-ends and the application cores), its loop's passes that found work and those that found nothing (its `kcmark` pass markers; where the counting boot predates them, busy shows the two together as `N (with idle)` and idle `-`; Linux has no kernel core: `-`); `all` = every vCPU while busy (idle polling of any core not included). host load = 1-minute load average at the boot's start/end; QEMU CPU = host CPU seconds of the boot's QEMU\n");
    let _ = writeln!(t, "| benchmark | system | vCPUs | boot | status | conns/s | service cores | conns/s/vCPU | conns/s per service core | insns/conn busy (service cores) | insns/conn idle polling (service cores) | insns/conn kernel core busy | insns/conn kernel core idle polling | insns/conn all | p50 | p90 | p99 | max | failed / attempted | slow connects | host load | QEMU CPU | audit: line transfers/conn (driver/stack/ipc/alloc/other/user) |");
    let _ = writeln!(t, "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
    for r in rows {
        let Some(n) = &r.net else { continue };
        let ms = |k: &str| n.latency_us.get(k).map(|u| format!("{:.1}ms", *u as f64 / 1000.0)).unwrap_or_else(|| "-".into());
        let failed: u64 = n.failures.values().sum();
        let a = |k: &str| n.audit.get(k).map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into());
        let audit = if n.audit.is_empty() {
            n.audit_note.as_ref().map(|_| "failed (see results.json)".to_string()).unwrap_or_else(|| "-".into())
        } else {
            format!("{} ({}/{}/{}/{}/{}/{})", a("transfers"), a("driver"), a("stack"), a("ipc"), a("alloc"), a("other"), a("user"))
        };
        let split = split_insns(r);
        let per_op = |x: Option<u64>| match (x, r.ops.filter(|&o| o > 0)) {
            (Some(i), Some(o)) => si(i as f64 / o as f64),
            _ => "-".into(),
        };
        let kc_busy = match (split.kc_busy, split.kc_split) {
            (Some(b), false) => format!("{} (with idle)", per_op(Some(b))),
            (b, _) => per_op(b),
        };
        let host = r.host.as_ref().map(|h| (format!("{:.1}/{:.1}", h.load1_start, h.load1_end), format!("{:.1}s", h.qemu_cpu_s))).unwrap_or_else(|| ("-".into(), "-".into()));
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {kc_busy} | {} | {} | {} | {} | {} | {} | {failed} / {} | {} | {} | {} | {audit} |",
            r.benchmark,
            r.system,
            r.cores,
            r.boot,
            r.status.as_str(),
            if n.conns_per_s > 0.0 { si(n.conns_per_s) } else { "-".into() },
            r.workers.map(|w| w.to_string()).unwrap_or_else(|| "-".into()),
            r.per_core_throughput().map(si).unwrap_or_else(|| "-".into()),
            r.per_service_core_throughput().or_else(|| r.per_core_throughput()).map(si).unwrap_or_else(|| "-".into()),
            per_op(split.service_busy),
            per_op(split.service_idle),
            per_op(split.kc_idle),
            per_op(r.instructions()),
            ms("p50"),
            ms("p90"),
            ms("p99"),
            ms("max"),
            n.attempted,
            n.slow_connects,
            host.0,
            host.1
        );
    }
    t
}

/// A host-driven record's instructions per role, from insncount's per-vCPU counts.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(super) struct InsnSplit {
    /// The service cores while they had work (Linux: every vCPU; its idle vCPUs halt).
    pub service_busy: Option<u64>,
    /// The service cores' polls that found nothing (insncount's `idle`).
    pub service_idle: Option<u64>,
    /// Ours' kernel core: its passes that found work, or, where it did not mark its passes
    /// (`kc_split` false), all it ran. None where there is no kernel core.
    pub kc_busy: Option<u64>,
    /// Ours' kernel core's passes that found nothing; None where not split or no kernel core.
    pub kc_idle: Option<u64>,
    /// The kernel core marked its passes (the counting boot ran with `kcmark`).
    pub kc_split: bool,
}

/// Split a host-driven record's instructions into its service cores' and its kernel core's
/// (ours: `kc=` in the guest's words or the last vCPU), each busy and idle polling. All None
/// where the per-vCPU counts are missing; the idle parts None where no idle counts were kept.
pub(super) fn split_insns(r: &Record) -> InsnSplit {
    if r.instructions_vcpus.is_empty() {
        return InsnSplit::default();
    }
    let all: u64 = r.instructions_vcpus.iter().sum();
    let idle = (!r.instructions_idle_vcpus.is_empty()).then_some(&r.instructions_idle_vcpus);
    let idle_all: Option<u64> = idle.map(|v| v.iter().sum());
    let net = r.net.as_ref();
    // webd without a kernel core says `kc=-1`: its front-ends and application cores mark their
    // own busy stretches, and every vCPU's idle polling is its own `idle`.
    let no_kc = net.and_then(|n| n.guest.get("kc")).is_some_and(|v| v.parse::<i64>().is_ok_and(|k| k < 0));
    if r.system != "ours" || no_kc || r.workers.is_some_and(|w| w >= r.instructions_vcpus.len() as u64) {
        return InsnSplit { service_busy: Some(all), service_idle: idle_all, ..InsnSplit::default() };
    }
    let kc = net.and_then(|n| n.guest.get("kc")).and_then(|v| v.parse::<usize>().ok()).unwrap_or(r.instructions_vcpus.len() - 1);
    let kc_split = net.and_then(|n| n.guest.get(KCMARK_WORD)).is_some_and(|v| v == "on");
    let kc_busy = r.instructions_vcpus.get(kc).copied().unwrap_or(0);
    let kc_idle = idle.map(|v| v.get(kc).copied().unwrap_or(0));
    InsnSplit {
        service_busy: Some(all - kc_busy),
        service_idle: idle_all.map(|i| i - kc_idle.unwrap_or(0)),
        kc_busy: Some(kc_busy),
        kc_idle: if kc_split { kc_idle } else { None },
        kc_split,
    }
}

/// The word in a network record's guest words that says the kernel core marked its passes
/// (set from the kernel's `KCMARK_LINE` in the counting boot's serial output).
pub const KCMARK_WORD: &str = "kcmark";

/// A "nice" axis step (1, 2 or 5 times a power of ten) giving about `ticks` ticks up to `max`.
fn nice_step(max: f64, ticks: f64) -> f64 {
    let raw = (max / ticks).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    mag * if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    }
}

/// A legend line cut to the plot's width (the table has the whole reason).
fn fit(s: &str) -> String {
    const MAX: usize = 88;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(MAX - 1).collect::<String>())
    }
}

pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// One benchmark's plot: per-core throughput against vCPUs, a line per system.
pub fn svg(bench: &str, records: &[Record], systems: &[System], smp: &[u32]) -> String {
    let (w, h) = (640.0, 400.0);
    let (l, r, top, bot) = (80.0, 24.0, 76.0, 88.0);
    let (pw, ph) = (w - l - r, h - top - bot);
    let spec = catalog::find(bench);
    // The median of each cell's good boots, with its range as an error bar (one boot: a point).
    let cells: Vec<CellSummary> = stats::summarize(&records.iter().filter(|x| x.benchmark == bench).cloned().collect::<Vec<_>>());
    let max = cells.iter().filter_map(|c| c.per_core.as_ref()).map(|p| p.max).fold(0.0, f64::max);
    let step = nice_step(if max > 0.0 { max } else { 1.0 }, 5.0);
    let ymax = (max / step).ceil().max(1.0) * step;
    let (xmin, xmax) = (*smp.first().unwrap_or(&1) as f64, *smp.last().unwrap_or(&1) as f64);
    // Points stay 8% inside the axes so none sits on the frame.
    let x_of = |n: u32| if xmax > xmin { l + pw * (0.08 + 0.84 * (n as f64 - xmin) / (xmax - xmin)) } else { l + pw / 2.0 };
    let y_of = |v: f64| top + ph - v / ymax * ph;
    let mut s = String::new();
    let _ = writeln!(s, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">");
    let _ = writeln!(s, "<rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>");
    let _ = writeln!(s, "<text x=\"{l}\" y=\"24\" font-size=\"16\" font-weight=\"bold\">{}</text>", esc(bench));
    let _ = writeln!(s, "<text x=\"{l}\" y=\"42\" font-size=\"11\" fill=\"#444\">op: {}</text>", esc(spec.map(|b| b.op).unwrap_or("")));
    let boots = cells.iter().map(|c| c.boots).max().unwrap_or(1);
    let many = if boots > 1 { format!("; median of {boots} boots, bars min-max") } else { String::new() };
    let _ = writeln!(s, "<text x=\"{l}\" y=\"57\" font-size=\"11\" fill=\"#444\">QEMU TCG: emulated timing at 1-2 vCPUs, functional only above{many}</text>");
    // Axes, grid and ticks.
    let mut v = 0.0;
    while v <= ymax + step / 2.0 {
        let y = y_of(v);
        let _ = writeln!(s, "<line x1=\"{l}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>", l + pw);
        let _ = writeln!(s, "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">{}</text>", l - 6.0, y + 4.0, si(v));
        v += step;
    }
    let _ = writeln!(s, "<line x1=\"{l}\" y1=\"{top}\" x2=\"{l}\" y2=\"{:.1}\" stroke=\"black\"/>", top + ph);
    let _ = writeln!(s, "<line x1=\"{l}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>", top + ph, l + pw, top + ph);
    for &n in smp {
        let x = x_of(n);
        let _ = writeln!(s, "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"black\"/>", top + ph, top + ph + 5.0);
        let _ = writeln!(s, "<text x=\"{x:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\">{n}</text>", top + ph + 18.0);
    }
    let _ = writeln!(s, "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"middle\">vCPUs</text>", l + pw / 2.0, top + ph + 36.0);
    let _ = writeln!(s, "<text x=\"16\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 16 {:.1})\">ops/s per vCPU</text>", top + ph / 2.0, top + ph / 2.0);
    // One line per system; failed points are marked on the axis with their status.
    for (i, sys) in systems.iter().enumerate() {
        let color = match sys {
            System::Linux => "#1f77b4",
            System::LinuxTuned => "#2ca02c",
            System::Ours => "#d62728",
        };
        let mine: Vec<&Record> = records.iter().filter(|r| r.system == sys.name() && r.benchmark == bench && smp.contains(&r.cores)).collect();
        let medians: Vec<(u32, &Spread)> = smp.iter().filter_map(|&n| Some((n, summary(&cells, sys.name(), bench, n)?.per_core.as_ref()?))).collect();
        let pts: Vec<(f64, f64)> = medians.iter().map(|(n, m)| (x_of(*n), y_of(m.median))).collect();
        if pts.len() > 1 {
            let p: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
            let _ = writeln!(s, "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>", p.join(" "));
        }
        for (n, m) in medians.iter().filter(|(_, m)| m.n > 1) {
            // Offset the two systems' bars a little so they do not hide each other.
            let x = x_of(*n) + if *sys == System::Ours { 3.0 } else { -3.0 };
            let (y0, y1) = (y_of(m.min), y_of(m.max));
            let _ = writeln!(s, "<path class=\"range\" d=\"M{x:.1},{y0:.1} L{x:.1},{y1:.1} M{:.1},{y0:.1} L{:.1},{y0:.1} M{:.1},{y1:.1} L{:.1},{y1:.1}\" stroke=\"{color}\" stroke-width=\"1.5\" fill=\"none\"/>", x - 4.0, x + 4.0, x - 4.0, x + 4.0);
        }
        for (x, y) in &pts {
            let _ = writeln!(s, "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"4\" fill=\"{color}\"/>");
        }
        // A vCPU count with no good boot at all is marked on the axis with its status.
        for &n in smp.iter().filter(|n| !medians.iter().any(|(m, _)| m == *n)) {
            if let Some(r) = mine.iter().find(|r| r.cores == n && matches!(r.status, Status::Error | Status::Timeout)) {
                let x = x_of(n);
                let _ = writeln!(s, "<text x=\"{x:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"{color}\" text-anchor=\"middle\">x {}</text>", top + ph - 6.0, r.status.as_str());
            }
        }
        let label = match mine.iter().find(|r| r.status == Status::Unavailable) {
            Some(r) => fit(&format!("{} unavailable: {}", sys.name(), r.reason.as_deref().unwrap_or("no reason given").trim_start_matches("ours: "))),
            None => sys.name().to_string(),
        };
        let ly = h - 32.0 + i as f64 * 16.0 - (systems.len() as f64 - 1.0) * 8.0;
        let _ = writeln!(s, "<line x1=\"{l}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{color}\" stroke-width=\"2\"/>", l + 24.0);
        let _ = writeln!(s, "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">{}</text>", l + 30.0, ly + 4.0, esc(&label));
    }
    s.push_str("</svg>\n");
    s
}

/// Write one SVG per benchmark present in `records` into `dir`; returns how many.
pub fn plots_svg_only(records: &[Record], systems: &[System], smp: &[u32], dir: &Path) -> Result<usize, String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut n = 0;
    for b in BENCHES.iter().filter(|b| records.iter().any(|r| r.benchmark == b.name)) {
        let p = dir.join(format!("{}.svg", b.name));
        fs::write(&p, svg(b.name, records, systems, smp)).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
        n += 1;
    }
    Ok(n)
}

pub struct Plots {
    pub svg: usize,
    /// How many PNGs, or why none (a missing converter is not a failed benchmark run).
    pub png: Result<usize, String>,
}

/// SVGs, then a PNG of each through rsvg-convert (Debian's librsvg2-bin, installed on demand).
pub fn plots(records: &[Record], systems: &[System], smp: &[u32], dir: &Path) -> Result<Plots, String> {
    let svg = plots_svg_only(records, systems, smp, dir)?;
    let png = (|| {
        crate::host::env::ensure_tool("rsvg-convert", &["librsvg2-bin"])?;
        let mut n = 0;
        for b in BENCHES.iter().filter(|b| records.iter().any(|r| r.benchmark == b.name)) {
            let (src, dst) = (dir.join(format!("{}.svg", b.name)), dir.join(format!("{}.png", b.name)));
            let out = Command::new("rsvg-convert").arg("-o").arg(&dst).arg(&src).output().map_err(|e| format!("cannot run rsvg-convert: {e}"))?;
            if !out.status.success() {
                return Err(format!("rsvg-convert {}: {}", src.display(), String::from_utf8_lossy(&out.stderr).trim()));
            }
            n += 1;
        }
        Ok(n)
    })();
    Ok(Plots { svg, png })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_steps() {
        assert_eq!(si(1_234_567.0), "1.23M");
        assert_eq!(si(950.0), "950");
        assert_eq!(si(12_500.0), "12.5k");
        assert_eq!(nice_step(97.0, 5.0), 20.0);
        assert_eq!(nice_step(1.0, 5.0), 0.2);
        assert_eq!(esc("a<b&c"), "a&lt;b&amp;c");
        assert_eq!((sig(0.0016), sig(0.25), sig(12.345), sig(1234.5)), ("0.00160".into(), "0.250".into(), "12.3".into(), "1234".into()));
        assert_eq!(fit("short"), "short");
        assert_eq!(fit(&"x".repeat(200)).chars().count(), 88);
    }

    /// Catches: the idle-polling column dropped, summed into busy, or taken from the wrong
    /// counts; a report without idle counts shown as 0 instead of `-`; the kernel core's idle
    /// polling counted as a service core's, left in its busy column once split, or claimed
    /// split when its counting boot did not mark its passes.
    #[test]
    fn net_table_shows_busy_and_idle_polling_apart() {
        let spec = catalog::find("tcp_accept").unwrap();
        let mut r = Record::without_result("ours", spec, Vec::new(), 2, Status::Ok, "");
        r.ops = Some(100);
        r.workers = Some(1);
        r.net = Some(super::super::record::NetStats { conns_per_s: 500.0, ..Default::default() });
        // vCPU 0 serves (busy 2.0M, idle polling 0.7M), vCPU 1 is the kernel core (3.0M), its
        // passes not marked.
        r.instructions_vcpus = vec![2_000_000, 3_000_000];
        r.instructions_idle_vcpus = vec![700_000, 0];
        (r.instructions_kernel, r.instructions_user) = (Some(4_000_000), Some(1_000_000));
        let cells = |r: &Record| -> Vec<String> {
            let t = net_table(&[r.clone()]);
            let row = t.lines().find(|l| l.starts_with("| tcp_accept | ours")).expect(&t).to_string();
            row.split('|').map(|c| c.trim().to_string()).collect()
        };
        // busy, idle polling (service cores), kernel core busy, kernel core idle, all: per connection.
        assert_eq!(&cells(&r)[10..15], ["20.0k", "7.00k", "30.0k (with idle)", "-", "50.0k"]);
        // The kernel core marked its passes: 1.0M of work, 4.0M of empty polls.
        r.net.as_mut().unwrap().guest.insert(KCMARK_WORD.into(), "on".into());
        r.instructions_vcpus = vec![2_000_000, 1_000_000];
        r.instructions_idle_vcpus = vec![700_000, 4_000_000];
        (r.instructions_kernel, r.instructions_user) = (Some(2_000_000), Some(1_000_000));
        assert_eq!(&cells(&r)[10..15], ["20.0k", "7.00k", "10.0k", "40.0k", "30.0k"]);
        // The kernel core on vCPU 0 (`kc=0`): the split follows it.
        r.net.as_mut().unwrap().guest.insert("kc".into(), "0".into());
        assert_eq!(&cells(&r)[10..15], ["10.0k", "40.0k", "20.0k", "7.00k", "30.0k"]);
        r.instructions_idle_vcpus.clear();
        assert_eq!((cells(&r)[11].as_str(), cells(&r)[13].as_str()), ("-", "-"));
        // webd with no kernel core (`kc=-1`): every core's busy and idle polling together.
        let mut w = r.clone();
        w.net.as_mut().unwrap().guest.insert("kc".into(), "-1".into());
        w.instructions_idle_vcpus = vec![700_000, 4_000_000];
        assert_eq!(&cells(&w)[10..15], ["30.0k", "47.0k", "-", "-", "30.0k"]);
        // Linux: every vCPU serves; no kernel core.
        let mut l = r.clone();
        l.system = "linux".into();
        l.workers = Some(2);
        l.instructions_idle_vcpus = vec![0, 0];
        let t = net_table(&[l]);
        let row: Vec<String> = t.lines().find(|x| x.starts_with("| tcp_accept | linux")).expect(&t).split('|').map(|c| c.trim().to_string()).collect();
        assert_eq!(&row[10..15], ["30.0k", "0.00", "-", "-", "30.0k"]);
    }
}
