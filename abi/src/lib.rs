//! The system-call ABI shared by the kernel and user programs: call numbers, object ids and
//! types, error codes, and the `repr(C)` structures passed by pointer. No dependencies.
//!
//! This is Corey's interface (seeds/000 section 4, figure 5) made concrete. Calling
//! convention (x86-64 `syscall`): number in `rax`; arguments in `rdi, rsi, rdx, r10, r8, r9`;
//! the result comes back in `rax` as an `i64`: `>= 0` is success (a value or 0), `< 0` is
//! `-(Error as i64)`. `rcx` and `r11` are clobbered; every other register is preserved.
//!
//! Naming and access control: an object is named by `<share id, object id>`. A call succeeds
//! only if the share is *reachable* from the calling core's share set (it is in the set, or
//! it is held by a share in the set) and the share holds the object. That check is the whole
//! access control: ids are not capabilities on their own.
//!
//! Lifetime: each share that holds an object counts as one reference, and so does a running
//! pcore's use of its root address range and shares. When the last reference goes, the object
//! is freed with everything it owns.
#![no_std]
#![forbid(unsafe_code)]

pub mod blk;
pub mod net;
pub use blk::*;
pub use net::*;

/// A 64-bit object id, unique for the life of the system.
pub type ObjectId = u64;

/// `<share id, object id>`: how every system call names an object.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ObjName {
    pub share: ObjectId,
    pub object: ObjectId,
}

impl ObjName {
    pub const fn new(share: ObjectId, object: ObjectId) -> Self {
        Self { share, object }
    }
}

/// `memid` value meaning "the calling core": metadata and pages come from its NUMA node.
pub const MEMID_SELF: u64 = u64::MAX;

/// Longest object name in bytes (longer names are refused with `NameTooLong`).
pub const MAX_NAME: usize = 32;

/// Page size of every mapping.
pub const PAGE_SIZE: u64 = 4096;

/// The user half of the address space is `[USER_BASE, USER_END)`; anything else is refused.
pub const USER_BASE: u64 = 0x1000;
pub const USER_END: u64 = 0x0000_8000_0000_0000;

/// System-call numbers, with each call's arguments (in register order) and result.
/// `name` arguments are a `(ptr, len)` pair of UTF-8 bytes, at most `MAX_NAME` long.
/// `memid` is a core index whose NUMA memory holds the new object, or `MEMID_SELF`.
pub mod nr {
    /// `obj_get_name(share, obj, buf, cap) -> len`: copy the object's name into `buf`.
    pub const OBJ_GET_NAME: u64 = 1;
    /// `obj_stat(share, obj, *mut ObjStat) -> 0`.
    pub const OBJ_STAT: u64 = 2;

    /// `share_alloc(parent_share, name_ptr, name_len, memid, flags) -> share id`: a new share,
    /// held by `parent_share` (so it is reachable at once). `flags`: `SHARE_PRIVATE`.
    pub const SHARE_ALLOC: u64 = 10;
    /// `share_addobj(dst_share, src_share, obj) -> 0`: add a reference to `<src_share, obj>`
    /// into `dst_share`. `AlreadyExists` if it is there.
    pub const SHARE_ADDOBJ: u64 = 11;
    /// `share_delobj(share, obj) -> 0`: remove the object from the share, dropping a reference.
    pub const SHARE_DELOBJ: u64 = 12;
    /// `self_drop(share) -> 0`: remove a share from this core's share set (not the root share).
    pub const SELF_DROP: u64 = 13;
    /// `self_shares(buf: *mut ObjectId, cap) -> n`: this core's share set, root share first.
    pub const SELF_SHARES: u64 = 14;
    /// `share_list(share, buf: *mut ObjectId, cap) -> n`: the ids a share holds, ascending.
    /// `BufferTooSmall` if more than `cap`.
    pub const SHARE_LIST: u64 = 15;

    /// `segment_alloc(share, name_ptr, name_len, memid, nbytes) -> segment id`: demand-zero
    /// memory of `nbytes` (rounded up to pages; pages are allocated on first touch).
    pub const SEGMENT_ALLOC: u64 = 20;
    /// `segment_copy(dst_share, src_share, seg, name_ptr, name_len, mode) -> segment id`:
    /// `COPY_EAGER` copies now; `COPY_ON_WRITE` shares pages until either side writes.
    /// `Busy` for a `COPY_ON_WRITE` copy of a segment a device has pinned (`net`, `blk`).
    pub const SEGMENT_COPY: u64 = 21;
    /// `segment_get_nbytes(share, seg) -> nbytes`.
    pub const SEGMENT_GET_NBYTES: u64 = 22;
    /// `segment_set_nbytes(share, seg, nbytes) -> 0`: grow, or shrink (`Busy` if a mapping
    /// covers the part that would go).
    pub const SEGMENT_SET_NBYTES: u64 = 23;

    /// `ar_alloc(share, name_ptr, name_len, memid, kind: ArKind) -> address range id`.
    pub const AR_ALLOC: u64 = 30;
    /// `ar_set_seg(ar_share, ar, *const SegMapping) -> 0`. Errors, the first that applies
    /// wins: the record and the names (`BadAddress`, `ShareNotReachable`, `NoSuchObject`,
    /// `WrongType`); the arguments (`InvalidArgument` for `len == 0` or bad flags,
    /// `Misaligned`, `OutOfRange` past the range's span); then the range, `Overlap` (another
    /// mapping in `[voff, voff + len)`); then the segment, `OutOfRange` (`soff + len` past
    /// its pages). The range is checked before the segment, so a refusal for overlap does not
    /// depend on the segment's size.
    pub const AR_SET_SEG: u64 = 31;
    /// `ar_set_ar(ar_share, ar, voff, child_share, child) -> 0`: link the whole child range
    /// (kind below the parent's) at `voff`, aligned to the child's span. Every root that
    /// reaches the child shares its page-table pages, so one core's fault fills the mapping
    /// for all.
    pub const AR_SET_AR: u64 = 32;
    /// `ar_get(ar_share, ar, buf: *mut ArMapping, cap) -> n`: the range's mappings, by `voff`.
    /// `BufferTooSmall` if there are more than `cap` (nothing is written then).
    pub const AR_GET: u64 = 33;
    /// `ar_unmap(ar_share, ar, voff, len) -> 0`: remove every mapping inside
    /// `[voff, voff + len)`; a mapping that straddles the boundary gives `Overlap`. TLB
    /// shootdowns go only to cores whose root reaches this range.
    pub const AR_UNMAP: u64 = 34;

