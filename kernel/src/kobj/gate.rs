//! Gates: Tornado's protected procedure calls (seeds/001 section 6; docs/ppc.md).
//!
//! A gate is registered by a server for one core. A client on that core calls it with
//! `ppc_call`: the kernel saves where the client returns to (rip, rsp, rflags) in the gate,
//! swaps the calling context's identity (root range, root share, share set) with the gate's,
//! loads the gate's root range and returns to user mode at the handler's entry on the
//! handler's stack. The handler's `ppc_return(value)` swaps everything back and returns to
//! the client with `value`. No allocation, no lock and nothing another core writes is on the
//! path: the gate lives on its core's node and only its core uses it.
//!
//! The call is part of the calling context: if a TC switches away in the middle, the
//! context's root range *is* the gate's while the call runs, so the switch saves and
//! restores it like any other (`sched::switch_root`), and page faults resolve in it. A
//! fault the handler does not survive ends the call (`context::abort_call`), not the
//! context; a context that ends during a call gives every gate back (`unwind`).
//!
//! Who may touch a gate's call state: `busy` is taken by `enter` and given back by
//! `leave`; between the two the call state belongs to the context that holds the gate in
//! `Context::ppc`, which runs only on the gate's core (a context never moves between
//! cores, and `enter` refuses other cores). Everything else about a gate is set at
//! registration and never changes, so any core may read it (the reference-cycle check reads
//! `members`).

use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

use super::kref::KRef;
use super::{ar::AddressRange, try_push, CoreBit, ObjRef};
use crate::arch::x86_64::paging;
use crate::arch::x86_64::syscall::UserReturn;
use crate::context::Context;
use abi::{Error, PPC_MAX_DEPTH};

/// The flags a handler starts with: interrupts on, nothing else.
const HANDLER_RFLAGS: u64 = 0x202;

pub struct Gate {
    /// The one core the gate serves.
    pub core: u32,
    /// `core`'s bit in the shootdown sets of the ranges a call loads.
    core_bit: CoreBit,
    pub entry: u64,
    pub stack_top: u64,
    pub cookie: u64,
    /// The shares the gate was registered with: what it keeps alive, for the cycle check
    /// (`syscall::reaches`). The first is the handler's root share, the others its share
    /// set: every share the handler can reach from is here, so the check sees all it could
    /// ever put a gate into.
    pub members: Vec<ObjRef>,
    /// The handler's root range (`CallState::root_ar` outside a call), for `enter` to load
    /// without the type check: the range lives as long as the gate, held by the call state
    /// outside a call and by the calling context during one (which gives it back before the
    /// gate can go: `leave`, `unwind`).
    root: *const AddressRange,
    /// Taken for the length of a call (one call at a time per gate).
    busy: AtomicBool,
    call: UnsafeCell<CallState>,
}

/// What a call swaps. Outside a call: the handler's identity. During one: the caller's, and
/// where it returns to.
struct CallState {
    root_ar: ObjRef,
    root_share: ObjRef,
    shares: Vec<ObjRef>,
    /// The caller's own call, if it was inside one (nested calls).
    outer: Option<ObjRef>,
    caller: UserReturn,
}

// SAFETY: `call` is reached only by the holder of `busy` (see the module comment), on the
// gate's core; everything else is immutable after `Gate::new` or atomic (`root` points at
// the range the gate keeps alive, read only).
unsafe impl Sync for Gate {}
// SAFETY: as above; the references inside are `KRef`s, which are Send.
unsafe impl Send for Gate {}

impl Gate {
    /// A gate for `core` running at `entry` on `stack_top` in `root_ar`; `shares[0]` is its
    /// handler's root share and the rest its share set (the caller checks there is one).
    pub fn new(core: u32, entry: u64, stack_top: u64, cookie: u64, root_ar: ObjRef, shares: Vec<ObjRef>) -> Result<Gate, Error> {
        let mut members = Vec::new();
        members.try_reserve(shares.len()).map_err(|_| Error::NoMemory)?;
        for s in &shares {
            try_push(&mut members, s.clone())?;
        }
        let mut set = shares;
        if set.is_empty() {
            return Err(Error::InvalidArgument);
        }
        let root_share = set.remove(0);
        let root = root_ar.as_ar()? as *const AddressRange;
        Ok(Gate {
            core,
            core_bit: CoreBit::of(core as usize),
            entry,
            stack_top,
            cookie,
            members,
            root,
            busy: AtomicBool::new(false),
            call: UnsafeCell::new(CallState { root_ar, root_share, shares: set, outer: None, caller: UserReturn::default() }),
        })
    }
}

