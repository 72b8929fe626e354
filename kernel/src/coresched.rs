//! Asymmetric scheduling (NIX, seeds/003): with `sched=core0` on the command line, core 0
//! hands cores to their users. A program asks for cores (`core_request`), gets core indices
//! (or `Busy` at once), runs contexts there with `pcore_alloc`/`pcore_run` as usual, and
//! gives them back (`core_release`, or its context ending).
//!
//! - **Owner.** The kernel has no process object: a program is its first context plus
//!   whatever contexts that one starts, each with a root share of its own, and the library
//!   OS's "process share" is a user-level convention the kernel does not know. What the
//!   kernel does know and can watch end is a *context*, and each context has exactly one
//!   root share, made for it (by `init` or `pcore_run`) and dropped when it ends; object ids
//!   are never reused. So the owner of a grant is the calling context, named by its root
//!   share's id (`CoreStats::granted_to`). Contexts time-sharing one TC are distinct owners.
//!   A kernel core running a forwarded call acts for its client context, so an AC's request
//!   belongs to the AC's context; a syscall ring's requests belong to no context
//!   (`NotPermitted`).
//! - **The grant table** (`GRANTS`, one cache line per core) is written only by core 0, in
//!   the scheduler messages below, with interrupts off, so it needs no lock: a request or a
//!   release is an active message posted to core 0's mailbox (`smp::run_on`); the caller
//!   waits for the answer (serving its own mailbox meanwhile, as every poster does). Other
//!   cores only read the table: `pcore_run`'s check, `core_stats`, and the owner-gone check.
//! - **Lifetime.** When a context ends (`context::finish`), any core still granted to it is
//!   released by one more message. A grant is not a kernel object, so nothing is allocated
//!   and nothing can leak; the pcore objects a program makes for its granted cores are
//!   ordinary objects with their ordinary lifetime.
//! - **Exclusion.** `pcore_run` on a core granted to another context is `NotPermitted`
//!   (`check_run`). Cores that are not granted stay usable as before (`pcore_alloc` +
//!   `pcore_run` on a chosen core), so programs that do not use the scheduler keep working;
//!   the scheduler does not grant a core that runs a context (a racy read of its `busy`
//!   flag: a context started there by someone else between the check and the grant makes the
//!   grantee's `pcore_run` `Busy`, as for any busy core).
//!
//! Off by default (`Unsupported`), so existing configurations are unchanged.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::arch::x86_64::cpu;
use crate::percpu;
use abi::{Error, CORE_ALL, GRANT_ROLE_ANY, NEAR_CALLER, ROLE_AC, ROLE_KC, ROLE_TC, ROLE_XC};
use percore::{CachePadded, TicketLock, MAX_CORES};

/// The core that runs the scheduler.
const SCHED_CORE: usize = 0;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Which owner each core is granted to (0: free). Written by core 0 only (see the module
/// comment); read by any core.
static GRANTS: [CachePadded<AtomicU64>; MAX_CORES] = [const { CachePadded::new(AtomicU64::new(0)) }; MAX_CORES];

/// Apply `sched=...` from the command line. Only `core0` is known.
pub fn apply_boot_option(value: &str) -> Result<(), alloc::string::String> {
    match value {
        "core0" => {
            ENABLED.store(true, Ordering::Release);
            Ok(())
        }
        other => Err(alloc::format!("sched: unknown scheduler `{other}` (known: core0)")),
    }
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Acquire)
}

/// The owner `core` is granted to, 0 if none.
pub fn granted_to(core: usize) -> u64 {
    GRANTS.get(core).map_or(0, |g| g.load(Ordering::Acquire))
}

/// The calling context's owner id: its root share's id. `NotPermitted` for a syscall ring's
/// requests (a kernel core serving a ring acts for no context; see `context::serve_as`).
fn owner() -> Result<u64, Error> {
    let me = percpu::this();
    if me.role.load(Ordering::Acquire) == ROLE_KC && !me.is_acting() {
        return Err(Error::NotPermitted);
    }
    crate::context::with_current(|c| c.root_share.id)
}

