//! Host tests of ext2 allocation across block groups. The other host tests' images (4 KiB
//! blocks, under 128 MiB) have one group, so they cannot see an allocator that looks only in
//! its goal group, or a free that clears the bit in the wrong group's bitmap. These make an
//! image of four small groups (`mke2fs -g 1024 -N 256`: 1024 blocks and 64 inodes each) and
//! fill it, then empty it, checking every group's counts and `e2fsck -fn`.

use super::*;
use crate::host::ext2img::{ensure_e2fsprogs, tool};
use std::path::PathBuf;
use std::process::Command;

/// Blocks per group and inodes in the image (64 per group).
const BLOCKS_PER_GROUP: u64 = 1024;
const INODES: u64 = 256;

/// A 16 MiB image of four groups, with one small file in it.
fn four_group_image(name: &str) -> (PathBuf, Vec<u8>) {
    ensure_e2fsprogs().unwrap();
    let d = crate::host::env::target_dir().join("fs-tests").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("root")).unwrap();
    std::fs::write(d.join("root/hello.txt"), b"hello\n").unwrap();
    let img = d.join("disk.img");
    let f = File::create(&img).unwrap();
    f.set_len(16 << 20).unwrap();
    drop(f);
    let out = Command::new(tool("mke2fs"))
        .args(["-q", "-F", "-t", "ext2", "-b", "4096", "-g", &BLOCKS_PER_GROUP.to_string(), "-N", &INODES.to_string(), "-O", "^dir_index", "-E", "root_owner=0:0", "-d"])
        .arg(d.join("root"))
        .arg(&img)
        .output()
        .unwrap();
    assert!(out.status.success(), "mke2fs: {}", String::from_utf8_lossy(&out.stderr));
    let bytes = std::fs::read(&img).unwrap();
    (d, bytes)
}

