//! Host tests of the buffer cache's table (crate `bcache`, which the library OS maps in a
//! segment), on a memory disk that records every write and flush. Real threads for the
//! concurrency test; iteration counts, not times.

extern crate alloc;

use bcache::{BlockIo, IoError, Table, PAGE};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Read(u64),
    Write(u64),
    Flush,
}

/// A disk of `pages` pages in memory, with a log of what was done to it.
struct MemDisk {
    pages: Vec<Vec<u8>>,
    log: Vec<Op>,
}

impl MemDisk {
    fn new(pages: usize) -> MemDisk {
        MemDisk { pages: (0..pages).map(|p| vec![(p % 251) as u8; PAGE]).collect(), log: Vec::new() }
    }
}

impl BlockIo for MemDisk {
    fn read_page(&mut self, block: u64, buf: &mut [u8]) -> Result<(), IoError> {
        let p = self.pages.get(block as usize).ok_or(IoError::Io)?;
        buf.copy_from_slice(&p[..buf.len()]);
        self.log.push(Op::Read(block));
        Ok(())
    }
    fn write_page(&mut self, block: u64, buf: &[u8]) -> Result<(), IoError> {
        let p = self.pages.get_mut(block as usize).ok_or(IoError::Io)?;
        p[..buf.len()].copy_from_slice(buf);
        self.log.push(Op::Write(block));
        Ok(())
    }
    fn flush(&mut self) -> Result<(), IoError> {
        self.log.push(Op::Flush);
        Ok(())
    }
    fn page_len(&self, _block: u64) -> usize {
        PAGE
    }
}

/// Memory for a table (leaked: tables live as long as their mapping, here the test).
fn table(slots: usize) -> Table {
    let bytes = bcache::table_bytes(slots);
    let mem = std::alloc::Layout::from_size_align(bytes, 4096).unwrap();
    // SAFETY: a fresh allocation of `bytes`, 4096-aligned, used only through the table.
    unsafe {
        let base = std::alloc::alloc_zeroed(mem) as usize;
        Table::init(base, bytes, slots).unwrap()
    }
}

/// Catches: a hit reading the disk again; a miss not counted; a write lost in the cache.
#[test]
fn hits_do_not_read_the_disk() {
    let t = table(8);
    let mut d = MemDisk::new(32);
    let mut b = [0u8; 16];
    t.read(0, &mut d, 3, 100, &mut b).unwrap();
    assert_eq!(b, [3u8; 16]);
    t.read(0, &mut d, 3, 0, &mut b).unwrap();
    t.write(0, &mut d, 3, 8, &[9; 4], false).unwrap();
    t.read(0, &mut d, 3, 0, &mut b).unwrap();
    assert_eq!(&b[..12], &[3, 3, 3, 3, 3, 3, 3, 3, 9, 9, 9, 9]);
    assert_eq!(d.log, vec![Op::Read(3)], "one disk read for four accesses");
    let s = t.stats();
    assert_eq!((s.misses, s.disk_reads), (1, 1));
    assert_eq!(t.dirty_pages(), 1);
    assert_eq!(d.pages[3][8], 3, "write-back before sync");
}

