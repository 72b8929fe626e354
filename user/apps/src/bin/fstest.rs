//! fstest: the block device object under bad input, and the ext2 file system in the library
//! OS read byte for byte, corrupt metadata included (docs/fs.md). Needs a disk made from
//! `testdefs::fstest_files` (`cargo xtask test` makes it; by hand: `cargo xtask fs
//! fstest-image IMG`). Corruptions are made in the buffer cache only, and the sectors the
//! round-trip test writes are restored; the write test leaves its files in `/guest` (the host
//! reads them back after `e2fsck -fn`). Each test says which bug it catches.
//!
//! Usage: `fstest [NAME...]` (default: all).
#![no_std]
#![no_main]

extern crate alloc;

use abi::{nr, DeviceBuf, Error, ObjName, BLK_MAX_REQUEST, BLK_SECTOR, BUF_BLK_FLUSH, BUF_BLK_READ, BUF_BLK_WRITE, COPY_ON_WRITE, DEVICE_BLOCK, HWID_PCI_BASE, MEMID_SELF, PAGE_SIZE};
use alloc::vec;
use alloc::vec::Vec;
use libos::fs::cache::Cache;
use libos::fs::disk::{find_disk, BlockDevice};
use libos::fs::ext2::{Disk, Ext2};
use libos::fs::{self as fs, FsError};
use core::sync::atomic::{AtomicU64, Ordering};
use libos::{println, sys};
use libos::cfork::{cfork, CforkOpts};

#[path = "../common/testkit.rs"]
#[macro_use]
mod testkit;
use testkit::*;

use testdefs::fstest_files as files;

#[path = "../common/fstest_fdtables.rs"]
mod fdtables;

#[path = "../common/fstest_devmem.rs"]
mod devmem;

libos::main!(main);

const SCRATCH: u64 = libos::layout::SCRATCH_BASE + (256 << 20);

fn disk_hwid() -> Result<u64, Msg> {
    match find_disk() {
        Ok(d) => Ok(d.hwid),
        Err(e) => Err(Msg::new(format_args!("no disk listed ({e:?}): boot with --disk IMG"))),
    }
}

fn blk_raw(hwid: u64, seg: ObjName, reserved: u64) -> Result<u64, Error> {
    raw(nr::DEVICE_ALLOC, [root(), hwid, MEMID_SELF, seg.share, seg.object, reserved])
}

fn seg(bytes: u64) -> Result<Del, Msg> {
    Ok(Del(ObjName::new(root(), ok!(sys::segment_alloc(root(), "t", MEMID_SELF, bytes)))))
}

fn req(dev: ObjName, kind: u64, sector: u64, reserved: u64, offset: u64, len: u64) -> Result<u64, Error> {
    sys::device_buf(dev, &DeviceBuf { seg: ObjName::new(sector, reserved), offset, len, buf_type: kind })
}

/// Catches: a disk that is not listed, or listed with the wrong kind or hwid range.
fn disk_is_listed() -> TestResult {
    let mut l = [abi::DeviceInfo::default(); 16];
    let n = ok!(sys::device_list(&mut l)) as usize;
    let disks = l[..n].iter().filter(|d| d.kind == DEVICE_BLOCK && d.hwid >= HWID_PCI_BASE).count();
    ensure!(disks == 1, "{disks} disks listed, want 1");
    Ok(Pass::Ok)
}

/// Catches: device_alloc of a disk that trusts its arguments, lets two objects drive one disk,
/// or never gives the disk back (a leaked owner entry) after a free or a failed attempt.
fn blk_alloc_checks_its_arguments() -> TestResult {
    let hwid = disk_hwid()?;
    let s = seg(64 << 10)?;
    err!(blk_raw(hwid, s.0, 1), Error::InvalidArgument);
    err!(blk_raw(hwid, ObjName::new(root(), 12345), 0), Error::NoSuchObject);
    err!(blk_raw(HWID_PCI_BASE + 0xFFFF, s.0, 0), Error::NotFound);
    let empty = seg(0)?;
    err!(blk_raw(hwid, empty.0, 0), Error::OutOfRange);
    let d = Del(ObjName::new(root(), ok!(blk_raw(hwid, s.0, 0))));
    err!(blk_raw(hwid, d.0, 0), Error::WrongType | Error::Busy);
    let s2 = seg(64 << 10)?;
    err!(blk_raw(hwid, s2.0, 0), Error::Busy);
    // Pinned while the object lives.
    err!(sys::segment_copy(root(), s.0, "cow", COPY_ON_WRITE), Error::Busy);
    err!(sys::segment_set_nbytes(s.0, PAGE_SIZE), Error::Busy);
    drop(d);
    for _ in 0..3 {
        drop(Del(ObjName::new(root(), ok!(blk_raw(hwid, s2.0, 0)))));
    }
    ok!(sys::segment_set_nbytes(s.0, PAGE_SIZE));
    Ok(Pass::Ok)
}

/// Catches: device_buf trusting sector numbers, offsets, lengths or types (a read past the
/// disk, a DMA past the pinned pages, the driver's assertion on a partial sector: a panic).
fn blk_buf_checks_its_arguments() -> TestResult {
    let hwid = disk_hwid()?;
    let seg_bytes = 64 << 10;
    let s = seg(seg_bytes)?;
    let d = Del(ObjName::new(root(), ok!(blk_raw(hwid, s.0, 0))));
    let cap = ok!(sys::device_stat(d.0)).buffers;
    ensure!(cap >= 2048, "capacity {cap} sectors: the test image is at least 1 MiB");
    err!(req(d.0, BUF_BLK_READ, 0, 0, 100, 512), Error::Misaligned);
    err!(req(d.0, BUF_BLK_READ, 0, 0, 0, 100), Error::Misaligned);
    err!(req(d.0, BUF_BLK_READ, 0, 0, 0, 0), Error::InvalidArgument);
    err!(req(d.0, BUF_BLK_READ, 0, 0, 0, BLK_MAX_REQUEST + 512), Error::InvalidArgument);
    err!(req(d.0, BUF_BLK_READ, cap, 0, 0, 512), Error::OutOfRange);
    err!(req(d.0, BUF_BLK_READ, cap - 1, 0, 0, 1024), Error::OutOfRange);
    err!(req(d.0, BUF_BLK_WRITE, u64::MAX, 0, 0, 512), Error::OutOfRange);
    err!(req(d.0, BUF_BLK_READ, 0, 0, seg_bytes, 512), Error::OutOfRange);
    err!(req(d.0, BUF_BLK_READ, 0, 0, seg_bytes - 512, 1024), Error::OutOfRange);
    err!(req(d.0, BUF_BLK_READ, 0, 0, u64::MAX - 511, 512), Error::OutOfRange);
    err!(req(d.0, BUF_BLK_READ, 0, 7, 0, 512), Error::InvalidArgument);
    err!(req(d.0, 0x99, 0, 0, 0, 512), Error::Unsupported);
    err!(req(d.0, BUF_BLK_FLUSH, 1, 0, 0, 0), Error::InvalidArgument);
    ok!(req(d.0, BUF_BLK_FLUSH, 0, 0, 0, 0));
    // Growing the segment does not let requests reach the new pages (not pinned).
    ok!(sys::segment_set_nbytes(s.0, seg_bytes * 2));
    err!(req(d.0, BUF_BLK_READ, 0, 0, seg_bytes, 512), Error::OutOfRange);
    let st = ok!(sys::device_stat(d.0));
    ensure!(st.errors == 0 && st.packets_in == 0 && st.packets_out == 0, "refused requests were counted: {st:?}");
    ensure!(st.drops == 1, "one flush, counted {}", st.drops);
    Ok(Pass::Ok)
}

fn words(va: u64, len: usize) -> &'static mut [u8] {
    // SAFETY: the callers map `len` bytes read-write at `va` (SCRATCH) for the test's duration
    // and nothing else uses that window.
    unsafe { core::slice::from_raw_parts_mut(va as *mut u8, len) }
}

/// Catches: reads that land at the wrong offset or sector (per-page splitting of a request
/// that spans pages of the segment), writes that do not reach the disk, wrong counters.
fn blk_round_trip() -> TestResult {
    let hwid = disk_hwid()?;
    let seg_bytes: u64 = 64 << 10;
    let s = seg(seg_bytes)?;
    let d = Del(ObjName::new(root(), ok!(blk_raw(hwid, s.0, 0))));
    let cap = ok!(sys::device_stat(d.0)).buffers;
    ok!(sys::ar_set_seg(rar(), &abi::SegMapping { voff: SCRATCH, seg: s.0, soff: 0, len: seg_bytes, flags: abi::MAP_READ | abi::MAP_WRITE }));
    let r = (|| -> TestResult {
        let m = words(SCRATCH, seg_bytes as usize);
        // The superblock: sectors 2 and 3, read to an offset that is not page-aligned.
        ok!(req(d.0, BUF_BLK_READ, 2, 0, 512, 1024));
        ensure!(m[512 + 56] == 0x53 && m[512 + 57] == 0xEF, "no ext2 magic at byte 1080 of the disk");
        // The last 16 sectors: save (to offset 32 KiB), write a pattern crossing a page
        // boundary of the segment (from offset 2048), read it back elsewhere, restore.
        let (first, len) = (cap - 16, 16 * BLK_SECTOR);
        ok!(req(d.0, BUF_BLK_READ, first, 0, 32 << 10, len));
        for i in 0..len as usize {
            m[2048 + i] = (i * 7 + 3) as u8;
        }
        ok!(req(d.0, BUF_BLK_WRITE, first, 0, 2048, len));
        m[16384..16384 + len as usize].fill(0);
        ok!(req(d.0, BUF_BLK_READ, first, 0, 16384, len));
        for i in 0..len as usize {
            ensure!(m[16384 + i] == (i * 7 + 3) as u8, "byte {i} of the written sectors read back wrong");
        }
        ok!(req(d.0, BUF_BLK_WRITE, first, 0, 32 << 10, len));
        ok!(req(d.0, BUF_BLK_FLUSH, 0, 0, 0, 0));
        let st = ok!(sys::device_stat(d.0));
        ensure!(st.packets_in == 3 && st.packets_out == 2, "requests counted {}/{}, want 3 reads 2 writes", st.packets_in, st.packets_out);
        ensure!(st.bytes_in == 1024 + 2 * len && st.bytes_out == 2 * len, "bytes counted {}/{}", st.bytes_in, st.bytes_out);
        Ok(Pass::Ok)
    })();
    ok!(sys::ar_unmap(rar(), SCRATCH, seg_bytes));
    r
}

fn fs_ok<T>(what: &str, r: Result<T, FsError>) -> Result<T, Msg> {
    r.map_err(|e| Msg::new(format_args!("{what}: {e:?}")))
}

/// Catches: wrong block mapping (direct, single and double indirect), reads that stop early
/// or run past the end, offsets that do not advance, pread moving the offset.
fn reads_every_file() -> TestResult {
    fs_ok("mount", fs::mount())?;
    let mut buf = vec![0u8; 3000];
    for (path, len, seed) in files::FILES {
        let st = fs_ok(path, fs::stat(path))?;
        ensure!(st.size == len as u64 && st.mode & fs::S_IFMT == fs::S_IFREG, "{path}: stat size {} mode {:o}", st.size, st.mode);
        let fd = fs_ok(path, fs::open(path, fs::O_RDONLY))?;
        let mut at = 0usize;
        loop {
            // Odd chunk sizes: reads straddle block boundaries.
            let n = fs_ok(path, fs::read(fd, &mut buf))?;
            if n == 0 {
                break;
            }
            for (k, &b) in buf[..n].iter().enumerate() {
                ensure!(b == files::byte(seed, at + k), "{path}: byte {} is {b:#x}, want {:#x}", at + k, files::byte(seed, at + k));
            }
            at += n;
            ensure!(at <= len, "{path}: read past the end");
        }
        ensure!(at == len, "{path}: read {at} bytes of {len}");
        if len > 10_000 {
            let off = len as u64 - 5000;
            let n = fs_ok(path, fs::pread(fd, &mut buf, off))?;
            ensure!(n == 3000 && (0..n).all(|k| buf[k] == files::byte(seed, off as usize + k)), "{path}: pread at {off}");
            ensure!(fs_ok(path, fs::read(fd, &mut buf))? == 0, "{path}: pread moved the offset");
            ensure!(fs_ok(path, fs::lseek(fd, -10, fs::SEEK_END))? == len as u64 - 10, "{path}: lseek end");
            ensure!(fs_ok(path, fs::read(fd, &mut buf))? == 10, "{path}: read after lseek");
        }
        ensure!(fs_ok(path, fs::fstat(fd))? == st, "{path}: fstat differs from stat");
        fs_ok(path, fs::close(fd))?;
    }
    Ok(Pass::Ok)
}

/// Catches: bad path walking (`.`, `..` at the root, repeated slashes), names compared by
/// prefix, descriptors usable after close, writes allowed on a read-only implementation.
fn names_and_descriptors() -> TestResult {
    fs_ok("mount", fs::mount())?;
    let sub = fs_ok("readdir /sub", fs::readdir("/sub"))?;
    let long: Vec<u8> = vec![files::LONG_NAME_BYTE; files::LONG_NAME_LEN];
    for want in [&b"."[..], b"..", b"inner.txt", b"deeper", &long] {
        ensure!(sub.iter().any(|e| e.name == want), "/sub lacks an entry of {} bytes", want.len());
    }
    ensure!(sub.len() == 5, "/sub has {} entries, want 5", sub.len());
    ensure!(fs_ok("..", fs::stat("/../..//./sub/../hello.txt"))?.size == files::HELLO.len() as u64, "`..` walk");
    err!(fs::stat("/hello"), FsError::NotFound);
    err!(fs::stat("/hello.txt/x"), FsError::NotDir);
    err!(fs::stat("/sub/inner"), FsError::NotFound);
    let too_long = alloc::format!("/{}", "x".repeat(256));
    err!(fs::stat(&too_long), FsError::NameTooLong);
    let d = fs_ok("stat /sub", fs::stat("/sub"))?;
    ensure!(d.mode & fs::S_IFMT == fs::S_IFDIR, "/sub is not a directory");
    let fd = fs_ok("open", fs::open("/sub", fs::O_RDONLY))?;
    err!(fs::read(fd, &mut [0u8; 8]), FsError::IsDir);
    fs_ok("close", fs::close(fd))?;
    err!(fs::close(fd), FsError::BadDescriptor);
    err!(fs::read(fd, &mut [0u8; 8]), FsError::BadDescriptor);
    err!(fs::lseek(fs::Fd(9999), 0, fs::SEEK_SET), FsError::BadDescriptor);
    // openat: relative to a directory descriptor (`..` out of it too), absolute ignores it.
    let dir = fs_ok("open /sub", fs::open("/sub", fs::O_RDONLY))?;
    for (rel, want) in [("deeper/leaf", 5000u64), ("../hello.txt", files::HELLO.len() as u64), ("/one", 1), ("./inner.txt", 6)] {
        let f = fs_ok(rel, fs::openat(dir, rel, fs::O_RDONLY))?;
        ensure!(fs_ok(rel, fs::fstat(f))?.size == want, "openat {rel}");
        fs_ok("close", fs::close(f))?;
    }
    let f = fs_ok("open", fs::open("/one", fs::O_RDONLY))?;
    err!(fs::openat(f, "x", fs::O_RDONLY), FsError::NotDir);
    fs_ok("close", fs::close(f))?;
    ensure!(fs_ok("stat", fs::stat("inner.txt")).is_err(), "a relative path after openat still starts in /sub");
    fs_ok("close", fs::close(dir))?;
    let fd = fs_ok("open", fs::open("/one", fs::O_RDONLY))?;
    err!(fs::lseek(fd, -1, fs::SEEK_SET), FsError::InvalidArgument);
    err!(fs::lseek(fd, 0, 7), FsError::InvalidArgument);
    fs_ok("close", fs::close(fd))?;
    Ok(Pass::Ok)
}

/// Files and directories as descriptors of the common table (`fd::open`, docs/fs.md,
/// "Names and descriptors"), beside a console and a pipe: dup within and across the private and
/// process-wide tables shares the offset, fstat works on every kind, close of the last
/// descriptor closes `fs`'s, and closed descriptors are refused. Catches: an `fs` descriptor
/// closed while a dup still uses it (or never closed), dups with separate offsets, fstat
/// answering for the wrong kind.
fn files_in_the_descriptor_table() -> TestResult {
    use libos::fd::{self, Kind, Scope};
    fs_ok("mount", fs::mount())?;
    let c0 = fd::proc_counts();
    let f = fs_ok("fd::open", fd::open(Scope::Process, "/hello.txt", fs::O_RDONLY))?;
    ensure!(matches!(fd::kind(f), Ok(Kind::Fs(_))), "kind {:?}", fd::kind(f));
    let st = fd::fstat(f).map_err(|e| Msg::new(format_args!("fstat: {e:?}")))?;
    ensure!(st.size == files::HELLO.len() as u64 && st.mode & fs::S_IFMT == fs::S_IFREG, "fstat size {} mode {:o}", st.size, st.mode);
    let d = fd::dup(f, Scope::Process).map_err(|e| Msg::new(format_args!("dup: {e:?}")))?;
    let p = fd::dup(f, Scope::Private).map_err(|e| Msg::new(format_args!("dup private: {e:?}")))?;
    let mut b = [0u8; 4];
    for (i, x) in [f, d, p].into_iter().enumerate() {
        let n = fd::read(x, &mut b).map_err(|e| Msg::new(format_args!("read {i}: {e:?}")))?;
        ensure!(n == 4 && b == files::HELLO[i * 4..i * 4 + 4], "read {i} gave {:?} ({n} bytes): offsets not shared", &b[..n]);
    }
    let n = fd::read_at(d, 6, &mut b).map_err(|e| Msg::new(format_args!("read_at: {e:?}")))?;
    ensure!(n == 4 && b == files::HELLO[6..10], "read_at");
    fd::close(f).map_err(|e| Msg::new(format_args!("close: {e:?}")))?;
    ensure!(fd::close(f) == Err(Error::NoSuchObject) && fd::read(f, &mut b).is_err() && fd::fstat(f).is_err(), "closed descriptor still usable");
    ensure!(fd::read(d, &mut b) == Ok(4) && b == files::HELLO[12..16], "a dup lost its file when the first descriptor closed");
    ensure!(fd::write(d, b"x").is_err(), "wrote through a read-only descriptor");
    fd::close(d).map_err(|e| Msg::new(format_args!("close d: {e:?}")))?;
    ensure!(fd::read(p, &mut b) == Ok(4) && b == files::HELLO[16..20], "the private dup lost its file");
    fd::close(p).map_err(|e| Msg::new(format_args!("close p: {e:?}")))?;
    ensure!(fd::proc_counts() == c0, "process-wide table left {:?} (before {c0:?})", fd::proc_counts());
    // A directory in the private table.
    let dir = fs_ok("fd::open /sub", fd::open(Scope::Private, "/sub", fs::O_RDONLY))?;
    let st = fd::fstat(dir).map_err(|e| Msg::new(format_args!("fstat dir: {e:?}")))?;
    ensure!(st.mode & fs::S_IFMT == fs::S_IFDIR, "/sub fstat mode {:o}", st.mode);
    ensure!(fd::read(dir, &mut b).is_err(), "read a directory");
    fd::close(dir).map_err(|e| Msg::new(format_args!("close dir: {e:?}")))?;
    ensure!(fd::fstat(dir).is_err(), "closed directory descriptor");
    err!(fd::open(Scope::Process, "/no-such-file", fs::O_RDONLY), FsError::NotFound);
    ensure!(fd::proc_counts() == c0, "a failed open changed the table: {:?}", fd::proc_counts());
    // Other kinds answer fstat too.
    let c = fd::open_console(Scope::Process).map_err(|e| Msg::new(format_args!("console: {e:?}")))?;
    ensure!(fd::fstat(c).map(|s| s.mode & fs::S_IFMT) == Ok(fd::S_IFCHR), "console fstat {:?}", fd::fstat(c));
    let (r, w) = fd::pipe(Scope::Process).map_err(|e| Msg::new(format_args!("pipe: {e:?}")))?;
    ensure!(fd::write(w, b"abc") == Ok(3), "pipe write");
    ensure!(fd::fstat(r).map(|s| (s.mode & fs::S_IFMT, s.size)) == Ok((fd::S_IFIFO, 3)), "pipe fstat {:?}", fd::fstat(r));
    for x in [c, r, w] {
        fd::close(x).map_err(|e| Msg::new(format_args!("close: {e:?}")))?;
    }
    fd::unmap_all();
    ensure!(fd::proc_counts() == c0, "left {:?}", fd::proc_counts());
    Ok(Pass::Ok)
}

