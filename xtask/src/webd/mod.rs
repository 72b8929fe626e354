//! The host side of webd (issue 18, Corey §6.2/§8.4): the HTTP load generator (`load`), the
//! bad-input checker (`check`), the files a run serves (`files`), steering a connection to a
//! chosen front-end (`steer`), booting webd on either system (`run`) and the `webd_filesum`
//! benchmark rows (xtask/src/bench/webd.rs). Everything connects to 127.0.0.1 only, through
//! the forward of QEMU's restricted user network (crate::net::NetConfig).

pub mod cachesim;
pub mod check;
pub mod files;
pub mod http;
pub mod load;
pub mod run;
pub mod steer;
pub mod suite;

use std::path::PathBuf;
use std::time::Duration;

const HELP: &str = "\
cargo xtask webd <command>

Commands:
  load --port P [--conns C] [--requests N] [--seconds S] [--timeout SECS]
       [--path P1,P2,...|--paths-file F] [--no-keepalive] [--expect-sums FILE] [--json FILE]
       [--steer N]
        HTTP load on 127.0.0.1:P: C connections at once (default 2), keep-alive unless
        --no-keepalive, at most N requests (default 1000) and none started after S seconds
        (default 30); each request within --timeout (default 10 s). Paths are asked for in
        turn (default /). --expect-sums FILE (lines `NAME SIZE SUM`): /filesum/NAME must
        answer the sum, /NAME must have the size and sum. Prints a table and one JSON line
        (also written to --json FILE); exit 1 if any request failed. --steer N (ours with N
        front-ends): connection k comes from a source port whose 4-tuple hash steers it to
        front-end k mod N, and good requests are counted per front-end.
  check --port P [--expect-sums FILE] [--timeout SECS] [--only WORDS]
        The bad-input cases of issue 18 (malformed request lines, a header over 8 KiB,
        10 000 headers, a dribbled request, `..` and absolute paths, missing names, other
        methods, GET with a body, a client vanishing mid-response, ...), each followed by a
        good request on a new connection. One line per case, then `N passed, N failed`;
        exit 1 on a failure.
  run --system ours|linux [--mode random|locality|same-core] [--files COUNTxSIZE] [--smp N]
      [--frontends LIST] [--apps LIST] [--kc CORE] [--timeout SECS] [--load \"LOAD OPTIONS\"]
      [--check] [--bad-input] [--requests N]
        Make the files (default 4x64K; deterministic content, sums in
        target/webd/files-SPEC.sums) into an ext2 image (ours) or the initramfs (linux), boot,
        wait for `webd: ready`, print `webd: http://127.0.0.1:PORT/`. Then --check asks every
        front-end for /filesum/NAME of every file (connections steered by the 4-tuple hash)
        and compares with the host's sums and /stats's per-core counters; --bad-input runs
        `webd check`; --load runs the load generator with those options (port and sums
        filled in). With any of them the guest is told how many requests to expect and stops
        by itself (its `webd: done` line and, for ours, the kernel's leak check are checked);
        with none it serves until --timeout (default 600 s).
  cachesim [--modes LIST] [--preset amd16|nehalem-mc] [--files COUNTxSIZE] [--rounds R]
           [--map C0:C1:C2:C3:C4] [--json FILE]
        Corey's filesum cache experiment: our webd under single-threaded TCG with the cache
        simulator's multi-core model (tools/qemu-plugins/cachesim_mc.c); L2/L3 misses and
        memory CPI per request of the summing cores, by mode (default: amd16, 8x1M, 5 vCPUs,
        front-end 0, application cores 1-4 each on its own simulated chip).
  selftest
        The webd suite of `cargo xtask test` on its own: our webd in each mode at 2 vCPUs with
        4x64K, every sum from every front-end, the bad-input cases, the leak check (~40 s).
  help  This text";

/// `cargo xtask webd ...`.
pub fn main(args: &[String]) -> Result<(), String> {
    let Some(cmd) = args.first() else {
        eprintln!("{HELP}");
        return Err("webd: name a command".into());
    };
    let rest = &args[1..];
    match cmd.as_str() {
        "help" | "-h" | "--help" => {
            println!("{HELP}");
            Ok(())
        }
        "load" => {
            let (spec, json_out) = parse_load(rest)?;
            let r = load::run(&spec)?;
            print!("{}", r.table());
            let j = r.json();
            println!("{j}");
            if let Some(p) = json_out {
                std::fs::write(&p, format!("{j}\n")).map_err(|e| format!("webd load: --json {}: {e}", p.display()))?;
            }
            if r.failed() > 0 || r.ok == 0 {
                return Err(format!("webd load: {} of {} requests failed", r.failed(), r.attempted));
            }
            Ok(())
        }
        "check" => {
            let spec = parse_check(rest)?;
            let r = check::run(&spec)?;
            print!("{}", r.lines());
            if r.failed() > 0 {
                return Err(format!("webd check: {} case(s) failed", r.failed()));
            }
            Ok(())
        }
        "run" => run::command(rest),
        "cachesim" => cachesim::command(rest),
        "selftest" => {
            let kernel = crate::env::build_kernel()?;
            let initrd = crate::user::build_initrd()?;
            let t = suite::ci_tests(&kernel, &initrd)?;
            println!("{} passed, {} failed", t.passed, t.failed);
            if t.failed > 0 {
                Err(format!("{} webd test(s) failed", t.failed))
            } else {
                Ok(())
            }
        }
        other => Err(format!("webd: unknown command `{other}`; try `cargo xtask webd help`")),
    }
}

fn parse_port(v: &str, ctx: &str) -> Result<u16, String> {
    v.parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(|| format!("{ctx}: --port: `{v}` is not a port (1..=65535)"))
}

/// `webd load` options (also `webd run --load "..."`, where the port may be left out).
pub fn parse_load(args: &[String]) -> Result<(load::WebLoadSpec, Option<PathBuf>), String> {
    let mut spec = load::WebLoadSpec::default();
    let mut json = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("webd load: {a} needs a value"));
        let num = |opt: &str, v: &str| v.parse::<u64>().map_err(|_| format!("webd load: {opt}: `{v}` is not a whole number"));
        match a.as_str() {
            "--port" => spec.port = parse_port(&value()?, "webd load")?,
            "--conns" => spec.conns = num("--conns", &value()?)?.min(usize::MAX as u64) as usize,
            "--requests" => spec.requests = num("--requests", &value()?)?,
            "--seconds" => spec.max_time = Duration::from_secs(num("--seconds", &value()?)?),
            "--timeout" => spec.timeout = Duration::from_secs(num("--timeout", &value()?)?),
            "--path" => spec.paths = value()?.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect(),
            "--paths-file" => {
                let p = value()?;
                let text = std::fs::read_to_string(&p).map_err(|e| format!("webd load: --paths-file {p}: {e}"))?;
                spec.paths = text.lines().map(str::trim).filter(|s| !s.is_empty() && !s.starts_with('#')).map(String::from).collect();
            }
            "--no-keepalive" => spec.no_keepalive = true,
            "--expect-sums" => spec.expect = Some(files::read_sums(std::path::Path::new(&value()?))?),
            "--json" => json = Some(PathBuf::from(value()?)),
            "--steer" => {
                let n = num("--steer", &value()?)?;
                if n == 0 || n > 64 {
                    return Err(format!("webd load: --steer: {n} front-ends is not in 1..=64"));
                }
                spec.steer_channels = n;
                spec.steer = (0..n).collect();
            }
            other => return Err(format!("webd load: unknown option `{other}` (try `cargo xtask webd help`)")),
        }
    }
    Ok((spec, json))
}

