//! Host tests of the crate on an image in memory that the test formats itself (one group of
//! 1 KiB blocks: the smallest layout that still has single-, double- and triple-indirect
//! blocks within reach), so they need no e2fsprogs. The tests on real `mke2fs` images, and
//! `e2fsck` over what this crate writes, are in `xtask/src/fs/tests.rs`.

use ext2::{read_unlocked, Disk, Ext2, FsError, Result, ROOT_INO};

/// An image in memory.
struct Mem(Vec<u8>);

impl Disk for Mem {
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<()> {
        let end = off.checked_add(buf.len() as u64).filter(|&e| e <= self.0.len() as u64).ok_or(FsError::Io)?;
        buf.copy_from_slice(&self.0[off as usize..end as usize]);
        Ok(())
    }
    fn write_at(&mut self, off: u64, buf: &[u8]) -> Result<()> {
        let end = off.checked_add(buf.len() as u64).filter(|&e| e <= self.0.len() as u64).ok_or(FsError::Io)?;
        self.0[off as usize..end as usize].copy_from_slice(buf);
        Ok(())
    }
    fn size(&self) -> u64 {
        self.0.len() as u64
    }
}

const BS: usize = 1024;
const BLOCKS: u32 = 4096;
const INODES: u32 = 64;
/// Blocks: 0 boot, 1 superblock, 2 group descriptors, 3 block bitmap, 4 inode bitmap, 5..13
/// inode table (64 inodes of 128 bytes), 13 the root directory; free from 14.
const ROOT_DIR_BLOCK: u32 = 13;

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// A fresh ext2 file system (revision 1, file types in directory entries) of 4 MiB with an
/// empty root directory.
fn format() -> Vec<u8> {
    let mut img = vec![0u8; BLOCKS as usize * BS];
    let used_blocks = ROOT_DIR_BLOCK; // blocks 1..=13 (bit i is block i + 1)
    let used_inodes = 11u32;
    {
        let sb = &mut img[1024..2048];
        put32(sb, 0, INODES);
        put32(sb, 4, BLOCKS);
        put32(sb, 12, BLOCKS - 1 - used_blocks);
        put32(sb, 16, INODES - used_inodes);
        put32(sb, 20, 1); // first data block
        put32(sb, 24, 0); // 1 KiB blocks
        put32(sb, 28, 0);
        put32(sb, 32, 8192); // blocks per group
        put32(sb, 36, 8192);
        put32(sb, 40, INODES); // inodes per group
        put16(sb, 56, 0xEF53);
        put16(sb, 58, 1); // clean
        put32(sb, 76, 1); // revision 1
        put32(sb, 84, 11); // first inode
        put16(sb, 88, 128); // inode size
        put32(sb, 96, 0x0002); // incompat: file type
    }
    {
        let gd = &mut img[2 * BS..2 * BS + 32];
        put32(gd, 0, 3);
        put32(gd, 4, 4);
        put32(gd, 8, 5);
        put16(gd, 12, (BLOCKS - 1 - used_blocks) as u16);
        put16(gd, 14, (INODES - used_inodes) as u16);
        put16(gd, 16, 1);
    }
    // Block bitmap: the used blocks, and the bits past the end of the file system.
    for i in 0..8 * BS as u32 {
        if i < used_blocks || i >= BLOCKS - 1 {
            img[3 * BS + (i / 8) as usize] |= 1 << (i % 8);
        }
    }
    // Inode bitmap: the reserved inodes, and the bits past the group's inodes.
    for i in 0..8 * BS as u32 {
        if i < used_inodes || i >= INODES {
            img[4 * BS + (i / 8) as usize] |= 1 << (i % 8);
        }
    }
    // The root directory's inode (2) and its block: `.` and `..`.
    let root = 5 * BS + 128;
    put16(&mut img, root, 0o40755);
    put32(&mut img, root + 4, BS as u32);
    put16(&mut img, root + 26, 2);
    put32(&mut img, root + 28, (BS / 512) as u32);
    put32(&mut img, root + 40, ROOT_DIR_BLOCK);
    let d = ROOT_DIR_BLOCK as usize * BS;
    put32(&mut img, d, ROOT_INO);
    put16(&mut img, d + 4, 12);
    img[d + 6] = 1;
    img[d + 7] = 2;
    img[d + 8] = b'.';
    put32(&mut img, d + 12, ROOT_INO);
    put16(&mut img, d + 16, (BS - 12) as u16);
    img[d + 18] = 2;
    img[d + 19] = 2;
    img[d + 20..d + 22].copy_from_slice(b"..");
    img
}