    /// `pcore_alloc(share, name_ptr, name_len, core) -> pcore id`: an object for physical
    /// core `core` (a core index).
    pub const PCORE_ALLOC: u64 = 40;
    /// `pcore_current() -> pcore id` (held in the caller's root share).
    pub const PCORE_CURRENT: u64 = 41;
    /// `pcore_run(pcore_share, pcore, *const PcoreContext) -> 0`: on an XC or AC, `Busy` if
    /// that core runs a context already. A TC time-shares: the context joins the core's run
    /// queue (`Busy` if `TC_MAX_QUEUED` wait there already, or this pcore object's previous
    /// context is still queued or running).
    pub const PCORE_RUN: u64 = 42;
    /// `pcore_set_interval(pcore_share, pcore, hz) -> 0`: timer tick rate (0 = none).
    pub const PCORE_SET_INTERVAL: u64 = 43;
    /// `pcore_halt(pcore_share, pcore, exit_code) -> 0`: end the context on that core. On the
    /// caller's own pcore this does not return.
    pub const PCORE_HALT: u64 = 44;
    /// `pcore_stat(pcore_share, pcore, *mut PcoreStat) -> 0`.
    pub const PCORE_STAT: u64 = 45;
    /// `pcore_set_role(pcore_share, pcore, role) -> 0`: change an idle core's role (`Busy`
    /// while it runs a context, unless the context changes its own core between XC, TC and
    /// AC, which takes effect at its next system call). Making the last kernel core something else while application
    /// cores depend on it is `Busy`; an AC needs a KC (`NoSuchCore` if there is none).
    pub const PCORE_SET_ROLE: u64 = 46;
    /// `pcore_add_device(pcore_share, pcore, dev_share, dev) -> 0`: give a device to the
    /// pcore's core; while that core is a kernel core it polls the device (Corey section
    /// 4.4). Syscall rings (`DEVICE_SYSCALL_RING`) and virtual NICs (`DEVICE_NET`, see
    /// `net`) can be polled: another device is `Unsupported`. `NotPermitted` through a pcore object another core allocated (as for
    /// `pcore_run`); `Busy` if the device is attached to a core already (detach it first);
    /// `NoSuchCore` if the pcore's core is not online.
    pub const PCORE_ADD_DEVICE: u64 = 47;
    /// `pcore_del_device(pcore_share, pcore, dev_share, dev) -> 0`: take the device from the
    /// pcore's core. Requests not yet taken stay in the ring (the ring's status becomes
    /// `RING_DETACHED`, so waiters cancel them and get an error); a request the kernel core is
    /// running completes. `NotFound` if the device is not attached to that core;
    /// `Unsupported` for a device that is not a syscall ring; `NotPermitted` as for
    /// `pcore_add_device`.
    pub const PCORE_DEL_DEVICE: u64 = 48;

    /// `device_alloc(share, hwid, memid) -> device id`. For a network card (`DEVICE_NET`,
    /// see `net`): `device_alloc(share, hwid, memid, seg_share, seg, nchannels)` makes a
    /// virtual NIC whose channels' rings and packet buffers are in that segment (`Busy` if
    /// another virtual NIC has the card, or a page of the segment is shared copy-on-write;
    /// `InvalidArgument` for 0 or more than `NET_MAX_CHANNELS` channels; `OutOfRange` if the
    /// segment holds fewer than `NET_MIN_BUFFERS_PER_CHANNEL` buffers per channel). While the
    /// virtual NIC lives, the segment's pages are pinned: copy-on-write copies and shrinking
    /// are `Busy`. For the syscall pseudo-device
    /// (`hwid = HWID_SYSCALL_RING`) three more arguments bind it to its ring:
    /// `device_alloc(share, HWID_SYSCALL_RING, memid, seg_share, seg, slots)`: the ring is the
    /// first `RING_SLOT_BYTES * (slots + 1)` bytes of that segment (a `RingHeader`, then
    /// `slots` `RingSlot`s), which the caller maps in its address range to use it. Requests
    /// run with the share set and address range the caller has now (see `RingSlot`).
    /// `InvalidArgument` if `slots` is 0 or above `MAX_RING_SLOTS` (or the caller can name
    /// more than `MAX_RING_SHARES` shared shares); `OutOfRange` if the segment is smaller than
    /// the ring; `Busy` if the segment's first page is shared copy-on-write with another
    /// segment; the naming errors for the segment.
    pub const DEVICE_ALLOC: u64 = 50;
    /// `device_list(buf: *mut DeviceInfo, cap) -> n` (`BufferTooSmall` if more than `cap`).
    pub const DEVICE_LIST: u64 = 51;
    /// `device_stat(dev_share, dev, *mut DeviceStat) -> 0`.
    pub const DEVICE_STAT: u64 = 52;
    /// `device_conf(dev_share, dev, *const DeviceConf) -> 0` (`Unsupported` for unknown keys).
    pub const DEVICE_CONF: u64 = 53;
    /// `device_buf(dev_share, dev, *const DeviceBuf) -> bytes transferred`.
    pub const DEVICE_BUF: u64 = 54;

    /// `locality_get(buf: *mut LocalityEntry, cap_entries) -> n` (fills n*n entries).
    pub const LOCALITY_GET: u64 = 60;

