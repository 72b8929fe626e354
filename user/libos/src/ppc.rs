//! Protected procedure calls (Tornado, seeds/001 section 6; docs/ppc.md).
//!
//! A server registers a handler for a core ([`register`], or [`serve_cores`] for one gate
//! per core); a client running on that core calls it ([`Gate::call`]) and gets its result.
//! The call runs the handler on the client's core, in the server's address range and with
//! the server's share set, and comes back: no other core is involved.
//!
//! ```ignore
//! // Server (e.g. a cfork child that owns the data), one gate per front-end core, in a share
//! // `p` the clients can reach:
//! fn filesum(file: u64, _: u64, _: u64, _: u64) -> Result<u64, Error> { /* sum file `file` */ }
//! let gates = libos::ppc::serve_cores(p, "filesum", &[1, 2], filesum)?;
//! // Client, on core 1: bind it in one of this context's slots (checked once), call by slot.
//! let g = libos::ppc::Gate::find(p, "filesum", 1)?.bind()?;
//! let sum = g.call(7, 0, 0, 0)?;
//! ```
//!
//! What a handler may do: it runs like a function of the server, on its own stack (64 KiB,
//! one per gate), on the *client's* core, while the server's own contexts may run elsewhere
//! at the same time. It may read and write the server's memory (with the care any code
//! sharing memory across cores takes), make system calls (its share set is the server's
//! process share; `pcore_current()` names the calling client), print, and call other gates.
//! It must not use the heap or anything that asks the context page who it is: the context
//! page it sees is the server's, whose core is not the one it runs on, so the per-core heap
//! would be used from two cores at once. A panic or a fault in a handler ends the call with
//! `CallAborted`; the gate stays usable.
//!
//! Lifetimes: a gate holds the server's root address range and process share; they live
//! while the gate does, even after the server's context has ended. [`Served`] deletes its gate
//! (and unmaps the handler stack) when dropped; [`Served::keep`] leaves the gate to whoever
//! deletes it from its share later ([`Gate::delete`]).

use crate::layout::{PPC_STACK_OFF, PPC_STACK_SIZE, PPC_STACK_SLOT, PPC_STACK_SLOTS};
use abi::{nr, Error, ObjName, ObjType, ObjectId, PpcGate, SegMapping, MAP_READ, MAP_WRITE, MAX_CONTEXT_SHARES, MAX_NAME};
use core::sync::atomic::{AtomicU64, Ordering};

/// A handler: four arguments in, a result out (`Ok` below 2^63, or an error the caller gets
/// as its own).
pub type Handler = fn(u64, u64, u64, u64) -> Result<u64, Error>;

/// The name of a gate, which clients call. Copy it freely: it is only a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gate {
    pub name: ObjName,
    /// The core it serves.
    pub core: u64,
}

impl Gate {
    /// Call the gate with four arguments; on its core only (`WrongCore` elsewhere). `Busy`
    /// if it is in a call already (from its own handler, or a context preempted in it);
    /// `CallAborted` if the handler faulted. Every register but rsp is clobbered, and the
    /// registers the handler could see are cleared first (nothing of the caller's leaks).
    #[inline(always)]
    pub fn call(&self, a0: u64, a1: u64, a2: u64, a3: u64) -> Result<u64, Error> {
        abi::decode(ppc_call_raw(self.name.share, self.name.object, a0, a1, a2, a3))
    }

    /// The same gate bound in one of this context's slots (`ppc_bind`): calls through the
    /// result index the slot instead of looking the gate up by name, and the gate was checked
    /// (a gate, for this core) once, here. `WrongCore` if the gate serves another core,
    /// `Busy` if all `PPC_BOUND_SLOTS` slots are taken. The slot keeps the gate until
    /// `unbind` or until the context ends; it is this context's (and, inside a handler, this
    /// handler's) alone: another context, or the other side of a call, cannot use it.
    pub fn bind(&self) -> Result<Gate, Error> {
        let slot = crate::sys::ppc_bind(self.name)?;
        Ok(Gate { name: ObjName::new(abi::PPC_BOUND, slot), core: self.core })
    }

    /// Whether this is a bound slot (`bind`) rather than a gate's name.
    pub fn is_bound(&self) -> bool {
        self.name.share == abi::PPC_BOUND
    }

    /// Empty the slot `bind` filled (`NoSuchObject` if this is not a bound slot, or it is
    /// empty).
    pub fn unbind(&self) -> Result<(), Error> {
        if !self.is_bound() {
            return Err(Error::NoSuchObject);
        }
        crate::sys::ppc_unbind(self.name.object).map(|_| ())
    }

