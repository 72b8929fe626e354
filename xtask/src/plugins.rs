//! QEMU TCG measurement plugins (docs/plugins.md): `cargo xtask plugin ...`.
//!
//! Builds the C plugins in tools/qemu-plugins (insncount, cachesim, sharing) with the system
//! compiler, boots a guest (Linux from Debian's kernel, or this system's kernel) with one of
//! them loaded, parses the plugin's `kind key=value ...` report, and writes a text table, a
//! JSON file and, for cachesim, SVG plots. See docs/plugins.md.

use crate::host::args::{hostfwd, OnOff};
use crate::guest::measure::*;
use crate::guest::plugin::*;
use crate::host::outcome::TestTally;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

// The command line (commands and options, their help): declared below, [`PluginCommand`] and
// [`PluginOpts`]. insncount, cachesim and sharing run in the exact mode (docs/plugins.md):
// -icount shift=3 with sleep off, a fixed -seed and -rtc, and with several vCPUs a
// plugin-driven switch every 250 instructions, so their counts repeat whatever the host's
// load. Not the host-driven workloads (tcpserv, tcp_accept*: packets arrive in host time) and
// not `overhead` (a timing).



// ---------------------------------------------------------------------------------------------
// JSON and SVG (by hand: xtask has no dependencies)


fn jnum(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.6}").trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        "null".into()
    }
}

fn record_json(r: &Record) -> String {
    let body: Vec<String> = r
        .fields
        .iter()
        .map(|(k, v)| {
            let val = if v.parse::<f64>().is_ok() && !v.starts_with("0x") { v.clone() } else { jstr(v) };
            format!("{}:{}", jstr(k), val)
        })
        .collect();
    format!("{{\"kind\":{},{}}}", jstr(&r.kind), body.join(","))
}

fn write_out(dir: &Path, name: &str, body: &str) -> Result<PathBuf, String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let p = dir.join(name);
    fs::write(&p, body).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    Ok(p)
}

/// A line chart: x positions are categories (labels), one polyline per series.
fn svg_lines(title: &str, ylabel: &str, labels: &[String], series: &[(&str, Vec<f64>)]) -> String {
    let (w, h, l, r, t, b) = (720.0, 420.0, 70.0, 170.0, 40.0, 50.0);
    let ymax = series.iter().flat_map(|(_, v)| v.iter().copied()).fold(0.0f64, f64::max).max(1e-9);
    let ymin = series.iter().flat_map(|(_, v)| v.iter().copied()).fold(0.0f64, f64::min);
    let colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];
    let n = labels.len().max(2) as f64;
    let x = |i: usize| l + (w - l - r) * i as f64 / (n - 1.0);
    let y = |v: f64| t + (h - t - b) * (1.0 - (v - ymin) / (ymax - ymin).max(1e-9));
    let mut o = format!("<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n<text x='{}' y='20' font-size='14' text-anchor='middle'>{title}</text>\n", w / 2.0);
    let _ = writeln!(o, "<line x1='{l}' y1='{}' x2='{}' y2='{}' stroke='black'/><line x1='{l}' y1='{t}' x2='{l}' y2='{}' stroke='black'/>", h - b, w - r, h - b, h - b);
    for k in 0..=4 {
        let v = ymin + (ymax - ymin) * k as f64 / 4.0;
        let _ = writeln!(o, "<text x='{}' y='{}' text-anchor='end'>{:.3}</text>", l - 5.0, y(v) + 4.0, v);
    }
    if ymin < 0.0 {
        let _ = writeln!(o, "<line x1='{l}' y1='{}' x2='{}' y2='{}' stroke='#999' stroke-dasharray='4'/>", y(0.0), w - r, y(0.0));
    }
    for (i, lab) in labels.iter().enumerate() {
        let _ = writeln!(o, "<text x='{}' y='{}' text-anchor='middle'>{lab}</text>", x(i), h - b + 18.0);
    }
    let _ = writeln!(o, "<text x='15' y='{}' transform='rotate(-90 15 {})' text-anchor='middle'>{ylabel}</text>", h / 2.0, h / 2.0);
    for (si, (name, vals)) in series.iter().enumerate() {
        let c = colors[si % colors.len()];
        let pts: Vec<String> = vals.iter().enumerate().map(|(i, v)| format!("{:.1},{:.1}", x(i), y(*v))).collect();
        let _ = writeln!(o, "<polyline fill='none' stroke='{c}' stroke-width='2' points='{}'/>", pts.join(" "));
        let _ = writeln!(o, "<text x='{}' y='{}' fill='{c}'>{name}</text>", w - r + 10.0, t + 18.0 * si as f64 + 10.0);
    }
    o.push_str("</svg>\n");
    o
}

/// A bar chart: one bar per label.
fn svg_bars(title: &str, ylabel: &str, bars: &[(String, f64)]) -> String {
    let (w, h, l, t, b) = (520.0, 360.0, 70.0, 40.0, 50.0);
    let ymax = bars.iter().map(|x| x.1).fold(0.0f64, f64::max).max(1e-9);
    let bw = (w - l - 20.0) / bars.len().max(1) as f64;
    let mut o = format!("<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n<text x='{}' y='20' font-size='14' text-anchor='middle'>{title}</text>\n", w / 2.0);
    let _ = writeln!(o, "<text x='15' y='{}' transform='rotate(-90 15 {})' text-anchor='middle'>{ylabel}</text>", h / 2.0, h / 2.0);
    for (i, (lab, v)) in bars.iter().enumerate() {
        let bh = (h - t - b) * v / ymax;
        let x0 = l + bw * i as f64 + bw * 0.15;
        let _ = writeln!(o, "<rect x='{x0:.1}' y='{:.1}' width='{:.1}' height='{bh:.1}' fill='#1f77b4'/>", h - b - bh, bw * 0.7);
        let _ = writeln!(o, "<text x='{:.1}' y='{:.1}' text-anchor='middle'>{v:.4}</text>", x0 + bw * 0.35, h - b - bh - 5.0);
        let _ = writeln!(o, "<text x='{:.1}' y='{}' text-anchor='middle'>{lab}</text>", x0 + bw * 0.35, h - b + 18.0);
    }
    let _ = writeln!(o, "<line x1='{l}' y1='{}' x2='{}' y2='{}' stroke='black'/>", h - b, w - 10.0, h - b);
    o.push_str("</svg>\n");
    o
}

/// A horizontal bar chart (long labels on the left), e.g. transfers by kernel symbol.
fn svg_hbars(title: &str, xlabel: &str, bars: &[(String, f64)]) -> String {
    let (w, l, row, t) = (760.0, 330.0, 22.0, 40.0);
    let h = t + row * bars.len() as f64 + 40.0;
    let xmax = bars.iter().map(|x| x.1).fold(0.0f64, f64::max).max(1e-9);
    let mut o = format!("<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n<text x='{}' y='20' font-size='14' text-anchor='middle'>{title}</text>\n", w / 2.0);
    for (i, (lab, v)) in bars.iter().enumerate() {
        let y = t + row * i as f64;
        let bw = (w - l - 80.0) * v / xmax;
        let lab = lab.replace('<', "&lt;").replace('>', "&gt;");
        let _ = writeln!(o, "<text x='{}' y='{:.1}' text-anchor='end'>{lab}</text>", l - 6.0, y + 14.0);
        let _ = writeln!(o, "<rect x='{l}' y='{y:.1}' width='{bw:.1}' height='{:.1}' fill='#d62728'/>", row - 6.0);
        let _ = writeln!(o, "<text x='{:.1}' y='{:.1}'>{v}</text>", l + bw + 4.0, y + 14.0);
    }
    let _ = writeln!(o, "<text x='{}' y='{}' text-anchor='middle'>{xlabel}</text>", (l + w) / 2.0, h - 12.0);
    o.push_str("</svg>\n");
    o
}

