//! What both guest programs (`bench-linux`, `bench-ours`) do once their command line is
//! parsed: run the benchmark `reps` times, keep the fastest run, run the share-nothing
//! calibration loop in the same boot with the same workers, and describe both in the serial
//! protocol's one line (catalog.rs). The lines are `Display` values, so a program prints them
//! with whatever `println!` it has, without allocating.

use core::fmt;

use crate::catalog::{ERROR_PREFIX, RESULT_PREFIX};
use crate::harness::Outcome;
use crate::params::Params;
use crate::{suite, Error, Platform};

/// The most repetitions one boot runs.
pub const MAX_REPS: u64 = 100;

/// The in-boot calibration: `calib` at a tenth of its catalog size (tens of ms under TCG),
/// unmarked, so the plugin's count stays the benchmark's own.
const CALIBRATION_LINE: &str = "bench=calib iters=4000000";

/// One boot's benchmark: the fastest of its repetitions, or the first failure.
pub struct Run<'a> {
    params: &'a Params<'a>,
    system: &'static str,
    cores: usize,
    tsc_hz: u64,
    markers: bool,
    reps: u64,
    pub result: Result<Outcome, Error>,
    /// The calibration loop's fastest run in this boot, with the benchmark's workers.
    pub calibration: Option<Outcome>,
}

/// Run the benchmark `reps` times (the `reps` word on the line; 1 if absent, at most
/// [`MAX_REPS`]) and keep the fastest run: Tornado reports steady-state results, and on a
/// shared host a burst of someone else's load would otherwise decide the number. The first
/// failing repetition ends the series. `markers` says whether the region markers reach the
/// plugin (for the result line).
///
/// Then, if the benchmark ran, the share-nothing calibration loop runs `reps` times with the
/// same workers in the same boot (unmarked). Per-core throughput divided by it is comparable
/// between boots even when the host's load changes between them (DESIGN.md, "Measurement").
pub fn run_best<'a, P: Platform>(p: &P, params: &'a Params<'a>, markers: bool) -> Run<'a> {
    let reps = params.given("reps").unwrap_or(1).clamp(1, MAX_REPS);
    let result = best_of(p, params, reps);
    let calibration = match (&result, Params::parse(CALIBRATION_LINE)) {
        (Ok(_), Ok(mut c)) => {
            c.workers = params.workers;
            c.marked = false;
            best_of(p, &c, reps).ok()
        }
        _ => None,
    };
    Run { params, system: p.name(), cores: p.cores(), tsc_hz: p.ticks_per_sec(), markers, reps, result, calibration }
}

/// The fastest of `reps` runs, or the first failure.
fn best_of<P: Platform>(p: &P, params: &Params, reps: u64) -> Result<Outcome, Error> {
    let mut best: Option<Outcome> = None;
    for _ in 0..reps {
        let o = suite::run(p, params)?;
        best = match best {
            Some(b) if b.ticks <= o.ticks => Some(b),
            _ => Some(o),
        };
    }
    best.ok_or(Error::Param("no repetition ran"))
}

impl Run<'_> {
    pub fn is_ok(&self) -> bool {
        self.result.is_ok()
    }
}

/// `bench-result name=... ops=... ns=... params=k:v,...` or `bench-error name=... msg=...`.
impl fmt::Display for Run<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.params.spec.name;
        let o = match &self.result {
            Ok(o) => o,
            Err(e) => return ErrorLine(name, e).fmt(f),
        };
        let hz = self.tsc_hz.max(1) as u128;
        let ns = o.ticks as u128 * 1_000_000_000 / hz;
        let busy_ns = o.busy_ticks as u128 * 1_000_000_000 / hz;
        write!(
            f,
            "{RESULT_PREFIX} name={name} system={} cores={} workers={} ops={} ticks={} busy_ticks={} tsc_hz={} ns={ns} busy_ns={busy_ns} markers={} reps={} params=",
            self.system, self.cores, o.workers, o.ops, o.ticks, o.busy_ticks, self.tsc_hz, self.markers, self.reps,
        )?;
        let mut any = false;
        for (k, v) in self.params.effective() {
            write!(f, "{}{k}:{v}", if any { "," } else { "" })?;
            any = true;
        }
        if !any {
            f.write_str("-")?;
        }
        if let Some(c) = &self.calibration {
            write!(f, " calib_ops={} calib_ns={}", c.ops, c.ticks as u128 * 1_000_000_000 / hz)?;
        }
        // A phased benchmark's phases (of the fastest repetition): `phase_NAME_ns`,
        // `phase_NAME_faults`.
        if let Some(ph) = &o.phases {
            for i in 0..3 {
                write!(f, " phase_{n}_ns={} phase_{n}_faults={}", ph.ticks[i] as u128 * 1_000_000_000 / hz, ph.faults[i], n = ph.names[i])?;
            }
        }
        f.write_str(" check=ok")
    }
}

/// `bench-error name=NAME msg=MESSAGE` (NAME is `?` when the line named no benchmark).
pub struct ErrorLine<'a>(pub &'a str, pub &'a dyn fmt::Display);

impl fmt::Display for ErrorLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{ERROR_PREFIX} name={} msg={}", self.0, self.1)
    }
}