    /// Kernel services outside Corey's table: console, time, counters, boot image.
    /// `console_write(ptr, len) -> len`.
    pub const CONSOLE_WRITE: u64 = 70;
    /// `console_read(ptr, cap) -> n` (non-blocking; 0 if nothing is waiting).
    pub const CONSOLE_READ: u64 = 71;
    /// `time_now() -> TSC ticks` (see `SysInfo::tsc_per_ms`).
    pub const TIME_NOW: u64 = 72;
    /// `sys_info(*mut SysInfo, flags) -> 0`. `flags` is 0 or `SYS_INFO_ALL_CORES`; any other
    /// bit is `InvalidArgument`.
    pub const SYS_INFO: u64 = 73;
    /// `sys_info` flag: before counting, every core (by an active message) takes back the
    /// objects other cores freed into its kernel heap and releases its empty slabs, so that
    /// `free_pages` does not depend on which slabs another core happens to cache. For exact
    /// leak checks while other cores have run; it interrupts every core, so not for hot paths.
    pub const SYS_INFO_ALL_CORES: u64 = 1;
    /// `core_stats(core, *mut CoreStats) -> 0`.
    pub const CORE_STATS: u64 = 74;
    /// `initrd_get(share, name_ptr, name_len) -> segment id`: a copy-on-write segment with the
    /// contents of that file of the boot image (its size is the file size).
    pub const INITRD_GET: u64 = 75;
    /// `null() -> 0`: does nothing, for measuring system-call cost.
    pub const NULL: u64 = 76;
    /// `syscall_batch(*mut BatchEntry, n) -> n`: run `n` (at most `MAX_BATCH`) calls in order
    /// and store each result in its entry. On an application core the whole batch is one
    /// round trip to the kernel core. Nested batches are refused per entry (`InvalidArgument`).
    pub const SYSCALL_BATCH: u64 = 77;
    /// `pcore_yield() -> 0`: on a TC with other contexts queued, give the rest of this time
    /// slice to the next one (the switch happens as the call returns to user mode); on other
    /// cores, or with nothing queued, it does nothing.
    pub const PCORE_YIELD: u64 = 78;
    /// `core_request(n, role, near, buf: *mut u64) -> n`: ask the core scheduler on core 0
    /// (boot option `sched=core0`, NIX's asymmetric scheduling) for `n` cores of their own.
    /// All or nothing: the free cores nearest to `near` are chosen; on success their indices
    /// are written to `buf[0..n]`, ascending, and the cores are granted to the caller (its context, named by its root
    /// share: see `CoreStats::granted_to`) until it releases them (`core_release`) or its
    /// context ends. A core is free if it is online, not core 0, not a kernel core, not
    /// granted and runs no context. `role`: `GRANT_ROLE_ANY` keeps the cores' roles, `ROLE_XC`,
    /// `ROLE_TC` or `ROLE_AC` sets them (an AC needs a kernel core: `NoSuchCore`). `near`: a
    /// core index, or `NEAR_CALLER` for the calling core. While a core is granted, `pcore_run`
    /// on it by any other context is `NotPermitted`.
    /// Errors: `Unsupported` when the scheduler is off; `InvalidArgument` for `n = 0`, `n`
    /// beyond the cores that could ever be granted (online cores but core 0), a kernel-core
    /// or unknown `role`; `NoSuchCore` for a `near` that is not an online core; `BadAddress`
    /// for a `buf` that cannot take `n` entries (nothing is granted then); `Busy` if fewer than
    /// `n` cores are free now; `NotPermitted` from a syscall ring (its requests belong to no
    /// context).
    pub const CORE_REQUEST: u64 = 79;
    /// `core_release(core) -> released`: give a granted core back to the scheduler's pool
    /// (`CORE_ALL`: every core the caller holds; returns how many). A context still running
    /// there keeps running; the core is granted again once it is idle. Errors: `Unsupported`
    /// when the scheduler is off; `NoSuchCore` for an index that is not an online core;
    /// `NotFound` if the caller does not hold that core; `NotPermitted` from a syscall ring.
    pub const CORE_RELEASE: u64 = 80;

    /// Protected procedure calls (Tornado, seeds/001 section 6; docs/ppc.md): a server
    /// registers a *gate* for one core, and a client running on that core calls it. The call
    /// runs the server's handler on the caller's own core, in the server's address range and
    /// share set, and returns its result: no other core, lock or shared counter is involved.
    ///
    /// `ppc_register(share, name_ptr, name_len, *const PpcGate) -> gate id`: a gate object
    /// (`ObjType::Gate`) in `share`, homed on the gate's core. It holds references to the
    /// handler's root range and shares (they live while the gate does). Errors: `BadAddress`
    /// for an `entry` or `stack_top` outside the user half; `Misaligned` for a `stack_top`
    /// not 16-byte aligned; `NoSuchCore` for a core that is not online; `InvalidArgument` for
    /// no share or more than `MAX_CONTEXT_SHARES`, a root range that is not `ArKind::Root`, or a
    /// `share` that one of the gate's shares holds (directly or through shares and gates it
    /// holds: the gate would keep itself alive, a reference cycle nothing could free);
    /// `NotPermitted` for a private share in the list that belongs to another core than the
    /// gate's; the naming errors for the root range and the shares.
    pub const PPC_REGISTER: u64 = 81;
    /// `ppc_call(gate_share, gate, a0, a1, a2, a3) -> the handler's value`. The gate is named
    /// `<gate_share, gate>`, or, with `gate_share = PPC_BOUND`, `gate` is a slot this
    /// identity bound it in (`PPC_BIND`; `NoSuchObject` for a slot out of range, empty or
    /// bound by another identity): the fast way, no lookup. On the gate's core
    /// only (`WrongCore` elsewhere); one call at a time per gate (`Busy` while it is in a call,
    /// which includes calling it from its own handler, and `Busy` beyond `PPC_MAX_DEPTH`
    /// nested calls). `NotPermitted` unless made with the `syscall` instruction itself: inside
    /// a `syscall_batch`, through a syscall ring, or forwarded to a kernel core (an AC's
    /// `ppc_call` and `ppc_return` run on the AC itself, never forwarded).
    ///
    /// The caller's rip, rsp and rflags are saved in the gate; the core loads the gate's root
    /// range, and the calling context's share set and root share become the gate's until the
    /// call ends. The handler starts in user mode at `PpcGate::entry` with `rsp = stack_top`,
    /// `rflags = 0x202`, `rax = PpcGate::cookie`, `rdi = gate_share`, `rsi = gate`,
    /// `rdx, r10, r8, r9 = a0..a3` (the caller's argument registers, untouched); every other
    /// register holds what the caller had (the caller's stub clears what it will not pass).
    /// `pcore_current()` in the handler names the caller's pcore: who is calling.
    ///
    /// The call ends with the handler's `ppc_return(value)`: the caller resumes after its
    /// `syscall` with `rax = value` as the handler gave it (`>= 0` a result, `< 0` an error
    /// `-Error`, as for any call), its own rsp and rflags, and the handler's other registers
    /// (a caller's stub treats every register but rsp as clobbered). Or it ends without a
    /// result, `CallAborted`: the handler took a fault it did not recover from (the caller's
    /// context lives on; the gate stays usable). A time slice that ends during a call
    /// switches the core away and back with the gate's root range (the call is part of the
    /// caller's context); halting the caller's context ends the call with it. A gate deleted
    /// during a call is freed when the call ends: the call keeps it alive.
    pub const PPC_CALL: u64 = 82;
    /// `ppc_return(value)`: end the innermost call this context is in (see `PPC_CALL`); does
    /// not return. `NotPermitted` outside a call, or not made with `syscall` itself. Either
    /// way the argument registers (rdi, rsi, rdx, r10, r8, r9) come back cleared: the client
    /// of the call sees none of the handler's values in them, and a failed `ppc_return`
    /// clobbers them too (its stub must say so).
    pub const PPC_RETURN: u64 = 83;
    /// `ppc_bind(gate_share, gate) -> slot`: put the gate in one of this context's
    /// `PPC_BOUND_SLOTS` bound-gate slots, for `ppc_call(PPC_BOUND, slot, ..)`: the call then
    /// indexes the slot instead of looking the gate up by name (Tornado's per-processor port
    /// table). The gate is checked once, here: `WrongType` if it is not a gate, `WrongCore`
    /// if it does not serve the caller's core; `Busy` if every slot is taken; the naming
    /// errors. The slot holds a reference: the gate lives while it is bound, even once
    /// deleted from its share. A slot belongs to the identity that bound it (the caller's
    /// root share at the time): a handler running in the context during a call can neither
    /// call nor unbind the client's slots, nor the client the handler's. `NotPermitted`
    /// through a syscall ring (it has no context to bind in).
    pub const PPC_BIND: u64 = 84;
    /// `ppc_unbind(slot) -> 0`: empty a slot `ppc_bind` filled. `NoSuchObject` if the slot is
    /// out of range, empty or bound by another identity. A call running through the slot
    /// keeps the gate until it ends. `NotPermitted` through a syscall ring.
    pub const PPC_UNBIND: u64 = 85;

