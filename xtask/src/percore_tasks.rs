//! `cargo xtask bench percore` and the loom model-checking runs of the percore crate.
//! Part of the percore work (docs/percore.md).

use crate::host::outcome::TestTally;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Hard limit on the whole loom run (build included). The models take seconds; the build of
/// loom and the crate under `--cfg loom` about half a minute on 2 cores.
const LOOM_TIMEOUT: Duration = Duration::from_secs(600);

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// `cargo xtask bench percore [--ms N] [--json PATH]`: builds and runs the benchmark example
/// of the percore crate (host-native, 1 and 2 pinned threads). Writes JSON to
/// `<target>/bench/percore.json` unless `--json` says otherwise.
pub fn bench(args: &[String]) -> Result<(), String> {
    let mut pass: Vec<String> = args.to_vec();
    if !pass.iter().any(|a| a == "--json") {
        let path: PathBuf = crate::host::env::target_dir().join("bench").join("percore.json");
        pass.push("--json".into());
        pass.push(path.display().to_string());
    }
    println!("== bench percore: cargo run --release -p percore --features std --example bench -- {}", pass.join(" "));
    let status = Command::new(cargo())
        .current_dir(crate::host::env::workspace_root())
        .args(["run", "--release", "-p", "percore", "--features", "std", "--example", "bench", "--"])
        .args(&pass)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("bench percore failed ({status})"))
    }
}

/// Parse `test NAME ... ok|FAILED` lines and the `test result:` summaries of cargo test.
fn tally(stdout: &str) -> (TestTally, Vec<String>) {
    let mut t = TestTally::default();
    let mut lines = Vec::new();
    for line in stdout.lines() {
        let line = line.trim();
        if line.starts_with("test ") && (line.ends_with("... ok") || line.ends_with("... FAILED") || line.ends_with("... ignored")) {
            lines.push(line.to_string());
        }
        // "test result: ok. 12 passed; 0 failed; 0 ignored; ..."
        if let Some(rest) = line.strip_prefix("test result: ") {
            for part in rest.split(';') {
                let words: Vec<&str> = part.split_whitespace().collect();
                for w in words.windows(2) {
                    match (w[0].parse::<usize>(), w[1]) {
                        (Ok(n), "passed") => t.passed += n,
                        (Ok(n), "failed") => t.failed += n,
                        _ => {}
                    }
                }
            }
        }
    }
    (t, lines)
}

/// Loom model checks, run by `cargo xtask test`: the percore crate's `tests/loom.rs` built
/// with `--cfg loom` in its own target directory (so it does not rebuild the normal one).
pub fn loom_tests() -> Result<TestTally, String> {
    println!("== loom: RUSTFLAGS=\"--cfg loom\" cargo test -p percore --release --test loom");
    let target = crate::host::env::target_dir().join("loom");
    let mut rustflags = std::env::var("RUSTFLAGS").unwrap_or_default();
    if !rustflags.split_whitespace().any(|f| f == "loom") {
        rustflags = format!("{rustflags} --cfg loom").trim().to_string();
    }
    let start = Instant::now();
    let mut child = Command::new(cargo())
        .current_dir(crate::host::env::workspace_root())
        .args(["test", "-p", "percore", "--release", "--test", "loom"])
        .env("RUSTFLAGS", &rustflags)
        // Would override RUSTFLAGS if inherited from an outer cargo.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env("CARGO_TARGET_DIR", &target)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run cargo test for loom: {e}"))?;
    // Drain both pipes on threads so a chatty build cannot block the child.
    let mut out = child.stdout.take().expect("piped");
    let err = child.stderr.take().expect("piped");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut keep = Vec::new();
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            keep.push(line);
        }
        keep
    });
    let status = loop {
        match child.try_wait().map_err(|e| format!("waiting for loom tests: {e}"))? {
            Some(s) => break Some(s),
            None if start.elapsed() > LOOM_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    let (mut t, lines) = tally(&stdout);
    for l in &lines {
        println!("   loom: {l}");
    }
    match status {
        None => {
            println!("   loom: TIMED OUT after {}s", LOOM_TIMEOUT.as_secs());
            t.failed += 1;
        }
        Some(s) if !s.success() && t.failed == 0 => {
            // A build failure or crash rather than a failing model: count it and show why.
            for l in stderr.iter().rev().take(30).collect::<Vec<_>>().into_iter().rev() {
                eprintln!("   {l}");
            }
            t.failed += 1;
        }
        Some(_) => {}
    }
    if t.passed + t.failed == 0 {
        println!("   loom: no model ran");
        t.failed += 1;
    }
    println!("   loom: {} passed, {} failed ({:.0}s)", t.passed, t.failed, start.elapsed().as_secs_f64());
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::tally;

    #[test]
    fn tallies_cargo_output() {
        let out = "running 2 tests\ntest a ... ok\ntest b ... FAILED\n\ntest result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.1s\n";
        let (t, lines) = tally(out);
        assert_eq!((t.passed, t.failed), (1, 1));
        assert_eq!(lines, vec!["test a ... ok", "test b ... FAILED"]);
    }
}