/// Catches: a full cache that fails instead of evicting, evicts a dirty page unwritten (its
/// data lost), or writes metadata before the data it names; eviction taking dirty pages
/// while clean ones exist.
#[test]
fn full_cache_writes_back_data_first_then_evicts() {
    let t = table(8);
    let mut d = MemDisk::new(64);
    // Four clean pages, then dirty ones: data pages 20.., metadata pages 10...
    let mut b = [0u8; 1];
    for p in 40..44 {
        t.read(0, &mut d, p, 0, &mut b).unwrap();
    }
    t.write(0, &mut d, 10, 0, &[0xEE; PAGE], false).unwrap();
    t.write(0, &mut d, 20, 0, &[0xDD; PAGE], true).unwrap();
    t.write(0, &mut d, 11, 0, &[0xEE; PAGE], false).unwrap();
    t.write(0, &mut d, 21, 0, &[0xDD; PAGE], true).unwrap();
    d.log.clear();
    // Four more pages: the clean ones go first, no write yet.
    for p in 50..54 {
        t.write(0, &mut d, p, 0, &[0x55; PAGE], false).unwrap();
    }
    assert!(d.log.is_empty(), "dirty pages written while clean ones could be evicted: {:?}", d.log);
    // Now every page is dirty: the next miss writes all back, data first.
    t.read(0, &mut d, 60, 0, &mut b).unwrap();
    let writes: Vec<Op> = d.log.iter().copied().filter(|o| !matches!(o, Op::Read(_))).collect();
    let first_flush = writes.iter().position(|o| *o == Op::Flush).expect("a flush");
    assert_eq!(&writes[..first_flush], &[Op::Write(20), Op::Write(21)], "data pages first, in order");
    assert_eq!(writes[first_flush + 1..writes.len() - 1], [Op::Write(10), Op::Write(11), Op::Write(50), Op::Write(51), Op::Write(52), Op::Write(53)]);
    assert_eq!(writes.last(), Some(&Op::Flush));
    assert!(d.pages[20].iter().all(|&x| x == 0xDD) && d.pages[53].iter().all(|&x| x == 0x55));
    // Every page reads back right, through eviction.
    for (p, v) in [(10u64, 0xEE), (20, 0xDD), (52, 0x55), (40, 40)] {
        t.read(0, &mut d, p, 0, &mut b).unwrap();
        assert_eq!(b[0], v, "page {p}");
    }
    assert!(t.cached_pages() <= 8);
}

/// Catches: `sync` not ordered (metadata before data), or pages left dirty after it.
#[test]
fn sync_writes_data_then_flush_then_metadata() {
    let t = table(16);
    let mut d = MemDisk::new(64);
    t.write(0, &mut d, 5, 0, &[1; 8], false).unwrap();
    t.write(0, &mut d, 30, 0, &[2; 8], false).unwrap();
    t.note_data(30);
    t.write(0, &mut d, 2, 0, &[3; 8], true).unwrap();
    d.log.clear();
    t.sync(0, &mut d).unwrap();
    assert_eq!(d.log, vec![Op::Write(2), Op::Write(30), Op::Flush, Op::Write(5), Op::Flush]);
    assert_eq!(t.dirty_pages(), 0);
}

/// Catches: a reader using a page copy that a writer, a write-back or an eviction and refill
/// changed while it copied (torn: two values in one page), or the copy of another block
/// (a slot reused for another page while the reader held its index entry). Two readers
/// without any lock against a writer that rewrites whole pages and a thread that keeps
/// syncing and dropping clean pages, on a cache smaller than the working set.
#[test]
fn lock_free_readers_never_see_torn_or_foreign_pages() {
    const PAGES: u64 = 12;
    let t = table(8);
    let disk = Arc::new(Mutex::new(MemDisk::new(PAGES as usize)));
    // Page p holds value (p + 16 * k) for some k: a reader can tell block and wholeness.
    {
        let mut d = disk.lock().unwrap();
        for p in 0..PAGES {
            d.pages[p as usize] = vec![p as u8; PAGE];
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    // The disk is behind a mutex: in the library OS the fill lock serialises disk use, and
    // the table calls the disk only under it, so this mutex is never contended.
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (disk, stop) = (disk.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; PAGE];
                let (mut n, mut lockfree) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) || n < 2000 {
                    let p = (n * 7 + r) % PAGES;
                    if t.try_read(1 + r as usize, p, 0, &mut buf) {
                        lockfree += 1;
                    } else {
                        let mut g = disk.lock().unwrap();
                        t.read(1 + r as usize, &mut *g, p, 0, &mut buf).unwrap();
                    }
                    let v = buf[0];
                    assert!(buf.iter().all(|&x| x == v), "torn page {p}");
                    assert_eq!(v % 16, p as u8, "page {p} holds another block's data ({v})");
                    n += 1;
                    if n > 200_000 {
                        break;
                    }
                }
                (n, lockfree)
            })
        })
        .collect();
    let writer = {
        let disk = disk.clone();
        std::thread::spawn(move || {
            for k in 1..400u64 {
                for p in 0..PAGES {
                    let v = (p + 16 * (k % 16)) as u8;
                    // The writer, like the readers, may find its page cached (no lock) or not.
                    if !t.try_write(0, p, 0, &[v; PAGE], true) {
                        let mut g = disk.lock().unwrap();
                        t.write(0, &mut *g, p, 0, &[v; PAGE], true).unwrap();
                    }
                }
                if k % 3 == 0 {
                    let mut g = disk.lock().unwrap();
                    t.sync(0, &mut *g).unwrap();
                    drop(g);
                    t.drop_clean();
                }
            }
        })
    };
    writer.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let mut total_lockfree = 0;
    for r in readers {
        let (n, lf) = r.join().unwrap();
        assert!(n >= 2000);
        total_lockfree += lf;
    }
    assert!(total_lockfree > 0, "no read took the lock-free path");
    assert!(t.stats().evictions > 0 || t.stats().misses > PAGES, "the test never evicted");
}

