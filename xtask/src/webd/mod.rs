//! The host side of webd (Corey §6.2/§8.4): the HTTP load generator (`load`), the
//! bad-input checker (`check`), the files a run serves (`files`), steering a connection to a
//! chosen front-end (`steer`), booting webd on either system (`run`) and the `webd_filesum`
//! benchmark rows (xtask/src/bench/webd.rs). Everything connects to 127.0.0.1 only, through
//! the forward of QEMU's restricted user network (crate::host::vm::NetConfig).

pub mod cachesim;
pub mod check;
pub mod files;
pub mod http;
pub mod options;
pub mod load;
pub mod run;
pub mod steer;
pub mod suite;

use std::time::Duration;

use crate::webd::options::WebdCheckArgs;
use crate::webd::options::WebdCommand;

/// `cargo xtask webd ...` (the command line: options.rs, [`WebdCommand`]).
pub fn main(cmd: WebdCommand) -> Result<(), crate::host::outcome::Failure> {
    match cmd {
        WebdCommand::Load(a) => {
            let json_out = a.json.clone();
            let spec = crate::host::outcome::usage(load::options(a).and_then(|s| s.validate().map(|()| s).map_err(|e| format!("webd load: {e}"))))?;
            crate::host::outcome::work((|| {
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
            })())
        }
        WebdCommand::Check(a) => {
            let spec = crate::host::outcome::usage(check_spec(a))?;
            crate::host::outcome::work((|| {
                let r = check::run(&spec)?;
                print!("{}", r.lines());
                if r.failed() > 0 {
                    return Err(format!("webd check: {} case(s) failed", r.failed()));
                }
                Ok(())
            })())
        }
        WebdCommand::Run(a) => {
            let (b, ph) = crate::host::outcome::usage(run::options(a))?;
            crate::host::outcome::work(run::command(b, ph))
        }
        WebdCommand::Cachesim(a) => {
            let o = crate::host::outcome::usage(cachesim::options(a))?;
            crate::host::outcome::work(cachesim::command(o))
        }
        WebdCommand::Selftest => crate::host::outcome::work((|| {
            let kernel = crate::host::env::build_kernel()?;
            let initrd = crate::host::user::build_initrd()?;
            let t = suite::ci_tests(&kernel, &initrd)?;
            println!("{} passed, {} failed", t.passed, t.failed);
            if t.failed > 0 {
                Err(format!("{} webd test(s) failed", t.failed))
            } else {
                Ok(())
            }
        })()),
    }
}

/// `webd check`'s options as a spec (the sums file is read here).
pub fn check_spec(a: WebdCheckArgs) -> Result<check::CheckSpec, String> {
    let expect = match a.expect_sums {
        Some(f) => Some(files::read_sums(&f)?),
        None => None,
    };
    Ok(check::CheckSpec { port: a.port, timeout: Duration::from_secs(a.timeout), expect, only: a.only })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn a(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    /// `cargo xtask webd SUB ARGS...` through clap (options.rs), one-line error.
    fn parse(sub: &str, args: &[String]) -> Result<WebdCommand, String> {
        crate::host::args::parse_args::<crate::webd::options::WebdArgs>("webd", &[&[sub.to_string()], args].concat()).map(|w| w.command)
    }

    /// The whole path of `webd load ARGS` up to the run, but without the spec's own checks.
    fn parse_load(args: &[String]) -> Result<(load::WebLoadSpec, Option<std::path::PathBuf>), String> {
        let WebdCommand::Load(l) = parse("load", args)? else { panic!() };
        let json = l.json.clone();
        load::options(l).map(|s| (s, json))
    }

    fn parse_check(args: &[String]) -> Result<check::CheckSpec, String> {
        let WebdCommand::Check(c) = parse("check", args)? else { panic!() };
        check_spec(c)
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
        // `webd load` checks the spec before it runs (usage error, exit status 2).
        for (args, needle) in [("--port 80 --requests 0", "--requests"), ("--port 80 --path x", "--path"), ("--port 80 --steer 0", "--steer"), ("--port 80 --steer 65", "--steer"), ("--port 80 --path /a --paths-file /b", "--paths-file")] {
            let e = parse_load(&a(args)).and_then(|(s, _)| s.validate()).unwrap_err();
            assert!(e.contains(needle), "{args}: {e}");
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
