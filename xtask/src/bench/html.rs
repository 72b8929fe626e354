//! report.html: one self-contained page per benchmark run: what was run (the exact
//! command, when, the machine), the table with `median [min–max]` and `noisy` marks, the
//! calibration, every plot inlined as SVG, and the full text report. No script, no external
//! style sheet, font or image: it opens offline. It is written well-formed (XHTML-compatible:
//! every element closed, attributes quoted, only XML's five entities), so the test below can
//! parse it as XML.

use std::fmt::Write as _;

use testdefs::bench_catalog::{self as catalog, BENCHES};
use crate::guest::record::{Record, Status};
use super::report::{self, esc};
use super::stats::{self, RunInfo};
use crate::guest::record::System;

const STYLE: &str = "body{font-family:'DejaVu Sans',Helvetica,Arial,sans-serif;margin:2em;max-width:76em;color:#222}\
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:.25em .6em}\
td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f3f3f3}\
.noisy{background:#fff3cd}.failed{color:#a00}code,pre{background:#f6f6f6}pre{padding:1em;overflow-x:auto}\
figure{display:inline-block;margin:.5em}dt{font-weight:bold}dd{margin:0 0 .4em 1.5em}";

/// The benchmarks of `records`, in the catalog's order.
fn benchmarks(records: &[Record]) -> Vec<&'static str> {
    BENCHES.iter().filter(|b| records.iter().any(|r| r.benchmark == b.name)).map(|b| b.name).collect()
}

/// A table cell: `class="n"` for numbers, `noisy` when the text says so.
fn td(text: &str) -> String {
    let mut class = String::from("n");
    if text.contains("noisy") {
        class.push_str(" noisy");
    }
    if text.contains("failed") || ["error", "timeout"].iter().any(|s| text.starts_with(s)) {
        class.push_str(" failed");
    }
    format!("<td class=\"{class}\">{}</td>", esc(text))
}

