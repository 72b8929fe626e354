//! System-call dispatch: decode arguments, check naming (the access control), call the
//! object code, encode the result. See abi/src/lib.rs for every call's contract.

use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use crate::arch::x86_64::syscall::{copy_from_user, copy_to_user, read_user, write_user, SyscallFrame, UserReturn};
use crate::context::{self, with_current, with_current_mut, Context};
use crate::kobj::kref::KRef;
use crate::kobj::share::{Lease, Peek};
use crate::kobj::{ar, device, memid_core, pcore, segment, share, KObject, Kind, ObjRef};
use crate::percpu;
use abi::*;

/// The system call in frame `f`, on the paths `syscall_entry` does not take itself: a core
/// that is not an XC (an AC forwards, a TC may yield on return), orphans waiting for their
/// scan, a number past the table. The entry stub has counted the call; this returns the
/// encoded result, which the stub returns in `rax`. Nothing is kept across the handler call
/// (the per-CPU area is loaded again after it), and the uncommon paths (a forwarded call,
/// deferred last-drop scans) are out of line, so this path saves no registers and has no
/// stack frame beyond the frame pointer (inlined, those paths made every call save five
/// registers and a 0x208-byte frame).
///
/// `f` is a raw pointer, as for `ppc_call_entry`.
#[no_mangle]
extern "C" fn syscall_dispatch(f: *mut SyscallFrame) -> i64 {
    let me = percpu::this();
    if me.role.load(Ordering::Acquire) == ROLE_AC {
        return forward_call(f);
    }
    // Objects this core's earlier calls freed wait for their borrow-slot scan
    // (`kref::call_begins`): a load and a branch when there are none.
    if crate::kobj::kref::orphans_waiting(me) {
        return dispatch_after_scan(f);
    }
    dispatch_call(me, f)
}

/// An application core runs no kernel services itself: a kernel core does (out of line: the
/// argument copy would give `syscall_dispatch` a stack frame).
#[cold]
#[inline(never)]
fn forward_call(f: *mut SyscallFrame) -> i64 {
    // SAFETY: as in `dispatch_call`.
    let (nr, args) = unsafe { ((*f).rax, (*f).args) };
    encode(crate::roles::forward(nr, args))
}

/// `dispatch_call` after scanning the orphans earlier calls left (out of line: the frame
/// pointer `f` lives across the scan, so this path saves a register).
#[cold]
#[inline(never)]
fn dispatch_after_scan(f: *mut SyscallFrame) -> i64 {
    let me = percpu::this();
    crate::kobj::kref::scan_deferred(me);
    dispatch_call(me, f)
}

#[inline(always)]
fn dispatch_call(me: &percpu::PerCpu, f: *mut SyscallFrame) -> i64 {
    // SAFETY: syscall_entry passes the frame it pushed on this core's entry stack; it lives
    // until syscall_entry pops it after this returns. Only these two fields are read here.
    let (nr, args) = unsafe { ((*f).rax, &(*f).args) };
    me.injectable.store(nr as u8, Ordering::Relaxed);
    crate::kobj::kref::call_begins(me);
    let r = dispatch_in(nr, args);
    let me = percpu::this();
    crate::kobj::kref::call_ends(me);
    me.injectable.store(crate::percpu::NOT_IN_CALL, Ordering::Relaxed);
    // `pcore_yield`: switch as this call returns to user mode (sched::yield_on_return).
    crate::sched::yield_on_return(me, encode(r))
}

/// The core whose context this call acts for: this core, or the application core a kernel
/// core is serving.
fn caller() -> usize {
    percpu::acting().index
}

/// Copy a name argument in.
fn read_name(ptr: u64, len: u64) -> Result<([u8; MAX_NAME], usize), Error> {
    if len > MAX_NAME as u64 && !cfg!(feature = "planted-bug") {
        return Err(Error::NameTooLong);
    }
    let mut buf = [0u8; MAX_NAME];
    copy_from_user(&mut buf[..len as usize], ptr)?;
    Ok((buf, len as usize))
}

/// Run `f` on the share object `share_id`, if reachable from this core's share set: the root
/// share, a share in the set, or a share held by one of those. No allocation and, for the
/// direct cases and a share held by the (private) root share, no reference-count traffic:
/// this is on nearly every call's path.
fn with_share<R>(share_id: u64, f: impl FnOnce(&Lease) -> Result<R, Error>) -> Result<R, Error> {
    with_current(|c| with_share_in(c, share_id, f))?
}

/// `with_share` inside `with_current` (calls that name several objects look them all up in
/// one visit to the context).
#[inline]
fn with_share_in<R>(c: &Context, share_id: u64, f: impl FnOnce(&Lease) -> Result<R, Error>) -> Result<R, Error> {
    let s = resolve_share(c, share_id)?;
    f(&s)
}

/// The share `share_id` if it is reachable from context `c`: the root share, a share in the
/// set, or a share held by one of those. No allocation and, for the direct cases and a share
/// held by the (private) root share, no reference-count traffic. The common cases are inline
/// (this is on nearly every call's path); the rest is `resolve_slow`.
#[inline(always)]
fn resolve_share(c: &Context, share_id: u64) -> Result<Lease<'_>, Error> {
    if c.root_share.id == share_id {
        return Ok(Lease::alias(&c.root_share));
    }
    // Most contexts have no share set: an empty one costs one test.
    if !c.shares.is_empty() {
        if let Some(s) = c.shares.iter().find(|s| s.id == share_id) {
            return Ok(Lease::alias(s));
        }
    }
    // One level of nesting, first through the root share (the common case: shares are made
    // in the root share).
    if let Ok(root) = c.root_share.as_share() {
        if root.is_private() {
            if let Ok(Some(b)) = root.lend(share_id) {
                if b.as_share().is_ok() {
                    return Ok(b);
                }
            }
        }
    }
    resolve_slow(c, share_id).map(Lease::peeked)
}

/// The rest of `resolve_share`: a share held by a shared root share, then by a share in the
/// set, borrowed (`Share::peek`: the share's count is not written). (A kernel core serving a
/// syscall ring has a root "share" that is no share: it names nothing, so only the share set
/// counts.)
#[inline(never)]
fn resolve_slow(c: &Context, share_id: u64) -> Result<Peek, Error> {
    let held = |holder: &ObjRef| holder.as_share().ok()?.peek(share_id).ok().filter(|o| o.as_share().is_ok());
    if c.root_share.as_share().is_ok_and(|r| !r.is_private()) {
        if let Some(o) = held(&c.root_share) {
            return Ok(o);
        }
    }
    c.shares.iter().find_map(held).ok_or(Error::ShareNotReachable)
}

