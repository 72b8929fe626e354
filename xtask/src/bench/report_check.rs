//! `cargo xtask bench report-check [DIR] [--browser]`: is a run's report.html one that opens?
//!
//! Always: the page parses as XML, loads nothing from outside and names every benchmark of
//! DIR/results.json in a table row and an inline plot (`html::check_page`). With `--browser`
//! it is also opened in a real browser: headless Chromium (Debian package `chromium`,
//! installed on demand like QEMU) prints it to PDF, which must have pages (at least as many
//! as a page holding only the table needs), and draws it to PNG, which must carry far more
//! than the same browser's drawing of an empty page. Chromium runs with every network path
//! closed: a proxy on a closed 127.0.0.1 port, no name resolution, no background fetches; the
//! page itself loads nothing.
//!
//! Not part of `cargo xtask test` (docs/bench.md, "Checking the report"): installing Chromium
//! takes minutes and hundreds of MB, and the parse-level check runs in the host tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::html;

/// `cargo xtask bench report-check`.
pub fn command(a: &crate::bench::report_check::ReportCheckArgs) -> Result<(), String> {
    let dir = a.dir.clone().unwrap_or_else(|| crate::host::env::workspace_root().join("target").join("bench-results"));
    let names = check_dir(&dir)?;
    println!("report-check: {} is well-formed, self-contained, and names all {} benchmark(s) of results.json in a row and a plot", dir.join("report.html").display(), names.len());
    if a.browser {
        let r = render(&dir.join("report.html"), &dir.join("report-check"))?;
        println!("report-check: Chromium ({}) printed it to {} page(s) of PDF ({}) and drew a {} byte PNG ({}; an empty page draws to {} bytes)", r.version, r.pages, r.pdf.display(), r.png_bytes, r.png.display(), r.blank_png_bytes);
    }
    Ok(())
}

/// The parse-level check of DIR/report.html against DIR/results.json; the benchmark names.
pub fn check_dir(dir: &Path) -> Result<Vec<String>, String> {
    let results = super::read_results(dir)?;
    let mut names: Vec<String> = results.records.iter().map(|r| r.benchmark.clone()).collect();
    names.sort();
    names.dedup();
    if names.is_empty() {
        return Err(format!("report-check: {} has no records", dir.join("results.json").display()));
    }
    let path = dir.join("report.html");
    let page = std::fs::read_to_string(&path).map_err(|e| format!("report-check: cannot read {}: {e} (`cargo xtask bench --report {}` writes it)", path.display(), dir.display()))?;
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    html::check_page(&page, &refs).map_err(|e| format!("report-check: {}: {e}", path.display()))?;
    Ok(names)
}

/// What the browser made of the page.
pub struct Rendered {
    pub version: String,
    pub pdf: PathBuf,
    pub pages: usize,
    pub png: PathBuf,
    pub png_bytes: u64,
    pub blank_png_bytes: u64,
}

/// The browser binary of Debian's `chromium` package.
const CHROMIUM: &str = "chromium";

/// How long one browser run may take (TCG runs beside it on a busy host).
const BROWSER_TIMEOUT: Duration = Duration::from_secs(180);