/// What a request asks core 0 for, and what it answers.
struct Grant {
    owner: u64,
    n: usize,
    role: u64,
    near: usize,
    /// The granted cores (bit `c % 64` of word `c / 64`), on success.
    granted: [u64; MAX_CORES / 64],
    result: Result<(), Error>,
}

/// Post `f` to core 0 and wait for it; on core 0 itself it runs here. `f` runs with
/// interrupts off on core 0, which makes it the only writer of `GRANTS` at any time (a
/// message nested in an interrupt cannot run in the middle of another).
fn on_sched_core(f: &(dyn Fn() + Sync)) {
    let me = percore::cpu_id();
    crate::smp::run_on(
        &|_| {
            cpu::without_interrupts(|| {
                percpu::this().stats.sched_messages.fetch_add(1, Ordering::Relaxed);
                f()
            })
        },
        core::iter::once(SCHED_CORE),
        me == SCHED_CORE,
    );
}

/// `core_request(n, role, near, buf)` (see `abi::nr::CORE_REQUEST`).
pub fn request(n: u64, role: u64, near: u64, buf: u64) -> Result<u64, Error> {
    if !enabled() {
        return Err(Error::Unsupported);
    }
    let owner = owner()?;
    let online = percpu::online_count();
    if n == 0 || n >= online as u64 {
        return Err(Error::InvalidArgument);
    }
    if !matches!(role, GRANT_ROLE_ANY | ROLE_XC | ROLE_TC | ROLE_AC) {
        return Err(Error::InvalidArgument);
    }
    let near = match near {
        NEAR_CALLER => percpu::acting().index,
        c if c < online as u64 => c as usize,
        _ => return Err(Error::NoSuchCore),
    };
    let n = n as usize;
    // The answer must fit before anything is granted.
    let bytes = n * core::mem::size_of::<u64>();
    crate::arch::x86_64::syscall::probe_writable(buf, bytes)?;
    let cell = TicketLock::new(Grant { owner, n, role, near, granted: [0; MAX_CORES / 64], result: Err(Error::Busy) });
    on_sched_core(&|| {
        let mut g = cell.lock();
        let r = grant(&mut g);
        g.result = r;
    });
    let g = cell.lock();
    g.result?;
    let granted = g.granted;
    drop(g);
    // The set bits, ascending (a word at a time: most of the 256 bits are clear).
    let cores = || {
        granted.iter().enumerate().flat_map(|(w, &bits)| {
            let mut left = bits;
            core::iter::from_fn(move || {
                (left != 0).then(|| {
                    let b = left.trailing_zeros() as usize;
                    left &= left - 1;
                    w * 64 + b
                })
            })
        })
    };
    // The indices go out in chunks (one user copy per 16 cores), ascending.
    let mut chunk = [0u8; 16 * 8];
    let (mut k, mut at) = (0, buf);
    let mut copied = Ok(());
    for c in cores() {
        chunk[k * 8..k * 8 + 8].copy_from_slice(&(c as u64).to_le_bytes());
        k += 1;
        if k == 16 {
            copied = copied.and_then(|_| crate::arch::x86_64::syscall::copy_to_user(at, &chunk));
            at += chunk.len() as u64;
            k = 0;
        }
    }
    if k > 0 {
        copied = copied.and_then(|_| crate::arch::x86_64::syscall::copy_to_user(at, &chunk[..k * 8]));
    }
    if let Err(e) = copied {
        // The buffer went away after the probe (another core unmapped it): give the cores
        // back, so the failed call leaves nothing behind.
        for c in cores() {
            let _ = release_one(owner, c);
        }
        return Err(e);
    }
    Ok(n as u64)
}

