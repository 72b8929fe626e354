//! `fstest`'s tests of the per-core open-file tables (docs/fs.md,
//! "Names and descriptors"): writable descriptors in the per-core lists, used from two cores,
//! `dup` across cores, unlink and rename of files open in another core's list.

use super::*;

/// The core a per-core descriptor was opened on (its number holds it: bit 30, core, slot).
fn core_of(fd: fs::Fd) -> Option<u32> {
    fs::open_files::is_fast(fd.0).then_some((fd.0 & !fs::open_files::FAST_BIT) >> 6)
}

/// Make `path` (removed first if there) holding `data`.
fn make_file(path: &str, data: &[u8]) -> Result<(), Msg> {
    let _ = fs::unlink(path);
    let fd = fs_ok("create", fs::open(path, fs::O_RDWR | fs::O_CREAT | fs::O_EXCL))?;
    ensure!(fs_ok("write", fs::write(fd, data))? == data.len(), "short write of {path}");
    fs_ok("close", fs::close(fd))
}

fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

// ---- two cores, one file: writes and reads racing ----

const RW_BYTES: usize = 8192;
const RW_ROUNDS: u64 = 60;
/// Rounds core 1 has written (0: not started).
static RW_WRITTEN: AtomicU64 = AtomicU64::new(0);
/// Reads core 0 has done.
static RW_READS: AtomicU64 = AtomicU64::new(0);

/// Core 1: open the file read-write on its own core and rewrite it whole with the byte `r`
/// in round `r` (one `pwrite`: one change), waiting for two of core 0's reads between rounds
/// so that core 0's descriptor is re-stamped and read without the lock in between. Returns 0,
/// or what went wrong (1 open not per-core on core 1, 2 write, 3 own read-back, 4 close).
fn rw_writer(_: u64) -> u64 {
    let Ok(fd) = fs::open("/ft1/f", fs::O_RDWR) else { return 1 };
    if core_of(fd) != Some(1) {
        return 1;
    }
    let mut buf = vec![0u8; RW_BYTES];
    for r in 1..=RW_ROUNDS {
        let seen = RW_READS.load(Ordering::Acquire);
        // Polls, then halts between looks (core 0 ends the rounds by a large count).
        libos::time::wait_until(10_000, || RW_READS.load(Ordering::Acquire) >= seen + 2);
        buf.fill(r as u8);
        if fs::pwrite(fd, &buf, 0) != Ok(RW_BYTES) {
            return 2;
        }
        let mut back = [0u8; 16];
        if fs::pread(fd, &mut back, RW_BYTES as u64 - 16) != Ok(16) || back != [r as u8; 16] {
            return 3;
        }
        RW_WRITTEN.store(r, Ordering::Release);
    }
    if fs::close(fd).is_err() {
        return 4;
    }
    0
}

