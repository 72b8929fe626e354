//! The conformance suite: each case (a program, its arguments, standard input and files) runs
//! on the Linux guest and on this system; standard output, exit status and the files left
//! under `/tmp` must be the same. A difference fails the case unless
//! `linux/accepted-differences.txt` lists it with its reason; a listed difference that no
//! longer occurs fails too, so the list only holds what is true. On Linux each case must also
//! give what a Linux user expects (the case's expected status and output), so the oracle
//! itself is checked.
//!
//! `cargo xtask exec --conformance [--system both|linux|ours] [--only PATTERN]` runs every
//! case; `cargo xtask test` runs the cases marked `ci` (a bounded part, docs/linux-exec.md).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::command::System;
use super::{ExecOutput, ExecRequest};
use crate::host::outcome::TestTally;

/// What a case's standard output must be on Linux.
#[derive(Debug, Clone, Copy)]
pub enum Out {
    /// Exactly this.
    Is(&'static str),
    /// Every one of these lines appears in it.
    Has(&'static [&'static str]),
}

#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub name: &'static str,
    /// `busybox` (Debian's busybox-static), `busybox-musl` (the musl build) or a C program of
    /// linux/progs/.
    pub program: &'static str,
    pub args: &'static [&'static str],
    pub stdin: &'static str,
    /// (path in the guest, relative to /tmp; contents)
    pub files: &'static [(&'static str, &'static str)],
    pub smp: u32,
    /// The exit status on Linux.
    pub status: i32,
    pub stdout: Out,
    /// Part of the bounded run in `cargo xtask test`.
    pub ci: bool,
    /// A network card on both systems (QEMU's restricted user network, no forwards): for
    /// programs that make TCP sockets.
    pub net: bool,
}

const BB: &str = "busybox";
/// busybox 1.35 built from Debian's source package with musl-gcc (`progs::busybox_musl`); in
/// the guest it is `/bin/busybox` too.
const BB_MUSL: &str = "busybox-musl";
const WORDS: &str = "pear\napple\nfig\napple\nkiwi\n";
const TEXT: (&str, &str) = ("text", "one two three\nfour five\nsix\n");