fn write_plot(dir: &Path, name: &str, svg: &str) -> Result<PathBuf, String> {
    crate::host::env::ensure_tool("rsvg-convert", &["librsvg2-bin"])?;
    let p = write_out(dir, name, svg)?;
    // A PNG beside each SVG, for viewers that do not open SVG.
    let png = p.with_extension("png");
    let ok = Command::new("rsvg-convert").arg("-o").arg(&png).arg(&p).status().map(|s| s.success()).unwrap_or(false);
    if !ok {
        return Err(format!("rsvg-convert could not render {}", p.display()));
    }
    Ok(p)
}

// ---------------------------------------------------------------------------------------------
// Options

struct Opts {
    system: System,
    workload: Option<String>,
    smp: Option<u32>,
    params: String,
    presets: Vec<String>,
    levels: Option<String>,
    inclusive: bool,
    kernel_only: bool,
    top: usize,
    out: PathBuf,
    timeout: Duration,
    /// cachesim's multi-core presets: vCPU i drives core_map[i] (`--core-map 0,4,8,12`).
    core_map: Option<Vec<u32>>,
    /// cachesim's multi-core presets: simulate every access after the first marker (`--scope all`).
    scope_all: bool,
    custom: Option<Custom>,
}

/// The multi-core presets of cachesim (tools/qemu-plugins/cachesim_mc.c) and their core counts.
const MC_PRESETS: [(&str, u32); 2] = [("nehalem-mc", 8), ("amd16", 16)];

/// The measurement options (declared below) as [`Opts`], with the checks between them.
fn opts(a: PluginOpts) -> Result<Opts, String> {
    let mut o = Opts {
        system: System::parse(&a.system)?,
        workload: a.workload,
        smp: a.smp,
        params: a.params,
        presets: a.preset.map(|p| p.0).unwrap_or_default(),
        levels: a.levels,
        inclusive: a.inclusive.is_on(),
        kernel_only: a.kernel_only,
        top: a.top,
        out: a.out.unwrap_or_else(|| crate::host::env::workspace_root().join("target").join("plugin-results")),
        timeout: Duration::from_secs(a.timeout),
        core_map: a.core_map.map(|c| c.0),
        scope_all: a.scope == "all",
        custom: None,
    };
    let mut custom = Custom { disk: a.disk, ready: a.ready, load_cmd: a.load_cmd, echo: a.echo, ..Custom::default() };
    if let Some(d) = &custom.disk {
        if !d.is_file() {
            return Err(format!("--disk: `{}` is not a file", d.display()));
        }
    }
    let (cmdline, net, forwards) = (a.cmdline, a.net || !a.hostfwd.is_empty(), a.hostfwd);
    match cmdline {
        Some(c) => {
            if c.trim().is_empty() {
                return Err("--cmdline: empty".into());
            }
            custom.cmdline = c;
            if net {
                custom.net = Some(crate::host::vm::from_options(forwards)?);
            }
            if o.workload.is_none() {
                o.workload = Some("custom".into());
            }
            o.custom = Some(custom);
        }
        None => {
            if custom.disk.is_some() || net || custom.ready.is_some() || custom.load_cmd.is_some() || custom.echo {
                return Err("--disk, --net, --hostfwd, --ready, --load-cmd and --echo go with --cmdline".into());
            }
        }
    }
    if let Some(c) = &o.custom {
        if c.ready.is_some() && c.load_cmd.is_none() {
            return Err("--ready: needs --load-cmd (the host command to run once the line appears)".into());
        }
        if o.system != System::Ours {
            return Err("--cmdline: only with --system ours (a Linux guest takes --workload and --params)".into());
        }
    }
    Ok(o)
}

/// Validate a --levels spec with the simulator's own parser (the native test program), so a
/// bad geometry is one line before anything boots.
fn check_levels(built: &Built, spec: &str) -> Result<(), String> {
    let out = Command::new(&built.test_bin).args(["--check", spec]).output().map_err(|e| format!("cannot run {}: {e}", built.test_bin.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("--levels: {}", String::from_utf8_lossy(&out.stdout).trim()))
    }
}

// ---------------------------------------------------------------------------------------------
// insncount

