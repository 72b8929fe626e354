//! Definitions shared by the host tool (`xtask`) and the guest programs (`user/apps`,
//! `bench`): tables both sides enumerate in the same order, so that an index or a name means
//! the same case on each. `no_std`, no dependencies and no allocation, so the crate builds for
//! the host and for `x86_64-unknown-none` alike.
//!
//! | module | shared by |
//! | --- | --- |
//! | `bench_catalog` | the benchmark suite (`bench::catalog`) and `cargo xtask bench` |
//! | `commute_cases` | the kernel commutativity cases: `user/apps/src/bin/commute.rs` and `cargo xtask commute` |
//! | `posix_cases` | the POSIX commutativity cases: `bench::commute_posix` and `cargo xtask commute-posix` |
//! | `pairs` | the enumeration of cases (pairs of calls) both commutativity tables use |
//! | `fstest_files` | the files of `fstest`'s disk image: `fstest`, `fscrash` and `cargo xtask fs` |

#![no_std]

pub mod bench_catalog;
pub mod commute_cases;
pub mod fstest_files;
pub mod pairs;
pub mod posix_cases;