const fn bb(name: &'static str, args: &'static [&'static str], stdout: Out) -> Case {
    Case { name, program: BB, args, stdin: "", files: &[], smp: 1, status: 0, stdout, ci: false, net: false }
}

const fn bb_musl(name: &'static str, args: &'static [&'static str], stdout: Out) -> Case {
    Case { name, program: BB_MUSL, args, stdin: "", files: &[], smp: 1, status: 0, stdout, ci: false, net: false }
}

const fn c_prog(name: &'static str, program: &'static str, args: &'static [&'static str], status: i32, stdout: Out) -> Case {
    Case { name, program, args, stdin: "", files: &[], smp: 1, status, stdout, ci: false, net: false }
}

/// Every case, in the order they run.
pub const CASES: &[Case] = &[
    bb("echo", &["echo", "hello", "  world", "-"], Out::Is("hello   world -\n")),
    bb("ls-l", &["ls", "-l", "/bin"], Out::Has(&["total 1936", "-rwxr-xr-x    1 0        0          1982256 Jan  1  1970 busybox"])),
    Case { stdin: "line 1\nline 2\n", files: &[TEXT], ..bb("cat", &["cat", "-", "text"], Out::Is("line 1\nline 2\none two three\nfour five\nsix\n")) },
    Case { stdin: WORDS, ..bb("sort", &["sort", "-u"], Out::Is("apple\nfig\nkiwi\npear\n")) },
    Case { files: &[TEXT], ..bb("wc", &["wc", "text"], Out::Is("        3         6        28 text\n")) },
    Case { stdin: WORDS, ..bb("sed", &["sed", "-e", "s/p/P/g", "-e", "/fig/d"], Out::Is("Pear\naPPle\naPPle\nkiwi\n")) },
    Case { files: &[TEXT], ..bb("awk", &["awk", "{ n += NF; print NR \": \" $NF } END { print n }", "text"], Out::Is("1: three\n2: five\n3: six\n6\n")) },
    bb("find", &["sh", "-c", "mkdir -p a/b/c && touch a/x a/b/y && find a | sort && find a -type f -name y"], Out::Is("a\na/b\na/b/c\na/b/y\na/x\na/b/y\n")),
    Case {
        ci: true,
        ..bb(
            "tar",
            &["sh", "-c", "mkdir -p t/d && echo one > t/1 && echo two > t/d/2 && tar cf t.tar t && rm -r t && tar xvf t.tar | sort && rm t.tar && cat t/1 t/d/2"],
            Out::Is("t/\nt/1\nt/d/\nt/d/2\none\ntwo\n"),
        )
    },
    Case {
        ci: true,
        files: &[TEXT],
        ..bb("gzip", &["sh", "-c", "gzip -c < text > text.gz && gzip -t text.gz && gunzip -c text.gz | wc -c && gzip -d < text.gz | cmp - text && echo same"], Out::Is("28\nsame\n"))
    },
    Case {
        ci: true,
        stdin: WORDS,
        ..bb(
            "sh",
            &["sh", "-c", "sort | uniq -c | sort -rn | head -1; echo out > f1; echo err 2>/dev/null >&2; cat < f1 >> f2; cat f2; (cd /; pwd); pwd; (exit 3); echo $?; sleep 0 & wait $!; echo bg $?; x=$(echo sub | tr a-z A-Z); echo $x"],
            Out::Is("      2 apple\nout\n/\n/tmp\n3\nbg 0\nSUB\n"),
        )
    },
    Case { status: 7, ..bb("sh-status", &["sh", "-c", "echo before; exit 7"], Out::Is("before\n")) },
    Case { ci: true, ..c_prog("pthreads", "pthreads", &[], 0, Out::Has(&["hand-offs: 100000 of 100000", "pthreads: ok"])) },
    // The same 4 threads on 4 vCPUs: hand-offs between cores (futex wakes that cross vCPUs).
    Case { smp: 4, ..c_prog("pthreads-smp4", "pthreads", &[], 0, Out::Has(&["hand-offs: 100000 of 100000", "pthreads: ok"])) },
    // Threads and futexes call by call, with Linux's errors for bad input; then a thread's
    // exit_group while the main thread waits in pthread_join.
    Case { ci: true, ..c_prog("threads", "threads", &[], 0, Out::Has(&["threads: ok"])) },
    Case { ci: true, ..c_prog("threads-groupexit", "threads", &["groupexit"], 7, Out::Is("")) },
    // Signals with threads: tgkill to another thread, per-thread masks, a futex wait
    // interrupted (EINTR).
    Case { ci: true, ..c_prog("threads-signals", "threads", &["signals"], 0, Out::Has(&["threads signals: ok"])) },
    // Four threads on 4 vCPUs each sending itself signals from its own call site to its own
    // handler: every resume must land in the thread it belongs to.
    Case { ci: true, smp: 4, ..c_prog("sigthreads-smp4", "sigthreads", &[], 0, Out::Has(&["mix-ups: 0", "sigthreads: ok"])) },
    // A handler that returns to a stack pointer with no stack: killed by SIGSEGV.
    Case { ci: true, ..c_prog("sigthreads-badrsp", "sigthreads", &["badrsp"], 139, Out::Is("returning to rsp 8\n")) },
    Case { ci: true, ..c_prog("signals", "signals", &[], 0, Out::Has(&["signals: ok"])) },
    Case { ci: true, ..c_prog("signals-segv", "signals", &["segv"], 139, Out::Is("touching address 0 with no handler\n")) },
    // Signals a process sends itself and its own faults (no fork needed).
    Case { ci: true, ..c_prog("sigself", "sigself", &[], 0, Out::Has(&["sigself: ok"])) },
    Case { ci: true, ..c_prog("sigself-segv", "sigself", &["segv"], 139, Out::Is("dying by segv\n")) },
    c_prog("sigself-ignsegv", "sigself", &["ignsegv"], 139, Out::Is("dying by ignsegv\n")),
    c_prog("sigself-fpe", "sigself", &["fpe"], 136, Out::Is("dying by fpe\n")),
    c_prog("sigself-abort", "sigself", &["abort"], 134, Out::Is("dying by abort\n")),
    c_prog("sigself-term", "sigself", &["term"], 143, Out::Is("dying by term\n")),
    Case { ci: true, ..c_prog("forkstorm", "forkstorm", &[], 0, Out::Has(&["forkstorm: ok"])) },
    Case { ci: true, ..c_prog("mmapfile", "mmapfile", &[], 0, Out::Has(&["mmapfile: ok"])) },
    // The file calls that make, change and remove names, and dup/fcntl (linux/progs/fscalls.c).
    Case { ci: true, ..c_prog("fscalls", "fscalls", &[], 0, Out::Has(&["mode of b: 751", "fscalls: done"])) },
    Case { ci: true, ..c_prog("pipe2proc", "pipe2proc", &[], 0, Out::Has(&["pipe2proc: ok"])) },
    // AF_UNIX stream sockets (socketpair, names, fork, readiness, Linux's errors for bad
    // input), the waits with a signal mask, and TCP sockets' errors for bad input
    // (linux/progs/sockcalls.c); at 2 vCPUs the forked peers run on the other core.
    Case {
        ci: true,
        smp: 2,
        net: true,
        ..c_prog("sockcalls", "sockcalls", &[], 0, Out::Has(&["the child's answer: SHOUT THIS", "accepted: len 16 name @unixsock-test", "bind the same name again: -1 EADDRINUSE", "ppoll, SIGUSR1 let through: -1 EINTR", "bind port 7777 again: -1 EADDRINUSE", "sockcalls: ok"]))
    },
    Case { ci: true, ..c_prog("procs", "procs", &[], 0, Out::Has(&["procs: ok"])) },
    // Bad ELF files and bad execve/clone input (docs/linux-abi.md, "Bad input"): the errors
    // Linux defines must match; what Linux takes past its point of no return differs.
    Case {
        ci: true,
        ..c_prog(
            "badexec",
            "badexec",
            &[],
            0,
            Out::Has(&[
                "truncated inside the program headers: errno ENOEXEC",
                "wrong machine: errno ENOEXEC",
                "PT_INTERP of a missing interpreter: errno ENOENT",
                "unchanged copy (control: runs, status 42): status 42",
                "a directory: errno EACCES",
                "one argument of 200 KiB: errno E2BIG",
                "clone CLONE_SIGHAND without CLONE_VM: errno EINVAL",
                "badexec: done",
            ]),
        )
    },
    Case { ci: true, ..c_prog("badexec-undefined", "badexec", &["undefined"], 0, Out::Has(&["entry outside the image: status 139", "badexec: done"])) },
    // Processes and threads together (linux/progs/procrobust.c): a thread asleep in pause,
    // rt_sigsuspend or wait4 leaves the process lock to the others; a process-directed
    // signal wakes a futex waiter at once (two vCPUs: the waiter's core halts); orphans go
    // on under init and orphaned zombies are reaped; fork and execve from a second thread.
    Case { ci: true, ..c_prog("procrobust-lockwait", "procrobust", &["lockwait"], 0, Out::Has(&["procrobust lockwait: ok"])) },
    Case { ci: true, smp: 2, ..c_prog("procrobust-futexsig", "procrobust", &["futexsig"], 0, Out::Has(&["rounds woken within 500 ms of the kill: 8 of 8", "procrobust futexsig: ok"])) },
    Case { ci: true, ..c_prog("procrobust-orphan", "procrobust", &["orphan"], 0, Out::Has(&["grandchild: parent after its parent's exit: 1", "procrobust orphan: ok"])) },
    // Not in CI (its time): `sh-shared-offset` below checks the shared offset there.
    c_prog("procrobust-offsets", "procrobust", &["offsets"], 0, Out::Has(&["procrobust offsets: ok"])),
    // Two children of the shell write in turn to the group's one open file: both lines stay
    // (the offset is the open file description's, shared across fork).
    Case { ci: true, ..bb("sh-shared-offset", &["sh", "-c", "{ sh -c 'echo a'; sh -c 'echo b'; } > f; cat f"], Out::Is("a\nb\n")) },
    Case { ci: true, ..c_prog("procrobust-forkthread", "procrobust", &["forkthread"], 0, Out::Has(&["procrobust forkthread: ok"])) },
    Case { ci: true, smp: 2, ..c_prog("procrobust-execthread", "procrobust", &["execthread"], 0, Out::Has(&["procrobust execthread: ok"])) },
    // Two processes time-sharing the one vCPU keep their own SSE registers (the kernel saves
    // them at each switch of a time-sharing core).
    Case { ci: true, ..c_prog("fpswitch", "fpswitch", &[], 0, Out::Is("parent saw another's SSE state: never\nchild saw another's SSE state: never\nfpswitch: ok\n")) },
    // The musl build: the same applets through the other C library.
    bb_musl("musl-echo", &["echo", "hello", "  world", "-"], Out::Is("hello   world -\n")),
    Case { stdin: WORDS, ..bb_musl("musl-sort", &["sort", "-u"], Out::Is("apple\nfig\nkiwi\npear\n")) },
    Case { files: &[TEXT], ..bb_musl("musl-awk", &["awk", "{ n += NF; print NR \": \" $NF } END { print n }", "text"], Out::Is("1: three\n2: five\n3: six\n6\n")) },
    Case {
        ci: true,
        stdin: WORDS,
        ..bb_musl(
            "musl-sh",
            // This build's sh finds applets on PATH only (no FEATURE_SH_STANDALONE), and the
            // guest's PATH holds no applet links: each is called through `busybox`.
            &["sh", "-c", "busybox sort | busybox uniq -c | busybox sort -rn | busybox head -1; busybox mkdir -p t/d && echo one > t/1 && busybox tar cf t.tar t && busybox rm -r t && busybox tar xf t.tar && busybox cat t/1 && busybox rm t.tar; x=$(echo sub | busybox tr a-z A-Z); echo $x"],
            Out::Is("      2 apple\none\nSUB\n"),
        )
    },
    c_prog("hello", "hello", &["a b"], 3, Out::Is("hello from a static Linux program\nargv[0]=/bin/hello\nargv[1]=a b\n")),
];

/// One listed difference: the case, which aspects (empty: any), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    pub case: String,
    pub aspects: Vec<String>,
    pub reason: String,
}

