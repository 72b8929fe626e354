//! `cargo xtask metis sweep wc|wri|wrmem [--smp 1,2] [--systems ours,linux] [run options]`:
//! one boot per system and vCPU count, then a table (markdown) and a plot (SVG, PNG when
//! rsvg-convert is there) of each phase's time against vCPUs, both systems side by side,
//! with the soft faults and each boot's calibration rate. Written to
//! `target/metis-results/APP.{md,svg,png}` (or `--out-dir`).
//!
//! Times are TCG wall time inside the guest, one boot each: emulated evidence at 1-2 vCPUs,
//! functional only above (DESIGN.md "Measurement"); the table's calibrated column multiplies
//! each time by the calibration rate of its own boot.

use std::fmt::Write as _;
use std::fs;

use super::{calib_rate, run_once, MetisResult, MetisRun};
use crate::metis::options::MetisRunArgs;
use crate::metis::options::MetisSweepArgs;

/// Phases in the plot, with their shades per system.
const PHASES: [(&str, &str); 3] = [("map", "map_us"), ("reduce", "reduce_us"), ("merge", "merge_us")];

struct Point {
    system: String,
    smp: u32,
    res: Result<MetisResult, String>,
}

/// `sweep all [--input FILE] [options]`: the sweep of each application, `wc`, `wri` and
/// `wrmem`, one after the other: three tables and three plots. Without `--input`, `wc` and
/// `wri` read the text `wrmem` generates (`--size`, `--seed`), written to
/// `OUT_DIR/generated-SIZE-SEED.txt`, so the three run on the same bytes.
pub fn all(args: &MetisSweepArgs) -> Result<(), String> {
    let out_dir = args.out_dir.clone().unwrap_or_else(|| crate::host::env::target_dir().join("metis-results"));
    let input = match &args.run.input {
        Some(f) => f.clone(),
        None => {
            let d = MetisRun::default();
            let (size, seed) = (args.run.size.unwrap_or(d.size), args.run.seed.unwrap_or(d.seed));
            fs::create_dir_all(&out_dir).map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
            let f = out_dir.join(format!("generated-{size}-{seed}.txt"));
            let mut text = vec![0u8; usize::try_from(size).map_err(|_| "sweep all: --size too large")?];
            mapreduce::gen::fill(seed, &mut text);
            fs::write(&f, &text).map_err(|e| format!("cannot write {}: {e}", f.display()))?;
            f
        }
    };
    let mut failed = Vec::new();
    for app in ["wc", "wri", "wrmem"] {
        let run = MetisRunArgs { input: (app != "wrmem").then(|| input.clone()), digest_only: true, ..args.run.clone() };
        println!("== metis sweep {app}");
        if let Err(e) = super::run_from(app, 2, run).and_then(|base| main(args, base)) {
            println!("metis sweep {app}: {e}");
            failed.push(app);
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("metis sweep all: {} failed", failed.join(", ")))
    }
}