/// On core 0: pick `g.n` free cores, nearest to `g.near` first, set their role if asked,
/// and record them as granted. All or nothing.
fn grant(g: &mut Grant) -> Result<(), Error> {
    let online = percpu::online_count();
    let mut free = [0u16; MAX_CORES];
    let mut k = 0;
    for c in (0..online).filter(|&c| c != SCHED_CORE) {
        let Some(area) = percpu::get(c) else { continue };
        let idle = area.online.load(Ordering::Acquire) && !area.busy.load(Ordering::Acquire);
        if idle && area.role.load(Ordering::Acquire) != ROLE_KC && GRANTS[c].load(Ordering::Relaxed) == 0 {
            free[k] = c as u16;
            k += 1;
        }
    }
    if k < g.n {
        return Err(Error::Busy);
    }
    let near = g.near;
    let key = |c: &u16| {
        let (level, distance) = crate::topology::locality_get(near, *c as usize).map(|(l, d)| (l as u8, d)).unwrap_or((9, 255));
        (level, distance, *c)
    };
    free[..k].sort_unstable_by_key(key);
    let chosen = &free[..g.n];
    if g.role != GRANT_ROLE_ANY {
        let mut old = [0u8; MAX_CORES];
        for (i, &c) in chosen.iter().enumerate() {
            let was = crate::roles::role_of(c as usize).unwrap_or(ROLE_XC);
            old[i] = was as u8; // roles are 0..=3
            if was == g.role {
                continue;
            }
            if let Err(e) = crate::roles::set_role(c as usize, g.role) {
                // Put back the roles changed so far: a refused request changes nothing.
                for (j, &d) in chosen[..i].iter().enumerate() {
                    let _ = crate::roles::set_role(d as usize, old[j] as u64);
                }
                return Err(e);
            }
        }
    }
    for &c in chosen {
        GRANTS[c as usize].store(g.owner, Ordering::Release);
        g.granted[c as usize / 64] |= 1 << (c % 64);
    }
    Ok(())
}

/// Release `core` from `owner` (a message to core 0).
fn release_one(owner: u64, core: usize) -> Result<u64, Error> {
    let result = TicketLock::new(Err(Error::NotFound));
    on_sched_core(&|| {
        let r = if core == usize::MAX {
            let mut n = 0;
            for g in GRANTS.iter().take(percpu::online_count()) {
                if g.load(Ordering::Relaxed) == owner {
                    g.store(0, Ordering::Release);
                    n += 1;
                }
            }
            Ok(n)
        } else if GRANTS[core].load(Ordering::Relaxed) == owner {
            GRANTS[core].store(0, Ordering::Release);
            Ok(1)
        } else {
            Err(Error::NotFound)
        };
        *result.lock() = r;
    });
    let r = *result.lock();
    r
}

/// `core_release(core)` (see `abi::nr::CORE_RELEASE`).
pub fn release(core: u64) -> Result<u64, Error> {
    if !enabled() {
        return Err(Error::Unsupported);
    }
    let owner = owner()?;
    if core == CORE_ALL {
        return release_one(owner, usize::MAX);
    }
    if core >= percpu::online_count() as u64 {
        return Err(Error::NoSuchCore);
    }
    // Not ours: refuse without a message (the table is read-only here, and only core 0
    // could change this entry, to free, which would still not make it ours).
    if GRANTS[core as usize].load(Ordering::Acquire) != owner {
        return Err(Error::NotFound);
    }
    release_one(owner, core as usize)
}

/// `pcore_run` onto `target`: `NotPermitted` if the core is granted to another context.
pub fn check_run(target: usize) -> Result<(), Error> {
    if !enabled() {
        return Ok(());
    }
    let holder = granted_to(target);
    if holder == 0 || Ok(holder) == owner() {
        return Ok(());
    }
    Err(Error::NotPermitted)
}

/// A context whose root share is `owner` has ended: release what it still holds. Called
/// with interrupts enabled (it waits for core 0).
pub fn owner_gone(owner: u64) {
    if !enabled() {
        return;
    }
    if GRANTS.iter().take(percpu::online_count()).any(|g| g.load(Ordering::Acquire) == owner) {
        let _ = release_one(owner, usize::MAX);
    }
}