/// Byte `i` of the test file: a pattern that differs in every block and at every offset.
fn byte(i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ (i / BS as u64) as u8
}

/// Where the test file has data: from 0 (direct blocks), across the single-indirect range, a
/// hole of whole blocks there, and pieces in the double-indirect range (from block 268) with
/// a hole between them. Everything else up to `SIZE` is a hole.
const PIECES: [(u64, u64); 4] = [(0, 20 * 1024 + 100), (40 * 1024 + 7, 9000), (270 * 1024 - 300, 5000), (700 * 1024 + 1, 3000)];
const SIZE: u64 = 700 * 1024 + 1 + 3000;

fn expected(i: u64) -> u8 {
    if PIECES.iter().any(|&(o, n)| i >= o && i < o + n) {
        byte(i)
    } else {
        0
    }
}

/// The formatted image with `/f` written in `PIECES` (and sized `SIZE`), and its inode number.
fn image_with_file() -> (Vec<u8>, u32) {
    let mut fs = Ext2::mount(Mem(format())).expect("mount the fresh image");
    let mut f = fs.create(b"/f", 0o644).unwrap();
    for (o, n) in PIECES {
        let data: Vec<u8> = (o..o + n).map(byte).collect();
        assert_eq!(fs.write(&mut f, o, &data).unwrap(), n as usize);
    }
    assert_eq!(f.size, SIZE);
    let ino = f.ino;
    (fs.dev.0, ino)
}

/// A small deterministic generator (the tests repeat exactly).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

/// Catches: a read loop that cuts a block wrongly (`in_blk` ignored or a piece one byte
/// short), a block map that follows the wrong pointer in the single- or double-indirect
/// range, a hole read as stale data; and any difference between the locked read
/// (`Ext2::read`) and the read without the lock (`read_unlocked`), which share one loop.
#[test]
fn both_reads_return_the_written_bytes_and_zeros_in_holes() {
    let (img, ino) = image_with_file();
    let mut fs = Ext2::mount(Mem(img)).unwrap();
    let geo = fs.geometry();
    let f = fs.inode(ino).unwrap();
    assert_eq!(f.size, SIZE);
    let mut rng = Lcg(7);
    // Every piece's edges, then random ranges (some past the end).
    let mut ranges: Vec<(u64, usize)> = PIECES.iter().flat_map(|&(o, n)| [(o, n as usize), (o.saturating_sub(3), 6), (o + n - 3, 6)]).collect();
    ranges.extend((0..300).map(|_| (rng.next(SIZE + 2000), 1 + rng.next(6000) as usize)));
    for (off, len) in ranges {
        let want: Vec<u8> = (off..(off + len as u64).min(SIZE)).map(expected).collect();
        let mut a = vec![0xAAu8; len];
        let n = fs.read(&f, off, &mut a).unwrap();
        assert_eq!(&a[..n], &want[..], "locked read at {off}+{len}");
        let mut b = vec![0x55u8; len];
        let mut get = |o: u64, buf: &mut [u8]| fs.dev.read_at(o, buf).is_ok();
        let (m, size) = read_unlocked(&geo, ino, off, &mut b, &mut get).expect("read_unlocked of a regular file");
        assert_eq!((m, size), (n, SIZE), "at {off}+{len}");
        assert_eq!(&b[..m], &want[..], "unlocked read at {off}+{len}");
    }
}

/// Catches: a read without the lock that keeps going (or panics) when its source refuses a
/// piece (a page not cached, a writer in the way): it must give up (`None`) so the caller
/// reads under the lock.
#[test]
fn the_unlocked_read_gives_up_when_its_source_refuses() {
    let (img, ino) = image_with_file();
    let mut fs = Ext2::mount(Mem(img)).unwrap();
    let geo = fs.geometry();
    // A read of the double-indirect piece asks for the inode, two pointers and the data:
    // refusing any one of those calls makes the whole read `None`.
    for refuse in 0..4 {
        let mut calls = 0;
        let mut get = |o: u64, buf: &mut [u8]| {
            calls += 1;
            calls - 1 != refuse && fs.dev.read_at(o, buf).is_ok()
        };
        let mut b = [0u8; 100];
        assert_eq!(read_unlocked(&geo, ino, 700 * 1024 + 1, &mut b, &mut get), None, "call {refuse} refused");
    }
    let mut get = |o: u64, buf: &mut [u8]| fs.dev.read_at(o, buf).is_ok();
    let mut b = [0u8; 100];
    assert!(read_unlocked(&geo, ino, 700 * 1024 + 1, &mut b, &mut get).is_some(), "no call refused");
    // Not a regular file, inode 0, an inode past the count: `None`, never a panic.
    assert_eq!(read_unlocked(&geo, ROOT_INO, 0, &mut b, &mut get), None);
    assert_eq!(read_unlocked(&geo, 0, 0, &mut b, &mut get), None);
    assert_eq!(read_unlocked(&geo, INODES + 1, 0, &mut b, &mut get), None);
}

