//! `cargo xtask mutants`: mutation testing as a standing tool (docs/testing.md).
//!
//! The catalog (`catalog.rs`) holds named semantic mutations: each a small source change
//! (file, exact original snippet, replacement), the bug it plants, and the checks that should
//! catch it (`cargo xtask test --only PATTERN` suites, or a host `cargo test`). The tool
//! copies the workspace (tracked and untracked-but-not-ignored files) into a scratch tree,
//! `target/mutants/tree`, with its own target directory, `target/mutants/target`, kept
//! between mutants so that only the changed crate (and what depends on it) rebuilds. Then:
//!
//! 1. **Baseline**: the unmutated scratch tree is built and every check the selected mutants
//!    name is run once. If one fails there, nothing a mutant does could be read from it: the
//!    tool stops (a check that fails anyway would count every mutant as killed).
//! 2. **Each mutant**: its snippet is replaced in the scratch copy (it must occur exactly once,
//!    else the entry is `broken`), the tree is built (a build failure is `unviable`, not
//!    counted), and its checks run in order until one fails (`killed`, naming the check; a
//!    check that outruns its time limit is killed too: the mutant made it hang) or all pass
//!    (`survived`). The file is put back before the next mutant.
//!
//! One mutant at a time, one check at a time: the host has two cores. Every command's output
//! goes to `target/mutants/logs/NAME.log`; the table goes to `target/mutants/report.txt` too.
//! The exit status is failure if any mutant survived or any entry is broken.

mod catalog;

pub use catalog::CATALOG;

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// One check a mutant should fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// `cargo xtask test --only PATTERN` in the scratch tree (one or more suites by name).
    Suite(&'static str),
    /// `cargo test ARGS...` in the scratch tree (host crates), e.g. `&["-p", "percore"]`.
    Cargo(&'static [&'static str]),
}

impl Check {
    fn describe(&self) -> String {
        match self {
            Check::Suite(p) => format!("test --only \"{p}\""),
            Check::Cargo(args) => format!("cargo test {}", args.join(" ")),
        }
    }
}

/// A named semantic mutation.
#[derive(Clone, Copy, Debug)]
pub struct Mutant {
    pub name: &'static str,
    /// Path from the workspace root.
    pub file: &'static str,
    /// Must occur exactly once in `file`.
    pub original: &'static str,
    pub replacement: &'static str,
    /// The checks that should catch it, cheapest first.
    pub checks: &'static [Check],
    /// The bug it plants, in one line.
    pub plants: &'static str,
}

/// Replace `m.original` by `m.replacement` in `text`: an error unless the original occurs
/// exactly once (a catalog entry that no longer matches, or matches ambiguously, is broken).
pub fn apply(text: &str, m: &Mutant) -> Result<String, String> {
    match text.matches(m.original).count() {
        1 => Ok(text.replacen(m.original, m.replacement, 1)),
        0 => Err(format!("{}: the original snippet is not in {}", m.name, m.file)),
        n => Err(format!("{}: the original snippet occurs {n} times in {} (must be once)", m.name, m.file)),
    }
}

/// Problems with the catalog itself, checked against the tree at `root`: names unique and
/// plain, each snippet present exactly once and changed by its replacement, each mutant with
/// at least one check, and each suite pattern naming a suite of `cargo xtask test`.
pub fn catalog_problems(catalog: &[Mutant], root: &Path, suites: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    for (i, m) in catalog.iter().enumerate() {
        if catalog[..i].iter().any(|o| o.name == m.name) {
            problems.push(format!("{}: name used twice", m.name));
        }
        if m.name.is_empty() || !m.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
            problems.push(format!("{:?}: names are lowercase words joined by `_`", m.name));
        }
        if m.original == m.replacement {
            problems.push(format!("{}: the replacement changes nothing", m.name));
        }
        if m.checks.is_empty() {
            problems.push(format!("{}: no check named to catch it", m.name));
        }
        if m.plants.is_empty() {
            problems.push(format!("{}: says nothing of the bug it plants", m.name));
        }
        for c in m.checks {
            if let Check::Suite(p) = c {
                if !suites.iter().any(|s| s.contains(p)) {
                    problems.push(format!("{}: no suite of `cargo xtask test` matches --only \"{p}\"", m.name));
                }
            }
        }
        match fs::read_to_string(root.join(m.file)) {
            Ok(text) => {
                if let Err(e) = apply(&text, m) {
                    problems.push(e);
                }
            }
            Err(e) => problems.push(format!("{}: cannot read {}: {e}", m.name, m.file)),
        }
    }
    problems
}