/// The share `share_id`, borrowed for the length of the call (`Peek`): reaching a share writes
/// no line of it (its count stays untouched), so two calls that reach one share on two cores
/// do not conflict on it.
fn reach_share(share_id: u64) -> Result<Peek, Error> {
    with_current(|c| resolve_share(c, share_id).map(Lease::into_peek))?
}

/// `reach_share` as a counted reference, for a call that keeps the share (a gate's or a new
/// context's share set).
fn reach_share_counted(share_id: u64) -> Result<ObjRef, Error> {
    with_share(share_id, |s| s.counted())
}

/// `<share, object>` → object, with the reachability check, as a counted reference: for
/// calls that keep the object (a mapping, an insert) or need its `ObjRef`.
fn lookup(share_id: u64, obj_id: u64) -> Result<ObjRef, Error> {
    with_share(share_id, |s| s.as_share()?.get(obj_id))
}

/// `lookup` for a call that only uses the object while it runs: borrowed, so the object's
/// count line is only read (two `obj_stat`s of one object on two cores share no written line).
fn peek(share_id: u64, obj_id: u64) -> Result<Peek, Error> {
    with_share(share_id, |s| s.as_share()?.peek(obj_id))
}

fn insert_new(share_obj: &KObject, name: &[u8], home: u32, kind: Kind) -> Result<u64, Error> {
    let s = share_obj.as_share()?;
    // Made in a shared share: the application shares it (a segment's count is then kept
    // per core, `KObject::create_shared`); in a private one it stays one word.
    let obj = if s.is_private() { KObject::create(name, home, kind)? } else { KObject::create_shared(name, home, kind)? };
    let id = obj.id;
    s.insert(obj)?;
    Ok(id)
}

/// True if `target` is `from`, or `from` holds it (transitively): a share holds its entries,
/// a gate its shares (`gate::Gate::members`). Adding `from` to `target` would then make a
/// reference cycle that could never be freed. Past `depth` levels, or through a share this
/// core may not read, it answers true (cannot prove acyclic: refuse).
fn reaches(from: &KObject, target: &KObject, depth: u32) -> bool {
    if core::ptr::eq(from, target) {
        return true;
    }
    let holds_refs = |o: &KObject| o.as_share().is_ok() || o.as_gate().is_ok();
    match &from.kind {
        Kind::Share(sh) => {
            if depth == 0 {
                return true;
            }
            let Ok(ids) = sh.ids() else { return true };
            ids.iter().any(|&id| sh.get(id).ok().is_some_and(|o| holds_refs(&o) && reaches(&o, target, depth - 1)))
        }
        // A gate is one step with its shares: the depth counts shares (the graph has no
        // cycles, every insertion is checked, so this ends).
        Kind::Gate(g) => g.members.iter().any(|m| reaches(m, target, depth)),
        _ => false,
    }
}

/// An output buffer of `cap` elements of `T` at `buf` must lie in the user half as a whole,
/// even if fewer elements will be written.
fn check_out_buf<T>(buf: u64, cap: u64) -> Result<(), Error> {
    let bytes = cap.checked_mul(core::mem::size_of::<T>() as u64).ok_or(Error::BadAddress)?;
    let end = buf.checked_add(bytes).ok_or(Error::BadAddress)?;
    if buf < USER_BASE || end > USER_END {
        return Err(Error::BadAddress);
    }
    Ok(())
}

fn write_slice<T: Copy>(buf: u64, items: &[T]) -> Result<(), Error> {
    // SAFETY: viewing a slice of Copy repr(C) ABI values as bytes.
    let bytes = unsafe { core::slice::from_raw_parts(items.as_ptr() as *const u8, core::mem::size_of_val(items)) };
    copy_to_user(buf, bytes)
}

/// Run system call `nr` with arguments `a` on this core (for the context it acts in).
#[inline]
pub(crate) fn dispatch(nr: u64, a: [u64; 6]) -> Result<u64, Error> {
    dispatch_in(nr, &a)
}

/// A system call's handler: `(call number, arguments)`.
type Handler = fn(u64, &[u64; 6]) -> Result<u64, Error>;

/// One past the highest call number: the size of the tables that `syscall_entry` indexes
/// (declared beside the entry, which bounds the number before it jumps).
use crate::arch::x86_64::syscall::CALLS;

fn sys_no_such_call(_nr: u64, _a: &[u64; 6]) -> Result<u64, Error> {
    Err(Error::NoSuchCall)
}

/// The call table, twice from one list: an indexed jump to each call's own function, so a
/// call pays for its own stack frame only (one `match` over every call made one large frame
/// for all of them).
///
/// `HANDLERS` (Rust functions) serves `dispatch` (forwarded calls, batches) and the generic
/// `syscall_dispatch`. `FAST_HANDLERS` holds, per call, an `extern "C"` function of the
/// argument array that runs the handler and encodes its result: `syscall_entry` calls it
/// directly on the common path (an XC core with no orphans waiting), with no Rust dispatch
/// function in between.
macro_rules! call_tables {
    ($($nr:ident => $h:ident,)*) => {
        static HANDLERS: [Handler; CALLS] = {
            let mut t: [Handler; CALLS] = [sys_no_such_call; CALLS];
            $(t[nr::$nr as usize] = $h;)*
            t
        };
        /// Read by `syscall_entry` (arch/x86_64/syscall.rs) as `FAST_HANDLERS(,%rax,8)`.
        #[no_mangle]
        static FAST_HANDLERS: [FastHandler; CALLS] = {
            let mut t: [FastHandler; CALLS] = [fast_no_such_call; CALLS];
            $({
                extern "C" fn fast(a: &[u64; 6]) -> i64 {
                    encode($h(nr::$nr, a))
                }
                t[nr::$nr as usize] = fast;
            })*
            t
        };
    };
}

/// A `FAST_HANDLERS` entry: the call's arguments (in the entry frame) to its encoded result.
type FastHandler = extern "C" fn(&[u64; 6]) -> i64;

extern "C" fn fast_no_such_call(_a: &[u64; 6]) -> i64 {
    encode(Err(Error::NoSuchCall))
}

