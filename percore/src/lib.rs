//! Scalable primitives shared by the kernel and host tools.
//!
//! `no_std` (with `alloc`) by default; the `std` feature supplies core identity from a
//! registered thread index so the same code can be stress-tested on the host. Under
//! `cfg(loom)` the protocols' atomics are loom's, for model checking (tests/loom.rs).
//!
//! | module | what | after |
//! | --- | --- | --- |
//! | [`cpu`] | core identity, core count, interrupt save/restore hooks | |
//! | [`per_core`] | `PerCore<T>`: one 128-byte slot per core | Corey, Tornado |
//! | [`spin`] | ticket lock | |
//! | [`mcs`] | MCS queue lock (qspinlock-style fast path) | Corey fig. 3 |
//! | [`rwlock`] | scalable reader-writer lock (per-core reader counts, MCS writer queue) | Corey §2 |
//! | [`seqlock`] | generation-counter lock-free reads/comparison | Linux dentry (seeds/002) |
//! | [`seqparts`] | a seqlock split into parts (a generation and a lock per part, each on its own line): writers of different parts of one array do not disturb each other's readers | |
//! | [`counter`] | `SloppyCounter`, `DistributedCounter` | seeds/002, Tornado fig. 1 |
//! | [`clustered`] | clustered objects, miss handling, policies | Tornado §3 |
//! | [`reclaim`] | existence guarantees by quiescence (token over per-core counts) | Tornado §5 |
//! | [`stripe`] | striped try-locks keyed by an object number; the first of an operation's stripes waits, later ones only if free | |
//! | [`spsc`] | single-producer single-consumer message ring, sequence-tagged slots | NIX, Corey's rings |
//! | [`poll`] | `PollWindow`: poll while work comes, sleep after a stretch of empty looks, and at once for a while after the host descheduled the poller | NAPI, IX, KVM halt-polling |
//! | [`slab`] | per-core object cache over a backend (page slabs, heap) | Tornado §4 |
//! | [`fdtable`] | descriptor table in shared memory: lock-free slot allocation, `fget`-style references | Linux `files_struct`, Corey fig. 1 |
//! | [`selftest`] | the all-cores stress the kernel runs (and the host, on threads) | |
#![cfg_attr(not(feature = "std"), no_std)]

extern crate alloc;

mod sync;

pub mod borrow;
pub mod clustered;
pub mod counter;
pub mod cpu;
pub mod fdtable;
pub mod mcs;
pub mod pad;
pub mod per_core;
pub mod poll;
pub mod reclaim;
pub mod rwlock;
pub mod seqlock;
pub mod seqparts;
pub mod selftest;
pub mod slab;
pub mod spin;
pub mod spsc;
pub mod stripe;

pub use borrow::{BorrowSlots, DropState, BORROW_SLOTS};
pub use clustered::{ClusteredObject, Policy, RepInfo};
pub use counter::{DistributedCounter, SloppyCounter};
pub use cpu::{core_count, cpu_id, MAX_CORES};
pub use mcs::{IrqMcsLock, McsGuard, McsLock};
pub use pad::CachePadded;
pub use per_core::PerCore;
pub use reclaim::{Domain, Operation};
pub use rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use seqlock::{ReadPath, SeqData, SeqLock, WordsWriter};
pub use slab::{HeapBackend, ObjectBackend, ObjectCache, PageSlab, PageSource};
pub use spin::{IrqTicketLock, TicketLock, TicketLockGuard};
pub use stripe::{StripeBusy, StripeLocks};

/// True when built with `--cfg loom` (the primitives then use loom's atomics); the loom
/// tests assert it so that a build that silently lost the cfg cannot pass vacuously.
#[doc(hidden)]
pub const MODEL_CHECKED: bool = cfg!(loom);