    /// `inject_ctl(op, counts: *mut u64, cap) -> n`: the allocation fault injection the kernel
    /// command line configured (`inject=`), for test programs. `INJECT_ARM`: start injecting
    /// now, if `inject_from=program` left it waiting for the program (else nothing changes);
    /// returns 0. `INJECT_COUNTS`: the injected failures so far in all; if `counts` is not 0,
    /// also writes `min(cap, INJECT_CALLS)` words, the failures injected inside each system call
    /// number (index = number; a call inside `syscall_batch` counts as its own number).
    /// `Unsupported` if the command line configured no injection; `InvalidArgument` for
    /// another `op`; `BadAddress` for an unwritable `counts`.
    pub const INJECT_CTL: u64 = 86;

    /// `wait(flags, timeout_us) -> what`: halt the calling core until an interrupt comes or
    /// `timeout_us` passes (at most `MAX_WAIT_US`), instead of polling. With `WAIT_CONSOLE` in
    /// `flags` the serial port's receive interrupt is armed for this core, and the call
    /// returns at once if input is already waiting. Returns `WAIT_CONSOLE` if console input is
    /// waiting when it returns, plus `WAIT_WOKEN` if a `wake` (`nr::WAKE`) for this core ended
    /// the wait or was pending when it began (then it does not halt); 0 for a timeout or
    /// another interrupt (callers look again).
    /// Errors: `InvalidArgument` for unknown flags or a timeout over `MAX_WAIT_US`;
    /// `NotPermitted` where the caller's core is not the core that would halt (a call
    /// forwarded from an application core, a syscall ring). On a TC with other contexts
    /// queued it returns 0 at once (the next tick switches to them).
    pub const WAIT: u64 = 87;
    /// `wake(core) -> 0`: end `core`'s `wait` now, or, if it is not waiting, make its next
    /// `wait` return at once (one pending wake per core: wakes before it waits again do not
    /// add up). That `wait` returns `WAIT_WOKEN`. For a program whose cores hand each other
    /// work through memory: the consumer announces that it is going to sleep (a flag in
    /// memory), looks at its queues once more and calls `wait`; a producer that queued work
    /// and then sees the flag calls `wake`, so the work waits for no timeout. A wake that
    /// comes before the `wait` is not lost. Errors: `NoSuchCore` for a core that is not
    /// online.
    pub const WAKE: u64 = 88;

    /// `linux_personality(op, a0, a1, a2) -> 0`: the Linux personality's reflection
    /// (docs/linux-abi.md). `op = LINUX_ON`, `a0 = upcall`, `[a1, a2)` = the native range:
    /// from now on a `syscall` made by this context from outside the native range is not a
    /// call: it returns to user mode at `upcall` at once with `rax` = the caller's rip,
    /// `r11` = (the number << 32) | the caller's rflags, `rcx` = `upcall`, every other
    /// register (rsp too) as the caller left it. `LINUX_OFF`: back to plain calls.
    /// `LINUX_SET_FS`, `a0 = base`: the user FS base while this context runs (0 or a user
    /// address). Errors: `InvalidArgument` for an empty range, an upcall outside it or an
    /// unknown `op`; `BadAddress` for a range or base outside the user half; `NotPermitted`
    /// when forwarded from an application core, inside a protected procedure call, from a
    /// syscall ring, or for `LINUX_SET_FS` without a personality.
    /// `LINUX_EVENTS`, `a0 = event upcall` (inside the native range), `a1` = `LINUX_EV_*`
    /// flags: a user-mode fault (`LINUX_EV_FAULTS`) or a timer tick (`LINUX_EV_TICKS`) that
    /// interrupts the context outside its native range no longer ends it (a fault) or goes
    /// unseen (a tick): the kernel keeps the interrupted registers as a [`LinuxEvent`](crate::LinuxEvent)
    /// and resumes the context at the event upcall (the other registers undefined); a fault
    /// inside the native range still ends the context. `LINUX_TAKE_EVENT`, `a0 = *mut
    /// LinuxEvent`: copy the kept event out and forget it; returns 1, or 0 if none is kept.
    /// Errors: `NotPermitted` for either without a personality; `InvalidArgument` for an
    /// event upcall outside the native range or unknown flags; `BadAddress` for a bad buffer.
    pub const LINUX_PERSONALITY: u64 = 95;
}

/// `nr::LINUX_PERSONALITY` operations.
pub const LINUX_OFF: u64 = 0;
pub const LINUX_ON: u64 = 1;
pub const LINUX_SET_FS: u64 = 2;
pub const LINUX_EVENTS: u64 = 3;
pub const LINUX_TAKE_EVENT: u64 = 4;
/// `LINUX_EVENTS` flags: reflect user-mode faults / timer ticks.
pub const LINUX_EV_FAULTS: u64 = 1;
pub const LINUX_EV_TICKS: u64 = 2;
/// `LinuxEvent::kind`.
pub const LINUX_EVENT_FAULT: u64 = 1;
pub const LINUX_EVENT_TICK: u64 = 2;

