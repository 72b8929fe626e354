//! `cargo xtask test`: host tests, loom model checks, plugin tests, then the in-kernel tests
//! booted at several vCPU counts, then the bad-boot-condition checks. Prints the closing line
//! `N passed, N failed` and fails on any failure or timeout.

use crate::qemu::{boot_captured, BootMedium, VmConfig};
use crate::TestTally;
use std::process::Command;
use std::time::Duration;

/// Hard limit for one kernel boot in the test matrix. Generous: TCG with 8 vCPUs on a
/// 2-core host is slow, and a busy CI machine is slower; a hang still ends here.
const BOOT_TIMEOUT: Duration = Duration::from_secs(240);

fn parse_cargo_test_output(out: &str) -> TestTally {
    let mut t = TestTally::default();
    for line in out.lines() {
        // "test result: ok. 12 passed; 0 failed; 0 ignored; ..."
        if let Some(rest) = line.trim().strip_prefix("test result: ") {
            for part in rest.split(';') {
                let words: Vec<&str> = part.split_whitespace().collect();
                let n = |w: &str| words.iter().position(|x| *x == w).and_then(|i| i.checked_sub(1)).and_then(|i| words[i].parse::<usize>().ok());
                if let Some(p) = n("passed") {
                    t.passed += p;
                }
                if let Some(f) = n("failed") {
                    t.failed += f;
                }
            }
        }
    }
    t
}