pub fn parse_check(args: &[String]) -> Result<check::CheckSpec, String> {
    let mut spec = check::CheckSpec { port: 0, timeout: Duration::from_secs(10), expect: None, only: Vec::new() };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("webd check: {a} needs a value"));
        match a.as_str() {
            "--port" => spec.port = parse_port(&value()?, "webd check")?,
            "--timeout" => {
                let v = value()?;
                spec.timeout = Duration::from_secs(v.parse::<u64>().ok().filter(|&s| s > 0).ok_or_else(|| format!("webd check: --timeout: `{v}` is not a positive number of seconds"))?);
            }
            "--expect-sums" => spec.expect = Some(files::read_sums(std::path::Path::new(&value()?))?),
            "--only" => spec.only.push(value()?),
            other => return Err(format!("webd check: unknown option `{other}` (try `cargo xtask webd help`)")),
        }
    }
    if spec.port == 0 {
        return Err("webd check: --port P is required (the host port forwarded to webd's port)".into());
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn bad_options_name_the_option() {
        for (args, needle) in [
            ("--port 0", "--port"),
            ("--port x", "--port"),
            ("--port 80 --conns", "--conns"),
            ("--port 80 --requests many", "--requests"),
            ("--port 80 --bogus", "--bogus"),
            ("--port 80 --expect-sums /nonexistent/sums", "--expect-sums"),
            ("--port 80 --paths-file /nonexistent/paths", "--paths-file"),
        ] {
            let e = parse_load(&a(args)).unwrap_err();
            assert!(e.contains(needle), "{args}: {e}");
        }
        for (spec_args, needle) in [("", "--port"), ("--requests 0", "--requests"), ("--conns 0", "--conns"), ("--conns 1000", "--conns"), ("--seconds 0", "--seconds"), ("--path x", "--path"), ("--path /a,/b\x01c", "--path")] {
            let (mut s, _) = parse_load(&a(spec_args)).unwrap();
            if spec_args.is_empty() {
                s.port = 0;
            } else {
                s.port = 8080;
            }
            let e = s.validate().unwrap_err();
            assert!(e.contains(needle), "{spec_args}: {e}");
        }
        let (s, j) = parse_load(&a("--port 8080 --conns 4 --requests 10 --seconds 5 --path /a,/filesum/b --no-keepalive --json /tmp/x.json")).unwrap();
        assert_eq!((s.port, s.conns, s.requests, s.max_time, s.no_keepalive), (8080, 4, 10, Duration::from_secs(5), true));
        assert_eq!(s.paths, ["/a", "/filesum/b"]);
        assert_eq!(j, Some(PathBuf::from("/tmp/x.json")));
        assert!(parse_check(&a("")).unwrap_err().contains("--port"));
        assert!(parse_check(&a("--port 1 --timeout 0")).unwrap_err().contains("--timeout"));
        assert_eq!(parse_check(&a("--port 9 --only dribbled")).unwrap().only, ["dribbled"]);
    }
}
