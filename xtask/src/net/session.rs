//! A QEMU run the host talks to while it runs: serial lines arrive as they are printed, so
//! the host can wait for `tcpserv: ready`, put load on the forwarded port, then wait for
//! `tcpserv: done`. Every wait has a deadline, and dropping a session kills QEMU, so no
//! machine outlives the command that started it.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub struct Session {
    child: Child,
    lines: Receiver<String>,
    stderr: Option<JoinHandle<String>>,
    pub serial: String,
    pub start: Instant,
    echo: bool,
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
        crate::env::ensure_qemu()?;
        let mut child = Command::new("qemu-system-x86_64")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start qemu-system-x86_64: {e}"))?;
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
                        if tx.send(String::from_utf8_lossy(&buf).replace('\r', "")).is_err() {
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
        Ok(Session { child, lines, stderr: Some(stderr), serial: String::new(), start: Instant::now(), echo, exit: None })
    }

    /// QEMU's process id (its CPU time is in /proc/PID/stat).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn take(&mut self, line: String) {
        if self.echo {
            print!("{line}");
            let _ = std::io::stdout().flush();
        }
        self.serial.push_str(&line);
    }

    /// Wait until a serial line for which `pred` holds arrives (returned), QEMU exits, or
    /// `deadline` passes.
    pub fn wait_for(&mut self, pred: &dyn Fn(&str) -> bool, deadline: Instant) -> Result<String, WaitEnd> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(WaitEnd::TimedOut);
            }
            match self.lines.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok(line) => {
                    self.take(line.clone());
                    if pred(line.trim_end()) {
                        return Ok(line.trim_end().to_string());
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
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
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