/// Catches: a block pointer outside the file system followed (a read past the device, or of
/// metadata) instead of refused, on either read; the locked read names the problem.
#[test]
fn a_pointer_outside_the_file_system_is_refused_by_both_reads() {
    let (mut img, ino) = image_with_file();
    let at = 5 * BS + (ino as usize - 1) * 128;
    let single = u32::from_le_bytes(img[at + 40 + 48..at + 40 + 52].try_into().unwrap());
    assert!(single != 0, "the file has a single-indirect block");
    // Direct pointer 3 past the end; pointer 20 of the single-indirect block into block 0.
    put32(&mut img, at + 40 + 12, BLOCKS + 5);
    put32(&mut img, single as usize * BS + 4 * (20 - 12), 0xFFFF_FFF0);
    let mut fs = Ext2::mount(Mem(img)).unwrap();
    let geo = fs.geometry();
    let f = fs.inode(ino).unwrap();
    for off in [3 * 1024 + 10, 20 * 1024] {
        let mut b = [0u8; 16];
        assert_eq!(fs.read(&f, off, &mut b), Err(FsError::Corrupt("block pointer outside the file system")), "at {off}");
        let mut get = |o: u64, buf: &mut [u8]| fs.dev.read_at(o, buf).is_ok();
        assert_eq!(read_unlocked(&geo, ino, off, &mut b, &mut get), None, "at {off}");
    }
    // The blocks before the bad ones still read.
    let mut b = [0u8; 16];
    assert_eq!(fs.read(&f, 100, &mut b), Ok(16));
    assert!(b.iter().enumerate().all(|(i, &x)| x == byte(100 + i as u64)));
}

/// Catches: allocation counts that drift from what was allocated (a block or inode taken
/// twice or never counted), and writes that do not survive a remount of the same bytes.
#[test]
fn what_is_written_survives_a_remount_and_the_counts_match() {
    let fresh = Ext2::mount(Mem(format())).unwrap();
    let (free_b0, _, free_i0, _) = fresh.usage();
    let (img, ino) = image_with_file();
    let mut fs = Ext2::mount(Mem(img)).unwrap();
    let (free_b, blocks, free_i, inodes) = fs.usage();
    assert_eq!((blocks, inodes), (BLOCKS as u64, INODES as u64));
    assert_eq!(free_i, free_i0 - 1, "one inode for /f");
    let f = fs.inode(ino).unwrap();
    // Data blocks of the pieces, plus the single-indirect block, the double-indirect block
    // and the two second-level blocks under it (logical blocks 269..275 and 700..703).
    let data_blocks: u64 = {
        let mut v: Vec<u64> = PIECES.iter().flat_map(|&(o, n)| (o / 1024)..(o + n).div_ceil(1024)).collect();
        v.dedup();
        v.len() as u64
    };
    assert_eq!(free_b0 - free_b, data_blocks + 4);
    assert_eq!(f.blocks512 as u64, (data_blocks + 4) * 2);
    let root = fs.inode(ROOT_INO).unwrap();
    assert_eq!(fs.lookup(&root, b"f"), Ok(ino));
}

/// An image in memory shared by several `Ext2`s (two cores' copies of the file system), with a
/// directory stamp the test sets (`Disk::dir_stamp`): `None` gives no index.
#[derive(Clone)]
struct Stamped {
    img: std::rc::Rc<std::cell::RefCell<Vec<u8>>>,
    stamp: std::rc::Rc<std::cell::Cell<Option<u64>>>,
}