/// How one mutant fared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A check failed: its description, and whether it was by running out of time.
    Killed { by: String, timed_out: bool },
    Survived,
    /// It did not build.
    Unviable,
    /// Its snippet does not match the tree exactly once.
    Broken(String),
}

/// Limits: a whole build, one `cargo xtask test --only` run (its boots each have their own
/// limit too), one host `cargo test`.
const BUILD_TIMEOUT: Duration = Duration::from_secs(40 * 60);
const SUITE_TIMEOUT: Duration = Duration::from_secs(20 * 60);
const CARGO_TEST_TIMEOUT: Duration = Duration::from_secs(15 * 60);

fn mutants_dir() -> PathBuf {
    crate::host::env::workspace_root().join("target").join("mutants")
}

/// Where the scratch tree is.
fn tree_dir() -> PathBuf {
    mutants_dir().join("tree")
}

/// The scratch tree's target directory (outside the tree, so a fresh copy keeps the builds).
fn scratch_target() -> PathBuf {
    mutants_dir().join("target")
}

/// The workspace's files: tracked, and untracked but not ignored (work in progress is
/// mutated as it stands).
fn workspace_files(root: &Path) -> Result<Vec<String>, String> {
    let out = Command::new("git")
        .current_dir(root)
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
        .output()
        .map_err(|e| format!("cannot run git ls-files: {e}"))?;
    if !out.status.success() {
        return Err(format!("git ls-files failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let mut files: Vec<String> = out
        .stdout
        .split(|&b| b == 0)
        .filter(|f| !f.is_empty())
        .map(|f| String::from_utf8_lossy(f).into_owned())
        // A file deleted but not yet staged is still listed.
        .filter(|f| root.join(f).is_file())
        .collect();
    files.sort();
    files.dedup();
    Ok(files)
}

/// Make the scratch tree a copy of the workspace's files. A file whose content is already the
/// same is not rewritten, so its timestamp (and cargo's view of what is fresh) stays; files
/// the last copy had and the workspace no longer has are removed.
fn sync_tree(root: &Path, tree: &Path) -> Result<usize, String> {
    let files = workspace_files(root)?;
    let manifest = mutants_dir().join("tree.files");
    let old: Vec<String> = fs::read_to_string(&manifest).map(|s| s.lines().map(String::from).collect()).unwrap_or_default();
    let mut written = 0;
    for f in &files {
        let src = root.join(f);
        let dst = tree.join(f);
        let data = fs::read(&src).map_err(|e| format!("cannot read {}: {e}", src.display()))?;
        if fs::read(&dst).ok().as_deref() == Some(&data[..]) {
            continue;
        }
        if let Some(dir) = dst.parent() {
            fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        fs::write(&dst, &data).map_err(|e| format!("cannot write {}: {e}", dst.display()))?;
        // Keep the executable bit (scripts).
        if let Ok(meta) = fs::metadata(&src) {
            let _ = fs::set_permissions(&dst, meta.permissions());
        }
        written += 1;
    }
    for f in old.iter().filter(|f| files.binary_search(f).is_err()) {
        let _ = fs::remove_file(tree.join(f));
    }
    fs::write(&manifest, files.join("\n")).map_err(|e| format!("cannot write {}: {e}", manifest.display()))?;
    Ok(written)
}

/// Run `cmd` in its own process group with its output appended to `log`; kill the whole
/// group (QEMU included) if it outlives `limit`. Returns the exit status, or `None` on timeout.
fn run_logged(mut cmd: Command, log: &Path, limit: Duration) -> Result<Option<ExitStatus>, String> {
    use std::os::unix::process::CommandExt as _;
    let mut f = fs::OpenOptions::new().create(true).append(true).open(log).map_err(|e| format!("cannot open {}: {e}", log.display()))?;
    let _ = writeln!(f, "\n$ {:?}\n", cmd);
    let out = f.try_clone().map_err(|e| format!("log: {e}"))?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(f).process_group(0);
    let mut child = cmd.spawn().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("waiting for {cmd:?}: {e}"))? {
            return Ok(Some(status));
        }
        if start.elapsed() > limit {
            let pgid = child.id() as i32;
            // SAFETY: a plain kill(2) of the process group we made for this child.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            let _ = child.wait();
            let mut f = fs::OpenOptions::new().append(true).open(log).map_err(|e| format!("log: {e}"))?;
            let _ = writeln!(f, "\n[mutants: killed after {} s: over the limit]", limit.as_secs());
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// A cargo command in the scratch tree, with the scratch target directory.
fn scratch_cargo(tree: &Path) -> Command {
    let mut c = Command::new(cargo());
    c.current_dir(tree).env("CARGO_TARGET_DIR", scratch_target()).env_remove("CARGO_ENCODED_RUSTFLAGS");
    c
}

/// Build what `checks` need in the scratch tree: the kernel and the program archive for
/// suites, the test binaries for host checks. `Ok(false)` if a build failed.
fn build(tree: &Path, checks: &[Check], log: &Path) -> Result<bool, String> {
    if checks.iter().any(|c| matches!(c, Check::Suite(_))) {
        let mut c = scratch_cargo(tree);
        c.args(["xtask", "build", "--all"]);
        if !run_logged(c, log, BUILD_TIMEOUT)?.is_some_and(|s| s.success()) {
            return Ok(false);
        }
    }
    for check in checks {
        if let Check::Cargo(args) = check {
            let mut c = scratch_cargo(tree);
            c.arg("test").arg("--no-run").args(*args);
            if !run_logged(c, log, BUILD_TIMEOUT)?.is_some_and(|s| s.success()) {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Run one check in the scratch tree: `Some(true)` passed, `Some(false)` failed, `None`
/// timed out.
fn run_check(tree: &Path, check: &Check, log: &Path) -> Result<Option<bool>, String> {
    let mut c = scratch_cargo(tree);
    let limit = match check {
        Check::Suite(p) => {
            c.args(["xtask", "test", "--only", p]);
            SUITE_TIMEOUT
        }
        Check::Cargo(args) => {
            c.arg("test").args(*args);
            CARGO_TEST_TIMEOUT
        }
    };
    Ok(run_logged(c, log, limit)?.map(|s| s.success()))
}

/// Run `m` on the scratch tree (restored afterwards, whatever happens).
fn run_mutant(tree: &Path, m: &Mutant, log: &Path) -> Result<Outcome, String> {
    let path = tree.join(m.file);
    let original = fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mutated = match apply(&original, m) {
        Ok(t) => t,
        Err(e) => return Ok(Outcome::Broken(e)),
    };
    fs::write(&path, &mutated).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let result = (|| -> Result<Outcome, String> {
        if !build(tree, m.checks, log)? {
            return Ok(Outcome::Unviable);
        }
        for check in m.checks {
            match run_check(tree, check, log)? {
                Some(true) => {}
                Some(false) => return Ok(Outcome::Killed { by: check.describe(), timed_out: false }),
                None => return Ok(Outcome::Killed { by: check.describe(), timed_out: true }),
            }
        }
        Ok(Outcome::Survived)
    })();
    fs::write(&path, &original).map_err(|e| format!("cannot restore {}: {e}", path.display()))?;
    result
}


pub fn main(args: &crate::mutants::MutantsArgs) -> Result<(), String> {
    let only: Vec<String> = args.only.iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    let (list, keep, baseline) = (args.list, args.keep, !args.no_baseline);
    for name in &only {
        if !CATALOG.iter().any(|m| m.name == name) {
            return Err(format!("mutants: no mutant `{name}` in the catalog (see --list)"));
        }
    }
    let selected: Vec<&Mutant> = CATALOG.iter().filter(|m| only.is_empty() || only.iter().any(|n| n == m.name)).collect();
    if list {
        for m in &selected {
            let checks: Vec<String> = m.checks.iter().map(Check::describe).collect();
            println!("{:<34} {}\n{:<34} {}  [{}]", m.name, m.plants, "", m.file, checks.join("; "));
        }
        println!("{} mutant(s)", selected.len());
        return Ok(());
    }

    let root = crate::host::env::workspace_root();
    let problems = catalog_problems(CATALOG, &root, &crate::test::suite_names());
    let start = Instant::now();
    let tree = tree_dir();
    let logs = mutants_dir().join("logs");
    fs::create_dir_all(&tree).map_err(|e| format!("cannot create {}: {e}", tree.display()))?;
    fs::create_dir_all(&logs).map_err(|e| format!("cannot create {}: {e}", logs.display()))?;
    let written = sync_tree(&root, &tree)?;
    println!("== mutants: {} selected; scratch tree {} ({written} file(s) copied), target {}", selected.len(), tree.display(), scratch_target().display());
    for p in &problems {
        println!("   catalog: {p}");
    }

    // The union of the checks, each once, in catalog order.
    let mut checks: Vec<Check> = Vec::new();
    for m in &selected {
        for c in m.checks {
            if !checks.contains(c) {
                checks.push(*c);
            }
        }
    }
    if baseline {
        println!("== baseline: the unmutated tree must pass every check the mutants name");
        let log = logs.join("baseline.log");
        let _ = fs::remove_file(&log);
        let t0 = Instant::now();
        if !build(&tree, &checks, &log)? {
            return Err(format!("mutants: the unmutated tree does not build (see {})", log.display()));
        }
        println!("   built ({:.0} s)", t0.elapsed().as_secs_f64());
        for c in &checks {
            let t0 = Instant::now();
            match run_check(&tree, c, &log)? {
                Some(true) => println!("   {} passes ({:.0} s)", c.describe(), t0.elapsed().as_secs_f64()),
                r => {
                    return Err(format!(
                        "mutants: `{}` {} on the unmutated tree: no mutant could be judged by it (see {})",
                        c.describe(),
                        if r.is_none() { "timed out" } else { "fails" },
                        log.display()
                    ))
                }
            }
        }
    }

    let mut rows: Vec<(&Mutant, Outcome, Duration)> = Vec::new();
    for (i, m) in selected.iter().enumerate() {
        let log = logs.join(format!("{}.log", m.name));
        let _ = fs::remove_file(&log);
        println!("== [{}/{}] {}: {}", i + 1, selected.len(), m.name, m.plants);
        let t0 = Instant::now();
        let outcome = run_mutant(&tree, m, &log)?;
        let took = t0.elapsed();
        println!("   {} ({:.0} s)", describe(&outcome), took.as_secs_f64());
        rows.push((m, outcome, took));
    }

    let table = report(&rows, &problems);
    print!("{table}");
    let _ = fs::write(mutants_dir().join("report.txt"), &table);
    println!("(total {:.0} s; logs in {})", start.elapsed().as_secs_f64(), logs.display());
    if !keep {
        let _ = fs::remove_dir_all(&tree);
        let _ = fs::remove_dir_all(scratch_target());
        let _ = fs::remove_file(mutants_dir().join("tree.files"));
    }
    let survived = rows.iter().filter(|r| r.1 == Outcome::Survived).count();
    let broken = rows.iter().filter(|r| matches!(r.1, Outcome::Broken(_))).count();
    if survived > 0 || broken > 0 || !problems.is_empty() {
        return Err(format!("mutants: {survived} survived, {broken} broken, {} catalog problem(s)", problems.len()));
    }
    Ok(())
}

fn describe(o: &Outcome) -> String {
    match o {
        Outcome::Killed { by, timed_out: false } => format!("killed by `{by}`"),
        Outcome::Killed { by, timed_out: true } => format!("killed by `{by}` (timed out)"),
        Outcome::Survived => "SURVIVED".into(),
        Outcome::Unviable => "unviable (does not build)".into(),
        Outcome::Broken(e) => format!("BROKEN: {e}"),
    }
}

/// The closing table and `N killed, N survived, N unviable` (plus broken entries, if any).
fn report(rows: &[(&Mutant, Outcome, Duration)], problems: &[String]) -> String {
    let mut s = String::from("\nmutant                             result     time   caught by\n");
    for (m, o, took) in rows {
        let (word, by) = match o {
            Outcome::Killed { by, timed_out } => ("killed", if *timed_out { format!("{by} (timed out)") } else { by.clone() }),
            Outcome::Survived => ("SURVIVED", String::new()),
            Outcome::Unviable => ("unviable", String::new()),
            Outcome::Broken(e) => ("BROKEN", e.clone()),
        };
        s.push_str(&format!("{:<34} {:<10} {:>4} s  {by}\n", m.name, word, took.as_secs()));
    }
    let count = |f: fn(&Outcome) -> bool| rows.iter().filter(|r| f(&r.1)).count();
    let (killed, survived, unviable, broken) = (
        count(|o| matches!(o, Outcome::Killed { .. })),
        count(|o| *o == Outcome::Survived),
        count(|o| *o == Outcome::Unviable),
        count(|o| matches!(o, Outcome::Broken(_))),
    );
    s.push_str(&format!("{killed} killed, {survived} survived, {unviable} unviable"));
    if broken > 0 || !problems.is_empty() {
        s.push_str(&format!(", {broken} broken, {} catalog problem(s)", problems.len()));
    }
    s.push('\n');
    s
}

// ---------------------------------------------------------------------------------------
// The command line of `mutants`

/// `mutants --only`: a mutant of the catalog (empty names between commas are ignored).
fn mutant_name(v: &str) -> Result<String, String> {
    let v = v.trim();
    if !v.is_empty() && !crate::mutants::CATALOG.iter().any(|m| m.name == v) {
        return Err(format!("no mutant `{v}` in the catalog (see --list)"));
    }
    Ok(v.to_string())
}

#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct MutantsArgs {
    /// Only these mutants (comma-separated, repeatable; see --list)
    #[arg(long, value_name = "NAME,...", action = clap::ArgAction::Append, value_delimiter = ',', value_parser = mutant_name)]
    pub only: Vec<String>,
    /// Print the catalog, run nothing
    #[arg(long)]
    pub list: bool,
    /// Keep the scratch tree and its builds afterwards (a rerun then rebuilds only what changed)
    #[arg(long)]
    pub keep: bool,
    /// Skip running the checks on the unmutated tree first (only when it was just checked: a
    /// check that fails anyway would count every mutant killed)
    #[arg(long)]
    pub no_baseline: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: Mutant = Mutant {
        name: "flip",
        file: "x.rs",
        original: "a < b",
        replacement: "a <= b",
        checks: &[Check::Cargo(&["-p", "percore"])],
        plants: "an off-by-one",
    };

    /// Catches: a snippet applied to the wrong place, or applied although it is missing or
    /// ambiguous (the catalog entry must then be reported broken, not run).
    #[test]
    fn a_snippet_must_match_exactly_once() {
        assert_eq!(apply("if a < b { x }", &M).unwrap(), "if a <= b { x }");
        let none = apply("if a > b { x }", &M).unwrap_err();
        assert!(none.contains("not in x.rs"), "{none}");
        let two = apply("a < b || a < b", &M).unwrap_err();
        assert!(two.contains("occurs 2 times"), "{two}");
    }

    /// Catches: the catalog rotting silently. Every snippet must still match the current tree
    /// exactly once, every suite pattern must name a suite of `cargo xtask test`, and the
    /// catalog must keep its size and spread: at least 20 mutations, and planted
    /// bugs in the network rings and steering, the block driver and virtio glue, ext2
    /// allocation of blocks and inodes, the buffer cache, the library OS's PPC, Metis, webd
    /// and both commutativity models.
    #[test]
    fn the_catalog_matches_the_tree() {
        let problems = catalog_problems(CATALOG, &crate::host::env::workspace_root(), &crate::test::suite_names());
        assert!(problems.is_empty(), "catalog problems:\n{}", problems.join("\n"));
        assert!(CATALOG.len() >= 20, "only {} mutants", CATALOG.len());
        for area in ["kernel/", "user/libos/", "percore/"] {
            assert!(CATALOG.iter().any(|m| m.file.starts_with(area)), "no mutant in {area}");
        }
        let files = [
            "abi/src/net.rs",
            "kernel/src/dev/net.rs",
            "kernel/src/dev/blk.rs",
            "kernel/src/dev/virtio.rs",
            "crates/ext2/src/write.rs",
            "crates/bcache/src/lib.rs",
            "user/libos/src/ppc.rs",
            "mapreduce/src/",
            "webcore/src/",
            "xtask/src/commute/pipeline.rs",
            "xtask/src/commute/posix_model.rs",
        ];
        for f in files {
            assert!(CATALOG.iter().any(|m| m.file.starts_with(f)), "no mutant in {f}");
        }
        // ext2: both allocators, and the frees that find a block's or an inode's group.
        for what in ["free_blocks == 0", "free_inodes == 0", "blocks_per_group", "ipg"] {
            assert!(CATALOG.iter().any(|m| m.file == "crates/ext2/src/write.rs" && m.original.contains(what)), "no ext2 mutant of `{what}`");
        }
    }

    /// Catches: a broken entry or a bad suite pattern passing the catalog check.
    #[test]
    fn catalog_problems_are_found() {
        let root = crate::host::env::workspace_root();
        let suites = vec!["utest smp=2".to_string()];
        let bad = [
            Mutant { name: "missing", file: "percore/src/spsc.rs", original: "no such text at all", ..M },
            Mutant { name: "nofile", file: "no/such/file.rs", ..M },
            Mutant { name: "same", file: "percore/src/spsc.rs", original: "pub struct Ring {", replacement: "pub struct Ring {", ..M },
            Mutant { name: "suite", file: "percore/src/spsc.rs", original: "pub struct Ring {", replacement: "pub struct Ring2 {", checks: &[Check::Suite("no such suite")], ..M },
        ];
        let p = catalog_problems(&bad, &root, &suites);
        for want in ["missing: the original snippet is not in", "nofile: cannot read", "same: the replacement changes nothing", "suite: no suite"] {
            assert!(p.iter().any(|x| x.contains(want)), "no problem `{want}` in {p:?}");
        }
        let twice = [M, M];
        assert!(catalog_problems(&twice, &root, &suites).iter().any(|x| x.contains("name used twice")));
    }

    #[test]
    fn report_counts_each_outcome() {
        let rows = [
            (&M, Outcome::Killed { by: "test --only \"x\"".into(), timed_out: false }, Duration::from_secs(3)),
            (&M, Outcome::Killed { by: "y".into(), timed_out: true }, Duration::from_secs(3)),
            (&M, Outcome::Survived, Duration::from_secs(1)),
            (&M, Outcome::Unviable, Duration::from_secs(1)),
        ];
        let r = report(&rows, &[]);
        assert!(r.ends_with("2 killed, 1 survived, 1 unviable\n"), "{r}");
        assert!(r.contains("y (timed out)"));
    }
}