/// `sweep APP`: `base` is the boot of APP with the run options (options.rs), checked.
pub fn main(args: &MetisSweepArgs, base: MetisRun) -> Result<(), String> {
    let smp_list = args.smp.clone().map_or(vec![1u32, 2], |l| l.0);
    let systems = if args.systems.is_empty() { vec!["ours".to_string(), "linux".to_string()] } else { args.systems.clone() };
    let out_dir = args.out_dir.clone().unwrap_or_else(|| crate::host::env::target_dir().join("metis-results"));
    let ours = if systems.iter().any(|s| s == "ours") { Some(super::prepare_ours()?) } else { None };
    let linux = if systems.iter().any(|s| s == "linux") { Some(super::prepare_linux()?) } else { None };
    let mut points = Vec::new();
    for &smp in &smp_list {
        for sys in &systems {
            let r = MetisRun { system: sys.clone(), smp, ..base.clone() };
            let res = run_once(&r, ours.as_ref(), linux.as_ref());
            match &res {
                Ok(x) => println!("metis sweep: {sys} at {smp} vCPUs: map {} ms, reduce {} ms, merge {} ms", ms(x, "map_us"), ms(x, "reduce_us"), ms(x, "merge_us")),
                Err(e) => println!("metis sweep: {sys} at {smp} vCPUs: FAILED: {e}"),
            }
            points.push(Point { system: sys.clone(), smp, res });
        }
    }
    // Every system must have given the same output as every other (by its digest).
    let digests: Vec<(u64, u64, u64)> = points.iter().filter_map(|p| p.res.as_ref().ok().map(|r| r.digest)).collect();
    if digests.windows(2).any(|w| w[0] != w[1]) {
        return Err("metis sweep: the runs disagree on the output (digests differ)".into());
    }
    fs::create_dir_all(&out_dir).map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    let what = if base.app == "wrmem" { format!("wrmem, {} bytes of generated text (seed {})", base.size, base.seed) } else { format!("{} of {}", base.app, base.input.as_ref().map(|p| p.display().to_string()).unwrap_or_default()) };
    let md = table(&what, &base, &points);
    let svg = plot(&what, &base, &points, &smp_list, &systems);
    let (mdp, svgp) = (out_dir.join(format!("{}.md", base.app)), out_dir.join(format!("{}.svg", base.app)));
    fs::write(&mdp, &md).map_err(|e| format!("cannot write {}: {e}", mdp.display()))?;
    fs::write(&svgp, &svg).map_err(|e| format!("cannot write {}: {e}", svgp.display()))?;
    print!("{md}");
    println!("wrote {} and {}", mdp.display(), svgp.display());
    let png = svgp.with_extension("png");
    match crate::host::env::ensure_tool("rsvg-convert", &["librsvg2-bin"]).and_then(|_| {
        let st = std::process::Command::new("rsvg-convert").arg("-o").arg(&png).arg(&svgp).status().map_err(|e| e.to_string())?;
        if st.success() {
            Ok(())
        } else {
            Err("rsvg-convert failed".into())
        }
    }) {
        Ok(()) => println!("wrote {}", png.display()),
        Err(e) => println!("no PNG: {e}"),
    }
    if points.iter().any(|p| p.res.is_err()) {
        return Err("metis sweep: some runs failed (see above)".into());
    }
    Ok(())
}

fn ms(r: &MetisResult, key: &str) -> String {
    r.phases.get(key).map(|us| format!("{:.1}", *us as f64 / 1000.0)).unwrap_or("?".into())
}