impl Disk for Stamped {
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<()> {
        let img = self.img.borrow();
        let end = off.checked_add(buf.len() as u64).filter(|&e| e <= img.len() as u64).ok_or(FsError::Io)?;
        buf.copy_from_slice(&img[off as usize..end as usize]);
        Ok(())
    }
    fn write_at(&mut self, off: u64, buf: &[u8]) -> Result<()> {
        let mut img = self.img.borrow_mut();
        let end = off.checked_add(buf.len() as u64).filter(|&e| e <= img.len() as u64).ok_or(FsError::Io)?;
        img[off as usize..end as usize].copy_from_slice(buf);
        Ok(())
    }
    fn size(&self) -> u64 {
        self.img.borrow().len() as u64
    }
    fn dir_stamp(&self, _dir: u32) -> Option<[u64; 2]> {
        self.stamp.get().map(|s| [0, s])
    }
}

/// Name `i` of the test directory: long enough that 40 of them take two 1 KiB blocks.
fn name(i: u32) -> String {
    format!("a-rather-long-file-name-{i}")
}

/// Names `name(0)` .. `name(39)` in `/d` (a directory of two 1 KiB blocks), over a stamped
/// disk.
fn indexed_image() -> (Ext2<Stamped>, Stamped) {
    let disk = Stamped { img: std::rc::Rc::new(std::cell::RefCell::new(format())), stamp: std::rc::Rc::new(std::cell::Cell::new(Some(1))) };
    let mut fs = Ext2::mount(disk.clone()).unwrap();
    fs.mkdir(b"/d", 0o755).unwrap();
    for i in 0..40 {
        fs.create(format!("/d/{}", name(i)).as_bytes(), 0o644).unwrap();
    }
    (fs, disk)
}

/// Catches: an index that answers differently from a scan (a lost entry, a hash probe that
/// stops early, a name compared by a prefix, a wrong inode), a listing from the index in
/// another order or with other entries than the scan's, and an index built more than once
/// while nothing changed.
#[test]
fn a_directory_index_answers_as_the_scan_does() {
    let (mut fs, disk) = indexed_image();
    let mut plain = Ext2::mount(Mem(disk.img.borrow().clone())).unwrap();
    let d = fs.resolve(b"/d").unwrap();
    let pd = plain.resolve(b"/d").unwrap();
    assert!(d.size > 1024, "the directory spans two blocks");
    let builds = fs.dir_index.builds;
    let mut names: Vec<Vec<u8>> = (0..40).map(|i| name(i).into_bytes()).collect();
    names.extend([b".".to_vec(), b"..".to_vec()]);
    for n in &names {
        assert_eq!(fs.lookup(&d, n), plain.lookup(&pd, n), "{}", String::from_utf8_lossy(n));
        assert!(fs.lookup(&d, n).is_ok());
    }
    for miss in [name(40).into_bytes(), name(1).as_bytes()[..20].to_vec(), format!("{}x", name(3)).into_bytes(), format!("{} ", name(39)).into_bytes(), b"A-rather-long-file-name-1".to_vec(), Vec::new()] {
        assert_eq!(fs.lookup(&d, &miss), Err(FsError::NotFound), "{}", String::from_utf8_lossy(&miss));
    }
    assert_eq!(fs.dir_index.builds, builds + 1, "one scan for all of them");
    assert!(fs.dir_index.uses >= 48);
    let a: Vec<_> = fs.read_dir(&d).unwrap().into_iter().map(|e| (e.ino, e.file_type, e.name)).collect();
    let b: Vec<_> = plain.read_dir(&pd).unwrap().into_iter().map(|e| (e.ino, e.file_type, e.name)).collect();
    assert_eq!(a, b);
    assert_eq!(a.len(), 42);
    // Paths through the index resolve as through the scan.
    assert_eq!(fs.resolve(format!("/d/{}", name(17)).as_bytes()).unwrap().ino, plain.resolve(format!("/d/{}", name(17)).as_bytes()).unwrap().ino);
    assert_eq!(fs.resolve(format!("/d/./{}/", name(17)).as_bytes()).unwrap().ino, plain.resolve(format!("/d/{}", name(17)).as_bytes()).unwrap().ino);
    assert_eq!(fs.resolve(format!("/d/{}/x", name(17)).as_bytes()).err(), Some(FsError::NotDir));
    assert_eq!(fs.resolve(format!("/d/../d/{}", name(3)).as_bytes()).unwrap().ino, plain.resolve(format!("/d/{}", name(3)).as_bytes()).unwrap().ino);
}

