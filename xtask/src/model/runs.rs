//! The plugin runs behind the model, cached under `target/model-cache/` by what produced them:
//! the guest's build (our kernel and initrd, or Linux's bzImage and its guest programs), the
//! cachesim plugin, the workload, its parameters and the vCPU count. A figure drawn again
//! reads the cache and does not boot QEMU; a rebuilt kernel or program is a new key.

use std::collections::VecDeque;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use super::cycles::RunCounts;
use crate::guest::plugin::{self as plugins, parse_records};

/// The cachesim arguments of every model run: Corey's machine, one vCPU per core in order.
const PLUGIN_ARGS: &[&str] = &["preset=amd16"];

/// One point of a figure: a workload on one system at one vCPU count.
#[derive(Debug, Clone, PartialEq)]
pub struct RunKey {
    pub system: &'static str,
    pub workload: &'static str,
    pub smp: u32,
    pub params: String,
}

/// FNV-1a, 64 bits: a stable hash of the build's files (the cache key must not change between
/// runs of the tool, which std's hasher does not promise).
pub fn fnv1a(h: u64, bytes: &[u8]) -> u64 {
    let mut h = h;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

pub const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

fn hash_files(files: &[PathBuf]) -> Result<u64, String> {
    let mut h = FNV_START;
    for f in files {
        let data = fs::read(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
        h = fnv1a(h, &(data.len() as u64).to_le_bytes());
        h = fnv1a(h, &data);
    }
    Ok(h)
}

/// The files a system's guest is made of (built if needed), and the plugin.
fn build_files(system: &str) -> Result<Vec<PathBuf>, String> {
    let mut files = vec![plugins::build()?.cachesim];
    match system {
        "ours" => {
            files.push(crate::host::env::build_kernel()?);
            files.push(crate::host::user::build_initrd()?);
        }
        "linux" => {
            files.push(crate::guest::linux::fetch_kernel()?.bzimage);
            files.push(crate::guest::linux_sys::build_guest_program()?);
            files.push(plugins::build_guest()?);
        }
        other => return Err(format!("unknown system `{other}`")),
    }
    Ok(files)
}

/// The runs of one command, with the build keys computed once per system.
pub struct Runs {
    dir: PathBuf,
    keys: Vec<(&'static str, u64)>,
    timeout: Duration,
    /// Ignore the cache (still write to it).
    fresh: bool,
    /// Boot nothing: a point not in the cache is an error ("not run").
    pub cached_only: bool,
    /// Runs that booted QEMU, and runs read from the cache.
    pub booted: usize,
    pub cached: usize,
    /// Points [`Runs::prefetch`] booted (written to the cache) or failed to boot: `get` reads
    /// the first without counting them again and returns the second's error without booting.
    prefetched: Vec<(PathBuf, Result<(), String>)>,
}

/// Every plugin run rebuilds the plugins and the Linux guest's /init in place
/// (`plugins::build`, the guest's program last), so a run that starts while another's QEMU is
/// still loading them can load a half-written file (seen: `cachesim.so: file too short`). A
/// run that starts holds the start gate (a lock file in the cache directory, so that two
/// model commands in one tree take turns too) until its build has written the guest's program
/// and [`LOAD_MARGIN`] more has passed for QEMU to load it, or [`GATE_MAX`] at most.
const LOAD_MARGIN: Duration = Duration::from_secs(15);
const GATE_MAX: Duration = Duration::from_secs(120);

impl Runs {
    pub fn new(timeout: Duration, fresh: bool) -> Runs {
        Runs { dir: crate::host::env::workspace_root().join("target").join("model-cache"), keys: Vec::new(), timeout, fresh, cached_only: false, booted: 0, cached: 0, prefetched: Vec::new() }
    }

    fn build_key(&mut self, system: &'static str) -> Result<u64, String> {
        if let Some((_, k)) = self.keys.iter().find(|(s, _)| *s == system) {
            return Ok(*k);
        }
        // Under the start gate: another command's run rebuilding the same files at this moment
        // would otherwise hand this one a half-written file's hash (seen: a command whose
        // Linux key differed from the clean build's booted points the cache had).
        let gate = start_gate()?;
        let k = hash_files(&build_files(system)?);
        let _ = gate.unlock();
        let k = k?;
        self.keys.push((system, k));
        Ok(k)
    }

    /// Where the cached report of `key` lives.
    fn path(&mut self, key: &RunKey) -> Result<PathBuf, String> {
        let build = self.build_key(key.system)?;
        let what = fnv1a(build, format!("{}|{}|{}|{}", key.workload, key.smp, key.params, PLUGIN_ARGS.join(",")).as_bytes());
        Ok(self.dir.join(format!("{}-{}-{}-{what:016x}.txt", key.system, key.workload, key.smp)))
    }

    /// The counts of `key`: from the cache, or from a plugin run (then cached).
    pub fn get(&mut self, key: &RunKey) -> Result<RunCounts, String> {
        let path = self.path(key)?;
        if let Some((_, done)) = self.prefetched.iter().find(|(p, _)| *p == path) {
            done.clone()?;
            return read_cached(&path)?.ok_or_else(|| format!("{}: written by this run, now missing", path.display()));
        }
        if !self.fresh {
            if let Some(r) = read_cached(&path)? {
                self.cached += 1;
                return Ok(r);
            }
        }
        if self.cached_only {
            return Err(format!("not run (no cached point; --cached-only): {} {} at {}", key.system, key.workload, key.smp));
        }
        let (text, ops) = self.boot(key)?;
        keep(&self.dir, &path, &text, ops)
    }

    /// A plugin run of `key`, whatever the cache holds: the report's text and the ops.
    pub fn boot(&mut self, key: &RunKey) -> Result<(String, Option<u64>), String> {
        let r = boot_key(key, self.timeout)?;
        self.booted += 1;
        Ok(r)
    }

    /// Boots the points of `keys` that the cache lacks (all of them with `fresh`), `jobs` QEMUs
    /// at a time, one start at a time (the start gate of [`boot_key`]), and keeps them in the cache; `get` then
    /// reads them. With `jobs` ≤ 1 or `cached_only` it does nothing (`get` boots one at a
    /// time). A failed point is printed, remembered and reported by `get`, not booted again.
    pub fn prefetch(&mut self, keys: &[RunKey], jobs: usize) -> Result<(), String> {
        if jobs <= 1 || self.cached_only {
            return Ok(());
        }
        let mut todo: VecDeque<(RunKey, PathBuf)> = VecDeque::new();
        for k in keys {
            let p = self.path(k)?;
            let have = !self.fresh && read_cached(&p)?.is_some();
            if !have && !todo.iter().any(|(_, q)| *q == p) && !self.prefetched.iter().any(|(q, _)| *q == p) {
                todo.push_back((k.clone(), p));
            }
        }
        if todo.is_empty() {
            return Ok(());
        }
        println!("model: {} point(s) to boot, {} at a time, one start at a time", todo.len(), jobs.min(todo.len()));
        let queue = Mutex::new(todo);
        let done: Mutex<Vec<(PathBuf, Result<(), String>)>> = Mutex::new(Vec::new());
        let (dir, timeout) = (self.dir.clone(), self.timeout);
        std::thread::scope(|s| {
            for _ in 0..jobs {
                s.spawn(|| loop {
                    let Some((key, path)) = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front() else { break };
                    let r = boot_key(&key, timeout).and_then(|(text, ops)| keep(&dir, &path, &text, ops).map(|_| ()));
                    if let Err(e) = &r {
                        println!("model: {e}");
                    }
                    done.lock().unwrap_or_else(|e| e.into_inner()).push((path, r));
                });
            }
        });
        let done = done.into_inner().unwrap_or_else(|e| e.into_inner());
        self.booted += done.iter().filter(|(_, r)| r.is_ok()).count();
        self.prefetched.extend(done);
        Ok(())
    }
}

/// The start gate, locked (blocks while another run of any model command in this tree holds
/// it): `target/model-cache/.start-gate`. Unlocked by `unlock` or when the file is dropped.
fn start_gate() -> Result<fs::File, String> {
    let dir = crate::host::env::workspace_root().join("target").join("model-cache");
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join(".start-gate");
    let gate = fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    gate.lock().map_err(|e| format!("cannot lock {}: {e}", path.display()))?;
    Ok(gate)
}

/// One plugin run of `key`: the report's text and the guest's operation count. It starts
/// when it holds the start gate, and lets go of it once its build is done and loaded (see
/// [`LOAD_MARGIN`]) while the run goes on.
fn boot_key(key: &RunKey, timeout: Duration) -> Result<(String, Option<u64>), String> {
    let gate = start_gate()?;
    println!("model: booting {} {} at {} vCPU(s) under cachesim amd16 ({})", key.system, key.workload, key.smp, key.params);
    let extra: Vec<String> = PLUGIN_ARGS.iter().map(|s| s.to_string()).collect();
    let started = SystemTime::now();
    let t0 = Instant::now();
    let guest = plugins::artifact_dir().join("guest-init");
    let (report, ops) = std::thread::scope(|s| {
        let run = s.spawn(|| crate::guest::measure::run_report(key.system, key.workload, key.smp, &key.params, timeout, "cachesim", &extra));
        // The build writes the guest's program last; then QEMU starts and loads the plugin.
        let built = |t: SystemTime| fs::metadata(&guest).and_then(|m| m.modified()).is_ok_and(|m| m >= t);
        while !built(started) && !run.is_finished() && t0.elapsed() < GATE_MAX {
            std::thread::sleep(Duration::from_millis(500));
        }
        let margin_end = Instant::now() + LOAD_MARGIN;
        while Instant::now() < margin_end && !run.is_finished() && t0.elapsed() < GATE_MAX {
            std::thread::sleep(Duration::from_millis(500));
        }
        // Lets the next run start; dropping the file would too.
        let _ = gate.unlock();
        run.join().unwrap_or_else(|_| Err("the plugin run panicked".into()))
    })
    .map_err(|e| format!("{} {} at {} vCPUs: {e}", key.system, key.workload, key.smp))?;
    let text: String = report.iter().map(|r| format!("{} {}\n", r.kind, r.fields.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "))).collect();
    Ok((text, ops))
}

/// Checks a run's counts and keeps them at `path`.
fn keep(dir: &Path, path: &Path, text: &str, ops: Option<u64>) -> Result<RunCounts, String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let body = format!("ops {}\n{text}", ops.map(|o| o.to_string()).unwrap_or_else(|| "none".into()));
    // The counts are checked before they are kept.
    let counts = parse_cached(&body)?;
    fs::write(path, body).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(counts)
}

fn read_cached(path: &Path) -> Result<Option<RunCounts>, String> {
    match fs::read_to_string(path) {
        Ok(t) => parse_cached(&t).map(Some).map_err(|e| format!("{}: {e} (delete it to run again)", path.display())),
        Err(_) => Ok(None),
    }
}

/// A cached run: `ops N` (or `ops none`), then the plugin's records.
pub fn parse_cached(text: &str) -> Result<RunCounts, String> {
    let first = text.lines().next().unwrap_or("");
    let ops = match first.strip_prefix("ops ") {
        Some("none") => None,
        Some(n) => Some(n.trim().parse::<u64>().map_err(|_| format!("bad ops line `{first}`"))?),
        None => return Err("no ops line".into()),
    };
    RunCounts::from_report(&parse_records(text), ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_is_the_published_function() {
        // FNV-1a 64 test vectors.
        assert_eq!(fnv1a(FNV_START, b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a(FNV_START, b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a(FNV_START, b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn cached_text_round_trips() {
        let t = "ops 7\nmc model=amd16 lat_l2=14 lat_l3=75 lat_sibling=127 lat_remote=200 lat_mem=127\nmcpu model=amd16 vcpu=0 party=app insns=10 l1i_miss=1 l1d_miss=0 l2_miss=0 l3_miss=0 cycles=14\nend\n";
        let r = parse_cached(t).unwrap();
        assert_eq!(r.ops, Some(7));
        assert_eq!(r.cores[0].insns, 10);
        assert!(parse_cached(&t.replace("ops 7", "ops x")).is_err());
        assert!(parse_cached(&t.replacen("ops 7\n", "", 1)).is_err());
        assert_eq!(parse_cached(&t.replace("ops 7", "ops none")).unwrap().ops, None);
    }
}