fn fsck_clean(dir: &Path, v: &[u8], what: &str) {
    let img = dir.join(format!("{what}.img"));
    std::fs::write(&img, v).unwrap();
    let out = Command::new(tool("e2fsck")).arg("-fn").arg(&img).output().unwrap();
    assert!(out.status.success(), "e2fsck -fn after {what}:\n{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

/// Each group's (free blocks, free inodes, directories).
fn group_counts<D: Disk>(fs: &Ext2<D>) -> Vec<(u16, u16, u16)> {
    fs.groups.iter().map(|g| (g.free_blocks, g.free_inodes, g.used_dirs)).collect()
}

/// Each group's (free inodes, directories).
fn inode_counts<D: Disk>(fs: &Ext2<D>) -> Vec<(u16, u16)> {
    inode_counts_of(&group_counts(fs))
}

fn inode_counts_of(c: &[(u16, u16, u16)]) -> Vec<(u16, u16)> {
    c.iter().map(|&(_, i, d)| (i, d)).collect()
}

/// Catches: block allocation that looks only in its goal group (`NoSpace` with free blocks
/// in other groups), and a free of a block in group g > 0 that clears its bit in another
/// group's bitmap or counts it free in another group's descriptor. One file fills the disk:
/// every group ends with no free block and the file's bytes read back; unlinking it gives
/// every group exactly its free blocks of before; `e2fsck -fn` is clean after both.
#[test]
fn blocks_come_from_every_group_and_go_back_to_their_own() {
    let (dir, img) = four_group_image("groups-blocks");
    let mut fs = Ext2::mount(MemDisk(img)).unwrap();
    assert_eq!(fs.groups.len(), 4, "the image has four groups");
    let before = group_counts(&fs);
    let free_before = fs.usage().0;
    assert!(free_before > 3 * BLOCKS_PER_GROUP, "{free_before} free blocks");
    let mut f = fs.create(b"/fill", 0o644).unwrap();
    let chunk: Vec<u8> = (0..64 << 10).map(|i: u32| (i.wrapping_mul(2654435761) >> 7) as u8).collect();
    let mut total = 0u64;
    let err = loop {
        match fs.write(&mut f, total, &chunk) {
            Ok(n) if n > 0 => total += n as u64,
            Ok(_) => panic!("a write of 0 bytes before NoSpace"),
            Err(e) => break e,
        }
        assert!(total < 32 << 20, "wrote more than the disk holds");
    };
    assert_eq!(err, FsError::NoSpace);
    let after = group_counts(&fs);
    for (g, (b, _, _)) in after.iter().enumerate() {
        assert_eq!(*b, 0, "group {g} still has {b} free blocks after NoSpace (groups: {after:?})");
    }
    assert_eq!(fs.usage().0, 0, "free blocks after NoSpace");
    assert!(total > 3 * BLOCKS_PER_GROUP * 4096 - (1 << 20), "only {total} bytes written");
    fsck_clean(&dir, &fs.dev.0, "full");
    let ino = fs.resolve(b"/fill").unwrap();
    let mut back = vec![0u8; total as usize];
    assert_eq!(fs.read(&ino, 0, &mut back).unwrap(), back.len());
    assert!(back.chunks(chunk.len()).all(|c| c == &chunk[..c.len()]), "the file's bytes differ");
    fs.unlink(b"/fill").unwrap();
    assert_eq!(group_counts(&fs), before, "each group's counts after the unlink");
    assert_eq!(fs.usage().0, free_before);
    fsck_clean(&dir, &fs.dev.0, "emptied");
}

/// Catches: inode allocation that looks only in its goal group, and a free of an inode of
/// group g > 0 that clears its bit in another group's bitmap. Files are made until `NoSpace`:
/// exactly as many as there were free inodes, every group ends with none free; a directory in
/// each group's worth of files is counted in its own group; unlinking every file gives every
/// group its counts of before; `e2fsck -fn` is clean after both.
#[test]
fn inodes_come_from_every_group_and_go_back_to_their_own() {
    let (dir, img) = four_group_image("groups-inodes");
    let mut fs = Ext2::mount(MemDisk(img)).unwrap();
    assert_eq!(fs.groups.len(), 4, "the image has four groups");
    let before = group_counts(&fs);
    let free_before = fs.usage().2;
    assert!(free_before > 3 * INODES / 4, "{free_before} free inodes");
    let mut made = Vec::new();
    let err = loop {
        let name = format!("/f{}", made.len());
        match fs.create(name.as_bytes(), 0o644) {
            Ok(_) => made.push(name),
            Err(e) => break e,
        }
        assert!(made.len() as u64 <= INODES, "more files than inodes");
    };
    assert_eq!(err, FsError::NoSpace);
    assert_eq!(made.len() as u64, free_before, "files made before NoSpace");
    let full = group_counts(&fs);
    for (g, (_, i, _)) in full.iter().enumerate() {
        assert_eq!(*i, 0, "group {g} still has {i} free inodes (groups: {full:?})");
    }
    fsck_clean(&dir, &fs.dev.0, "inodes-full");
    // Unlink every file, then make directories: each is counted in the group its inode is in.
    for n in &made {
        fs.unlink(n.as_bytes()).unwrap();
    }
    // (The root directory's blocks stay: only the inode counts go back.)
    assert_eq!(inode_counts(&fs), inode_counts_of(&before), "each group's inode counts after unlinking every file");
    let ipg = INODES / 4;
    let mut dirs = Vec::new();
    for k in 0..free_before.min(2 * ipg + 4) {
        let name = format!("/d{k}");
        let d = fs.mkdir(name.as_bytes(), 0o755).unwrap();
        dirs.push((name, ((d.ino as u64 - 1) / ipg) as usize));
    }
    let with_dirs = group_counts(&fs);
    for (g, (_, _, used)) in with_dirs.iter().enumerate() {
        let made_here = dirs.iter().filter(|(_, dg)| *dg == g).count() as u16;
        assert_eq!(*used, before[g].2 + made_here, "group {g}'s directory count");
    }
    assert!(dirs.iter().any(|(_, g)| *g > 0), "no directory outside group 0");
    fsck_clean(&dir, &fs.dev.0, "dirs");
    for (n, _) in &dirs {
        fs.rmdir(n.as_bytes()).unwrap();
    }
    assert_eq!(inode_counts(&fs), inode_counts_of(&before), "each group's inode counts after removing the directories");
    fsck_clean(&dir, &fs.dev.0, "inodes-emptied");
}
