//! Host tests of the ext2 code (the library OS's files, compiled here) on images `mke2fs -d`
//! makes: reading, refusing and surviving corrupt metadata, writing (checked by `e2fsck -fn`).

use super::*;
use crate::host::ext2img::tool;
use std::path::PathBuf;
use std::process::Command;

/// A scratch directory under the target directory, emptied first.
fn scratch(name: &str) -> PathBuf {
    let d = crate::host::env::target_dir().join("fs-tests").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Deterministic file contents.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(2654435761).rotate_left(seed as u32 % 32) as u8 ^ seed).collect()
}

/// Files of every mapping depth: empty, one byte, direct only, single indirect, double
/// indirect (at 4 KiB blocks: > 12 and > 12 + 1024 blocks), a subdirectory, a long name.
fn make_tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let files = vec![
        ("empty".to_string(), Vec::new()),
        ("one".to_string(), b"x".to_vec()),
        ("hello.txt".to_string(), b"hello from the host\n".to_vec()),
        ("direct.bin".to_string(), pattern(40_000, 1)),
        ("indirect.bin".to_string(), pattern(300_000, 2)),
        ("double.bin".to_string(), pattern(4_300_000 + 123, 3)),
        ("sub/inner.txt".to_string(), b"inner\n".to_vec()),
        ("sub/deeper/leaf".to_string(), pattern(5000, 4)),
        (format!("sub/{}", "n".repeat(255)), b"long name\n".to_vec()),
    ];
    for (p, d) in &files {
        let full = root.join(p);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, d).unwrap();
    }
    // Symbolic links: relative, through `..`, absolute, long (a slow link, in a block),
    // and a loop.
    let ln = |target: &str, at: &str| std::os::unix::fs::symlink(target, root.join(at)).unwrap();
    ln("hello.txt", "link-hello");
    ln("../one", "sub/up-one");
    ln("/sub/inner.txt", "abs-inner");
    ln(&format!("sub/{}../hello.txt", "deeper/../".repeat(8)), "long-link");
    ln("sub", "link-dir");
    ln("loop2", "loop1");
    ln("loop1", "loop2");
    files
}

fn have_mke2fs() -> bool {
    tool("mke2fs").exists()
}

#[test]
fn reads_every_file_of_a_mke2fs_image_byte_for_byte() {
    assert!(have_mke2fs(), "e2fsprogs (mke2fs) is needed for the ext2 host tests: apt-get install e2fsprogs");
    let d = scratch("tree");
    let files = make_tree(&d.join("root"));
    let img = d.join("disk.img");
    mkimage(&d.join("root"), &img, Some(16)).unwrap();
    let mut fs = Ext2::mount(ImageFile::open(&img).unwrap()).unwrap();
    for (p, want) in &files {
        let ino = fs.resolve(p.as_bytes()).unwrap_or_else(|e| panic!("{p}: {e:?}"));
        assert_eq!(ino.size, want.len() as u64, "{p}");
        let mut got = vec![0u8; want.len() + 10];
        let n = fs.read(&ino, 0, &mut got).unwrap();
        assert_eq!(n, want.len(), "{p}");
        assert!(got[..n] == want[..], "{p}: contents differ");
        // A read from the middle, across block boundaries.
        if want.len() > 5000 {
            let mut mid = vec![0u8; 5000];
            assert_eq!(fs.read(&ino, 4000, &mut mid).unwrap(), 5000);
            assert!(mid[..] == want[4000..9000]);
        }
    }
    let root = fs.resolve(b"/").unwrap();
    let names: Vec<String> = fs.read_dir(&root).unwrap().iter().map(|e| String::from_utf8_lossy(&e.name).into_owned()).collect();
    for n in [".", "..", "empty", "hello.txt", "sub", "lost+found"] {
        assert!(names.iter().any(|x| x == n), "root lacks {n}: {names:?}");
    }
    assert_eq!(fs.resolve(b"/nope").unwrap_err(), FsError::NotFound);
    assert_eq!(fs.resolve(b"/hello.txt/x").unwrap_err(), FsError::NotDir);
    assert_eq!(fs.resolve(b"/../../sub/./inner.txt").unwrap().size, 6, "`..` at the root stays there");
    // Symbolic links.
    for (link, want) in [("/link-hello", "/hello.txt"), ("/sub/up-one", "/one"), ("/abs-inner", "/sub/inner.txt"), ("/long-link", "/hello.txt"), ("/link-dir/inner.txt", "/sub/inner.txt")] {
        assert_eq!(fs.resolve(link.as_bytes()).unwrap().ino, fs.resolve(want.as_bytes()).unwrap().ino, "{link}");
    }
    let l = fs.resolve_nofollow(b"/long-link").unwrap();
    assert!(l.is_symlink() && !fs.is_fast_symlink(&l), "a long target is in a block");
    let l = fs.resolve_nofollow(b"/link-hello").unwrap();
    assert!(fs.is_fast_symlink(&l));
    assert_eq!(fs.read_link(&l).unwrap(), b"hello.txt");
    assert_eq!(fs.resolve(b"/loop1").unwrap_err(), FsError::TooManyLinks);
    let long = format!("/{}", "a".repeat(256));
    assert_eq!(fs.resolve(long.as_bytes()).unwrap_err(), FsError::NameTooLong);
}