/// One step of the property test below.
#[derive(Clone, Debug)]
enum Step {
    /// Write `len` bytes of `byte` (then counting up) at `at` of page `block`: through
    /// `try_write` first (the lock-free path, if cached), else `write`.
    Write { block: u64, at: usize, len: usize, byte: u8 },
    /// Read `len` bytes at `at` of page `block` and compare with the model.
    Read { block: u64, at: usize, len: usize },
    /// `sync` then `drop_clean`: the next accesses miss and refill from the disk.
    SyncDrop,
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    // Offsets and lengths near word boundaries and page ends as often as anywhere.
    let at = prop_oneof![0..PAGE, (0..PAGE / 8).prop_map(|w| w * 8), (1..16usize).prop_map(|k| PAGE - k)];
    let len = prop_oneof![0..24usize, 0..300usize, Just(128usize), Just(PAGE)];
    prop_oneof![
        6 => (0..6u64, at.clone(), len.clone(), any::<u8>()).prop_map(|(block, at, len, byte)| Step::Write { block, at, len: len.min(PAGE - at), byte }),
        6 => (0..6u64, at, len).prop_map(|(block, at, len)| Step::Read { block, at, len: len.min(PAGE - at) }),
        1 => Just(Step::SyncDrop),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

    /// Catches: a ranged page write that stores the wrong bytes (an off-by-one at a word's
    /// edge, the merge of a partly covered first or last word losing its neighbours, a
    /// missing last word), stores outside its range, or is lost to eviction or write-back: on
    /// a 3-slot cache over 6 pages, every read (lock-free hit or miss) equals a byte model of
    /// the disk plus every write, and so does the disk after a final sync.
    #[test]
    fn ranged_page_writes_match_a_byte_model(steps in proptest::collection::vec(step(), 1..60)) {
        let t = table(3);
        let mut d = MemDisk::new(6);
        let mut model: Vec<Vec<u8>> = d.pages.clone();
        for st in steps {
            match st {
                Step::Write { block, at, len, byte } => {
                    let data: Vec<u8> = (0..len).map(|i| byte.wrapping_add(i as u8)).collect();
                    if !t.try_write(0, block, at, &data, false) {
                        t.write(0, &mut d, block, at, &data, false).unwrap();
                    }
                    model[block as usize][at..at + len].copy_from_slice(&data);
                }
                Step::Read { block, at, len } => {
                    let mut buf = vec![0xA5u8; len];
                    if !t.try_read(0, block, at, &mut buf) {
                        t.read(0, &mut d, block, at, &mut buf).unwrap();
                    }
                    proptest::prop_assert_eq!(&buf[..], &model[block as usize][at..at + len], "page {} bytes {}..{}", block, at, at + len);
                }
                Step::SyncDrop => {
                    t.sync(0, &mut d).unwrap();
                    t.drop_clean();
                }
            }
        }
        t.sync(0, &mut d).unwrap();
        proptest::prop_assert_eq!(&d.pages, &model);
    }
}

/// Catches: a write past the end of a page accepted (silently cut short, or written into the
/// next word array) instead of refused with an error, or refused after changing something.
#[test]
fn writes_outside_a_page_are_refused() {
    let t = table(2);
    let mut d = MemDisk::new(4);
    t.write(0, &mut d, 1, 0, &[7; 8], false).unwrap();
    assert!(!t.try_write(0, 1, PAGE - 4, &[9; 8], false), "lock-free write past the page");
    assert_eq!(t.write(0, &mut d, 1, PAGE - 4, &[9; 8], false), Err(IoError::Io));
    assert_eq!(t.write(0, &mut d, 1, usize::MAX, &[9; 2], false), Err(IoError::Io));
    assert_eq!(t.write(0, &mut d, 1, PAGE + 1, &[], false), Err(IoError::Io));
    let mut b = [0u8; 16];
    t.read(0, &mut d, 1, PAGE - 16, &mut b).unwrap();
    assert_eq!(b, [1u8; 16], "a refused write changed the page");
    t.read(0, &mut d, 1, 0, &mut b).unwrap();
    assert_eq!(b[..8], [7u8; 8]);
}

/// One writer thread calling `write(k)` for `k = 0, 1, ..` and two reader threads calling
/// `read(r, n)` (reader `r` in 0..2, its `n`-th copy, from 1; true when its lock-free read
/// succeeded). The writer writes at least `min_writes` times and on until the readers have
/// copied `min_copies` times together (its first writes may otherwise be over before a reader
/// starts), at most 20 000 000 times; each reader copies until the writer is done, and at
/// least 1 000 times. Returns how many lock-free reads succeeded.
fn one_writer_two_readers(
    min_writes: u32,
    min_copies: u64,
    write: impl Fn(u32) + Send + 'static,
    read: impl Fn(usize, u64) -> bool + Send + Sync + 'static,
) -> u64 {
    let stop = Arc::new(AtomicBool::new(false));
    let copies = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let writer = std::thread::spawn({
        let copies = copies.clone();
        move || {
            let mut k = 0u32;
            while k < min_writes || (copies.load(Ordering::Relaxed) < min_copies && k < 20_000_000) {
                write(k);
                k += 1;
            }
        }
    });
    let read = Arc::new(read);
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (stop, copies, read) = (stop.clone(), copies.clone(), read.clone());
            std::thread::spawn(move || {
                let (mut ok, mut n) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) || n < 1000 {
                    n += 1;
                    copies.fetch_add(1, Ordering::Relaxed);
                    if read(r, n) {
                        ok += 1;
                    }
                }
                ok
            })
        })
        .collect();
    writer.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    readers.into_iter().map(|r| r.join().unwrap()).sum()
}

