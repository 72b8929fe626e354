//! Running QEMU: the one place that spawns `qemu-system-x86_64` with its serial console on a
//! pipe and reads it line by line. A [`Session`] is a QEMU run the host talks to while it
//! runs: serial lines arrive as they are printed (each with its time since the spawn), so the
//! host can wait for `tcpserv: ready`, put load on the forwarded port, then wait for
//! `tcpserv: done`. Every wait has a deadline, and dropping a session kills QEMU, so no
//! machine outlives the command that started it. [`run_captured`] and [`boot_captured`] are
//! the common case on top of it: one run to its end (or its timeout), all output kept.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::vm::{VmConfig, QEMU_EXIT_FAILURE, QEMU_EXIT_SUCCESS};

/// What a session does with each serial line besides keeping it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Echo {
    /// Nothing.
    Off,
    /// Print it as it came.
    Raw,
    /// Print it after this prefix (the line's own end replaced by one newline).
    Prefixed(&'static str),
}

impl From<bool> for Echo {
    fn from(on: bool) -> Echo {
        if on {
            Echo::Raw
        } else {
            Echo::Off
        }
    }
}

pub struct Session {
    child: Child,
    lines: Receiver<(String, Duration)>,
    stderr: Option<JoinHandle<String>>,
    /// Every serial line taken so far, as printed (carriage returns dropped).
    pub serial: String,
    pub start: Instant,
    echo: Echo,
    exit: Option<Option<i32>>,
}

/// How a wait ended without the line it waited for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitEnd {
    /// QEMU exited (with this status code).
    Exited(Option<i32>),
    /// The deadline passed.
    TimedOut,
}

/// What a finished session produced.
#[derive(Debug)]
pub struct Finished {
    pub serial: String,
    pub stderr: String,
    pub exit_code: Option<i32>,
    /// Killed at the deadline.
    pub killed: bool,
    pub elapsed: Duration,
}

impl Session {
    /// Start `qemu-system-x86_64 args` (which must send the serial console to stdio).
    pub fn start(args: &[String], echo: bool) -> Result<Session, String> {
        Session::spawn(args, None, echo.into())
    }

    /// Start `qemu-system-x86_64 args` with `input` written to its standard input (the guest
    /// serial; none: stdin is closed), each serial line echoed as `echo` says.
    pub fn spawn(args: &[String], input: Option<&str>, echo: Echo) -> Result<Session, String> {
        super::env::ensure_qemu()?;
        Session::spawn_program("qemu-system-x86_64", args, input, echo)
    }

    /// [`Session::spawn`] of another program (the tests run a shell script in QEMU's place).
    fn spawn_program(program: &str, args: &[String], input: Option<&str>, echo: Echo) -> Result<Session, String> {
        let start = Instant::now();
        let mut child = Command::new(program)
            .args(args)
            .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {program}: {e}"))?;
        if let Some(text) = input {
            let mut stdin = child.stdin.take().expect("piped");
            let text = text.to_string();
            // A writer of its own: the guest drains its receive FIFO at its own pace.
            std::thread::spawn(move || {
                let _ = stdin.write_all(text.as_bytes());
            });
        }
        let out = child.stdout.take().expect("piped");
        let mut err = child.stderr.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match r.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if tx.send((String::from_utf8_lossy(&buf).replace('\r', ""), start.elapsed())).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        Ok(Session { child, lines, stderr: Some(stderr), serial: String::new(), start, echo, exit: None })
    }