/// Catches: read-write opens not getting a per-core descriptor (or one numbered on the wrong
/// core), and reads of a read-write descriptor that never go without the lock, or that go
/// without it and return bytes of no single state. Core 1 rewrites an 8 KiB file whole, 60
/// times, through its own read-write descriptor, while core 0 reads it through its own
/// read-write descriptor (`pread`, and `read` after an `lseek`): every read must be 8 KiB of
/// one round's byte, never going back a round, and at least one read per round on core 0
/// must go without the lock (`fs::unlocked_reads`). Planted: with `open` refusing the
/// per-core list to writable opens (`flags == O_RDONLY` again) it fails ("not per-core").
pub fn cores_write_and_read_one_file() -> TestResult {
    if cores() < 2 {
        return Ok(Pass::Skipped("one core"));
    }
    fs_ok("mount", fs::mount())?;
    empty_dir("/ft1")?;
    make_file("/ft1/f", &vec![0u8; RW_BYTES])?;
    let fd = fs_ok("open", fs::open("/ft1/f", fs::O_RDWR))?;
    ensure!(core_of(fd) == Some(0), "a read-write open on core 0 is not per-core on core 0 (fd {:#x})", fd.0);
    RW_WRITTEN.store(0, Ordering::Release);
    RW_READS.store(0, Ordering::Release);
    let unlocked0 = fs::unlocked_reads(0);
    let t = ok!(libos::thread::spawn(1, rw_writer, 0));
    let mut buf = vec![0u8; RW_BYTES];
    let mut last = 0u8;
    let mut bad = None;
    let mut k = 0u64;
    while RW_WRITTEN.load(Ordering::Acquire) < RW_ROUNDS && bad.is_none() {
        let n = if k % 2 == 0 {
            fs::pread(fd, &mut buf, 0)
        } else {
            fs::lseek(fd, 0, fs::SEEK_SET).and_then(|_| fs::read(fd, &mut buf))
        };
        k += 1;
        match n {
            Ok(RW_BYTES) => {}
            other => {
                bad = Some(Msg::new(format_args!("read {k}: {other:?}")));
                break;
            }
        }
        let v = buf[0];
        if let Some(i) = buf.iter().position(|b| *b != v) {
            bad = Some(Msg::new(format_args!("read {k}: byte 0 is {v}, byte {i} is {} (no state of the file)", buf[i])));
        } else if v < last {
            bad = Some(Msg::new(format_args!("read {k}: round {v} after round {last}")));
        }
        last = v;
        RW_READS.fetch_add(1, Ordering::Release);
    }
    if bad.is_some() {
        // Let the writer finish its rounds.
        RW_READS.store(u64::MAX / 2, Ordering::Release);
    }
    let rc = ok!(t.join());
    if let Some(e) = bad {
        return Err(e);
    }
    ensure!(rc == 0, "core 1's writer stopped with {rc} (1 open not per-core on core 1, 2 write, 3 read-back, 4 close)");
    let unlocked = fs::unlocked_reads(0) - unlocked0;
    ensure!(unlocked >= RW_ROUNDS / 2, "only {unlocked} of core 0's {k} reads of a read-write descriptor went without the lock");
    let st = fs_ok("fstat", fs::fstat(fd))?;
    ensure!(st.size == RW_BYTES as u64, "fstat size {}", st.size);
    ensure!(fs_ok("pread", fs::pread(fd, &mut buf, 0))? == RW_BYTES && buf.iter().all(|b| *b == RW_ROUNDS as u8), "final bytes not the last round's");
    fs_ok("close", fs::close(fd))?;
    err!(fs::read(fd, &mut buf), FsError::BadDescriptor);
    println!("fs_fdtables: {k} reads on core 0 across {RW_ROUNDS} rewrites on core 1, {unlocked} without the lock");
    Ok(Pass::Ok)
}

// ---- dup on another core shares the offset ----

static DUP_FD: AtomicU64 = AtomicU64::new(0);

/// Core 1: dup core 0's descriptor, read 100 bytes and write 5 through the dup. Returns the
/// dup's number + 1, or 0 with what failed in bits 32.. (1 dup, 2 read, 3 bytes, 4 offset,
/// 5 write).
fn dup_user(_: u64) -> u64 {
    let fd = fs::Fd(DUP_FD.load(Ordering::Acquire) as u32);
    let Ok(d) = fs::dup(fd) else { return 1 << 32 };
    let mut b = [0u8; 100];
    if fs::read(d, &mut b) != Ok(100) {
        return 2 << 32;
    }
    if b.iter().enumerate().any(|(i, x)| *x != pattern(10 + i)) {
        return 3 << 32;
    }
    if fs::lseek(d, 0, fs::SEEK_CUR) != Ok(110) {
        return 4 << 32;
    }
    if fs::write(d, b"XXXXX") != Ok(5) {
        return 5 << 32;
    }
    d.0 as u64 + 1
}

