//! The Linux side of the suite as one static program.
//!
//! In the guest it is `/init` (pid 1): it mounts /proc, reads its parameters from the kernel
//! command line (`bench=NAME [workers=N] [key=value ...]`), runs the benchmark (best of
//! `reps`, bench/src/report.rs, as `bench-ours` does), prints one `bench-result` (or
//! `bench-error`) line and `bench-done` on the console, and powers the machine off if the
//! benchmark succeeded (otherwise it exits with 1, which panics the guest kernel: the harness
//! sees no power-off and records an error). On a host it takes the same words as arguments and just exits, which makes
//! `cargo run -p bench --bin bench-linux -- bench=dupclose workers=2` a quick native check.

#[cfg(target_os = "linux")]
fn main() {
    use bench::catalog::DONE_LINE;
    use bench::report::{run_best, ErrorLine};
    use std::io::Write;

    let as_init = std::process::id() == 1;
    let line = if as_init {
        // SAFETY: plain mount(2) with NUL-terminated strings.
        unsafe { libc::mount(c"proc".as_ptr(), c"/proc".as_ptr(), c"proc".as_ptr(), 0, std::ptr::null()) };
        print_config();
        std::fs::read_to_string("/proc/cmdline").unwrap_or_default()
    } else {
        std::env::args().skip(1).collect::<Vec<_>>().join(" ")
    };
    // The POSIX commutativity checker (docs/commute.md) instead of a benchmark.
    let commute = line.split_ascii_whitespace().any(|w| w == bench::commute_posix::COMMAND_WORD);
    let ok = if commute {
        let p = bench::linux::Linux::new(as_init);
        match bench::commute_posix::run(&p, bench::commute_posix::pick_word(&line), |l| println!("{l}")) {
            Ok(()) => true,
            Err(e) => {
                println!("commute-error {e}");
                false
            }
        }
    } else {
        match bench::params::Params::parse(&line) {
        Err(e) => {
            println!("{}", ErrorLine("?", &e));
            false
        }
        Ok(params) => {
            let p = bench::linux::Linux::new(as_init);
            let run = run_best(&p, &params, p.markers());
            println!("{run}");
            run.is_ok()
        }
    }
    };
    println!("{DONE_LINE}");
    let _ = std::io::stdout().flush();
    if as_init && ok {
        // SAFETY: pid 1 powering the machine off after its output is flushed.
        unsafe {
            libc::sync();
            libc::reboot(libc::RB_POWER_OFF);
        }
    }
    // A failed run (or a power-off that failed) exits: as pid 1 that makes the kernel panic
    // with the exit code (`Attempted to kill init! exitcode=0x00000100`), and panic=-1 with
    // QEMU's -no-reboot ends the run. The harness takes a cell as `ok` only after the
    // kernel's `reboot: Power down` (xtask/src/bench/linux_sys.rs).
    std::process::exit(if ok { 0 } else { 1 });
}

/// One line about the kernel this runs on, for the harness's record of the Linux baseline
/// (xtask/src/bench/linux_sys.rs reads it): its release, the active security modules and
/// every CPU vulnerability's state as the kernel reports it (mitigated, vulnerable or not
/// affected), each run of spaces as one `~` (the states hold underscores of their own). sysfs and securityfs are mounted for it; a part that
/// cannot be read is left out.
#[cfg(target_os = "linux")]
fn print_config() {
    let _ = std::fs::create_dir_all("/sys");
    // SAFETY: plain mount(2) calls with NUL-terminated strings.
    unsafe {
        libc::mount(c"sysfs".as_ptr(), c"/sys".as_ptr(), c"sysfs".as_ptr(), 0, std::ptr::null());
        libc::mount(c"securityfs".as_ptr(), c"/sys/kernel/security".as_ptr(), c"securityfs".as_ptr(), 0, std::ptr::null());
    }
    let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.split_whitespace().collect::<Vec<_>>().join("~"));
    let mut line = format!("bench-config release={}", read("/proc/sys/kernel/osrelease").unwrap_or_default());
    if let Some(lsm) = read("/sys/kernel/security/lsm") {
        line.push_str(&format!(" lsm={lsm}"));
    }
    let mut vulns: Vec<(String, String)> = std::fs::read_dir("/sys/devices/system/cpu/vulnerabilities")
        .map(|d| d.flatten().filter_map(|e| Some((e.file_name().to_string_lossy().to_string(), read(&e.path().to_string_lossy())?))).collect())
        .unwrap_or_default();
    vulns.sort();
    for (k, v) in vulns {
        line.push_str(&format!(" vuln_{k}={v}"));
    }
    println!("{line}");
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("bench-linux runs on Linux only");
    std::process::exit(2);
}