#[test]
fn refuses_broken_superblocks_with_clear_errors() {
    assert!(have_mke2fs());
    let d = scratch("sb");
    make_tree(&d.join("root"));
    let img = d.join("disk.img");
    mkimage(&d.join("root"), &img, Some(8)).unwrap();
    let good = std::fs::read(&img).unwrap();
    let patch = |at: usize, bytes: &[u8]| {
        let mut v = good.clone();
        v[1024 + at..1024 + at + bytes.len()].copy_from_slice(bytes);
        Ext2::mount(MemDisk(v)).err()
    };
    assert!(matches!(patch(56, &[0, 0]), Some(FsError::Corrupt(_))), "bad magic");
    assert!(matches!(patch(24, &[9, 0, 0, 0]), Some(FsError::Corrupt(_))), "huge block size");
    assert!(matches!(patch(4, &[0xFF, 0xFF, 0xFF, 0x0F]), Some(FsError::Corrupt(_))), "blocks past the device");
    assert!(matches!(patch(0, &[0xFF, 0xFF, 0xFF, 0x0F]), Some(FsError::Corrupt(_))), "inode count past the tables");
    assert!(matches!(patch(40, &[0, 0, 0, 0]), Some(FsError::Corrupt(_))), "no inodes per group");
    assert!(matches!(patch(96, &[0x40, 0, 0, 0]), Some(FsError::Unsupported(_))), "extents");
    // A truncated device.
    assert!(Ext2::mount(MemDisk(good[..1500].to_vec())).is_err());
    assert!(Ext2::mount(MemDisk(good[..1 << 20].to_vec())).is_err());
}

/// Walk everything reachable (bounded), reading every file; errors are fine, panics not.
fn walk_all<D: Disk>(fs: &mut Ext2<D>) -> usize {
    // 2000 inodes at most: loops in a corrupt tree end there.
    fs.walk_bounded(2000, |fs, i| {
        let mut buf = vec![0u8; 64 << 10];
        let mut off = 0;
        while let Ok(n) = fs.read(i, off, &mut buf) {
            if n == 0 || off > 8 << 20 {
                break;
            }
            off += n as u64;
        }
    })
}

/// Corrupt images per run (`FS_FUZZ_N` overrides, for longer runs by hand).
const FUZZ_N_DEFAULT: usize = 400;

fn meta_area_ok(meta: &[(u64, u64)], len: usize) -> bool {
    meta.iter().all(|&(s, l)| (s + l) as usize <= len)
}

#[test]
fn seeded_corruptions_of_metadata_never_panic() {
    assert!(have_mke2fs());
    let d = scratch("fuzz");
    make_tree(&d.join("root"));
    let img = d.join("disk.img");
    mkimage(&d.join("root"), &img, Some(8)).unwrap();
    let good = std::fs::read(&img).unwrap();
    let mut fs = Ext2::mount(MemDisk(good.clone())).unwrap();
    assert!(walk_all(&mut fs) >= 10);
    // Where the metadata is: the superblock, the descriptor table, each group's bitmaps
    // and inode table, and the blocks of the directories and of the indirect blocks of
    // the big files. Flip bytes there (xorshift, fixed seed).
    let bs = fs.bs;
    let mut meta: Vec<(u64, u64)> = vec![(1024, 1024), (bs.max(2048), bs)];
    let itable = (fs.sb.inodes_per_group as u64 * fs.sb.inode_size as u64).div_ceil(bs);
    for g in fs.groups.clone() {
        meta.push((g.block_bitmap as u64 * bs, bs));
        meta.push((g.inode_bitmap as u64 * bs, bs));
        // The used part of the inode table (its first blocks).
        meta.push((g.inode_table as u64 * bs, bs * itable.min(2)));
    }
    for dir in ["/", "/sub", "/sub/deeper", "/lost+found"] {
        let i = fs.resolve(dir.as_bytes()).unwrap();
        meta.push((fs.bmap(&i, 0).unwrap() * bs, bs));
    }
    for big in ["/indirect.bin", "/double.bin"] {
        let i = fs.resolve(big.as_bytes()).unwrap();
        meta.push((i.block[12] as u64 * bs, bs));
        if i.block[13] != 0 {
            meta.push((i.block[13] as u64 * bs, bs));
        }
    }
    assert!(meta_area_ok(&meta, good.len()));
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let fuzz_n: usize = std::env::var("FS_FUZZ_N").ok().and_then(|v| v.parse().ok()).unwrap_or(FUZZ_N_DEFAULT);
    let (mut mounted, mut refused) = (0, 0);
    for _ in 0..fuzz_n {
        let mut v = good.clone();
        for _ in 0..1 + next() % 8 {
            let (start, len) = meta[(next() % meta.len() as u64) as usize];
            let at = (start + next() % len) as usize;
            v[at] = next() as u8;
        }
        match Ext2::mount(MemDisk(v)) {
            Ok(mut fs) => {
                walk_all(&mut fs);
                // Writes on a corrupt image: errors are fine, panics and hangs not.
                if let Ok(mut f) = fs.create(b"/fuzz-new", 0o644) {
                    let _ = fs.write(&mut f, 0, &[7u8; 70_000]);
                    let _ = fs.truncate(&mut f, 1000);
                }
                let _ = fs.mkdir(b"/sub/fuzz-dir", 0o755);
                let _ = fs.unlink(b"/indirect.bin");
                let _ = fs.rmdir(b"/sub/deeper");
                let _ = fs.link(b"/one", b"/sub/one-link");
                let _ = fs.rename(b"/sub/deeper", b"/moved");
                let _ = fs.rename(b"/hello.txt", b"/sub/inner.txt");
                mounted += 1;
            }
            Err(_) => refused += 1,
        }
    }
    eprintln!("fuzz: {mounted} corrupt images mounted and used, {refused} refused");
    assert!(mounted >= fuzz_n / 4 && mounted + refused == fuzz_n, "{mounted} mounted");
}

