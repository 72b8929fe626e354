//! How long a core polls with nothing arriving before it sleeps, and what it learns when the
//! host takes it away while it polls.
//!
//! A core that hands work to another through memory (a kernel core and its service cores, a
//! webd front-end and its application cores) polls while work keeps arriving (NAPI's and IX's
//! adaptive polling) and sleeps after a stretch with nothing; the producer then wakes it with an
//! interrupt. Under a hypervisor or an emulator with more runnable threads than host CPUs, a
//! polling vCPU can be descheduled for milliseconds in the middle of its stretch. While it is
//! off the host CPU it still counts as polling, so the producer sends no wake-up and its work
//! waits until the host runs the poller again (a time slice or more: the 10-16 ms latency mode
//! of a busy host). A halted vCPU is different: the wake-up IPI makes the host wake its thread,
//! and a thread that slept is run soon after it is woken. So a poller that sees its own clock
//! jump between two looks ([`PREEMPTED_NS`]) knows polling is not working here and sleeps at
//! its next empty look for a while ([`SLEEP_AT_ONCE_NS`]); when that time has passed without
//! another jump it polls again. KVM's halt-polling and Linux's guest `haltpoll` governor shrink
//! their polling windows when polling does not pay in the same way.
//!
//! The policy is plain arithmetic on a clock the caller reads (nanoseconds or TSC cycles, the
//! same unit for every argument), so it is tested on the host.

/// A gap between two looks of at least this long (ns) means the core did not run in between:
/// an empty look costs microseconds, and hosts take CPUs away for a time slice (milliseconds).
pub const PREEMPTED_NS: u64 = 1_000_000;
/// After a gap, the poller sleeps at its first empty look for this long (ns).
pub const SLEEP_AT_ONCE_NS: u64 = 100_000_000;

/// One core's polling window; see the module comment.
#[derive(Debug, Clone, Copy)]
pub struct PollWindow {
    /// The stretch of empty looks before sleeping, in clock units.
    poll: u64,
    /// A gap at least this long between looks is a preemption (clock units).
    gap: u64,
    /// How long to sleep at once after a preemption (clock units).
    hold: u64,
    /// The clock at the first empty look of the current stretch (0: the last look found work).
    idle_since: u64,
    /// The clock at the last empty look (0: none since work or a sleep).
    last_look: u64,
    /// Until this clock, sleep at the first empty look.
    sleep_at_once_until: u64,
    preemptions: u64,
}

impl PollWindow {
    /// A window of `poll` clock units of empty looks; `per_ms` clock units make a millisecond
    /// (the thresholds above are scaled by it).
    pub const fn new(poll: u64, per_ms: u64) -> Self {
        PollWindow {
            poll,
            gap: PREEMPTED_NS / 1_000_000 * per_ms,
            hold: SLEEP_AT_ONCE_NS / 1_000_000 * per_ms,
            idle_since: 0,
            last_look: 0,
            sleep_at_once_until: 0,
            preemptions: 0,
        }
    }

    /// Change the stretch of empty looks before sleeping (clock units).
    pub fn set_poll(&mut self, poll: u64) {
        self.poll = poll;
    }

    /// A look found work: the next empty look starts a new stretch.
    pub fn worked(&mut self) {
        self.idle_since = 0;
        self.last_look = 0;
    }

    /// The core slept and woke: the time asleep is no gap, and the stretch goes on (the next
    /// empty look sleeps again at once, until work comes).
    pub fn woke(&mut self) {
        self.last_look = 0;
    }

    /// An empty look at clock `now`: whether to sleep now.
    pub fn empty(&mut self, now: u64) -> bool {
        if self.last_look != 0 && now.saturating_sub(self.last_look) >= self.gap {
            self.preemptions += 1;
            self.sleep_at_once_until = now.saturating_add(self.hold);
        }
        self.last_look = now;
        if self.idle_since == 0 {
            self.idle_since = now;
        }
        now < self.sleep_at_once_until || now.saturating_sub(self.idle_since) >= self.poll
    }

    /// Gaps seen between empty looks so far (each one a time the host took the core away while
    /// it polled).
    pub fn preemptions(&self) -> u64 {
        self.preemptions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Clock in microseconds: 1 000 per millisecond.
    const MS: u64 = 1_000;

    /// Catches: a window that sleeps before its stretch is over, never sleeps, or restarts
    /// its stretch on each empty look.
    #[test]
    fn polls_for_its_window_then_sleeps() {
        let mut w = PollWindow::new(2 * MS, MS);
        let t0 = 10 * MS;
        // Looks every 10 µs: poll for 2 ms, then sleep.
        let mut t = t0;
        while t < t0 + 2 * MS {
            assert!(!w.empty(t), "slept at {} µs into the stretch", t - t0);
            t += 10;
        }
        assert!(w.empty(t));
        assert_eq!(w.preemptions(), 0);
        // Work restarts the stretch.
        w.worked();
        let t1 = t + 20;
        let mut t = t1;
        while t < t1 + 2 * MS {
            assert!(!w.empty(t));
            t += 10;
        }
        assert!(w.empty(t));
        // Woken from the sleep with nothing to do: the stretch is over, sleep again at once;
        // the time asleep is no preemption.
        w.woke();
        assert!(w.empty(t + 50 * MS));
        assert_eq!(w.preemptions(), 0);
    }

    /// Catches: a preemption not noticed, a sleep or the time spent working counted as one, the
    /// poller kept sleeping at once after the hold, or not sleeping at once within it.
    #[test]
    fn a_gap_between_looks_makes_it_sleep_at_once_for_a_while() {
        // A 10 ms window, so only the gap can make it sleep early.
        let mut w = PollWindow::new(10 * MS, MS);
        let t0 = 10 * MS;
        assert!(!w.empty(t0));
        assert!(!w.empty(t0 + 10));
        // The host ran something else for 5 ms: sleep at this look, 5 ms into a 10 ms stretch...
        let back = t0 + 10 + 5 * MS;
        assert!(w.empty(back));
        assert_eq!(w.preemptions(), 1);
        // ...and at the first empty look of every stretch for the next 100 ms.
        w.worked();
        assert!(w.empty(back + 30 * MS));
        w.worked();
        assert!(w.empty(back + 99 * MS));
        // After the hold, with no new gap, it polls its window again.
        w.worked();
        let later = back + 101 * MS;
        assert!(!w.empty(later));
        assert!(!w.empty(later + 500));
        assert_eq!(w.preemptions(), 1);
        // Work that takes long is no gap; a sleep is no gap.
        w.worked();
        assert!(!w.empty(later + 20 * MS));
        w.woke();
        assert!(!w.empty(later + 25 * MS), "the time asleep is no preemption");
        assert_eq!(w.preemptions(), 1);
    }

    /// Catches: the clock's unit ignored (TSC cycles scaled as nanoseconds).
    #[test]
    fn thresholds_follow_the_clock_unit() {
        // A 3 GHz TSC: 3 000 000 cycles per ms; a 0.9 ms gap is none, a 1 ms gap is one.
        let per_ms = 3_000_000;
        let mut w = PollWindow::new(2 * per_ms, per_ms);
        assert!(!w.empty(per_ms));
        assert!(!w.empty(per_ms + 9 * per_ms / 10));
        assert_eq!(w.preemptions(), 0);
        assert!(w.empty(per_ms + 9 * per_ms / 10 + per_ms));
        assert_eq!(w.preemptions(), 1);
    }
}