fn host_tests() -> Result<TestTally, String> {
    println!("== host: cargo test");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(crate::env::workspace_root())
        .args(["test", "--workspace", "--exclude", "kernel", "--exclude", "apps", "--exclude", "libos"])
        .output()
        .map_err(|e| format!("cannot run cargo test: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut t = parse_cargo_test_output(&stdout);
    for line in stdout.lines().filter(|l| l.contains("FAILED") || l.contains("panicked")) {
        println!("   {line}");
    }
    if !out.status.success() && t.failed == 0 {
        // A build failure or crash: count it, and show why.
        eprintln!("{stderr}");
        t.failed += 1;
    }
    println!("   host: {} passed, {} failed", t.passed, t.failed);
    Ok(t)
}

/// Result of the kernel's own test run, parsed from serial.
fn parse_kernel_tests(serial: &str) -> (TestTally, Vec<String>, bool) {
    let mut t = TestTally::default();
    let mut failures = Vec::new();
    let mut summary = false;
    for line in serial.lines() {
        if let Some(idx) = line.find("ktest ").or_else(|| line.find("utest ")) {
            let rest = &line[idx + 6..];
            if rest.contains("... ok") {
                t.passed += 1;
            } else if rest.contains("... FAILED") {
                t.failed += 1;
                failures.push(rest.to_string());
            }
        }
        if line.contains("ktest: done") || line.contains("utest: done") {
            summary = true;
        }
    }
    (t, failures, summary)
}

fn kernel_tests(kernel: &std::path::Path, smp: u32, numa_nodes: u32) -> Result<TestTally, String> {
    let cfg = VmConfig {
        smp,
        numa_nodes,
        mem_mib: 512,
        cmdline: "test".into(),
        medium: Some(BootMedium::Kernel(kernel.to_path_buf())),
        timeout: Some(BOOT_TIMEOUT),
        ..Default::default()
    };
    if numa_nodes > 0 {
        println!("== kernel tests at {smp} vCPU(s), {numa_nodes} NUMA nodes");
    } else {
        println!("== kernel tests at {smp} vCPU(s)");
    }
    let out = boot_captured(&cfg, None, false, None)?;
    let (mut t, failures, summary) = parse_kernel_tests(&out.serial);
    for f in &failures {
        println!("   FAILED: {f}");
    }
    let boot_line = out.serial.lines().find(|l| l.contains("boot: ")).map(str::to_string);
    if let Some(l) = &boot_line {
        println!("   {}", l.trim());
    }
    let mut problem = None;
    if out.timed_out {
        problem = Some(format!("timed out after {} s", BOOT_TIMEOUT.as_secs()));
    } else if !summary {
        problem = Some("the kernel stopped before finishing its tests".into());
    } else if t.failed == 0 && !out.kernel_exit_ok() {
        problem = Some(format!("kernel exit status {:?}", out.status.and_then(|s| s.code())));
    }
    if let Some(p) = problem {
        println!("   FAILED: boot at {smp} vCPUs: {p}; last serial lines:");
        for l in out.serial.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev() {
            println!("   | {l}");
        }
        t.failed += 1;
    }
    println!("   {smp} vCPU(s): {} passed, {} failed ({:.1} s)", t.passed, t.failed, out.elapsed.as_secs_f64());
    Ok(t)
}

/// A boot that must stop cleanly with a failure exit and print `expect` on the console.
fn bad_boot(kernel: &std::path::Path, what: &str, mut cfg: VmConfig, expect: &str) -> Result<TestTally, String> {
    cfg.medium = Some(BootMedium::Kernel(kernel.to_path_buf()));
    cfg.timeout = Some(Duration::from_secs(120));
    let out = boot_captured(&cfg, None, false, None)?;
    let code = out.status.and_then(|s| s.code());
    let ok = !out.timed_out && code == Some(crate::qemu::QEMU_EXIT_FAILURE) && out.serial.contains(expect);
    if ok {
        let line = out.serial.lines().find(|l| l.contains(expect)).unwrap_or("").trim();
        println!("   bad boot `{what}` stops cleanly: {line}");
        Ok(TestTally { passed: 1, failed: 0 })
    } else {
        println!(
            "   FAILED: bad boot `{what}`: timed out={} exit={:?}, expected a line containing `{expect}`; serial:\n{}",
            out.timed_out, code, out.serial
        );
        Ok(TestTally { passed: 0, failed: 1 })
    }
}

fn bad_boot_conditions(kernel: &std::path::Path) -> Result<TestTally, String> {
    println!("== bad boot conditions");
    let mut t = TestTally::default();
    t.add(bad_boot(kernel, "--mem 16M", VmConfig { smp: 1, mem_mib: 16, ..Default::default() }, "boot: failed: too little memory")?);
    t.add(bad_boot(
        kernel,
        "no ACPI",
        // q35 always builds ACPI tables; the i440FX machine can go without.
        VmConfig { smp: 1, machine: "pc,acpi=off".into(), ..Default::default() },
        "boot: failed: no ACPI",
    )?);
    t.add(bad_boot(kernel, "32-bit CPU", VmConfig { smp: 1, cpu: "qemu32".into(), ..Default::default() }, "boot: failed: CPU lacks")?);
    // A deliberate kernel page fault must be reported with its symbolized backtrace.
    t.add(bad_boot(
        kernel,
        "crash=pagefault",
        VmConfig { smp: 2, cmdline: "crash=pagefault".into(), ..Default::default() },
        "deliberate_page_fault",
    )?);
    t.add(bad_boot(kernel, "crash=panic", VmConfig { smp: 1, cmdline: "crash=panic".into(), ..Default::default() }, "KERNEL PANIC")?);
    Ok(t)
}

/// User-program tests (`init=utest`): every system call's success and error paths, run as a
/// user program; the kernel then checks that every page and object came back.
fn user_tests(kernel: &std::path::Path, initrd: &std::path::Path, smp: u32, cmdline: &str) -> Result<TestTally, String> {
    user_tests_on(kernel, initrd, smp, cmdline, None)
}

/// `user_tests` with the network card (issue 15).
fn user_tests_net(kernel: &std::path::Path, initrd: &std::path::Path, smp: u32, cmdline: &str) -> Result<TestTally, String> {
    user_tests_on(kernel, initrd, smp, cmdline, Some(crate::net::NetConfig::service()?))
}

fn user_tests_on(kernel: &std::path::Path, initrd: &std::path::Path, smp: u32, cmdline: &str, net: Option<crate::net::NetConfig>) -> Result<TestTally, String> {
    user_tests_with(kernel, initrd, smp, cmdline, net, None)
}

/// `user_tests` with a disk image attached (issue 16).
pub fn user_tests_disk(kernel: &std::path::Path, initrd: &std::path::Path, smp: u32, cmdline: &str, disk: &std::path::Path) -> Result<TestTally, String> {
    user_tests_with(kernel, initrd, smp, cmdline, None, Some(disk.to_path_buf()))
}

fn user_tests_with(
    kernel: &std::path::Path,
    initrd: &std::path::Path,
    smp: u32,
    cmdline: &str,
    net: Option<crate::net::NetConfig>,
    disk: Option<std::path::PathBuf>,
) -> Result<TestTally, String> {
    let cfg = VmConfig {
        disk,
        smp,
        cmdline: cmdline.into(),
        medium: Some(BootMedium::Kernel(kernel.to_path_buf())),
        initrd: Some(initrd.to_path_buf()),
        timeout: Some(BOOT_TIMEOUT),
        net,
        ..Default::default()
    };
    println!("== user tests ({cmdline}) at {smp} vCPU(s)");
    let out = boot_captured(&cfg, None, false, None)?;
    let (mut t, failures, summary) = parse_kernel_tests(&out.serial);
    for f in &failures {
        println!("   FAILED: {f}");
    }
    let leak_line = out.serial.lines().find(|l| l.contains("init: free pages")).map(|l| l.trim().to_string());
    if out.timed_out || !summary || !out.kernel_exit_ok() {
        println!(
            "   FAILED: `{cmdline}` at {smp} vCPUs: timed out={} finished={} exit={:?}; last lines:",
            out.timed_out,
            summary,
            out.status.and_then(|s| s.code())
        );
        for l in out.serial.lines().rev().take(12).collect::<Vec<_>>().into_iter().rev() {
            println!("   | {l}");
        }
        t.failed += 1;
    } else {
        // The kernel's leak check after the program exited counts as a test of its own.
        t.passed += 1;
    }
    if let Some(l) = leak_line {
        println!("   {l}");
    }
    println!("   {smp} vCPU(s): {} passed, {} failed ({:.1} s)", t.passed, t.failed, out.elapsed.as_secs_f64());
    Ok(t)
}

/// Each benchmark program runs to a clean exit with nothing leaked.
fn program_runs(kernel: &std::path::Path, initrd: &std::path::Path) -> Result<TestTally, String> {
    println!("== user programs");
    let mut t = TestTally::default();
    let programs = crate::user::program_names()?;
    let runs: [(&str, &str, u32); 3] = [("hello", "hello -- one two", 2), ("memclone", "memclone -- 4M 2", 2), ("mempass", "mempass -- 4M 2", 2)];
    for (prog, cmd, smp) in runs {
        if !programs.iter().any(|p| p == prog) {
            println!("   (no `{prog}` program yet; skipped)");
            continue;
        }
        let cfg = VmConfig {
            smp,
            cmdline: format!("init={cmd}"),
            medium: Some(BootMedium::Kernel(kernel.to_path_buf())),
            initrd: Some(initrd.to_path_buf()),
            timeout: Some(BOOT_TIMEOUT),
            ..Default::default()
        };
        let out = boot_captured(&cfg, None, false, None)?;
        let exit_line = out.serial.lines().find(|l| l.contains("exited with code")).unwrap_or("").trim().to_string();
        if out.kernel_exit_ok() && !out.timed_out {
            println!("   {prog}: {exit_line}");
            t.passed += 1;
        } else {
            println!("   FAILED: `init={cmd}` at {smp} vCPUs (timed out={}):\n{}", out.timed_out, out.serial);
            t.failed += 1;
        }
    }
    Ok(t)
}

/// The shell (`init=sh`) with commands on its serial input: programs run on chosen cores
/// (its own included), bad input gets one line each and the shell keeps going, `halt` ends
/// it with nothing leaked.
fn shell_smoke(kernel: &std::path::Path, initrd: &std::path::Path) -> Result<TestTally, String> {
    println!("== shell smoke test");
    let cfg = VmConfig {
        smp: 2,
        mem_mib: 192,
        cmdline: "init=sh".into(),
        medium: Some(BootMedium::Kernel(kernel.to_path_buf())),
        initrd: Some(initrd.to_path_buf()),
        timeout: Some(BOOT_TIMEOUT),
        ..Default::default()
    };
    // Input sent while the kernel boots can lose its first bytes (the UART is reset): lead
    // with blank lines, which the shell ignores.
    let input = format!("{}run -c 0,1 hello a b\nfoo\nrun -c 7 hello\nrun -c 1,x hello\nrun nosuch\ncores\nstat\nobjs\ngrant 1\nrun -c 1 hog\nrun -c 0 hog\nrun -c 1 hello after\nhalt\n", "\n".repeat(16));
    let out = boot_captured(&cfg, Some(&input), false, None)?;
    let checks: [(&str, &dyn Fn(&str) -> bool); 11] = [
        ("program output on both cores", &|s| s.lines().filter(|l| l.trim() == "arg 0: a").count() == 2),
        ("exit line from the shell's own core", &|s| s.contains("sh: hello on core 0 exited with code 0")),
        ("exit line from another core", &|s| s.contains("sh: hello on core 1 exited with code 0")),
        ("unknown command", &|s| s.contains("sh: unknown command `foo`")),
        ("bad core lists", &|s| s.matches("sh: bad core list").count() == 2),
        ("unknown program", &|s| s.contains("sh: no such program `nosuch`")),
        ("cores, stat, objs", &|s| s.contains("core 1: XC") && s.contains("soft_faults") && s.contains("segment  image")),
        ("grant without sched=core0", &|s| s.contains("sh: grant: unsupported")),
        ("out of memory, then keeps going", &|s| s.contains("sh: hog on core 1 exited with code") && s.contains("arg 0: after")),
        // On the shell's own core the program runs in the shell's context: running out of
        // memory must be a failed allocation (exit 2 from hog), not a fault ending the shell.
        ("out of memory on the shell's core", &|s| s.contains("sh: hog on core 0 exited with code 2") && s.contains("arg 0: after")),
        ("halt: clean exit, no leak", &|s| s.contains("sh: halt") && s.contains("init: `sh` exited with code 0")),
    ];
    let mut t = TestTally::default();
    for (what, check) in checks {
        if check(&out.serial) {
            t.passed += 1;
        } else {
            println!("   FAILED: shell: {what}");
            t.failed += 1;
        }
    }
    if out.timed_out || !out.kernel_exit_ok() {
        println!("   FAILED: shell: timed out={} exit={:?}", out.timed_out, out.status.and_then(|s| s.code()));
        t.failed += 1;
    }
    if t.failed > 0 {
        for l in out.serial.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev() {
            println!("   | {l}");
        }
    }
    println!("   shell: {} passed, {} failed ({:.1} s)", t.passed, t.failed, out.elapsed.as_secs_f64());
    Ok(t)
}

/// Boot `tcpserv` in `mode` with the card, open 40 connections from the host (after one
/// warm-up), and check every reply, the guest's count, and its leak check.
fn tcp_service(kernel: &std::path::Path, initrd: &std::path::Path, smp: u32, mode: &str) -> Result<TestTally, String> {
    use crate::net::tcp_accept::{self, AcceptSpec};
    let name = format!("tcp service, {mode}, {smp} vCPUs");
    println!("== {name}");
    let net = crate::net::NetConfig::service()?;
    let port = net.host_port(crate::net::SERVICE_PORT).ok_or("no forward to the service port")?;
    let spec = AcceptSpec { conns: 40, rounds: 1, warmup: 1, ..AcceptSpec::default() };
    let cfg = VmConfig {
        smp,
        cmdline: format!("init=tcpserv -- mode={mode} conns={} warmup=1", spec.guest_conns()),
        medium: Some(BootMedium::Kernel(kernel.to_path_buf())),
        initrd: Some(initrd.to_path_buf()),
        net: Some(net),
        ..Default::default()
    };
    let mut args = cfg.qemu_args();
    args.extend(["-serial", "stdio", "-monitor", "none"].map(String::from));
    let o = tcp_accept::run(&args, port, &spec, false)?;
    let mut t = TestTally::default();
    let mut check = |what: &str, ok: bool, detail: String| {
        if ok {
            t.passed += 1;
        } else {
            t.failed += 1;
            println!("   FAILED: {name}: {what}: {detail}");
        }
    };
    let good: u64 = o.rounds.iter().map(|r| r.ok).sum();
    let bad: u64 = o.rounds.iter().map(|r| r.failures.total()).sum();
    check("every reply is the 128 bytes", o.problem.is_none() && good == spec.conns && bad == 0, format!("{good} good, {bad} failed, problem {:?}", o.problem));
    let words = o.guest_words();
    let served = words.iter().find(|(k, _)| k == "conns").map(|(_, v)| v.clone()).unwrap_or_default();
    check("the guest counted every connection", served == spec.guest_conns().to_string(), format!("conns={served:?}"));
    // The kernel's own verdict (init exited 0 and its leak check found nothing) is QEMU's
    // exit status, as for every other boot of the suite.
    let leak = o.finished.serial.lines().find(|l| l.contains("init: free pages")).unwrap_or("").to_string();
    let clean = o.finished.exit_code == Some(crate::qemu::QEMU_EXIT_SUCCESS);
    check("exit 0 and nothing leaked", clean, format!("QEMU exit {:?}, {leak:?}", o.finished.exit_code));
    if t.failed > 0 {
        for l in o.finished.serial.lines().rev().take(10).collect::<Vec<_>>().into_iter().rev() {
            println!("   | {l}");
        }
    }
    println!("   {name}: {} passed, {} failed", t.passed, t.failed);
    Ok(t)
}

/// `ltest` run by the shell (issue 5's cfork-under-the-shell bug): once on the shell's own
/// core (inside the shell's context, where cfork must leave the shell's mappings alone) and
/// once on core 1 (where core 0, the shell's, is busy: `Busy` for threads and cfork there,
/// the tests use core 2). Every `utest` line counts; both runs must exit 0, the second must
/// have found core 0 busy, and `halt` must end cleanly with nothing leaked.
fn shell_ltest(kernel: &std::path::Path, initrd: &std::path::Path) -> Result<TestTally, String> {
    println!("== ltest under the shell at 3 vCPUs (its core, then another)");
    let cfg = VmConfig {
        smp: 3,
        cmdline: "init=sh".into(),
        medium: Some(BootMedium::Kernel(kernel.to_path_buf())),
        initrd: Some(initrd.to_path_buf()),
        timeout: Some(BOOT_TIMEOUT),
        ..Default::default()
    };
    // Blank lines first: input sent while the kernel boots can lose bytes (see shell_smoke).
    let input = format!("{}run -c 0 ltest nomeasure\nrun -c 1 ltest nomeasure\nhalt\n", "\n".repeat(16));
    let out = boot_captured(&cfg, Some(&input), false, None)?;
    let (mut t, failures, _) = parse_kernel_tests(&out.serial);
    for f in &failures {
        println!("   FAILED: {f}");
    }
    let checks: [(&str, &dyn Fn(&str) -> bool); 5] = [
        ("both runs finished", &|s| s.matches("utest: done").count() == 2),
        ("exit 0 on the shell's core", &|s| s.contains("sh: ltest on core 0 exited with code 0")),
        ("exit 0 on another core", &|s| s.contains("sh: ltest on core 1 exited with code 0")),
        ("the shell's core found busy from core 1", &|s| s.contains("cores::probe ... ok (free: [2], busy: [0])")),
        ("halt: clean exit, no leak", &|s| s.contains("sh: halt") && s.contains("init: `sh` exited with code 0")),
    ];
    for (what, check) in checks {
        if check(&out.serial) {
            t.passed += 1;
        } else {
            println!("   FAILED: shell ltest: {what}");
            t.failed += 1;
        }
    }
    if out.timed_out || !out.kernel_exit_ok() {
        println!("   FAILED: shell ltest: timed out={} exit={:?}", out.timed_out, out.status.and_then(|s| s.code()));
        t.failed += 1;
    }
    if t.failed > 0 {
        for l in out.serial.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev() {
            println!("   | {l}");
        }
    }
    println!("   shell ltest: {} passed, {} failed ({:.1} s)", t.passed, t.failed, out.elapsed.as_secs_f64());
    Ok(t)
}

/// Large configurations: every core online and every node found (boot only, no tests).
fn summary_boots(kernel: &std::path::Path) -> Result<TestTally, String> {
    println!("== boot summary at large configurations");
    let mut t = TestTally::default();
    for (smp, numa, mem) in [(64u32, 8u32, 1024u64), (16, 0, 512), (5, 3, 600)] {
        let cfg = VmConfig {
            smp,
            numa_nodes: numa,
            mem_mib: mem,
            medium: Some(BootMedium::Kernel(kernel.to_path_buf())),
            timeout: Some(Duration::from_secs(120)),
            ..Default::default()
        };
        let out = boot_captured(&cfg, None, false, None)?;
        let want_cores = format!("boot: {smp}/{smp} cores online");
        let want_nodes = format!(" {} NUMA nodes", numa.max(1));
        let line = out.serial.lines().find(|l| l.contains("cores online")).unwrap_or("").trim().to_string();
        if line.contains(&want_cores) && line.contains(&want_nodes) && out.kernel_exit_ok() {
            println!("   {line}");
            t.passed += 1;
        } else {
            println!("   FAILED: {smp} vCPUs / {numa} nodes: got `{line}`, timed out={}", out.timed_out);
            t.failed += 1;
        }
    }
    Ok(t)
}

/// The GRUB ISO must reach the same summary line under SeaBIOS and under OVMF (UEFI).
fn iso_boots() -> Result<TestTally, String> {
    println!("== ISO boots (GRUB Multiboot2)");
    let iso = crate::env::target_dir().join("os-test.iso");
    // The ISO carries the program archive as a Multiboot2 module: run a program from it.
    crate::iso::build_iso_with(&iso, "init=hello -- from-iso")?;
    crate::iso::ensure_ovmf()?;
    let mut t = TestTally::default();
    for uefi in [false, true] {
        let cfg = VmConfig {
            smp: 2,
            medium: Some(BootMedium::Iso { path: iso.clone(), uefi }),
            timeout: Some(Duration::from_secs(180)),
            ..Default::default()
        };
        let out = boot_captured(&cfg, None, false, None)?;
        let firmware = if uefi { "OVMF" } else { "SeaBIOS" };
        let line = out.serial.lines().find(|l| l.contains("boot: 2/2 cores online"));
        let ran = out.serial.contains("arg 0: from-iso");
        if let (Some(l), true, true, true) = (line, out.kernel_exit_ok(), out.serial.contains("via Multiboot2"), ran) {
            println!("   {firmware}: {} (and ran `hello` from the module)", l.trim());
            t.passed += 1;
        } else {
            println!("   FAILED: ISO under {firmware}: timed out={} exit={:?}; serial:\n{}", out.timed_out, out.status.and_then(|s| s.code()), out.serial);
            t.failed += 1;
        }
    }
    Ok(t)
}

pub fn run(args: &[String]) -> Result<(), String> {
    let mut smp_list: Vec<u32> = vec![1, 2, 4, 8];
    let mut host_only = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--smp" => {
                let v = it.next().ok_or("--smp needs a list such as 1,2,4")?;
                smp_list = v
                    .split(',')
                    .map(|s| s.trim().parse::<u32>().map_err(|_| format!("--smp: `{s}` is not a number")))
                    .collect::<Result<_, _>>()?;
                if smp_list.iter().any(|&n| n == 0 || n > 255) {
                    return Err("--smp: core counts must be 1..=255".into());
                }
            }
            "--host-only" => host_only = true,
            other => return Err(format!("test: unknown option `{other}`")),
        }
    }
    let mut total = TestTally::default();
    total.add(host_tests()?);
    println!("== loom model checks");
    total.add(crate::percore_tasks::loom_tests()?);
    println!("== plugin tests");
    total.add(crate::plugins::tests()?);
    if !host_only {
        let kernel = crate::env::build_kernel()?;
        crate::env::ensure_qemu()?;
        for &smp in &smp_list {
            total.add(kernel_tests(&kernel, smp, 0)?);
        }
        total.add(kernel_tests(&kernel, 4, 2)?);
        let initrd = crate::user::build_initrd()?;
        for smp in [1u32, 2, 4] {
            total.add(user_tests(&kernel, &initrd, smp, "init=utest")?);
        }
        // The library OS (issue 5): threads, cfork, descriptors on shares, the per-core heap.
        // At 4 vCPUs too: the heap stress's leak check drains every core's remote-free list
        // before it counts, so it is exact however the vCPUs are scheduled (docs/libos.md).
        for smp in [2u32, 4] {
            total.add(user_tests(&kernel, &initrd, smp, "init=ltest -- nomeasure")?);
        }
        total.add(shell_smoke(&kernel, &initrd)?);
        total.add(shell_ltest(&kernel, &initrd)?);
        // Core roles: an application core forwarding to kernel cores, roles changing under load.
        total.add(user_tests(&kernel, &initrd, 4, "roles=kc:1,ac:2,kc:3 init=roletest")?);
        total.add(user_tests(&kernel, &initrd, 3, "roles=tc:0-1 init=tctest")?);
        // Protected procedure calls (docs/ppc.md): a cfork'd server's gates called on the
        // client's core, which time-shares (a tick switches away in the middle of calls).
        total.add(user_tests(&kernel, &initrd, 2, "roles=tc:0-1 init=ppctest")?);
        // The core scheduler on core 0 (NIX): grants, exhaustion, owners, races; and off by
        // default.
        total.add(user_tests(&kernel, &initrd, 4, "sched=core0 init=schedtest")?);
        total.add(user_tests(&kernel, &initrd, 2, "init=schedtest -- off")?);
        // Nothing a program does may break the kernel (docs/fuzz.md): isolation attacks (3
        // vCPUs adds the forwarded-call case), a short fuzz with and without allocation
        // injection, and the planted-bug demonstration.
        total.add(user_tests(&kernel, &initrd, 2, "init=isolation")?);
        total.add(user_tests(&kernel, &initrd, 3, "init=isolation")?);
        total.add(crate::fuzz::ci_fuzz(&kernel, &initrd)?);
        // The network (issue 15): the card's device object under bad input, then Corey's TCP
        // service served to the host in each configuration, every reply checked.
        total.add(user_tests_net(&kernel, &initrd, 2, "init=nettest")?);
        for (smp, mode) in [(2u32, "dedicated"), (3, "polling"), (2, "inline")] {
            total.add(tcp_service(&kernel, &initrd, smp, mode)?);
        }
        // webd (issue 18): each mode, every sum from every front-end, bad input, no leak.
        total.add(crate::webd::suite::ci_tests(&kernel, &initrd)?);
        // The network (issue 15): the Linux baseline's TCP service and the frame fuzzer.
        total.add(crate::net::qemu_tests()?);
        // Files (issue 16): the disk's device object under bad input, ext2 read byte for byte
        // in the library OS, corrupt metadata; the image is still clean afterwards.
        total.add(crate::fs::ci_test(&kernel, &initrd)?);
        total.add(program_runs(&kernel, &initrd)?);
        // Metis MapReduce (issue 17): wc, wri, wrmem equal to the host reference.
        total.add(crate::metis::ci_check(&kernel)?);
        total.add(summary_boots(&kernel)?);
        total.add(bad_boot_conditions(&kernel)?);
        total.add(iso_boots()?);
    }
    println!("{} passed, {} failed", total.passed, total.failed);
    if total.failed > 0 {
        Err(format!("{} test(s) failed", total.failed))
    } else if total.passed == 0 {
        Err("no test ran".into())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_summary_lines_are_summed() {
        let out = "running 3 tests\ntest result: ok. 3 passed; 0 failed; 0 ignored\n\ntest result: FAILED. 1 passed; 2 failed; 0 ignored";
        let t = parse_cargo_test_output(out);
        assert_eq!((t.passed, t.failed), (4, 2));
    }

    #[test]
    fn kernel_lines_are_counted() {
        let serial = "[0] ktest mm::pages ... ok\n[1] ktest heap::slab ... FAILED: leaked 3\n[0] ktest: done 1 passed, 1 failed\n";
        let (t, f, done) = parse_kernel_tests(serial);
        assert_eq!((t.passed, t.failed), (1, 1));
        assert_eq!(f.len(), 1);
        assert!(done);
    }
}