/// One offset per open file description, and readiness, through the descriptor trait
/// (`fd::lseek`, `fd::poll`): an `lseek` through a private descriptor moves the offset its
/// process-wide dup reads from, and the dup's `SEEK_CUR` sees the read; streams have no
/// offset (`WrongType`, ESPIPE); a pipe polls as its ring and ends say (empty: not readable;
/// bytes: readable; no writer: hung up; no reader: a write is in error), a dup of an end
/// into the other table polls the same ring. Catches: a kind without `seek` (the trait's
/// default), a dup across tables with an offset of its own, a `poll` that always answers
/// ready.
fn one_offset_and_readiness_through_the_trait() -> TestResult {
    use libos::fd::{self, Ready, Scope};
    let e = |what: &'static str| move |x: Error| Msg::new(format_args!("{what}: {x:?}"));
    fs_ok("mount", fs::mount())?;
    let c0 = fd::proc_counts();
    let p = fs_ok("fd::open", fd::open(Scope::Private, "/hello.txt", fs::O_RDONLY))?;
    let d = fd::dup(p, Scope::Process).map_err(e("dup"))?;
    ensure!(fd::lseek(p, 6, fs::SEEK_SET) == Ok(6), "lseek SEEK_SET: {:?}", fd::lseek(p, 6, fs::SEEK_SET));
    let mut b = [0u8; 4];
    ensure!(fd::read(d, &mut b) == Ok(4) && b == files::HELLO[6..10], "the dup read {b:?} after the original's lseek: two offsets");
    ensure!(fd::lseek(p, 0, fs::SEEK_CUR) == Ok(10), "the original's offset after the dup's read: {:?}", fd::lseek(p, 0, fs::SEEK_CUR));
    ensure!(fd::lseek(d, -2, fs::SEEK_END) == Ok(files::HELLO.len() as u64 - 2), "SEEK_END: {:?}", fd::lseek(d, -2, fs::SEEK_END));
    ensure!(fd::read(p, &mut b) == Ok(2) && b[..2] == files::HELLO[files::HELLO.len() - 2..], "read after SEEK_END gave {b:?}");
    ensure!(fd::lseek(p, 0, 7) == Err(Error::InvalidArgument), "bad whence: {:?}", fd::lseek(p, 0, 7));
    ensure!(fd::poll(p) == Ok(Ready::ALWAYS), "a file polls {:?}", fd::poll(p));
    fd::close(p).map_err(e("close"))?;
    fd::close(d).map_err(e("close dup"))?;
    let (r, w) = fd::pipe(Scope::Private).map_err(e("pipe"))?;
    ensure!(fd::lseek(r, 0, fs::SEEK_CUR) == Err(Error::WrongType), "lseek of a pipe: {:?}", fd::lseek(r, 0, fs::SEEK_CUR));
    let empty_r = Ready { read: false, write: false, hangup: false, error: false };
    let room_w = Ready { read: false, write: true, hangup: false, error: false };
    ensure!(fd::poll(r) == Ok(empty_r) && fd::poll(w) == Ok(room_w), "new pipe polls {:?} / {:?}", fd::poll(r), fd::poll(w));
    ensure!(fd::write(w, b"abc") == Ok(3), "pipe write");
    let r2 = fd::dup(r, Scope::Process).map_err(e("dup read end"))?;
    for x in [r, r2] {
        ensure!(fd::poll(x).map(|q| (q.read, q.hangup)) == Ok((true, false)), "pipe with bytes polls {:?}", fd::poll(x));
    }
    fd::close(w).map_err(e("close w"))?;
    ensure!(fd::read(r2, &mut b) == Ok(3), "drain");
    ensure!(fd::poll(r) == Ok(Ready { read: true, write: false, hangup: true, error: false }), "no writer: {:?}", fd::poll(r));
    ensure!(fd::read(r, &mut b) == Ok(0), "end of file");
    let (r3, w3) = fd::pipe(Scope::Process).map_err(e("pipe 2"))?;
    fd::close(r3).map_err(e("close r3"))?;
    ensure!(fd::poll(w3).map(|q| q.error) == Ok(true) && fd::write(w3, b"x") == Err(Error::BrokenPipe), "no reader: {:?}", fd::poll(w3));
    for x in [r, r2, w3] {
        fd::close(x).map_err(e("close"))?;
    }
    fd::unmap_all();
    ensure!(fd::proc_counts() == c0, "left {:?} (before {c0:?})", fd::proc_counts());
    Ok(Pass::Ok)
}

/// Catches: a mount that trusts the superblock's counts (an inode table indexed past its end,
/// a group table read past the disk). The corruption is made in the cache only.
fn corrupt_superblock_is_refused() -> TestResult {
    fs_ok("unmount", fs::unmount())?;
    for (at, bytes, what) in [(0usize, [0xFF, 0xFF, 0xFF, 0x7F], "inode count"), (4, [0xFF, 0xFF, 0xFF, 0x7F], "block count"), (56, [0, 0, 0, 0], "magic")] {
        let dev = ok!(BlockDevice::open(libos::process::proc_share()));
        let mut cache = fs_ok("cache", Cache::with_pages(dev, 256))?;
        let mut sb = [0u8; 1024];
        fs_ok("read", cache.read_at(1024, &mut sb))?;
        sb[at..at + 4].copy_from_slice(&bytes);
        fs_ok("write", cache.write_at(1024, &sb))?;
        match Ext2::mount(cache) {
            Err(FsError::Corrupt(_)) => {}
            Err(e) => fail!("mount with a bad {what}: {e:?}, want Corrupt"),
            Ok(_) => fail!("mount with a bad {what} succeeded"),
        }
    }
    fs_ok("mount again", fs::mount())?;
    Ok(Pass::Ok)
}

/// Catches: directory parsing that trusts record lengths (an endless loop on 0, a read past
/// the block), and an error in one directory that breaks the rest of the file system.
fn corrupt_directory_entry_is_an_error() -> TestResult {
    fs_ok("unmount", fs::unmount())?;
    let dev = ok!(BlockDevice::open(libos::process::proc_share()));
    let mut fs = fs_ok("mount", Ext2::mount(fs_ok("cache", Cache::with_pages(dev, 256))?))?;
    let sub = fs_ok("resolve", fs.resolve(b"/sub"))?;
    let b = fs_ok("bmap", fs.bmap(&sub, 0))?;
    let mut blk = vec![0u8; fs.bs as usize];
    for rec_len in [0u16, 3, 6, 0xFFFC] {
        fs_ok("read", fs.dev.read_at(b * fs.bs, &mut blk))?;
        // The first entry is `.`: its rec_len at byte 4.
        blk[4..6].copy_from_slice(&rec_len.to_le_bytes());
        fs_ok("write", fs.dev.write_at(b * fs.bs, &blk))?;
        match fs.read_dir(&sub) {
            Err(FsError::Corrupt(_)) => {}
            other => fail!("rec_len {rec_len}: read_dir -> {:?}, want Corrupt", other.map(|v| v.len())),
        }
        err!(fs.resolve(b"/sub/inner.txt"), FsError::Corrupt(_));
        let h = fs_ok("hello", fs.resolve(b"/hello.txt"))?;
        let mut buf = [0u8; 64];
        let n = fs_ok("read hello", fs.read(&h, 0, &mut buf))?;
        ensure!(buf[..n] == *files::HELLO, "another file unreadable after a corrupt directory");
    }
    // Dropped without sync: the disk never saw the corruption.
    drop(fs);
    fs_ok("mount again", fs::mount())?;
    ensure!(fs_ok("readdir", fs::readdir("/sub"))?.len() == 5, "the disk kept the corruption");
    Ok(Pass::Ok)
}

/// Catches: writes lost at sync (dirty pages never written, the inode or the directory entry
/// not written), wrong block maps for new files, truncate not freeing or not zeroing, the
/// library calls' flags (O_EXCL, O_TRUNC, O_APPEND, read-only descriptors).
fn writes_survive_a_remount() -> TestResult {
    fs_ok("mount", fs::mount())?;
    let _ = fs::mkdir("/guest");
    fs_ok("mkdir", fs::mkdir("/guest/dir"))?;
    err!(fs::mkdir("/guest/dir"), FsError::Exists);
    for (path, len, seed) in files::GUEST_FILES {
        let data: Vec<u8> = (0..len).map(|i| files::byte(seed, i)).collect();
        // The small file is written under a temporary name and renamed into place.
        let tmp = alloc::format!("{path}.tmp");
        let wpath = if len < 1000 { tmp.as_str() } else { path };
        let fd = fs_ok(path, fs::open(wpath, fs::O_WRONLY | fs::O_CREAT | fs::O_EXCL))?;
        err!(fs::open(wpath, fs::O_WRONLY | fs::O_CREAT | fs::O_EXCL), FsError::Exists);
        let mut at = 0;
        for piece in data.chunks(7777) {
            ensure!(fs_ok(path, fs::write(fd, piece))? == piece.len(), "{path}: short write");
            at += piece.len();
        }
        ensure!(at == len, "{path}");
        if path.ends_with("trunc.bin") {
            // Longer first, then cut back: the tail must be freed and read as zeros later.
            let more: Vec<u8> = (0..250_000).map(|i| (i % 251) as u8 + 1).collect();
            fs_ok(path, fs::pwrite(fd, &more, len as u64))?;
            fs_ok(path, fs::ftruncate(fd, len as u64))?;
        }
        fs_ok(path, fs::fsync(fd))?;
        fs_ok(path, fs::close(fd))?;
        if wpath != path {
            fs_ok("rename", fs::rename(wpath, path))?;
            err!(fs::stat(wpath), FsError::NotFound);
        }
    }
    // O_APPEND and O_TRUNC, and a read-only descriptor refusing writes.
    let fd = fs_ok("gone", fs::open("/guest/gone.txt", fs::O_WRONLY | fs::O_CREAT))?;
    fs_ok("w", fs::write(fd, b"first "))?;
    fs_ok("c", fs::close(fd))?;
    let fd = fs_ok("gone", fs::open("/guest/gone.txt", fs::O_WRONLY | fs::O_APPEND))?;
    fs_ok("lseek", fs::lseek(fd, 0, fs::SEEK_SET))?;
    fs_ok("w", fs::write(fd, b"second"))?;
    fs_ok("c", fs::close(fd))?;
    ensure!(fs_ok("read", fs::read_all("/guest/gone.txt", 100))? == b"first second", "O_APPEND");
    let fd = fs_ok("gone", fs::open("/guest/gone.txt", fs::O_RDWR | fs::O_TRUNC))?;
    ensure!(fs_ok("fstat", fs::fstat(fd))?.size == 0, "O_TRUNC");
    fs_ok("c", fs::close(fd))?;
    let fd = fs_ok("ro", fs::open("/guest/gone.txt", fs::O_RDONLY))?;
    err!(fs::write(fd, b"x"), FsError::BadDescriptor);
    fs_ok("c", fs::close(fd))?;
    err!(fs::open("/guest", fs::O_WRONLY), FsError::IsDir);
    err!(fs::write(fs::Fd(4242), b"x"), FsError::BadDescriptor);
    fs_ok("unlink", fs::unlink("/guest/gone.txt"))?;
    fs_ok("mkdir", fs::mkdir("/guest/gonedir"))?;
    err!(fs::rmdir("/guest/dir"), FsError::NotEmpty);
    err!(fs::rmdir("/"), FsError::InvalidArgument);
    fs_ok("rmdir", fs::rmdir("/guest/gonedir"))?;
    // openat with O_CREAT makes the file in the directory given.
    let gd = fs_ok("open /guest", fs::open("/guest", fs::O_RDONLY))?;
    let f = fs_ok("openat creat", fs::openat(gd, "dir/at-made", fs::O_WRONLY | fs::O_CREAT | fs::O_EXCL))?;
    fs_ok("close", fs::close(f))?;
    fs_ok("close", fs::close(gd))?;
    fs_ok("stat", fs::stat("/guest/dir/at-made"))?;
    fs_ok("unlink", fs::unlink("/guest/dir/at-made"))?;
    // dup shares the offset; a file unlinked while open stays readable until its last close,
    // then its blocks come back.
    let free0 = fs_ok("df", fs::df())?.free_blocks;
    let fd = fs_ok("orphan", fs::open("/guest/orphan", fs::O_RDWR | fs::O_CREAT))?;
    let data: Vec<u8> = (0..50_000).map(|i| files::byte(77, i)).collect();
    ensure!(fs_ok("w", fs::write(fd, &data))? == data.len(), "orphan write");
    let fd2 = fs_ok("dup", fs::dup(fd))?;
    fs_ok("lseek", fs::lseek(fd, 0, fs::SEEK_SET))?;
    let mut b = [0u8; 100];
    fs_ok("read", fs::read(fd, &mut b))?;
    ensure!(fs_ok("lseek", fs::lseek(fd2, 0, fs::SEEK_CUR))? == 100, "dup does not share the offset");
    fs_ok("unlink", fs::unlink("/guest/orphan"))?;
    err!(fs::stat("/guest/orphan"), FsError::NotFound);
    fs_ok("close", fs::close(fd))?;
    let mut back = vec![0u8; 50_000];
    ensure!(fs_ok("pread", fs::pread(fd2, &mut back, 0))? == 50_000 && back == data, "an unlinked open file lost its data");
    ensure!(fs_ok("df", fs::df())?.free_blocks < free0, "freed while still open");
    fs_ok("close", fs::close(fd2))?;
    // (+1: the directory may have grown a block for the name.)
    ensure!(fs_ok("df", fs::df())?.free_blocks + 1 >= free0, "blocks not freed at the last close");
    // Symbolic links: followed by stat and open, not by lstat; a loop is TooManyLinks.
    fs_ok("symlink", fs::symlink("dir/deep.bin", "/guest/link"))?;
    fs_ok("symlink", fs::symlink("/guest/loop-b", "/guest/loop-a"))?;
    fs_ok("symlink", fs::symlink("loop-a", "/guest/loop-b"))?;
    ensure!(fs_ok("stat", fs::stat("/guest/link"))?.size == 70_000, "stat does not follow the link");
    ensure!(fs_ok("lstat", fs::lstat("/guest/link"))?.size == 12, "lstat follows the link");
    ensure!(fs_ok("readlink", fs::readlink("/guest/link"))? == b"dir/deep.bin", "readlink");
    err!(fs::stat("/guest/loop-a"), FsError::TooManyLinks);
    fs_ok("unlink", fs::unlink("/guest/loop-a"))?;
    fs_ok("unlink", fs::unlink("/guest/loop-b"))?;
    // Everything to the disk, let go of it, mount again from the disk alone.
    fs_ok("unmount", fs::unmount())?;
    fs_ok("mount", fs::mount())?;
    for (path, len, seed) in files::GUEST_FILES {
        let got = fs_ok(path, fs::read_all(path, len + 1))?;
        ensure!(got.len() == len, "{path}: {} bytes after remount, want {len}", got.len());
        for (i, &b) in got.iter().enumerate() {
            ensure!(b == files::byte(seed, i), "{path}: byte {i} wrong after remount");
        }
    }
    for p in files::GUEST_GONE {
        err!(fs::stat(p), FsError::NotFound);
    }
    let (cache, dev) = fs_ok("stats", fs::cache_stats())?;
    println!("fstest: cache {} hits {} misses {} writebacks; disk {} reads {} writes {} flushes", cache.hits, cache.misses, cache.writebacks, dev.packets_in, dev.packets_out, dev.drops);
    Ok(Pass::Ok)
}

/// Shared with `t_blk` threads: the device object and request segment (process share), the
/// disk's size, and the first MiB of the disk as read before the threads start.
static T_DEV: AtomicU64 = AtomicU64::new(0);
static T_SEG: AtomicU64 = AtomicU64::new(0);
static T_CAP: AtomicU64 = AtomicU64::new(0);
static T_REF: AtomicU64 = AtomicU64::new(0);
const T_REF_BYTES: usize = 1 << 20;
const T_SEG_BYTES: u64 = 64 << 10;

/// One core's share of `two_cores_use_one_disk`: reads all over the first MiB into its half of
/// the segment (checked against the reference), then writes and reads back its own 32 sectors
/// near the end of the disk. 0 if everything matched.
fn t_blk(half: u64) -> u64 {
    let share = libos::process::proc_share();
    let dev = ObjName::new(share, T_DEV.load(Ordering::Acquire));
    let seg = ObjName::new(share, T_SEG.load(Ordering::Acquire));
    let ar = libos::ctx::ctx().root_ar;
    if sys::ar_set_seg(ar, &abi::SegMapping { voff: SCRATCH, seg, soff: 0, len: T_SEG_BYTES, flags: abi::MAP_READ | abi::MAP_WRITE }).is_err() {
        return 10;
    }
    let m = words(SCRATCH, T_SEG_BYTES as usize);
    // SAFETY: T_REF points at a live heap block of T_REF_BYTES the main context keeps until
    // every thread has been joined, and nobody writes it meanwhile.
    let reference = unsafe { core::slice::from_raw_parts(T_REF.load(Ordering::Acquire) as *const u8, T_REF_BYTES) };
    let base = (half * 32 * 1024) as usize;
    let mut code = 0;
    for k in 0..60u64 {
        let sec = (k * 97 + half * 500) % (T_REF_BYTES as u64 / BLK_SECTOR - 8);
        if req(dev, BUF_BLK_READ, sec, 0, base as u64, 4096).is_err() {
            code = 11;
            break;
        }
        let at = (sec * BLK_SECTOR) as usize;
        if m[base..base + 4096] != reference[at..at + 4096] {
            code = 2;
            break;
        }
    }
    let first = T_CAP.load(Ordering::Acquire) - 64 + half * 32;
    for k in 0..12u64 {
        if code != 0 {
            break;
        }
        for (i, b) in m[base..base + 16384].iter_mut().enumerate() {
            *b = (i as u64 * 13 + k * 7 + half * 101) as u8;
        }
        if req(dev, BUF_BLK_WRITE, first, 0, base as u64, 16384).is_err() {
            code = 12;
            break;
        }
        m[base..base + 16384].fill(0);
        if req(dev, BUF_BLK_READ, first, 0, base as u64, 16384).is_err() {
            code = 13;
            break;
        }
        if m[base..base + 16384].iter().enumerate().any(|(i, &b)| b != (i as u64 * 13 + k * 7 + half * 101) as u8) {
            code = 3;
        }
    }
    let _ = sys::ar_unmap(ar, SCRATCH, T_SEG_BYTES);
    code
}