/// Catches: `dup` of a per-core descriptor on another core not sharing the open file
/// description (the offset), or not carrying the offset the descriptor had reached without
/// the lock. Core 0 opens a file read-write (per-core) and reads 10 bytes without the lock;
/// core 1 dups it and reads 100 bytes (they must be bytes 10..110) and writes 5; core 0's
/// descriptor is then at 115 and reads byte 115 on; the dup outlives the original's close,
/// and both are `BadDescriptor` after their closes. Planted: `desc_index` giving the new
/// description offset 0 instead of the frozen slot's (`desc.off = off` removed) fails it
/// ("core 1: 3": the dup read bytes 0..100).
pub fn dup_across_cores_shares_the_offset() -> TestResult {
    if cores() < 2 {
        return Ok(Pass::Skipped("one core"));
    }
    fs_ok("mount", fs::mount())?;
    empty_dir("/ft2")?;
    let data: Vec<u8> = (0..4096).map(pattern).collect();
    make_file("/ft2/f", &data)?;
    let fd = fs_ok("open", fs::open("/ft2/f", fs::O_RDWR))?;
    ensure!(core_of(fd) == Some(0), "not per-core (fd {:#x})", fd.0);
    let mut b = [0u8; 10];
    ensure!(fs_ok("read", fs::read(fd, &mut b))? == 10 && b[..] == data[..10], "first 10 bytes");
    DUP_FD.store(fd.0 as u64, Ordering::Release);
    let t = ok!(libos::thread::spawn(1, dup_user, 0));
    let rc = ok!(t.join());
    ensure!(rc != 0 && rc >> 32 == 0, "core 1: {} (1 dup, 2 read, 3 not bytes 10..110, 4 offset, 5 write)", rc >> 32);
    let d = fs::Fd((rc - 1) as u32);
    ensure!(fs_ok("lseek", fs::lseek(fd, 0, fs::SEEK_CUR))? == 115, "core 0's offset after core 1's dup read and wrote");
    let mut c = [0u8; 5];
    ensure!(fs_ok("read", fs::read(fd, &mut c))? == 5 && c[..] == data[115..120], "core 0 did not continue at 115");
    ensure!(fs_ok("pread", fs::pread(fd, &mut c, 110))? == 5 && &c == b"XXXXX", "core 1's write through the dup");
    fs_ok("close", fs::close(fd))?;
    err!(fs::read(fd, &mut c), FsError::BadDescriptor);
    err!(fs::close(fd), FsError::BadDescriptor);
    ensure!(fs_ok("lseek", fs::lseek(d, 0, fs::SEEK_CUR))? == 120, "the dup's offset after the original closed");
    fs_ok("close", fs::close(d))?;
    err!(fs::read(d, &mut c), FsError::BadDescriptor);
    Ok(Pass::Ok)
}

// ---- unlink of files open in another core's list ----

const UN_BYTES: usize = 3 * 4096;
/// Core 1's two descriptors (+1; 0: not yet).
static UN_FDS: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];
/// Core 0 unlinked both names.
static UN_GONE: AtomicU64 = AtomicU64::new(0);
/// Core 1 returned (its result + 1).
static UN_EXIT: AtomicU64 = AtomicU64::new(0);

fn un_owner_then_exit(a: u64) -> u64 {
    let rc = un_owner(a);
    UN_EXIT.store(rc + 1, Ordering::Release);
    rc
}