call_tables! {
    NULL => sys_null,
    SYSCALL_BATCH => sys_syscall_batch,
    OBJ_GET_NAME => sys_obj_get_name,
    OBJ_STAT => sys_obj_stat,
    SHARE_ALLOC => sys_share_alloc,
    SHARE_ADDOBJ => sys_share_addobj,
    SHARE_DELOBJ => sys_share_delobj,
    SELF_DROP => sys_self_drop,
    SELF_SHARES => sys_self_shares,
    SHARE_LIST => sys_share_list,
    SEGMENT_ALLOC => sys_segment_alloc,
    SEGMENT_COPY => sys_segment_copy,
    SEGMENT_GET_NBYTES => sys_segment_get_nbytes,
    SEGMENT_SET_NBYTES => sys_segment_set_nbytes,
    AR_ALLOC => sys_ar_alloc,
    AR_SET_SEG => sys_ar_set_seg,
    AR_SET_AR => sys_ar_set_ar,
    AR_GET => sys_ar_get,
    AR_UNMAP => sys_ar_unmap,
    PCORE_ALLOC => sys_pcore_alloc,
    PCORE_CURRENT => sys_pcore_current,
    PCORE_RUN => sys_pcore_run,
    PCORE_YIELD => sys_pcore_yield,
    PCORE_SET_INTERVAL => sys_pcore_set_interval,
    PCORE_HALT => sys_pcore_halt,
    PCORE_SET_ROLE => sys_pcore_set_role,
    PCORE_ADD_DEVICE => sys_pcore_add_device_or_pcore_del_device,
    PCORE_DEL_DEVICE => sys_pcore_add_device_or_pcore_del_device,
    PCORE_STAT => sys_pcore_stat,
    DEVICE_ALLOC => sys_device_alloc,
    DEVICE_LIST => sys_device_list,
    DEVICE_STAT => sys_device_stat,
    DEVICE_CONF => sys_device_conf,
    DEVICE_BUF => sys_device_buf,
    LOCALITY_GET => sys_locality_get,
    CONSOLE_WRITE => sys_console_write,
    CONSOLE_READ => sys_console_read,
    TIME_NOW => sys_time_now,
    SYS_INFO => sys_sys_info,
    CORE_STATS => sys_core_stats,
    INITRD_GET => sys_initrd_get,
    CORE_REQUEST => sys_core_request,
    CORE_RELEASE => sys_core_release,
    PPC_REGISTER => sys_ppc_register,
    PPC_CALL => sys_ppc_not_direct,
    PPC_RETURN => sys_ppc_not_direct,
    PPC_BIND => sys_ppc_bind,
    PPC_UNBIND => sys_ppc_unbind,
    INJECT_CTL => sys_inject_ctl,
    WAIT => sys_wait,
    WAKE => sys_wake,
    LINUX_PERSONALITY => sys_linux_personality,
}

/// `dispatch` with the arguments read where they are (the entry frame), not copied.
#[inline]
fn dispatch_in(nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    match HANDLERS.get(nr as usize) {
        Some(h) => h(nr, a),
        None => Err(Error::NoSuchCall),
    }
}

/// `linux_personality`: only from this core's own context (the MSRs it sets are this
/// core's), outside protected procedure calls (`personality`).
fn sys_linux_personality(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let area = percpu::this();
    if area.is_acting() {
        return Err(Error::NotPermitted);
    }
    let ctx = context::current_mut_of(area).ok_or(Error::NotPermitted)?;
    if ctx.ppc.is_some() {
        return Err(Error::NotPermitted);
    }
    if a[0] == abi::LINUX_TAKE_EVENT {
        return crate::personality::take_event(&ctx.linux, &mut ctx.linux_event, a[1]);
    }
    crate::personality::apply(&mut ctx.linux, a)?;
    // Interrupts off: a tick switching contexts in between would install the other one.
    let token = crate::arch::x86_64::cpu::irq_save();
    crate::personality::install(area, ctx.linux);
    crate::arch::x86_64::cpu::irq_restore(token);
    Ok(0)
}

fn sys_null(_nr: u64, _a: &[u64; 6]) -> Result<u64, Error> {
    Ok(0)
}

fn sys_syscall_batch(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let (ptr, n) = (a[0], a[1]);
    if n > MAX_BATCH {
        return Err(Error::InvalidArgument);
    }
    check_out_buf::<BatchEntry>(ptr, n)?;
    // Entries move in chunks: one user copy each way per chunk, not per call.
    const CHUNK: usize = 16;
    let size = core::mem::size_of::<BatchEntry>();
    let mut chunk = [BatchEntry::default(); CHUNK];
    let mut done = 0u64;
    while done < n {
        let k = ((n - done) as usize).min(CHUNK);
        let at = ptr + done * size as u64;
        // SAFETY: viewing the first k plain-data entries as bytes to fill them.
        let bytes = unsafe { core::slice::from_raw_parts_mut(chunk.as_mut_ptr() as *mut u8, k * size) };
        copy_from_user(bytes, at)?;
        for e in &mut chunk[..k] {
            // An injected failure counts against the entry's call, not the batch.
            let me = percpu::this();
            let outer = me.injectable.swap(e.nr as u8, Ordering::Relaxed);
            let r = if e.nr == nr::SYSCALL_BATCH { Err(Error::InvalidArgument) } else { dispatch(e.nr, e.args) };
            percpu::this().injectable.store(outer, Ordering::Relaxed);
            e.result = encode(r);
        }
        write_slice(at, &chunk[..k])?;
        done += k as u64;
    }
    Ok(n)
}

fn sys_inject_ctl(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    use crate::mm::inject;
    let (op, buf, cap) = (a[0], a[1], a[2]);
    if !inject::configured() {
        return Err(Error::Unsupported);
    }
    match op {
        INJECT_ARM => inject::arm().map(|()| 0),
        INJECT_COUNTS => {
            if buf != 0 {
                let n = cap.min(INJECT_CALLS);
                check_out_buf::<u64>(buf, n)?;
                let mut counts = [0u64; INJECT_CALLS as usize];
                for (i, c) in counts.iter_mut().enumerate() {
                    *c = inject::failures_in_call(i);
                }
                write_slice(buf, &counts[..n as usize])?;
            }
            Ok(inject::failures())
        }
        _ => Err(Error::InvalidArgument),
    }
}

fn sys_obj_get_name(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    check_out_buf::<u8>(a[2], a[3])?;
    let o = peek(a[0], a[1])?;
    let name = o.name();
    if (a[3] as usize) < name.len() {
        return Err(Error::BufferTooSmall);
    }
    copy_to_user(a[2], name)?;
    Ok(name.len() as u64)
}

fn sys_obj_stat(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    // Read in place (`Share::with_entry`: no borrow in a private share), copied out after.
    let st = with_share(a[0], |s| {
        s.as_share()?.with_entry(a[1], |o, refs| ObjStat { id: o.id, obj_type: o.obj_type() as u32, home_core: o.home_core, refs: refs as u64 })
    })?;
    write_user(a[2], &st)?;
    Ok(0)
}

fn sys_share_alloc(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let parent = reach_share(a[0])?;
    let (name, n) = read_name(a[1], a[2])?;
    let home = memid_core(a[3])?;
    if a[4] & !SHARE_PRIVATE != 0 {
        return Err(Error::InvalidArgument);
    }
    let sh = if a[4] & SHARE_PRIVATE != 0 { share::Share::new_private(caller(), home) } else { share::Share::new_shared(home)? };
    insert_new(&parent, &name[..n], home, Kind::Share(sh))
}