/// Catches: requests of two cores in the device at once completed into the wrong buffer or
/// taken by the wrong core (token mix-ups in the Polling driver), a lost completion (a hang),
/// the lock held while the disk works (here only as a slow run).
fn two_cores_use_one_disk() -> TestResult {
    if cores() < 2 {
        return Ok(Pass::Skipped("one core"));
    }
    fs_ok("unmount", fs::unmount())?;
    let hwid = disk_hwid()?;
    let share = libos::process::proc_share();
    let s = Del(ObjName::new(share, ok!(sys::segment_alloc(share, "t2", MEMID_SELF, T_SEG_BYTES))));
    let d = Del(ObjName::new(share, ok!(raw(nr::DEVICE_ALLOC, [share, hwid, MEMID_SELF, s.0.share, s.0.object, 0]))));
    let cap = ok!(sys::device_stat(d.0)).buffers;
    // The reference: the first MiB, and the last 64 sectors (restored at the end).
    let mut reference = vec![0u8; T_REF_BYTES];
    let mut tail = vec![0u8; 64 * BLK_SECTOR as usize];
    ok!(sys::ar_set_seg(rar(), &abi::SegMapping { voff: SCRATCH, seg: s.0, soff: 0, len: T_SEG_BYTES, flags: abi::MAP_READ | abi::MAP_WRITE }));
    let m = words(SCRATCH, T_SEG_BYTES as usize);
    for chunk in 0..(T_REF_BYTES as u64 / T_SEG_BYTES) {
        ok!(req(d.0, BUF_BLK_READ, chunk * T_SEG_BYTES / BLK_SECTOR, 0, 0, T_SEG_BYTES));
        reference[(chunk * T_SEG_BYTES) as usize..((chunk + 1) * T_SEG_BYTES) as usize].copy_from_slice(m);
    }
    ok!(req(d.0, BUF_BLK_READ, cap - 64, 0, 0, tail.len() as u64));
    let n = tail.len();
    tail.copy_from_slice(&m[..n]);
    ok!(sys::ar_unmap(rar(), SCRATCH, T_SEG_BYTES));
    T_DEV.store(d.0.object, Ordering::Release);
    T_SEG.store(s.0.object, Ordering::Release);
    T_CAP.store(cap, Ordering::Release);
    T_REF.store(reference.as_ptr() as u64, Ordering::Release);
    let t = ok!(libos::thread::spawn(1, t_blk, 1));
    let here = t_blk(0);
    let there = ok!(t.join());
    // Put the tail back.
    ok!(sys::ar_set_seg(rar(), &abi::SegMapping { voff: SCRATCH, seg: s.0, soff: 0, len: T_SEG_BYTES, flags: abi::MAP_READ | abi::MAP_WRITE }));
    let n = tail.len();
    words(SCRATCH, T_SEG_BYTES as usize)[..n].copy_from_slice(&tail);
    ok!(req(d.0, BUF_BLK_WRITE, cap - 64, 0, 0, tail.len() as u64));
    ok!(sys::ar_unmap(rar(), SCRATCH, T_SEG_BYTES));
    ensure!(here == 0 && there == 0, "core 0 returned {here}, core 1 {there} (2/3: data mismatch, 1x: a request failed)");
    let st = ok!(sys::device_stat(d.0));
    ensure!(st.errors == 0, "{} errors counted", st.errors);
    Ok(Pass::Ok)
}

/// `stat`s /sub/inner.txt 2000 times; 0 if every answer was right and (nearly) all were hits
/// of the name cache on this core.
fn t_stat(_: u64) -> u64 {
    let c = libos::core_id() as usize;
    let (h0, _) = fs::names::NAMES.counts(c);
    for _ in 0..2000 {
        match fs::stat("/sub/inner.txt") {
            Ok(st) if st.size == 6 => {}
            _ => return 1,
        }
    }
    let (h1, _) = fs::names::NAMES.counts(c);
    if h1 - h0 < 1990 {
        return 2;
    }
    0
}

/// Catches: a name cache that answers after a change (a stale size, a removed or renamed
/// name still found), that never hits, or that is wrong when two cores read it at once.
fn stat_from_the_name_cache() -> TestResult {
    fs_ok("mount", fs::mount())?;
    let names = &fs::names::NAMES;
    let c = libos::core_id() as usize;
    let a = fs_ok("stat", fs::stat("/sub/inner.txt"))?;
    let (h0, m0) = names.counts(c);
    let b = fs_ok("stat", fs::stat("/sub/inner.txt"))?;
    let (h1, m1) = names.counts(c);
    ensure!(a == b && h1 == h0 + 1 && m1 == m0, "second stat: hits {h0}->{h1}, misses {m0}->{m1}");
    // Changes must be seen at once.
    let fd = fs_ok("create", fs::open("/names-test", fs::O_RDWR | fs::O_CREAT | fs::O_TRUNC))?;
    fs_ok("w", fs::write(fd, b"0123456789"))?;
    ensure!(fs_ok("stat", fs::stat("/names-test"))?.size == 10, "size after the first write");
    ensure!(fs_ok("stat", fs::stat("/names-test"))?.size == 10, "size (cached)");
    fs_ok("w", fs::write(fd, b"0123456789"))?;
    ensure!(fs_ok("stat", fs::stat("/names-test"))?.size == 20, "stale size after a write");
    fs_ok("c", fs::close(fd))?;
    fs_ok("rename", fs::rename("/names-test", "/names-test2"))?;
    err!(fs::stat("/names-test"), FsError::NotFound);
    ensure!(fs_ok("stat", fs::stat("/names-test2"))?.size == 20, "renamed");
    fs_ok("unlink", fs::unlink("/names-test2"))?;
    err!(fs::stat("/names-test2"), FsError::NotFound);
    if cores() >= 2 {
        let _ = fs::stat("/sub/inner.txt");
        let t = ok!(libos::thread::spawn(1, t_stat, 0));
        let here = t_stat(0);
        let there = ok!(t.join());
        ensure!(here == 0 && there == 0, "two cores: core 0 returned {here}, core 1 {there} (1: a wrong answer, 2: too few hits)");
    }
    Ok(Pass::Ok)
}

/// Catches: a read-only open of a cached name that still takes the lock (no per-core slot), a
/// per-core descriptor whose reads, seeks, dup or fstat differ from an ordinary one's, an
/// `fstat` answered from the slot after a write changed the file, and a file unlinked while
/// open through a per-core descriptor freed too early or never (its inode not given back at
/// the last close).
fn open_from_the_per_core_list() -> TestResult {
    fs_ok("mount", fs::mount())?;
    let path = "/sub/inner.txt";
    let want = fs_ok("read_all", fs::read_all(path, 100))?;
    let _ = fs_ok("stat", fs::stat(path))?;
    let before = fs::open_files::open_here();
    let fd = fs_ok("open", fs::open(path, fs::O_RDONLY))?;
    ensure!(fs::open_files::is_fast(fd.0) && fs::open_files::open_here() == before + 1, "second open of a cached name took no per-core slot (fd {:#x})", fd.0);
    let st = fs_ok("fstat", fs::fstat(fd))?;
    ensure!(st == fs_ok("stat", fs::stat(path))?, "fstat of the slot differs from stat");
    let mut b = [0u8; 3];
    ensure!(fs_ok("read", fs::read(fd, &mut b))? == 3 && b[..] == want[..3], "first 3 bytes");
    // dup forwards the slot to an ordinary description: the offset is shared from then on.
    let d = fs_ok("dup", fs::dup(fd))?;
    ensure!(fs_ok("read", fs::read(d, &mut b))? == 3 && b[..] == want[3..6], "dup did not continue at offset 3");
    ensure!(fs_ok("lseek", fs::lseek(fd, 0, fs::SEEK_CUR))? == 6, "offset not shared after dup");
    fs_ok("close", fs::close(fd))?;
    err!(fs::close(fd), FsError::BadDescriptor);
    err!(fs::read(fd, &mut b), FsError::BadDescriptor);
    ensure!(fs_ok("lseek", fs::lseek(d, 0, fs::SEEK_SET))? == 0, "the dup outlives the slot");
    fs_ok("close", fs::close(d))?;
    ensure!(fs::open_files::open_here() == before, "slot not given back");
    // fstat after a write through another descriptor sees the new size.
    let w = fs_ok("create", fs::open("/slot-test", fs::O_RDWR | fs::O_CREAT | fs::O_TRUNC))?;
    fs_ok("write", fs::write(w, b"0123456789"))?;
    let r1 = fs_ok("open", fs::open("/slot-test", fs::O_RDONLY))?;
    let r2 = fs_ok("open", fs::open("/slot-test", fs::O_RDONLY))?;
    ensure!(fs::open_files::is_fast(r2.0), "second open of /slot-test was not per-core");
    ensure!(fs_ok("fstat", fs::fstat(r2))?.size == 10, "size 10");
    fs_ok("write", fs::write(w, b"abc"))?;
    ensure!(fs_ok("fstat", fs::fstat(r2))?.size == 13, "stale fstat from the slot after a write");
    fs_ok("close", fs::close(w))?;
    fs_ok("close", fs::close(r1))?;
    // Unlinked while open only through a per-core slot: readable until the last close, then
    // its inode is free again.
    let free0 = fs_ok("df", fs::df())?.free_inodes;
    fs_ok("unlink", fs::unlink("/slot-test"))?;
    ensure!(fs_ok("df", fs::df())?.free_inodes == free0, "unlinked file freed while open");
    let mut all = [0u8; 16];
    ensure!(fs_ok("pread", fs::pread(r2, &mut all, 0))? == 13 && &all[..13] == b"0123456789abc", "orphan unreadable");
    fs_ok("close", fs::close(r2))?;
    ensure!(fs_ok("df", fs::df())?.free_inodes == free0 + 1, "orphan not freed at its last (per-core) close");
    Ok(Pass::Ok)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(seed as u32) as u8 ^ seed).collect()
}

/// Catches: `read`/`pread`/`lseek` of a per-core descriptor that still take the lock (the
/// per-core count of reads without it does not move), that read wrong bytes or move the
/// offset wrong (across a page boundary, at the end, after `SEEK_END`), a descriptor that
/// keeps reading the old bytes or size after the file was rewritten and truncated through
/// another descriptor (or that reads without the lock after such a change), one that is not
/// made current again by its next locked read (re-stamped: the read after it goes without
/// the lock), an unlinked file no longer readable through it, and a per-core descriptor that
/// still reads after an unmount and a new mount.
fn read_without_the_lock() -> TestResult {
    fs_ok("mount", fs::mount())?;
    let c = libos::core_id() as usize;
    let a = pattern(10_000, 3);
    let w = fs_ok("create", fs::open("/unlocked", fs::O_RDWR | fs::O_CREAT | fs::O_TRUNC))?;
    ensure!(fs_ok("write", fs::write(w, &a))? == a.len(), "short write");
    let _ = fs_ok("stat", fs::stat("/unlocked"))?;
    let fd = fs_ok("open", fs::open("/unlocked", fs::O_RDONLY))?;
    ensure!(fs::open_files::is_fast(fd.0), "open of a cached name is not per-core");
    let u0 = fs::unlocked_reads(c);
    let mut b = vec![0u8; 10_000];
    ensure!(fs_ok("pread", fs::pread(fd, &mut b, 0))? == 10_000 && b == a, "pread of the whole file");
    ensure!(fs_ok("read", fs::read(fd, &mut b[..100]))? == 100 && b[..100] == a[..100], "read 1");
    ensure!(fs_ok("read", fs::read(fd, &mut b[..100]))? == 100 && b[..100] == a[100..200], "read 2 did not continue at 100");
    ensure!(fs_ok("lseek", fs::lseek(fd, -10, fs::SEEK_END))? == 9_990, "SEEK_END");
    ensure!(fs_ok("read", fs::read(fd, &mut b[..100]))? == 10 && b[..10] == a[9_990..], "read at the end");
    ensure!(fs_ok("read", fs::read(fd, &mut b[..100]))? == 0, "read past the end");
    ensure!(fs_ok("lseek", fs::lseek(fd, 4_090, fs::SEEK_SET))? == 4_090, "SEEK_SET");
    ensure!(fs_ok("read", fs::read(fd, &mut b[..12]))? == 12 && b[..12] == a[4_090..4_102], "read across a page boundary");
    ensure!(fs_ok("lseek", fs::lseek(fd, 8, fs::SEEK_CUR))? == 4_110, "SEEK_CUR");
    err!(fs::lseek(fd, -5_000, fs::SEEK_CUR), FsError::InvalidArgument);
    let unlocked = fs::unlocked_reads(c) - u0;
    ensure!(unlocked == 6, "{unlocked} of 6 reads were done without the lock");
    // Rewritten and truncated through another descriptor: the new bytes and size at once.
    let bb = pattern(5_000, 9);
    fs_ok("pwrite", fs::pwrite(w, &bb, 0))?;
    fs_ok("ftruncate", fs::ftruncate(w, 5_000))?;
    let u1 = fs::unlocked_reads(c);
    ensure!(fs_ok("pread", fs::pread(fd, &mut b, 0))? == 5_000 && b[..5_000] == bb[..], "old bytes or size after a rewrite");
    ensure!(fs::unlocked_reads(c) == u1, "a read after a change did not take the lock");
    ensure!(fs_ok("lseek", fs::lseek(fd, 0, fs::SEEK_END))? == 5_000, "old size after a truncate");
    ensure!(fs_ok("fstat", fs::fstat(fd))?.size == 5_000, "old size in fstat after a truncate");
    // That locked read made the descriptor current again: the next one goes without the lock.
    ensure!(fs_ok("pread", fs::pread(fd, &mut b[..10], 4_990))? == 10 && b[..10] == bb[4_990..], "second read after a rewrite");
    ensure!(fs::unlocked_reads(c) == u1 + 1, "the descriptor was not made current again (re-stamped)");
    // And stale again after the next change.
    fs_ok("pwrite", fs::pwrite(w, b"Z", 0))?;
    ensure!(fs_ok("pread", fs::pread(fd, &mut b[..1], 0))? == 1 && b[0] == b'Z', "byte written after the re-stamp");
    ensure!(fs::unlocked_reads(c) == u1 + 1, "a re-stamped descriptor read without the lock after a change");
    // A new open reads the new bytes without the lock.
    let _ = fs::stat("/unlocked");
    let fd2 = fs_ok("open", fs::open("/unlocked", fs::O_RDONLY))?;
    let bb = [b"Z".as_slice(), &bb[1..]].concat();
    let u1 = fs::unlocked_reads(c);
    ensure!(fs_ok("pread", fs::pread(fd2, &mut b, 0))? == 5_000 && b[..5_000] == bb[..], "new open: wrong bytes");
    ensure!(fs::unlocked_reads(c) == u1 + 1, "new open: the read took the lock");
    // Unlinked while open: still readable through both.
    fs_ok("unlink", fs::unlink("/unlocked"))?;
    ensure!(fs_ok("pread", fs::pread(fd2, &mut b, 0))? == 5_000 && b[..5_000] == bb[..], "orphan unreadable");
    ensure!(fs_ok("read", fs::read(fd, &mut b[..10]))? == 0, "read at the end of the orphan");
    for f in [w, fd, fd2] {
        fs_ok("close", fs::close(f))?;
    }
    // A per-core descriptor from before a remount names nothing.
    let _ = fs::stat("/sub/inner.txt");
    let old = fs_ok("open", fs::open("/sub/inner.txt", fs::O_RDONLY))?;
    ensure!(fs::open_files::is_fast(old.0), "not per-core");
    fs_ok("unmount", fs::unmount())?;
    fs_ok("mount", fs::mount())?;
    err!(fs::read(old, &mut b), FsError::BadDescriptor);
    err!(fs::pread(old, &mut b, 0), FsError::BadDescriptor);
    err!(fs::lseek(old, 0, fs::SEEK_SET), FsError::BadDescriptor);
    Ok(Pass::Ok)
}

/// Rounds of the rewriter in `reads_race_rewrites`.
const RACE_ROUNDS: u64 = 1500;
/// Pages of `/race`.
const RACE_PAGES: usize = 64;
static RACE_DONE: AtomicU64 = AtomicU64::new(0);

/// The rewriter: round k writes byte k over the first page of `/race` (one change), then over
/// its last page (another change); every 50th round also truncates the file to its first
/// page and writes the rest back (pages 1.. of byte k). Between changes the file is either
/// "first page k, last page k" or "first page k, last page k - 1". 0 if every call worked.
fn t_rewriter(_: u64) -> u64 {
    let Ok(w) = fs::open("/race", fs::O_RDWR) else { return 1 };
    let last = ((RACE_PAGES - 1) * 4096) as u64;
    let mut page = [0u8; 4096];
    let mut r = 0;
    for k in 2..RACE_ROUNDS {
        page.fill(race_byte(k));
        if fs::pwrite(w, &page, 0) != Ok(4096) || fs::pwrite(w, &page, last) != Ok(4096) {
            r = 2;
            break;
        }
        if k % 50 == 0 {
            let rest = vec![race_byte(k); (RACE_PAGES - 1) * 4096];
            if fs::ftruncate(w, 4096).is_err() || fs::pwrite(w, &rest, 4096) != Ok(rest.len()) {
                r = 3;
                break;
            }
        }
    }
    RACE_DONE.store(1, Ordering::Release);
    let _ = fs::close(w);
    r
}

/// The byte round `k` writes: 1..=255, never 0 (a page of zeros is what a hole or a lost
/// write reads as). It was once `k as u8`, which is 0 at every 256th round: a
/// read that landed between round 1280's two writes was wrongly called torn (seen once).
fn race_byte(k: u64) -> u8 {
    (k % 255) as u8 + 1
}

/// Whether `b` (a whole read of `/race`) is a state the rewriter leaves between changes:
/// `RACE_PAGES` pages, each uniform; the first page's byte `k` non-zero; the last page's `k`
/// or the byte of the round before (`race_byte`); the middle pages all one byte. Or, after a truncate, only the first page.
fn race_state_ok(b: &[u8]) -> bool {
    let pages: Vec<&[u8]> = b.chunks(4096).collect();
    if pages.len() == 1 {
        return b.len() == 4096 && b[0] != 0 && b.iter().all(|&x| x == b[0]);
    }
    if pages.len() != RACE_PAGES || pages.iter().any(|p| p.len() != 4096 || p.iter().any(|&x| x != p[0])) {
        return false;
    }
    let (k, mid, l) = (pages[0][0], pages[1][0], pages[RACE_PAGES - 1][0]);
    let before = if k == 1 { 255 } else { k.wrapping_sub(1) };
    k != 0 && (l == k || l == before) && pages[1..RACE_PAGES - 1].iter().all(|p| p[0] == mid)
}