/// Core 1: make `/ft3/a` and `/ft3/b` (its own descriptors), publish them, wait until core 0
/// unlinked both, read both whole through its descriptors, close `a` here. 0, or what failed
/// (1 create, 2 write, 3 not per-core on core 1, 4 read after the unlink, 5 close).
fn un_owner(_: u64) -> u64 {
    let data: Vec<u8> = (0..UN_BYTES).map(|i| pattern(i * 7)).collect();
    for (k, p) in ["/ft3/a", "/ft3/b"].iter().enumerate() {
        let Ok(fd) = fs::open(p, fs::O_RDWR | fs::O_CREAT | fs::O_EXCL) else { return 1 };
        if fs::write(fd, &data) != Ok(UN_BYTES) {
            return 2;
        }
        if core_of(fd) != Some(1) {
            return 3;
        }
        UN_FDS[k].store(fd.0 as u64 + 1, Ordering::Release);
    }
    if !libos::time::wait_until(10_000, || UN_GONE.load(Ordering::Acquire) != 0) {
        return 4;
    }
    let mut buf = vec![0u8; UN_BYTES];
    for f in &UN_FDS {
        let fd = fs::Fd((f.load(Ordering::Acquire) - 1) as u32);
        if fs::pread(fd, &mut buf, 0) != Ok(UN_BYTES) || buf != data {
            return 4;
        }
    }
    if fs::close(fs::Fd((UN_FDS[0].load(Ordering::Acquire) - 1) as u32)).is_err() {
        return 5;
    }
    0
}

/// Catches: an unlink that does not see a file open in another core's list (it frees it at
/// once: the other core's reads then fail, and the free counts move at the unlink), and an
/// orphan not freed at its last close when that close runs on its own core or on another
/// one. Core 1 makes two 12 KiB files and keeps them open; core 0 unlinks both (their last
/// names); the free counts do not move; core 1 reads both whole through its descriptors and
/// closes one; core 0 closes the other (core 1's descriptor); after a sync the free inode
/// and block counts are exactly those from before the files were made. Planted: the
/// per-directory `unlink`'s `open` ignoring the per-core lists (`in_lists` false) fails it
/// ("the unlinks freed ... while open").
pub fn unlink_while_open_on_another_core() -> TestResult {
    if cores() < 2 {
        return Ok(Pass::Skipped("one core"));
    }
    fs_ok("mount", fs::mount())?;
    empty_dir("/ft3")?;
    fs_ok("sync", fs::sync())?;
    let u0 = fs_ok("df", fs::df())?;
    for f in &UN_FDS {
        f.store(0, Ordering::Release);
    }
    UN_GONE.store(0, Ordering::Release);
    UN_EXIT.store(0, Ordering::Release);
    let t = ok!(libos::thread::spawn(1, un_owner_then_exit, 0));
    ensure!(libos::time::wait_until(10_000, || UN_FDS[1].load(Ordering::Acquire) != 0 || UN_EXIT.load(Ordering::Acquire) != 0), "core 1 made no file in 10 s");
    let made = fs_ok("df", fs::df())?;
    let r = fs::unlink("/ft3/a").and_then(|_| fs::unlink("/ft3/b"));
    let after = fs_ok("df", fs::df())?;
    UN_GONE.store(1, Ordering::Release);
    let rc = ok!(t.join());
    fs_ok("unlink", r)?;
    ensure!(rc == 0, "core 1 stopped with {rc} (1 create, 2 write, 3 not per-core on core 1, 4 read after the unlink, 5 close)");
    ensure!(after.free_inodes == made.free_inodes && after.free_blocks == made.free_blocks, "the unlinks freed files open on core 1: {} -> {} free inodes, {} -> {} free blocks", made.free_inodes, after.free_inodes, made.free_blocks, after.free_blocks);
    ensure!(names_in("/ft3")?.is_empty(), "/ft3 not empty");
    let b = fs::Fd((UN_FDS[1].load(Ordering::Acquire) - 1) as u32);
    let st = fs_ok("fstat", fs::fstat(b))?;
    ensure!(st.links == 0 && st.size == UN_BYTES as u64, "fstat of the orphan: links {}, size {}", st.links, st.size);
    fs_ok("close", fs::close(b))?;
    err!(fs::close(b), FsError::BadDescriptor);
    fs_ok("sync", fs::sync())?;
    let u1 = fs_ok("df", fs::df())?;
    ensure!(u1.free_inodes == u0.free_inodes && u1.free_blocks == u0.free_blocks, "after both closes: {} -> {} free inodes, {} -> {} free blocks", u0.free_inodes, u1.free_inodes, u0.free_blocks, u1.free_blocks);
    Ok(Pass::Ok)
}