fn sys_share_addobj(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    with_current(|c| {
        // Borrowed first: a refused add (a cycle, a name already there) writes no line of
        // the object; only an add that keeps it takes a counted reference.
        let o = with_share_in(c, a[1], |s| s.as_share()?.peek(a[2]))?;
        with_share_in(c, a[0], |dst| {
            if reaches(&o, dst, 8) {
                return Err(Error::InvalidArgument);
            }
            let d = dst.as_share()?;
            if d.contains(o.id) {
                return Err(Error::AlreadyExists);
            }
            d.insert(o.counted()?)
        })?;
        Ok(0)
    })?
}

fn sys_share_delobj(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    // The entry is dropped after the share lookup ends (its last reference may free
    // the object, which takes other locks).
    let removed = with_share(a[0], |s| s.as_share()?.remove(a[1]))?;
    drop(removed);
    Ok(0)
}

fn sys_self_drop(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let removed = with_current_mut(|c: &mut Context| {
        if c.root_share.id == a[0] {
            return Err(Error::NotPermitted);
        }
        match c.shares.iter().position(|s| s.id == a[0]) {
            Some(i) => Ok(c.shares.remove(i)),
            None => Err(Error::ShareNotReachable),
        }
    })??;
    drop(removed);
    Ok(0)
}

fn sys_self_shares(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    check_out_buf::<u64>(a[0], a[1])?;
    // The ids go through a stack buffer, not a heap vector: a small heap block of this core
    // can share a cache line with data another core reads (heap false sharing), and
    // this call reads only the caller's own context. Contexts hold at most
    // MAX_CONTEXT_SHARES shares (plus the root share); a longer set is copied in chunks.
    const CHUNK: usize = MAX_CONTEXT_SHARES + 1;
    let n = with_current(|c| c.shares.len() + 1)?;
    if (a[1] as usize) < n {
        return Err(Error::BufferTooSmall);
    }
    let mut done = 0usize;
    while done < n {
        let mut buf = [0u64; CHUNK];
        let k = with_current(|c| {
            let ids = core::iter::once(c.root_share.id).chain(c.shares.iter().map(|s| s.id));
            let mut k = 0;
            for (slot, id) in buf.iter_mut().zip(ids.skip(done)) {
                *slot = id;
                k += 1;
            }
            k
        })?;
        if k == 0 {
            break; // the set shrank meanwhile (it cannot: only this context changes it)
        }
        write_slice(a[0] + (done * core::mem::size_of::<u64>()) as u64, &buf[..k])?;
        done += k;
    }
    Ok(done as u64)
}

fn sys_share_list(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    check_out_buf::<u64>(a[1], a[2])?;
    let ids = reach_share(a[0])?.as_share()?.ids()?;
    if (a[2] as usize) < ids.len() {
        return Err(Error::BufferTooSmall);
    }
    write_slice(a[1], &ids)?;
    Ok(ids.len() as u64)
}

/// The planted regression of `planted-conflict` (docs/commute.md): one counter all cores write.
#[cfg(feature = "planted-conflict")]
static PLANTED_SEGMENT_ALLOCS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

fn sys_segment_alloc(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    #[cfg(feature = "planted-conflict")]
    PLANTED_SEGMENT_ALLOCS.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    let s = reach_share(a[0])?;
    let (name, n) = read_name(a[1], a[2])?;
    let home = memid_core(a[3])?;
    let seg = segment::Segment::new(a[4], home)?;
    insert_new(&s, &name[..n], home, Kind::Segment(seg))
}

fn sys_segment_copy(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let dst = reach_share(a[0])?;
    let src = peek(a[1], a[2])?;
    let (name, n) = read_name(a[3], a[4])?;
    let cow = match a[5] {
        COPY_EAGER => false,
        COPY_ON_WRITE => true,
        _ => return Err(Error::InvalidArgument),
    };
    let me = caller() as u32;
    let (copy, maps) = src.as_segment()?.duplicate(cow, me)?;
    let id = insert_new(&dst, &name[..n], me, Kind::Segment(copy))?;
    // Existing writable mappings of the source must fault before writing from now on.
    // (Each range is borrowed, `Segment::duplicate`; the borrows end here, outside its lock.)
    for (ar_obj, voff, len) in maps {
        ar::write_protect(&ar_obj, voff, len);
    }
    Ok(id)
}

fn sys_segment_get_nbytes(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    Ok(peek(a[0], a[1])?.as_segment()?.nbytes())
}

fn sys_segment_set_nbytes(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    peek(a[0], a[1])?.as_segment()?.set_nbytes(a[2])?;
    Ok(0)
}

fn sys_ar_alloc(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let s = reach_share(a[0])?;
    let (name, n) = read_name(a[1], a[2])?;
    let home = memid_core(a[3])?;
    let kind = ArKind::from_u64(a[4]).ok_or(Error::InvalidArgument)?;
    let r = ar::AddressRange::new(kind, home)?;
    insert_new(&s, &name[..n], home, Kind::Ar(r))
}

fn sys_ar_set_seg(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let m: SegMapping = read_user(a[2])?;
    let ar_obj = peek(a[0], a[1])?;
    let seg = peek(m.seg.share, m.seg.object)?;
    ar::set_seg_peeked(&ar_obj, m.voff, &seg, m.soff, m.len, m.flags)?;
    Ok(0)
}

fn sys_ar_set_ar(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let ar_obj = lookup(a[0], a[1])?;
    let child = lookup(a[3], a[4])?;
    ar::set_ar(&ar_obj, a[2], &child)?;
    Ok(0)
}

fn sys_ar_get(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    check_out_buf::<ArMapping>(a[2], a[3])?;
    let ar_obj = peek(a[0], a[1])?;
    let v = ar::mappings(&ar_obj)?;
    if (a[3] as usize) < v.len() {
        return Err(Error::BufferTooSmall);
    }
    write_slice(a[2], &v)?;
    Ok(v.len() as u64)
}

fn sys_ar_unmap(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let ar_obj = peek(a[0], a[1])?;
    ar::unmap(&ar_obj, a[2], a[3])?;
    Ok(0)
}

fn sys_pcore_alloc(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let s = reach_share(a[0])?;
    let (name, n) = read_name(a[1], a[2])?;
    if a[3] as usize >= percpu::online_count() {
        return Err(Error::NoSuchCore);
    }
    insert_new(&s, &name[..n], a[3] as u32, Kind::Pcore(pcore::Pcore::new(a[3] as u32, caller() as u32)))
}

fn sys_pcore_current(_nr: u64, _a: &[u64; 6]) -> Result<u64, Error> {
    with_current(|c| c.pcore.id)
}

fn sys_pcore_run(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    pcore_run(a[0], a[1], a[2])
}

fn sys_pcore_yield(_nr: u64, _a: &[u64; 6]) -> Result<u64, Error> {
    crate::sched::request_yield()
}

