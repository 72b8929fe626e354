//! Syscall rings: Corey's syscall pseudo-device (seeds/000 section 4.4). A ring of request
//! slots in a segment this program maps; a kernel core it is attached to takes the requests
//! in order, runs them on its own core with the identity the ring was made with, and writes
//! the results back. Submitting is a few stores (no system call), so a program can submit a
//! batch, keep computing, and poll or wait for the completions. `abi::RingSlot` has the
//! protocol and what a request may name.
//!
//! Errors never hang: a full ring is `RingError::Full` at once; a ring that nothing serves
//! (detached, its core no longer a kernel core, broken) or a timeout cancels every request
//! the kernel has not taken yet (they will never run) and returns an error. Requests the
//! kernel had already taken still complete and can be collected later.
//!
//! No heap: a context started with `cores::Core` may use it.

use abi::{
    nr, Error, ObjName, ObjectId, SegMapping, CONF_RING_KICK, HWID_SYSCALL_RING, MAP_READ, MAP_WRITE, MEMID_SELF, PAGE_SIZE,
    RING_ATTACHED, RING_DONE, RING_FREE, RING_SLOT_BYTES, RING_SUBMITTED,
};
use core::sync::atomic::{fence, AtomicI64, AtomicU32, AtomicU64, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingError {
    /// No free slot: the oldest requests have not completed, or their results have not been
    /// collected (`poll`, `wait`).
    Full,
    /// Nothing serves the ring (its status, `RING_DETACHED`, `RING_STOPPED` or `RING_BROKEN`);
    /// every request not taken yet was cancelled.
    NotServed(u32),
    /// Nothing completed in time; every request not taken yet was cancelled.
    TimedOut,
    /// `wait` with nothing in flight.
    Idle,
    /// A system call setting the ring up, or ringing its doorbell, failed.
    Sys(Error),
}

impl From<Error> for RingError {
    fn from(e: Error) -> Self {
        RingError::Sys(e)
    }
}

/// A syscall ring mapped in this program's address space.
pub struct Ring {
    /// The device (`DEVICE_SYSCALL_RING`) and the segment holding the ring.
    pub dev: ObjName,
    pub seg: ObjName,
    ar: ObjName,
    va: u64,
    len: u64,
    slots: u64,
    /// Sequence numbers: the next slot to fill, and the oldest request not collected.
    next_submit: u64,
    next_complete: u64,
    attached: Option<ObjName>,
}

fn tsc() -> u64 {
    // SAFETY: rdtsc reads the time-stamp counter, which the kernel leaves readable in user
    // mode; it has no other effect.
    unsafe { core::arch::x86_64::_rdtsc() }
}

impl Ring {
    /// A ring of `slots` requests: a segment in `share`, mapped at `va` in the root range
    /// `ar` (which the kernel core will use for pointers in requests), and its device in
    /// `share`. Requests run with the shared shares this context can name now (abi::RingSlot).
    pub fn create(share: ObjectId, ar: ObjName, va: u64, slots: u64) -> Result<Ring, Error> {
        let len = (RING_SLOT_BYTES * (slots + 1)).next_multiple_of(PAGE_SIZE);
        let seg = ObjName::new(share, crate::sys::segment_alloc(share, "ring", MEMID_SELF, len)?);
        let mut r = Ring { dev: ObjName::default(), seg, ar, va, len: 0, slots, next_submit: 0, next_complete: 0, attached: None };
        // From here on `r`'s drop undoes what was made.
        crate::sys::ar_set_seg(ar, &SegMapping { voff: va, seg, soff: 0, len, flags: MAP_READ | MAP_WRITE })?;
        r.len = len;
        // SAFETY: no pointers: the kernel validates every argument.
        let dev = unsafe { crate::sys::call(nr::DEVICE_ALLOC, share, HWID_SYSCALL_RING, MEMID_SELF, seg.share, seg.object, slots)? };
        r.dev = ObjName::new(share, dev);
        Ok(r)
    }

    /// `Ring::create` in this program's own root range (the first program only: others name
    /// their root range themselves).
    pub fn create_here(share: ObjectId, va: u64, slots: u64) -> Result<Ring, Error> {
        Ring::create(share, ObjName::new(crate::launch::root_share(), crate::launch::start_info().root_ar), va, slots)
    }

    /// `pcore_add_device`: the pcore's core serves the ring while it is a kernel core.
    pub fn attach(&mut self, pcore: ObjName) -> Result<(), Error> {
        pcore_add_device(pcore, self.dev)?;
        self.attached = Some(pcore);
        Ok(())
    }

    /// `pcore_del_device` from the core it was attached to.
    pub fn detach(&mut self) -> Result<(), Error> {
        let p = self.attached.take().ok_or(Error::NotFound)?;
        pcore_del_device(p, self.dev).map(|_| ())
    }

    pub fn slots(&self) -> u64 {
        self.slots
    }

    /// Requests submitted and not collected yet.
    pub fn in_flight(&self) -> u64 {
        self.next_submit - self.next_complete
    }

    fn header(&self, word: usize) -> &AtomicU32 {
        // SAFETY: the header is the first 64 bytes of the ring mapping, which stays mapped
        // while `self` lives; accesses are atomic because the kernel writes it concurrently.
        unsafe { &*((self.va + 4 * word as u64) as *const AtomicU32) }
    }

    /// The ring's status as the kernel last published it (`RING_*`).
    pub fn status(&self) -> u32 {
        self.header(0).load(Ordering::Acquire)
    }

    /// The slot sequence number `seq` uses. A mask when `slots` is a power of two: a
    /// division per request is a helper call under TCG.
    fn index(&self, seq: u64) -> u64 {
        if self.slots.is_power_of_two() {
            seq & (self.slots - 1)
        } else {
            seq % self.slots
        }
    }

    fn slot(&self, seq: u64) -> (&AtomicU32, &AtomicU32, &[AtomicU64; 6], &AtomicI64) {
        let base = self.va + RING_SLOT_BYTES * (1 + self.index(seq));
        // SAFETY: slot `seq % slots` lies inside the mapping (create sized it for `slots`
        // slots after the header), 64-byte aligned; the kernel core accesses it concurrently,
        // so every access is atomic.
        unsafe {
            (
                &*(base as *const AtomicU32),
                &*((base + 4) as *const AtomicU32),
                &*((base + 8) as *const [AtomicU64; 6]),
                &*((base + 56) as *const AtomicI64),
            )
        }
    }

    /// The next slot `submit` would fill, as raw memory: for tests that forge entries.
    pub fn next_slot_raw(&self) -> *mut abi::RingSlot {
        (self.va + RING_SLOT_BYTES * (1 + self.index(self.next_submit))) as *mut abi::RingSlot
    }

    /// Count the next slot as submitted after writing it through `next_slot_raw`.
    pub fn submitted_raw(&mut self) {
        self.next_submit += 1;
    }

    /// Put a request in the next slot. No system call: see `kick`, `wait`.
    pub fn submit(&mut self, nr: u64, args: [u64; 6]) -> Result<u64, RingError> {
        let seq = self.next_submit;
        let (state, snr, sargs, _) = self.slot(seq);
        if state.load(Ordering::Acquire) != RING_FREE || seq - self.next_complete >= self.slots {
            return Err(RingError::Full);
        }
        snr.store(nr as u32, Ordering::Relaxed);
        for (s, a) in sargs.iter().zip(args) {
            s.store(a, Ordering::Relaxed);
        }
        state.store(RING_SUBMITTED, Ordering::Release);
        self.next_submit = seq + 1;
        Ok(seq)
    }

    /// Put several requests in the ring at once: all or none (`Full` if they do not all fit).
    /// The slots are marked submitted from the last to the first, so the kernel core, which
    /// takes slots in order, finds the whole batch when it finds its first request and takes
    /// it in one go. Returns the first request's sequence number.
    pub fn submit_batch(&mut self, reqs: &[(u64, [u64; 6])]) -> Result<u64, RingError> {
        let first = self.next_submit;
        let n = reqs.len() as u64;
        if first - self.next_complete + n > self.slots {
            return Err(RingError::Full);
        }
        for k in 0..n {
            if self.slot(first + k).0.load(Ordering::Acquire) != RING_FREE {
                return Err(RingError::Full);
            }
        }
        for (k, (nr, args)) in reqs.iter().enumerate() {
            let (_, snr, sargs, _) = self.slot(first + k as u64);
            snr.store(*nr as u32, Ordering::Relaxed);
            for (s, a) in sargs.iter().zip(args) {
                s.store(*a, Ordering::Relaxed);
            }
        }
        for k in (0..n).rev() {
            self.slot(first + k).0.store(RING_SUBMITTED, Ordering::Release);
        }
        self.next_submit = first + n;
        Ok(first)
    }

    /// Ring the doorbell if the kernel core has gone to sleep (a system call only then).
    pub fn kick(&self) -> Result<(), Error> {
        // Our submissions before the kernel's flag: it clears the flag and then looks at the
        // slots once more, so one of us sees the other.
        fence(Ordering::SeqCst);
        if self.header(2).load(Ordering::Acquire) == 0 && self.status() == RING_ATTACHED {
            crate::sys::device_conf(self.dev, &abi::DeviceConf { key: CONF_RING_KICK, value: 0 })?;
        }
        Ok(())
    }

    /// The oldest request's result, if it has completed: `(sequence, result)`.
    pub fn poll(&mut self) -> Option<(u64, Result<u64, Error>)> {
        if self.next_complete == self.next_submit {
            return None;
        }
        let seq = self.next_complete;
        let (state, _, _, result) = self.slot(seq);
        if state.load(Ordering::Acquire) != RING_DONE {
            return None;
        }
        let r = abi::decode(result.load(Ordering::Relaxed));
        state.store(RING_FREE, Ordering::Release);
        self.next_complete = seq + 1;
        Some((seq, r))
    }

    /// Cancel every request the kernel has not taken (newest submissions first go back to
    /// the free pool; the next `submit` reuses the first cancelled slot). Returns how many.
    pub fn cancel_pending(&mut self) -> u64 {
        // The kernel takes slots in order, so the untaken ones are a suffix of those in
        // flight: cancel from the oldest, and the first we win starts that suffix.
        let mut first = None;
        for seq in self.next_complete..self.next_submit {
            let (state, _, _, _) = self.slot(seq);
            if state.compare_exchange(RING_SUBMITTED, RING_FREE, Ordering::AcqRel, Ordering::Acquire).is_ok() && first.is_none() {
                first = Some(seq);
            }
        }
        match first {
            Some(f) => {
                let n = self.next_submit - f;
                self.next_submit = f;
                n
            }
            None => 0,
        }
    }

    /// Wait up to `timeout_ms` for the oldest request to complete.
    pub fn wait(&mut self, timeout_ms: u64) -> Result<(u64, Result<u64, Error>), RingError> {
        if self.in_flight() == 0 {
            return Err(RingError::Idle);
        }
        // Done already (the rest of a batch, usually): no fence, no clock, no doorbell.
        if let Some(done) = self.poll() {
            return Ok(done);
        }
        self.kick()?;
        let deadline = tsc().saturating_add(timeout_ms.saturating_mul(crate::time::tsc_per_ms()));
        let mut looks = 0u32;
        loop {
            if let Some(done) = self.poll() {
                return Ok(done);
            }
            // The status, the clock and a pause once per 16 looks: under QEMU's TCG a `pause`
            // (and the clock) leaves the translated code, and a waiter that does so at every
            // look sees the completion late (docs/roles.md, `PAUSE_EVERY` in roles.rs).
            looks = looks.wrapping_add(1);
            if looks % 16 != 0 {
                continue;
            }
            let status = self.status();
            if status != RING_ATTACHED {
                self.cancel_pending();
                // One of them may have completed meanwhile.
                return self.poll().ok_or(RingError::NotServed(status));
            }
            if tsc() > deadline {
                self.cancel_pending();
                return self.poll().ok_or(RingError::TimedOut);
            }
            core::hint::spin_loop();
        }
    }

    /// Submit one request and wait for its result, dropping the results of older requests
    /// still in flight.
    pub fn call(&mut self, nr: u64, args: [u64; 6], timeout_ms: u64) -> Result<Result<u64, Error>, RingError> {
        let seq = self.submit(nr, args)?;
        loop {
            let (s, r) = self.wait(timeout_ms)?;
            if s == seq {
                return Ok(r);
            }
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Freeing the device detaches it; then the mapping and the segment go.
        if self.dev != ObjName::default() {
            let _ = crate::sys::share_delobj(self.dev);
        }
        if self.len != 0 {
            let _ = crate::sys::ar_unmap(self.ar, self.va, self.len);
        }
        let _ = crate::sys::share_delobj(self.seg);
    }
}

/// `pcore_add_device(pcore, dev)`.
pub fn pcore_add_device(pcore: ObjName, dev: ObjName) -> Result<u64, Error> {
    // SAFETY: no pointers: the kernel validates every argument.
    unsafe { crate::sys::call(nr::PCORE_ADD_DEVICE, pcore.share, pcore.object, dev.share, dev.object, 0, 0) }
}

/// `pcore_del_device(pcore, dev)`.
pub fn pcore_del_device(pcore: ObjName, dev: ObjName) -> Result<u64, Error> {
    // SAFETY: no pointers: the kernel validates every argument.
    unsafe { crate::sys::call(nr::PCORE_DEL_DEVICE, pcore.share, pcore.object, dev.share, dev.object, 0, 0) }
}