/// The aspects a difference can be in.
pub const ASPECTS: [&str; 4] = ["run", "stdout", "status", "files"];

/// Parse `linux/accepted-differences.txt`: `# comments`, blank lines, `reason: TEXT` lines
/// that start a group, and under each, `CASE [ASPECT...]` lines. Every case must be a case of
/// the suite and every aspect one of [`ASPECTS`].
pub fn parse_accepted(text: &str, known: &[&str]) -> Result<Vec<Accepted>, String> {
    let mut out: Vec<Accepted> = Vec::new();
    for (at, reason, line) in reason_groups(text, "accepted differences")? {
        let mut words = line.split_whitespace();
        let case = words.next().unwrap_or_default().to_string();
        if !known.contains(&case.as_str()) {
            return Err(format!("{at}: no case is named `{case}`"));
        }
        let aspects: Vec<String> = words.map(String::from).collect();
        if let Some(a) = aspects.iter().find(|a| !ASPECTS.contains(&a.as_str())) {
            return Err(format!("{at}: `{a}` is not one of {}", ASPECTS.join(", ")));
        }
        if out.iter().any(|e| e.case == case) {
            return Err(format!("{at}: `{case}` is listed twice"));
        }
        out.push(Accepted { case, aspects, reason });
    }
    Ok(out)
}