/// Catches, with real threads and the real (non-loom) word storage: a ranged write whose words
/// a lock-free reader can see half stored (a range mixing two writes), or that disturbs bytes
/// outside its range. A writer thread rewrites two unaligned ranges of one cached page
/// (bytes 3..133 and 2001..2100, each filled with one value per write; the partly covered
/// edge words are shared with bytes the other writes never touch) while two readers copy
/// each range and the page's untouched bytes without a lock.
#[test]
fn lock_free_readers_never_see_a_ranged_write_half_done() {
    let t = table(4);
    let disk = Arc::new(Mutex::new(MemDisk::new(4)));
    t.write(0, &mut *disk.lock().unwrap(), 2, 0, &[0xEE; PAGE], false).unwrap();
    const RANGES: [(usize, usize); 2] = [(3, 133), (2001, 2100)];
    // One writer, alternating ranges (two writer threads would also work, but a ticket lock
    // handed between more threads than the host has cores crawls: minutes, not milliseconds).
    let ok = one_writer_two_readers(
        40_000,
        20_000,
        move |k| {
            let k = k + 1;
            let (a, b) = RANGES[k as usize % 2];
            let v = (k / 2 % 200) as u8 + 1;
            assert!(t.try_write(1, 2, a, &vec![v; b - a], false), "page 2 left the cache");
        },
        move |r, n| {
            let (a, b) = RANGES[(n as usize + r) % 2];
            let mut buf = vec![0u8; b - a];
            let ok = t.try_read(3 + r, 2, a, &mut buf);
            if ok {
                assert!(buf.iter().all(|&x| x == buf[0]), "range {a}..{b} half written: {buf:?}");
            }
            let mut page = if n % 16 == 0 { vec![0u8; PAGE] } else { Vec::new() };
            if n % 16 == 0 && t.try_read(3 + r, 2, 0, &mut page) {
                let outside = |i: usize| !RANGES.iter().any(|&(a, b)| (a..b).contains(&i));
                assert!((0..PAGE).filter(|&i| outside(i)).all(|i| page[i] == 0xEE), "a byte outside the ranges changed");
                for (a, b) in RANGES {
                    assert!(page[a..b].iter().all(|&x| x == page[a]), "range {a}..{b} torn in a page copy");
                }
            }
            ok
        },
    );
    assert!(ok > 0, "no lock-free read succeeded");
    assert_eq!(t.stats().misses, 1, "the page was evicted or refilled");
}