fn sys_core_request(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    crate::coresched::request(a[0], a[1], a[2], a[3])
}

fn sys_core_release(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    crate::coresched::release(a[0])
}

fn sys_pcore_set_interval(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let p = lookup(a[0], a[1])?;
    let pc = p.as_pcore()?;
    if a[2] > 10_000 {
        return Err(Error::InvalidArgument);
    }
    pc.interval_hz.store(a[2], Ordering::Relaxed);
    // The running context on this very pcore gets the new rate at once; others at
    // their next start.
    let local = !percpu::this().is_acting();
    if local && with_current(|c| KRef::ptr_eq(&c.pcore, &p)).unwrap_or(false) {
        crate::arch::x86_64::apic::set_timer_hz(crate::sched::timer_hz_for(percpu::this().role.load(Ordering::Acquire), a[2]));
    }
    Ok(0)
}

fn sys_pcore_halt(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let p = lookup(a[0], a[1])?;
    let pc = p.as_pcore()?;
    let core = pc.core as usize;
    if with_current(|c| KRef::ptr_eq(&c.pcore, &p)).unwrap_or(false) {
        context::request_exit(a[2]);
    } else if pc.allocator_core != caller() as u32 {
        return Err(Error::NotPermitted);
    } else {
        context::halt_remote(core, p.key(), a[2]);
    }
    Ok(0)
}

fn sys_pcore_set_role(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let p = lookup(a[0], a[1])?;
    let pc = p.as_pcore()?;
    if pc.allocator_core != caller() as u32 {
        return Err(Error::NotPermitted);
    }
    crate::roles::set_role(pc.core as usize, a[2])?;
    Ok(0)
}

fn sys_pcore_add_device_or_pcore_del_device(nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let p = lookup(a[0], a[1])?;
    let pc = p.as_pcore()?;
    let dev_obj = lookup(a[2], a[3])?;
    let dev = dev_obj.as_device()?;
    // Giving a core work is running something on it: only the pcore's allocator may.
    if pc.allocator_core != caller() as u32 {
        return Err(Error::NotPermitted);
    }
    if let Some(d) = &dev.drv {
        return if nr == nr::PCORE_ADD_DEVICE {
            crate::dev::attach(pc.core as usize, d).map(|()| 0)
        } else {
            crate::dev::detach(d, Some(pc.core as usize)).map(|()| 0)
        };
    }
    let ring = dev.ring.as_ref().ok_or(Error::Unsupported)?;
    if nr == nr::PCORE_ADD_DEVICE {
        crate::kobj::device::attach_ring(pc.core as usize, ring)?;
    } else {
        crate::kobj::device::detach_ring(ring, Some(pc.core as usize))?;
    }
    Ok(0)
}

fn sys_pcore_stat(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let st = peek(a[0], a[1])?.as_pcore()?.stat();
    write_user(a[2], &st)?;
    Ok(0)
}

fn sys_device_alloc(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let s = reach_share(a[0])?;
    let home = memid_core(a[2])?;
    if a[1] == HWID_SYSCALL_RING {
        let seg = lookup(a[3], a[4])?;
        seg.as_segment()?;
        let (root_ar, shares) = ring_identity()?;
        let d = device::Device::open_ring(seg, a[5], &root_ar, &shares, caller() as u32)?;
        return insert_new(&s, b"syscall-ring", home, Kind::Device(d));
    }
    if let Some(kind) = crate::dev::kind_of(a[1]) {
        let seg = lookup(a[3], a[4])?;
        seg.as_segment()?;
        let kind = kind?;
        let d = device::Device::open_hw(a[1], kind, seg, a[5])?;
        return insert_new(&s, kind.object_name, home, Kind::Device(d));
    }
    let d = device::Device::open(a[1])?;
    insert_new(&s, b"console", home, Kind::Device(d))
}

fn sys_device_list(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    check_out_buf::<DeviceInfo>(a[0], a[1])?;
    let l = device::list()?;
    if (a[1] as usize) < l.len() {
        return Err(Error::BufferTooSmall);
    }
    write_slice(a[0], &l)?;
    Ok(l.len() as u64)
}

fn sys_device_stat(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let st = peek(a[0], a[1])?.as_device()?.stat();
    write_user(a[2], &st)?;
    Ok(0)
}

fn sys_device_conf(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let conf: DeviceConf = read_user(a[2])?;
    peek(a[0], a[1])?.as_device()?.conf(conf.key, conf.value)?;
    Ok(0)
}

fn sys_device_buf(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let b: DeviceBuf = read_user(a[2])?;
    let dev_obj = lookup(a[0], a[1])?;
    let dev = dev_obj.as_device()?;
    if let Some(d) = &dev.drv {
        return d.get().buf(&b);
    }
    if b.buf_type != BUF_TX {
        return Err(Error::Unsupported);
    }
    let seg_obj = lookup(b.seg.share, b.seg.object)?;
    let seg = seg_obj.as_segment()?;
    let end = b.offset.checked_add(b.len).ok_or(Error::OutOfRange)?;
    if end > seg.nbytes() {
        return Err(Error::OutOfRange);
    }
    let mut chunk = [0u8; 256];
    let mut done = 0u64;
    while done < b.len {
        let n = (b.len - done).min(chunk.len() as u64) as usize;
        seg.read_bytes(b.offset + done, &mut chunk[..n])?;
        dev.transmit(&chunk[..n]);
        done += n as u64;
    }
    dev.count_buffer();
    Ok(b.len)
}

fn sys_locality_get(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    check_out_buf::<LocalityEntry>(a[0], a[1])?;
    let n = percpu::online_count();
    if (a[1] as usize) < n * n {
        return Err(Error::BufferTooSmall);
    }
    let mut v: Vec<LocalityEntry> = Vec::new();
    v.try_reserve(n * n).map_err(|_| Error::NoMemory)?;
    for i in 0..n {
        for j in 0..n {
            let (l, d) = crate::topology::locality_get(i, j).ok_or(Error::NoSuchCore)?;
            v.push(LocalityEntry { level: l as u8, distance: d });
        }
    }
    write_slice(a[0], &v)?;
    Ok(n as u64)
}

fn sys_console_write(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let len = a[1];
    // All or nothing: check every page of the buffer is readable before printing.
    let end = a[0].checked_add(len).ok_or(Error::BadAddress)?;
    if len > 0 && (a[0] < USER_BASE || end > USER_END) {
        return Err(Error::BadAddress);
    }
    let mut probe = [0u8; 1];
    let mut page = a[0] & !(PAGE_SIZE - 1);
    while len > 0 && page < end {
        copy_from_user(&mut probe, page.max(a[0]))?;
        page += PAGE_SIZE;
    }
    let mut chunk = [0u8; 256];
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(chunk.len() as u64) as usize;
        copy_from_user(&mut chunk[..n], a[0].checked_add(done).ok_or(Error::BadAddress)?)?;
        crate::arch::x86_64::serial::write_bytes_locked(&chunk[..n]);
        done += n as u64;
    }
    Ok(len)
}