fn cmd_insncount(o: &Opts) -> Result<(), String> {
    let built = build()?;
    let workload = o.workload.as_deref().ok_or("insncount: --workload NAME is required")?;
    let spec = RunSpec { system: o.system, workload, smp: o.smp.unwrap_or(1), params: &o.params, timeout: o.timeout, exact: true, custom: o.custom.as_ref() };
    let run = run_with_plugin(&built, &spec, "insncount", &[])?;
    let vcpus: Vec<&Record> = run.report.iter().filter(|r| r.kind == "vcpu").collect();
    let (k, u): (u64, u64) = vcpus.iter().fold((0, 0), |(k, u), r| (k + r.u("kernel"), u + r.u("user")));
    println!("insncount: {} {} on {} vCPU(s), ops={}", o.system.name(), workload, spec.smp, run.ops.map(|x| x.to_string()).unwrap_or("?".into()));
    println!("{:>5} {:>14} {:>14}", "vcpu", "kernel", "user");
    for r in &vcpus {
        println!("{:>5} {:>14} {:>14}", r.u("index"), r.u("kernel"), r.u("user"));
    }
    println!("{:>5} {:>14} {:>14}", "all", k, u);
    let per_op = run.ops.filter(|n| *n > 0).map(|n| (k as f64 / n as f64, u as f64 / n as f64));
    if let Some((pk, pu)) = per_op {
        println!("per op: {pk:.1} kernel + {pu:.1} user instructions");
    }
    let json = format!(
        "{{\"plugin\":\"insncount\",\"evidence\":{},\"system\":{},\"workload\":{},\"smp\":{},\"params\":{},\"ops\":{},\"kernel\":{k},\"user\":{u},\"per_op\":{},\"vcpus\":[{}]}}\n",
        jstr(&evidence("exact count of executed guest instructions", &spec)),
        jstr(o.system.name()),
        jstr(workload),
        spec.smp,
        jstr(&o.params),
        run.ops.map(|x| x.to_string()).unwrap_or("null".into()),
        per_op.map(|(a, b)| format!("{{\"kernel\":{},\"user\":{}}}", jnum(a), jnum(b))).unwrap_or("null".into()),
        vcpus.iter().map(|r| record_json(r)).collect::<Vec<_>>().join(",")
    );
    let p = write_out(&o.out, &format!("insncount-{}-{}-{}.json", o.system.name(), workload, spec.smp), &json)?;
    println!("wrote {}", p.display());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// cachesim

/// One placement's totals, from `place` and `cpi` records.
struct PlaceSummary {
    name: String,
    levels: usize,
    /// misses[party][level] (fetch + data), party 0 = os
    misses: [[u64; 4]; 2],
    fetch_l1: [u64; 2],
    data_l1: [u64; 2],
    cpi: f64,
}

fn summarize(report: &[Record], model: &str) -> (Vec<PlaceSummary>, Vec<Record>) {
    let levels = report.iter().find(|r| r.kind == "model" && r.get("name") == Some(model)).map(|r| r.u("levels") as usize).unwrap_or(1);
    let mut places: Vec<PlaceSummary> = Vec::new();
    for r in report.iter().filter(|r| r.kind == "place" && r.get("model") == Some(model)) {
        let name = r.get("placement").unwrap_or("?").to_string();
        let party = if r.get("party") == Some("os") { 0 } else { 1 };
        if !places.iter().any(|p| p.name == name) {
            places.push(PlaceSummary { name: name.clone(), levels, misses: [[0; 4]; 2], fetch_l1: [0; 2], data_l1: [0; 2], cpi: 0.0 });
        }
        let p = places.iter_mut().find(|p| p.name == name).expect("just added");
        for l in 0..levels.min(4) {
            p.misses[party][l] = r.u(&format!("l{}_fetch_miss", l + 1)) + r.u(&format!("l{}_data_miss", l + 1));
        }
        p.fetch_l1[party] = r.u("l1_fetch_miss");
        p.data_l1[party] = r.u("l1_data_miss");
    }
    for r in report.iter().filter(|r| r.kind == "cpi" && r.get("model") == Some(model)) {
        if let Some(p) = places.iter_mut().find(|p| Some(p.name.as_str()) == r.get("placement")) {
            p.cpi = r.f("mem_cpi");
        }
    }
    let cmp = report.iter().filter(|r| r.kind == "cmp" && r.get("model") == Some(model)).cloned().collect();
    (places, cmp)
}

fn cmd_cachesim(o: &Opts) -> Result<(), String> {
    let built = build()?;
    let workload = o.workload.as_deref().ok_or("cachesim: --workload NAME is required")?;
    let mut extra: Vec<String> = Vec::new();
    let mut presets = o.presets.clone();
    if presets.is_empty() && o.levels.is_none() {
        presets.push("nehalem".into());
    }
    for p in &presets {
        extra.push(format!("preset={p}"));
    }
    if let Some(l) = &o.levels {
        check_levels(&built, l)?;
        extra.push(format!("levels={l}"));
        extra.push(format!("inclusive={}", if o.inclusive { "on" } else { "off" }));
    }
    let smp = o.smp.unwrap_or(1);
    let mc: Vec<(&str, u32)> = MC_PRESETS.iter().filter(|(n, _)| presets.iter().any(|p| p == n)).copied().collect();
    if mc.is_empty() && (o.core_map.is_some() || o.scope_all) {
        return Err("--core-map and --scope go with a multi-core preset (--preset nehalem-mc or amd16)".into());
    }
    for (name, cores) in &mc {
        match &o.core_map {
            Some(m) => {
                if m.len() < smp as usize {
                    return Err(format!("--core-map: {} cores for {smp} vCPUs", m.len()));
                }
                if let Some(c) = m.iter().find(|&&c| c >= *cores) {
                    return Err(format!("--core-map: core {c} does not exist in {name} ({cores} cores)"));
                }
            }
            None if smp > *cores => return Err(format!("--smp {smp}: {name} has {cores} cores; give fewer vCPUs or a --core-map")),
            None => {}
        }
    }
    if let Some(m) = &o.core_map {
        extra.push(format!("map={}", m.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(":")));
    }
    if o.scope_all {
        extra.push("scope=all".into());
    }
    let spec = RunSpec { system: o.system, workload, smp: o.smp.unwrap_or(1), params: &o.params, timeout: o.timeout, exact: true, custom: o.custom.as_ref() };
    let run = run_with_plugin(&built, &spec, "cachesim", &extra)?;
    let head = run.report.first().cloned().ok_or("cachesim: empty report")?;
    let (ios, iapp) = (head.u("insns_os"), head.u("insns_app"));
    let mut text = String::new();
    let _ = writeln!(
        text,
        "cachesim: {} {} ({} vCPU, ops={}): {} OS + {} app instructions in the region; guest ran {:.1}s",
        o.system.name(),
        workload,
        spec.smp,
        run.ops.map(|x| x.to_string()).unwrap_or("?".into()),
        ios,
        iapp,
        run.elapsed.as_secs_f64()
    );
    let _ = writeln!(text, "{}", interleaving_line(&run.report, is_exact(&spec)));
    let _ = writeln!(
        text,
        "MMU-index cross-check: {} data accesses, {} user-MMU from kernel code, {} kernel-MMU from user code",
        head.u("mmu_checked"),
        head.u("mmu_user_insn_kernel"),
        head.u("mmu_kernel_insn_user")
    );
    let models: Vec<String> = run.report.iter().filter(|r| r.kind == "model").filter_map(|r| r.get("name").map(str::to_string)).collect();
    let mut json_models = Vec::new();
    let kilo = (ios + iapp).max(1) as f64 / 1000.0;
    let mut sweep_rows: Vec<(String, [f64; 4], f64)> = Vec::new();
    let mut plots = Vec::new();
    for m in &models {
        let (places, cmp) = summarize(&run.report, m);
        let levels = places.first().map(|p| p.levels).unwrap_or(1);
        if !m.starts_with("sweep-") {
            let _ = writeln!(text, "\nmodel {m}: misses by level (OS / app), memory CPI over perfect L1");
            let mut hdr = format!("{:<18}", "placement");
            for l in 0..levels {
                let _ = write!(hdr, " {:>21}", format!("L{} miss os/app", l + 1));
            }
            let _ = writeln!(text, "{hdr} {:>9} {:>8}", "mem CPI", "speedup");
            let base = places.first().map(|p| p.cpi).unwrap_or(0.0);
            for p in &places {
                let mut row = format!("{:<18}", p.name);
                for l in 0..levels {
                    let _ = write!(row, " {:>21}", format!("{}/{}", p.misses[0][l], p.misses[1][l]));
                }
                // seeds/004 fig 5: improvement assuming a non-memory CPI of 1.0
                let speedup = (1.0 + base) / (1.0 + p.cpi) - 1.0;
                let _ = writeln!(text, "{row} {:>9.4} {:>+7.2}%", p.cpi, speedup * 100.0);
            }
            if let (Some(first), Some(last)) = (places.first(), places.last()) {
                let _ = writeln!(text, "competition / cooperation, {} vs {} (per level, OS / app):", first.name, last.name);
            }
            let _ = writeln!(text, "{:<6} {:>19} {:>19} {:>19}", "level", "alone", "competition", "cooperation");
            for l in 1..=levels {
                let get = |party: &str, k: &str| {
                    cmp.iter().find(|r| r.u("level") == l as u64 && r.get("party") == Some(party)).map(|r| r.u(k)).unwrap_or(0)
                };
                let _ = writeln!(
                    text,
                    "L{l:<5} {:>19} {:>19} {:>19}",
                    format!("{}/{}", get("os", "alone"), get("app", "alone")),
                    format!("{}/{}", get("os", "competition"), get("app", "competition")),
                    format!("{}/{}", get("os", "cooperation"), get("app", "cooperation"))
                );
            }
            if m == "nehalem" {
                let bars: Vec<(String, f64)> = places.iter().map(|p| (p.name.clone(), p.cpi)).collect();
                plots.push((format!("cachesim-{}-{}-fig4-cpi.svg", o.system.name(), workload), svg_bars(&format!("Memory CPI, Nehalem model: {workload} ({})", o.system.name()), "extra cycles per instruction", &bars)));
            }
        } else {
            let get = |party: &str, k: &str| cmp.iter().filter(|r| r.u("level") == 1 && (party == "*" || r.get("party") == Some(party))).map(|r| r.u(k)).sum::<u64>();
            let shared = (get("*", "alone") + get("*", "competition")) as f64;
            let separate = (get("*", "alone") + get("*", "cooperation")) as f64;
            let dec = if shared > 0.0 { (shared - separate) / shared * 100.0 } else { 0.0 };
            sweep_rows.push((
                m.trim_start_matches("sweep-").to_string(),
                [get("os", "alone") as f64 / kilo, get("app", "alone") as f64 / kilo, get("*", "competition") as f64 / kilo, get("*", "cooperation") as f64 / kilo],
                dec,
            ));
        }
        let recs: Vec<String> = run.report.iter().filter(|r| r.get("model") == Some(m.as_str()) || (r.kind == "model" && r.get("name") == Some(m.as_str()))).map(record_json).collect();
        json_models.push(format!("{{\"name\":{},\"records\":[{}]}}", jstr(m), recs.join(",")));
    }
    for m in run.report.iter().filter(|r| r.kind == "mc") {
        let name = m.get("model").unwrap_or("?");
        let rows: Vec<&Record> = run.report.iter().filter(|r| r.kind == "mcpu" && r.get("model") == Some(name)).collect();
        text.push_str(&mc_table(m, &rows));
        json_models.push(format!(
            "{{\"name\":{},\"multicore\":true,\"header\":{},\"vcpus\":[{}]}}",
            jstr(name),
            record_json(m),
            rows.iter().map(|r| record_json(r)).collect::<Vec<_>>().join(",")
        ));
    }
    if !sweep_rows.is_empty() {
        let _ = writeln!(text, "\nsweep: single-level 8-way unified caches; misses per 1000 instructions (seeds/004 figs 2, 3)");
        let _ = writeln!(text, "{:>6} {:>9} {:>9} {:>11} {:>11} {:>15}", "size", "OS alone", "app alone", "competition", "cooperation", "split saves %");
        for (size, v, dec) in &sweep_rows {
            let _ = writeln!(text, "{size:>6} {:>9.3} {:>9.3} {:>11.3} {:>11.3} {dec:>15.2}", v[0], v[1], v[2], v[3]);
        }
        let labels: Vec<String> = sweep_rows.iter().map(|r| r.0.clone()).collect();
        let col = |i: usize| sweep_rows.iter().map(|r| r.1[i]).collect::<Vec<f64>>();
        plots.push((
            format!("cachesim-{}-{}-fig2-misses.svg", o.system.name(), workload),
            svg_lines(&format!("Shared-cache misses vs size: {workload} ({})", o.system.name()), "misses per 1000 instructions", &labels, &[("OS alone", col(0)), ("app alone", col(1)), ("competition", col(2)), ("cooperation", col(3))]),
        ));
        plots.push((
            format!("cachesim-{}-{}-fig3-split.svg", o.system.name(), workload),
            svg_lines(&format!("Miss decrease from separate OS/app caches: {workload}"), "% fewer misses when split", &labels, &[("split saves %", sweep_rows.iter().map(|r| r.2).collect())]),
        ));
    }
    print!("{text}");
    let json = format!(
        "{{\"plugin\":\"cachesim\",\"evidence\":{},\"system\":{},\"workload\":{},\"smp\":{},\"params\":{},\"ops\":{},\"insns_os\":{ios},\"insns_app\":{iapp},\"header\":{},\"models\":[{}]}}\n",
        jstr(&evidence("deterministic simulation of the guest's physical-address trace", &spec)),
        jstr(o.system.name()),
        jstr(workload),
        spec.smp,
        jstr(&o.params),
        run.ops.map(|x| x.to_string()).unwrap_or("null".into()),
        record_json(&head),
        json_models.join(",")
    );
    let p = write_out(&o.out, &format!("cachesim-{}-{}.json", o.system.name(), workload), &json)?;
    println!("wrote {}", p.display());
    write_out(&o.out, &format!("cachesim-{}-{}.txt", o.system.name(), workload), &text)?;
    for (name, svg) in plots {
        let p = write_plot(&o.out, &name, &svg)?;
        println!("wrote {} (+ .png)", p.display());
    }
    Ok(())
}

/// The multi-core model's per-vCPU tables (application, then OS): where the misses went and
/// the memory CPI, and per region entry (a request, when the guest marks each one).
fn mc_table(m: &Record, rows: &[&Record]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\nmodel {} (multi-core: {} cores, {} chips of {}, {} L3; L1I {} L1D {} L2 {} L3 {} per chip; latency L2 {} / L3 {} / sibling core {} / other chip {} / memory {} cycles; scope {})",
        m.get("model").unwrap_or("?"),
        m.u("cores"),
        m.u("chips"),
        m.u("cores_per_chip"),
        m.get("l3").unwrap_or("?"),
        m.get("l1i").unwrap_or("?"),
        m.get("l1d").unwrap_or("?"),
        m.get("l2").unwrap_or("?"),
        m.get("l3_size").unwrap_or("?"),
        m.u("lat_l2"),
        m.u("lat_l3"),
        m.u("lat_sibling"),
        m.u("lat_remote"),
        m.u("lat_mem"),
        m.get("scope").unwrap_or("?")
    );
    if m.u("unmapped") > 0 {
        let _ = writeln!(t, "warning: {} accesses in the region came from vCPUs without a core in this model", m.u("unmapped"));
    }
    for party in ["app", "os"] {
        let _ = writeln!(t, "{} (per vCPU; misses of fetches and data; /rgn = per region entry):", if party == "app" { "application (user mode)" } else { "OS (kernel mode)" });
        let _ = writeln!(
            t,
            "{:>4} {:>4} {:>4} {:>7} {:>11} {:>11} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>10} {:>10}",
            "vcpu", "core", "chip", "regions", "insns", "accesses", "L1I miss", "L1D miss", "L2 miss", "L3 miss", "sibling", "remote", "memory", "mem CPI", "L2 m/rgn", "L3 m/rgn"
        );
        let mut tot = [0u64; 11];
        for r in rows.iter().filter(|r| r.get("party") == Some(party)) {
            let regions = r.u("regions");
            let per = |x: u64| if regions > 0 { format!("{:.1}", x as f64 / regions as f64) } else { "-".into() };
            let _ = writeln!(
                t,
                "{:>4} {:>4} {:>4} {:>7} {:>11} {:>11} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8.4} {:>10} {:>10}",
                r.u("vcpu"),
                r.u("core"),
                r.u("chip"),
                regions,
                r.u("insns"),
                r.u("fetches") + r.u("data"),
                r.u("l1i_miss"),
                r.u("l1d_miss"),
                r.u("l2_miss"),
                r.u("l3_miss"),
                r.u("from_sibling"),
                r.u("from_remote"),
                r.u("from_mem"),
                r.f("mem_cpi"),
                per(r.u("l2_miss")),
                per(r.u("l3_miss"))
            );
            for (i, k) in ["regions", "insns", "fetches", "data", "l1i_miss", "l1d_miss", "l2_miss", "l3_miss", "from_sibling", "from_remote", "from_mem"].iter().enumerate() {
                tot[i] += r.u(k);
            }
        }
        let cycles: u64 = rows.iter().filter(|r| r.get("party") == Some(party)).map(|r| r.u("cycles")).sum();
        let per = |x: u64| if tot[0] > 0 { format!("{:.1}", x as f64 / tot[0] as f64) } else { "-".into() };
        let _ = writeln!(
            t,
            "{:>4} {:>4} {:>4} {:>7} {:>11} {:>11} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8.4} {:>10} {:>10}",
            "all",
            "",
            "",
            tot[0],
            tot[1],
            tot[2] + tot[3],
            tot[4],
            tot[5],
            tot[6],
            tot[7],
            tot[8],
            tot[9],
            tot[10],
            if tot[1] > 0 { cycles as f64 / tot[1] as f64 } else { 0.0 },
            per(tot[6]),
            per(tot[7])
        );
    }
    t
}