/// Catches: a read without the lock that returns bytes of two states of the file (a torn
/// read) because it does not check that no change started during it. Core 1 rewrites the
/// first and then the last page of a 256 KiB file (two changes per round; now and then a
/// truncate and a rewrite of the rest) while this core opens the file per-core and reads it
/// whole, over and over: a reader that copied the first page before a round and the last
/// page after it returns "first k - 1, last k", which no locked read can see. Every read must
/// be a state between changes, and some must have been done without the lock. (With the
/// generation check after the copy removed, this failed in 2 runs out of 2.)
fn reads_race_rewrites() -> TestResult {
    if cores() < 2 {
        return Ok(Pass::Skipped("one core"));
    }
    fs_ok("mount", fs::mount())?;
    let c = libos::core_id() as usize;
    let w = fs_ok("create", fs::open("/race", fs::O_RDWR | fs::O_CREAT | fs::O_TRUNC))?;
    fs_ok("write", fs::pwrite(w, &vec![race_byte(1); RACE_PAGES * 4096], 0))?;
    fs_ok("close", fs::close(w))?;
    RACE_DONE.store(0, Ordering::Release);
    let u0 = fs::unlocked_reads(c);
    let t = ok!(libos::thread::spawn(1, t_rewriter, 0));
    let mut buf = vec![0u8; RACE_PAGES * 4096 + 16];
    let (mut reads, mut bad) = (0u64, None);
    // Every other read goes through one descriptor kept open the whole time: a locked read
    // after each change makes it current again (re-stamped), and the next may go without the
    // lock.
    let _ = fs::stat("/race");
    let keep = fs_ok("open", fs::open("/race", fs::O_RDONLY))?;
    while RACE_DONE.load(Ordering::Acquire) == 0 {
        let _ = fs::stat("/race");
        let r = if reads % 2 == 1 {
            fs::pread(keep, &mut buf, 0)
        } else {
            fs::open("/race", fs::O_RDONLY).and_then(|fd| {
                let r = fs::pread(fd, &mut buf, 0);
                let _ = fs::close(fd);
                r
            })
        };
        reads += 1;
        match r {
            Ok(n) if race_state_ok(&buf[..n]) => {}
            Ok(n) => {
                let l = buf[n.saturating_sub(1)];
                bad = Some(Msg::new(format_args!("torn read after {reads} reads: {n} bytes, first page {}, page 1 {}, last byte {l}", buf[0], buf[4096])));
                break;
            }
            Err(e) => {
                bad = Some(Msg::new(format_args!("read {reads}: {e:?}")));
                break;
            }
        }
    }
    let there = ok!(t.join());
    // Whether a read during the race went without the lock depends on how the host schedules
    // the two vCPUs (under load every read may overlap a change). With the rewriter finished,
    // the first read through `keep` re-stamps it and the second must go without the lock, so
    // the count below does not depend on the machine's speed: a reader that always takes the
    // lock still fails it.
    if bad.is_none() && there == 0 {
        for _ in 0..2 {
            match fs::pread(keep, &mut buf, 0) {
                Ok(n) if race_state_ok(&buf[..n]) => reads += 1,
                Ok(n) => {
                    bad = Some(Msg::new(format_args!("read after the race: {n} bytes, first page {}", buf[0])));
                    break;
                }
                Err(e) => {
                    bad = Some(Msg::new(format_args!("read after the race: {e:?}")));
                    break;
                }
            }
        }
    }
    let unlocked = fs::unlocked_reads(c) - u0;
    let _ = fs::close(keep);
    let _ = fs::unlink("/race");
    ensure!(there == 0, "the rewriter failed ({there})");
    if let Some(m) = bad {
        return Err(m);
    }
    println!("fstest: reads_race_rewrites: {reads} reads, {unlocked} without the lock");
    ensure!(unlocked > 0, "no read was done without the lock ({reads} reads)");
    Ok(Pass::Ok)
}

/// Reads `FILES[arg]` in full and compares; 0 if right.
fn t_read_file(arg: u64) -> u64 {
    let Some(&(path, len, seed)) = files::FILES.get(arg as usize) else { return 9 };
    for _ in 0..2 {
        match fs::read_all(path, len + 1) {
            Ok(d) if d.len() == len && d.iter().enumerate().all(|(i, &b)| b == files::byte(seed, i)) => {}
            Ok(_) => return 2,
            Err(_) => return 3,
        }
    }
    0
}

/// Catches: the request segment not mapped on a core other than the mounting one (a fault in
/// the library OS), or a later thread on a core whose earlier thread's root range (and
/// mapping) is gone; the file system's lock not serialising two cores' use of the cache.
fn other_cores_read_too() -> TestResult {
    if cores() < 2 {
        return Ok(Pass::Skipped("one core"));
    }
    fs_ok("mount", fs::mount())?;
    for round in 0..2 {
        // Core 1 reads the double-indirect file while this core reads the indirect one.
        let t = ok!(libos::thread::spawn(1, t_read_file, 5));
        let here = t_read_file(4);
        let there = ok!(t.join());
        ensure!(here == 0 && there == 0, "round {round}: reads went wrong here ({here}) or on core 1 ({there})");
    }
    Ok(Pass::Ok)
}

/// Walk what is reachable from the root (at most 300 inodes, 16 levels), reading the first
/// 64 KiB of every file; errors are fine, a panic ends the program (and fails the run).
fn walk<D: Disk>(fs: &mut Ext2<D>) {
    let mut buf = vec![0u8; 64 << 10];
    fs.walk_bounded(300, |fs, i| {
        let _ = fs.read(i, 0, &mut buf);
    });
}

/// Catches: a panic (index out of bounds, overflow, an endless loop until the timeout) on a
/// corrupt image, in the guest's own build, cache and device path: seeded changes to the
/// superblock, descriptors, bitmaps, inode table, directory and indirect blocks, made in the
/// cache only (the disk never sees them), then mount, walk, read, and every kind of write.
fn seeded_corruptions_never_panic() -> TestResult {
    fs_ok("unmount", fs::unmount())?;
    let share = libos::process::proc_share();
    let mut meta: Vec<(u64, u64)> = Vec::new();
    {
        let dev = ok!(BlockDevice::open(share));
        let mut fs = fs_ok("mount", Ext2::mount(fs_ok("cache", Cache::with_pages(dev, 256))?))?;
        let bs = fs.bs;
        meta.push((1024, 1024));
        meta.push((bs.max(2048), bs));
        for g in fs.groups.clone() {
            meta.push((g.block_bitmap as u64 * bs, bs));
            meta.push((g.inode_bitmap as u64 * bs, bs));
            meta.push((g.inode_table as u64 * bs, 2 * bs));
        }
        for d in ["/", "/sub", "/sub/deeper"] {
            let i = fs_ok(d, fs.resolve(d.as_bytes()))?;
            meta.push((fs_ok(d, fs.bmap(&i, 0))? * bs, bs));
        }
        let i = fs_ok("double", fs.resolve(b"/double.bin"))?;
        meta.push((i.block[12] as u64 * bs, bs));
        meta.push((i.block[13] as u64 * bs, bs));
    }
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut mounted, mut refused) = (0, 0);
    let rounds = 60;
    for _ in 0..rounds {
        let dev = ok!(BlockDevice::open(share));
        let mut cache = fs_ok("cache", Cache::with_pages(dev, 256))?;
        for _ in 0..1 + next() % 8 {
            let (start, len) = meta[(next() % meta.len() as u64) as usize];
            let at = start + next() % len;
            let b = [next() as u8];
            fs_ok("corrupt", cache.write_at(at, &b))?;
        }
        match Ext2::mount(cache) {
            Ok(mut fs) => {
                walk(&mut fs);
                if let Ok(mut f) = fs.create(b"/fuzz-new", 0o644) {
                    let _ = fs.write(&mut f, 0, &[7u8; 20_000]);
                    let _ = fs.truncate(&mut f, 100);
                }
                let _ = fs.mkdir(b"/sub/fuzz-dir", 0o755);
                let _ = fs.symlink(b"one", b"/fuzz-link");
                let _ = fs.rename(b"/sub/deeper", b"/moved");
                let _ = fs.unlink(b"/indirect.bin");
                let _ = fs.rmdir(b"/moved");
                mounted += 1;
            }
            Err(_) => refused += 1,
        }
        // Dropped without sync: nothing reaches the disk.
    }
    println!("fstest: {rounds} corrupt images in the cache: {mounted} mounted, walked and written, {refused} refused");
    fs_ok("mount", fs::mount())?;
    ensure!(fs_ok("hello", fs::read_all("/hello.txt", 100))? == files::HELLO, "the disk changed");
    ensure!(mounted + refused == rounds, "lost rounds");
    Ok(Pass::Ok)
}

// ---- The buffer cache (crate bcache, fs/cache.rs): shared with cfork'd children where asked.

const BC_PATH: &str = "/bcache-shared";
const BC_PAGES: u64 = 8;
/// Rounds of the torn-page test (each: every page rewritten whole, synced, clean pages dropped).
const BC_ROUNDS: u64 = 40;

fn bc_page(v: u8) -> Vec<u8> {
    vec![v; 4096]
}

/// Disk reads so far (the device object's count: every process sharing it adds to it).
fn disk_reads() -> Result<u64, Msg> {
    Ok(fs_ok("stats", fs::cache_stats())?.1.packets_in)
}

/// The child of `cache_shared_with_a_cfork_child`: reads what its parent wrote and never
/// synced (so only the shared cache has it), then overwrites every page in place. Nonzero:
/// which step failed.
fn t_shared_child(_: u64) -> u64 {
    let Ok((_, before)) = fs::cache_stats() else { return 10 };
    let Ok(fd) = fs::open(BC_PATH, fs::O_RDWR) else { return 11 };
    let mut buf = vec![0u8; 4096];
    for i in 0..BC_PAGES {
        if fs::pread(fd, &mut buf, i * 4096) != Ok(4096) {
            return 12;
        }
        if buf.iter().any(|&b| b != 0xA0 + i as u8) {
            return 20 + i;
        }
    }
    for i in 0..BC_PAGES {
        if fs::pwrite(fd, &bc_page(0xB0 + i as u8), i * 4096) != Ok(4096) {
            return 13;
        }
    }
    let _ = fs::close(fd);
    let Ok((_, after)) = fs::cache_stats() else { return 14 };
    if after.packets_in != before.packets_in {
        return 40;
    }
    0
}

/// A child that was not given the cache: any file-system call must fail (it cannot reach the
/// parent's cache or disk) rather than read or write through a copy.
fn t_private_child(_: u64) -> u64 {
    match fs::read_all(BC_PATH, 1 << 20) {
        Err(_) => 0,
        Ok(_) => 1,
    }
}

fn sharing_opts(s: &fs::cache::CacheSharing) -> ([u64; 1], [u64; 1], [u64; 1]) {
    ([s.share], [s.request_seg], [s.range])
}

/// Catches: the cache not shared with a cfork'd child that asked for it (the child would read
/// the disk, where the parent's unsynced pages are not, or the parent would not see the
/// child's writes); a thread on another core or the child re-reading pages the cache holds
/// (device reads counted); a child that was not given the cache reaching the parent's (it
/// must get an error and change nothing).
fn cache_shared_with_a_cfork_child() -> TestResult {
    fs_ok("mount", fs::mount())?;
    let fd = fs_ok("create", fs::open(BC_PATH, fs::O_RDWR | fs::O_CREAT | fs::O_TRUNC))?;
    for i in 0..BC_PAGES {
        ensure!(fs_ok("write", fs::pwrite(fd, &bc_page(0xA0 + i as u8), i * 4096))? == 4096, "short write");
    }
    fs_ok("close", fs::close(fd))?;
    let reads0 = disk_reads()?;
    let hits0 = fs_ok("stats", fs::cache_stats())?.0.hits;
    let other = if cores() >= 2 { 1 } else { 0 };
    // Another core of this process: the same table, no disk read.
    if other != 0 {
        let t = ok!(libos::thread::spawn(1, |_| match fs::read_all(BC_PATH, 1 << 20) {
            Ok(d) if d.len() == 4096 * BC_PAGES as usize && (0..BC_PAGES as usize).all(|i| d[i * 4096..(i + 1) * 4096].iter().all(|&b| b == 0xA0 + i as u8)) => 0,
            Ok(_) => 1,
            Err(_) => 2,
        }, 0));
        ensure!(ok!(t.join()) == 0, "core 1 did not read the pages core 0 wrote");
    }
    let s = fs_ok("sharing", fs::cache_sharing())?;
    let (shares, segs, ranges) = sharing_opts(&s);
    let opts = CforkOpts { shares: &shares, segments: &segs, ranges: &ranges };
    let child = ok!(cfork(other, &opts, t_shared_child, 0));
    let code = ok!(child.join());
    ensure!(code == 0, "shared child failed at step {code} (20+: a page it read was not its parent's unsynced write; 40: it read the disk)");
    let d = fs_ok("read", fs::read_all(BC_PATH, 1 << 20))?;
    for i in 0..BC_PAGES as usize {
        ensure!(d[i * 4096..(i + 1) * 4096].iter().all(|&b| b == 0xB0 + i as u8), "page {i}: the child's write is not in the parent's cache");
    }
    let reads1 = disk_reads()?;
    ensure!(reads1 == reads0, "{} disk reads while two cores and a child read cached pages", reads1 - reads0);
    let hits1 = fs_ok("stats", fs::cache_stats())?.0.hits;
    ensure!(hits1 >= hits0 + 2 * BC_PAGES, "the child's hits are not counted in the shared table ({hits0} -> {hits1})");
    println!("fstest: shared cache: {} hits by two cores and a child, 0 disk reads", hits1 - hits0);
    // Private by default: a child given nothing cannot use the parent's cache.
    let child = ok!(cfork(other, &CforkOpts::default(), t_private_child, 0));
    ensure!(ok!(child.join()) == 0, "a child not given the cache read the file");
    let d = fs_ok("read", fs::read_all(BC_PATH, 1 << 20))?;
    ensure!(d[0] == 0xB0, "the private child changed the parent's cache");
    Ok(Pass::Ok)
}

/// The reader child of `readers_never_see_a_torn_page`: reads every page again and again
/// while its parent rewrites, syncs and evicts them; each 4 KiB read must be one value
/// throughout. Returns 1000 + page on a torn page, else the number of value changes it saw.
fn t_torn_reader(_: u64) -> u64 {
    let Ok(fd) = fs::open(BC_PATH, fs::O_RDONLY) else { return 2000 };
    let mut buf = vec![0u8; 4096];
    let mut last = [0u8; BC_PAGES as usize];
    let mut changes = 0;
    for _ in 0..BC_ROUNDS * 6 {
        for i in 0..BC_PAGES {
            if fs::pread(fd, &mut buf, i * 4096) != Ok(4096) {
                return 2001;
            }
            if buf.iter().any(|&b| b != buf[0]) {
                return 1000 + i;
            }
            if buf[0] != last[i as usize] {
                changes += 1;
                last[i as usize] = buf[0];
            }
        }
    }
    changes
}

/// Catches: a reader that copies a page while a writer, a write-back or an eviction (and the
/// refill that follows, by either process) changes it, and uses the copy (a torn page: part
/// old, part new); the fill lock not serialising two processes' misses on the shared request
/// segment (pages filled with another request's data).
fn readers_never_see_a_torn_page() -> TestResult {
    fs_ok("mount", fs::mount())?;
    let s = fs_ok("sharing", fs::cache_sharing())?;
    let (shares, segs, ranges) = sharing_opts(&s);
    let other = if cores() >= 2 { 1 } else { 0 };
    let fd = fs_ok("open", fs::open(BC_PATH, fs::O_RDWR))?;
    let child = ok!(cfork(other, &CforkOpts { shares: &shares, segments: &segs, ranges: &ranges }, t_torn_reader, 0));
    for r in 0..BC_ROUNDS {
        for i in 0..BC_PAGES {
            fs_ok("write", fs::pwrite(fd, &bc_page((r * 8 + i) as u8 | 1), i * 4096))?;
        }
        if r % 2 == 0 {
            fs_ok("sync", fs::sync())?;
            fs_ok("drop", fs::cache_drop_clean())?;
        }
    }
    let code = ok!(child.join());
    fs_ok("close", fs::close(fd))?;
    ensure!(code < 1000, "the reader saw a torn page (code {code})");
    println!("fstest: torn-page test: the reader saw {code} changes of page values, none torn");
    Ok(Pass::Ok)
}

/// Catches: a full cache that does not evict (`NoMemory`), evicts a dirty page without
/// writing it back (its data lost), or writes back pages out of order; a page evicted and
/// read again coming back different. Uses a 16-page cache on pages past the file system's
/// used blocks, restored afterwards.
fn full_cache_evicts_and_writes_back() -> TestResult {
    fs_ok("unmount", fs::unmount())?;
    let dev = ok!(BlockDevice::open(libos::process::proc_share()));
    let mut cache = fs_ok("cache", Cache::with_pages(dev, 16))?;
    let pages = cache.size() / 4096;
    let first = pages - 48;
    // The originals, to put back.
    let mut orig = vec![0u8; 40 * 4096];
    fs_ok("read", cache.read_at(first * 4096, &mut orig))?;
    for i in 0..40u64 {
        fs_ok("write", cache.write_at((first + i) * 4096, &bc_page(0x40 + i as u8)))?;
    }
    let st = cache.stats();
    ensure!(st.pages <= 16, "{} pages cached in a 16-page cache", st.pages);
    ensure!(st.writebacks >= 24, "only {} write-backs for 40 dirty pages in 16 slots", st.writebacks);
    ensure!(st.evictions >= 24, "only {} evictions", st.evictions);
    let reads0 = cache.stats().disk_reads;
    for i in 0..40u64 {
        let mut b = vec![0u8; 4096];
        fs_ok("read", cache.read_at((first + i) * 4096, &mut b))?;
        ensure!(b.iter().all(|&x| x == 0x40 + i as u8), "page {i} lost its write through eviction");
    }
    ensure!(cache.stats().disk_reads > reads0, "evicted pages were not read back from the disk");
    fs_ok("restore", cache.write_at(first * 4096, &orig))?;
    fs_ok("sync", cache.sync())?;
    ensure!(cache.dirty_pages() == 0, "dirty pages after sync");
    drop(cache);
    fs_ok("mount", fs::mount())?;
    Ok(Pass::Ok)
}

// ---- Dedicated mode (abi::blk): a kernel core owns the disk's queue; per-core rings.

/// Core `c` made a kernel core for the test; back to an exokernel core when dropped.
struct Kc(ObjName);
impl Kc {
    fn make(c: u64) -> Result<Kc, Msg> {
        let p = ObjName::new(root(), ok!(sys::pcore_alloc(root(), "blk-kc", c)));
        let kc = Kc(p);
        ok!(sys::pcore_set_role(p, abi::ROLE_KC));
        Ok(kc)
    }
}
impl Drop for Kc {
    fn drop(&mut self) {
        let _ = sys::pcore_set_role(self.0, abi::ROLE_XC);
        let _ = sys::share_delobj(self.0);
    }
}

/// The file system unmounted and the last core a kernel core (for a test that drives the
/// disk through it); `None` on one core.
fn last_core_as_kc() -> Result<Option<Kc>, Msg> {
    if cores() < 2 {
        return Ok(None);
    }
    fs_ok("unmount", fs::unmount())?;
    Kc::make(cores() - 1).map(Some)
}

/// The end of a `last_core_as_kc` test: the core back to XC, the file system mounted again.
fn remount_after(kc: Kc) -> TestResult {
    drop(kc);
    fs_ok("mount", fs::mount())?;
    Ok(Pass::Ok)
}

/// The Dedicated device `t_ded` threads use (leaked for the test's duration, freed after the
/// joins).
static T_DED: AtomicU64 = AtomicU64::new(0);