    /// Delete the gate from the share that names it (a gate lives while a share holds it, a
    /// slot binds it or a call runs in it). Not for a bound slot (`unbind` that).
    pub fn delete(&self) -> Result<(), Error> {
        crate::sys::share_delobj(self.name).map(|_| ())
    }

    /// The gate named `NAME@CORE` (as [`serve_cores`] names them) in `share`.
    pub fn find(share: ObjectId, service: &str, core: u64) -> Result<Gate, Error> {
        let mut want = NameBuf::new();
        want.push_str(service)?;
        want.push_str("@")?;
        want.push_u64(core)?;
        Gate::find_named(share, want.as_str())
    }

    /// The gate named `name` in `share` (`NotFound` if there is none).
    pub fn find_named(share: ObjectId, name: &str) -> Result<Gate, Error> {
        let mut ids = [0u64; 256];
        let n = crate::sys::share_list(share, &mut ids)? as usize;
        let mut buf = [0u8; MAX_NAME];
        for &id in &ids[..n] {
            let o = ObjName::new(share, id);
            let Ok(st) = crate::sys::obj_stat(o) else { continue };
            if st.obj_type != ObjType::Gate as u32 {
                continue;
            }
            let Ok(len) = crate::sys::obj_get_name(o, &mut buf) else { continue };
            if &buf[..len as usize] == name.as_bytes() {
                return Ok(Gate { name: o, core: st.home_core as u64 });
            }
        }
        Err(Error::NotFound)
    }
}

/// `ppc_call` with the caller's registers cleared and every register but rsp clobbered (the
/// handler returns with its own registers in them), returning the raw `rax`. The only safe
/// way to make the call: a generic system-call stub (`sys::raw6`) tells the compiler the
/// argument registers survive, which they do not once a handler has run.
#[inline(always)]
pub fn ppc_call_raw(share: u64, gate: u64, a0: u64, a1: u64, a2: u64, a3: u64) -> i64 {
    let ret: i64;
    #[cfg(target_os = "none")]
    // SAFETY: `syscall` enters the kernel, which runs the gate's handler in its own address
    // range and comes back here with rsp as it was. Everything else may change: every other
    // general register is an output (rbx and rbp, which asm cannot name, are saved on our
    // stack around the call and restored). They are cleared before the call so the handler
    // sees none of our values. No memory of ours is touched by the call (another address
    // space runs), but it is not `nomem`: the handler may change memory shared with us.
    unsafe {
        core::arch::asm!(
            "push rbx",
            "push rbp",
            "xor ebx, ebx",
            "xor ebp, ebp",
            "xor r12d, r12d",
            "xor r13d, r13d",
            "xor r14d, r14d",
            "xor r15d, r15d",
            "syscall",
            "pop rbp",
            "pop rbx",
            inlateout("rax") nr::PPC_CALL as i64 => ret,
            inlateout("rdi") share => _,
            inlateout("rsi") gate => _,
            inlateout("rdx") a0 => _,
            inlateout("r10") a1 => _,
            inlateout("r8") a2 => _,
            inlateout("r9") a3 => _,
            lateout("rcx") _,
            lateout("r11") _,
            lateout("r12") _,
            lateout("r13") _,
            lateout("r14") _,
            lateout("r15") _,
        );
    }
    #[cfg(not(target_os = "none"))]
    {
        let _ = (share, gate, a0, a1, a2, a3);
        ret = abi::encode(Err(Error::Unsupported));
    }
    ret
}

/// `ppc_return(value)` made by hand (a system call wrapper, in `sys`).
pub use crate::sys::ppc_return_raw;

/// A gate this context registered. Dropping it deletes the gate, unmaps the handler's stack
/// (a call still running in it then faults and ends with `CallAborted`) and frees the slot.
#[derive(Debug)]
pub struct Served {
    pub gate: Gate,
    slot: u64,
    stack_seg: ObjName,
    root_ar: ObjName,
}

impl Served {
    /// Leave the gate (and its stack) to live on after this handle and after this context:
    /// until the gate is deleted from its share (`Gate::delete`), it keeps the server's
    /// address range and process share alive.
    pub fn keep(self) -> Gate {
        let g = self.gate;
        core::mem::forget(self);
        g
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = crate::sys::share_delobj(self.gate.name);
        let _ = crate::sys::ar_unmap(self.root_ar, stack_top(self.slot) - PPC_STACK_SIZE, PPC_STACK_SIZE);
        let _ = crate::sys::share_delobj(self.stack_seg);
        free_slot(self.slot);
    }
}

