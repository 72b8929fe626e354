//! A bounded single-producer, single-consumer ring of two-word messages between two cores.
//!
//! The layout is the one the NIC channels use (docs/net.md): each slot carries its entry's
//! sequence number, so the consumer learns that entry `n` arrived by reading slot `n % N`
//! alone, and there is no shared producer count for the two cores to pass back and forth.
//! The consumer publishes how far it has read on its own line; the producer reads that line
//! only when its last reading says the ring is full. Per message, what crosses between the
//! cores is the slot's line (two slots per line) and, once per ring's worth, the count.
//!
//! One `Producer` and one `Consumer` per ring: each keeps its position in itself, so a second
//! producer would overwrite the first one's entries (a logic error the ring cannot see, not
//! memory unsafety: every word is atomic).

use crate::pad::CachePadded;
use crate::sync::{AtomicU64, Ordering};
use alloc::boxed::Box;
use alloc::vec::Vec;

/// One slot: the entry's sequence number plus one (0 = never written), then the message.
/// 32 bytes, so two slots share a line.
#[repr(C, align(32))]
struct Slot {
    tag: AtomicU64,
    a: AtomicU64,
    b: AtomicU64,
}

/// The ring itself: `N` slots and the consumer's count.
pub struct Ring {
    slots: Box<[Slot]>,
    consumed: CachePadded<AtomicU64>,
}

impl Ring {
    /// A ring of `n` slots (at least 1).
    pub fn new(n: usize) -> Ring {
        let n = n.max(1);
        let slots: Vec<Slot> = (0..n).map(|_| Slot { tag: AtomicU64::new(0), a: AtomicU64::new(0), b: AtomicU64::new(0) }).collect();
        Ring { slots: slots.into_boxed_slice(), consumed: CachePadded::new(AtomicU64::new(0)) }
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
}

/// The producing end: its count of entries sent and its last reading of the consumer's.
pub struct Producer<'r> {
    ring: &'r Ring,
    sent: u64,
    consumed_seen: u64,
}

impl<'r> Producer<'r> {
    pub fn new(ring: &'r Ring) -> Self {
        Producer { ring, sent: 0, consumed_seen: 0 }
    }

    /// Whether a `push` would succeed now.
    pub fn has_room(&mut self) -> bool {
        let n = self.ring.slots.len() as u64;
        if self.sent - self.consumed_seen < n {
            return true;
        }
        // Acquire: the consumer's reads of the slots it has passed happen before we refill them.
        self.consumed_seen = self.ring.consumed.load(Ordering::Acquire);
        self.sent - self.consumed_seen < n
    }

    /// Send `(a, b)`; `false` (nothing sent) if the ring is full.
    pub fn push(&mut self, a: u64, b: u64) -> bool {
        if !self.has_room() {
            return false;
        }
        let slot = &self.ring.slots[(self.sent % self.ring.slots.len() as u64) as usize];
        slot.a.store(a, Ordering::Relaxed);
        slot.b.store(b, Ordering::Relaxed);
        // Release: the message words are visible before the tag that says they are there.
        slot.tag.store(self.sent + 1, Ordering::Release);
        self.sent += 1;
        true
    }

    /// Messages sent and not yet consumed, as last known (an upper bound).
    pub fn in_flight(&self) -> u64 {
        self.sent - self.consumed_seen
    }
}

/// The consuming end: its count of entries received.
pub struct Consumer<'r> {
    ring: &'r Ring,
    received: u64,
}

impl<'r> Consumer<'r> {
    pub fn new(ring: &'r Ring) -> Self {
        Consumer { ring, received: 0 }
    }

    /// Whether a message is waiting (reads one slot's tag, writes nothing).
    pub fn ready(&self) -> bool {
        let slot = &self.ring.slots[(self.received % self.ring.slots.len() as u64) as usize];
        slot.tag.load(Ordering::Acquire) == self.received + 1
    }

    /// The next message, if one has arrived.
    pub fn pop(&mut self) -> Option<(u64, u64)> {
        let slot = &self.ring.slots[(self.received % self.ring.slots.len() as u64) as usize];
        // Acquire: pairs with the producer's Release of the tag.
        if slot.tag.load(Ordering::Acquire) != self.received + 1 {
            return None;
        }
        let m = (slot.a.load(Ordering::Relaxed), slot.b.load(Ordering::Relaxed));
        self.received += 1;
        // Release: our reads of the slot happen before the producer may overwrite it.
        self.ring.consumed.store(self.received, Ordering::Release);
        Some(m)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fifo_and_full() {
        let r = Ring::new(4);
        let (mut p, mut c) = (Producer::new(&r), Consumer::new(&r));
        assert_eq!(c.pop(), None);
        for i in 0..4 {
            assert!(p.push(i, i * 10));
        }
        // Full: the fifth waits for the consumer (a ring that overwrote would lose entry 0).
        assert!(!p.push(4, 40));
        assert!(c.ready());
        assert_eq!(c.pop(), Some((0, 0)));
        assert!(p.push(4, 40));
        for i in 1..5 {
            assert_eq!(c.pop(), Some((i, i * 10)));
        }
        assert_eq!(c.pop(), None);
        assert!(!c.ready());
    }

    #[test]
    fn many_laps_on_two_threads() {
        let r = std::sync::Arc::new(Ring::new(8));
        let r2 = r.clone();
        const N: u64 = 200_000;
        let t = std::thread::spawn(move || {
            let mut p = Producer::new(&r2);
            let mut i = 0;
            while i < N {
                if p.push(i, !i) {
                    i += 1;
                } else {
                    std::thread::yield_now();
                }
            }
        });
        let mut c = Consumer::new(&r);
        let mut next = 0;
        // Bounded: a ring that overwrote an unread slot leaves the consumer waiting for a tag
        // that never comes (mutant `spsc_overwrites_when_full`); that must fail, not hang.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while next < N {
            match c.pop() {
                Some((a, b)) => {
                    assert_eq!((a, b), (next, !next), "lost, duplicated or torn message");
                    next += 1;
                }
                None => {
                    assert!(std::time::Instant::now() < deadline, "message {next} never arrived (overwritten?)");
                    std::thread::yield_now();
                }
            }
        }
        t.join().unwrap();
    }
}