// ---- rename over an open file ----

/// Catches: `rename` over a file that is open freeing it at once (the bug before 2026-11-29:
/// `Ext2::rename` unlinked the replaced name with no regard to descriptors). The replaced
/// file must stay readable through its descriptors (links 0) and keep its inode and blocks
/// until its last close; after that close and a sync the free counts are those from before
/// it was made. Fails on the tree before the fix ("rename freed the open file at once").
pub fn rename_over_an_open_file() -> TestResult {
    fs_ok("mount", fs::mount())?;
    empty_dir("/ft4")?;
    make_file("/ft4/src", b"the new one")?;
    fs_ok("sync", fs::sync())?;
    let u0 = fs_ok("df", fs::df())?;
    let data: Vec<u8> = (0..8192).map(|i| pattern(i * 3)).collect();
    make_file("/ft4/victim", &data)?;
    let r = fs_ok("open", fs::open("/ft4/victim", fs::O_RDONLY))?;
    let w = fs_ok("open", fs::open("/ft4/victim", fs::O_RDWR))?;
    let made = fs_ok("df", fs::df())?;
    fs_ok("rename", fs::rename("/ft4/src", "/ft4/victim"))?;
    let after = fs_ok("df", fs::df())?;
    ensure!(after.free_inodes == made.free_inodes && after.free_blocks == made.free_blocks, "rename freed the open file at once: {} -> {} free inodes, {} -> {} free blocks", made.free_inodes, after.free_inodes, made.free_blocks, after.free_blocks);
    ensure!(fs_ok("read_all", fs::read_all("/ft4/victim", 64))? == b"the new one", "the new name's bytes");
    let mut buf = vec![0u8; 8192];
    ensure!(fs_ok("pread", fs::pread(r, &mut buf, 0))? == 8192 && buf == data, "the replaced file unreadable through its descriptor");
    ensure!(fs_ok("fstat", fs::fstat(w))?.links == 0, "the replaced file still has a link");
    fs_ok("pwrite", fs::pwrite(w, b"still writable", 0))?;
    fs_ok("close", fs::close(r))?;
    ensure!(fs_ok("df", fs::df())?.free_inodes == made.free_inodes, "freed at the first of two closes");
    fs_ok("close", fs::close(w))?;
    fs_ok("unlink", fs::unlink("/ft4/victim"))?;
    fs_ok("sync", fs::sync())?;
    let u1 = fs_ok("df", fs::df())?;
    // `src` (now `victim`) is gone too: one inode and its block more than `u0`.
    ensure!(u1.free_inodes == u0.free_inodes + 1 && u1.free_blocks == u0.free_blocks + 1, "after the last close: {} -> {} free inodes, {} -> {} free blocks (want +1, +1)", u0.free_inodes, u1.free_inodes, u0.free_blocks, u1.free_blocks);
    Ok(Pass::Ok)
}

// ---- opens through a walk racing unlinks ----

const OW_ROUNDS: u64 = 300;
/// Core 1 finished (its result + 1).
static OW_EXIT: AtomicU64 = AtomicU64::new(0);

/// Core 1: make `/ft5/f` holding 4 KiB of the byte `round_byte(k)`, close it, unlink it; `OW_ROUNDS`
/// times. 0, or the step that failed (1 create, 2 write, 3 close, 4 unlink).
/// The byte round `k` fills `/ft5/f` with: never 0. (`k as u8` was 0 in round 256, and a
/// reader that caught that round's file read 4 KiB of zeros, which the check in
/// `opens_race_unlinks` rightly refuses as a state between no two changes: the intermittent
/// failure seen about one run in 20, was this test's, not the file system's.)
fn round_byte(k: u64) -> u8 {
    (k % 255) as u8 + 1
}

