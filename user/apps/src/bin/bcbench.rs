//! bcbench: instructions and disk reads per cached 4 KiB block read through the buffer cache
//! (crate `bcache`), with one core and with two cores sharing one cache: core 0 and a cfork'd
//! child on core 1 given the cache (`fs::cache_sharing`), each with its own file-system lock,
//! both reading the same cached pages. Each reader marks its own vCPU's region around its
//! reads, so `cargo xtask plugin insncount` gives instructions per read per vCPU.
//!
//! `init=bcbench -- cores=1|2 [iters=N]` on a disk (e.g. `cargo xtask fs fstest-image IMG`).
//! Prints `bench name=bcache_read_cN ops=N` and the disk reads during the region.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec;
use libos::cfork::{cfork, CforkOpts};
use libos::fs;
use libos::println;

libos::main!(main);

#[path = "../common/marker.rs"]
mod marker;


const PATH: &str = "/bcbench.dat";
const PAGES: u64 = 16;

/// `iters` reads of 4 KiB, page after page, inside this vCPU's marked region. 0 if every read
/// returned the page's bytes.
fn reader(iters: u64) -> u64 {
    let Ok(fd) = fs::open(PATH, fs::O_RDONLY) else { return 1 };
    let mut buf = vec![0u8; 4096];
    // One round outside the region: the descriptor's and this core's first-use costs.
    for p in 0..PAGES {
        let _ = fs::pread(fd, &mut buf, p * 4096);
    }
    marker::region(true);
    let mut bad = 0;
    for i in 0..iters {
        let p = i % PAGES;
        if fs::pread(fd, &mut buf, p * 4096) != Ok(4096) || buf[0] != p as u8 || buf[4095] != p as u8 {
            bad += 1;
        }
    }
    marker::region(false);
    let _ = fs::close(fd);
    if bad == 0 { 0 } else { 2 }
}

fn main(args: &'static str) -> u64 {
    let mut cores = 1;
    let mut iters = 2000;
    for a in args.split_whitespace() {
        if let Some(v) = a.strip_prefix("cores=") {
            cores = v.parse().unwrap_or(1);
        } else if let Some(v) = a.strip_prefix("iters=") {
            iters = v.parse().unwrap_or(2000);
        }
    }
    if let Err(e) = fs::mount() {
        println!("bcbench: mount: {e:?}");
        return 1;
    }
    let Ok(fd) = fs::open(PATH, fs::O_RDWR | fs::O_CREAT | fs::O_TRUNC) else { return 1 };
    for p in 0..PAGES {
        if fs::pwrite(fd, &vec![p as u8; 4096], p * 4096) != Ok(4096) {
            return 1;
        }
    }
    let _ = fs::close(fd);
    if fs::sync().is_err() {
        return 1;
    }
    let (c0, d0) = fs::cache_stats().unwrap_or_default();
    let code = if cores >= 2 {
        let Ok(s) = fs::cache_sharing() else { return 1 };
        let (shares, segs, ranges) = ([s.share], [s.request_seg], [s.range]);
        let child = match cfork(1, &CforkOpts { shares: &shares, segments: &segs, ranges: &ranges }, reader, iters) {
            Ok(c) => c,
            Err(e) => {
                println!("bcbench: cfork: {e:?}");
                return 1;
            }
        };
        let here = reader(iters);
        let there = child.join().unwrap_or(99);
        here.max(there)
    } else {
        reader(iters)
    };
    let (c1, d1) = fs::cache_stats().unwrap_or_default();
    println!(
        "bcbench: cores={cores} iters={iters} per core: {} cache hits, {} misses, {} disk reads (all cores)",
        c1.hits - c0.hits,
        c1.misses - c0.misses,
        d1.packets_in - d0.packets_in
    );
    println!("bench name=bcache_read_c{cores} ops={}", iters * cores);
    let _ = fs::unlink(PATH);
    code
}