// ---------------------------------------------------------------------------------------------
// sharing

fn cmd_sharing(o: &Opts) -> Result<(), String> {
    let built = build()?;
    let workload = o.workload.as_deref().ok_or("sharing: --bench NAME is required")?;
    let spec = RunSpec { system: o.system, workload, smp: o.smp.unwrap_or(2), params: &o.params, timeout: o.timeout, exact: true, custom: o.custom.as_ref() };
    let extra: Vec<String> = if o.kernel_only { vec!["kernel_only=on".into()] } else { Vec::new() };
    let syms = symbols_for(o.system)?;
    let run = if NET_BENCHES.contains(&workload) { run_net_with_plugin(&built, &spec, "sharing", &extra)? } else { run_with_plugin(&built, &spec, "sharing", &extra)? };
    let head = run.report.first().cloned().ok_or("sharing: empty report")?;
    let lines: Vec<&Record> = run.report.iter().filter(|r| r.kind == "line").collect();
    let ops = run.ops.filter(|n| *n > 0);
    let per_op = |x: u64| ops.map(|n| format!("{:.3}", x as f64 / n as f64)).unwrap_or("-".into());
    let name_of = |r: &Record| -> String {
        if r.get("mode") == Some("u") {
            return "[user]".into();
        }
        syms.name(r.u("vaddr")).unwrap_or_else(|| "[heap/direct map]".into())
    };
    let mut text = String::new();
    let _ = writeln!(text, "sharing audit: {} {} on {} vCPUs, ops={} (symbols: {})", o.system.name(), workload, spec.smp, ops.map(|x| x.to_string()).unwrap_or("?".into()), syms.len());
    let _ = writeln!(
        text,
        "lines touched: {} kernel, {} user; written by one vCPU and touched by another: {} kernel, {} user",
        head.u("lines_kernel"),
        head.u("lines_user"),
        head.u("shared_kernel"),
        head.u("shared_user")
    );
    let _ = writeln!(
        text,
        "line transfers between vCPUs: {} kernel ({} per op), {} user ({} per op)",
        head.u("transfers_kernel"),
        per_op(head.u("transfers_kernel")),
        head.u("transfers_user"),
        per_op(head.u("transfers_user"))
    );
    // The upper bound: every access to a line another vCPU writes could find it elsewhere.
    let shared_accesses: u64 = lines.iter().map(|r| r.u("reads") + r.u("writes")).sum();
    let _ = writeln!(text, "accesses to those lines: {shared_accesses} ({} per op; the upper bound on transfers)", per_op(shared_accesses));
    let _ = writeln!(text, "{}", interleaving_line(&run.report, is_exact(&spec)));
    let _ = writeln!(text, "\n{:<18} {:<44} {:<36} {:>7} {:>7} {:>8} {:>8} {:>6}", "phys line", "data (symbol of the address)", "first writer (code)", "readers", "writers", "reads/op", "writes/op", "xfers");
    for r in lines.iter().take(o.top) {
        let code = syms.name(r.u("pc")).unwrap_or_else(|| if r.u("pc") >= 0xffff_8000_0000_0000 { "?".into() } else { "[user code]".into() });
        let _ = writeln!(
            text,
            "{:<18} {:<44} {:<36} {:>7} {:>7} {:>8} {:>8} {:>6}",
            r.get("pa").unwrap_or("?"),
            truncate(&name_of(r), 44),
            truncate(&code, 36),
            r.get("readers").unwrap_or("?"),
            r.get("writers").unwrap_or("?"),
            per_op(r.u("reads")),
            per_op(r.u("writes")),
            r.u("transfers")
        );
    }
    if lines.len() > o.top {
        let _ = writeln!(text, "... {} more lines in the JSON", lines.len() - o.top);
    }
    // Aggregate by data symbol: which kernel structures cross cores.
    let mut by_sym: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for r in &lines {
        let n = name_of(r);
        // Heap objects have no symbol: group them by the function that first wrote them.
        let n = if n.starts_with("[heap") {
            format!("[heap] written by {}", syms.name(r.u("pc")).map(|c| c.split('+').next().unwrap_or("").to_string()).unwrap_or("?".into()))
        } else {
            n
        };
        let base = n.split('+').next().unwrap_or(&n).to_string();
        let e = by_sym.entry(base).or_default();
        e.0 += 1;
        e.1 += r.u("transfers");
    }
    let mut agg: Vec<(String, (u64, u64))> = by_sym.into_iter().collect();
    agg.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then(b.1 .0.cmp(&a.1 .0)));
    let _ = writeln!(text, "\nby symbol: {:<44} {:>6} {:>9}", "", "lines", "transfers");
    for (n, (c, t)) in agg.iter().take(15) {
        let _ = writeln!(text, "  {:<52} {c:>6} {t:>9}", truncate(n, 52));
    }
    // The network benchmarks: transfers by role, after the line's first writer (approximate:
    // a line is counted whole under the code that wrote it first).
    let mut roles_json = String::from("null");
    if NET_BENCHES.contains(&workload) {
        let mut roles: BTreeMap<&str, u64> = BTreeMap::new();
        for r in &lines {
            let code = syms.name(r.u("pc")).unwrap_or_default();
            let role = if r.get("mode") == Some("u") || name_of(r) == "[user]" {
                "app+stack (user data)"
            } else if code.contains("virtio_drivers") || code.contains("NetDev8transmit") || code.contains("NetDev7post_rx") || code.contains("NetDev8complete") {
                "driver"
            } else if r.u("pc") < 0xffff_8000_0000_0000 || code.contains("NetDev4poll") || code.contains("NetDev3put") || code.contains("advance_user") {
                "IPC (channel rings)"
            } else {
                "other kernel"
            };
            *roles.entry(role).or_default() += r.u("transfers");
        }
        let _ = writeln!(text, "\nby role (first writer of the line; approximate):");
        for (k, v) in &roles {
            let _ = writeln!(text, "  {k:<28} {v:>7} transfers ({} per connection)", per_op(*v));
        }
        roles_json = format!("{{{}}}", roles.iter().map(|(k, v)| format!("{}:{v}", jstr(k))).collect::<Vec<_>>().join(","));
    }
    print!("{text}");
    let json_lines: Vec<String> = lines
        .iter()
        .map(|r| {
            let mut rec = record_json(r);
            rec.pop();
            format!("{rec},\"symbol\":{},\"writer_code\":{}}}", jstr(&name_of(r)), jstr(&syms.name(r.u("pc")).unwrap_or_default()))
        })
        .collect();
    let json = format!(
        "{{\"plugin\":\"sharing\",\"evidence\":{},\"system\":{},\"bench\":{},\"smp\":{},\"params\":{},\"ops\":{},\"shared_line_accesses\":{shared_accesses},\"roles\":{roles_json},\"summary\":{},\"interleaving\":{},\"lines\":[{}]}}\n",
        jstr(if is_exact(&spec) { "exact line-sharing count (exact mode: icount, vCPU quantum)" } else { "line-sharing count under single-threaded TCG, host-driven (not exact)" }),
        jstr(o.system.name()),
        jstr(workload),
        spec.smp,
        jstr(&o.params),
        ops.map(|x| x.to_string()).unwrap_or("null".into()),
        record_json(&head),
        run.report.iter().find(|r| r.kind == "slices").map(record_json).unwrap_or("null".into()),
        json_lines.join(",\n")
    );
    let p = write_out(&o.out, &format!("sharing-{}-{}-{}.json", o.system.name(), workload, spec.smp), &json)?;
    write_out(&o.out, &format!("sharing-{}-{}-{}.txt", o.system.name(), workload, spec.smp), &text)?;
    println!("wrote {}", p.display());
    if !agg.is_empty() {
        let bars: Vec<(String, f64)> = agg.iter().take(15).map(|(n, (_, t))| (truncate(n, 48), *t as f64)).collect();
        let title = format!("Line transfers between vCPUs by kernel symbol: {workload}, {} vCPUs ({})", spec.smp, o.system.name());
        let p = write_plot(&o.out, &format!("sharing-{}-{}-{}.svg", o.system.name(), workload, spec.smp), &svg_hbars(&title, "transfers in the region", &bars))?;
        println!("wrote {} (+ .png)", p.display());
    }
    Ok(())
}


