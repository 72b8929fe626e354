//! Progress of long commands (the benchmark matrix, the test run, soak): `[n/N] what`,
//! elapsed time and an estimate of what is left. On a terminal (stderr) a status line is
//! redrawn in place every second while an item runs; otherwise (CI logs, pipes) plain lines
//! only: one when an item starts and one a minute while it runs, so a log shows that a slow
//! boot is alive without filling up. No crate: the needs are this small.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `1h02m`, `4m05s`, `12s`.
pub fn duration(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// What is left, from the mean time per finished item: `None` before the first finishes.
pub fn estimate(elapsed: Duration, done: usize, total: usize) -> Option<Duration> {
    (done > 0 && total >= done).then(|| elapsed.mul_f64((total - done) as f64 / done as f64))
}

/// `[n/N] what, 1m02s elapsed, about 3m10s left` (no estimate before the first item ends).
pub fn line(prefix: &str, n: usize, total: usize, what: &str, elapsed: Duration, done: usize) -> String {
    let left = estimate(elapsed, done, total).map(|e| format!(", about {} left", duration(e))).unwrap_or_default();
    format!("{prefix}: [{n}/{total}] {what}; {} elapsed{left}", duration(elapsed))
}

struct State {
    /// The current item's line (without timing), and when it started.
    current: Option<(String, Instant)>,
    done: usize,
    stop: bool,
}

/// Progress over `total` items, printed to stderr.
pub struct Progress {
    prefix: String,
    total: usize,
    start: Instant,
    tty: bool,
    state: Arc<Mutex<State>>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    pub fn new(prefix: &str, total: usize) -> Progress {
        Self::with_terminal(prefix, total, std::io::stderr().is_terminal())
    }

    /// `tty` chooses the redrawn status line (true) or plain lines (false).
    pub fn with_terminal(prefix: &str, total: usize, tty: bool) -> Progress {
        let state = Arc::new(Mutex::new(State { current: None, done: 0, stop: false }));
        let start = Instant::now();
        let ticker = {
            let (state, prefix) = (state.clone(), prefix.to_string());
            std::thread::spawn(move || {
                let period = if tty { Duration::from_secs(1) } else { Duration::from_secs(60) };
                let mut last = Instant::now();
                loop {
                    std::thread::sleep(Duration::from_millis(200));
                    let s = state.lock().unwrap_or_else(|e| e.into_inner());
                    if s.stop {
                        return;
                    }
                    if last.elapsed() < period {
                        continue;
                    }
                    last = Instant::now();
                    if let Some((what, since)) = &s.current {
                        let l = format!("{what}: running for {}; {} elapsed{}", duration(since.elapsed()), duration(start.elapsed()), estimate(start.elapsed(), s.done, total).map(|e| format!(", about {} left", duration(e))).unwrap_or_default());
                        let mut err = std::io::stderr().lock();
                        if tty {
                            let _ = write!(err, "\r\x1b[K{prefix}: {l}");
                        } else {
                            let _ = writeln!(err, "{prefix}: {l}");
                        }
                        let _ = err.flush();
                    }
                }
            })
        };
        Progress { prefix: prefix.to_string(), total, start, tty, state, ticker: Some(ticker) }
    }

    /// Item `n` (1-based) starts: `what` names it.
    pub fn start(&self, n: usize, what: &str) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let l = line(&self.prefix, n, self.total, what, self.start.elapsed(), s.done);
        s.current = Some((format!("[{n}/{}] {what}", self.total), Instant::now()));
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[K{l}");
        } else {
            let _ = writeln!(err, "{l}");
        }
        let _ = err.flush();
    }

    /// The current item ended; `result` (a whole line) replaces the status line.
    pub fn finish(&self, result: &str) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.done += 1;
        s.current = None;
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[K");
        }
        let _ = writeln!(err, "{result}");
        let _ = err.flush();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches a wrong estimate (from the items left, at the mean time of those done), an
    /// estimate shown before anything finished, or an unreadable duration.
    #[test]
    fn lines_and_estimates() {
        assert_eq!(duration(Duration::from_secs(12)), "12s");
        assert_eq!(duration(Duration::from_secs(245)), "4m05s");
        assert_eq!(duration(Duration::from_secs(3720)), "1h02m");
        assert_eq!(estimate(Duration::from_secs(60), 0, 10), None);
        assert_eq!(estimate(Duration::from_secs(60), 3, 12), Some(Duration::from_secs(180)));
        assert_eq!(estimate(Duration::from_secs(60), 12, 12), Some(Duration::ZERO));
        assert_eq!(line("bench", 1, 24, "ours dupclose on 2 vCPU(s)", Duration::from_secs(5), 0), "bench: [1/24] ours dupclose on 2 vCPU(s); 5s elapsed");
        assert_eq!(line("bench", 4, 24, "linux calib on 1 vCPU(s)", Duration::from_secs(90), 3), "bench: [4/24] linux calib on 1 vCPU(s); 1m30s elapsed, about 10m30s left");
    }

    #[test]
    fn plain_progress_stops_its_ticker() {
        let p = Progress::with_terminal("test", 2, false);
        p.start(1, "one");
        p.finish("test: one ok");
        p.start(2, "two");
        p.finish("test: two ok");
        drop(p); // joins the ticker: a hang here is the bug
    }
}