/// The page. `run` is results.json's `run` item (None for a file from before version 2);
/// `text_report` is what table.txt holds.
pub fn page(records: &[Record], systems: &[System], smp: &[u32], run: Option<&RunInfo>, text_report: &str) -> String {
    let mut h = String::new();
    let benches = benchmarks(records);
    let _ = writeln!(h, "<!DOCTYPE html>\n<html lang=\"en\" xmlns=\"http://www.w3.org/1999/xhtml\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>Benchmark report</title>\n<style>{STYLE}</style>\n</head>\n<body>");
    let _ = writeln!(h, "<h1>Benchmark report</h1>");
    // What was run, where.
    let _ = writeln!(h, "<h2 id=\"run\">Run</h2>\n<dl>");
    match run {
        Some(r) => {
            let _ = writeln!(h, "<dt>command</dt><dd><code>{}</code></dd>", esc(&r.command));
            let _ = writeln!(h, "<dt>started (UTC)</dt><dd>{}</dd>", esc(&r.started));
            let _ = writeln!(h, "<dt>boots per cell, seed of the order</dt><dd>{}, {}</dd>", r.boots, r.seed);
            let m = &r.machine;
            let _ = writeln!(h, "<dt>machine</dt><dd>{} ({} host CPUs); {}; {}</dd>", esc(&m.cpu), m.host_cpus, esc(&m.os), esc(&m.qemu));
            let _ = writeln!(h, "<dt>results.json version</dt><dd>{}</dd>", r.version);
            for l in &r.linux {
                let m: Vec<String> = l.mitigations.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                let _ = writeln!(
                    h,
                    "<dt>{}</dt><dd>kernel {}; command line <code>{}</code>; security modules: {}; vulnerabilities: {}{}</dd>",
                    esc(&l.system),
                    esc(&l.kernel),
                    esc(&l.cmdline),
                    esc(if l.lsm.is_empty() { "not reported" } else { &l.lsm }),
                    esc(&if m.is_empty() { "not reported".to_string() } else { m.join("; ") }),
                    l.note.as_ref().map(|n| format!(" ({})", esc(n))).unwrap_or_default()
                );
            }
        }
        None => {
            let _ = writeln!(h, "<dt>command, machine</dt><dd>not recorded (results.json written before version {})</dd>", stats::RESULTS_VERSION);
        }
    }
    let _ = writeln!(h, "<dt>evidence</dt><dd>QEMU TCG: timings at 1–2 vCPUs are emulated timing, above 2 functional only; instruction counts (insncount plugin) are exact</dd>\n</dl>");
    // The table.
    let cells = stats::summarize(records);
    let pairs = stats::pairs(records);
    let boots = cells.iter().map(|c| c.boots).max().unwrap_or(1);
    let _ = writeln!(h, "<h2 id=\"table\">Per-vCPU throughput</h2>");
    let _ = writeln!(
        h,
        "<p>ops/s per vCPU of the guest, the same divisor on both systems{}; insns/op = guest instructions (kernel + user) per operation; calibrated = each side over the share-nothing loop run in its own boot; path (ours): <em>kernel path</em> = ours enters its kernel on every operation, <em>library path</em> = ours serves it in the library OS without entering the kernel while Linux makes a system call (not a faster system call), <em>user code (both)</em> = the same user code on both. <span class=\"noisy\">noisy</span> = max/min of the calibrated value above {} over the boots, or the host's load apart by more than {} per host CPU between the boots compared: not a result. host load = the host's 1-minute load average over the row's boots.</p>",
        if boots > 1 { format!(", median [min–max] over {boots} boots per cell") } else { String::new() },
        stats::NOISY,
        stats::NOISY_LOAD_PER_CPU
    );
    let linuxes: Vec<&str> = crate::guest::record::LINUX_NAMES.iter().copied().filter(|l| records.iter().any(|r| r.system == *l)).collect();
    let mut head = String::from("<th>benchmark</th><th>vCPUs</th><th>path (ours)</th>");
    for l in &linuxes {
        let _ = write!(head, "<th>{l} ops/s/vCPU</th><th>{l} insns/op</th>");
    }
    head.push_str("<th>ours ops/s/vCPU</th><th>ours per service core</th><th>ours insns/op</th>");
    for l in &linuxes {
        let _ = write!(head, "<th>ours/{l}</th><th>ours/{l} calibrated</th>");
    }
    head.push_str("<th>host load</th>");
    let _ = writeln!(h, "<table id=\"results\">\n<thead><tr>{head}</tr></thead>\n<tbody>");
    let insns = |sys: &str, b: &str, n: u32| records.iter().filter(|r| r.system == sys && r.benchmark == b && r.cores == n).find_map(|r| r.instructions_per_op()).map(report::si).unwrap_or_else(|| "-".into());
    for b in &benches {
        for &n in smp {
            if !records.iter().any(|r| r.benchmark == *b && r.cores == n) {
                continue;
            }
            let o = report::summary(&cells, "ours", b, n);
            let label = if n > 2 { format!("{n} (functional)") } else { n.to_string() };
            let mut row = format!("<tr data-benchmark=\"{}\" data-cores=\"{n}\"><td><a href=\"#plot-{}\">{}</a></td><td class=\"n\">{label}</td>{}", esc(b), esc(b), esc(b), td(&super::paths::label(records, b, n)));
            for l in &linuxes {
                row.push_str(&td(&report::cell(report::summary(&cells, l, b, n), records)));
                row.push_str(&td(&insns(l, b, n)));
            }
            row.push_str(&td(&report::cell(o, records)));
            row.push_str(&td(&o.and_then(|c| c.per_service_core_throughput.as_ref()).map(|s| report::range(s, report::si)).unwrap_or_else(|| "-".into())));
            row.push_str(&td(&insns("ours", b, n)));
            for l in &linuxes {
                let p = pairs.iter().find(|p| p.linux == *l && p.benchmark == *b && p.cores == n);
                row.push_str(&td(&report::pair_cell(p, |p| p.ratio.as_ref(), false)));
                row.push_str(&td(&report::pair_cell(p, |p| p.calibrated_ratio.as_ref(), true)));
            }
            let loads: Vec<f64> = records.iter().filter(|r| r.benchmark == *b && r.cores == n && r.status == Status::Ok).filter_map(|r| r.host.as_ref().map(|x| x.load1())).collect();
            row.push_str(&td(&stats::spread(&loads).map(|s| report::range(&s, |x| format!("{x:.1}"))).unwrap_or_else(|| "-".into())));
            let _ = writeln!(h, "{row}</tr>");
        }
    }
    let _ = writeln!(h, "</tbody>\n</table>");
    let mut why: Vec<String> = Vec::new();
    for r in records.iter().filter(|r| r.status != Status::Ok) {
        let line = format!("{} on {}: {} ({})", r.benchmark, r.system, r.status.as_str(), r.reason.as_deref().unwrap_or("no reason given"));
        if !why.contains(&line) {
            why.push(line);
        }
    }
    if !why.is_empty() {
        let _ = writeln!(h, "<h3>Runs without a result</h3>\n<ul>");
        for line in why {
            let _ = writeln!(h, "<li>{}</li>", esc(&line));
        }
        let _ = writeln!(h, "</ul>");
    }
    // The calibration: the share-nothing loop's own cells and its scaling.
    let _ = writeln!(h, "<h2 id=\"calibration\">Calibration</h2>\n<p>The share-nothing calibration (<code>{}</code>: a register-only loop, no memory traffic, no kernel) per system and vCPU count, steps/s per core; every boot also runs it after its benchmark, and the calibrated columns divide by that.</p>", catalog::CALIBRATION);
    let _ = writeln!(h, "<table id=\"calib\">\n<thead><tr><th>system</th><th>vCPUs</th><th>steps/s/core</th><th>scaling over {} vCPU</th></tr></thead>\n<tbody>", smp.first().copied().unwrap_or(1));
    for sys in ["linux", "linux-tuned", "ours"] {
        for &n in smp {
            let Some(c) = report::summary(&cells, sys, catalog::CALIBRATION, n) else { continue };
            let base = smp.first().copied().unwrap_or(n);
            let scaling = report::ratio(stats::scaling_of_medians(&cells, sys, catalog::CALIBRATION, base, n, |c| c.per_core.as_ref()));
            let _ = writeln!(h, "<tr><td>{sys}</td><td class=\"n\">{n}</td>{}{}</tr>", td(&report::cell(Some(c), records)), td(&scaling));
        }
    }
    let _ = writeln!(h, "</tbody>\n</table>");
    // Every plot, inline.
    let _ = writeln!(h, "<h2 id=\"plots\">Plots</h2>\n<p>Per-vCPU throughput against vCPUs, a line per system; with several boots the median and a min–max bar.</p>");
    for b in &benches {
        let svg = report::svg(b, records, systems, smp);
        let _ = writeln!(h, "<figure id=\"plot-{}\">\n{}</figure>", esc(b), svg.trim_end());
    }
    // The text report: scaling, network and noisy rows, as table.txt has them.
    let _ = writeln!(h, "<h2 id=\"text\">Full text report (table.txt)</h2>\n<pre>{}</pre>", esc(text_report));
    let _ = writeln!(h, "<p>Written by <code>cargo xtask bench</code>; <code>cargo xtask bench --report DIR</code> rewrites it from DIR/results.json (docs/bench.md).</p>\n</body>\n</html>");
    h
}