fn table(what: &str, base: &MetisRun, points: &[Point]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Metis {what}; ours layout {}; Linux THP {}; TCG, one boot per row (emulated timing at 1-2 vCPUs, functional above)\n", base.layout, if base.linux_thp { "default" } else { "off" });
    let _ = writeln!(s, "| system | vCPUs | map ms | reduce ms | merge ms | map faults | reduce faults | reducers' new arena pages | merge faults | calib steps/ns/core | map+reduce+merge calibrated |");
    let _ = writeln!(s, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for p in points {
        match &p.res {
            Ok(r) => {
                let g = |k: &str| r.phases.get(k).copied().unwrap_or(0);
                let total_ms = (g("map_us") + g("reduce_us") + g("merge_us")) as f64 / 1000.0;
                let (c, cal) = match calib_rate(r) {
                    Some(c) => (format!("{c:.3}"), format!("{:.0}", total_ms * c)),
                    None => ("-".into(), "-".into()),
                };
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {c} | {cal} |",
                    p.system,
                    p.smp,
                    ms(r, "map_us"),
                    ms(r, "reduce_us"),
                    ms(r, "merge_us"),
                    g("map_faults"),
                    g("reduce_faults"),
                    g("reduce_arena_pages"),
                    g("merge_faults")
                );
            }
            Err(e) => {
                let _ = writeln!(s, "| {} | {} | failed: {} | | | | | | | | |", p.system, p.smp, e.replace('|', "/"));
            }
        }
    }
    let _ = writeln!(s, "\n(calibrated: ms x the boot's calibration rate in steps/ns per core, i.e. millions of calibration-loop steps one core would do in that time)");
    s
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Stacked bars: for each vCPU count one bar per system, map/reduce/merge stacked.
fn plot(what: &str, base: &MetisRun, points: &[Point], smp: &[u32], systems: &[String]) -> String {
    let (w, h) = (640.0, 420.0);
    let (l, r, top, bot) = (70.0, 150.0, 70.0, 60.0);
    let (pw, ph) = (w - l - r, h - top - bot);
    let total = |p: &Point| p.res.as_ref().ok().map(|x| PHASES.iter().map(|(_, k)| x.phases.get(*k).copied().unwrap_or(0)).sum::<u64>() as f64 / 1000.0);
    let max = points.iter().filter_map(total).fold(0.0, f64::max).max(1e-3);
    let step = {
        let raw = max / 5.0;
        let mag = 10f64.powf(raw.log10().floor());
        [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|&s| s >= raw).unwrap_or(10.0 * mag)
    };
    let ymax = (max / step).ceil() * step;
    let y_of = |v: f64| top + ph - v / ymax * ph;
    let mut s = String::new();
    let _ = writeln!(s, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">");
    let _ = writeln!(s, "<rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>");
    let _ = writeln!(s, "<text x=\"{l}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">Metis {}: time by phase</text>", esc(&base.app));
    let _ = writeln!(s, "<text x=\"{l}\" y=\"40\" font-size=\"11\" fill=\"#444\">{}</text>", esc(what));
    let _ = writeln!(s, "<text x=\"{l}\" y=\"55\" font-size=\"11\" fill=\"#444\">ours: {} layout; QEMU TCG, one boot per bar, emulated timing (1-2 vCPUs)</text>", esc(&base.layout));
    let mut v = 0.0;
    while v <= ymax + step / 2.0 {
        let y = y_of(v);
        let _ = writeln!(s, "<line x1=\"{l}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>", l + pw);
        let _ = writeln!(s, "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">{}</text>", l - 6.0, y + 4.0, v);
        v += step;
    }
    let _ = writeln!(s, "<text x=\"16\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 16 {:.1})\">ms (guest TSC)</text>", top + ph / 2.0, top + ph / 2.0);
    let groups = smp.len().max(1) as f64;
    let gw = pw / groups;
    let bw = (gw * 0.7 / systems.len().max(1) as f64).min(60.0);
    let shades = |sys: &str| -> [&str; 3] {
        if sys == "ours" {
            ["#d62728", "#ff9896", "#7f1d1d"]
        } else {
            ["#1f77b4", "#aec7e8", "#0b3c5d"]
        }
    };
    for (gi, &n) in smp.iter().enumerate() {
        let gx = l + gw * gi as f64 + (gw - bw * systems.len() as f64) / 2.0;
        for (si, sys) in systems.iter().enumerate() {
            let x = gx + bw * si as f64;
            let Some(p) = points.iter().find(|p| p.smp == n && &p.system == sys) else { continue };
            match &p.res {
                Ok(res) => {
                    let mut acc = 0.0;
                    for (pi, (_, key)) in PHASES.iter().enumerate() {
                        let v = res.phases.get(*key).copied().unwrap_or(0) as f64 / 1000.0;
                        let (y0, y1) = (y_of(acc), y_of(acc + v));
                        let _ = writeln!(s, "<rect x=\"{x:.1}\" y=\"{y1:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"/>", bw - 2.0, (y0 - y1).max(0.0), shades(sys)[pi]);
                        acc += v;
                    }
                }
                Err(_) => {
                    let _ = writeln!(s, "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"middle\">failed</text>", x + bw / 2.0, top + ph - 4.0);
                }
            }
            let _ = writeln!(s, "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\" text-anchor=\"middle\">{}</text>", x + bw / 2.0, top + ph + 12.0, sys);
        }
        let _ = writeln!(s, "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\">{n} vCPU{}</text>", l + gw * (gi as f64 + 0.5), top + ph + 28.0, if n == 1 { "" } else { "s" });
    }
    let _ = writeln!(s, "<line x1=\"{l}\" y1=\"{top}\" x2=\"{l}\" y2=\"{:.1}\" stroke=\"black\"/>", top + ph);
    let _ = writeln!(s, "<line x1=\"{l}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>", top + ph, l + pw, top + ph);
    // Legend.
    let mut ly = top;
    for sys in systems {
        for (pi, (name, _)) in PHASES.iter().enumerate() {
            let _ = writeln!(s, "<rect x=\"{:.1}\" y=\"{ly:.1}\" width=\"12\" height=\"12\" fill=\"{}\"/>", l + pw + 16.0, shades(sys)[pi]);
            let _ = writeln!(s, "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">{sys} {name}</text>", l + pw + 34.0, ly + 10.0);
            ly += 18.0;
        }
        ly += 8.0;
    }
    s.push_str("</svg>\n");
    s
}