fn sys_console_read(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    check_out_buf::<u8>(a[0], a[1])?;
    let mut chunk = [0u8; 256];
    let cap = (a[1] as usize).min(chunk.len());
    // Refuse a buffer we could not fill before consuming any input from the device.
    crate::arch::x86_64::syscall::probe_writable(a[0], cap)?;
    let mut n = 0;
    while n < cap {
        match crate::arch::x86_64::serial::try_read() {
            Some(b) => {
                chunk[n] = b;
                n += 1;
            }
            None => break,
        }
    }
    copy_to_user(a[0], &chunk[..n])?;
    Ok(n as u64)
}

/// `wait(flags, timeout_us)`: halt this core until an interrupt, console input (with
/// `WAIT_CONSOLE`) or the timeout.
fn sys_wait(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    use crate::arch::x86_64::{cpu, serial};
    let (flags, timeout_us) = (a[0], a[1]);
    if flags & !abi::WAIT_CONSOLE != 0 || timeout_us > abi::MAX_WAIT_US {
        return Err(Error::InvalidArgument);
    }
    let me = percpu::this();
    // Only the caller's own core may sleep for it: not a kernel core running a call
    // forwarded from an application core (syscall rings refuse the call before this).
    if percpu::acting().index != me.index {
        return Err(Error::NotPermitted);
    }
    let console = flags & abi::WAIT_CONSOLE != 0;
    if console {
        serial::route_rx_interrupt_to(me.apic_id);
    }
    let ready = |console: bool| if console && serial::input_waiting() { abi::WAIT_CONSOLE } else { 0 };
    // Contexts queued behind us on a TC run at the next tick: sleeping would hold them up.
    if timeout_us == 0 || crate::sched::queued() > 0 {
        let woken = if me.wake_pending.swap(false, Ordering::AcqRel) { abi::WAIT_WOKEN } else { 0 };
        return Ok(ready(console) | woken);
    }
    let on = cpu::interrupts_enabled();
    cpu::disable_interrupts();
    // Looked at with interrupts off: input arriving after this look raises the receive
    // interrupt, and a `wake` after it sends the wake IPI, either of which ends the halt
    // below at once. A `wake` that came before it is consumed here instead of halting.
    let mut woken = me.wake_pending.swap(false, Ordering::AcqRel);
    if !woken && ready(console) == 0 && me.exit_requested.load(Ordering::Relaxed) == 0 {
        crate::smp::halt_at_most(me, timeout_us);
        woken = me.wake_pending.swap(false, Ordering::AcqRel);
    }
    if on {
        cpu::enable_interrupts();
    }
    Ok(ready(console) | if woken { abi::WAIT_WOKEN } else { 0 })
}

/// `wake(core)`: mark a wake pending for `core` and, if none was, send it the wake IPI (which
/// ends a halt in `wait`; a core not waiting takes it as an empty interrupt and consumes the
/// mark at its next `wait`). A mark already set means an IPI was sent since that core last
/// looked, so none is needed.
fn sys_wake(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let target = usize::try_from(a[0]).ok().and_then(percpu::get).filter(|c| c.online.load(Ordering::Acquire)).ok_or(Error::NoSuchCore)?;
    if !target.wake_pending.swap(true, Ordering::AcqRel) {
        crate::arch::x86_64::apic::send_ipi(target.apic_id, crate::arch::x86_64::apic::VECTOR_WAKE);
    }
    Ok(0)
}

fn sys_time_now(_nr: u64, _a: &[u64; 6]) -> Result<u64, Error> {
    Ok(crate::time::now_ticks())
}

fn sys_sys_info(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    if a[1] & !nr::SYS_INFO_ALL_CORES != 0 {
        return Err(Error::InvalidArgument);
    }
    // Exact counts: free what removals from shared shares still hold back.
    crate::kobj::share::reclaim_all();
    // And this core's empty slabs go back, so the count does not depend on what the
    // heap happens to cache. Other cores' caches are theirs to trim, unless the caller asks
    // for every core: a slab of another core's cache that this core's frees emptied stays
    // cached there until that core drains its remote frees, one page more or less in the
    // count depending on when it last allocated.
    if a[1] & nr::SYS_INFO_ALL_CORES != 0 {
        crate::smp::run_on_all(&|_| crate::mm::heap::trim_local());
    } else {
        crate::mm::heap::trim_local();
    }
    let info = SysInfo {
        cores: percpu::online_count() as u64,
        numa_nodes: crate::mm::frame::node_count() as u64,
        tsc_per_ms: crate::time::tsc_per_ms(),
        free_pages: crate::mm::frame::free_pages(),
        total_pages: crate::mm::frame::total_pages(),
        kernel_objects: crate::mm::heap::live_objects(),
        live_kobjects: crate::kobj::live_objects(),
        slab_pages: crate::mm::heap::slab_pages(),
    };
    write_user(a[0], &info)?;
    Ok(0)
}

fn sys_core_stats(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let c = percpu::get(a[0] as usize).filter(|c| c.online.load(Ordering::Acquire)).ok_or(Error::NoSuchCore)?;
    let s = &c.stats;
    let st = CoreStats {
        syscalls: s.syscalls.load(Ordering::Relaxed),
        soft_faults: s.soft_faults.load(Ordering::Relaxed),
        cow_faults: s.cow_faults.load(Ordering::Relaxed),
        tlb_flushes_local: s.tlb_flushes_local.load(Ordering::Relaxed),
        shootdown_ipis_sent: s.shootdown_ipis_sent.load(Ordering::Relaxed),
        shootdown_ipis_received: s.shootdown_ipis_received.load(Ordering::Relaxed),
        ipis_received: s.ipis_received.load(Ordering::Relaxed),
        interrupts: s.interrupts.load(Ordering::Relaxed),
        timer_ticks: s.timer_ticks.load(Ordering::Relaxed),
        syscalls_forwarded: s.syscalls_forwarded.load(Ordering::Relaxed),
        syscalls_served: s.syscalls_served.load(Ordering::Relaxed),
        active_messages: s.active_messages.load(Ordering::Relaxed),
        contexts_started: s.contexts_started.load(Ordering::Relaxed),
        context_switches: s.context_switches.load(Ordering::Relaxed),
        role: c.role.load(Ordering::Relaxed),
        lock_spin_cycles: percore::cpu::spin_stats(c.index).0,
        lock_spin_waits: percore::cpu::spin_stats(c.index).1,
        granted_to: crate::coresched::granted_to(c.index),
        sched_messages: s.sched_messages.load(Ordering::Relaxed),
        ppc_aborts: s.ppc_aborts.load(Ordering::Relaxed),
        halts: s.halts.load(Ordering::Relaxed),
        halted_cycles: {
            let since = s.halted_since.load(Ordering::Relaxed);
            let now = crate::arch::x86_64::cpu::rdtsc();
            s.halted_cycles.load(Ordering::Relaxed) + if since != 0 { now.saturating_sub(since) } else { 0 }
        },
    };
    write_user(a[1], &st)?;
    Ok(0)
}