/// The JSON's evidence string: `what`, and whether the run was in the exact mode.
fn evidence(what: &str, spec: &RunSpec) -> String {
    if is_exact(spec) {
        format!("{what} (exact mode: single-threaded TCG, icount, vCPU quantum {EXACT_QUANTUM}; repeats whatever the host's load)")
    } else {
        format!("{what} (not exact: host-driven input or timed run)")
    }
}

/// One line on how the vCPUs interleaved inside the region (the plugin's `slices` record) and
/// whether the run was in the exact mode.
fn interleaving_line(report: &[Record], exact: bool) -> String {
    let Some(r) = report.iter().find(|r| r.kind == "slices") else {
        return "interleaving: not reported".into();
    };
    let mode = if exact { "exact mode: repeats whatever the host's load" } else { "not exact: host-driven input" };
    if r.u("count") <= 1 {
        return format!("interleaving: one vCPU ran the region ({mode})");
    }
    format!(
        "interleaving: {} vCPU turns in the region, {} instructions each on average (quantum {}, longest {}; {mode})",
        r.u("count"),
        r.u("mean"),
        r.u("quantum"),
        r.u("max")
    )
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let t: String = s.chars().take(n - 1).collect();
        format!("{t}~")
    }
}

// ---------------------------------------------------------------------------------------------
// overhead

fn region_ns(serial: &str) -> Option<f64> {
    serial
        .lines()
        .filter(|l| l.starts_with("workload "))
        .filter_map(|l| parse_records(l).pop())
        .find_map(|r| r.get("region_ns").and_then(|v| v.parse::<f64>().ok()))
        .filter(|ns| *ns > 0.0)
}

