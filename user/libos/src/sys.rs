//! System-call wrappers: one typed function per number in `abi::nr`.
//!
//! Every wrapper returns `Result<u64, abi::Error>` (the kernel's `rax`, decoded). Objects are
//! passed as `ObjName` (`<share, object>`) and expand to two registers, share first. Names are
//! `&str` and expand to `(pointer, length)`. Where Corey's table (seeds/000 figure 5) has
//! fewer parameters than the kernel needs, the extra ones come last. The register layout of
//! every call is documented on its number in `abi::nr`; these wrappers follow it.
//!
//! The `raw*` functions take plain integers so tests can pass bad pointers and out-of-domain
//! values; they are `unsafe` because the kernel may write through pointer arguments.

use abi::{
    nr, ArKind, ArMapping, CoreStats, DeviceBuf, DeviceConf, DeviceInfo, DeviceStat, Error, LocalityEntry, ObjName, ObjStat,
    ObjectId, PcoreContext, PcoreStat, PpcGate, SegMapping, SysInfo,
};
use core::arch::asm;

/// The `syscall` instruction as the kernel defines it: the number in rax and the result back
/// in rax, rcx and r11 clobbered, the stack not touched (`nostack`); `"reg" = value` pairs are
/// the argument registers (rdi, rsi, rdx, r10, r8, r9 in that order), and the ones not named
/// are left as they are (the kernel ignores and preserves them). Memory effects are left
/// unrestricted (no `nomem`/`readonly`) because the kernel may read and write user memory
/// named by the arguments. Expands to one `asm!`: the raw functions below are the same
/// instructions as if each had written it out. Use inside an `unsafe` block whose caller
/// vouches for the pointer arguments.
macro_rules! syscall_asm {
    ($n:expr $(, $reg:tt = $val:expr)* $(,)?) => {{
        let ret: i64;
        asm!(
            "syscall",
            inlateout("rax") $n as i64 => ret,
            $(in($reg) $val,)*
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
        ret
    }};
}

/// Issue system call `n` with six arguments and return the raw `rax`.
///
/// # Safety
/// Pointer arguments must be valid for whatever the call reads or writes through them (the
/// kernel checks that they are user memory, not that they belong to live Rust objects).
#[inline(always)]
pub unsafe fn raw6(n: u64, a0: u64, a1: u64, a2: u64, a3: u64, a4: u64, a5: u64) -> i64 {
    // SAFETY: the `syscall` instruction enters the kernel, which preserves every register
    // except rax (result), rcx and r11 (declared clobbered); it does not touch the user stack.
    // The kernel may read and write user memory named by the arguments; the caller vouches
    // for those pointers.
    unsafe { syscall_asm!(n, "rdi" = a0, "rsi" = a1, "rdx" = a2, "r10" = a3, "r8" = a4, "r9" = a5) }
}

/// Issue system call `n` with three arguments (the calls that take no more): the other
/// argument registers are left as they are, which the kernel ignores for these calls.
///
/// # Safety
/// As `raw6`.
#[inline(always)]
pub unsafe fn raw3(n: u64, a0: u64, a1: u64, a2: u64) -> i64 {
    // SAFETY: as in `raw6`; r8-r10 are not inputs, and the kernel preserves them.
    unsafe { syscall_asm!(n, "rdi" = a0, "rsi" = a1, "rdx" = a2) }
}

/// Issue system call `n` with no arguments (the argument registers are left as they are,
/// which the kernel ignores for these calls; it preserves them as for every call).
///
/// # Safety
/// As `raw6`.
#[inline(always)]
pub unsafe fn raw0(n: u64) -> i64 {
    // SAFETY: as in `raw6`; no argument registers are inputs, and the kernel preserves them.
    unsafe { syscall_asm!(n) }
}

/// `raw6` decoded into a `Result`.
///
/// # Safety
/// As `raw6`.
#[inline(always)]
pub unsafe fn call(n: u64, a0: u64, a1: u64, a2: u64, a3: u64, a4: u64, a5: u64) -> Result<u64, Error> {
    // SAFETY: forwarded to the caller's contract.
    abi::decode(unsafe { raw6(n, a0, a1, a2, a3, a4, a5) })
}

/// A system call whose arguments carry no pointers (or only pointers the kernel reads from
/// objects we own): safe to call with any values, because the kernel validates everything.
#[inline(always)]
fn call_nomem(n: u64, a0: u64, a1: u64, a2: u64, a3: u64, a4: u64, a5: u64) -> Result<u64, Error> {
    // SAFETY: the arguments hold no pointers into memory the kernel would write.
    unsafe { call(n, a0, a1, a2, a3, a4, a5) }
}

/// `call_nomem` for calls with at most three arguments.
#[inline(always)]
fn call_nomem3(n: u64, a0: u64, a1: u64, a2: u64) -> Result<u64, Error> {
    // SAFETY: as in `call_nomem`.
    abi::decode(unsafe { raw3(n, a0, a1, a2) })
}

fn name_args(name: &[u8]) -> (u64, u64) {
    (name.as_ptr() as u64, name.len() as u64)
}

// ---------------------------------------------------------------------------------------
// Objects

/// `obj_get_name(<share, obj>, buf, cap)`: copies the object's name into `buf` and returns
/// its length (`BufferTooSmall` if `buf` is shorter than the name).
pub fn obj_get_name(o: ObjName, buf: &mut [u8]) -> Result<u64, Error> {
    // SAFETY: `buf` is a live, writable slice of `buf.len()` bytes.
    unsafe { call(nr::OBJ_GET_NAME, o.share, o.object, buf.as_mut_ptr() as u64, buf.len() as u64, 0, 0) }
}

/// `obj_stat(<share, obj>, &mut ObjStat)`.
///
/// Inline, three argument registers (the call takes three).
#[inline]
pub fn obj_stat(o: ObjName) -> Result<ObjStat, Error> {
    let mut st = ObjStat::default();
    // SAFETY: `st` is a live, writable `ObjStat`.
    abi::decode(unsafe { raw3(nr::OBJ_STAT, o.share, o.object, &mut st as *mut ObjStat as u64) })?;
    Ok(st)
}

// ---------------------------------------------------------------------------------------
// Shares

/// `share_alloc(share, name, memid, flags)`: a new share whose id is put in `share`.
pub fn share_alloc(share: ObjectId, name: &str, memid: u64, flags: u64) -> Result<ObjectId, Error> {
    let (p, l) = name_args(name.as_bytes());
    call_nomem(nr::SHARE_ALLOC, share, p, l, memid, flags, 0)
}

/// `share_addobj(dst, <share, obj>)`: add a reference to the object to share `dst`.
pub fn share_addobj(dst: ObjectId, o: ObjName) -> Result<u64, Error> {
    call_nomem3(nr::SHARE_ADDOBJ, dst, o.share, o.object)
}

/// `share_delobj(<share, obj>)`: remove the object from the share, dropping that reference.
pub fn share_delobj(o: ObjName) -> Result<u64, Error> {
    call_nomem3(nr::SHARE_DELOBJ, o.share, o.object, 0)
}

/// `self_drop(share)`: remove a share from the calling context's share set.
pub fn self_drop(share: ObjectId) -> Result<u64, Error> {
    call_nomem3(nr::SELF_DROP, share, 0, 0)
}

/// `self_shares(buf, cap)`: the calling context's share set (its root share first); returns
/// how many ids were written.
pub fn self_shares(buf: &mut [ObjectId]) -> Result<u64, Error> {
    // SAFETY: `buf` is a live, writable slice of `buf.len()` ids.
    unsafe { call(nr::SELF_SHARES, buf.as_mut_ptr() as u64, buf.len() as u64, 0, 0, 0, 0) }
}

/// `share_list(share, buf)`: the object ids the share holds, ascending.
pub fn share_list(share: ObjectId, buf: &mut [ObjectId]) -> Result<u64, Error> {
    // SAFETY: `buf` is a live, writable slice of `buf.len()` ids.
    unsafe { call(nr::SHARE_LIST, share, buf.as_mut_ptr() as u64, buf.len() as u64, 0, 0, 0) }
}

// ---------------------------------------------------------------------------------------
// Segments

/// `segment_alloc(share, name, memid, nbytes)`: demand-zero memory of `nbytes` bytes.
pub fn segment_alloc(share: ObjectId, name: &str, memid: u64, nbytes: u64) -> Result<ObjectId, Error> {
    segment_alloc_bytes(share, name.as_bytes(), memid, nbytes)
}

/// `segment_alloc` with the name as bytes (the kernel takes names as bytes; the descriptor
/// code builds its names in a byte buffer).
pub(crate) fn segment_alloc_bytes(share: ObjectId, name: &[u8], memid: u64, nbytes: u64) -> Result<ObjectId, Error> {
    let (p, l) = name_args(name);
    call_nomem(nr::SEGMENT_ALLOC, share, p, l, memid, nbytes, 0)
}

/// `segment_copy(dst_share, <share, seg>, name, mode)`: a copy (`COPY_EAGER`) or a
/// copy-on-write copy (`COPY_ON_WRITE`) of the segment, put in `dst_share`.
pub fn segment_copy(dst_share: ObjectId, src: ObjName, name: &str, mode: u64) -> Result<ObjectId, Error> {
    let (p, l) = name_args(name.as_bytes());
    call_nomem(nr::SEGMENT_COPY, dst_share, src.share, src.object, p, l, mode)
}

/// `segment_get_nbytes(<share, seg>)`.
pub fn segment_get_nbytes(seg: ObjName) -> Result<u64, Error> {
    call_nomem3(nr::SEGMENT_GET_NBYTES, seg.share, seg.object, 0)
}

/// `segment_set_nbytes(<share, seg>, nbytes)`.
pub fn segment_set_nbytes(seg: ObjName, nbytes: u64) -> Result<u64, Error> {
    call_nomem3(nr::SEGMENT_SET_NBYTES, seg.share, seg.object, nbytes)
}

// ---------------------------------------------------------------------------------------
// Address ranges

/// `ar_alloc(share, name, memid, kind)`.
pub fn ar_alloc(share: ObjectId, name: &str, memid: u64, kind: ArKind) -> Result<ObjectId, Error> {
    let (p, l) = name_args(name.as_bytes());
    call_nomem(nr::AR_ALLOC, share, p, l, memid, kind as u64, 0)
}

/// `ar_set_seg(<share, ar>, &SegMapping)`: map part of a segment into the range.
pub fn ar_set_seg(ar: ObjName, m: &SegMapping) -> Result<u64, Error> {
    // SAFETY: the kernel only reads the mapping description, a live `SegMapping`.
    unsafe { call(nr::AR_SET_SEG, ar.share, ar.object, m as *const SegMapping as u64, 0, 0, 0) }
}

/// `ar_set_ar(<share, ar>, voff, <child_share, child>)`: link the whole range `child` (a
/// page-table subtree of a lower kind) into `ar` at `voff`, aligned to the child's span.
pub fn ar_set_ar(ar: ObjName, voff: u64, child: ObjName) -> Result<u64, Error> {
    call_nomem(nr::AR_SET_AR, ar.share, ar.object, voff, child.share, child.object, 0)
}

/// `ar_get(<share, ar>, buf, cap)`: the range's mappings; returns how many were written
/// (`BufferTooSmall`, writing nothing, if there are more than `buf` holds).
pub fn ar_get(ar: ObjName, buf: &mut [ArMapping]) -> Result<u64, Error> {
    // SAFETY: `buf` is a live, writable slice of `buf.len()` entries.
    unsafe { call(nr::AR_GET, ar.share, ar.object, buf.as_mut_ptr() as u64, buf.len() as u64, 0, 0) }
}

/// `ar_unmap(<share, ar>, voff, len)`: remove every mapping (segment or linked range) inside
/// `[voff, voff + len)` (`Overlap` if one straddles the boundary).
pub fn ar_unmap(ar: ObjName, voff: u64, len: u64) -> Result<u64, Error> {
    call_nomem(nr::AR_UNMAP, ar.share, ar.object, voff, len, 0, 0)
}

// ---------------------------------------------------------------------------------------
// Pcores

/// `pcore_alloc(share, name, core)`: a pcore object for physical core `core`.
pub fn pcore_alloc(share: ObjectId, name: &str, core: u64) -> Result<ObjectId, Error> {
    let (p, l) = name_args(name.as_bytes());
    call_nomem(nr::PCORE_ALLOC, share, p, l, core, 0, 0)
}

/// `pcore_current()`: the id of the calling context's pcore object (held in its root share).
pub fn pcore_current() -> Result<ObjectId, Error> {
    call_nomem3(nr::PCORE_CURRENT, 0, 0, 0)
}

/// `pcore_run(<share, pcore>, &PcoreContext)`.
pub fn pcore_run(p: ObjName, ctx: &PcoreContext) -> Result<u64, Error> {
    // SAFETY: the kernel only reads the context description, a live `PcoreContext`.
    unsafe { call(nr::PCORE_RUN, p.share, p.object, ctx as *const PcoreContext as u64, 0, 0, 0) }
}

/// `pcore_set_interval(<share, pcore>, hz)` (0: no time slicing).
pub fn pcore_set_interval(p: ObjName, hz: u64) -> Result<u64, Error> {
    call_nomem3(nr::PCORE_SET_INTERVAL, p.share, p.object, hz)
}

/// `pcore_halt(<share, pcore>, code)`: stop the context running on the pcore with exit code
/// `code`. On the caller's own pcore it does not return.
pub fn pcore_halt(p: ObjName, code: u64) -> Result<u64, Error> {
    call_nomem3(nr::PCORE_HALT, p.share, p.object, code)
}

/// `pcore_set_role(<share, pcore>, role)`: change the pcore's core to `ROLE_*` (only through a
/// pcore this core allocated; a context may move its own core between XC, TC and AC).
pub fn pcore_set_role(p: ObjName, role: u64) -> Result<u64, Error> {
    call_nomem3(nr::PCORE_SET_ROLE, p.share, p.object, role)
}

/// `pcore_yield()`: on a TC with other contexts queued, let the next one run now; elsewhere
/// it does nothing.
pub fn pcore_yield() -> Result<u64, Error> {
    call_nomem3(nr::PCORE_YIELD, 0, 0, 0)
}

/// `core_request(n, role, near, buf)` with `n = cores.len()`: ask the core scheduler on core
/// 0 (`sched=core0`) for that many cores (the free ones nearest to `near`); on success
/// `cores` holds their indices, ascending. `role`: `abi::GRANT_ROLE_ANY` or `ROLE_XC`/`ROLE_TC`/`ROLE_AC`; `near`: a
/// core or `abi::NEAR_CALLER`. `Busy` if not enough cores are free, `Unsupported` when the
/// scheduler is off (see `abi::nr::CORE_REQUEST`).
pub fn core_request(cores: &mut [u64], role: u64, near: u64) -> Result<u64, Error> {
    // SAFETY: `cores` is a live, writable slice of `cores.len()` entries.
    unsafe { call(nr::CORE_REQUEST, cores.len() as u64, role, near, cores.as_mut_ptr() as u64, 0, 0) }
}

/// `core_release(core)`: give a granted core back (`abi::CORE_ALL`: all of them; returns how
/// many were released).
pub fn core_release(core: u64) -> Result<u64, Error> {
    call_nomem(nr::CORE_RELEASE, core, 0, 0, 0, 0, 0)
}

/// `pcore_stat(<share, pcore>, &mut PcoreStat)`.
pub fn pcore_stat(p: ObjName) -> Result<PcoreStat, Error> {
    let mut st = PcoreStat::default();
    // SAFETY: `st` is a live, writable `PcoreStat`.
    unsafe { call(nr::PCORE_STAT, p.share, p.object, &mut st as *mut PcoreStat as u64, 0, 0, 0)? };
    Ok(st)
}

// ---------------------------------------------------------------------------------------
// Devices

/// `device_alloc(share, hwid, memid)`.
pub fn device_alloc(share: ObjectId, hwid: u64, memid: u64) -> Result<ObjectId, Error> {
    call_nomem(nr::DEVICE_ALLOC, share, hwid, memid, 0, 0, 0)
}

/// `device_list(buf, cap)`: returns how many devices were written.
pub fn device_list(buf: &mut [DeviceInfo]) -> Result<u64, Error> {
    // SAFETY: `buf` is a live, writable slice of `buf.len()` entries.
    unsafe { call(nr::DEVICE_LIST, buf.as_mut_ptr() as u64, buf.len() as u64, 0, 0, 0, 0) }
}

/// `device_stat(<share, dev>, &mut DeviceStat)`.
pub fn device_stat(d: ObjName) -> Result<DeviceStat, Error> {
    let mut st = DeviceStat::default();
    // SAFETY: `st` is a live, writable `DeviceStat`.
    unsafe { call(nr::DEVICE_STAT, d.share, d.object, &mut st as *mut DeviceStat as u64, 0, 0, 0)? };
    Ok(st)
}

/// `device_conf(<share, dev>, &DeviceConf)`.
pub fn device_conf(d: ObjName, conf: &DeviceConf) -> Result<u64, Error> {
    // SAFETY: the kernel only reads the configuration, a live `DeviceConf`.
    unsafe { call(nr::DEVICE_CONF, d.share, d.object, conf as *const DeviceConf as u64, 0, 0, 0) }
}

/// `device_buf(<share, dev>, &DeviceBuf)`: feed bytes `[offset, offset + len)` of a segment
/// to the device; returns the bytes transferred.
pub fn device_buf(d: ObjName, buf: &DeviceBuf) -> Result<u64, Error> {
    // SAFETY: the kernel only reads the description, a live `DeviceBuf`.
    unsafe { call(nr::DEVICE_BUF, d.share, d.object, buf as *const DeviceBuf as u64, 0, 0, 0) }
}

// ---------------------------------------------------------------------------------------
// Locality and kernel services

/// `locality_get(buf, cap)`: fills `n * n` entries and returns `n` (the core count).
pub fn locality_get(buf: &mut [LocalityEntry]) -> Result<u64, Error> {
    // SAFETY: `buf` is a live, writable slice of `buf.len()` entries.
    unsafe { call(nr::LOCALITY_GET, buf.as_mut_ptr() as u64, buf.len() as u64, 0, 0, 0, 0) }
}

/// `console_write(buf, len)`: returns the bytes written.
pub fn console_write(buf: &[u8]) -> Result<u64, Error> {
    // SAFETY: the kernel only reads `buf`, a live slice.
    unsafe { call(nr::CONSOLE_WRITE, buf.as_ptr() as u64, buf.len() as u64, 0, 0, 0, 0) }
}

/// `console_read(buf, cap)`: returns the bytes read (0 when nothing is waiting).
pub fn console_read(buf: &mut [u8]) -> Result<u64, Error> {
    // SAFETY: `buf` is a live, writable slice.
    unsafe { call(nr::CONSOLE_READ, buf.as_mut_ptr() as u64, buf.len() as u64, 0, 0, 0, 0) }
}

/// `wait(flags, timeout_us)`: halt this core until an interrupt, console input
/// (`abi::WAIT_CONSOLE`), a `wake` or the timeout; returns `WAIT_CONSOLE` if input is waiting,
/// plus `WAIT_WOKEN` if a `wake` ended it.
pub fn wait(flags: u64, timeout_us: u64) -> Result<u64, Error> {
    call_nomem3(nr::WAIT, flags, timeout_us, 0)
}

/// `wake(core)`: end `core`'s `wait` now, or make its next one return at once (with
/// `abi::WAIT_WOKEN`); see `abi::nr::WAKE` for the protocol around it.
pub fn wake(core: u64) -> Result<u64, Error> {
    call_nomem3(nr::WAKE, core, 0, 0)
}

/// `time_now()`: the time-stamp counter (ticks; `SysInfo::tsc_per_ms` per millisecond).
pub fn time_now() -> Result<u64, Error> {
    call_nomem3(nr::TIME_NOW, 0, 0, 0)
}

/// `inject_ctl(INJECT_ARM)`: start the allocation fault injection the command line configured
/// with `inject_from=program` (nothing happens when none is configured).
pub fn inject_arm() -> Result<u64, Error> {
    // SAFETY: INJECT_ARM reads and writes no user memory.
    unsafe { call(nr::INJECT_CTL, abi::INJECT_ARM, 0, 0, 0, 0, 0) }
}

/// `sys_info(&mut SysInfo)`.
pub fn sys_info() -> Result<SysInfo, Error> {
    sys_info_with(0)
}

/// `sys_info` after every core has trimmed its kernel heap (`nr::SYS_INFO_ALL_CORES`): free
/// pages that do not depend on what other cores' slab caches hold. For leak checks; it
/// interrupts every core.
pub fn sys_info_all_cores() -> Result<SysInfo, Error> {
    sys_info_with(nr::SYS_INFO_ALL_CORES)
}

fn sys_info_with(flags: u64) -> Result<SysInfo, Error> {
    let mut si = SysInfo::default();
    // SAFETY: `si` is a live, writable `SysInfo`.
    unsafe { call(nr::SYS_INFO, &mut si as *mut SysInfo as u64, flags, 0, 0, 0, 0)? };
    Ok(si)
}

/// `core_stats(core, &mut CoreStats)`.
pub fn core_stats(core: u64) -> Result<CoreStats, Error> {
    let mut st = CoreStats::default();
    // SAFETY: `st` is a live, writable `CoreStats`.
    unsafe { call(nr::CORE_STATS, core, &mut st as *mut CoreStats as u64, 0, 0, 0, 0)? };
    Ok(st)
}

/// `initrd_get(share, name)`: a copy-on-write segment (put in `share`) holding that file of
/// the boot image; its size is the file size.
pub fn initrd_get(share: ObjectId, name: &str) -> Result<ObjectId, Error> {
    let (p, l) = name_args(name.as_bytes());
    call_nomem3(nr::INITRD_GET, share, p, l)
}

/// The null system call.
///
/// Inline, with no argument registers set: what a null call costs the caller is the
/// `syscall` and the result test (the gate's `null` and `nullsyscall` rows, docs/insngate.md).
#[inline]
pub fn null() -> Result<u64, Error> {
    // SAFETY: `null` takes no arguments and touches no memory.
    abi::decode(unsafe { raw0(nr::NULL) })
}

// ---------------------------------------------------------------------------------------
// Protected procedure calls (`libos::ppc` is the interface programs use)

/// `ppc_register(share, name, &PpcGate) -> gate id`.
pub fn ppc_register(share: ObjectId, name: &str, gate: &PpcGate) -> Result<ObjectId, Error> {
    let (p, l) = name_args(name.as_bytes());
    // SAFETY: the kernel only reads the name and the gate description, both live.
    unsafe { call(nr::PPC_REGISTER, share, p, l, gate as *const PpcGate as u64, 0, 0) }
}

/// `ppc_return(value)` outside a call: `NotPermitted` (a handler returns through
/// `libos::ppc`'s trampoline, never through this).
pub fn ppc_return_outside_call(value: u64) -> Result<u64, Error> {
    abi::decode(ppc_return_raw(value))
}

/// `ppc_return(value)` with the registers it clears declared clobbered (`abi::nr::PPC_RETURN`):
/// the only safe way to make it by hand (outside a call it fails with `NotPermitted`; inside
/// one it does not return).
#[inline(always)]
pub fn ppc_return_raw(value: u64) -> i64 {
    let ret: i64;
    #[cfg(target_os = "none")]
    // SAFETY: `syscall` enters the kernel; if this context is in no call it comes back with
    // the result in rax and the argument registers cleared (declared as outputs), rcx and
    // r11 clobbered; the stack is not touched. In a call it returns to the caller instead,
    // as the handler's end.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr::PPC_RETURN as i64 => ret,
            inlateout("rdi") value => _,
            lateout("rsi") _,
            lateout("rdx") _,
            lateout("r10") _,
            lateout("r8") _,
            lateout("r9") _,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    #[cfg(not(target_os = "none"))]
    {
        let _ = value;
        ret = abi::encode(Err(Error::Unsupported));
    }
    ret
}

/// `ppc_bind(<share, gate>) -> slot` (`libos::ppc::Gate::bind`).
pub fn ppc_bind(gate: ObjName) -> Result<u64, Error> {
    call_nomem3(nr::PPC_BIND, gate.share, gate.object, 0)
}

/// `ppc_unbind(slot)`.
pub fn ppc_unbind(slot: u64) -> Result<u64, Error> {
    call_nomem3(nr::PPC_UNBIND, slot, 0, 0)
}

/// `linux_personality(op, a0, a1, a2)`: the Linux personality's reflection (see
/// `abi::nr::LINUX_PERSONALITY`; `user/libos/src/linux`).
pub fn linux_personality(op: u64, a0: u64, a1: u64, a2: u64) -> Result<u64, Error> {
    call_nomem(nr::LINUX_PERSONALITY, op, a0, a1, a2, 0, 0)
}

/// `linux_personality(LINUX_TAKE_EVENT, ev)`: the fault or tick the kernel reflected to this
/// context, if one is kept (`Ok(true)`, written to `ev`).
pub fn linux_take_event(ev: &mut abi::LinuxEvent) -> Result<bool, Error> {
    // SAFETY: the kernel writes one `LinuxEvent` to `ev`, a live exclusive reference.
    unsafe { call(nr::LINUX_PERSONALITY, abi::LINUX_TAKE_EVENT, ev as *mut abi::LinuxEvent as u64, 0, 0, 0, 0) }.map(|n| n == 1)
}