fn sys_ppc_register(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let dst = reach_share_counted(a[0])?;
    let (name, n) = read_name(a[1], a[2])?;
    let spec: PpcGate = read_user(a[3])?;
    if spec.entry < USER_BASE || spec.entry >= USER_END || spec.stack_top <= USER_BASE || spec.stack_top > USER_END {
        return Err(Error::BadAddress);
    }
    if spec.stack_top % 16 != 0 {
        return Err(Error::Misaligned);
    }
    let core = percpu::get(spec.core as usize).filter(|c| spec.core < percpu::online_count() as u64 && c.online.load(Ordering::Acquire)).ok_or(Error::NoSuchCore)?.index;
    if spec.nshares == 0 || spec.nshares as usize > MAX_CONTEXT_SHARES {
        return Err(Error::InvalidArgument);
    }
    let root_ar = lookup(spec.root_ar.share, spec.root_ar.object)?;
    if root_ar.as_ar()?.kind != ArKind::Root {
        return Err(Error::InvalidArgument);
    }
    let mut shares: Vec<ObjRef> = Vec::new();
    shares.try_reserve(spec.nshares as usize).map_err(|_| Error::NoMemory)?;
    for &id in &spec.shares[..spec.nshares as usize] {
        let s = reach_share_counted(id)?;
        // A private share answers one core: the handler runs on the gate's.
        if s.as_share()?.owner().is_some_and(|o| o != core) {
            return Err(Error::NotPermitted);
        }
        // The gate will hold its shares: one of them holding the gate would keep it alive
        // for ever.
        if reaches(&s, &dst, 8) {
            return Err(Error::InvalidArgument);
        }
        if !shares.iter().any(|x| KRef::ptr_eq(x, &s)) {
            shares.push(s);
        }
    }
    let g = crate::kobj::gate::Gate::new(core as u32, spec.entry, spec.stack_top, spec.cookie, root_ar, shares)?;
    insert_new(&dst, &name[..n], core as u32, Kind::Gate(g))
}

/// The protected procedure calls, straight from `syscall_entry` (`ppc_call` here,
/// `ppc_return` below; numbers above them go on to `syscall_dispatch`): they rewrite where
/// `sysretq` returns to, which only the frame of a `syscall` of the context running here has.
/// Nothing on this path allocates or takes a lock; it does not go through
/// `syscall_dispatch`'s forwarding (an AC switches itself), fault injection or TC yield (a
/// yield asked for takes effect at the next other call or tick).
///
/// `share` and `gate` are the call's first two arguments (the entry saved all six for the
/// handler); `ret` points at the return slots `syscall_entry` pushed on this core's entry
/// stack, which live until it pops them after this returns, and which nothing else refers
/// to.
#[no_mangle]
extern "C" fn ppc_call_entry(share: u64, gate: u64, ret: *mut UserReturn) -> i64 {
    let me = percpu::this();
    me.stats.syscalls.fetch_add(1, Ordering::Relaxed);
    // SAFETY: see above: the return slots are ours to rewrite for this call.
    let ret = unsafe { &mut *ret };
    // A `syscall` runs on the caller's own core: its context is this core's.
    let Some(c) = context::current_mut_of(me) else { return encode(Err(Error::NotPermitted)) };
    encode(ppc_call_named(c, share, gate, ret))
}

/// `ppc_call(PPC_BOUND, slot, ..)`: a gate this context bound (`ppc_bind`), by slot: no
/// lookup, the checks were made when it was bound. `syscall_entry` sends these here, with
/// interrupts off for the whole call (nothing here may free: `kobj::gate::enter_bound`).
/// `ret` as for `ppc_call_entry`.
#[no_mangle]
extern "C" fn ppc_call_bound_entry(_share: u64, slot: u64, ret: *mut UserReturn) -> i64 {
    let me = percpu::this();
    me.stats.syscalls.fetch_add(1, Ordering::Relaxed);
    // SAFETY: as for `ppc_call_entry`.
    let ret = unsafe { &mut *ret };
    let Some(c) = context::current_mut_of(me) else { return encode(Err(Error::NotPermitted)) };
    crate::kobj::gate::enter_bound(c, slot, ret)
}

/// `ppc_return` straight from `syscall_entry` (see `ppc_call_entry`): `value` is its
/// argument, `ret` the return slots.
#[no_mangle]
extern "C" fn ppc_return_entry(value: u64, ret: *mut UserReturn) -> i64 {
    let me = percpu::this();
    me.stats.syscalls.fetch_add(1, Ordering::Relaxed);
    // SAFETY: as for `ppc_call_entry`.
    let ret = unsafe { &mut *ret };
    let Some(c) = context::current_mut_of(me) else { return encode(Err(Error::NotPermitted)) };
    let Some(gate) = crate::kobj::gate::leave(c, ret) else { return encode(Err(Error::NotPermitted)) };
    // Dropped here, after the caller's root range is loaded: a gate deleted (and unbound)
    // during the call is freed now, with interrupts on (this path runs with them off).
    match KRef::release(gate) {
        None => value as i64,
        Some(last) => free_with_interrupts(last, value),
    }
}

/// Free an object whose last reference a path running with interrupts off gave up: freeing
/// may free address ranges, whose TLB shootdowns wait for other cores that may be waiting
/// for us. An exit asked for meanwhile is seen by `syscall_entry`'s check after the return.
/// Gives back `value` as the result (so the caller holds nothing across this).
#[cold]
#[inline(never)]
fn free_with_interrupts(last: crate::kobj::kref::KLast<KObject>, value: u64) -> i64 {
    crate::arch::x86_64::cpu::enable_interrupts();
    drop(last);
    crate::arch::x86_64::cpu::disable_interrupts();
    // Opaque, so that the caller does not keep `value` itself across the call to know the
    // result (that would cost its fast path a saved register).
    core::hint::black_box(value) as i64
}
/// `ppc_call(gate_share, gate, ..)` with the gate named by `<share, id>`: enter the gate's
/// handler (`kobj::gate::enter`); its `rax` is the gate's cookie, its other argument
/// registers the caller's. Out of line: the bound call is the fast one.
#[inline(never)]
fn ppc_call_named(c: &mut Context, share: u64, gate: u64, ret: &mut UserReturn) -> Result<u64, Error> {
    // A gate in the root share: that lookup first, without the general resolution's lease.
    let gate = if share == c.root_share.id {
        c.root_share.as_share()?.get(gate)?
    } else {
        let s = resolve_share(c, share)?;
        s.as_share()?.get(gate)?
    };
    crate::kobj::gate::enter(c, gate, percpu::current_index(), ret)
}