/// Make sure core `me` is in `root`'s shootdown set before loading it. The bit is set once
/// and left set when the core switches away (a CR3 load flushes the range's entries, so a
/// left-over bit costs at most a needless flush): the call path only reads the set's line.
/// Only core `me` clears its bit (`context`, `sched`), never while this call runs.
#[inline(always)]
fn load(root: &AddressRange, me: CoreBit) {
    if !root.running.contains_bit(me) {
        root.running.insert_bit(me);
    }
    paging::load_root(root.table);
}

/// Swap the context's identity (what its system calls name objects through, and the
/// address range it runs on) with the call's.
#[inline(always)]
fn swap_identity(c: &mut Context, st: &mut CallState) {
    core::mem::swap(&mut c.root_ar, &mut st.root_ar);
    core::mem::swap(&mut c.root_share, &mut st.root_share);
    // Most callers and handlers have an empty share set (a program's first context; a
    // handler with only its root share): two tests instead of swapping six words.
    if !(c.shares.is_empty() && st.shares.is_empty()) {
        core::mem::swap(&mut c.shares, &mut st.shares);
    }
}

/// `ppc_call`: enter `gate_obj` from context `c` on core `me`. `ret` is where the caller
/// returns to user mode now; it becomes the handler's entry. Returns the handler's `rax`
/// (the gate's cookie).
#[inline(always)]
pub fn enter(c: &mut Context, gate_obj: ObjRef, me: usize, ret: &mut UserReturn) -> Result<u64, Error> {
    let g = gate_obj.as_gate()?;
    if g.core as usize != me {
        return Err(Error::WrongCore);
    }
    if !take(c, g) {
        return Err(Error::Busy);
    }
    let g: *const Gate = g;
    // SAFETY: `gate_obj` keeps the gate alive and is handed to `start` with it.
    Ok(start(c, unsafe { &*g }, gate_obj, ret))
}

/// `ppc_call(PPC_BOUND, slot, ..)`: enter the gate bound in `slot` of `c` (`bind`). The type
/// and the core were checked when it was bound (and a context never changes cores); what
/// is left is the slot's owner and the call's own conditions. The call takes its own
/// reference to the gate (from the slot's, never zero), so unbinding during the call is
/// harmless; it takes it only once the call is sure to start, so this drops nothing and
/// may run with interrupts off (`syscall_entry`). Returns the encoded result (the
/// handler's `rax`, the gate's cookie, or an error).
#[inline(always)]
pub fn enter_bound(c: &mut Context, slot: u64, ret: &mut UserReturn) -> i64 {
    let Some(Some(b)) = c.bound.get(slot as usize) else {
        return abi::encode(Err(Error::NoSuchObject));
    };
    // Only the identity that bound the slot may use it (a handler running in this context
    // may not call its client's gates).
    if !KRef::ptr_eq(&b.domain, &c.root_share) {
        return abi::encode(Err(Error::NoSuchObject));
    }
    // SAFETY: `b.gate` keeps the gate alive, and the clone below (handed to `start`) keeps
    // it alive for the call.
    let g = unsafe { &*b.gate_ptr };
    if !take(c, g) {
        return abi::encode(Err(Error::Busy));
    }
    let gate_obj = b.gate.clone();
    start(c, g, gate_obj, ret) as i64
}

/// Take gate `g` for a call of `c`: false if `c` is as deep in calls as it may be, or the
/// gate is in a call.
#[inline(always)]
fn take(c: &Context, g: &Gate) -> bool {
    c.ppc_depth < PPC_MAX_DEPTH as u32 && !g.busy.swap(true, Ordering::Acquire)
}

/// The call itself, once `c` holds gate `g` (`take`), whose reference `gate_obj` is, on the
/// gate's core (this one). Returns the gate's cookie, the handler's `rax`.
#[inline(always)]
fn start(c: &mut Context, g: &Gate, gate_obj: ObjRef, ret: &mut UserReturn) -> u64 {
    // SAFETY: we hold `busy`, on the gate's core (module comment).
    let st = unsafe { &mut *g.call.get() };
    // SAFETY: `root` is the range the gate holds (the call state has it now: the gate is
    // not in a call), alive while `gate_obj` is.
    load(unsafe { &*g.root }, g.core_bit);
    swap_identity(c, st);
    st.caller = *ret;
    *ret = UserReturn { rip: g.entry, rflags: HANDLER_RFLAGS, rsp: g.stack_top };
    let cookie = g.cookie;
    // `st.outer` is empty outside a call: nothing to drop (forgetting the `None` spares
    // the drop check).
    core::mem::forget(core::mem::replace(&mut st.outer, c.ppc.replace(gate_obj)));
    c.ppc_depth += 1;
    cookie
}