/// What interrupted a Linux program (`nr::LINUX_PERSONALITY`, `LINUX_TAKE_EVENT`): the kind,
/// for a fault its vector, error code and (page faults) the faulting address, and every
/// register as the program had it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinuxEvent {
    pub kind: u64,
    pub vector: u64,
    pub error: u64,
    pub addr: u64,
    pub rax: u64,
    pub rbx: u64,
    pub rcx: u64,
    pub rdx: u64,
    pub rsi: u64,
    pub rdi: u64,
    pub rbp: u64,
    pub rsp: u64,
    pub r8: u64,
    pub r9: u64,
    pub r10: u64,
    pub r11: u64,
    pub r12: u64,
    pub r13: u64,
    pub r14: u64,
    pub r15: u64,
    pub rip: u64,
    pub rflags: u64,
}

/// `inject_ctl` operations.
pub const INJECT_COUNTS: u64 = 0;
pub const INJECT_ARM: u64 = 1;
/// Call numbers `inject_ctl(INJECT_COUNTS)` reports on (0 .. INJECT_CALLS).
pub const INJECT_CALLS: u64 = 128;

/// `ppc_call`'s `gate_share` for a gate bound with `ppc_bind` (the gate argument is then the
/// slot). No share has this id (ids carry the making core plus one above bit 40).
pub const PPC_BOUND: u64 = u64::MAX;

/// Bound-gate slots per context (`nr::PPC_BIND`).
pub const PPC_BOUND_SLOTS: u64 = 8;

/// `nr::WAIT` flag: wake when the serial console has input.
pub const WAIT_CONSOLE: u64 = 1;
/// `nr::WAIT`'s result bit: a `wake` for this core ended the wait (or came before it).
pub const WAIT_WOKEN: u64 = 2;
/// The longest `nr::WAIT` (10 s).
pub const MAX_WAIT_US: u64 = 10_000_000;

/// Calls one context may nest (a handler calling another gate, and so on) before `ppc_call`
/// is `Busy`.
pub const PPC_MAX_DEPTH: u64 = 4;

/// `ppc_register(share, name, &PpcGate)`: what a gate runs and where.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PpcGate {
    /// Where the handler starts (see `nr::PPC_CALL` for the registers at entry).
    pub entry: u64,
    /// The handler's stack top, 16-byte aligned, in `root_ar`. Every call starts here: one
    /// call at a time per gate, so one stack per gate.
    pub stack_top: u64,
    /// Passed to the handler in `rax` at every call (e.g. the address of its function).
    pub cookie: u64,
    /// The one core the gate serves (a core index).
    pub core: u64,
    /// The root address range (`ArKind::Root`) the handler runs on.
    pub root_ar: ObjName,
    /// The handler's shares, at least one: `shares[0]` is its root share (where it makes
    /// objects, as a context does in its own), the others its share set.
    pub nshares: u64,
    pub shares: [ObjectId; MAX_CONTEXT_SHARES],
}

/// `core_request` role argument: keep the granted cores' roles.
pub const GRANT_ROLE_ANY: u64 = u64::MAX;
/// `core_request` `near` argument: prefer cores near the calling core.
pub const NEAR_CALLER: u64 = u64::MAX;
/// `core_release` argument: every core the caller holds.
pub const CORE_ALL: u64 = u64::MAX;

/// Error codes. The value returned in `rax` is the negated discriminant.
#[repr(i64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Unknown system-call number.
    NoSuchCall = 1,
    /// An argument is outside its documented domain (bad flag, mode, kind, zero length...).
    InvalidArgument = 2,
    /// The share is not reachable from the caller's share set, or does not exist.
    ShareNotReachable = 3,
    /// The share does not hold an object with that id.
    NoSuchObject = 4,
    /// The object exists but is not of the type the call needs.
    WrongType = 5,
    /// Out of memory (pages or kernel metadata). Nothing was changed.
    NoMemory = 6,
    /// A user pointer is null, outside the user half, unmapped, or not writable.
    BadAddress = 7,
    /// An address, offset or length is not page-aligned (or not aligned to the range size).
    Misaligned = 8,
    /// The new mapping overlaps an existing one.
    Overlap = 9,
    /// An offset or length is beyond the object, or an addition overflows.
    OutOfRange = 10,
    /// The pcore is already running a context, or the object is in use.
    Busy = 11,
    /// No such core, or the core is not online.
    NoSuchCore = 12,
    /// The caller may not do this: another core's private share; `pcore_run`/`pcore_halt`
    /// through a pcore object another core allocated (naming it is not enough); dropping
    /// the root share.
    NotPermitted = 13,
    /// An object name longer than `MAX_NAME`.
    NameTooLong = 14,
    /// The output buffer is too small; nothing was written.
    BufferTooSmall = 15,
    /// The object is already in that share.
    AlreadyExists = 16,
    /// The operation exists in the interface but this device or object does not support it.
    Unsupported = 17,
    /// No such device, or no such file in the boot image.
    NotFound = 18,
    /// A device reported an error for the request (a disk's read or write failed).
    Io = 19,
    /// A per-core object used from another core: a gate called from a core it does not
    /// serve (`ppc_call`).
    WrongCore = 20,
    /// A protected procedure call ended without a result: its handler took a fault it did
    /// not recover from (`ppc_call`).
    CallAborted = 21,
    /// A write to a pipe no read end of which is open any more (POSIX `EPIPE`; the library
    /// OS's pipes, never the kernel).
    BrokenPipe = 22,
    /// The call would have to wait and the descriptor is non-blocking (POSIX `EAGAIN`; the
    /// library OS's eventfds and sockets, never the kernel).
    WouldBlock = 23,
}

impl Error {
    pub const ALL: [Error; 23] = [
        Error::NoSuchCall,
        Error::InvalidArgument,
        Error::ShareNotReachable,
        Error::NoSuchObject,
        Error::WrongType,
        Error::NoMemory,
        Error::BadAddress,
        Error::Misaligned,
        Error::Overlap,
        Error::OutOfRange,
        Error::Busy,
        Error::NoSuchCore,
        Error::NotPermitted,
        Error::NameTooLong,
        Error::BufferTooSmall,
        Error::AlreadyExists,
        Error::Unsupported,
        Error::NotFound,
        Error::Io,
        Error::WrongCore,
        Error::CallAborted,
        Error::BrokenPipe,
        Error::WouldBlock,
    ];