/// `ppc_bind(gate_share, gate) -> slot` (`kobj::gate::bind`).
fn sys_ppc_bind(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let gate = lookup(a[0], a[1])?;
    let g = gate.as_gate()?;
    // The core of the context this call acts for (an AC's bind runs on a kernel core).
    if g.core as usize != caller() {
        return Err(Error::WrongCore);
    }
    let gate_ptr: *const crate::kobj::gate::Gate = g;
    // A slot that cannot be had gives the reference back, dropped out here.
    match with_current_mut(|c| crate::kobj::gate::bind(c, gate, gate_ptr))? {
        Ok(slot) => Ok(slot),
        Err(gate) => {
            drop(gate);
            Err(Error::Busy)
        }
    }
}

/// `ppc_unbind(slot)` (`kobj::gate::unbind`); the slot's references are dropped out of the
/// context's reach.
fn sys_ppc_unbind(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let bound = with_current_mut(|c| crate::kobj::gate::unbind(c, a[0]))??;
    drop(bound);
    Ok(0)
}

/// `ppc_call` and `ppc_return` reach the table only from a batch, a syscall ring or a call
/// forwarded to a kernel core: not a `syscall` whose return they could redirect.
fn sys_ppc_not_direct(_nr: u64, _a: &[u64; 6]) -> Result<u64, Error> {
    Err(Error::NotPermitted)
}

fn sys_initrd_get(_nr: u64, a: &[u64; 6]) -> Result<u64, Error> {
    let s = reach_share(a[0])?;
    let (name, n) = read_name(a[1], a[2])?;
    let data = crate::initrd::find(&name[..n]).ok_or(Error::NotFound)?;
    let me = caller() as u32;
    let seg = segment::Segment::new(data.len() as u64, me)?;
    seg.write_bytes(0, data)?;
    insert_new(&s, &name[..n], me, Kind::Segment(seg))
}

/// What a new syscall ring's requests run with: the caller's root address range, and the
/// shared shares it can name directly (in its share set, or held by its root share).
/// Private ones are left out: only their own core may use them.
fn ring_identity() -> Result<(ObjRef, Vec<ObjRef>), Error> {
    with_current(|c| -> Result<(ObjRef, Vec<ObjRef>), Error> {
        let mut shares: Vec<ObjRef> = Vec::new();
        let mut add = |o: ObjRef| -> Result<(), Error> {
            if o.as_share().is_ok_and(|s| !s.is_private()) && !shares.iter().any(|x| KRef::ptr_eq(x, &o)) {
                if shares.len() >= MAX_RING_SHARES {
                    return Err(Error::InvalidArgument);
                }
                crate::kobj::try_push(&mut shares, o)?;
            }
            Ok(())
        };
        for s in c.shares.iter() {
            add(s.clone())?;
        }
        let root = c.root_share.as_share()?;
        for id in root.ids()? {
            if let Ok(o) = root.get(id) {
                add(o)?;
            }
        }
        Ok((c.root_ar.clone(), shares))
    })?
}

fn pcore_run(pshare: u64, pcore_id: u64, ctx_ptr: u64) -> Result<u64, Error> {
    let c: PcoreContext = read_user(ctx_ptr)?;
    let p = lookup(pshare, pcore_id)?;
    let target = p.as_pcore()?.core as usize;
    // Naming the pcore is not enough to run it: only the core that allocated it may.
    if p.as_pcore()?.allocator_core != caller() as u32 {
        return Err(Error::NotPermitted);
    }
    if c.rip < USER_BASE || c.rip >= USER_END || c.rsp <= USER_BASE || c.rsp > USER_END {
        return Err(Error::BadAddress);
    }
    if c.nshares as usize > MAX_CONTEXT_SHARES {
        return Err(Error::InvalidArgument);
    }
    // The context's role becomes the core's role: XC, TC or AC (kernel cores are made with
    // pcore_set_role and never run contexts).
    if !matches!(c.role, ROLE_XC | ROLE_TC | ROLE_AC) {
        return Err(Error::InvalidArgument);
    }
    let root_ar = lookup(c.root_ar.share, c.root_ar.object)?;
    if root_ar.as_ar()?.kind != ArKind::Root {
        return Err(Error::InvalidArgument);
    }
    let mut shares = Vec::new();
    shares.try_reserve(c.nshares as usize).map_err(|_| Error::NoMemory)?;
    for &id in &c.shares[..c.nshares as usize] {
        let s = reach_share_counted(id)?;
        if !shares.iter().any(|x: &ObjRef| KRef::ptr_eq(x, &s)) {
            shares.push(s);
        }
    }
    let Some(target_area) = percpu::get(target) else { return Err(Error::NoSuchCore) };
    // With `sched=core0`, a core granted to another context is not ours to run.
    crate::coresched::check_run(target)?;
    // A TC time-shares (the context joins its run queue); XC and AC run one context.
    let time_shared = c.role == ROLE_TC || (c.role == ROLE_XC && crate::roles::role_of(target) == Some(ROLE_TC));
    if !time_shared && target_area.busy.load(Ordering::Acquire) {
        return Err(Error::Busy);
    }
    let mut initial = Vec::new();
    initial.try_reserve(1).map_err(|_| Error::NoMemory)?;
    initial.push(p.clone());
    let root_share = KObject::create(b"root", target as u32, Kind::Share(share::Share::new_private_with(target, initial)?))?;
    if crate::roles::role_of(target) == Some(ROLE_KC) {
        return Err(Error::NotPermitted);
    }
    if c.role != ROLE_XC && crate::roles::role_of(target) != Some(c.role) {
        crate::roles::set_role(target, c.role)?;
    }
    let args = [c.arg, root_share.id, p.id];
    if !time_shared {
        let ctx = Context::new(root_share, shares, root_ar, p, c.rip, c.rsp, args);
        context::start_on(target, ctx)?;
        return Ok(0);
    }
    // One context per pcore object: claim it (RUNNING covers queued on a TC), so the same
    // pcore is not queued twice and `pcore_halt` names exactly one context.
    let pc = p.as_pcore()?;
    let prev = pc.state.load(Ordering::Acquire);
    if prev == PCORE_RUNNING || pc.state.compare_exchange(prev, PCORE_RUNNING, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return Err(Error::Busy);
    }
    let claimed = p.clone();
    let ctx = Context::new(root_share, shares, root_ar, p, c.rip, c.rsp, args);
    if let Err(e) = crate::sched::post(target, ctx) {
        if let Ok(pc) = claimed.as_pcore() {
            pc.state.store(prev, Ordering::Release);
        }
        return Err(e);
    }
    Ok(0)
}