/// The entries of a list of differences grouped by reason (this file's and busybox's
/// testsuite's, `bbsuite::parse_listed`): `# comments` and blank lines skipped, a line
/// `reason: TEXT` starting a group; each other line, trimmed, as (where, for messages: `FILE,
/// line N`; its group's reason; the line). An entry before any reason, or a reason with no
/// text, is an error.
pub fn reason_groups(text: &str, file: &str) -> Result<Vec<(String, String, String)>, String> {
    let mut reason: Option<String> = None;
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let at = format!("{file}, line {}", i + 1);
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(r) = line.strip_prefix("reason:") {
            if r.trim().is_empty() {
                return Err(format!("{at}: a reason with no text"));
            }
            reason = Some(r.trim().to_string());
            continue;
        }
        let reason = reason.clone().ok_or_else(|| format!("{at}: `{line}` comes before any `reason:` line"))?;
        out.push((at, reason, line.to_string()));
    }
    Ok(out)
}

/// A difference between the two systems in one aspect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff {
    pub aspect: &'static str,
    pub detail: String,
}

fn first_difference(a: &[u8], b: &[u8]) -> String {
    let at = a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
    let show = |s: &[u8]| format!("{:?}", String::from_utf8_lossy(&s[at.min(s.len())..(at + 40).min(s.len())]));
    format!("{} and {} bytes, first differing at byte {at}: linux {} ours {}", a.len(), b.len(), show(a), show(b))
}