    pub fn from_code(code: i64) -> Option<Error> {
        Error::ALL.iter().copied().find(|e| *e as i64 == code)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Error::NoSuchCall => "no such system call",
            Error::InvalidArgument => "invalid argument",
            Error::ShareNotReachable => "share not reachable",
            Error::NoSuchObject => "no such object in share",
            Error::WrongType => "wrong object type",
            Error::NoMemory => "out of memory",
            Error::BadAddress => "bad address",
            Error::Misaligned => "misaligned",
            Error::Overlap => "overlapping mapping",
            Error::OutOfRange => "out of range",
            Error::Busy => "busy",
            Error::NoSuchCore => "no such core",
            Error::NotPermitted => "not permitted",
            Error::NameTooLong => "name too long",
            Error::BufferTooSmall => "buffer too small",
            Error::AlreadyExists => "already exists",
            Error::Unsupported => "unsupported",
            Error::NotFound => "not found",
            Error::Io => "device I/O error",
            Error::WrongCore => "wrong core",
            Error::CallAborted => "call aborted",
            Error::BrokenPipe => "broken pipe",
            Error::WouldBlock => "would block",
        }
    }
}

/// Encode a result into the `rax` value.
pub fn encode(r: Result<u64, Error>) -> i64 {
    match r {
        Ok(v) => v as i64,
        Err(e) => -(e as i64),
    }
}

/// Decode `rax` into a result.
#[inline]
pub fn decode(rax: i64) -> Result<u64, Error> {
    if rax >= 0 {
        Ok(rax as u64)
    } else {
        Err(Error::from_code(-rax).unwrap_or(Error::InvalidArgument))
    }
}

/// Object types.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjType {
    Share = 1,
    Segment = 2,
    AddressRange = 3,
    Pcore = 4,
    Device = 5,
    /// A protected-procedure-call gate (`ppc_register`).
    Gate = 6,
}

impl ObjType {
    pub fn from_u32(v: u32) -> Option<ObjType> {
        match v {
            1 => Some(ObjType::Share),
            2 => Some(ObjType::Segment),
            3 => Some(ObjType::AddressRange),
            4 => Some(ObjType::Pcore),
            5 => Some(ObjType::Device),
            6 => Some(ObjType::Gate),
            _ => None,
        }
    }
}

/// `obj_stat(share, obj, &mut ObjStat)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ObjStat {
    pub id: ObjectId,
    /// An `ObjType` value.
    pub obj_type: u32,
    /// The core whose memory holds the metadata (the `memid` at allocation).
    pub home_core: u32,
    /// References: shares holding it, mappings and links using it, and running contexts
    /// using it (not counting the lookup this call makes).
    pub refs: u64,
}

/// `share_alloc` flags. A private share can be used only by the core that allocated it and
/// takes no lock; a shared one (the default) uses a scalable reader-writer lock.
pub const SHARE_PRIVATE: u64 = 1;

/// `segment_copy` modes.
pub const COPY_EAGER: u64 = 0;
pub const COPY_ON_WRITE: u64 = 1;

/// Address-range kinds for `ar_alloc`. A root range is a whole user address space (a page
/// table root, what a pcore runs on); the others are page-table subtrees that `ar_set_ar`
/// links into a range one level up, at an offset aligned to their span.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArKind {
    /// Top-level table: the user half, 128 TiB.
    Root = 0,
    /// A page-directory-pointer table: 512 GiB.
    Span512G = 1,
    /// A page directory: 1 GiB.
    Span1G = 2,
    /// A page table: 2 MiB.
    Span2M = 3,
}

impl ArKind {
    pub fn from_u64(v: u64) -> Option<ArKind> {
        match v {
            0 => Some(ArKind::Root),
            1 => Some(ArKind::Span512G),
            2 => Some(ArKind::Span1G),
            3 => Some(ArKind::Span2M),
            _ => None,
        }
    }

    /// Bytes of address space the range covers.
    pub fn span(self) -> u64 {
        match self {
            ArKind::Root => USER_END,
            ArKind::Span512G => 512 << 30,
            ArKind::Span1G => 1 << 30,
            ArKind::Span2M => 2 << 20,
        }
    }
}

/// Mapping permission flags (`ar_set_seg`, `ar_set_ar`).
pub const MAP_READ: u64 = 1;
pub const MAP_WRITE: u64 = 2;
pub const MAP_EXEC: u64 = 4;

/// `ar_set_seg(ar_share, ar, &SegMapping)`: map `len` bytes at `voff` in the range to the
/// segment's bytes starting at `soff`. `voff`, `soff` and `len` must be page-aligned; the
/// mapping must not overlap another one in the same range (`Overlap`, reported before a
/// segment too small, `OutOfRange`: see `syscall::AR_SET_SEG`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SegMapping {
    pub voff: u64,
    pub seg: ObjName,
    pub soff: u64,
    pub len: u64,
    pub flags: u64,
}

/// One entry returned by `ar_get`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArMapping {
    pub voff: u64,
    pub len: u64,
    /// The segment or address range mapped here.
    pub target: ObjectId,
    /// `ObjType::Segment` or `ObjType::AddressRange`.
    pub target_type: u32,
    pub _pad: u32,
    /// Offset into the segment (0 for ranges).
    pub soff: u64,
    pub flags: u64,
}

/// Core roles (NIX, seeds/003). XC: runs one context's user and kernel code (Corey's
/// default). AC: runs one context with no timer or device interrupts; its system calls run on
/// a kernel core. KC: runs only kernel code, serving ACs' system calls and its mailbox; never
/// user code. TC: runs its own system calls and takes timer interrupts, and time-shares the
/// contexts queued on it (round-robin at timer ticks and `pcore_yield`; docs/roles.md).
pub const ROLE_XC: u64 = 0;
pub const ROLE_AC: u64 = 1;
pub const ROLE_KC: u64 = 2;
pub const ROLE_TC: u64 = 3;

pub fn role_name(role: u64) -> &'static str {
    match role {
        ROLE_XC => "XC",
        ROLE_AC => "AC",
        ROLE_KC => "KC",
        ROLE_TC => "TC",
        _ => "?",
    }
}

/// Most shares a context can start with (besides its own root share).
pub const MAX_CONTEXT_SHARES: usize = 8;

/// `pcore_run(pcore_share, pcore, &PcoreContext)`: start a user context on the pcore's core.
/// The kernel gives the context a fresh private root share (holding the pcore object) and adds
/// the listed shares to its share set. At entry: `rip`/`rsp` as given, `rdi = arg`,
/// `rsi` = the new root share id, `rdx` = the pcore's object id. Interrupts are enabled.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PcoreContext {
    pub rip: u64,
    pub rsp: u64,
    pub arg: u64,
    /// The root address range (`ArKind::Root`) the context runs on.
    pub root_ar: ObjName,
    pub nshares: u64,
    pub shares: [ObjectId; MAX_CONTEXT_SHARES],
    /// `ROLE_XC` (0, the default) runs the context in the core's current role (XC, TC, or AC
    /// as the boot policy or `pcore_set_role` made it); `ROLE_AC` or `ROLE_TC` switch the
    /// core to that role first. Kernel cores never run contexts (`NotPermitted`).
    pub role: u64,
}