/// One requesting core's share of `dedicated_two_cores`: reads all over the first MiB
/// through its ring (checked against the reference), then writes and reads back its own 32
/// sectors near the end of the disk. 0 if everything matched.
fn t_ded(half: u64) -> u64 {
    // SAFETY: T_DED points at a live BlockDevice the main context keeps (and does not touch
    // mutably) until every thread is joined; `read_here`/`write_here` take `&self`.
    let dev = unsafe { &*(T_DED.load(Ordering::Acquire) as *const BlockDevice) };
    // SAFETY: as in `t_blk`.
    let reference = unsafe { core::slice::from_raw_parts(T_REF.load(Ordering::Acquire) as *const u8, T_REF_BYTES) };
    let mut buf = vec![0u8; 16384];
    for k in 0..60u64 {
        let sec = (k * 97 + half * 500) % (T_REF_BYTES as u64 / BLK_SECTOR - 8);
        if dev.read_here(sec, &mut buf[..4096]).is_err() {
            return 11;
        }
        let at = (sec * BLK_SECTOR) as usize;
        if buf[..4096] != reference[at..at + 4096] {
            return 2;
        }
    }
    let first = T_CAP.load(Ordering::Acquire) - 64 + half * 32;
    for k in 0..12u64 {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i as u64 * 13 + k * 7 + half * 101) as u8;
        }
        if dev.write_here(first, &buf).is_err() {
            return 12;
        }
        buf.fill(0);
        if dev.read_here(first, &mut buf).is_err() {
            return 13;
        }
        if buf.iter().enumerate().any(|(i, &b)| b != (i as u64 * 13 + k * 7 + half * 101) as u8) {
            return 3;
        }
    }
    0
}

/// Catches: a kernel core that mixes up two rings' requests (a completion on the wrong ring, a
/// page of one request read into the other's area), loses a completion (a hang), splits a
/// multi-page request wrongly; `device_buf` still placing requests in a queue the kernel core
/// owns; a file system that cannot run over the Dedicated device.
fn dedicated_two_cores() -> TestResult {
    if cores() < 3 {
        return Ok(Pass::Skipped("needs 3 cores: 2 requesting, 1 kernel core"));
    }
    fs_ok("unmount", fs::unmount())?;
    let kc = Kc::make(2)?;
    let share = libos::process::proc_share();
    let mut dev = ok!(BlockDevice::open_dedicated(share, 2, kc.0));
    let cap = dev.capacity;
    err!(req(dev.dev, BUF_BLK_READ, 0, 0, 0, 512), Error::NotPermitted);
    err!(sys::device_conf(dev.dev, &abi::DeviceConf { key: abi::CONF_BLK_MODE, value: abi::BLK_MODE_POLLING }), Error::Busy);
    let mut reference = vec![0u8; T_REF_BYTES];
    ok!(dev.read(0, &mut reference));
    let mut tail = vec![0u8; 64 * BLK_SECTOR as usize];
    ok!(dev.read(cap - 64, &mut tail));
    let before = ok!(sys::device_stat(dev.dev));
    T_CAP.store(cap, Ordering::Release);
    T_REF.store(reference.as_ptr() as u64, Ordering::Release);
    T_DED.store(&dev as *const BlockDevice as u64, Ordering::Release);
    let t = ok!(libos::thread::spawn(1, t_ded, 1));
    let here = t_ded(0);
    let there = ok!(t.join());
    T_DED.store(0, Ordering::Release);
    ok!(dev.write(cap - 64, &tail));
    ok!(dev.flush());
    ensure!(here == 0 && there == 0, "core 0 returned {here}, core 1 {there} (2/3: data mismatch, 1x: a request failed)");
    let st = ok!(sys::device_stat(dev.dev));
    // Per core: 60 reads, 12 writes and 12 reads; then the tail write and the flush.
    ensure!(st.packets_in - before.packets_in == 2 * 72, "reads counted {}, want 144", st.packets_in - before.packets_in);
    ensure!(st.packets_out - before.packets_out == 2 * 12 + 1, "writes counted {}", st.packets_out - before.packets_out);
    ensure!(st.errors == 0 && st.drops == before.drops + 1, "errors {} drops {} (one flush)", st.errors, st.drops);
    // The file system over it: every file byte for byte.
    let mut e = fs_ok("mount dedicated", Ext2::mount(fs_ok("cache", Cache::with_pages(dev, 256))?))?;
    for (path, len, seed) in files::FILES {
        let i = fs_ok(path, e.resolve(path.as_bytes()))?;
        let mut buf = vec![0u8; len];
        let n = fs_ok(path, e.read(&i, 0, &mut buf))?;
        ensure!(n == len && (0..len).all(|k| buf[k] == files::byte(seed, k)), "{path} read through the kernel core differs");
    }
    drop(e);
    drop(kc);
    fs_ok("mount", fs::mount())?;
    Ok(Pass::Ok)
}

/// Catches: a kernel core that trusts ring entries (a DMA outside the data area or past the
/// disk, the driver's assertion on a partial sector: a panic), answers a refused entry with
/// success or not at all (a hang), does not count refusals, or follows an impossible
/// completion count (overwriting entries the program has not read) instead of stopping that
/// ring alone; a mode change while attached.
fn dedicated_refuses_bad_entries() -> TestResult {
    let Some(kc) = last_core_as_kc()? else { return Ok(Pass::Skipped("one core")) };
    let share = libos::process::proc_share();
    // Bad modes first, on a Polling device.
    {
        let hwid = disk_hwid()?;
        let s = Del(ObjName::new(share, ok!(sys::segment_alloc(share, "t", MEMID_SELF, 64 << 10))));
        let d = Del(ObjName::new(share, ok!(raw(nr::DEVICE_ALLOC, [share, hwid, MEMID_SELF, s.0.share, s.0.object, 0]))));
        let conf = |v| sys::device_conf(d.0, &abi::DeviceConf { key: abi::CONF_BLK_MODE, value: v });
        err!(conf(abi::BLK_MODE_DEDICATED), Error::InvalidArgument); // no rings
        err!(conf(abi::BLK_MODE_DEDICATED | (abi::BLK_MAX_RINGS + 1) << 8), Error::InvalidArgument);
        err!(conf(7), Error::InvalidArgument);
        err!(conf(abi::BLK_MODE_POLLING | 1 << 8), Error::InvalidArgument);
        err!(conf(1 << 20), Error::InvalidArgument);
        err!(conf(abi::BLK_MODE_DEDICATED | 16 << 8), Error::OutOfRange); // 64 KiB holds no 16 rings
        err!(sys::device_conf(d.0, &abi::DeviceConf { key: 0x999, value: 0 }), Error::Unsupported);
        err!(libos::ring::pcore_add_device(kc.0, d.0), Error::NotPermitted); // Polling: no kernel core
    }
    let dev = ok!(BlockDevice::open_dedicated(share, 2, kc.0));
    let (data, _) = ok!(dev.data_area());
    let cap = dev.capacity;
    let bad: [(u64, u64, u64, u64, Error); 9] = [
        (0x99, 0, data, 512, Error::Unsupported),
        (BUF_BLK_READ, 0, data + 100, 512, Error::Misaligned),
        (BUF_BLK_READ, 0, data, 100, Error::Misaligned),
        (BUF_BLK_READ, 0, data, 0, Error::InvalidArgument),
        (BUF_BLK_READ, 0, data, BLK_MAX_REQUEST + 512, Error::InvalidArgument),
        (BUF_BLK_WRITE, cap, data, 512, Error::OutOfRange),
        (BUF_BLK_READ, 0, 0, 512, Error::OutOfRange), // the header and rings
        (BUF_BLK_READ, 0, u64::MAX - 511, 512, Error::OutOfRange),
        (BUF_BLK_FLUSH, 1, 0, 0, Error::InvalidArgument),
    ];
    for (op, sector, offset, len, want) in bad {
        match dev.raw_ring_request(op, sector, offset, len) {
            Err(e) if e == want => {}
            r => fail!("ring entry op {op:#x} sector {sector} offset {offset} len {len}: {r:?}, want {want:?}"),
        }
    }
    ok!(dev.raw_ring_request(BUF_BLK_READ, 2, data, 1024));
    let st = ok!(sys::device_stat(dev.dev));
    ensure!(st.drops == bad.len() as u64 && st.errors == 0 && st.packets_in == 1, "refusals counted {} errors {} reads {}", st.drops, st.errors, st.packets_in);
    // Garbage in ring 1 (no core of this test uses it): 64 entries with random words and the
    // right tags, each refused or served; then an impossible completion count, which stops
    // ring 1 alone.
    let (_, seg) = ok!(dev.data_area());
    let ring_bytes = abi::blk_data_offset(2);
    ok!(sys::ar_set_seg(rar(), &abi::SegMapping { voff: SCRATCH, seg, soff: 0, len: ring_bytes, flags: abi::MAP_READ | abi::MAP_WRITE }));
    let page = |p: u64| {
        // SAFETY: the ring pages are mapped read-write at SCRATCH just above; atomics only.
        unsafe { &*((SCRATCH + p * PAGE_SIZE) as *const [AtomicU64; 512]) }
    };
    let (sub, done) = (page(abi::blk_submit_page(1)), page(abi::blk_done_page(1)));
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for seq in 0..abi::BLK_RING_ENTRIES {
        let at = abi::blk_slot_word(seq);
        // Mostly garbage; sometimes a plausible op so the checks past the op run too.
        let op = if seq % 3 == 0 { BUF_BLK_READ | rnd() << 32 } else { rnd() };
        for (k, v) in [op, rnd() % (cap + 16), rnd() % (4 * ring_bytes)].iter().enumerate() {
            sub[at + 1 + k].store(*v, Ordering::Relaxed);
        }
        sub[at].store(abi::blk_tag(seq), Ordering::Release);
    }
    // Wait for the 64 answers (bounded: a kernel core that hangs fails here, not forever).
    let answered = || done[abi::blk_slot_word(abi::BLK_RING_ENTRIES - 1)].load(Ordering::Acquire) == abi::blk_tag(abi::BLK_RING_ENTRIES - 1);
    ensure!(libos::time::wait_until(10_000, answered), "the kernel core did not answer 64 garbage entries in 10 s");
    // One more entry, with the completion ring full and an impossible count (ahead of the kernel).
    done[(abi::BLK_RING_CONSUMER / 8) as usize].store(1000, Ordering::Release);
    let at = abi::blk_slot_word(abi::BLK_RING_ENTRIES);
    sub[at + 1].store(BUF_BLK_READ | 512 << 32, Ordering::Relaxed);
    sub[at + 3].store(data, Ordering::Relaxed);
    sub[at].store(abi::blk_tag(abi::BLK_RING_ENTRIES), Ordering::Release);
    let stopped = libos::time::wait_until(10_000, || sys::device_stat(dev.dev).map(|s| s.errors >= 1).unwrap_or(false));
    ok!(sys::ar_unmap(rar(), SCRATCH, ring_bytes));
    ensure!(stopped, "an impossible completion count was not counted (ring not stopped)");
    // Ring 0 is still served.
    ok!(dev.raw_ring_request(BUF_BLK_READ, 2, data, 1024));
    let st = ok!(sys::device_stat(dev.dev));
    ensure!(st.errors == 1, "errors {} after one stopped ring", st.errors);
    ensure!(st.drops >= bad.len() as u64 + 30, "only {} refusals counted after 64 garbage entries", st.drops);
    drop(dev);
    remount_after(kc)
}

/// Catches: a request pending on a detached device, or on one whose kernel core changed role,
/// that waits forever (or reports success); a kernel core that keeps polling a detached
/// device; state lost across detach and attach.
fn dedicated_kernel_core_removed() -> TestResult {
    let Some(kc) = last_core_as_kc()? else { return Ok(Pass::Skipped("one core")) };
    let share = libos::process::proc_share();
    let mut dev = ok!(BlockDevice::open_dedicated(share, 1, kc.0));
    let mut sb = [0u8; 1024];
    ok!(dev.read(2, &mut sb));
    ensure!(sb[56] == 0x53 && sb[57] == 0xEF, "no ext2 magic through the kernel core");
    err!(libos::ring::pcore_add_device(kc.0, dev.dev), Error::Busy);
    ok!(libos::ring::pcore_del_device(kc.0, dev.dev));
    err!(libos::ring::pcore_del_device(kc.0, dev.dev), Error::NotFound);
    // Posted while no kernel core polls: the clear error, not a hang.
    sb.fill(0);
    err!(dev.read(2, &mut sb), Error::NoSuchCore);
    let st = ok!(sys::device_stat(dev.dev));
    ensure!(st.packets_in == 1, "a detached device served a request ({} reads)", st.packets_in);
    // Attached again: the request given up is served (and skipped), the next one answered.
    ok!(libos::ring::pcore_add_device(kc.0, dev.dev));
    ok!(dev.read(2, &mut sb));
    ensure!(sb[56] == 0x53 && sb[57] == 0xEF, "wrong bytes after attaching again");
    // The kernel core stops being one (its role changes) with the device attached: the same.
    let core = cores() - 1;
    ensure!(ok!(dev.kernel_core()) == Some(core), "the header does not name kernel core {core}");
    ok!(sys::pcore_set_role(kc.0, abi::ROLE_XC));
    // The role changes when the core next looks: wait (bounded) until its loop has ended.
    // Bounded in time (5 s), so that a core that never leaves its loop fails here, not by the
    // boot's timeout.
    ensure!(libos::time::wait_until(5_000, || matches!(dev.kernel_core(), Ok(None))), "the header still names core {core} 5 s after its role changed");
    err!(dev.read(2, &mut sb), Error::NoSuchCore);
    ok!(sys::pcore_set_role(kc.0, abi::ROLE_KC));
    ensure!(libos::time::wait_until(5_000, || dev.kernel_core() == Ok(Some(core))), "the header does not name core {core} 5 s after it became a kernel core again");
    sb.fill(0);
    ok!(dev.read(2, &mut sb));
    ensure!(sb[56] == 0x53 && sb[57] == 0xEF, "wrong bytes once a kernel core again");
    drop(dev);
    remount_after(kc)
}

/// Catches: a write given up while no kernel core polls (`NoSuchCore`) served later from a
/// data area the next request had already overwritten (the given-up sector written with the
/// other request's bytes: an earlier ring protocol did); a request refused with
/// `NoSuchCore` that still reaches the disk.
fn dedicated_given_up_write_not_replayed() -> TestResult {
    let Some(kc) = last_core_as_kc()? else { return Ok(Pass::Skipped("one core")) };
    let share = libos::process::proc_share();
    let mut dev = ok!(BlockDevice::open_dedicated(share, 1, kc.0));
    let cap = ok!(sys::device_stat(dev.dev)).buffers;
    // Two pages near the end of the disk (past `t_ded`'s), put back at the end.
    let (a, b) = (cap - 96, cap - 88);
    let (mut old_a, mut old_b) = (vec![0u8; 4096], vec![0u8; 4096]);
    ok!(dev.read(a, &mut old_a));
    ok!(dev.read(b, &mut old_b));
    let (new_a, new_b) = (vec![0xA5u8; 4096], vec![0x5Bu8; 4096]);
    ensure!(old_a != new_a && old_b != new_b, "the disk already holds the test's patterns");
    ok!(libos::ring::pcore_del_device(kc.0, dev.dev));
    err!(dev.write(a, &new_a), Error::NoSuchCore);
    // The write of `a` is still on the ring: this one must not reuse the data area (nor reach
    // the disk) before that one is answered.
    err!(dev.write(b, &new_b), Error::NoSuchCore);
    err!(dev.flush(), Error::NoSuchCore);
    ok!(libos::ring::pcore_add_device(kc.0, dev.dev));
    let mut got = vec![0u8; 4096];
    ok!(dev.read(a, &mut got));
    let r1 = if got == new_a { Ok(()) } else { Err(got[0]) };
    ok!(dev.read(b, &mut got));
    let r2 = got == old_b;
    // Put both pages back before judging.
    ok!(dev.write(a, &old_a));
    ok!(dev.write(b, &old_b));
    ok!(dev.flush());
    if let Err(x) = r1 {
        return Err(Msg::new(format_args!("sector {a}: the given-up write was served with other bytes (first byte {x:#x})")));
    }
    ensure!(r2, "sector {b}: a write refused with NoSuchCore reached the disk");
    drop(dev);
    remount_after(kc)
}

/// The name of the file `dedicated_mount` writes.
const DED_FILE: &str = "/dedicated-mount.bin";
const DED_LEN: usize = 70_000;

/// Catches: `mount_with(Dedicated)` still reading through `device_buf` (a cold read would not
/// fail while the kernel core is away); a miss or write-back through the rings with wrong
/// bytes, or lost; a miss with no kernel core that hangs or poisons the cache; a mount that
/// leaves the image unclean (the suite's `e2fsck -fn` after the boot).
fn dedicated_mount() -> TestResult {
    if cores() < 2 {
        return Ok(Pass::Skipped("one core"));
    }
    fs_ok("unmount", fs::unmount())?;
    let kc = Kc::make(cores() - 1)?;
    let rings = cores().min(abi::BLK_MAX_RINGS);
    let r = fs::mount_with(fs::disk::DiskMode::Dedicated { kernel_core: kc.0, rings }).map_err(|e| Msg::new(format_args!("mount_with(Dedicated): {e:?}")));
    let r = r.and_then(|()| dedicated_mount_body(&kc));
    let u = fs::unmount();
    drop(kc);
    r?;
    fs_ok("unmount (Dedicated)", u)?;
    // What the Dedicated mount wrote is on the disk: read it back through Polling.
    fs_ok("mount", fs::mount())?;
    let data: Vec<u8> = (0..DED_LEN).map(|i| files::byte(77, i)).collect();
    ensure!(fs_ok(DED_FILE, fs::read_all(DED_FILE, DED_LEN + 1))? == data, "{DED_FILE}: not on the disk after the Dedicated unmount");
    fs_ok("unlink", fs::unlink(DED_FILE))?;
    fs_ok("sync", fs::sync())?;
    Ok(Pass::Ok)
}

fn dedicated_mount_body(kc: &Kc) -> TestResult {
    fs_ok("drop clean", fs::cache_drop_clean())?;
    let (_, before) = fs_ok("stats", fs::cache_stats())?;
    for (path, len, seed) in files::FILES {
        let got = fs_ok(path, fs::read_all(path, len + 1))?;
        ensure!(got.len() == len, "{path}: {} bytes, want {len}", got.len());
        if let Some(k) = (0..len).find(|&k| got[k] != files::byte(seed, k)) {
            return Err(Msg::new(format_args!("{path}: byte {k} is {:#x}, want {:#x}", got[k], files::byte(seed, k))));
        }
    }
    let (_, after) = fs_ok("stats", fs::cache_stats())?;
    ensure!(after.packets_in > before.packets_in, "cold reads made no disk reads");
    // A new file, written back through the rings, then read cold through them.
    let data: Vec<u8> = (0..DED_LEN).map(|i| files::byte(77, i)).collect();
    let fd = fs_ok(DED_FILE, fs::open(DED_FILE, fs::O_WRONLY | fs::O_CREAT | fs::O_EXCL))?;
    for piece in data.chunks(9000) {
        ensure!(fs_ok(DED_FILE, fs::write(fd, piece))? == piece.len(), "short write");
    }
    fs_ok("close", fs::close(fd))?;
    fs_ok("sync", fs::sync())?;
    let (_, synced) = fs_ok("stats", fs::cache_stats())?;
    ensure!(synced.packets_out > after.packets_out, "sync wrote nothing");
    fs_ok("drop clean", fs::cache_drop_clean())?;
    ensure!(fs_ok(DED_FILE, fs::read_all(DED_FILE, DED_LEN + 1))? == data, "{DED_FILE}: read back wrong");
    // The kernel core goes away: a cold read is a clear error, not a hang (bounded wait for
    // its loop to end: reads succeed until then).
    ok!(sys::pcore_set_role(kc.0, abi::ROLE_XC));
    let t0 = libos::time::now_ns();
    loop {
        fs_ok("drop clean", fs::cache_drop_clean())?;
        match fs::read_all("/hello.txt", 4096) {
            Err(FsError::Io) => break,
            Ok(_) => {}
            Err(e) => return Err(Msg::new(format_args!("cold read without a kernel core: {e:?}, want Io"))),
        }
        ensure!(libos::time::now_ns() - t0 < 10_000_000_000, "cold reads still succeed 10 s after the kernel core left");
    }
    // Back: the same reads work again (the request given up is answered and skipped).
    ok!(sys::pcore_set_role(kc.0, abi::ROLE_KC));
    let t0 = libos::time::now_ns();
    loop {
        match fs::read_all("/hello.txt", 4096) {
            Ok(b) => {
                ensure!(b == files::HELLO, "/hello.txt wrong after the kernel core came back");
                break;
            }
            Err(FsError::Io) => ensure!(libos::time::now_ns() - t0 < 10_000_000_000, "cold reads still fail 10 s after the kernel core came back"),
            Err(e) => return Err(Msg::new(format_args!("read once the kernel core is back: {e:?}"))),
        }
    }
    ensure!(fs_ok(DED_FILE, fs::read_all(DED_FILE, DED_LEN + 1))? == data, "{DED_FILE}: wrong after the kernel core came back");
    Ok(Pass::Ok)
}