/// Where what ours did differs from what Linux did.
pub fn compare(linux: &Result<ExecOutput, String>, ours: &Result<ExecOutput, String>) -> Vec<Diff> {
    match (linux, ours) {
        (Ok(l), Ok(o)) => {
            let mut d = Vec::new();
            if l.stdout != o.stdout {
                d.push(Diff { aspect: "stdout", detail: first_difference(&l.stdout, &o.stdout) });
            }
            if l.status != o.status {
                d.push(Diff { aspect: "status", detail: format!("linux {} ours {}", l.status, o.status) });
            }
            if l.files != o.files {
                let only = |a: &[String], b: &[String]| a.iter().filter(|x| !b.contains(x)).cloned().collect::<Vec<_>>().join("; ");
                d.push(Diff { aspect: "files", detail: format!("only on linux: [{}]; only on ours: [{}]", only(&l.files, &o.files), only(&o.files, &l.files)) });
            }
            d
        }
        (Err(e), _) => vec![Diff { aspect: "run", detail: format!("linux could not run it: {e}") }],
        (_, Err(e)) => vec![Diff { aspect: "run", detail: format!("ours could not run it: {e}") }],
    }
}

/// Whether Linux's run of `case` is what a Linux user expects; the reason if not.
pub fn check_linux(case: &Case, out: &ExecOutput) -> Result<(), String> {
    if out.status != case.status {
        return Err(format!("status {} (expected {}); stderr: {}", out.status, case.status, String::from_utf8_lossy(&out.stderr).trim()));
    }
    // The input files are left as they were (no case changes them): the guest's listing must
    // show each with the host's size and CRC-32.
    for (name, data) in case.files {
        let want = super::file_line(0o644, data.as_bytes(), name);
        if !out.files.contains(&want) {
            return Err(format!("the files left behind lack `{want}`: {:?}", out.files));
        }
    }
    let text = String::from_utf8_lossy(&out.stdout);
    match case.stdout {
        Out::Is(s) if text != s => Err(format!("standard output {text:?}, expected {s:?}")),
        Out::Has(lines) => match lines.iter().find(|l| !text.lines().any(|t| t == **l)) {
            Some(l) => Err(format!("standard output lacks the line {l:?}: {text:?}")),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

/// The request of a case: its program built (or fetched), its files written to the host.
pub fn request(case: &Case) -> Result<ExecRequest, String> {
    let program = if case.program == BB {
        super::progs::busybox_static()?
    } else if case.program == BB_MUSL {
        super::progs::busybox_musl()?
    } else {
        let extra = super::progs::C_PROGRAMS.iter().find(|(n, _)| *n == case.program).map(|(_, e)| *e).ok_or_else(|| format!("{}: no such program", case.program))?;
        super::progs::build(case.program, extra)?
    };
    let dir = crate::host::env::workspace_root().join("target").join("linux-exec").join("conformance-files").join(case.name);
    let mut files = Vec::new();
    for (name, data) in case.files {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let p: PathBuf = dir.join(name.replace('/', "_"));
        std::fs::write(&p, data).map_err(|e| format!("{}: {e}", p.display()))?;
        files.push((name.to_string(), p));
    }
    Ok(ExecRequest {
        program,
        args: case.args.iter().map(|s| s.to_string()).collect(),
        files,
        stdin: case.stdin.as_bytes().to_vec(),
        smp: case.smp,
        disk: None,
        timeout: Duration::from_secs(90),
        net: case.net.then(|| crate::host::vm::NetConfig { forwards: Vec::new() }),
    })
}

pub fn accepted_file() -> PathBuf {
    crate::host::env::workspace_root().join("linux").join("accepted-differences.txt")
}

/// How one case came out, for [`judge`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass(String),
    Fail(String),
    /// A difference that the accepted list names (counted as skipped: not a pass).
    Accepted(String),
}

/// Judge the comparison of one case against the accepted list.
pub fn judge(case: &str, diffs: &[Diff], accepted: &[Accepted]) -> Verdict {
    let entry = accepted.iter().find(|a| a.case == case);
    if diffs.is_empty() {
        return match entry {
            Some(a) => Verdict::Fail(format!("listed as an accepted difference ({}), but both systems now agree: remove it from {}", a.reason, "linux/accepted-differences.txt")),
            None => Verdict::Pass("same on both systems".into()),
        };
    }
    let unaccepted: Vec<&Diff> = diffs.iter().filter(|d| !entry.is_some_and(|a| a.aspects.is_empty() || a.aspects.iter().any(|x| x == d.aspect))).collect();
    let all = diffs.iter().map(|d| format!("{}: {}", d.aspect, d.detail)).collect::<Vec<_>>().join("\n      ");
    match (unaccepted.is_empty(), entry) {
        (true, Some(a)) => Verdict::Accepted(format!("accepted ({}): {all}", a.reason)),
        _ => Verdict::Fail(format!("differs: {all}")),
    }
}

/// Run `cases` on `systems` and count: per case, Linux's own check (when Linux runs) and the
/// comparison (when both run).
pub fn run_cases(cases: &[&Case], systems: &[System]) -> Result<TestTally, String> {
    let known: Vec<&str> = CASES.iter().map(|c| c.name).collect();
    let text = std::fs::read_to_string(accepted_file()).map_err(|e| format!("{}: {e}", accepted_file().display()))?;
    let accepted = parse_accepted(&text, &known)?;
    // The cases' runs, two at a time (the CI machine has two cores; each guest is one vCPU of
    // TCG), then judged in order.
    let runs = run_all(cases, systems, 2)?;
    let mut t = TestTally::default();
    for (case, (outs, took)) in cases.iter().zip(runs) {
        if let Some(l) = outs.get("linux") {
            match l.as_ref().map_err(|e| e.clone()).and_then(|o| check_linux(case, o)) {
                Ok(()) => {
                    println!("  conformance {} linux: ok ({:.0} s)", case.name, took.as_secs_f64());
                    t.add(TestTally::PASS);
                }
                Err(e) => {
                    println!("  conformance {} linux: FAILED: {e}", case.name);
                    t.add(TestTally::FAIL);
                }
            }
        }
        if let (Some(l), Some(o)) = (outs.get("linux"), outs.get("ours")) {
            match judge(case.name, &compare(l, o), &accepted) {
                Verdict::Pass(m) => {
                    println!("  conformance {} ours: ok, {m}", case.name);
                    t.add(TestTally::PASS);
                }
                Verdict::Accepted(m) => {
                    println!("  conformance {} ours: {m}", case.name);
                    t.add(TestTally { passed: 0, failed: 0, skipped: 1 });
                }
                Verdict::Fail(m) => {
                    println!("  conformance {} ours: FAILED, {m}", case.name);
                    t.add(TestTally::FAIL);
                }
            }
        } else if let Some(Err(e)) = outs.get("ours") {
            println!("  conformance {} ours: FAILED: {e}", case.name);
            t.add(TestTally::FAIL);
        } else if let Some(Ok(o)) = outs.get("ours") {
            // Ours alone: its own run against what a Linux user expects.
            match check_linux(case, o) {
                Ok(()) => t.add(TestTally::PASS),
                Err(e) => {
                    println!("  conformance {} ours: FAILED: {e}", case.name);
                    t.add(TestTally::FAIL);
                }
            }
        }
    }
    Ok(t)
}

type Outs = BTreeMap<&'static str, Result<ExecOutput, String>>;

/// Run every case on every system, `workers` cases at once; each case's outputs and the time
/// its runs took, in the order of `cases`.
fn run_all(cases: &[&Case], systems: &[System], workers: usize) -> Result<Vec<(Outs, Duration)>, String> {
    let reqs: Vec<ExecRequest> = cases.iter().map(|c| request(c)).collect::<Result<_, _>>()?;
    if systems.contains(&System::Linux) {
        // What every Linux run builds or unpacks, once, before the runs share it.
        super::linux::prepare()?;
    }
    // This system's kernel and boot image, built once: a build per run would rewrite the
    // image while the other worker's guest reads it.
    let ours_built = if systems.contains(&System::Ours) { Some(super::ours::prepare()?) } else { None };
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done: std::sync::Mutex<Vec<Option<(Outs, Duration)>>> = std::sync::Mutex::new(vec![None; reqs.len()]);
    std::thread::scope(|s| {
        for _ in 0..workers.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(req) = reqs.get(i) else { break };
                let t0 = Instant::now();
                let mut outs = Outs::new();
                for sys in systems {
                    let out = match (sys, &ours_built) {
                        (System::Ours, Some((kernel, initrd))) => super::check_request(req).and_then(|_| super::ours::run_with(kernel, initrd, req)),
                        _ => sys.run(req),
                    };
                    outs.insert(sys.name(), out);
                }
                done.lock().expect("no worker panics while holding it")[i] = Some((outs, t0.elapsed()));
            });
        }
    });
    Ok(done.into_inner().expect("the workers have ended").into_iter().map(|o| o.expect("every case ran")).collect())
}

