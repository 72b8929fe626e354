//! Scalable primitives shared by the kernel and host tools.
//!
//! `no_std` by default; the `std` feature supplies core identity from a registered thread
//! index so the same code can be stress-tested on the host.
#![cfg_attr(not(feature = "std"), no_std)]

pub mod cpu;
pub mod pad;
pub mod spin;

pub use cpu::{core_count, cpu_id, MAX_CORES};
pub use pad::CachePadded;
pub use spin::{IrqTicketLock, TicketLock, TicketLockGuard};