/// Run time of the marked region with each plugin over plain TCG (same single-threaded TCG,
/// no icount so that the guest's clock follows the host's). The guest times its own region
/// with CLOCK_MONOTONIC just outside the markers, so boot and set-up do not dilute the ratio.
fn cmd_overhead(o: &Opts) -> Result<(), String> {
    let built = build()?;
    let workload = o.workload.as_deref().unwrap_or("zip");
    if o.system != System::Linux {
        return Err("overhead: only --system linux reports its region time so far".into());
    }
    let params = if o.params.is_empty() && workload == "zip" { "files=400" } else { o.params.as_str() };
    let spec = RunSpec { system: o.system, workload, smp: o.smp.unwrap_or(1), params, timeout: o.timeout, exact: false, custom: None };
    // The host is shared: take the fastest of a few runs of each configuration.
    const REPEAT: usize = 3;
    let (args, timeout) = guest_args(&spec, None)?;
    let mut plain = f64::MAX;
    for _ in 0..REPEAT {
        let r = crate::host::qemu::run_qemu(&args, timeout)?;
        plain = plain.min(region_ns(&r.serial).ok_or("overhead: the plain run reported no region time")? / 1e9);
    }
    println!("overhead: {} {} {} ({} vCPU); plain TCG {:.3}s in the region (fastest of {REPEAT})", o.system.name(), workload, params, spec.smp, plain);
    let mut rows = Vec::new();
    for (plugin, extra, target) in [("insncount", vec![], None), ("sharing", vec![], Some(10.0)), ("cachesim", vec!["preset=nehalem".to_string()], Some(30.0))] {
        let mut t = f64::MAX;
        for _ in 0..REPEAT {
            let run = run_with_plugin(&built, &spec, plugin, &extra)?;
            t = t.min(region_ns(&run.serial).ok_or("overhead: the plugin run reported no region time")? / 1e9);
        }
        let ratio = t / plain;
        let verdict = target.map(|x: f64| if ratio <= x { format!("(target <= {x}x: met)") } else { format!("(target <= {x}x: missed)") }).unwrap_or_default();
        println!("  {plugin:<10} {t:>8.3}s  {ratio:>6.2}x {verdict}");
        rows.push(format!("{{\"plugin\":{},\"seconds\":{},\"ratio\":{}}}", jstr(plugin), jnum(t), jnum(ratio)));
    }
    let json = format!(
        "{{\"system\":{},\"workload\":{},\"params\":{},\"plain_seconds\":{},\"runs\":[{}]}}\n",
        jstr(o.system.name()),
        jstr(workload),
        jstr(params),
        jnum(plain),
        rows.join(",")
    );
    let p = write_out(&o.out, &format!("overhead-{}-{}.json", o.system.name(), workload), &json)?;
    println!("wrote {}", p.display());
    Ok(())
}