/// `cargo xtask exec --conformance`.
pub fn command(systems: &[System], only: Option<&str>) -> Result<(), String> {
    let cases: Vec<&Case> = CASES.iter().filter(|c| only.is_none_or(|p| c.name.contains(p))).collect();
    if cases.is_empty() {
        return Err(format!("no conformance case matches {:?}", only.unwrap_or("")));
    }
    let t = run_cases(&cases, systems)?;
    println!("{} passed, {} failed, {} skipped", t.passed, t.failed, t.skipped);
    if t.failed > 0 {
        Err(format!("{} conformance check(s) failed", t.failed))
    } else {
        Ok(())
    }
}

/// The bounded part for `cargo xtask test`: the cases marked `ci`, on both systems.
pub fn ci_tests() -> Result<TestTally, String> {
    let cases: Vec<&Case> = CASES.iter().filter(|c| c.ci).collect();
    run_cases(&cases, &[System::Ours, System::Linux])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(stdout: &str, status: i32, files: &[&str]) -> ExecOutput {
        ExecOutput { stdout: stdout.as_bytes().to_vec(), status, files: files.iter().map(|s| s.to_string()).collect(), ..Default::default() }
    }

    #[test]
    fn the_accepted_list_parses_and_refuses_bad_lines() {
        let known = ["echo", "sort"];
        let a = parse_accepted("# c\n\nreason: not built yet\necho\nsort stdout files\n", &known).unwrap();
        assert_eq!(a[0], Accepted { case: "echo".into(), aspects: vec![], reason: "not built yet".into() });
        assert_eq!(a[1].aspects, ["stdout", "files"]);
        assert!(parse_accepted("echo\n", &known).unwrap_err().contains("before any `reason:`"));
        assert!(parse_accepted("reason: x\nnope\n", &known).unwrap_err().contains("no case is named `nope`"));
        assert!(parse_accepted("reason: x\necho colour\n", &known).unwrap_err().contains("`colour`"));
        assert!(parse_accepted("reason:\necho\n", &known).unwrap_err().contains("no text"));
        assert!(parse_accepted("reason: x\necho\nreason: y\necho\n", &known).unwrap_err().contains("twice"));
    }

    #[test]
    fn the_repository_s_list_parses() {
        let known: Vec<&str> = CASES.iter().map(|c| c.name).collect();
        let text = std::fs::read_to_string(accepted_file()).unwrap();
        parse_accepted(&text, &known).unwrap();
    }

    #[test]
    fn a_planted_difference_is_reported() {
        let l = Ok(out("a\n", 0, &["f 644 1 e8b7be43 x"]));
        assert_eq!(compare(&l, &l.clone()), vec![]);
        let d = compare(&l, &Ok(out("b\n", 0, &["f 644 1 e8b7be43 x"])));
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].aspect, "stdout");
        assert!(d[0].detail.contains("first differing at byte 0"), "{}", d[0].detail);
        assert_eq!(compare(&l, &Ok(out("a\n", 1, &["f 644 1 e8b7be43 x"])))[0].aspect, "status");
        let f = compare(&l, &Ok(out("a\n", 0, &["f 644 1 00000000 x"])));
        assert_eq!(f[0].aspect, "files");
        assert!(f[0].detail.contains("only on ours: [f 644 1 00000000 x]"), "{}", f[0].detail);
        assert_eq!(compare(&l, &Err("refused".into()))[0].aspect, "run");
    }

    #[test]
    fn judging_against_the_list() {
        let acc = |aspects: &[&str]| vec![Accepted { case: "c".into(), aspects: aspects.iter().map(|s| s.to_string()).collect(), reason: "why".into() }];
        let d = vec![Diff { aspect: "stdout", detail: "x".into() }];
        assert!(matches!(judge("c", &d, &[]), Verdict::Fail(_)));
        assert!(matches!(judge("c", &d, &acc(&[])), Verdict::Accepted(m) if m.contains("why")));
        assert!(matches!(judge("c", &d, &acc(&["stdout"])), Verdict::Accepted(_)));
        // Listed for another aspect only: still a failure.
        assert!(matches!(judge("c", &d, &acc(&["files"])), Verdict::Fail(_)));
        // Listed, but no longer different: a failure until the line is removed.
        assert!(matches!(judge("c", &[], &acc(&[])), Verdict::Fail(m) if m.contains("remove")));
        assert!(matches!(judge("c", &[], &[]), Verdict::Pass(_)));
    }

    #[test]
    fn linux_s_run_is_checked_against_the_case() {
        let case = CASES.iter().find(|c| c.name == "sort").unwrap();
        assert_eq!(check_linux(case, &out("apple\nfig\nkiwi\npear\n", 0, &[])), Ok(()));
        assert!(check_linux(case, &out("apple\nfig\npear\nkiwi\n", 0, &[])).is_err());
        assert!(check_linux(case, &out("apple\nfig\nkiwi\npear\n", 1, &[])).unwrap_err().contains("status 1"));
        let wc = CASES.iter().find(|c| c.name == "wc").unwrap();
        let text = super::super::file_line(0o644, TEXT.1.as_bytes(), "text");
        assert_eq!(check_linux(wc, &out("        3         6        28 text\n", 0, &[&text])), Ok(()));
        let changed = super::super::file_line(0o644, b"one two three\n", "text");
        assert!(check_linux(wc, &out("        3         6        28 text\n", 0, &[&changed])).unwrap_err().contains("lack"));
        let has = CASES.iter().find(|c| c.name == "pthreads").unwrap();
        assert!(check_linux(has, &out("hand-offs: 99999 of 100000\npthreads: ok\n", 0, &[])).is_err());
        let names: Vec<&str> = CASES.iter().map(|c| c.name).collect();
        assert!(names.iter().enumerate().all(|(i, n)| !names[..i].contains(n)), "case names are unique");
    }
}