/// Contexts a TC core holds in its run queue besides the one running.
pub const TC_MAX_QUEUED: usize = 16;

/// Pcore states in `PcoreStat::state` (on a TC, RUNNING also covers queued).
pub const PCORE_IDLE: u32 = 0;
pub const PCORE_RUNNING: u32 = 1;
pub const PCORE_HALTED: u32 = 2;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PcoreStat {
    pub core: u32,
    pub state: u32,
    /// The code passed to `pcore_halt` (or the fault that stopped the context, see
    /// `EXIT_FAULT_BASE`).
    pub exit_code: u64,
    /// How many contexts have run on this pcore object.
    pub runs: u64,
    pub interval_hz: u64,
}

/// A context killed by an unhandled fault exits with `EXIT_FAULT_BASE + vector`.
pub const EXIT_FAULT_BASE: u64 = 0x1_0000;

/// `device_list(buf, cap)` entries.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceInfo {
    pub hwid: u64,
    /// A `DEVICE_*` kind.
    pub kind: u32,
    /// Core that has it allocated, or `u32::MAX`.
    pub owner_core: u32,
    pub name: [u8; 16],
}

pub const DEVICE_CONSOLE: u32 = 1;
/// The syscall pseudo-device (Corey section 4.4): a ring of system-call requests and
/// completions in a shared segment, run by the kernel core it is attached to
/// (`pcore_add_device`). Not listed by `device_list` (it is not hardware); made with
/// `device_alloc(.., HWID_SYSCALL_RING, ..)`. Its `DeviceStat::buffers` counts completed
/// requests.
pub const DEVICE_SYSCALL_RING: u32 = 2;
/// The hwid that makes `device_alloc` create a syscall ring (pseudo-devices use hwids from
/// 0xFFFF_0000 up, clear of real devices).
pub const HWID_SYSCALL_RING: u64 = 0xFFFF_0001;

/// Bytes of one ring slot and of the ring header (one cache line each).
pub const RING_SLOT_BYTES: u64 = 64;
/// Most slots in one syscall ring.
pub const MAX_RING_SLOTS: u64 = 4096;
/// Most shares a syscall ring's requests can name objects through (see `RingSlot`).
pub const MAX_RING_SHARES: usize = 32;

/// One request of a syscall ring, at byte `RING_SLOT_BYTES * (1 + i)` of the ring segment.
/// Protocol (slots are used in ring order, `i = seq % slots`): the program writes `nr` and
/// `args`, then stores `state = RING_SUBMITTED` (release); the kernel core takes the slot with
/// a compare-and-swap to `RING_TAKEN`, runs the call and stores `result` (encoded as by
/// `encode`) and then `state = RING_DONE`; the program reads `result` and stores `RING_FREE`.
/// The program may cancel a request the kernel has not taken with a compare-and-swap
/// `RING_SUBMITTED -> RING_FREE`: then it never runs. The kernel core takes slots strictly in
/// order, so a slot left `RING_FREE` holds up the ones after it. A slot whose state is none
/// of these at the kernel's turn completes with `InvalidArgument`.
///
/// A request runs on the kernel core with the address range of the context that made the
/// ring and the shared (not private) shares it could name then: those in its share set and
/// those its root share holds, at most `MAX_RING_SHARES` (more is `InvalidArgument` at
/// `device_alloc`); shares it drops later stay usable through the ring while they live.
/// Private shares, the root share included, are never reachable from a ring: they belong to one core and take no lock, and that core keeps
/// running while its requests run elsewhere. Calls that act on a core rather than on objects
/// (`pcore_alloc`, `pcore_current`, `pcore_run`, `pcore_set_interval`, `pcore_halt`,
/// `pcore_set_role`, `self_drop`, `self_shares`, a private `share_alloc`) are `NotPermitted`,
/// a nested `syscall_batch` is `InvalidArgument`. `MEMID_SELF` means the kernel core.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RingSlot {
    /// `RING_FREE`, `RING_SUBMITTED`, `RING_TAKEN` or `RING_DONE`.
    pub state: u32,
    /// The system-call number (all are below 2^32).
    pub nr: u32,
    pub args: [u64; 6],
    /// Valid once `state` is `RING_DONE`.
    pub result: i64,
}

pub const RING_FREE: u32 = 0;
pub const RING_SUBMITTED: u32 = 1;
pub const RING_TAKEN: u32 = 2;
pub const RING_DONE: u32 = 3;

/// The first `RING_SLOT_BYTES` of a ring segment, written by the kernel (a program's writes
/// there are overwritten).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RingHeader {
    /// `RING_DETACHED`, `RING_ATTACHED`, `RING_STOPPED` or `RING_BROKEN`.
    pub status: u32,
    /// The core the ring is attached to (valid unless `RING_DETACHED`).
    pub core: u32,
    /// 1 while that kernel core polls; 0 once it has gone to sleep: a program that submits
    /// and then (after a full fence) sees 0 must ring the doorbell, `device_conf` with
    /// `CONF_RING_KICK`.
    pub polling: u32,
    pub _pad: u32,
    pub _reserved: [u64; 6],
}

/// Not attached to any core (never attached, detached, or the device was freed): nothing
/// will take new requests.
pub const RING_DETACHED: u32 = 0;
/// Attached to a kernel core, which takes requests.
pub const RING_ATTACHED: u32 = 1;
/// Attached to a core that is not a kernel core now: nothing takes requests until it is one
/// again.
pub const RING_STOPPED: u32 = 2;
/// The kernel cannot use the ring any more (its segment shrank below it, or a ring page is
/// shared copy-on-write with another segment, which the kernel never writes): free it.
pub const RING_BROKEN: u32 = 3;

/// `device_conf` key for a syscall ring: the doorbell (wakes the kernel core; value ignored).
pub const CONF_RING_KICK: u64 = 2;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceStat {
    pub hwid: u64,
    pub kind: u32,
    pub _pad: u32,
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub buffers: u64,
    /// Frames received and transmitted (network devices; 0 for others).
    pub packets_in: u64,
    pub packets_out: u64,
    /// Frames dropped (no buffer, ring full, malformed) and errors (a device or ring error).
    pub drops: u64,
    pub errors: u64,
}

/// `device_conf(dev_share, dev, &DeviceConf)`: set `key` to `value`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceConf {
    pub key: u64,
    pub value: u64,
}

/// Console configuration key: 1 = translate `\n` to `\r\n` (default), 0 = raw.
pub const CONF_CONSOLE_CRLF: u64 = 1;