/// A gate in one of a context's bound-gate slots (`nr::PPC_BIND`).
pub struct Bound {
    /// The reference that keeps the gate alive while it is bound.
    gate: ObjRef,
    /// The gate inside `gate` (checked to be a gate for the context's core when bound).
    gate_ptr: *const Gate,
    /// The root share of the identity that bound it: only that identity may call or unbind
    /// the slot. Held, so that its address cannot be reused by another share while the slot
    /// names it.
    domain: ObjRef,
}

// SAFETY: `gate_ptr` points into the object `gate` holds and is only read through (the
// gate is Sync); the rest are `KRef`s.
unsafe impl Send for Bound {}
// SAFETY: as above.
unsafe impl Sync for Bound {}

/// A context's bound-gate slots.
pub type BoundSlots = [Option<Bound>; abi::PPC_BOUND_SLOTS as usize];

/// No gate bound.
pub const NO_BOUND: BoundSlots = [const { None }; abi::PPC_BOUND_SLOTS as usize];

/// `ppc_bind`: put `gate_obj` (whose gate is `gate_ptr`, checked by the caller to serve the
/// context's core) in a free slot of `c` for its present identity. Returns the slot, or
/// gives the reference back if every slot is taken.
pub fn bind(c: &mut Context, gate_obj: ObjRef, gate_ptr: *const Gate) -> Result<u64, ObjRef> {
    let Some(i) = c.bound.iter().position(|b| b.is_none()) else { return Err(gate_obj) };
    c.bound[i] = Some(Bound { gate_ptr, gate: gate_obj, domain: c.root_share.clone() });
    Ok(i as u64)
}

/// `ppc_unbind`: empty slot `slot` of `c` if its present identity bound it. Returns the
/// slot's contents, to be dropped where dropping may free.
pub fn unbind(c: &mut Context, slot: u64) -> Result<Bound, Error> {
    match c.bound.get(slot as usize) {
        Some(Some(b)) if KRef::ptr_eq(&b.domain, &c.root_share) => {}
        _ => return Err(Error::NoSuchObject),
    }
    c.bound[slot as usize].take().ok_or(Error::NoSuchObject)
}

/// End the innermost call of `c`: give the caller its identity back, free the gate for the
/// next call and set `ret` to where the caller resumes. Returns the gate's reference (drop
/// it only after the caller's root range is loaded: it may be the gate's last) and its core's
/// bit. Loads nothing.
#[inline(always)]
fn leave_state(c: &mut Context, ret: &mut UserReturn) -> Option<(ObjRef, CoreBit)> {
    let gate_obj = c.ppc.take()?;
    let Ok(g) = gate_obj.as_gate() else {
        // Cannot happen: only gates are put in `ppc`. Put it back rather than drop it here
        // (this path may run with interrupts off).
        c.ppc = Some(gate_obj);
        return None;
    };
    let bit = g.core_bit;
    // SAFETY: this context's call holds `busy` (it put the gate in `ppc`), and it runs on
    // the gate's core.
    let st = unsafe { &mut *g.call.get() };
    swap_identity(c, st);
    // `c.ppc` was just emptied: nothing to drop (as in `enter`).
    core::mem::forget(core::mem::replace(&mut c.ppc, st.outer.take()));
    c.ppc_depth -= 1;
    *ret = st.caller;
    g.busy.store(false, Ordering::Release);
    Some((gate_obj, bit))
}

/// `ppc_return` (and `abort`): end the innermost call, set `ret` to where the caller
/// resumes and load the caller's root range. `None` if `c` is not in a call. The call runs
/// on the gate's core (`enter`), which is this one.
#[inline(always)]
pub fn leave(c: &mut Context, ret: &mut UserReturn) -> Option<ObjRef> {
    let (g, me) = leave_state(c, ret)?;
    match c.root_ar.as_ar() {
        Ok(root) => load(root, me),
        // Cannot happen (a context's root range is a root range): never let the caller run
        // on the server's root; end the context instead.
        Err(_) => crate::context::request_exit(abi::EXIT_FAULT_BASE),
    }
    Some(g)
}

/// A context that ends in the middle of calls gives every gate back (innermost first), so
/// the gates are free for the next caller and their identities are theirs again. Loads
/// nothing (the context is not running, or its core is about to load another root). The
/// gates' references come back to be dropped where dropping may free.
pub fn unwind(c: &mut Context) -> [Option<ObjRef>; PPC_MAX_DEPTH as usize] {
    let mut gates: [Option<ObjRef>; PPC_MAX_DEPTH as usize] = Default::default();
    let mut i = 0;
    let mut ret = UserReturn::default();
    while let Some((g, _)) = leave_state(c, &mut ret) {
        if i < gates.len() {
            gates[i] = Some(g);
            i += 1;
        }
    }
    gates
}