/// Catches: an index kept after this `Ext2`'s own create, unlink, rename, mkdir or rmdir in
/// its directory (the disk's stamp never moves here, so only the crate's own `forget` keeps
/// the answers right).
#[test]
fn own_changes_drop_the_directory_index() {
    let (mut fs, _disk) = indexed_image();
    let look = |fs: &mut Ext2<Stamped>, n: &[u8]| {
        let d = fs.resolve(b"/d").unwrap();
        fs.lookup(&d, n)
    };
    assert!(look(&mut fs, name(5).as_bytes()).is_ok());
    fs.unlink(format!("/d/{}", name(5)).as_bytes()).unwrap();
    assert_eq!(look(&mut fs, name(5).as_bytes()), Err(FsError::NotFound), "unlink");
    let made = fs.create(b"/d/new", 0o644).unwrap();
    assert_eq!(look(&mut fs, b"new"), Ok(made.ino), "create");
    fs.rename(b"/d/new", b"/d/moved").unwrap();
    assert_eq!(look(&mut fs, b"new"), Err(FsError::NotFound), "rename: old name");
    assert_eq!(look(&mut fs, b"moved"), Ok(made.ino), "rename: new name");
    let sub = fs.mkdir(b"/d/sub", 0o755).unwrap();
    assert_eq!(look(&mut fs, b"sub"), Ok(sub.ino), "mkdir");
    fs.rename(b"/d/moved", b"/d/sub/inner").unwrap();
    assert_eq!(look(&mut fs, b"moved"), Err(FsError::NotFound), "rename across directories");
    assert_eq!(fs.resolve(b"/d/sub/inner").unwrap().ino, made.ino);
    // A directory moved to another parent: its `..` follows.
    fs.mkdir(b"/e", 0o755).unwrap();
    fs.rename(b"/d/sub", b"/e/sub").unwrap();
    assert_eq!(fs.resolve(b"/e/sub/..").unwrap().ino, fs.resolve(b"/e").unwrap().ino);
    fs.unlink(b"/e/sub/inner").unwrap();
    fs.rmdir(b"/e/sub").unwrap();
    assert_eq!(fs.resolve(b"/e/sub").err(), Some(FsError::NotFound), "rmdir");
    // A directory made again on the removed one's inode is read afresh.
    let again = fs.mkdir(b"/e/sub2", 0o755).unwrap();
    let names: Vec<_> = fs.read_dir(&again).unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, [b".".to_vec(), b"..".to_vec()]);
}

/// Catches: an index used although the stamp moved (another `Ext2` over the same disk, i.e.
/// another core, changed the directory), and one made while the disk says no stamp (a change
/// running).
#[test]
fn an_index_is_used_only_at_its_stamp() {
    let (mut fs, disk) = indexed_image();
    let mut other = Ext2::mount(disk.clone()).unwrap();
    let d = fs.resolve(b"/d").unwrap();
    assert!(fs.lookup(&d, name(7).as_bytes()).is_ok());
    // The other core's unlink, and the stamp moved as the library OS's change hook moves it.
    other.unlink(format!("/d/{}", name(7)).as_bytes()).unwrap();
    disk.stamp.set(Some(2));
    assert_eq!(fs.lookup(&d, name(7).as_bytes()), Err(FsError::NotFound));
    // A copy of the directory's inode older than a change that ended before the stamp was
    // read (the other core's links grow the directory by a block): the index is made from
    // the inode as it is at the stamp, not from the caller's copy.
    let stale = fs.resolve(b"/d").unwrap();
    for i in 0..40 {
        other.link(format!("/d/{}", name(0)).as_bytes(), format!("/d/{}-link", name(i)).as_bytes()).unwrap();
    }
    assert!(other.resolve(b"/d").unwrap().size > stale.size, "the directory grew");
    disk.stamp.set(Some(3));
    assert_eq!(fs.lookup(&stale, format!("{}-link", name(39)).as_bytes()), fs.lookup(&stale, name(0).as_bytes()));
    assert!(fs.lookup(&stale, name(0).as_bytes()).is_ok());
    assert_eq!(fs.resolve(b"/d").unwrap().size, other.resolve(b"/d").unwrap().size, "the walk's copy of the directory is the new one");
    // No stamp: no index made or used, every lookup scans.
    disk.stamp.set(None);
    let (b0, u0) = (fs.dir_index.builds, fs.dir_index.uses);
    other.create(format!("/d/{}", name(7)).as_bytes(), 0o644).unwrap();
    assert!(fs.lookup(&d, name(7).as_bytes()).is_ok());
    assert_eq!((fs.dir_index.builds, fs.dir_index.uses), (b0, u0));
}