/// `device_buf` buffer types: transmit the segment's bytes `[offset, offset + len)`.
pub const BUF_TX: u64 = 1;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceBuf {
    pub seg: ObjName,
    pub offset: u64,
    pub len: u64,
    pub buf_type: u64,
}

/// `locality_get(buf, cap)`: fills `n * n` entries for `n` cores (row-major), returns `n`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalityEntry {
    /// 0 same core, 1 SMT sibling, 2 same package, 3 same NUMA node, 4 other node.
    pub level: u8,
    /// NUMA distance (10 = local).
    pub distance: u8,
}

/// `sys_info(&mut SysInfo)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SysInfo {
    pub cores: u64,
    pub numa_nodes: u64,
    pub tsc_per_ms: u64,
    pub free_pages: u64,
    pub total_pages: u64,
    /// Slab objects allocated in the kernel heap, all cores.
    pub kernel_objects: i64,
    /// Kernel objects (shares, segments, ranges, pcores, devices) alive.
    pub live_kobjects: u64,
    /// Pages the kernel heap's slabs hold, all cores. They vary with when each core drains
    /// frees other cores sent it, so an exact free-page check adds them back.
    pub slab_pages: i64,
}

/// `core_stats(core, &mut CoreStats)`: per-core counters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CoreStats {
    pub syscalls: u64,
    pub soft_faults: u64,
    pub cow_faults: u64,
    pub tlb_flushes_local: u64,
    pub shootdown_ipis_sent: u64,
    pub shootdown_ipis_received: u64,
    pub ipis_received: u64,
    pub interrupts: u64,
    pub timer_ticks: u64,
    /// System calls this core sent to a kernel core (as an AC).
    pub syscalls_forwarded: u64,
    /// System calls this core ran for other cores (as a KC).
    pub syscalls_served: u64,
    /// Active messages (mailbox jobs) this core ran.
    pub active_messages: u64,
    /// User contexts started on this core.
    pub contexts_started: u64,
    /// The core's role (`ROLE_*`).
    pub role: u64,
    /// TSC cycles this core spent spinning for kernel locks other cores held (ticket, MCS and
    /// reader-writer locks), and how many lock acquisitions had to wait.
    pub lock_spin_cycles: u64,
    pub lock_spin_waits: u64,
    /// Switches between user contexts on this core (a TC time-sharing several).
    pub context_switches: u64,
    /// With `sched=core0`: the owner this core is granted to (the root share id of the
    /// context that got it from `core_request`), 0 if none.
    pub granted_to: u64,
    /// Core-scheduler messages (grant and release requests) this core ran: non-zero on core
    /// 0 only.
    pub sched_messages: u64,
    /// Protected procedure calls on this core that ended with `CallAborted` (their handler
    /// took a fault).
    pub ppc_aborts: u64,
    /// Times this core halted (`hlt`) waiting for an interrupt: its idle loop, a kernel
    /// core with nothing to poll, `nr::WAIT`, `CONF_NET_WAIT`.
    pub halts: u64,
    /// TSC cycles this core spent halted (from each `hlt` to the interrupt that ended it,
    /// the halt in progress included).
    pub halted_cycles: u64,
}

/// One call of a `syscall_batch`: `result` receives the encoded result (`encode`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchEntry {
    pub nr: u64,
    pub args: [u64; 6],
    pub result: i64,
}

/// Most calls in one `syscall_batch`.
pub const MAX_BATCH: u64 = 256;

/// What the kernel puts at `rdi` for the first program (`init`): a pointer to this struct in
/// the program's memory, followed by the argument bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct StartInfo {
    /// Address and length of the command-line arguments (space-separated, UTF-8).
    pub args_ptr: u64,
    pub args_len: u64,
    pub tsc_per_ms: u64,
    pub cores: u64,
    /// The program's root address range id (in its root share).
    pub root_ar: ObjectId,
    /// Segments the kernel created for the program image and stack, in its root share.
    pub image_seg: ObjectId,
    pub stack_seg: ObjectId,
    /// The program's root share (also `rsi` at entry) and its pcore object.
    pub root_share: ObjectId,
    pub pcore: ObjectId,
}

/// Where the kernel maps the first program's stack: `[INIT_STACK_TOP - INIT_STACK_SIZE,
/// INIT_STACK_TOP)`. Its top page holds the `StartInfo` (at `INIT_START_INFO`) followed by
/// the argument bytes; the initial `rsp` is `INIT_START_INFO` (16-byte aligned).
pub const INIT_STACK_TOP: u64 = 0x0000_7FFF_FFF0_0000;
pub const INIT_STACK_SIZE: u64 = 1 << 20;
pub const INIT_START_INFO: u64 = INIT_STACK_TOP - PAGE_SIZE;
/// Where the kernel maps the first program's ELF image: at the addresses in its program
/// headers, which must lie in `[USER_BASE, INIT_IMAGE_LIMIT)`.
pub const INIT_IMAGE_LIMIT: u64 = 1 << 30;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_round_trip() {
        for e in Error::ALL {
            assert_eq!(decode(encode(Err(e))), Err(e));
            assert!(!e.as_str().is_empty());
        }
        assert_eq!(decode(encode(Ok(42))), Ok(42));
        assert_eq!(decode(0), Ok(0));
    }

    #[test]
    fn ar_spans_nest() {
        assert_eq!(ArKind::Span512G.span() * 256, ArKind::Root.span());
        assert_eq!(ArKind::Span1G.span() * 512, ArKind::Span512G.span());
        assert_eq!(ArKind::Span2M.span() * 512, ArKind::Span1G.span());
        for k in 0..4 {
            assert_eq!(ArKind::from_u64(k).unwrap() as u64, k);
        }
        assert!(ArKind::from_u64(4).is_none());
    }

    #[test]
    fn struct_layouts_are_stable() {
        assert_eq!(core::mem::size_of::<ObjName>(), 16);
        assert_eq!(core::mem::size_of::<SegMapping>(), 48);
        assert_eq!(core::mem::size_of::<ArMapping>(), 48);
        assert_eq!(core::mem::size_of::<PcoreContext>(), 5 * 8 + 8 + 8 * MAX_CONTEXT_SHARES + 8);
        assert_eq!(core::mem::size_of::<RingSlot>() as u64, RING_SLOT_BYTES);
        assert_eq!(core::mem::size_of::<RingHeader>() as u64, RING_SLOT_BYTES);
        assert_eq!(core::mem::size_of::<PpcGate>(), 4 * 8 + 16 + 8 + 8 * MAX_CONTEXT_SHARES);
    }
}