fn fsck_clean(v: &[u8], name: &str) {
    let d = scratch(name);
    let img = d.join("after.img");
    std::fs::write(&img, v).unwrap();
    let out = Command::new(tool("e2fsck")).arg("-fn").arg(&img).output().unwrap();
    assert!(out.status.success(), "e2fsck -fn after {name}:\n{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

fn fresh_image(name: &str, mib: u64) -> Vec<u8> {
    let d = scratch(name);
    make_tree(&d.join("root"));
    let img = d.join("disk.img");
    mkimage(&d.join("root"), &img, Some(mib)).unwrap();
    std::fs::read(&img).unwrap()
}

fn read_all<D: Disk>(fs: &mut Ext2<D>, path: &str) -> Vec<u8> {
    let ino = fs.resolve(path.as_bytes()).unwrap_or_else(|e| panic!("{path}: {e:?}"));
    let mut v = vec![0u8; ino.size as usize];
    assert_eq!(fs.read(&ino, 0, &mut v).unwrap(), v.len());
    v
}

#[test]
fn writes_leave_an_image_e2fsck_calls_clean() {
    assert!(have_mke2fs());
    let mut fs = Ext2::mount(MemDisk(fresh_image("write", 16))).unwrap();
    let (free0, _, ifree0, _) = fs.usage();
    // Files of every mapping depth, written in odd pieces.
    let big = pattern(4_300_000, 9);
    assert_eq!(fs.create(b"/new/../big.bin", 0o644).map(|_| ()).unwrap_err(), FsError::NotFound);
    let mut f = fs.create(b"/big.bin", 0o644).unwrap();
    let mut off = 0;
    for chunk in big.chunks(12_345) {
        assert_eq!(fs.write(&mut f, off, chunk).unwrap(), chunk.len());
        off += chunk.len() as u64;
    }
    fs.mkdir(b"/new", 0o755).unwrap();
    fs.mkdir(b"/new/deeper", 0o755).unwrap();
    assert_eq!(fs.mkdir(b"/new", 0o755).unwrap_err(), FsError::Exists);
    let mut small = fs.create(b"/new/deeper/small.txt", 0o644).unwrap();
    fs.write(&mut small, 0, b"written by ext2_write\n").unwrap();
    // Many entries: the directory grows past one block.
    for i in 0..300 {
        let p = format!("/new/f{i:03}-{}", "x".repeat(40));
        let mut ino = fs.create(p.as_bytes(), 0o644).unwrap();
        fs.write(&mut ino, 0, p.as_bytes()).unwrap();
    }
    for i in (0..300).step_by(2) {
        fs.unlink(format!("/new/f{i:03}-{}", "x".repeat(40)).as_bytes()).unwrap();
    }
    // A sparse file: a byte far out, holes before it read as zeros.
    let mut sparse = fs.create(b"/sparse", 0o644).unwrap();
    fs.write(&mut sparse, 50_000_000 % (8 << 20), b"end").unwrap();
    // Truncate down into the double-indirect range, then a middle hole, then to zero.
    let mut t = fs.create(b"/trunc", 0o644).unwrap();
    fs.write(&mut t, 0, &pattern(4_400_000, 11)).unwrap();
    fs.truncate(&mut t, 100_001).unwrap();
    fs.truncate(&mut t, 200_000).unwrap();
    // Hard link, then the old name goes: the data stays under the new one.
    fs.link(b"/hello.txt", b"/new/hello-link").unwrap();
    fs.unlink(b"/hello.txt").unwrap();
    // Remove a populated tree, then an empty dir.
    assert_eq!(fs.rmdir(b"/sub").unwrap_err(), FsError::NotEmpty);
    assert_eq!(fs.unlink(b"/sub").unwrap_err(), FsError::IsDir);
    assert_eq!(fs.rmdir(b"/one").unwrap_err(), FsError::NotDir);
    fs.unlink(b"/sub/deeper/leaf").unwrap();
    fs.rmdir(b"/sub/deeper").unwrap();
    fs.unlink(b"/double.bin").unwrap();
    assert_eq!(fs.unlink(b"/double.bin").unwrap_err(), FsError::NotFound);
    assert_eq!(fs.create(b"/one/x", 0o644).map(|_| ()).unwrap_err(), FsError::NotDir);
    assert_eq!(fs.create(b"/..", 0o644).map(|_| ()).unwrap_err(), FsError::InvalidArgument);
    let v = fs.dev.0.clone();
    fsck_clean(&v, "write-fsck");
    // Read back on a fresh mount.
    let mut fs = Ext2::mount(MemDisk(v)).unwrap();
    assert!(read_all(&mut fs, "/big.bin") == big);
    assert_eq!(read_all(&mut fs, "/new/deeper/small.txt"), b"written by ext2_write\n");
    assert_eq!(read_all(&mut fs, "/new/hello-link"), b"hello from the host\n");
    assert_eq!(fs.resolve(b"/hello.txt").unwrap_err(), FsError::NotFound);
    let s = read_all(&mut fs, "/sparse");
    assert_eq!(s.len(), 50_000_000 % (8 << 20) + 3);
    assert!(s[..s.len() - 3].iter().all(|&b| b == 0) && &s[s.len() - 3..] == b"end");
    let t = read_all(&mut fs, "/trunc");
    assert_eq!(t.len(), 200_000);
    assert!(t[..100_001] == pattern(4_400_000, 11)[..100_001] && t[100_001..].iter().all(|&b| b == 0));
    let new_dir = fs.resolve(b"/new").unwrap();
    let names = fs.read_dir(&new_dir).unwrap();
    assert_eq!(names.len(), 2 + 2 + 150, "., .., deeper, hello-link, 150 files");
    for i in (1..300).step_by(2) {
        let p = format!("/new/f{i:03}-{}", "x".repeat(40));
        assert_eq!(read_all(&mut fs, &p), p.as_bytes());
    }
    // An orphan: unlinked while "open", its data stays until released.
    let mut o = fs.create(b"/orphan", 0o644).unwrap();
    fs.write(&mut o, 0, &pattern(30_000, 3)).unwrap();
    let n = fs.unlink_with(b"/orphan", &|_| true).unwrap().expect("kept as an orphan");
    assert_eq!(fs.resolve(b"/orphan").unwrap_err(), FsError::NotFound);
    let oi = fs.inode(n).unwrap();
    let mut back = vec![0u8; 30_000];
    assert_eq!(fs.read(&oi, 0, &mut back).unwrap(), 30_000);
    assert!(back == pattern(30_000, 3));
    fs.release_orphan(n).unwrap();
    // Removing everything we made gives the space back.
    fs.unlink(b"/big.bin").unwrap();
    fs.unlink(b"/sparse").unwrap();
    fs.unlink(b"/trunc").unwrap();
    let (free1, _, ifree1, _) = fs.usage();
    assert!(free1 > free0 - 100 && ifree1 > ifree0 - 200, "space not returned: blocks {free0} -> {free1}, inodes {ifree0} -> {ifree1}");
    fsck_clean(&fs.dev.0, "write-fsck-2");
}

#[test]
fn renames_keep_the_tree_consistent() {
    assert!(have_mke2fs());
    let mut fs = Ext2::mount(MemDisk(fresh_image("rename", 16))).unwrap();
    // A file within a directory, across directories, over an existing file.
    fs.rename(b"/one", b"/one-renamed").unwrap();
    fs.rename(b"/one-renamed", b"/sub/one").unwrap();
    fs.rename(b"/hello.txt", b"/sub/inner.txt").unwrap();
    // A directory to another parent (its `..` and both link counts change), then back under
    // a new name; into itself is refused; over a non-empty directory too.
    fs.mkdir(b"/target", 0o755).unwrap();
    fs.rename(b"/sub/deeper", b"/target/deeper").unwrap();
    assert_eq!(fs.rename(b"/target", b"/target/deeper/x").unwrap_err(), FsError::InvalidArgument);
    assert_eq!(fs.rename(b"/sub", b"/target").unwrap_err(), FsError::NotEmpty);
    fs.mkdir(b"/empty-dir", 0o755).unwrap();
    fs.rename(b"/target/deeper", b"/empty-dir").unwrap();
    assert_eq!(fs.rename(b"/direct.bin", b"/sub").unwrap_err(), FsError::IsDir);
    assert_eq!(fs.rename(b"/sub", b"/direct.bin").unwrap_err(), FsError::NotDir);
    assert_eq!(fs.rename(b"/nope", b"/x").unwrap_err(), FsError::NotFound);
    fs.rename(b"/direct.bin", b"/direct.bin").unwrap();
    // Symbolic links made here, renamed and removed.
    fs.symlink(b"sub/one", b"/new-link").unwrap();
    assert_eq!(fs.resolve(b"/new-link").unwrap().ino, fs.resolve(b"/sub/one").unwrap().ino);
    fs.rename(b"/new-link", b"/sub/moved-link").unwrap();
    assert_eq!(fs.resolve(b"/sub/moved-link").unwrap_err(), FsError::NotFound, "relative to its new directory");
    fs.symlink(b"/sub/one", b"/abs-link").unwrap();
    fs.unlink(b"/link-hello").unwrap();
    fs.unlink(b"/long-link").unwrap();
    let long = format!("/sub/{}one", "./".repeat(40));
    fs.symlink(long.as_bytes(), b"/slow-link").unwrap();
    let sl = fs.resolve_nofollow(b"/slow-link").unwrap();
    assert!(!fs.is_fast_symlink(&sl) && fs.read_link(&sl).unwrap() == long.as_bytes());
    assert_eq!(fs.resolve(b"/slow-link").unwrap().ino, fs.resolve(b"/sub/one").unwrap().ino);
    fs.symlink(long.as_bytes(), b"/slow-link-2").unwrap();
    fs.unlink(b"/slow-link-2").unwrap();
    assert_eq!(fs.symlink(&[b'x'; 4096], b"/too-long").map(|_| ()).unwrap_err(), FsError::NameTooLong);
    fsck_clean(&fs.dev.0, "rename-fsck");
    assert_eq!(read_all(&mut fs, "/sub/inner.txt"), b"hello from the host\n");
    assert_eq!(read_all(&mut fs, "/sub/one"), b"x");
    assert_eq!(read_all(&mut fs, "/empty-dir/leaf"), pattern(5000, 4));
    assert_eq!(fs.resolve(b"/empty-dir/..").unwrap().ino, ext2::ROOT_INO);
    assert!(fs.resolve(b"/hello.txt").is_err() && fs.resolve(b"/target/deeper").is_err());
}

#[test]
fn a_full_disk_is_nospace_and_keeps_what_was_written() {
    assert!(have_mke2fs());
    let mut fs = Ext2::mount(MemDisk(fresh_image("full", 8))).unwrap();
    let mut f = fs.create(b"/fill", 0o644).unwrap();
    let chunk = pattern(256 << 10, 5);
    let mut total = 0u64;
    let err = loop {
        match fs.write(&mut f, total, &chunk) {
            Ok(n) if n == chunk.len() => total += n as u64,
            Ok(n) => total += n as u64,
            Err(e) => break e,
        }
        assert!(total < 64 << 20);
    };
    assert_eq!(err, FsError::NoSpace);
    let mut more = fs.create(b"/more", 0o644).unwrap();
    assert_eq!(fs.write(&mut more, 0, b"x").unwrap_err(), FsError::NoSpace);
    fsck_clean(&fs.dev.0, "full-fsck");
    let got = read_all(&mut fs, "/fill");
    assert_eq!(got.len() as u64, total);
    assert!(got.chunks(chunk.len()).all(|c| c == &chunk[..c.len()]));
    assert_eq!(read_all(&mut fs, "/hello.txt"), b"hello from the host\n");
}

/// `ext2::read_unlocked` (the library OS's read without the file system's lock, through the
/// buffer cache's lock-free hits) gives what the locked `Ext2::read` gives, on every file and
/// at offsets across direct, indirect and double-indirect blocks; it refuses (None) rather
/// than guess when a byte it needs is not available, when the inode is not a regular file, or
/// when a block pointer is corrupt; and it sees a file's new size and bytes after a rewrite.
#[test]
fn unlocked_read_matches_the_locked_read() {
    assert!(have_mke2fs());
    let d = scratch("unlocked");
    let files = make_tree(&d.join("root"));
    let img = d.join("disk.img");
    mkimage(&d.join("root"), &img, Some(16)).unwrap();
    let mut fs = Ext2::mount(MemDisk(std::fs::read(&img).unwrap())).unwrap();
    let geo = fs.geometry();
    for (p, want) in &files {
        let ino = fs.resolve(p.as_bytes()).unwrap();
        let bytes = fs.dev.0.clone();
        let mut get = |off: u64, buf: &mut [u8]| {
            let (s, e) = (off as usize, off as usize + buf.len());
            buf.copy_from_slice(&bytes[s..e]);
            true
        };
        for off in [0u64, 1, 4095, 4096, 40_000, 49_151, 49_152 + 7, 300_000, 4_300_000] {
            for len in [1usize, 100, 5000, 70_000] {
                let mut a = vec![0xAAu8; len];
                let mut b = vec![0x55u8; len];
                let n = fs.read(&ino, off, &mut a).unwrap();
                let (m, size) = ext2::read_unlocked(&geo, ino.ino, off, &mut b, &mut get).unwrap_or_else(|| panic!("{p} at {off}"));
                assert_eq!((m, size), (n, want.len() as u64), "{p} at {off}+{len}");
                assert!(a[..n] == b[..n], "{p} at {off}+{len}: bytes differ");
            }
        }
        // Refuses as soon as one needed byte range is refused (a cache miss), never guesses.
        if want.len() > 60_000 {
            let mut calls = 0;
            let mut refuse_third = |off: u64, buf: &mut [u8]| {
                calls += 1;
                if calls == 3 {
                    return false;
                }
                let (s, e) = (off as usize, off as usize + buf.len());
                buf.copy_from_slice(&bytes[s..e]);
                true
            };
            let mut b = vec![0u8; 60_000];
            assert!(ext2::read_unlocked(&geo, ino.ino, 0, &mut b, &mut refuse_third).is_none(), "{p}");
        }
    }
    // A directory is left to the locked path (which says IsDir).
    let root = fs.resolve(b"/sub").unwrap();
    let bytes = fs.dev.0.clone();
    let mut get = |off: u64, buf: &mut [u8]| {
        buf.copy_from_slice(&bytes[off as usize..off as usize + buf.len()]);
        true
    };
    assert!(ext2::read_unlocked(&geo, root.ino, 0, &mut [0u8; 8], &mut get).is_none());
    assert!(ext2::read_unlocked(&geo, 0, 0, &mut [0u8; 8], &mut get).is_none(), "inode 0");
    assert!(ext2::read_unlocked(&geo, u32::MAX, 0, &mut [0u8; 8], &mut get).is_none(), "inode past the count");
    // A corrupt indirect pointer: refused, no panic.
    let ind = fs.resolve(b"/indirect.bin").unwrap();
    let (blk12, bs) = (ind.block[12] as usize, geo.bs as usize);
    let mut bad = fs.dev.0.clone();
    bad[blk12 * bs..blk12 * bs + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut get_bad = |off: u64, buf: &mut [u8]| {
        buf.copy_from_slice(&bad[off as usize..off as usize + buf.len()]);
        true
    };
    let mut b = vec![0u8; 10];
    assert!(ext2::read_unlocked(&geo, ind.ino, 12 * 4096, &mut b, &mut get_bad).is_none());
    // Rewritten: shorter, then new bytes; the unlocked read sees the new size and bytes.
    let mut ino = fs.resolve(b"/direct.bin").unwrap();
    fs.truncate(&mut ino, 10).unwrap();
    fs.write(&mut ino, 0, b"NEW BYTES!").unwrap();
    let bytes = fs.dev.0.clone();
    let mut get = |off: u64, buf: &mut [u8]| {
        buf.copy_from_slice(&bytes[off as usize..off as usize + buf.len()]);
        true
    };
    let mut b = vec![0u8; 100];
    assert_eq!(ext2::read_unlocked(&geo, ino.ino, 0, &mut b, &mut get), Some((10, 10)));
    assert_eq!(&b[..10], b"NEW BYTES!");
    assert_eq!(ext2::read_unlocked(&geo, ino.ino, 10, &mut b, &mut get), Some((0, 10)), "at the end");
    // A sparse file: the hole reads as zeros.
    let mut sp = fs.create(b"/sparse", 0o644).unwrap();
    fs.write(&mut sp, 5 * 4096 + 3, b"tail").unwrap();
    let bytes = fs.dev.0.clone();
    let mut get = |off: u64, buf: &mut [u8]| {
        buf.copy_from_slice(&bytes[off as usize..off as usize + buf.len()]);
        true
    };
    let mut b = vec![0xFFu8; 5 * 4096 + 7];
    assert_eq!(ext2::read_unlocked(&geo, sp.ino, 0, &mut b, &mut get), Some((5 * 4096 + 7, 5 * 4096 + 7)));
    assert!(b[..5 * 4096 + 3].iter().all(|&x| x == 0) && &b[5 * 4096 + 3..] == b"tail");
}

/// The "core" the per-core reserves of `reserves_*` tests draw from (`Ext2::reserve_core`).
static RESERVE_CORE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
fn reserve_core() -> usize {
    RESERVE_CORE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Per-core reserves of inodes and blocks (`ext2::Reserve`): two "cores" creating,
/// writing and unlinking files in their own directories, interleaved, draw from and give back
/// to their own reserves; the reserves hold inodes and blocks while they run, in different
/// inode-table blocks; `return_reserves` (what every sync does) leaves the exact counts of
/// before and an image `e2fsck -fn` calls clean, and without it e2fsck is not clean (the
/// test can fail: a reserve that leaked would show here).
#[test]
fn reserves_per_core_leave_exact_counts_after_a_sync() {
    use std::sync::atomic::Ordering::Relaxed;
    assert!(have_mke2fs());
    let mut fs = Ext2::mount(MemDisk(fresh_image("reserves", 16))).unwrap();
    fs.mkdir(b"/c0", 0o755).unwrap();
    fs.mkdir(b"/c1", 0o755).unwrap();
    let before = fs.usage();
    fs.reserve_core = Some(reserve_core);
    let mut kept = Vec::new();
    for round in 0..200u32 {
        for c in 0..2usize {
            RESERVE_CORE.store(c, Relaxed);
            let p = if round % 5 == 4 { format!("/c{c}/keep{round}") } else { format!("/c{c}/f{}", round % 7) };
            let mut f = fs.create(p.as_bytes(), 0o644).unwrap();
            let data = pattern(1 + (round as usize * 977) % 60_000, round as u8);
            assert_eq!(fs.write(&mut f, 0, &data).unwrap(), data.len());
            if round % 5 == 4 {
                kept.push((p, data));
            } else {
                fs.unlink(p.as_bytes()).unwrap();
            }
        }
    }
    let (ri, rb) = fs.reserved();
    assert!(ri > 0 && rb > 0, "the reserves were used: {ri} inodes, {rb} blocks");
    // The two cores' files lie in different inode-table blocks.
    let per_block = fs.bs / fs.sb.inode_size as u64;
    RESERVE_CORE.store(0, Relaxed);
    let a = fs.create(b"/c0/probe", 0o644).unwrap().ino;
    RESERVE_CORE.store(1, Relaxed);
    let b = fs.create(b"/c1/probe", 0o644).unwrap().ino;
    assert_ne!((a as u64 - 1) / per_block, (b as u64 - 1) / per_block, "inodes {a} and {b}");
    fs.unlink(b"/c0/probe").unwrap();
    fs.unlink(b"/c1/probe").unwrap();
    // A double free into the core's own reserve is refused (`Corrupt`), and the reserve
    // keeps one copy.
    let (c, blk) = fs.reserves_first_block().unwrap();
    RESERVE_CORE.store(c, Relaxed);
    let held = fs.reserved();
    assert!(matches!(fs.free_block(blk), Err(FsError::Corrupt(_))));
    assert_eq!(fs.reserved(), held);
    // Without giving the reserves back the bitmaps say more is used than is: not clean.
    let d = scratch("reserves-unreturned");
    std::fs::write(d.join("x.img"), &fs.dev.0).unwrap();
    let out = Command::new(tool("e2fsck")).arg("-fn").arg(d.join("x.img")).output().unwrap();
    assert!(!out.status.success(), "e2fsck -fn should find the reserved items unreferenced");
    fs.return_reserves().unwrap();
    assert_eq!(fs.reserved(), (0, 0));
    let kept_inodes = kept.len() as u64;
    let kept_blocks: u64 = kept.iter().map(|(p, _)| fs.resolve(p.as_bytes()).unwrap().blocks512 as u64 / (fs.bs / 512)).sum();
    let after = fs.usage();
    assert_eq!(after.2 + kept_inodes, before.2, "free inodes");
    assert_eq!(after.0 + kept_blocks, before.0, "free blocks");
    fsck_clean(&fs.dev.0, "reserves-fsck");
    for (p, data) in &kept {
        assert_eq!(&read_all(&mut fs, p), data, "{p}");
    }
}

/// A disk filled by one core while another core's reserve holds free blocks: the filling core
/// gets them (the reserves go back to the bitmaps before `NoSpace`), and the image stays clean.
#[test]
fn reserves_do_not_cause_a_false_nospace() {
    use std::sync::atomic::Ordering::Relaxed;
    assert!(have_mke2fs());
    let mut fs = Ext2::mount(MemDisk(fresh_image("reserves-full", 8))).unwrap();
    fs.reserve_core = Some(reserve_core);
    RESERVE_CORE.store(3, Relaxed);
    let mut f3 = fs.create(b"/core3", 0o644).unwrap();
    fs.write(&mut f3, 0, b"x").unwrap();
    let held = fs.reserved().1;
    assert!(held > 0);
    RESERVE_CORE.store(2, Relaxed);
    let mut f = fs.create(b"/fill", 0o644).unwrap();
    let chunk = pattern(64 << 10, 5);
    let mut total = 0u64;
    loop {
        match fs.write(&mut f, total, &chunk) {
            Ok(n) => total += n as u64,
            Err(e) => {
                assert_eq!(e, FsError::NoSpace);
                break;
            }
        }
        assert!(total < 64 << 20);
    }
    fs.return_reserves().unwrap();
    // Everything free was used: only the file's last partial reserve batch could be left,
    // and that went back; nothing is left in a reserve or free.
    assert_eq!(fs.usage().0, 0, "free blocks after the disk filled");
    fsck_clean(&fs.dev.0, "reserves-full-fsck");
    assert_eq!(read_all(&mut fs, "/core3"), b"x");
}

/// The block group a block lies in.
fn group_of_block<D: Disk>(fs: &Ext2<D>, b: u64) -> u64 {
    (b - fs.sb.first_data_block as u64) / fs.sb.blocks_per_group as u64
}

/// The groups that hold a file's data blocks (holes skipped).
fn groups_of_file<D: Disk>(fs: &mut Ext2<D>, path: &str) -> std::collections::BTreeSet<u64> {
    let ino = fs.resolve(path.as_bytes()).unwrap();
    let mut g = std::collections::BTreeSet::new();
    for lblk in 0..ino.size.div_ceil(fs.bs) {
        let b = fs.bmap(&ino, lblk).unwrap();
        if b != 0 {
            g.insert(group_of_block(fs, b));
        }
    }
    g
}

/// Images of several block groups (4 KiB blocks in groups of 4 MiB, and 1 KiB blocks in
/// groups of 2 MiB, where the superblock is block 1 and every group's first block is odd):
/// `mke2fs`'s files spanning groups read back; our writes that must go past group 0 (a
/// file larger than a group, more files than group 0 has inodes, a directory of them) land
/// there, `e2fsck -fn` finds the image clean, and a fresh mount reads every byte back; then
/// everything is removed and the free counts are what they were. Catches: a block or inode
/// number computed from the group without `first_data_block` or with the wrong group size,
/// a group's descriptor written to the wrong slot, a bitmap of one group updated for
/// another, a backup superblock or descriptor table (groups 1, 3, 5, 7, 9) allocated.
#[test]
fn multi_group_images_read_and_write_past_group_0() {
    assert!(have_mke2fs());
    for (name, layout, mib, big) in [
        ("groups-4k", Layout { block_size: 4096, blocks_per_group: Some(1024), inodes: Some(512) }, 24u64, 5_000_000usize),
        ("groups-1k", Layout { block_size: 1024, blocks_per_group: Some(2048), inodes: Some(384) }, 24, 2_500_000),
    ] {
        let d = scratch(name);
        let root = d.join("root");
        let files = make_tree(&root);
        // A file of mke2fs's own that spans groups.
        let spanning = pattern(big, 13);
        std::fs::write(root.join("spanning.bin"), &spanning).unwrap();
        let img = d.join("disk.img");
        mkimage_with(&root, &img, Some(mib), layout).unwrap();
        let mut fs = Ext2::mount(MemDisk(std::fs::read(&img).unwrap())).unwrap();
        let ngroups = fs.groups.len();
        assert!(ngroups >= 6, "{name}: {ngroups} groups");
        assert_eq!(fs.bs, layout.block_size as u64);
        for (p, want) in &files {
            assert!(&read_all(&mut fs, p) == want, "{name}: {p}");
        }
        assert!(read_all(&mut fs, "/spanning.bin") == spanning, "{name}: spanning.bin");
        assert!(groups_of_file(&mut fs, "/spanning.bin").len() >= 2, "{name}: mke2fs put spanning.bin in one group");
        let before = fs.usage();
        // A file larger than a group, written in odd pieces.
        let far = pattern(big, 14);
        let mut f = fs.create(b"/far.bin", 0o644).unwrap();
        let mut off = 0;
        for chunk in far.chunks(9_999) {
            assert_eq!(fs.write(&mut f, off, chunk).unwrap(), chunk.len());
            off += chunk.len() as u64;
        }
        let far_groups = groups_of_file(&mut fs, "/far.bin");
        assert!(far_groups.len() >= 2 && far_groups.iter().any(|&g| g > 0), "{name}: far.bin in groups {far_groups:?}");
        // More files than group 0 has inodes: later ones are numbered in later groups.
        let ipg = fs.sb.inodes_per_group;
        fs.mkdir(b"/many", 0o755).unwrap();
        let mut inos = Vec::new();
        for i in 0..ipg + 10 {
            let p = format!("/many/f{i}");
            let mut ino = fs.create(p.as_bytes(), 0o644).unwrap();
            fs.write(&mut ino, 0, p.as_bytes()).unwrap();
            inos.push(ino.ino);
        }
        let past0 = inos.iter().filter(|&&n| (n - 1) / ipg > 0).count();
        assert!(past0 >= 10, "{name}: {past0} of {} inodes past group 0 ({ipg} per group)", inos.len());
        fsck_clean(&fs.dev.0, &format!("{name}-fsck"));
        // A fresh mount reads back what went past group 0.
        let mut fs = Ext2::mount(MemDisk(fs.dev.0.clone())).unwrap();
        assert!(read_all(&mut fs, "/far.bin") == far, "{name}: far.bin on a fresh mount");
        for i in 0..ipg + 10 {
            let p = format!("/many/f{i}");
            assert_eq!(read_all(&mut fs, &p), p.as_bytes(), "{name}");
        }
        // Removing it all gives every block and inode back, in every group.
        fs.unlink(b"/far.bin").unwrap();
        for i in 0..ipg + 10 {
            fs.unlink(format!("/many/f{i}").as_bytes()).unwrap();
        }
        fs.rmdir(b"/many").unwrap();
        assert_eq!(fs.usage(), before, "{name}: free counts after removing everything");
        fsck_clean(&fs.dev.0, &format!("{name}-fsck-2"));
    }
}

/// Triple-indirect blocks (with 1 KiB blocks, from byte (12 + 256 + 65 536) KiB, about 64 MiB,
/// on): sparse files on a small image. `mke2fs -d` copies a host file with data past the
/// triple-indirect start (holes kept), our reader gives its bytes; our writer writes across
/// the double/triple boundary, in two triple-indirect subtrees and at the last block an
/// ext2 file can have, `e2fsck -fn` finds the image clean and a fresh mount reads it back;
/// truncating below the boundary frees the triple-indirect tree (clean again, and the free
/// counts are back). Catches: an off-by-one at the boundary, the triple-indirect index
/// computed with the double-indirect's base, an indirect block not zeroed (stale pointers
/// e2fsck would see), a truncate that leaves the tree's blocks allocated.
#[test]
fn triple_indirect_files_on_1k_blocks() {
    assert!(have_mke2fs());
    const K: u64 = 1024;
    let p = K / 4;
    let triple_start = (12 + p + p * p) * K;
    let d = scratch("triple");
    let root = d.join("root");
    std::fs::create_dir_all(&root).unwrap();
    // The host's sparse file: 4 KiB at 0, 5 000 bytes across the triple-indirect start,
    // 3 000 bytes 20 MiB later (another double-indirect child of the triple block).
    let host_parts: [(u64, Vec<u8>); 3] = [(0, pattern(4096, 21)), (triple_start - 2000, pattern(5000, 22)), (triple_start + (20 << 20), pattern(3000, 23))];
    {
        let mut f = File::create(root.join("sparse-host.bin")).unwrap();
        for (off, data) in &host_parts {
            f.seek(SeekFrom::Start(*off)).unwrap();
            f.write_all(data).unwrap();
        }
    }
    let img = d.join("disk.img");
    mkimage_with(&root, &img, Some(16), Layout { block_size: 1024, blocks_per_group: None, inodes: None }).unwrap();
    assert!(std::fs::metadata(&img).unwrap().len() == 16 << 20, "the image stays small");
    let mut fs = Ext2::mount(MemDisk(std::fs::read(&img).unwrap())).unwrap();
    assert_eq!(fs.bs, K);
    let ino = fs.resolve(b"/sparse-host.bin").unwrap();
    assert_eq!(ino.size, triple_start + (20 << 20) + 3000);
    assert!(ino.block[14] != 0, "mke2fs made a triple-indirect block");
    for (off, want) in &host_parts {
        let mut got = vec![0xEEu8; want.len() + 100];
        let n = fs.read(&ino, *off, &mut got).unwrap();
        assert!(n >= want.len() && got[..want.len()] == want[..], "host part at {off}");
    }
    let mut hole = vec![0xEEu8; 4096];
    fs.read(&ino, triple_start + (10 << 20), &mut hole).unwrap();
    assert!(hole.iter().all(|&b| b == 0), "a hole in the triple-indirect range reads as zeros");
    let before = fs.usage();
    // Our writes: across the boundary, in a second subtree, and the last block.
    let last_block = 12 + p + p * p + p * p * p - 1;
    let ours: [(u64, Vec<u8>); 3] = [(triple_start - 3000, pattern(7000, 31)), (triple_start + (40 << 20) + 17, pattern(2500, 32)), (last_block * K, pattern(K as usize, 33))];
    let mut f = fs.create(b"/sparse-ours.bin", 0o644).unwrap();
    for (off, data) in &ours {
        assert_eq!(fs.write(&mut f, *off, data).unwrap(), data.len(), "write at {off}");
    }
    assert_eq!(fs.write(&mut f, (last_block + 1) * K, b"x").map(|_| ()).unwrap_err(), FsError::InvalidArgument, "past the last block an inode can map");
    assert!(f.block[14] != 0);
    fsck_clean(&fs.dev.0, "triple-fsck");
    let mut fs = Ext2::mount(MemDisk(fs.dev.0.clone())).unwrap();
    let f = fs.resolve(b"/sparse-ours.bin").unwrap();
    assert_eq!(f.size, (last_block + 1) * K);
    for (off, want) in &ours {
        let mut got = vec![0u8; want.len()];
        assert_eq!(fs.read(&f, *off, &mut got).unwrap(), want.len());
        assert!(got == *want, "ours at {off}");
    }
    let mut z = vec![0xEEu8; 3000];
    fs.read(&f, triple_start + (30 << 20), &mut z).unwrap();
    assert!(z.iter().all(|&b| b == 0));
    // Below the boundary again: the triple-indirect tree goes, the double-indirect part stays.
    let mut f = fs.resolve(b"/sparse-ours.bin").unwrap();
    fs.truncate(&mut f, triple_start - 1000).unwrap();
    assert_eq!(f.block[14], 0, "the triple-indirect block is freed");
    fsck_clean(&fs.dev.0, "triple-fsck-truncated");
    let mut got = vec![0u8; 2000];
    assert_eq!(fs.read(&f, triple_start - 3000, &mut got).unwrap(), 2000);
    assert!(got[..] == ours[0].1[..2000]);
    fs.unlink(b"/sparse-ours.bin").unwrap();
    assert_eq!(fs.usage(), before, "every block of the sparse file given back");
    fsck_clean(&fs.dev.0, "triple-fsck-removed");
}