/// `cargo xtask plugin ...` (and `cachesim`, `audit`).
pub fn main(cmd: PluginCommand) -> Result<(), crate::host::outcome::Failure> {
    match cmd {
        PluginCommand::Build => crate::host::outcome::work(build().map(|b| {
            for p in [&b.insncount, &b.cachesim, &b.sharing, &b.test_bin] {
                println!("{}", p.display());
            }
        })),
        PluginCommand::Test => crate::host::outcome::work(tests().and_then(|t| {
            println!("plugin tests: {} passed, {} failed", t.passed, t.failed);
            if t.failed > 0 {
                Err(format!("{} plugin test(s) failed", t.failed))
            } else {
                Ok(())
            }
        })),
        PluginCommand::Insncount(a) => crate::host::outcome::work(cmd_insncount(&crate::host::outcome::usage(opts(a))?)),
        PluginCommand::Cachesim(a) => crate::host::outcome::work(cmd_cachesim(&crate::host::outcome::usage(opts(a))?)),
        PluginCommand::Sharing(a) => crate::host::outcome::work(cmd_sharing(&crate::host::outcome::usage(opts(a))?)),
        PluginCommand::Overhead(a) => crate::host::outcome::work(cmd_overhead(&crate::host::outcome::usage(opts(a))?)),
        PluginCommand::Symbols(a) => {
            let o = crate::host::outcome::usage(opts(a))?;
            crate::host::outcome::work(symbols_for(o.system).map(|syms| println!("{} kernel symbols", syms.len())))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tests (`cargo xtask test` and `cargo xtask plugin test`)

fn tally(t: &mut TestTally, name: &str, ok: bool, detail: String) {
    if ok {
        t.passed += 1;
        println!("   ok   {name}");
    } else {
        t.failed += 1;
        println!("   FAIL {name}: {detail}");
    }
}

/// The simulator's synthetic-trace tests (native), then short Linux guest runs with each
/// plugin and known answers. A few minutes at most on 2 cores; every boot has a timeout.
pub fn tests() -> Result<TestTally, String> {
    println!("== plugins: cache simulator on synthetic traces");
    let mut t = TestTally::default();
    let built = match build() {
        Ok(b) => b,
        Err(e) => {
            tally(&mut t, "build plugins", false, e);
            return Ok(t);
        }
    };
    let out = Command::new(&built.test_bin).output().map_err(|e| format!("cannot run {}: {e}", built.test_bin.display()))?;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(name) = line.strip_prefix("ok ") {
            tally(&mut t, name, true, String::new());
        } else if let Some(rest) = line.strip_prefix("FAIL ") {
            tally(&mut t, rest, false, String::new());
        }
    }
    if !out.status.success() && t.failed == 0 {
        tally(&mut t, "simulator test program", false, format!("exited {:?}", out.status.code()));
    }
    tally(&mut t, "bad geometry is one clear line", check_levels(&built, "48K:8").err().is_some_and(|e| e.contains("96 sets, not a power of two")), "accepted 48K:8".into());

    println!("== plugins: Linux guest runs");
    let timeout = Duration::from_secs(180);
    let spec = |workload: &'static str, smp: u32, params: &'static str| RunSpec { system: System::Linux, workload, smp, params, timeout, exact: true, custom: None };
    let mut guest = |name: &str, r: Result<GuestRun, String>, check: &dyn Fn(&GuestRun) -> Result<(), String>| match r {
        Ok(run) => {
            let res = check(&run);
            tally(&mut t, name, res.is_ok(), res.err().unwrap_or_default());
        }
        Err(e) => tally(&mut t, name, false, e),
    };
    // insncount: both vCPUs count kernel and user instructions inside the marked region.
    guest("insncount: dupclose on 2 vCPUs counts kernel and user work", run_with_plugin(&built, &spec("dupclose", 2, "iters=200"), "insncount", &[]), &|r| {
        let h = &r.report[0];
        let v: Vec<&Record> = r.report.iter().filter(|x| x.kind == "vcpu").collect();
        if h.u("starts") != 2 || h.u("stops") != 2 {
            return Err(format!("markers: {} starts, {} stops, want 2/2", h.u("starts"), h.u("stops")));
        }
        if v.len() != 2 || v.iter().any(|x| x.u("kernel") == 0 || x.u("user") == 0) {
            return Err(format!("per-vCPU counts {:?}", v.iter().map(|x| (x.u("kernel"), x.u("user"))).collect::<Vec<_>>()));
        }
        // dup+close is a pair of system calls: far more kernel than user instructions
        let (k, u): (u64, u64) = v.iter().fold((0, 0), |a, x| (a.0 + x.u("kernel"), a.1 + x.u("user")));
        if k < 5 * u {
            return Err(format!("kernel {k} vs user {u}: expected a syscall-dominated count"));
        }
        Ok(())
    });
    // cachesim: a loop over twice a 32 KB 8-way cache misses on every line, exactly.
    let levels = vec!["levels=32K:8".to_string()];
    guest("cachesim: loop over twice the cache misses on every line", run_with_plugin(&built, &spec("stream", 1, "size=65536 passes=4"), "cachesim", &levels), &|r| {
        for pl in ["shared", "separate"] {
            let rec = r.report.iter().find(|x| x.kind == "place" && x.get("placement") == Some(pl) && x.get("party") == Some("app")).ok_or("no app record")?;
            if rec.u("l1_data_miss") != 4096 || rec.u("data") != 4096 {
                return Err(format!("{pl}: {} data accesses, {} misses; want 4096/4096", rec.u("data"), rec.u("l1_data_miss")));
            }
        }
        Ok(())
    });
    guest("cachesim: loop over half the cache misses only cold", run_with_plugin(&built, &spec("stream", 1, "size=16384 passes=4"), "cachesim", &levels), &|r| {
        let rec = r.report.iter().find(|x| x.kind == "place" && x.get("placement") == Some("separate") && x.get("party") == Some("app")).ok_or("no app record")?;
        if rec.u("l1_data_miss") != 256 || rec.u("data") != 1024 {
            return Err(format!("{} data accesses, {} misses; want 1024/256", rec.u("data"), rec.u("l1_data_miss")));
        }
        Ok(())
    });
    // cachesim with the Nehalem preset on a syscall workload: OS and app both present, the MMU
    // index agrees with the instruction address, CPI is positive.
    guest("cachesim: nehalem on null syscalls attributes OS and app by MMU index", run_with_plugin(&built, &spec("null", 1, "iters=300"), "cachesim", &["preset=nehalem".into()]), &|r| {
        let h = &r.report[0];
        if h.u("insns_os") == 0 || h.u("insns_app") == 0 {
            return Err(format!("insns os {} app {}", h.u("insns_os"), h.u("insns_app")));
        }
        if h.u("mmu_user_insn_kernel") != 0 {
            return Err(format!("{} user-MMU accesses from kernel code", h.u("mmu_user_insn_kernel")));
        }
        // user code's only kernel-MMU accesses are the CPU reading the TSS I/O bitmap for the
        // marker's `out`: a handful, not a leak of attribution
        if h.u("mmu_kernel_insn_user") > 8 {
            return Err(format!("{} kernel-MMU accesses from user code", h.u("mmu_kernel_insn_user")));
        }
        let cpi = r.report.iter().filter(|x| x.kind == "cpi" && x.get("model") == Some("nehalem")).count();
        if cpi != 3 {
            return Err(format!("{cpi} placements, want 3"));
        }
        Ok(())
    });
    // cachesim's multi-core model on Corey's filesum: four vCPUs on four chips of
    // amd16, a 1 MB buffer each (fits in a core's L2 + its chip's victim L3, 2.5 MB), four
    // passes. Locality: each vCPU misses its chip's L3 only on the first pass (16 384 lines,
    // plus the loop's code line or two); random (a rotation: every vCPU sums every buffer
    // once): every pass misses, 4 x 16 384. Catches a model that shares the L3 between chips,
    // keeps no victim L3 (then locality misses on every pass too), or counts per vCPU wrongly.
    let filesum = |mode: &'static str| {
        let params: &'static str = if mode == "random" { "mode=random size=1048576 passes=4 stride=64" } else { "mode=locality size=1048576 passes=4 stride=64" };
        run_with_plugin(&built, &spec("filesum", 4, params), "cachesim", &["preset=amd16".into(), "map=0:4:8:12".into()])
    };
    let lines = (1u64 << 20) / 64;
    let app_l3 = |r: &GuestRun, want: u64| -> Result<u64, String> {
        let rows: Vec<&Record> = r.report.iter().filter(|x| x.kind == "mcpu" && x.get("party") == Some("app")).collect();
        if rows.len() != 4 {
            return Err(format!("{} per-vCPU application records, want 4", rows.len()));
        }
        for x in &rows {
            let (l3, regions) = (x.u("l3_miss"), x.u("regions"));
            if regions != 4 || l3 < want || l3 > want + 32 || x.u("l2_miss") < 4 * lines {
                return Err(format!("vCPU {}: {regions} regions, {} L2 and {l3} L3 misses; want 4 regions, >= {} L2 and {want}..{} L3 misses", x.u("vcpu"), x.u("l2_miss"), 4 * lines, want + 32));
            }
        }
        Ok(rows.iter().map(|x| x.u("l3_miss")).sum())
    };
    let local = filesum("locality");
    let local_l3 = local.as_ref().ok().and_then(|r| app_l3(r, lines).ok());
    guest("cachesim amd16: filesum locality misses each chip's L3 only on the first pass", local, &|r| app_l3(r, lines).map(|_| ()));
    guest("cachesim amd16: filesum random misses the L3 on every pass, 4x locality", filesum("random"), &|r| {
        let total = app_l3(r, 4 * lines)?;
        let base = local_l3.ok_or("the locality run failed")?;
        if total * 10 < base * 39 {
            return Err(format!("random {total} vs locality {base} L3 misses: want >= 3.9x"));
        }
        Ok(())
    });
    // sharing: one shared counter is one line written by every vCPU; private counters none.
    let counter = run_with_plugin(&built, &spec("counter", 2, "iters=3000"), "sharing", &[]);
    let first_counter_report = counter.as_ref().map(|r| r.report.clone()).ok();
    guest("sharing: a shared counter is one line written by every vCPU", counter, &|r| {
        let h = &r.report[0];
        let user: Vec<&Record> = r.report.iter().filter(|x| x.kind == "line" && x.get("mode") == Some("u")).collect();
        if h.u("shared_user") != 1 || user.len() != 1 || user[0].u("writers") != 0x3 {
            return Err(format!("{} shared user lines, writers {:?}", h.u("shared_user"), user.iter().map(|x| x.u("writers")).collect::<Vec<_>>()));
        }
        Ok(())
    });
    // The exact mode: the same run again gives the same report, record for record,
    // and the vCPUs took turns of about the quantum inside the region. Catches a lost -icount,
    // -seed or -rtc (Linux's counts then move between boots) and a lost quantum (then 7.2's
    // scheduler starves the second vCPU under icount and the boot hangs, or the turns are
    // millions of instructions long).
    guest("sharing: the exact mode repeats record for record, in turns of the quantum", run_with_plugin(&built, &spec("counter", 2, "iters=3000"), "sharing", &[]), &|r| {
        let first = first_counter_report.as_ref().ok_or("the first counter run failed")?;
        if let Some((a, b)) = first.iter().zip(&r.report).find(|(a, b)| a != b) {
            return Err(format!("the second run differs: `{a:?}` vs `{b:?}`"));
        }
        if first.len() != r.report.len() {
            return Err(format!("the second run has {} records, the first {}", r.report.len(), first.len()));
        }
        let sl = r.report.iter().find(|x| x.kind == "slices").ok_or("no slices record")?;
        if sl.u("count") < 20 || sl.u("mean") > 2 * EXACT_QUANTUM || sl.u("quantum") != EXACT_QUANTUM {
            return Err(format!("{} turns of {} instructions on average (quantum {}): want >= 20 turns of <= {}", sl.u("count"), sl.u("mean"), sl.u("quantum"), 2 * EXACT_QUANTUM));
        }
        Ok(())
    });
    guest("sharing: private per-core counters share no user line", run_with_plugin(&built, &spec("private", 2, "iters=3000"), "sharing", &[]), &|r| {
        let h = &r.report[0];
        if h.u("shared_user") != 0 || h.u("lines_user") == 0 {
            return Err(format!("{} shared user lines of {} touched, want 0 of >0", h.u("shared_user"), h.u("lines_user")));
        }
        Ok(())
    });
    println!("   plugins: {} passed, {} failed", t.passed, t.failed);
    Ok(t)
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn json_escapes() {
        assert_eq!(jstr("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
        let r = parse_records("x n=3 h=0x10 s=abc").remove(0);
        assert_eq!(record_json(&r), "{\"kind\":\"x\",\"n\":3,\"h\":\"0x10\",\"s\":\"abc\"}");
    }
    #[test]
    fn options_reject_bad_input() {
        // The whole path of `cargo xtask plugin insncount ...`: clap (declared below), then `opts`.
        let a = |v: &[&str]| -> Result<Opts, String> {
            let args: Vec<String> = std::iter::once("insncount").chain(v.iter().copied()).map(String::from).collect();
            match crate::host::args::parse_args::<PluginArgs>("plugin", &args)? {
                PluginArgs { command: PluginCommand::Insncount(o), .. } => opts(o),
                other => panic!("{other:?}"),
            }
        };
        // the multi-core and custom-guest options
        assert!(a(&["--preset", "amd16,nehalem-mc"]).is_ok());
        assert!(a(&["--core-map", "0,4,x"]).err().unwrap().contains("not a list of core numbers"));
        assert!(a(&["--core-map", "0,4,4"]).err().unwrap().contains("core 4 is given to two vCPUs"));
        assert!(a(&["--core-map", "64"]).is_err());
        assert!(a(&["--scope", "most"]).err().unwrap().contains("--scope"));
        assert!(a(&["--top", "x"]).err().unwrap().contains("--top"));
        assert!(a(&["--timeout", "soon"]).err().unwrap().contains("--timeout"));
        assert!(a(&["--inclusive", "maybe"]).err().unwrap().contains("--inclusive"));
        assert!(a(&["--hostfwd", "80"]).err().unwrap().contains("--hostfwd"));
        assert!(a(&["--net"]).err().unwrap().contains("go with --cmdline"));
        assert!(a(&["--system", "ours", "--cmdline", "init=x", "--ready", "up"]).err().unwrap().contains("needs --load-cmd"));
        assert!(a(&["--cmdline", "init=x"]).err().unwrap().contains("only with --system ours"));
        assert!(a(&["--system", "ours", "--cmdline", " "]).err().unwrap().contains("empty"));
        assert!(a(&["--system", "ours", "--cmdline", "init=x", "--disk", "/nonexistent/img"]).err().unwrap().contains("not a file"));
        let o = a(&["--system", "ours", "--cmdline", "init=webd -- --mode locality"]).unwrap();
        assert_eq!(o.workload.as_deref(), Some("custom"));
        assert_eq!(o.custom.as_ref().map(|c| c.cmdline.as_str()), Some("init=webd -- --mode locality"));
        assert!(a(&["--system", "bsd"]).err().unwrap().contains("--system"));
        assert!(a(&["--preset", "skylake"]).err().unwrap().contains("unknown preset"));
        assert!(a(&["--smp", "0"]).err().unwrap().contains("--smp"));
        assert!(a(&["--smp", "65"]).err().unwrap().contains("--smp"));
        assert!(a(&["--frobnicate"]).err().unwrap().contains("--frobnicate"));
        let e = crate::host::args::parse_args::<PluginArgs>("plugin", &["frob".to_string()]).unwrap_err();
        assert!(e.contains("frob") && !e.contains('\n'), "{e}");
    }

}

// ---------------------------------------------------------------------------------------
// The command lines of `plugin`, `cachesim` and `audit`

#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct PluginArgs {
    #[command(subcommand)]
    pub command: PluginCommand,
}

#[derive(clap::Subcommand, Debug, Clone, PartialEq)]
pub enum PluginCommand {
    /// Build the plugins (target/qemu-plugins/*.so), the guest /init and the simulator tests
    Build,
    /// Simulator tests on synthetic traces, then short guest runs (as `cargo xtask test`)
    Test,
    /// Guest instructions per vCPU, kernel/user, inside the marked region
    Insncount(PluginOpts),
    /// CachEMU: OS/app misses, competition, cooperation, memory CPI per placement
    Cachesim(PluginOpts),
    /// Lines written by one vCPU and touched by another, with kernel symbols
    #[command(visible_alias = "audit")]
    Sharing(PluginOpts),
    /// Run time with each plugin over plain TCG on one workload
    Overhead(PluginOpts),
    /// Fetch (once) the Linux guest's kernel symbols (/proc/kallsyms, cached)
    Symbols(PluginOpts),
}

/// The measurement runs' options. insncount, cachesim and sharing run in the exact mode
/// (docs/plugins.md): their counts repeat whatever the host's load.
#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct PluginOpts {
    /// Guest system
    #[arg(long, value_name = "SYSTEM", default_value = "linux", value_parser = ["linux", "ours"])]
    pub system: String,
    /// The workload (linux: stream null dupclose ... tcpserv or a suite benchmark; ours: a suite
    /// benchmark or a microbenchmark: null fault share_private share_global stat segment ppc)
    #[arg(long, visible_alias = "bench", value_name = "NAME")]
    pub workload: Option<String>,
    /// vCPUs, 1..=64 (default 1; sharing: 2)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub smp: Option<u32>,
    /// Workload parameters (iters=, threads=, size=, passes=, files=)
    #[arg(long, value_name = "\"k=v ...\"", default_value = "", allow_hyphen_values = true)]
    pub params: String,
    /// cachesim: nehalem, sweep, nehalem-mc, amd16, comma-separated (default nehalem)
    #[arg(long, value_name = "LIST", value_parser = preset_list)]
    pub preset: Option<Presets>,
    /// Multi-core presets: vCPU i drives core Ci (e.g. 0,4,8,12: one per amd16 chip)
    #[arg(long, value_name = "C0,C1,..", value_parser = core_map)]
    pub core_map: Option<CoreMap>,
    /// Multi-core presets: simulate only inside the region, or every access after the first marker
    #[arg(long, value_name = "SCOPE", default_value = "region", value_parser = ["region", "all"])]
    pub scope: String,
    /// cachesim: custom unified hierarchy, G = SIZE:ASSOC[:LINE], e.g. 32K:8/8M:16
    #[arg(long, value_name = "G1/G2/..")]
    pub levels: Option<String>,
    /// cachesim with --levels: back-invalidate on eviction
    #[arg(long, value_enum, default_value = "on")]
    pub inclusive: OnOff,
    /// sharing: ignore user-mode accesses
    #[arg(long)]
    pub kernel_only: bool,
    /// sharing: lines to list
    #[arg(long, value_name = "N", default_value_t = 25)]
    pub top: usize,
    /// (--system ours) boot this command line instead of a workload ("init=PROG -- ARGS")
    #[arg(long, value_name = "\"init=PROG -- ARGS\"", allow_hyphen_values = true)]
    pub cmdline: Option<String>,
    /// With --cmdline: attach IMG as a virtio-blk disk
    #[arg(long, value_name = "IMG")]
    pub disk: Option<PathBuf>,
    /// With --cmdline: a NIC on QEMU's restricted user-mode network (as `cargo xtask run --net`)
    #[arg(long)]
    pub net: bool,
    /// With --cmdline: forward 127.0.0.1:H to guest port G (repeatable; implies --net)
    #[arg(long, value_name = "H:G", value_parser = hostfwd, action = clap::ArgAction::Append)]
    pub hostfwd: Vec<crate::host::vm::Forward>,
    /// With --cmdline: once a serial line contains TEXT, run --load-cmd
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    pub ready: Option<String>,
    /// With --ready: `sh -c CMD` with the forwarded port in $PORT and {port}; then QEMU is stopped
    #[arg(long, value_name = "CMD", allow_hyphen_values = true)]
    pub load_cmd: Option<String>,
    /// With --cmdline: print the serial output
    #[arg(long)]
    pub echo: bool,
    /// Where JSON and plots go (default target/plugin-results)
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Kill the guest after SECS
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub timeout: u64,
}

/// `--preset`'s list of cache-simulator presets.
#[derive(Debug, Clone, PartialEq)]
pub struct Presets(pub Vec<String>);

/// `--core-map`: vCPU i drives simulated core `0[i]`.
#[derive(Debug, Clone, PartialEq)]
pub struct CoreMap(pub Vec<u32>);

fn preset_list(v: &str) -> Result<Presets, String> {
    v.split(',')
        .map(|p| {
            if matches!(p, "nehalem" | "sweep" | "nehalem-mc" | "amd16") {
                Ok(p.to_string())
            } else {
                Err(format!("unknown preset `{p}` (nehalem, sweep, nehalem-mc, amd16)"))
            }
        })
        .collect::<Result<_, _>>()
        .map(Presets)
}

fn core_map(v: &str) -> Result<CoreMap, String> {
    let cores = v.split(',').map(|c| c.trim().parse::<u32>().ok().filter(|&c| c < 64)).collect::<Option<Vec<u32>>>();
    let cores = cores.filter(|c| !c.is_empty()).ok_or_else(|| format!("`{v}` is not a list of core numbers 0..63 (e.g. 0,4,8,12)"))?;
    if let Some(d) = cores.iter().enumerate().find(|(i, c)| cores[..*i].contains(c)) {
        return Err(format!("core {} is given to two vCPUs", d.1));
    }
    Ok(CoreMap(cores))
}
