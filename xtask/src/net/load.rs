//! `cargo xtask net load`: its options as a load spec, and the run (the load generator itself:
//! host/tcpload.rs).

use crate::host::tcpload::{run, LoadSpec};
use std::time::Duration;

/// `cargo xtask net load`'s options as a spec (checked: [`LoadSpec::validate`]).
pub fn options(a: crate::net::options::NetLoadArgs) -> Result<LoadSpec, String> {
    let mut spec = LoadSpec { port: a.port, ..LoadSpec::default() };
    if let Some(n) = a.conns {
        spec.conns = n;
    }
    if let Some(c) = a.concurrency {
        spec.concurrency = c.min(usize::MAX as u64) as usize;
    }
    if let Some(s) = a.seconds {
        spec.max_time = Duration::from_secs(s);
    }
    if let Some(t) = a.timeout {
        spec.timeout = Duration::from_secs(t);
    }
    if let Some(k) = a.abort_every {
        spec.abort_every = k;
    }
    spec.validate().map_err(|e| format!("net load: {e}"))?;
    Ok(spec)
}

/// `cargo xtask net load`: exit status 1 when any connection failed.
pub fn command(spec: &LoadSpec) -> Result<(), String> {
    let r = run(spec)?;
    print!("{}", r.summary());
    if r.failures.total() > 0 || (r.ok == 0 && r.aborted < r.attempted) {
        return Err(format!("net load: {} of {} connections failed", r.failures.total(), r.attempted));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_options_name_the_option() {
        let a = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        // The whole path of `cargo xtask net load ...`: clap's parse, then the spec's checks.
        let parse_options = |args: &[String]| -> Result<LoadSpec, String> {
            match crate::host::args::parse_args::<crate::net::options::NetArgs>("net", &[&["load".to_string()], args].concat())? {
                crate::net::options::NetArgs { command: crate::net::options::NetCommand::Load(l) } => options(l),
                other => panic!("{other:?}"),
            }
        };
        for (args, needle) in [
            ("", "--port"),
            ("--port 0", "--port"),
            ("--port x", "--port"),
            ("--port 80 --conns 0", "--conns"),
            ("--port 80 --conns many", "--conns"),
            ("--port 80 --concurrency 0", "--concurrency"),
            ("--port 80 --concurrency 1000", "--concurrency"),
            ("--port 80 --seconds 0", "--seconds"),
            ("--port 80 --timeout 0", "--timeout"),
            ("--port 80 --conns", "--conns"),
            ("--port 80 --bogus", "--bogus"),
            ("--port 80 --abort-every x", "--abort-every"),
        ] {
            let e = parse_options(&a(args)).unwrap_err();
            assert!(e.contains(needle), "{args}: {e}");
        }
        let s = parse_options(&a("--port 8080 --conns 10 --concurrency 2 --seconds 5")).unwrap();
        assert_eq!((s.port, s.conns, s.concurrency, s.max_time), (8080, 10, 2, Duration::from_secs(5)));
    }
}