/// The page count of a PDF: its page objects (`/Type /Page`, not `/Pages`). Chromium writes
/// page objects uncompressed.
pub fn pdf_pages(pdf: &[u8]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while let Some(at) = find(&pdf[i..], b"/Type") {
        let mut j = i + at + 5;
        while j < pdf.len() && (pdf[j] == b' ' || pdf[j] == b'\n' || pdf[j] == b'\r') {
            j += 1;
        }
        if pdf[j..].starts_with(b"/Page") && !pdf[j..].starts_with(b"/Pages") {
            n += 1;
        }
        i = j;
    }
    n
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Run headless Chromium on `page` with `what` (`--print-to-pdf=...` or `--screenshot=...`).
fn chromium(page: &Path, what: &str, profile: &Path) -> Result<(), String> {
    let url = format!("file://{}", page.canonicalize().map_err(|e| format!("{}: {e}", page.display()))?.display());
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            // As root (CI containers) Chromium refuses to start with its sandbox.
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--no-default-browser-check",
            "--no-pdf-header-footer",
            "--window-size=1280,2400",
            // No network at all: every request through a proxy on a closed loopback port,
            // no name resolution, none of the background services.
            "--proxy-server=127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-domain-reliability",
            "--disable-sync",
            "--disable-extensions",
            "--no-pings",
            "--disable-breakpad",
            "--metrics-recording-only",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(what)
        .arg(&url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {CHROMIUM}: {e}"))?;
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            if s.success() {
                return Ok(());
            }
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(child.stderr.as_mut().expect("piped"), &mut err);
            return Err(format!("{CHROMIUM} {what} failed ({s}): {}", err.lines().last().unwrap_or("").trim()));
        }
        if start.elapsed() > BROWSER_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{CHROMIUM} {what}: no result after {} s", BROWSER_TIMEOUT.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Print `page` to PDF and draw it to PNG in headless Chromium (installed if missing); the
/// same for an empty page, as the control. Fails if the PDF has no page or the drawing is no
/// bigger than the empty page's a few times over.
pub fn render(page: &Path, out: &Path) -> Result<Rendered, String> {
    crate::host::env::ensure_tool(CHROMIUM, &["chromium"])?;
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let version = Command::new(CHROMIUM).arg("--version").output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default();
    let profile = out.join("profile");
    let blank = out.join("blank.html");
    std::fs::write(&blank, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"/><title>blank</title></head><body></body></html>\n").map_err(|e| format!("{}: {e}", blank.display()))?;
    let (pdf, png, blank_png) = (out.join("report.pdf"), out.join("report.png"), out.join("blank.png"));
    for p in [&pdf, &png, &blank_png] {
        let _ = std::fs::remove_file(p);
    }
    chromium(page, &format!("--print-to-pdf={}", pdf.display()), &profile)?;
    chromium(page, &format!("--screenshot={}", png.display()), &profile)?;
    chromium(&blank, &format!("--screenshot={}", blank_png.display()), &profile)?;
    let pdf_bytes = std::fs::read(&pdf).map_err(|e| format!("report-check: Chromium wrote no PDF ({}): {e}", pdf.display()))?;
    if !pdf_bytes.starts_with(b"%PDF-") {
        return Err(format!("report-check: {} is not a PDF", pdf.display()));
    }
    let pages = pdf_pages(&pdf_bytes);
    if pages == 0 {
        return Err(format!("report-check: the PDF of {} has no pages", page.display()));
    }
    let size = |p: &Path| -> Result<u64, String> {
        let b = std::fs::read(p).map_err(|e| format!("report-check: Chromium wrote no PNG ({}): {e}", p.display()))?;
        if !b.starts_with(b"\x89PNG\r\n\x1a\n") {
            return Err(format!("report-check: {} is not a PNG", p.display()));
        }
        Ok(b.len() as u64)
    };
    let (png_bytes, blank_png_bytes) = (size(&png)?, size(&blank_png)?);
    // An empty white page compresses to almost nothing; text, a table and plots do not.
    if png_bytes < 4 * blank_png_bytes {
        return Err(format!("report-check: the drawing of {} ({png_bytes} bytes) is hardly more than an empty page's ({blank_png_bytes} bytes): the page did not render", page.display()));
    }
    Ok(Rendered { version, pdf, pages, png, png_bytes, blank_png_bytes })
}

/// The `report-browser` suite of `cargo xtask test`: a report redrawn from the recorded
/// results.json in testdata, checked at the parse level and in Chromium.
pub fn ci_check() -> Result<crate::host::outcome::TestTally, String> {
    println!("== report.html in headless Chromium");
    let dir = crate::host::env::target_dir().join("report-browser");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let src = crate::host::env::workspace_root().join("xtask/src/bench/testdata/results-v1-net-boots5.json");
    std::fs::copy(&src, dir.join("results.json")).map_err(|e| format!("cannot copy {}: {e}", src.display()))?;
    super::redraw(&dir)?;
    let names = check_dir(&dir)?;
    match render(&dir.join("report.html"), &dir.join("report-check")) {
        Ok(r) => {
            println!("report-browser ... ok ({}: {} benchmark(s), {} PDF page(s), PNG {} bytes against {} for an empty page)", r.version, names.len(), r.pages, r.png_bytes, r.blank_png_bytes);
            Ok(crate::host::outcome::TestTally::PASS)
        }
        Err(e) => {
            println!("report-browser ... FAILED ({e})");
            Ok(crate::host::outcome::TestTally::FAIL)
        }
    }
}

// ---------------------------------------------------------------------------------------
// The command line of `bench report-check`

#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct ReportCheckArgs {
    /// The results directory holding report.html and results.json (default target/bench-results)
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Also render the page in headless Chromium (Debian package `chromium`, installed on
    /// demand): printed to PDF (must have pages) and drawn to PNG (must not be blank)
    #[arg(long)]
    pub browser: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report redrawn from a recorded results.json passes; one that lost a benchmark's plot,
    /// or whose results.json names a benchmark the page lacks, fails naming it.
    #[test]
    fn a_redrawn_report_passes_and_a_broken_one_fails() {
        let dir = crate::host::env::target_dir().join("report-check-test");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bench/testdata/results-v1-net-boots5.json"), dir.join("results.json")).unwrap();
        assert!(check_dir(&dir).unwrap_err().contains("cannot read"), "no report.html yet");
        super::super::redraw(&dir).unwrap();
        let names = check_dir(&dir).unwrap();
        assert!(!names.is_empty());
        let page = std::fs::read_to_string(dir.join("report.html")).unwrap();
        let victim = &names[0];
        let broken = page.replace(&format!("id=\"plot-{victim}\""), "id=\"plot-gone\"");
        assert_ne!(broken, page);
        std::fs::write(dir.join("report.html"), broken).unwrap();
        assert!(check_dir(&dir).unwrap_err().contains(victim.as_str()));
    }

    /// Catches counting the page tree node (`/Pages`) as a page, or missing a page whose
    /// `/Type` and `/Page` are split by a line break.
    #[test]
    fn pdf_pages_are_counted() {
        let pdf = b"%PDF-1.4\n1 0 obj <</Type /Pages /Count 2>>\n2 0 obj <</Type /Page /Parent 1 0 R>>\n3 0 obj <</Type\n/Page>>\n4 0 obj <</Type /Catalog>>";
        assert_eq!(pdf_pages(pdf), 2);
        assert_eq!(pdf_pages(b"%PDF-1.4\n<</Type /Pages /Count 0>>"), 0);
    }
}