/// One core's part of `two_cores_create_in_own_directories`: 120 creates of `/pcC/f<k % 5>`,
/// each written (1..4000 bytes, a data block) and closed; every 10th kept under `/pcC/keep<k>`
/// and checked, the others unlinked. 0 when every call succeeded and every kept file read back.
fn create_loop(c: u64) -> u64 {
    let mut buf = [0u8; 4000];
    for k in 0..120u64 {
        let keep = k % 10 == 9;
        let path = if keep { alloc::format!("/pc{c}/keep{k}") } else { alloc::format!("/pc{c}/f{}", k % 5) };
        let len = 1 + ((k * 331 + c * 17) % 3999) as usize;
        for (i, b) in buf[..len].iter_mut().enumerate() {
            *b = (i as u64 + k + c) as u8;
        }
        let Ok(fd) = fs::open(&path, fs::O_RDWR | fs::O_CREAT | fs::O_EXCL) else { return 1 };
        if fs::write(fd, &buf[..len]) != Ok(len) || fs::close(fd).is_err() {
            return 2;
        }
        if !keep && fs::unlink(&path).is_err() {
            return 3;
        }
        if keep {
            match fs::read_all(&path, 8192) {
                Ok(v) if v[..] == buf[..len] => {}
                _ => return 4,
            }
        }
    }
    0
}

/// Catches: per-core reserves of inodes and blocks that two cores corrupt when they create,
/// write and unlink in their own directories at once (a file handed the same inode or block
/// as another, a kept file's bytes wrong), and reserves that leak on sync or unmount: after
/// a sync nothing is left in a reserve, and after an unmount and a mount the free counts on
/// the disk are exactly those of before less the files kept (then, with them removed, exactly
/// those of before). `e2fsck -fn` on the image after the suite checks the bitmaps.
fn two_cores_create_in_own_directories() -> TestResult {
    if cores() < 2 {
        return Ok(Pass::Skipped("one core"));
    }
    fs_ok("mount", fs::mount())?;
    for c in 0..2 {
        match fs::mkdir(&alloc::format!("/pc{c}")) {
            Ok(()) | Err(FsError::Exists) => {}
            Err(e) => return Err(Msg::new(format_args!("mkdir /pc{c}: {e:?}"))),
        }
    }
    fs_ok("sync", fs::sync())?;
    ensure!(fs_ok("reserved", fs::reserved())? == (0, 0), "reserves not empty after a sync");
    let u0 = fs_ok("df", fs::df())?;
    let t = ok!(libos::thread::spawn(1, create_loop, 1));
    let here = create_loop(0);
    let there = ok!(t.join());
    ensure!(here == 0 && there == 0, "create loops: core 0 returned {here}, core 1 {there} (1 create, 2 write/close, 3 unlink, 4 a kept file read back wrong)");
    let (ri, rb) = fs_ok("reserved", fs::reserved())?;
    ensure!(ri > 0 && rb > 0, "the reserves were not used ({ri} inodes, {rb} blocks held)");
    let u1 = fs_ok("df", fs::df())?;
    // 12 kept files per core, each of one data block (at most 4000 bytes).
    ensure!(u1.free_inodes + 24 == u0.free_inodes && u1.free_blocks + 24 == u0.free_blocks, "df before the sync: {} -> {} free inodes, {} -> {} free blocks", u0.free_inodes, u1.free_inodes, u0.free_blocks, u1.free_blocks);
    fs_ok("sync", fs::sync())?;
    ensure!(fs_ok("reserved", fs::reserved())? == (0, 0), "reserves not given back by sync");
    fs_ok("unmount", fs::unmount())?;
    fs_ok("mount", fs::mount())?;
    let u2 = fs_ok("df", fs::df())?;
    ensure!(u2.free_inodes == u1.free_inodes && u2.free_blocks == u1.free_blocks, "on the disk after a remount: {} free inodes, {} free blocks (want {}, {})", u2.free_inodes, u2.free_blocks, u1.free_inodes, u1.free_blocks);
    for c in 0..2 {
        for k in (9..120).step_by(10) {
            fs_ok("unlink", fs::unlink(&alloc::format!("/pc{c}/keep{k}")))?;
        }
    }
    fs_ok("unmount", fs::unmount())?;
    fs_ok("mount", fs::mount())?;
    let u3 = fs_ok("df", fs::df())?;
    ensure!(u3.free_inodes == u0.free_inodes && u3.free_blocks == u0.free_blocks, "after removing the kept files: {} free inodes, {} free blocks (want {}, {})", u3.free_inodes, u3.free_blocks, u0.free_inodes, u0.free_blocks);
    Ok(Pass::Ok)
}

/// Files each core of `dir_locks_*` makes per round.
const DL_ROUNDS: u64 = 150;

/// Makes the shared directory's names long enough (56-byte records) that the kept ones need
/// two blocks and more: the directory grows while both cores add to it.
const DL_PAD: &str = "_padding_padding_padding_padding_padding";

/// One core's part of `dir_locks_own_and_shared_directories`: in round `k`, create
/// `/dl{c}/f{k}` and `/dls/c{c}_{k}` (`O_CREAT | O_EXCL`, closed at once), and unlink both
/// again unless `k % 3 == 0`. Nonzero: the step that failed.
fn dir_lock_loop(c: u64) -> u64 {
    for k in 0..DL_ROUNDS {
        for (i, path) in [alloc::format!("/dl{c}/f{k}"), alloc::format!("/dls/c{c}_{k}{DL_PAD}")].iter().enumerate() {
            let Ok(fd) = fs::open(path, fs::O_WRONLY | fs::O_CREAT | fs::O_EXCL) else { return 1 + i as u64 * 10 };
            if fs::close(fd).is_err() {
                return 2 + i as u64 * 10;
            }
            if k % 3 != 0 && fs::unlink(path).is_err() {
                return 3 + i as u64 * 10;
            }
        }
    }
    0
}

/// The names directory `d` holds (without `.` and `..`), sorted.
fn names_in(d: &str) -> Result<Vec<alloc::string::String>, Msg> {
    let mut v: Vec<alloc::string::String> = fs_ok("readdir", fs::readdir(d))?.iter().map(|e| alloc::string::String::from(core::str::from_utf8(&e.name).unwrap_or("?"))).filter(|n| n != "." && n != "..").collect();
    v.sort();
    Ok(v)
}

/// Catches: creates and unlinks on the per-directory side (each core's own `Ext2`, one
/// directory stripe lock, no exclusive lock) that lose or duplicate a name when two cores
/// change one directory at once, or corrupt a directory block, an inode or the bitmaps when
/// they change different ones. Every core (at most 4) creates and unlinks in a directory of
/// its own and in one shared directory at once (long names there, so it grows by blocks
/// while they do); afterwards each directory holds exactly the
/// names kept, every kept name stats as a regular file, most changes ran on the
/// per-directory side, and (after the suite) `e2fsck -fn` finds the image clean. Checked
/// against a planted bug: `change_hook` not taking the stripe lock (fails with names missing
/// from /dls or a corrupt-entry error).
fn dir_locks_own_and_shared_directories() -> TestResult {
    let Some(n) = mounted_on_cores()? else { return Ok(Pass::Skipped("one core")) };
    empty_dirs("/dl", n)?;
    fs_ok("sync", fs::sync())?;
    let before = dir_side_now(n);
    let rcs = on_cores(n, dir_lock_loop)?;
    ensure!(rcs.iter().all(|r| *r == 0), "loops returned {rcs:?} (1 create, 2 close, 3 unlink; +10 in /dls)");
    let kept = |c: u64, shared: bool| -> Vec<alloc::string::String> {
        let mut v: Vec<alloc::string::String> = (0..DL_ROUNDS).filter(|k| k % 3 == 0).map(|k| if shared { alloc::format!("c{c}_{k}{DL_PAD}") } else { alloc::format!("f{k}") }).collect();
        v.sort();
        v
    };
    for c in 0..n {
        let d = alloc::format!("/dl{c}");
        let got = names_in(&d)?;
        ensure!(got == kept(c, false), "{d} holds {} names, want {}", got.len(), kept(c, false).len());
    }
    let mut want: Vec<alloc::string::String> = (0..n).flat_map(|c| kept(c, true)).collect();
    want.sort();
    let got = names_in("/dls")?;
    let missing: Vec<&alloc::string::String> = want.iter().filter(|w| !got.contains(w)).take(3).collect();
    ensure!(got == want, "/dls holds {} names, want {} (missing e.g. {missing:?})", got.len(), want.len());
    for w in &want {
        let st = fs_ok("stat", fs::stat_walk(&alloc::format!("/dls/{w}")))?;
        ensure!(st.mode & fs::S_IFMT == fs::S_IFREG && st.links == 1 && st.size == 0, "/dls/{w}: {st:?}");
    }
    // Every create and unlink of a round on the per-directory side but for reserve refills
    // (one in 32 creates falls back to the exclusive side): 2 creates and 4/3 unlinks a round,
    // 500 in all. (The closes take no lock at all: the descriptors are per-core slots;
    // when they were not, each close counted here too.)
    dir_side_at_least(&before, DL_ROUNDS * 3)?;
    fs_ok("sync", fs::sync())?;
    ensure!(fs_ok("reserved", fs::reserved())? == (0, 0), "reserves not given back by sync");
    Ok(Pass::Ok)
}

/// Core 1's part of `dir_locks_renames_and_rmdirs_race_creates`: create and unlink in
/// `/dr1` and in `/drs` (the directory core 0 makes and removes directories in and renames
/// into), keeping every fourth file.
fn dir_race_loop(c: u64) -> u64 {
    for k in 0..DL_ROUNDS {
        for (i, path) in [alloc::format!("/dr{c}/f{k}"), alloc::format!("/drs/c{c}_{k}")].iter().enumerate() {
            let Ok(fd) = fs::open(path, fs::O_WRONLY | fs::O_CREAT | fs::O_EXCL) else { return 1 + i as u64 * 10 };
            if fs::close(fd).is_err() {
                return 2 + i as u64 * 10;
            }
            if k % 4 != 0 && fs::unlink(path).is_err() {
                return 3 + i as u64 * 10;
            }
        }
    }
    0
}

/// Catches: exclusive changes (mkdir, rename within and across directories, rmdir) that race
/// per-directory creates and unlinks in the same directories and lose or duplicate a name, or
/// leave a directory inconsistent. Core 1 creates and unlinks in `/dr1` and `/drs`; core 0
/// at the same time makes `/drs/d{k}`, renames it to `/drx/d{k}`, renames a file of its own
/// into `/drs` and back, and removes the directory. Afterwards the names are exactly those
/// expected and `e2fsck -fn` (after the suite) finds the image clean.
fn dir_locks_renames_and_rmdirs_race_creates() -> TestResult {
    if cores() < 2 {
        return Ok(Pass::Skipped("one core"));
    }
    fs_ok("mount", fs::mount())?;
    for d in ["/drs", "/drx", "/dr0", "/dr1"] {
        empty_dir(d)?;
    }
    make_file("/dr0/moving", b"moving")?;
    let t = ok!(libos::thread::spawn(1, dir_race_loop, 1));
    let mut err = None;
    for k in 0..DL_ROUNDS / 2 {
        let steps = || -> Result<(), Msg> {
            fs_ok("mkdir", fs::mkdir(&alloc::format!("/drs/d{k}")))?;
            fs_ok("rename dir", fs::rename(&alloc::format!("/drs/d{k}"), &alloc::format!("/drx/d{k}")))?;
            fs_ok("rename in", fs::rename("/dr0/moving", "/drs/moving"))?;
            fs_ok("rename out", fs::rename("/drs/moving", "/dr0/moving"))?;
            fs_ok("rmdir", fs::rmdir(&alloc::format!("/drx/d{k}")))
        };
        if let Err(e) = steps() {
            err = Some(e);
            break;
        }
    }
    let rc = ok!(t.join());
    if let Some(e) = err {
        return Err(e);
    }
    ensure!(rc == 0, "core 1's loop returned {rc} (1 create, 2 close, 3 unlink; +10 in /drs)");
    let mut want: Vec<alloc::string::String> = (0..DL_ROUNDS).filter(|k| k % 4 == 0).map(|k| alloc::format!("c1_{k}")).collect();
    want.sort();
    ensure!(names_in("/drs")? == want, "/drs holds {:?}", names_in("/drs")?.len());
    ensure!(names_in("/drx")?.is_empty(), "/drx not empty");
    ensure!(names_in("/dr0")? == vec![alloc::string::String::from("moving")], "/dr0: {:?}", names_in("/dr0")?);
    let mut want1: Vec<alloc::string::String> = (0..DL_ROUNDS).filter(|k| k % 4 == 0).map(|k| alloc::format!("f{k}")).collect();
    want1.sort();
    ensure!(names_in("/dr1")? == want1, "/dr1 holds {} names", names_in("/dr1")?.len());
    ensure!(fs_ok("read", fs::read_all("/dr0/moving", 64))? == b"moving", "/dr0/moving's bytes");
    let root = fs_ok("stat", fs::stat_walk("/drs"))?;
    ensure!(root.links == 2, "/drs has {} links after its subdirectories went (want 2)", root.links);
    fs_ok("sync", fs::sync())?;
    Ok(Pass::Ok)
}

/// Round core 0 of `close_races_the_unlink_of_its_file` has its file open in (core 1 unlinks it).
static OR_ROUND: AtomicU64 = AtomicU64::new(0);
/// Rounds core 1 has started unlinking.
static OR_UNLINKING: AtomicU64 = AtomicU64::new(0);
const OR_ROUNDS: u64 = 300;

/// Core 1's part: unlink `/or/f{k}` as soon as core 0 says it is open.
fn orphan_unlinker(_: u64) -> u64 {
    for k in 1..=OR_ROUNDS {
        // Polls for 2 ms, as before, then halts between looks; after 10 s the unlink below
        // fails and says which round.
        libos::time::wait_until(10_000, || OR_ROUND.load(Ordering::Acquire) >= k);
        OR_UNLINKING.store(k, Ordering::Release);
        if fs::unlink(&alloc::format!("/or/f{k}")).is_err() {
            return k;
        }
    }
    0
}

/// Catches: a close on one core that releases the file an unlink on another core is making
/// an orphan before that unlink has written the inode (the release then finds the link count
/// still 1 and leaks the inode, or frees it and the unlink writes over it). Core 0 makes a
/// file, keeps it open, lets core 1 unlink it and closes it at once, 300 times; afterwards
/// the free inode count is back where it was (after a sync) and (after the suite) `e2fsck
/// -fn` finds no unattached inode. Checked against planted bugs: a per-directory close that
/// does not release the orphan fails (297 of 300 rounds went through the orphan path: "3703
/// -> 3406 free inodes"); the close not waiting for the unlink's stripe was *not* caught in
/// two runs (the window, between the unlink's scan and its inode write, is a few hundred
/// instructions).
fn close_races_the_unlink_of_its_file() -> TestResult {
    if cores() < 2 {
        return Ok(Pass::Skipped("one core"));
    }
    fs_ok("mount", fs::mount())?;
    empty_dir("/or")?;
    fs_ok("sync", fs::sync())?;
    let u0 = fs_ok("df", fs::df())?;
    OR_ROUND.store(0, Ordering::Release);
    OR_UNLINKING.store(0, Ordering::Release);
    let t = ok!(libos::thread::spawn(1, orphan_unlinker, 0));
    let mut err = None;
    for k in 1..=OR_ROUNDS {
        let fd = match fs::open(&alloc::format!("/or/f{k}"), fs::O_RDWR | fs::O_CREAT | fs::O_EXCL) {
            Ok(fd) => fd,
            Err(e) => {
                err = Some(Msg::new(format_args!("create /or/f{k}: {e:?}")));
                break;
            }
        };
        OR_ROUND.store(k, Ordering::Release);
        libos::time::wait_until(10_000, || OR_UNLINKING.load(Ordering::Acquire) >= k);
        // Spin a little (a different amount each round) so that the close lands at different
        // points of the unlink.
        for _ in 0..(k * 997) % 30_000 {
            core::hint::spin_loop();
        }
        if let Err(e) = fs::close(fd) {
            err = Some(Msg::new(format_args!("close /or/f{k}: {e:?}")));
            break;
        }
    }
    if err.is_some() {
        OR_ROUND.store(OR_ROUNDS, Ordering::Release);
    }
    let rc = ok!(t.join());
    if let Some(e) = err {
        return Err(e);
    }
    ensure!(rc == 0, "unlink of /or/f{rc} failed");
    ensure!(names_in("/or")?.is_empty(), "/or not empty");
    fs_ok("sync", fs::sync())?;
    let u1 = fs_ok("df", fs::df())?;
    ensure!(u1.free_inodes == u0.free_inodes && u1.free_blocks == u0.free_blocks, "after 300 opens, unlinks and closes: {} -> {} free inodes, {} -> {} free blocks", u0.free_inodes, u1.free_inodes, u0.free_blocks, u1.free_blocks);
    Ok(Pass::Ok)
}

/// The file system mounted, and how many cores (2 to 4) a test that runs a loop on each
/// uses; `None` on one core.
fn mounted_on_cores() -> Result<Option<u64>, Msg> {
    let n = cores().min(4) as u64;
    if n < 2 {
        return Ok(None);
    }
    fs_ok("mount", fs::mount())?;
    Ok(Some(n))
}

/// `PREFIX` + "s" (the directory every core shares) and `PREFIX0`..`PREFIX{n-1}` (one per
/// core), each made or emptied.
fn empty_dirs(prefix: &str, n: u64) -> Result<(), Msg> {
    empty_dir(&alloc::format!("{prefix}s"))?;
    for c in 0..n {
        empty_dir(&alloc::format!("{prefix}{c}"))?;
    }
    Ok(())
}

/// Run `f(c)` on cores 1..n as threads of this program and `f(0)` here, at once; the
/// return codes, core 0's first.
fn on_cores(n: u64, f: fn(u64) -> u64) -> Result<Vec<u64>, Msg> {
    let mut threads = Vec::new();
    for c in 1..n {
        threads.push(ok!(libos::thread::spawn(c, f, c)));
    }
    let mut rcs = vec![f(0)];
    for t in threads {
        rcs.push(ok!(t.join()));
    }
    Ok(rcs)
}