/// An inode-table page in miniature (one seqlock per 256-byte part): ranges in
/// part 2 (an inode), part 3, across parts 3 and 4 (a directory record straddling two parts)
/// and part 4. The writer fills them in turn, write `k` filling range `k % 4` with the byte of
/// round `k / 4`; so at any moment the four ranges hold rounds `[R.., R-1..]` (the ranges
/// written in this round, then those not yet). Readers copy single ranges and all four at
/// once without a lock.
///
/// Catches, with real threads: a reader that validates only some of the parts it copied (a
/// copy spanning parts 2-4 mixing rounds against the write order, or a straddling record half
/// written); a writer of a straddling record that locks or bumps only its first part.
#[test]
fn readers_of_parts_never_see_a_neighbours_write_torn() {
    const RANGES: [(usize, usize); 4] = [(512, 768), (768, 1000), (1000, 1100), (1100, 1280)];
    fn byte(round: u32) -> u8 {
        (round % 200) as u8 + 1
    }
    fn prev(b: u8) -> u8 {
        if b == 1 { 200 } else { b - 1 }
    }
    let t = table(4);
    let disk = Arc::new(Mutex::new(MemDisk::new(4)));
    // Round -1 everywhere (byte 200).
    t.write(0, &mut *disk.lock().unwrap(), 2, 0, &[200; PAGE], false).unwrap();
    let ok = one_writer_two_readers(
        200_000,
        100_000,
        move |k| {
            let (a, b) = RANGES[k as usize % 4];
            assert!(t.try_write(1, 2, a, &vec![byte(k / 4); b - a], false), "page 2 left the cache");
        },
        move |r, n| {
            let (a, b) = RANGES[(n as usize + r) % 4];
            let mut buf = vec![0u8; b - a];
            let ok = t.try_read(3 + r, 2, a, &mut buf);
            if ok {
                assert!(buf.iter().all(|&x| x == buf[0]), "range {a}..{b} half written: {buf:?}");
            }
            // The straddling record's half in part 4 alone: only part 4's generation
            // tells this reader about writes of the record.
            let mut half = [0u8; 1100 - 1024];
            if t.try_read(3 + r, 2, 1024, &mut half) {
                assert!(half.iter().all(|&x| x == half[0]), "the record's half in part 4 half written: {half:?}");
            }
            let mut all = vec![0u8; 1280 - 512];
            if t.try_read(3 + r, 2, 512, &mut all) {
                let vals: Vec<u8> = RANGES
                    .iter()
                    .map(|&(a, b)| {
                        let s = &all[a - 512..b - 512];
                        assert!(s.iter().all(|&x| x == s[0]), "range {a}..{b} torn in a copy of parts 2-4");
                        s[0]
                    })
                    .collect();
                // Rounds [R, .., R, R-1, .., R-1]: a prefix written this round.
                let split = vals.iter().position(|&v| v != vals[0]).unwrap_or(4);
                assert!(vals[split..].iter().all(|&v| v == prev(vals[0])), "a copy of parts 2-4 mixes writes out of order: {vals:?}");
            }
            ok
        },
    );
    assert!(ok > 0, "no lock-free read succeeded");
    assert_eq!(t.stats().misses, 1, "the page was evicted or refilled");
}