/// Today's UTC date and time, `YYYY-MM-DD HH:MM:SS` (no date crate: days to civil date by
/// Howard Hinnant's algorithm).
pub fn utc_now() -> String {
    crate::host::date::utc(crate::host::date::unix_now())
}

/// The command as a user would type it again: `cargo xtask bench` and the arguments, each
/// quoted for a POSIX shell where it needs to be.
pub fn command_line(args: &[String]) -> String {
    let mut out = String::from("cargo xtask bench");
    for a in args {
        out.push(' ');
        if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_=.,/:@+".contains(c)) {
            out.push_str(a);
        } else {
            out.push('\'');
            out.push_str(&a.replace('\'', "'\\''"));
            out.push('\'');
        }
    }
    out
}

/// The page as XML; `<!DOCTYPE html>` is a DTD to roxmltree, allowed here (it has no
/// internal subset, so no entity can be declared).
fn parse(html: &str) -> Result<roxmltree::Document<'_>, roxmltree::Error> {
    roxmltree::Document::parse_with_options(html, roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() })
}

/// Checks of a generated report that CI runs (`cargo test -p xtask`): it parses as XML
/// (every tag balanced, every attribute quoted, no stray `&`), its root is `html`, it loads
/// nothing from outside (no `src`/`href` but in-page anchors, no script), and it names every
/// benchmark of the run in a table row and in an inline SVG plot. `cargo xtask bench
/// report-check` runs it on a real run's page (bench/report_check.rs).
pub fn check_page(html: &str, benchmarks: &[&str]) -> Result<(), String> {
    let doc = parse(html).map_err(|e| format!("not well-formed: {e}"))?;
    let root = doc.root_element();
    if root.tag_name().name() != "html" {
        return Err(format!("root element is <{}>, not <html>", root.tag_name().name()));
    }
    for n in doc.descendants().filter(|n| n.is_element()) {
        let name = n.tag_name().name();
        if name == "script" || name == "link" || name == "img" || name == "iframe" {
            return Err(format!("<{name}> would load or run something"));
        }
        for a in n.attributes() {
            if (a.name() == "src" || a.name() == "href") && !a.value().starts_with('#') {
                return Err(format!("<{name} {}=\"{}\"> points outside the page", a.name(), a.value()));
            }
        }
    }
    let rows: Vec<&str> = doc.descendants().filter(|n| n.has_tag_name("tr")).filter_map(|n| n.attribute("data-benchmark")).collect();
    let plots: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("figure") && n.children().any(|c| c.tag_name().name() == "svg"))
        .filter_map(|n| n.attribute("id")?.strip_prefix("plot-"))
        .collect();
    for b in benchmarks {
        if !rows.contains(b) {
            return Err(format!("no table row for `{b}`"));
        }
        if !plots.contains(b) {
            return Err(format!("no inline plot for `{b}`"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::stats::Machine;
    use super::*;
    use crate::host::date::utc;

    fn good(sys: &str, bench: &str, cores: u32, boot: u32, ops: u64) -> Record {
        let spec = catalog::find(bench).unwrap();
        let mut r = Record::without_result(sys, spec, vec![("iters".into(), 10)], cores, Status::Ok, "");
        r.reason = None;
        (r.boot, r.workers, r.ops, r.ns, r.busy_ns) = (boot, Some(cores as u64), Some(ops), Some(1_000_000), Some(1_000_000));
        (r.calib_ops, r.calib_ns, r.instructions_note) = (Some(1000 * cores as u64), Some(1_000_000), Some("off".into()));
        r
    }

    fn sample() -> Vec<Record> {
        let mut v = Vec::new();
        for boot in 1..=3 {
            for cores in [1, 2] {
                // Linux's dupclose varies threefold over the boots: noisy.
                v.push(good("linux", "dupclose", cores, boot, 1000 * boot as u64));
                v.push(good("ours", "dupclose", cores, boot, 1500));
                v.push(good("linux", "calib", cores, boot, 5000));
                v.push(good("ours", "calib", cores, boot, 5000));
            }
        }
        // A benchmark whose every boot failed still has its row and its plot; its reason
        // holds characters that must be escaped.
        v.push(Record::without_result("ours", catalog::find("stat_mt").unwrap(), vec![], 1, Status::Error, "guest: <no result> & \"quit\""));
        v.push(good("linux", "stat_mt", 1, 1, 700));
        v
    }

    fn run_info() -> RunInfo {
        RunInfo {
            version: stats::RESULTS_VERSION,
            command: command_line(&["--only".into(), "dupclose,stat_mt".into(), "--boots".into(), "3".into(), "--param".into(), "a b".into()]),
            started: utc(0),
            machine: Machine { cpu: "Test CPU <2 cores>".into(), host_cpus: 2, os: "Linux 6.1".into(), qemu: "QEMU emulator version 9.2.0".into() },
            boots: 3,
            seed: 1,
            linux: Vec::new(),
        }
    }

    /// Catches a report.html that a browser or parser would choke on (an unclosed tag, an
    /// unescaped reason or command), one that leaves a benchmark out, loads anything from
    /// outside, or drops the noisy mark, the calibration or the run's command and machine.
    #[test]
    fn report_is_well_formed_and_names_every_benchmark() {
        let records = sample();
        let run = run_info();
        let html = page(&records, &[System::Ours, System::Linux], &[1, 2], Some(&run), &report::table(&records, &[1, 2]));
        check_page(&html, &["dupclose", "calib", "stat_mt"]).unwrap();
        assert!(html.contains("<code>cargo xtask bench --only dupclose,stat_mt --boots 3 --param &apos;a b&apos;</code>") || html.contains("<code>cargo xtask bench --only dupclose,stat_mt --boots 3 --param 'a b'</code>"), "the exact command");
        assert!(html.contains("Test CPU &lt;2 cores&gt; (2 host CPUs)"));
        assert!(html.contains("1970-01-01 00:00:00"));
        let doc = parse(&html).unwrap();
        let row = doc.descendants().find(|n| n.attribute("data-benchmark") == Some("dupclose") && n.attribute("data-cores") == Some("1")).unwrap();
        // benchmark, vCPUs, path, then Linux's per-vCPU throughput.
        let linux = row.children().filter(|c| c.has_tag_name("td")).nth(3).unwrap();
        assert_eq!(linux.text(), Some("2.00M [1.00M–3.00M] noisy"));
        assert!(linux.attribute("class").unwrap().contains("noisy"));
        let calib = doc.descendants().find(|n| n.attribute("id") == Some("calib")).unwrap();
        assert_eq!(calib.descendants().filter(|n| n.has_tag_name("tr")).count(), 1 + 4, "header + 2 systems x 2 vCPU counts");
        assert!(html.contains("guest: &lt;no result&gt; &amp; &quot;quit&quot;"));
        // Old results.json (no run item): the page says so and is still whole.
        let old = page(&records, &[System::Ours, System::Linux], &[1, 2], None, "");
        check_page(&old, &["dupclose", "stat_mt"]).unwrap();
        assert!(old.contains("not recorded"));
    }

    /// The checker itself must fail on what it is there to catch.
    #[test]
    fn check_page_rejects_broken_pages() {
        let records = sample();
        let html = page(&records, &[System::Ours, System::Linux], &[1, 2], Some(&run_info()), "");
        assert!(check_page(&html.replacen("</table>", "", 1), &[]).unwrap_err().contains("not well-formed"));
        assert!(check_page(&html.replacen("<td", "<td a=1", 1), &[]).is_err(), "unquoted attribute");
        assert!(check_page(&html.replacen("</body>", "<img src=\"http://example.invalid/x.png\"/></body>", 1), &[]).is_err());
        assert!(check_page(&html, &["mempass_procs"]).unwrap_err().contains("mempass_procs"));
        let no_plot = html.replacen("id=\"plot-dupclose\"", "id=\"plot-gone\"", 1);
        assert!(check_page(&no_plot, &["dupclose"]).unwrap_err().contains("no inline plot"));
    }

    #[test]
    fn dates_and_quoting() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400 + 3661), "2000-02-29 01:01:01");
        assert_eq!(utc(1_795_564_800), "2026-11-25 00:00:00");
        assert_eq!(command_line(&["--smp".into(), "1,2".into(), "--param".into(), "it's".into(), "".into()]), "cargo xtask bench --smp 1,2 --param 'it'\\''s' ''");
    }
}