    /// QEMU's process id (its CPU time is in /proc/PID/stat).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn take(&mut self, line: String) {
        match self.echo {
            Echo::Off => {}
            Echo::Raw => {
                print!("{line}");
                let _ = std::io::stdout().flush();
            }
            Echo::Prefixed(p) => {
                println!("{p}{}", line.trim_end_matches('\n'));
                let _ = std::io::stdout().flush();
            }
        }
        self.serial.push_str(&line);
    }

    /// Wait until a serial line for which `pred` holds arrives (returned), QEMU exits, or
    /// `deadline` passes.
    pub fn wait_for(&mut self, pred: &dyn Fn(&str) -> bool, deadline: Instant) -> Result<String, WaitEnd> {
        self.watch(&mut |l, _| pred(l), deadline).map(|(l, _)| l)
    }

    /// [`Session::wait_for`] with the time of each line since the spawn: `stop` sees every
    /// line (without its newline) as it comes, and the first for which it holds ends the wait.
    pub fn watch(&mut self, stop: &mut dyn FnMut(&str, Duration) -> bool, deadline: Instant) -> Result<(String, Duration), WaitEnd> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(WaitEnd::TimedOut);
            }
            match self.lines.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok((line, at)) => {
                    let text = line.trim_end().to_string();
                    self.take(line);
                    if stop(&text, at) {
                        return Ok((text, at));
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                // The serial pipe closed: QEMU is gone (or going).
                Err(RecvTimeoutError::Disconnected) => {
                    let code = self.child.wait().ok().and_then(|s| s.code());
                    self.exit = Some(code);
                    return Err(WaitEnd::Exited(code));
                }
            }
        }
    }

    /// Take the serial lines that have arrived, without waiting; `Some(code)` once QEMU has
    /// exited.
    pub fn poll(&mut self) -> Result<Option<Option<i32>>, String> {
        while let Ok((line, _)) = self.lines.try_recv() {
            self.take(line);
        }
        if self.exit.is_none() {
            if let Some(st) = self.child.try_wait().map_err(|e| e.to_string())? {
                self.exit = Some(st.code());
            }
        }
        Ok(self.exit)
    }

    /// Wait for QEMU to exit by `deadline`, killing it then if it has not; all output.
    pub fn finish(mut self, deadline: Instant) -> Finished {
        let mut killed = false;
        if self.exit.is_none() {
            match self.wait_for(&|_| false, deadline) {
                Err(WaitEnd::Exited(code)) => self.exit = Some(code),
                _ => {
                    let _ = self.child.kill();
                    let code = self.child.wait().ok().and_then(|s| s.code());
                    self.exit = Some(code);
                    killed = true;
                }
            }
        }
        self.collect(killed)
    }

    /// Ask QEMU to stop the way `kill` does by default (SIGTERM): it shuts down in order, so
    /// the plugins' exit callbacks run and write their reports (SIGKILL would lose them); it
    /// is killed if it has not stopped after `grace`. `killed` is not set: the caller chose
    /// to stop it.
    pub fn terminate(mut self, grace: Duration) -> Finished {
        if self.exit.is_none() {
            let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
            let until = Instant::now() + grace;
            loop {
                if let Ok(Some(st)) = self.child.try_wait() {
                    self.exit = Some(st.code());
                    break;
                }
                if Instant::now() >= until {
                    let _ = self.child.kill();
                    self.exit = Some(self.child.wait().ok().and_then(|s| s.code()));
                    break;
                }
                while let Ok((line, _)) = self.lines.try_recv() {
                    self.take(line);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.collect(false)
    }

    /// Kill QEMU now (it may have exited already) and return what it printed.
    pub fn stop(mut self) -> Finished {
        if self.exit.is_none() {
            let _ = self.child.kill();
            self.exit = Some(self.child.wait().ok().and_then(|s| s.code()));
        }
        self.collect(false)
    }

    fn collect(&mut self, killed: bool) -> Finished {
        // The reader ends at the pipe's end (QEMU is gone); the last lines are still queued.
        while let Ok((line, _)) = self.lines.recv_timeout(Duration::from_millis(200)) {
            self.take(line);
        }
        let stderr = self.stderr.take().and_then(|h| h.join().ok()).unwrap_or_default();
        Finished { serial: std::mem::take(&mut self.serial), stderr, exit_code: self.exit.flatten(), killed, elapsed: self.start.elapsed() }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.exit.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What a captured boot produced.
#[derive(Debug)]
pub struct BootOutput {
    pub serial: String,
    /// What QEMU itself wrote to stderr (its own errors and warnings; not the guest's).
    pub stderr: String,
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub elapsed: Duration,
}

impl BootOutput {
    pub fn kernel_exit_ok(&self) -> bool {
        self.exit_code == Some(QEMU_EXIT_SUCCESS)
    }
}

/// Boot with serial on stdout captured (optionally echoed), stdin from `input`, and a hard
/// timeout.
pub fn boot_captured(cfg: &VmConfig, input: Option<&str>, echo: bool) -> Result<BootOutput, String> {
    let mut args = cfg.qemu_args();
    args.extend(["-serial", "stdio", "-monitor", "none"].iter().map(|s| s.to_string()));
    run_captured(&args, cfg.timeout, input, echo)
}

/// Run QEMU with exactly `args` (which must send the serial console to stdio) to its end,
/// capturing its output, killed after `timeout` (none: no limit). QEMU's own failure (an exit
/// status that is not the kernel's, with something on stderr) is an error.
pub fn run_captured(args: &[String], timeout: Option<Duration>, input: Option<&str>, echo: bool) -> Result<BootOutput, String> {
    captured(Session::spawn(args, input, echo.into())?, timeout)
}

fn captured(s: Session, timeout: Option<Duration>) -> Result<BootOutput, String> {
    // No timeout: a deadline no run reaches (a year).
    let deadline = s.start + timeout.unwrap_or(Duration::from_secs(365 * 24 * 3600));
    let f = s.finish(deadline);
    if !f.killed {
        if let Some(code) = f.exit_code {
            if code != QEMU_EXIT_SUCCESS && code != QEMU_EXIT_FAILURE && !f.stderr.trim().is_empty() {
                return Err(format!("QEMU failed: {}", f.stderr.lines().next().unwrap_or("").trim()));
            }
        }
    }
    Ok(BootOutput { serial: f.serial, stderr: f.stderr, exit_code: f.exit_code, timed_out: f.killed, elapsed: f.elapsed })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for QEMU: `sh -c SCRIPT`, whose output is the "serial".
    fn fake(script: &str, input: Option<&str>) -> Session {
        Session::spawn_program("sh", &["-c".to_string(), script.to_string()], input, Echo::Off).unwrap()
    }

    #[test]
    fn lines_are_kept_whole_and_the_exit_status_read() {
        let out = captured(fake("printf 'one\\r\\ntwo\\nthree'; exit 33", None), Some(Duration::from_secs(20))).unwrap();
        assert_eq!(out.serial, "one\ntwo\nthree");
        assert_eq!(out.exit_code, Some(QEMU_EXIT_SUCCESS));
        assert!(out.kernel_exit_ok() && !out.timed_out);
    }

    #[test]
    fn a_run_past_its_timeout_is_killed() {
        let t = Instant::now();
        let out = captured(fake("echo up; exec sleep 30", None), Some(Duration::from_millis(500))).unwrap();
        assert!(out.timed_out, "{out:?}");
        assert_eq!(out.serial, "up\n");
        assert!(t.elapsed() < Duration::from_secs(10), "took {:?}", t.elapsed());
    }

    #[test]
    fn qemu_failing_on_its_own_is_an_error() {
        let e = captured(fake("echo 'qemu: bad option' >&2; exit 1", None), Some(Duration::from_secs(20))).unwrap_err();
        assert_eq!(e, "QEMU failed: qemu: bad option");
        // The kernel's own failure exit is no QEMU failure, whatever is on stderr.
        let out = captured(fake("echo 'warning' >&2; exit 35", None), Some(Duration::from_secs(20))).unwrap();
        assert_eq!(out.exit_code, Some(QEMU_EXIT_FAILURE));
    }

    #[test]
    fn input_reaches_the_guest() {
        let out = captured(fake("read a; echo \"got $a\"; exit 33", Some("hello\n")), Some(Duration::from_secs(20))).unwrap();
        assert_eq!(out.serial, "got hello\n");
    }

    #[test]
    fn a_watch_stops_at_its_line_with_its_time_and_the_rest_is_kept() {
        let mut s = fake("echo a; echo b; sleep 0.3; echo ready now; echo after; exec sleep 30", None);
        let mut seen = Vec::new();
        let (line, at) = s
            .watch(
                &mut |l, _| {
                    seen.push(l.to_string());
                    l.starts_with("ready")
                },
                Instant::now() + Duration::from_secs(20),
            )
            .unwrap();
        assert_eq!(line, "ready now");
        assert_eq!(seen, ["a", "b", "ready now"]);
        assert!(at >= Duration::from_millis(250), "{at:?}");
        // A line that never comes: the deadline, then the kill.
        assert_eq!(s.wait_for(&|l| l == "never", Instant::now() + Duration::from_millis(300)), Err(WaitEnd::TimedOut));
        let f = s.finish(Instant::now() + Duration::from_millis(100));
        assert!(f.killed);
        assert_eq!(f.serial, "a\nb\nready now\nafter\n");
    }

    #[test]
    fn an_exit_ends_a_wait() {
        let mut s = fake("echo x; exit 3", None);
        assert_eq!(s.wait_for(&|l| l == "y", Instant::now() + Duration::from_secs(20)), Err(WaitEnd::Exited(Some(3))));
        let f = s.finish(Instant::now());
        assert!(!f.killed);
        assert_eq!((f.serial.as_str(), f.exit_code), ("x\n", Some(3)));
    }

    #[test]
    fn terminate_lets_the_program_stop_in_order() {
        // A SIGTERM handler that prints: it only runs if the signal is TERM, not KILL.
        let mut s = fake("trap 'echo bye; exit 7' TERM; echo up; while :; do sleep 0.05; done", None);
        s.wait_for(&|l| l == "up", Instant::now() + Duration::from_secs(20)).unwrap();
        let f = s.terminate(Duration::from_secs(10));
        assert_eq!((f.serial.as_str(), f.exit_code, f.killed), ("up\nbye\n", Some(7), false));
    }
}


/// What one QEMU run produced.
#[derive(Debug)]
pub struct RunOutput {
    pub serial: String,
    pub stderr: String,
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub elapsed: Duration,
}

/// Run qemu-system-x86_64 with `args`, serial on stdout captured, killed after `timeout`.
pub fn run_qemu(args: &[String], timeout: Duration) -> Result<RunOutput, String> {
    let s = Session::start(args, false)?;
    let deadline = s.start + timeout;
    Ok(s.finish(deadline).into())
}

impl From<Finished> for RunOutput {
    fn from(f: Finished) -> RunOutput {
        RunOutput { serial: f.serial, stderr: f.stderr, exit_code: f.exit_code, timed_out: f.killed, elapsed: f.elapsed }
    }
}