/// Each of cores 0..n's count of changes made on the per-directory side so far.
fn dir_side_now(n: u64) -> Vec<u64> {
    (0..n as usize).map(fs::dir_side_changes).collect()
}

/// Every core counted in `before` (by `dir_side_now`) made at least `want` changes on the
/// per-directory side since.
fn dir_side_at_least(before: &[u64], want: u64) -> Result<(), Msg> {
    for (c, b) in before.iter().enumerate() {
        let d = fs::dir_side_changes(c) - b;
        ensure!(d >= want, "core {c}: {d} changes on the per-directory side (want at least {want})");
    }
    Ok(())
}

/// The free blocks and inodes are what `df0` counted (everything made since was removed);
/// `why` ends the message.
fn df_as_before(df0: &fs::Usage, why: &str) -> Result<(), Msg> {
    let df1 = fs_ok("df", fs::df())?;
    ensure!((df1.free_blocks, df1.free_inodes) == (df0.free_blocks, df0.free_inodes), "free blocks {} -> {}, inodes {} -> {}{why}", df0.free_blocks, df1.free_blocks, df0.free_inodes, df1.free_inodes);
    Ok(())
}

/// Remove every entry of directory `d` (made if missing): leftovers of an earlier boot on the
/// same image.
fn empty_dir(d: &str) -> Result<(), Msg> {
    match fs::mkdir(d) {
        Ok(()) | Err(FsError::Exists) => {}
        Err(e) => return Err(Msg::new(format_args!("mkdir {d}: {e:?}"))),
    }
    for e in fs_ok("readdir", fs::readdir(d))? {
        let name = core::str::from_utf8(&e.name).unwrap_or("?");
        if name != "." && name != ".." {
            fs_ok("unlink leftover", fs::unlink(&alloc::format!("{d}/{name}")))?;
        }
    }
    Ok(())
}

/// Whether the name cache's answer for `path` (`stat`) is the locked walk's (`stat_walk`):
/// both the same inode and size, or both `NotFound`.
fn cache_agrees(path: &str) -> Result<Option<fs::Stat>, Msg> {
    match (fs::stat(path), fs::stat_walk(path)) {
        (Ok(a), Ok(b)) if a.ino == b.ino && a.size == b.size && a.links == b.links => Ok(Some(b)),
        (Err(FsError::NotFound), Err(FsError::NotFound)) => Ok(None),
        (a, b) => Err(Msg::new(format_args!("{path}: the name cache says {a:?}, the walk {b:?}"))),
    }
}

fn make_file(path: &str, data: &[u8]) -> Result<(), Msg> {
    let fd = fs_ok("create", fs::open(path, fs::O_RDWR | fs::O_CREAT | fs::O_TRUNC))?;
    fs_ok("write", fs::write(fd, data))?;
    fs_ok("close", fs::close(fd))
}

/// Catches: a name-cache generation that is not per directory (a create in one directory
/// must leave another directory's entries and per-core descriptors good: hits, reads without
/// the lock), and one that misses a change it should see: a write through another descriptor
/// (the file's own stripe), a rename replacing a cached name in another directory (the new
/// name's side), a directory on the path renamed away (a middle inode of the chain), an
/// unlink. Checked against planted bugs: every change moving the epoch (fails at "create in
/// /nd_b"); `rename` naming only its old path (fails at "replaced"); the lookup checking only
/// the last inode of the chain (fails at "directory renamed away").
fn name_cache_per_directory() -> TestResult {
    fs_ok("mount", fs::mount())?;
    for d in ["/nd_a", "/nd_b", "/nd_c"] {
        empty_dir(d)?;
    }
    make_file("/nd_a/x", b"xx")?;
    make_file("/nd_b/y", b"yyyy")?;
    let names = &fs::names::NAMES;
    let c = libos::core_id() as usize;
    let x = fs_ok("stat", fs::stat("/nd_a/x"))?;
    let (h0, _) = names.counts(c);
    fs_ok("stat", fs::stat("/nd_a/x"))?;
    ensure!(names.counts(c).0 == h0 + 1, "second stat of /nd_a/x was not a hit");
    // A per-core descriptor of /nd_a/x, reading without the lock.
    let fd = fs_ok("open", fs::open("/nd_a/x", fs::O_RDONLY))?;
    ensure!(fs::open_files::is_fast(fd.0), "open of a cached name is not per-core");
    let mut b = [0u8; 8];
    let u0 = fs::unlocked_reads(c);
    ensure!(fs_ok("pread", fs::pread(fd, &mut b, 0))? == 2, "pread of /nd_a/x");
    ensure!(fs::unlocked_reads(c) == u0 + 1, "pread of a per-core descriptor took the lock");
    // Changes in another directory leave both alone.
    make_file("/nd_b/t", b"t")?;
    fs_ok("unlink", fs::unlink("/nd_b/t"))?;
    fs_ok("mkdir", fs::mkdir("/nd_b/sub"))?;
    fs_ok("rmdir", fs::rmdir("/nd_b/sub"))?;
    let (h1, _) = names.counts(c);
    ensure!(fs_ok("stat", fs::stat("/nd_a/x"))? == x && names.counts(c).0 == h1 + 1, "create in /nd_b: /nd_a/x's entry stopped being used");
    let u1 = fs::unlocked_reads(c);
    ensure!(fs_ok("pread", fs::pread(fd, &mut b, 0))? == 2 && fs::unlocked_reads(c) == u1 + 1, "create in /nd_b: /nd_a/x's per-core descriptor read under the lock");
    fs_ok("fstat", fs::fstat(fd))?;
    // A write through another descriptor of the same file: seen at once.
    let w = fs_ok("open w", fs::open("/nd_a/x", fs::O_WRONLY | fs::O_APPEND))?;
    fs_ok("write", fs::write(w, b"xxx"))?;
    fs_ok("close", fs::close(w))?;
    ensure!(fs_ok("stat", fs::stat("/nd_a/x"))?.size == 5, "stale size after a write through another descriptor");
    ensure!(fs_ok("fstat", fs::fstat(fd))?.size == 5, "per-core descriptor's fstat stale after a write");
    ensure!(fs_ok("pread", fs::pread(fd, &mut b, 0))? == 5, "per-core descriptor read stale after a write");
    fs_ok("close", fs::close(fd))?;
    // A rename from /nd_b replacing the cached /nd_a/x.
    let y = fs_ok("stat", fs::stat("/nd_b/y"))?;
    fs_ok("stat", fs::stat("/nd_a/x"))?;
    fs_ok("rename", fs::rename("/nd_b/y", "/nd_a/x"))?;
    let now = fs_ok("stat", fs::stat("/nd_a/x"))?;
    ensure!(now.ino == y.ino && now.size == 4, "replaced: /nd_a/x still names inode {} (want {})", now.ino, y.ino);
    err!(fs::stat("/nd_b/y"), FsError::NotFound);
    // A directory in the middle of the path renamed away.
    fs_ok("stat", fs::stat("/nd_a/x"))?;
    fs_ok("rename dir", fs::rename("/nd_a", "/nd_c/a2"))?;
    ensure!(fs::stat("/nd_a/x") == Err(FsError::NotFound), "directory renamed away: /nd_a/x still found ({:?})", fs::stat("/nd_a/x"));
    ensure!(fs_ok("stat", fs::stat("/nd_c/a2/x"))?.ino == y.ino, "/nd_c/a2/x after the rename");
    fs_ok("rename back", fs::rename("/nd_c/a2", "/nd_a"))?;
    ensure!(fs_ok("stat", fs::stat("/nd_a/x"))?.ino == y.ino, "/nd_a/x after the rename back");
    fs_ok("unlink", fs::unlink("/nd_a/x"))?;
    err!(fs::stat("/nd_a/x"), FsError::NotFound);
    Ok(Pass::Ok)
}

/// The payload of core `c`'s file number `k` (12 bytes, names both).
fn payload(c: u64, k: u64) -> [u8; 12] {
    let mut b = *b"core?-file??";
    b[4] = b'0' + c as u8;
    b[10] = b'0' + (k / 10) as u8;
    b[11] = b'0' + (k % 10) as u8;
    b
}

const NAME_ROUNDS: u64 = 50;

/// One core's part of `cores_change_names_at_once`: `NAME_ROUNDS` files `/cnC/fK`, each
/// written with `payload`, then (K % 5) renamed in its directory to `/cnC/rK`, renamed into
/// the shared `/cns/cC_K`, unlinked, kept, or renamed onto `/cns/bothK` (which the other
/// core's file K also renames onto, core 1 after core 0: core 1's stays). Between the changes it `stat`s its
/// own and the other core's names, so the name cache holds entries the changes must kill.
/// 0 when every call succeeded.
fn names_loop(c: u64) -> u64 {
    let o = 1 - c;
    for k in 0..NAME_ROUNDS {
        let own = alloc::format!("/cn{c}/f{k}");
        let Ok(fd) = fs::open(&own, fs::O_RDWR | fs::O_CREAT | fs::O_EXCL) else { return 1 };
        if fs::write(fd, &payload(c, k)) != Ok(12) || fs::close(fd).is_err() {
            return 2;
        }
        let _ = fs::stat(&own);
        let _ = fs::stat(&alloc::format!("/cn{o}/f{k}"));
        let _ = fs::stat(&alloc::format!("/cns/c{o}_{k}"));
        let both = alloc::format!("/cns/both{k}");
        if k % 5 == 4 && c == 1 {
            // Core 1 renames onto `both` second (core 0's file there first, then cached here),
            // so that a rename that fails to kill the replaced name's entry leaves it stale.
            let t0 = libos::time::now_ns();
            while fs::stat_walk(&both).is_err() {
                if libos::time::now_ns() - t0 > 10_000_000_000 {
                    return 4;
                }
            }
        }
        let _ = fs::stat(&both);
        let r = match k % 5 {
            0 => fs::rename(&own, &alloc::format!("/cn{c}/r{k}")),
            1 => fs::rename(&own, &alloc::format!("/cns/c{c}_{k}")),
            2 => fs::unlink(&own),
            3 => Ok(()),
            _ => fs::rename(&own, &both),
        };
        if r.is_err() {
            return 3;
        }
        let _ = fs::stat(&own);
        let _ = fs::stat(&both);
        let _ = fs::stat(&alloc::format!("/cn{o}/r{k}"));
    }
    0
}

/// Catches: changes by two cores at once in their own directories and in a shared one
/// (creates, renames within a directory and across, unlinks, both renaming onto one name)
/// that lose or corrupt a name or a file, leave the name cache answering what the locked
/// walk does not (an entry a change should have killed), or leave the image inconsistent
/// (the suite's `e2fsck -fn` after the boot). Every name either core ever used is checked:
/// present exactly when expected, with its core's bytes, and the cache agreeing with the walk;
/// each directory holds exactly the expected names. Checked against a planted bug (`rename`
/// naming only its old path's inodes): fails on a `/cns/bothK` entry.
fn cores_change_names_at_once() -> TestResult {
    if cores() < 2 {
        return Ok(Pass::Skipped("one core"));
    }
    fs_ok("mount", fs::mount())?;
    for d in ["/cn0", "/cn1", "/cns"] {
        empty_dir(d)?;
    }
    let t = ok!(libos::thread::spawn(1, names_loop, 1));
    let here = names_loop(0);
    let there = ok!(t.join());
    ensure!(here == 0 && there == 0, "name loops: core 0 returned {here}, core 1 {there} (1 create, 2 write/close, 3 rename/unlink, 4 core 0's file never reached /cns/bothK)");
    // The names both cores renamed onto first (checking others fills the cache, which may
    // evict an entry a change failed to kill).
    for k in (4..NAME_ROUNDS).step_by(5) {
        let p = alloc::format!("/cns/both{k}");
        ensure!(cache_agrees(&p)?.is_some(), "{p} missing");
        ensure!(fs_ok("read", fs::read_all(&p, 64))? == payload(1, k), "{p}: not core 1's bytes (core 1 renamed onto it last)");
    }
    let mut want: [alloc::vec::Vec<alloc::string::String>; 3] = Default::default();
    for c in 0..2u64 {
        for k in 0..NAME_ROUNDS {
            let (f, r, s) = (alloc::format!("/cn{c}/f{k}"), alloc::format!("/cn{c}/r{k}"), alloc::format!("/cns/c{c}_{k}"));
            let at = match k % 5 {
                0 => Some(r.clone()),
                1 => Some(s.clone()),
                3 => Some(f.clone()),
                _ => None,
            };
            for p in [&f, &r, &s] {
                let st = cache_agrees(p)?;
                ensure!(st.is_some() == (at.as_ref() == Some(p)), "{p}: present {}, want {}", st.is_some(), at.as_ref() == Some(p));
            }
            if let Some(p) = at {
                ensure!(fs_ok("read", fs::read_all(&p, 64))? == payload(c, k), "{p}: wrong bytes");
                want[if p.starts_with("/cns") { 2 } else { c as usize }].push(p);
            }
        }
    }
    for k in (4..NAME_ROUNDS).step_by(5) {
        want[2].push(alloc::format!("/cns/both{k}"));
    }
    for (i, d) in ["/cn0", "/cn1", "/cns"].iter().enumerate() {
        let mut have: alloc::vec::Vec<alloc::string::String> = fs_ok("readdir", fs::readdir(d))?
            .iter()
            .map(|e| core::str::from_utf8(&e.name).unwrap_or("?"))
            .filter(|n| *n != "." && *n != "..")
            .map(|n| alloc::format!("{d}/{n}"))
            .collect();
        have.sort();
        want[i].sort();
        ensure!(have == want[i], "{d}: {} names, want {} ({:?} vs {:?})", have.len(), want[i].len(), have.first(), want[i].first());
    }
    fs_ok("sync", fs::sync())?;
    Ok(Pass::Ok)
}


// ---- Writes, truncates (and links) on the per-directory side ----

/// Rounds of `dir_writes_loop`.
const DW_ROUNDS: u64 = 40;
/// Bytes each core writes per round into the one file every core writes (`/dws/both`).
const DW_SLICE: u64 = 512;

/// Round `k`'s bytes for a file of core `c` (`len` of them; never all zeros).
fn dw_bytes(c: u64, k: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (1 + (c * 61 + k * 7 + i as u64 * 13) % 251) as u8).collect()
}

/// What one core's file of `dir_writes_loop` should hold: its bytes, and the descriptor's
/// offset.
struct DwModel {
    bytes: Vec<u8>,
    off: u64,
}

impl DwModel {
    fn write_at(&mut self, at: u64, b: &[u8]) {
        let end = at as usize + b.len();
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        self.bytes[at as usize..end].copy_from_slice(b);
    }
}

/// One core's part of `dir_writes_own_and_shared_directories`: a file in its own directory
/// (`/dw{c}/own`) and one in the shared directory (`/dws/f{c}`), each written at its offset
/// (`write`: crossing blocks, the files growing past the 12 direct blocks into the indirect
/// ones), overwritten inside (`pwrite`), and every fourth round cut to half its size
/// (`ftruncate` of the own file, `truncate` by name of the shared one; the offset stays,
/// so the next write leaves a hole), and after every step read back whole through a
/// read-only descriptor of a cached name (the lock-free reads: `read_unlocked`) and
/// `stat`ed (the name cache) and compared with the model; plus a slice of `/dws/both` per
/// round, which every core writes (disjoint 512-byte slices, so several cores fill holes of
/// one block at once). Nonzero: 100 * round + the step that failed.
fn dir_writes_loop(c: u64) -> u64 {
    let own = alloc::format!("/dw{c}/own");
    let shared = alloc::format!("/dws/f{c}");
    let n = cores().min(4) as u64;
    let mut fds = [fs::Fd(0); 2];
    for (i, p) in [&own, &shared].iter().enumerate() {
        match fs::open(p, fs::O_RDWR | fs::O_CREAT | fs::O_EXCL) {
            Ok(fd) => fds[i] = fd,
            Err(_) => return 1,
        }
    }
    let Ok(both) = fs::open("/dws/both", fs::O_WRONLY) else { return 2 };
    let mut models = [DwModel { bytes: Vec::new(), off: 0 }, DwModel { bytes: Vec::new(), off: 0 }];
    let mut buf = vec![0u8; 1 << 17];
    for k in 0..DW_ROUNDS {
        let e = |step: u64| 100 * k + step;
        for i in 0..2 {
            let (fd, m, path) = (fds[i], &mut models[i], if i == 0 { &own } else { &shared });
            let len = (300 + (k * 1237 + i as u64 * 501 + c * 97) % 4000) as usize;
            let b = dw_bytes(c, k + 10 * i as u64, len);
            if fs::write(fd, &b) != Ok(len) {
                return e(3);
            }
            let at = m.off;
            m.write_at(at, &b);
            m.off += len as u64;
            let at = (k * 131 + c * 17) % m.bytes.len() as u64;
            let small = dw_bytes(c + 5, k, 77);
            if fs::pwrite(fd, &small, at) != Ok(77) {
                return e(4);
            }
            m.write_at(at, &small);
            if k % 4 == 3 {
                let half = m.bytes.len() as u64 / 2;
                let r = if i == 0 { fs::ftruncate(fd, half) } else { fs::truncate(path, half) };
                if r.is_err() {
                    return e(5);
                }
                m.bytes.truncate(half as usize);
            }
            // The third pattern: reads without the lock, of a file this core just changed.
            let Ok(rd) = fs::open(path, fs::O_RDONLY) else { return e(6) };
            let got = fs::pread(rd, &mut buf, 0);
            let _ = fs::close(rd);
            if got != Ok(m.bytes.len()) || buf[..m.bytes.len()] != m.bytes[..] {
                return e(7);
            }
            match fs::stat(path) {
                Ok(st) if st.size == m.bytes.len() as u64 => {}
                _ => return e(8),
            }
        }
        let slice = dw_bytes(c + 20, k, DW_SLICE as usize);
        if fs::pwrite(both, &slice, (k * n + c) * DW_SLICE) != Ok(DW_SLICE as usize) {
            return e(9);
        }
    }
    // A write needing more blocks than a core's reserve holds (64): whole, on either side.
    let big = dw_bytes(c + 60, 0, 300 << 10);
    let path = alloc::format!("/dw{c}/big");
    let Ok(fd) = fs::open(&path, fs::O_RDWR | fs::O_CREAT | fs::O_EXCL) else { return 13 };
    if fs::write(fd, &big) != Ok(big.len()) {
        return 14;
    }
    let mut back = vec![0u8; big.len() + 1];
    if fs::pread(fd, &mut back, 0) != Ok(big.len()) || back[..big.len()] != big[..] || fs::close(fd).is_err() {
        return 15;
    }
    // Then every core appends records to one file at once (`O_APPEND`: the size read and
    // moved under the file's stripe).
    let Ok(app) = fs::open("/dws/appended", fs::O_WRONLY | fs::O_APPEND) else { return 11 };
    for k in 0..DW_APPENDS {
        if fs::write(app, &dw_record(c, k)) != Ok(DW_RECORD) {
            return 12;
        }
    }
    for fd in fds.into_iter().chain([both, app]) {
        if fs::close(fd).is_err() {
            return 10;
        }
    }
    0
}

/// Records each core appends to `/dws/appended`.
const DW_APPENDS: u64 = 300;
/// Bytes of one such record.
const DW_RECORD: usize = 48;

/// Core `c`'s record `k`: its core and round in the first bytes, then bytes of both.
fn dw_record(c: u64, k: u64) -> Vec<u8> {
    let mut r = dw_bytes(c + 40, k, DW_RECORD);
    r[0] = c as u8;
    r[1..3].copy_from_slice(&(k as u16).to_le_bytes());
    r
}