/// Handler stack slots in use (one bit each), in this program's memory.
static SLOTS: [AtomicU64; (PPC_STACK_SLOTS / 64) as usize] = [const { AtomicU64::new(0) }; (PPC_STACK_SLOTS / 64) as usize];

fn alloc_slot() -> Result<u64, Error> {
    for (w, word) in SLOTS.iter().enumerate() {
        let mut cur = word.load(Ordering::Relaxed);
        while cur != u64::MAX {
            let bit = (!cur).trailing_zeros() as u64;
            match word.compare_exchange(cur, cur | (1 << bit), Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Ok(w as u64 * 64 + bit),
                Err(now) => cur = now,
            }
        }
    }
    Err(Error::Busy)
}

fn free_slot(slot: u64) {
    SLOTS[(slot / 64) as usize].fetch_and(!(1 << (slot % 64)), Ordering::AcqRel);
}

fn stack_top(slot: u64) -> u64 {
    crate::ctx::arena() + PPC_STACK_OFF + (slot + 1) * PPC_STACK_SLOT
}

/// Whether the code running now is a handler (its stack is a handler stack slot).
pub fn on_handler_stack() -> bool {
    let sp: u64;
    #[cfg(target_os = "none")]
    // SAFETY: reads rsp.
    unsafe {
        core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    #[cfg(not(target_os = "none"))]
    {
        sp = 0;
    }
    let base = crate::ctx::arena() + PPC_STACK_OFF;
    sp > base && sp <= base + PPC_STACK_SLOTS * PPC_STACK_SLOT
}

/// Register `handler` as gate `name` for `core`, in `share` (which must not be this
/// program's process share or a share it holds: the gate holds the process share, and a
/// share holding the gate would keep it alive for ever, `InvalidArgument`). The handler runs
/// in this context's root address range with this program's process share as its share set,
/// on a fresh 64 KiB stack of `core`'s memory mapped here.
pub fn register(share: ObjectId, name: &str, core: u64, handler: Handler) -> Result<Served, Error> {
    register_with(share, name, core, handler, &[])
}

/// [`register`] with more shares in the handler's share set (at most
/// `MAX_CONTEXT_SHARES - 1`): e.g. a share holding gates the handler calls in turn. None of
/// them may hold `share` (`InvalidArgument`, as for the process share).
pub fn register_with(share: ObjectId, name: &str, core: u64, handler: Handler, more: &[ObjectId]) -> Result<Served, Error> {
    if more.len() > MAX_CONTEXT_SHARES - 1 {
        return Err(Error::InvalidArgument);
    }
    let c = crate::ctx::ctx();
    let proc_share = crate::process::proc_share();
    let slot = alloc_slot()?;
    let top = stack_top(slot);
    let seg = match crate::sys::segment_alloc(proc_share, "ppc-stack", core, PPC_STACK_SIZE) {
        Ok(s) => ObjName::new(proc_share, s),
        Err(e) => {
            free_slot(slot);
            return Err(e);
        }
    };
    let undo = |e: Error| {
        let _ = crate::sys::ar_unmap(c.root_ar, top - PPC_STACK_SIZE, PPC_STACK_SIZE);
        let _ = crate::sys::share_delobj(seg);
        free_slot(slot);
        e
    };
    let m = SegMapping { voff: top - PPC_STACK_SIZE, seg, soff: 0, len: PPC_STACK_SIZE, flags: MAP_READ | MAP_WRITE };
    crate::sys::ar_set_seg(c.root_ar, &m).map_err(undo)?;
    let mut shares = [0; MAX_CONTEXT_SHARES];
    shares[0] = proc_share;
    shares[1..1 + more.len()].copy_from_slice(more);
    let spec = PpcGate {
        entry: entry_address(),
        stack_top: top,
        cookie: handler as *const () as usize as u64,
        core,
        root_ar: c.root_ar,
        nshares: 1 + more.len() as u64,
        shares,
    };
    let id = crate::sys::ppc_register(share, name, &spec).map_err(undo)?;
    Ok(Served { gate: Gate { name: ObjName::new(share, id), core }, slot, stack_seg: seg, root_ar: c.root_ar })
}

/// Register `handler` for `core` in an address space the caller prepared: the root range
/// `root_ar`, which must map this program's image (the trampoline and `handler` are there)
/// and a stack below `stack_top` (16-byte aligned), with `shares` (the first is the
/// handler's root share; at most `MAX_CONTEXT_SHARES`). What [`register`] does for this
/// context's own address space, without making a stack; deleting the gate is the caller's
/// (`Gate::delete`).
pub fn register_in(share: ObjectId, name: &str, core: u64, handler: Handler, root_ar: ObjName, stack_top: u64, shares: &[ObjectId]) -> Result<Gate, Error> {
    if shares.len() > MAX_CONTEXT_SHARES {
        return Err(Error::InvalidArgument);
    }
    let mut set = [0; MAX_CONTEXT_SHARES];
    set[..shares.len()].copy_from_slice(shares);
    let spec = PpcGate { entry: entry_address(), stack_top, cookie: handler as *const () as usize as u64, core, root_ar, nshares: shares.len() as u64, shares: set };
    let id = crate::sys::ppc_register(share, name, &spec)?;
    Ok(Gate { name: ObjName::new(share, id), core })
}

/// One gate per core in `cores`, named `SERVICE@CORE` in `share` (clients find them with
/// [`Gate::find`]). All or nothing: on an error the gates made so far are deleted.
pub fn serve_cores(share: ObjectId, service: &str, cores: &[u64], handler: Handler) -> Result<alloc::vec::Vec<Served>, Error> {
    let mut v = alloc::vec::Vec::new();
    v.try_reserve(cores.len()).map_err(|_| Error::NoMemory)?;
    for &core in cores {
        let mut name = NameBuf::new();
        name.push_str(service)?;
        name.push_str("@")?;
        name.push_u64(core)?;
        v.push(register(share, name.as_str(), core, handler)?);
    }
    Ok(v)
}

/// A gate name built on the stack (at most `MAX_NAME` bytes: longer is `NameTooLong`).
struct NameBuf {
    buf: [u8; MAX_NAME],
    len: usize,
}

impl NameBuf {
    fn new() -> NameBuf {
        NameBuf { buf: [0; MAX_NAME], len: 0 }
    }
    fn push_str(&mut self, s: &str) -> Result<(), Error> {
        let end = self.len + s.len();
        if end > MAX_NAME {
            return Err(Error::NameTooLong);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
    fn push_u64(&mut self, mut v: u64) -> Result<(), Error> {
        let mut digits = [0u8; 20];
        let mut n = 0;
        loop {
            digits[n] = b'0' + (v % 10) as u8;
            n += 1;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        digits[..n].reverse();
        // Digits are ASCII.
        self.push_str(core::str::from_utf8(&digits[..n]).map_err(|_| Error::InvalidArgument)?)
    }
    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
    fn as_str(&self) -> &str {
        core::str::from_utf8(self.as_bytes()).unwrap_or("")
    }
}

/// What the trampoline calls: run the handler whose address the gate's cookie is, and
/// encode its result for `ppc_return`.
extern "C" fn handler_entry(a0: u64, a1: u64, a2: u64, a3: u64, cookie: usize) -> i64 {
    // SAFETY: the kernel puts the gate's cookie in rax unchanged, and every gate that enters
    // at this trampoline was registered by `register` in this program with a `Handler`'s
    // address as its cookie (a gate of another program runs in that program's address
    // space, with its own copy of this code).
    let handler: Handler = unsafe { core::mem::transmute::<usize, Handler>(cookie) };
    match handler(a0, a1, a2, a3) {
        Ok(v) if v > i64::MAX as u64 => abi::encode(Err(Error::OutOfRange)),
        r => abi::encode(r),
    }
}

// The handler's entry (see `abi::nr::PPC_CALL` for the registers): arguments from the syscall
// registers into the C ones, the cookie fifth; then `ppc_return(result)`. The kernel clears
// the argument registers on the way back (`abi::nr::PPC_RETURN`), and the callee-saved ones
// come back as the caller cleared them (handler_entry preserves them), so nothing of the
// server's reaches the client.
#[cfg(target_os = "none")]
core::arch::global_asm!(
    ".global __libos_ppc_entry",
    "__libos_ppc_entry:",
    "    mov rdi, rdx",
    "    mov rsi, r10",
    "    mov rdx, r8",
    "    mov rcx, r9",
    "    mov r8, rax",
    "    call {entry}",
    "    mov rdi, rax",
    "    mov eax, {ret}",
    "    syscall",
    "    ud2",
    entry = sym handler_entry,
    ret = const nr::PPC_RETURN,
);

#[cfg(target_os = "none")]
extern "C" {
    fn __libos_ppc_entry();
}

/// The handler entry every gate of this program uses (`PpcGate::entry`; its cookie is the
/// `Handler`'s address), for programs that fill a `PpcGate` themselves.
pub fn trampoline() -> u64 {
    entry_address()
}

fn entry_address() -> u64 {
    #[cfg(target_os = "none")]
    {
        __libos_ppc_entry as *const () as usize as u64
    }
    #[cfg(not(target_os = "none"))]
    {
        0
    }
}