/// Catches: a write of one inode that disturbs lock-free readers of another inode of the same
/// page (a generation per page, or a write that bumps more parts than its bytes lie in). A
/// writer rewrites inode 2 (bytes 512..768) tens of thousands of times while a reader copies
/// inode 5 (bytes 1280..1536) without a lock: every copy must succeed the first time (the
/// count of failed lock-free reads is exactly 0, whatever the interleaving), and hold the
/// bytes last written there.
#[test]
fn a_writer_of_one_inode_never_makes_a_reader_of_another_retry() {
    let t = table(4);
    let disk = Arc::new(Mutex::new(MemDisk::new(4)));
    t.write(0, &mut *disk.lock().unwrap(), 2, 0, &[7; PAGE], false).unwrap();
    t.write(0, &mut *disk.lock().unwrap(), 2, 1280, &[5; 256], false).unwrap();
    let reads = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = std::thread::spawn({
        let (reads, stop) = (reads.clone(), stop.clone());
        move || {
            let mut k = 0u32;
            while k < 40_000 || (reads.load(Ordering::Relaxed) < 20_000 && k < 20_000_000) {
                assert!(t.try_write(1, 2, 512, &[(k % 250) as u8; 256], false));
                k += 1;
            }
            stop.store(true, Ordering::Relaxed);
            k
        }
    });
    let (mut failed, mut n) = (0u64, 0u64);
    let mut buf = [0u8; 256];
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        reads.fetch_add(1, Ordering::Relaxed);
        if t.try_read(2, 2, 1280, &mut buf) {
            assert_eq!(buf, [5; 256]);
        } else {
            failed += 1;
        }
    }
    let writes = writer.join().unwrap();
    assert!(n > 0 && writes >= 40_000);
    assert_eq!(failed, 0, "{failed} of {n} lock-free reads of inode 5 failed while inode 2 was written {writes} times");
}

/// Catches: a whole-page write of a block that is not cached publishing the slot (its index
/// entry, its tag) before the page's bytes are in it, so that a lock-free reader sees 4 KiB of
/// zeros the block never held (the shape of `fs_fdtables_opens_race_unlinks`'s one failure,
/// docs/fs.md "Not done yet"). A writer writes page 3 whole, syncs and drops it, again and
/// again, so every write meets an uncached block; a reader copies it without a lock: every
/// copy it accepts is one write's byte or the disk's, never 0.
#[test]
fn a_whole_page_write_of_an_uncached_block_is_never_seen_as_zeros() {
    let t = table(4);
    let disk = Arc::new(Mutex::new(MemDisk::new(8)));
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let reader = std::thread::spawn({
        let (stop, seen) = (stop.clone(), seen.clone());
        move || {
            let mut page = vec![0u8; PAGE];
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                // Mostly one word (a short copy: many tries per write), sometimes the page.
                let want = if n.is_multiple_of(8) { PAGE } else { 8 };
                if t.try_read(1, 3, 0, &mut page[..want]) {
                    let page = &page[..want];
                    seen.fetch_add(1, Ordering::Relaxed);
                    assert!(page[0] != 0, "a lock-free read of page 3 saw zeros");
                    assert!(page.iter().all(|&x| x == page[0]), "page 3 torn");
                }
            }
        }
    });
    let mut k = 0u32;
    while k < 20_000 || (seen.load(Ordering::Relaxed) < 2_000 && k < 2_000_000) {
        let mut d = disk.lock().unwrap();
        t.write(0, &mut *d, 3, 0, &[(k % 200) as u8 + 10; PAGE], true).unwrap();
        t.sync(0, &mut *d).unwrap();
        t.drop_clean();
        k += 1;
    }
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap();
    assert!(t.stats().misses as u32 >= k, "the writes did not meet an uncached page");
}