/// Catches: writes, `pwrite`s and truncates on the per-directory side that lose bytes or
/// block pointers, leak or double-use blocks, or leave the name cache or a lock-free reader
/// with an old size or old bytes. Every core (at most 4) writes, overwrites and truncates a
/// file in a directory of its own and one in a shared directory, reading each back without
/// the lock after every step, and all of them write disjoint slices of one more file at
/// once (`dir_writes_loop`). After: every file's size and bytes exact, most of the writes
/// ran on the per-directory side (`fs::dir_side_changes`), and once every file is removed
/// and the reserves given back (`sync`), `df`'s free counts are exactly those of before
/// (the suite's `e2fsck -fn` then checks the bitmaps against them). Planted once each:
/// the per-directory write not taking the file's stripe (`fd_dir_change` turning its
/// change's `per_dir` off): fails ("/dws/both: core 1's slice of round 0 is not its
/// bytes"; `e2fsck -fn` found errors); `frozen_blocks_ok` always saying yes: fails (the
/// 300 KiB write came back short on both cores, step 14).
fn dir_writes_own_and_shared_directories() -> TestResult {
    let Some(n) = mounted_on_cores()? else { return Ok(Pass::Skipped("one core")) };
    empty_dirs("/dw", n)?;
    for p in ["/dws/both", "/dws/appended"] {
        let fd = fs_ok("create", fs::open(p, fs::O_WRONLY | fs::O_CREAT | fs::O_EXCL))?;
        fs_ok("close", fs::close(fd))?;
    }
    fs_ok("sync", fs::sync())?;
    let df0 = fs_ok("df", fs::df())?;
    let before = dir_side_now(n);
    let rcs = on_cores(n, dir_writes_loop)?;
    ensure!(rcs.iter().all(|r| *r == 0), "loops returned {rcs:?} (100 * round + 1 open, 3 write, 4 pwrite, 5 truncate, 6 reopen, 7 bytes or size read back, 8 stat, 9 shared pwrite, 10 close, 11 open and 12 append to /dws/appended, 13-15 the big write)");
    // The shared file: every core's slice of every round.
    let all = fs_ok("read /dws/both", fs::read_all("/dws/both", 1 << 20))?;
    ensure!(all.len() as u64 == DW_ROUNDS * n * DW_SLICE, "/dws/both: {} bytes, want {}", all.len(), DW_ROUNDS * n * DW_SLICE);
    for k in 0..DW_ROUNDS {
        for c in 0..n {
            let at = ((k * n + c) * DW_SLICE) as usize;
            ensure!(all[at..at + DW_SLICE as usize] == dw_bytes(c + 20, k, DW_SLICE as usize)[..], "/dws/both: core {c}'s slice of round {k} is not its bytes");
        }
    }
    // The appended file: every record of every core exactly once, whole, each core's in
    // its order.
    let app = fs_ok("read /dws/appended", fs::read_all("/dws/appended", 1 << 20))?;
    ensure!(app.len() as u64 == n * DW_APPENDS * DW_RECORD as u64, "/dws/appended: {} bytes, want {} (records lost or overlapping)", app.len(), n * DW_APPENDS * DW_RECORD as u64);
    let mut next = vec![0u64; n as usize];
    for (i, r) in app.chunks(DW_RECORD).enumerate() {
        let c = r[0] as u64;
        ensure!(c < n && r == &dw_record(c, next[c as usize])[..], "/dws/appended: record {i} is not the next record of any core (core byte {c})");
        next[c as usize] += 1;
    }
    // Each core's files, once more after every core finished (locked reads: `stat_walk`).
    for c in 0..n {
        for p in [alloc::format!("/dw{c}/own"), alloc::format!("/dws/f{c}")] {
            let st = fs_ok("stat", fs::stat_walk(&p))?;
            let got = fs_ok("read", fs::read_all(&p, 1 << 20))?;
            ensure!(st.size == got.len() as u64 && st.links == 1, "{p}: {st:?}, {} bytes read", got.len());
        }
    }
    // Writes on the per-directory side: per round 2 writes, 2 pwrites and a slice; fewer
    // only by the reserve refills (a core's reserve holds 64 blocks) and the 2 creates.
    dir_side_at_least(&before, DW_ROUNDS * 3)?;
    for c in 0..n {
        fs_ok("unlink", fs::unlink(&alloc::format!("/dw{c}/big")))?;
        fs_ok("unlink", fs::unlink(&alloc::format!("/dw{c}/own")))?;
        fs_ok("unlink", fs::unlink(&alloc::format!("/dws/f{c}")))?;
    }
    fs_ok("truncate /dws/both", fs::truncate("/dws/both", 0))?;
    let fd = fs_ok("open /dws/appended", fs::open("/dws/appended", fs::O_WRONLY))?;
    fs_ok("ftruncate /dws/appended", fs::ftruncate(fd, 0))?;
    fs_ok("close", fs::close(fd))?;
    fs_ok("sync", fs::sync())?;
    ensure!(fs_ok("reserved", fs::reserved())? == (0, 0), "reserves not given back by sync");
    df_as_before(&df0, " (every file written was removed)")?;
    Ok(Pass::Ok)
}


/// Rounds of `dir_links_loop`.
const DK_ROUNDS: u64 = 60;

/// One core's part of `dir_links_to_one_file`: in round `k`, link `/dks/t` (one file every
/// core links) as `/dk{c}/n{k}` and as `/dks/c{c}_{k}`, and make a symbolic link
/// `/dk{c}/s{k}` to it; unlink all three again unless `k % 3 == 0`. Nonzero: the step that
/// failed.
fn dir_links_loop(c: u64) -> u64 {
    for k in 0..DK_ROUNDS {
        let (a, b, l) = (alloc::format!("/dk{c}/n{k}"), alloc::format!("/dks/c{c}_{k}"), alloc::format!("/dk{c}/s{k}"));
        if fs::link("/dks/t", &a).is_err() {
            return 1;
        }
        if fs::link("/dks/t", &b).is_err() {
            return 2;
        }
        if fs::symlink("/dks/t", &l).is_err() {
            return 3;
        }
        if k % 3 != 0 {
            for p in [&a, &b, &l] {
                if fs::unlink(p).is_err() {
                    return 4;
                }
            }
        }
    }
    0
}

/// Catches: `link` and `symlink` on the per-directory side losing an update of the target's
/// link count (two cores link and unlink names of one file at once: the count is a
/// read-modify-write of one inode), losing or duplicating names in a shared directory, or
/// leaking inodes. After: the file's link count is exactly 1 + the names kept, each
/// directory holds exactly the names kept, every symbolic link reads back its target, most
/// links ran on the per-directory side. Planted once: `Ext2::link` not naming (so not
/// locking) the target: fails ("/dks/t has 77 links, want 81"). Not caught: `Ext2::link`
/// not reading the target again under its stripe (the window between the walk and the
/// lock is narrow; passed one run).
fn dir_links_to_one_file() -> TestResult {
    let Some(n) = mounted_on_cores()? else { return Ok(Pass::Skipped("one core")) };
    empty_dirs("/dk", n)?;
    let fd = fs_ok("create /dks/t", fs::open("/dks/t", fs::O_WRONLY | fs::O_CREAT | fs::O_EXCL))?;
    fs_ok("close", fs::close(fd))?;
    fs_ok("sync", fs::sync())?;
    let df0 = fs_ok("df", fs::df())?;
    let before = dir_side_now(n);
    let rcs = on_cores(n, dir_links_loop)?;
    ensure!(rcs.iter().all(|r| *r == 0), "loops returned {rcs:?} (1 link in own directory, 2 link in /dks, 3 symlink, 4 unlink)");
    let kept: Vec<u64> = (0..DK_ROUNDS).filter(|k| k % 3 == 0).collect();
    let st = fs_ok("stat /dks/t", fs::stat_walk("/dks/t"))?;
    let want_links = 1 + 2 * n * kept.len() as u64;
    ensure!(st.links as u64 == want_links, "/dks/t has {} links, want {want_links}", st.links);
    let mut want_shared: Vec<alloc::string::String> = (0..n).flat_map(|c| kept.iter().map(move |k| alloc::format!("c{c}_{k}"))).chain([alloc::string::String::from("t")]).collect();
    want_shared.sort();
    ensure!(names_in("/dks")? == want_shared, "/dks: {} names, want {}", names_in("/dks")?.len(), want_shared.len());
    for c in 0..n {
        let d = alloc::format!("/dk{c}");
        let mut want: Vec<alloc::string::String> = kept.iter().flat_map(|k| [alloc::format!("n{k}"), alloc::format!("s{k}")]).collect();
        want.sort();
        ensure!(names_in(&d)? == want, "{d}: {} names, want {}", names_in(&d)?.len(), want.len());
        for k in &kept {
            let p = alloc::format!("{d}/s{k}");
            ensure!(fs_ok("readlink", fs::readlink(&p))? == b"/dks/t", "{p}: wrong target");
            ensure!(fs_ok("stat", fs::stat_walk(&alloc::format!("{d}/n{k}")))?.ino == st.ino, "{d}/n{k}: another inode");
        }
    }
    // Per round 2 links and a symlink, fewer by the reserve refills and the unlinks that met
    // the target's stripe held (those ran exclusive).
    dir_side_at_least(&before, DK_ROUNDS * 2)?;
    for c in 0..n {
        for k in &kept {
            for p in [alloc::format!("/dk{c}/n{k}"), alloc::format!("/dks/c{c}_{k}"), alloc::format!("/dk{c}/s{k}")] {
                fs_ok("unlink", fs::unlink(&p))?;
            }
        }
    }
    ensure!(fs_ok("stat", fs::stat_walk("/dks/t"))?.links == 1, "/dks/t: links not back to 1");
    fs_ok("sync", fs::sync())?;
    df_as_before(&df0, "")?;
    Ok(Pass::Ok)
}


/// Rounds of `dir_mkdirs_loop`.
const DM_ROUNDS: u64 = 40;

/// One core's part of `dir_mkdirs_own_and_shared_directories`: in round `k`, make
/// `/dm{c}/d{k}` and `/dms/c{c}_{k}`, a file in the second; remove the file and both
/// directories again unless `k % 3 == 0` (rmdir is exclusive). Nonzero: the step that failed.
fn dir_mkdirs_loop(c: u64) -> u64 {
    for k in 0..DM_ROUNDS {
        let (a, b) = (alloc::format!("/dm{c}/d{k}"), alloc::format!("/dms/c{c}_{k}"));
        let f = alloc::format!("{b}/f");
        if fs::mkdir(&a).is_err() {
            return 1;
        }
        if fs::mkdir(&b).is_err() {
            return 2;
        }
        match fs::open(&f, fs::O_WRONLY | fs::O_CREAT | fs::O_EXCL) {
            Ok(fd) if fs::close(fd).is_ok() => {}
            _ => return 3,
        }
        if k % 3 != 0 && (fs::unlink(&f).is_err() || fs::rmdir(&b).is_err() || fs::rmdir(&a).is_err()) {
            return 4;
        }
    }
    0
}

/// Catches: `mkdir` on the per-directory side losing or duplicating a name or a parent's
/// link count when cores make directories in one directory at once, leaking inodes or
/// blocks on its failure paths, or leaving a group's `used_dirs` count wrong (directories
/// made from a core's reserve count there only once folded: `Ext2::fold_pending_dirs`, at
/// every sync and before every exclusive change; the suite's `e2fsck -fn` checks it).
/// After: every directory holds exactly the names kept, the parents' link counts are
/// 2 + the directories kept, each kept directory holds its file, most mkdirs ran on the
/// per-directory side, and after removing everything and a sync `df` is as before. Planted
/// once: `fold_pending_dirs` folding nothing: the test itself passed, the `e2fsck -fn` after
/// it failed ("Directories count wrong for group #0 (2, counted=30)").
fn dir_mkdirs_own_and_shared_directories() -> TestResult {
    let Some(n) = mounted_on_cores()? else { return Ok(Pass::Skipped("one core")) };
    for d in core::iter::once(alloc::string::String::from("/dms")).chain((0..n).map(|c| alloc::format!("/dm{c}"))) {
        // Left by an earlier run on this image: directories two levels deep, files in them.
        if fs::stat_walk(&d).is_ok() {
            for sub in names_in(&d)? {
                let p = alloc::format!("{d}/{sub}");
                for f in names_in(&p)? {
                    fs_ok("unlink leftover", fs::unlink(&alloc::format!("{p}/{f}")))?;
                }
                fs_ok("rmdir leftover", fs::rmdir(&p))?;
            }
            fs_ok("rmdir leftover", fs::rmdir(&d))?;
        }
        fs_ok("mkdir", fs::mkdir(&d))?;
    }
    fs_ok("sync", fs::sync())?;
    let df0 = fs_ok("df", fs::df())?;
    let before = dir_side_now(n);
    let rcs = on_cores(n, dir_mkdirs_loop)?;
    ensure!(rcs.iter().all(|r| *r == 0), "loops returned {rcs:?} (1 mkdir own, 2 mkdir shared, 3 create inside, 4 unlink/rmdir)");
    let kept: Vec<u64> = (0..DM_ROUNDS).filter(|k| k % 3 == 0).collect();
    let mut want: Vec<alloc::string::String> = (0..n).flat_map(|c| kept.iter().map(move |k| alloc::format!("c{c}_{k}"))).collect();
    want.sort();
    ensure!(names_in("/dms")? == want, "/dms: {} names, want {}", names_in("/dms")?.len(), want.len());
    let st = fs_ok("stat", fs::stat_walk("/dms"))?;
    ensure!(st.links as usize == 2 + want.len(), "/dms has {} links, want {}", st.links, 2 + want.len());
    for w in &want {
        ensure!(names_in(&alloc::format!("/dms/{w}"))? == ["f"], "/dms/{w} does not hold just f");
    }
    for c in 0..n {
        let d = alloc::format!("/dm{c}");
        let mut want: Vec<alloc::string::String> = kept.iter().map(|k| alloc::format!("d{k}")).collect();
        want.sort();
        ensure!(names_in(&d)? == want, "{d}: {} names, want {}", names_in(&d)?.len(), want.len());
        ensure!(fs_ok("stat", fs::stat_walk(&d))?.links as usize == 2 + kept.len(), "{d}: wrong link count");
    }
    dir_side_at_least(&before, DM_ROUNDS * 2)?;
    // Kept until the suite's `e2fsck -fn` (which checks `used_dirs`) unless a sync shows
    // the counts leaked: every directory made here, removed, gives back exactly what it took.
    for c in 0..n {
        for k in &kept {
            fs_ok("unlink", fs::unlink(&alloc::format!("/dms/c{c}_{k}/f")))?;
            fs_ok("rmdir", fs::rmdir(&alloc::format!("/dms/c{c}_{k}")))?;
            fs_ok("rmdir", fs::rmdir(&alloc::format!("/dm{c}/d{k}")))?;
        }
    }
    fs_ok("sync", fs::sync())?;
    ensure!(fs_ok("reserved", fs::reserved())? == (0, 0), "reserves not given back by sync");
    df_as_before(&df0, "")?;
    // Directories made on the per-directory side (core 0's) left for the suite's
    // `e2fsck -fn`, synced.
    for c in 0..n {
        fs_ok("mkdir", fs::mkdir(&alloc::format!("/dm{c}/left")))?;
    }
    fs_ok("sync", fs::sync())?;
    Ok(Pass::Ok)
}

fn main(args: &'static str) -> u64 {
    let mut t = Tally::default();
    let tests: [(&str, fn() -> TestResult); 41] = [
        ("fs_disk_is_listed", disk_is_listed),
        ("fs_blk_alloc_checks_its_arguments", blk_alloc_checks_its_arguments),
        ("fs_blk_buf_checks_its_arguments", blk_buf_checks_its_arguments),
        ("fs_blk_round_trip", blk_round_trip),
        ("fs_blk_device_gives_its_memory_back", devmem::blk_device_gives_its_memory_back),
        ("fs_two_cores_use_one_disk", two_cores_use_one_disk),
        ("fs_reads_every_file", reads_every_file),
        ("fs_other_cores_read_too", other_cores_read_too),
        ("fs_names_and_descriptors", names_and_descriptors),
        ("fs_files_in_the_descriptor_table", files_in_the_descriptor_table),
        ("fs_one_offset_and_readiness", one_offset_and_readiness_through_the_trait),
        ("fs_stat_from_the_name_cache", stat_from_the_name_cache),
        ("fs_open_from_the_per_core_list", open_from_the_per_core_list),
        ("fs_read_without_the_lock", read_without_the_lock),
        ("fs_reads_race_rewrites", reads_race_rewrites),
        ("fs_corrupt_superblock_is_refused", corrupt_superblock_is_refused),
        ("fs_corrupt_directory_entry_is_an_error", corrupt_directory_entry_is_an_error),
        ("fs_seeded_corruptions_never_panic", seeded_corruptions_never_panic),
        ("fs_writes_survive_a_remount", writes_survive_a_remount),
        ("fs_cache_shared_with_a_cfork_child", cache_shared_with_a_cfork_child),
        ("fs_readers_never_see_a_torn_page", readers_never_see_a_torn_page),
        ("fs_full_cache_evicts_and_writes_back", full_cache_evicts_and_writes_back),
        ("fs_blk_dedicated_two_cores", dedicated_two_cores),
        ("fs_blk_dedicated_refuses_bad_entries", dedicated_refuses_bad_entries),
        ("fs_blk_dedicated_kernel_core_removed", dedicated_kernel_core_removed),
        ("fs_blk_dedicated_given_up_write_not_replayed", dedicated_given_up_write_not_replayed),
        ("fs_blk_dedicated_mount", dedicated_mount),
        ("fs_two_cores_create_in_own_directories", two_cores_create_in_own_directories),
        ("fs_name_cache_per_directory", name_cache_per_directory),
        ("fs_cores_change_names_at_once", cores_change_names_at_once),
        ("fs_dir_locks_own_and_shared_directories", dir_locks_own_and_shared_directories),
        ("fs_dir_locks_renames_and_rmdirs_race_creates", dir_locks_renames_and_rmdirs_race_creates),
        ("fs_dir_locks_close_races_the_unlink_of_its_file", close_races_the_unlink_of_its_file),
        ("fs_dir_writes_own_and_shared_directories", dir_writes_own_and_shared_directories),
        ("fs_dir_links_to_one_file", dir_links_to_one_file),
        ("fs_dir_mkdirs_own_and_shared_directories", dir_mkdirs_own_and_shared_directories),
        ("fs_fdtables_cores_write_and_read_one_file", fdtables::cores_write_and_read_one_file),
        ("fs_fdtables_dup_across_cores_shares_the_offset", fdtables::dup_across_cores_shares_the_offset),
        ("fs_fdtables_unlink_while_open_on_another_core", fdtables::unlink_while_open_on_another_core),
        ("fs_fdtables_rename_over_an_open_file", fdtables::rename_over_an_open_file),
        ("fs_fdtables_opens_race_unlinks", fdtables::opens_race_unlinks),
    ];
    for (name, f) in tests {
        if selected(args, name) {
            t.record(name, f());
        }
    }
    // The last unmount writes back what the tests left in the cache: the suite's `e2fsck -fn`
    // and the host's read-back depend on it, so a failure here fails the run (unmounting
    // with nothing mounted is Ok, so only a real failure shows).
    if let Err(e) = fs::unmount() {
        t.fail("fs_unmount_at_the_end", &alloc::format!("unmount: {e:?}"));
    }
    if t.passed + t.failed == 0 {
        println!("fstest: no test matched {args:?}");
        return 1;
    }
    t.finish()
}