fn ow_churn(_: u64) -> u64 {
    let rc = (|| {
        for k in 1..=OW_ROUNDS {
            let Ok(fd) = fs::open("/ft5/f", fs::O_RDWR | fs::O_CREAT | fs::O_EXCL) else { return 1 };
            if fs::write(fd, &[round_byte(k); 4096]) != Ok(4096) {
                return 2;
            }
            if fs::close(fd).is_err() {
                return 3;
            }
            if fs::unlink("/ft5/f").is_err() {
                return 4;
            }
        }
        0
    })();
    OW_EXIT.store(rc + 1, Ordering::Release);
    rc
}

/// Catches: an open of an existing file found by a walk (through a symbolic link, so never
/// from the name cache: `open_existing` on the calling core's lock) that installs its
/// descriptor after an unlink on another core freed the file (the descriptor then reads a
/// freed or reused inode, and the free counts or `e2fsck` go wrong), or a slot taken back
/// that leaks the orphan its unlink made. Core 1 makes, fills, closes and unlinks `/ft5/f`
/// 300 times while core 0 opens it through `/ft5/link` as fast as it can and reads it: every
/// read is 0 bytes (opened between the create and the write) or 4 KiB of one round's byte;
/// afterwards, after a sync, the free inode and block counts are exactly those of before.
pub fn opens_race_unlinks() -> TestResult {
    if cores() < 2 {
        return Ok(Pass::Skipped("one core"));
    }
    fs_ok("mount", fs::mount())?;
    empty_dir("/ft5")?;
    fs_ok("symlink", fs::symlink("/ft5/f", "/ft5/link"))?;
    fs_ok("sync", fs::sync())?;
    let u0 = fs_ok("df", fs::df())?;
    OW_EXIT.store(0, Ordering::Release);
    let t = ok!(libos::thread::spawn(1, ow_churn, 0));
    let (mut opened, mut missing) = (0u64, 0u64);
    let mut buf = vec![0u8; 4096];
    let mut bad = None;
    while OW_EXIT.load(Ordering::Acquire) == 0 && bad.is_none() {
        match fs::open("/ft5/link", fs::O_RDONLY) {
            Ok(fd) => {
                opened += 1;
                match fs::pread(fd, &mut buf, 0) {
                    Ok(0) => {}
                    Ok(4096) if buf.iter().all(|b| *b == buf[0]) && buf[0] != 0 => {}
                    other => bad = Some(Msg::new(format_args!("open {opened}: read {other:?}, bytes {} .. {}", buf[0], buf[4095]))),
                }
                if let Err(e) = fs::close(fd) {
                    bad = Some(Msg::new(format_args!("close: {e:?}")));
                }
            }
            Err(FsError::NotFound) => missing += 1,
            Err(e) => bad = Some(Msg::new(format_args!("open: {e:?}"))),
        }
    }
    let rc = ok!(t.join());
    if let Some(e) = bad {
        return Err(e);
    }
    ensure!(rc == 0, "core 1 stopped at step {rc} (1 create, 2 write, 3 close, 4 unlink)");
    ensure!(opened > 0, "no open found the file ({missing} not found)");
    fs_ok("unlink", fs::unlink("/ft5/link"))?;
    fs_ok("sync", fs::sync())?;
    let u1 = fs_ok("df", fs::df())?;
    ensure!(u1.free_inodes == u0.free_inodes + 1 && u1.free_blocks == u0.free_blocks, "after {opened} opens racing 300 unlinks: {} -> {} free inodes (want +1: the link), {} -> {} free blocks", u0.free_inodes, u1.free_inodes, u0.free_blocks, u1.free_blocks);
    println!("fs_fdtables: {opened} opens through the link found the file, {missing} did not");
    Ok(Pass::Ok)
}
