//! `cargo xtask fs`: ext2 images on the host (docs/fs.md). `mkimage` and `check` wrap Debian's
//! e2fsprogs (`mke2fs -t ext2 -d DIR`, `e2fsck -fn`), installed on demand; `ls`, `cat` and
//! `get` read an image with the library OS's own ext2 code (crate `ext2`, `crates/ext2`), so
//! the host commands exercise the same code the guest runs, and
//! the host tests below run it against real `mke2fs` images, corrupted ones included.

use std::io::Write;
use std::path::Path;

mod crash;
pub mod options;
pub use crash::crash_test;

use ext2::{Ext2, FsError};
#[cfg(test)]
use {ext2::Disk, std::fs::File, std::io::{Seek, SeekFrom}};

use crate::fs::options::FsCommand;
use crate::host::ext2img::{check, mkimage, mkimage_with, ImageFile, Layout};

/// The files of `fstest`'s image (shared with the guest test).
use testdefs::fstest_files;

/// `cargo xtask fs ...` (the command line: options.rs, [`FsCommand`]).
pub fn main(cmd: FsCommand) -> Result<(), crate::host::outcome::Failure> {
    crate::host::outcome::work(command(cmd))
}

fn command(cmd: FsCommand) -> Result<(), String> {
    match cmd {
        FsCommand::Mkimage { dir, img, size } => mkimage(&dir, &img, size).map(|mib| println!("fs: {}: ext2, {mib} MiB, from {}", img.display(), dir.display())),
        FsCommand::Check { img } => check(&img),
        FsCommand::Ls { img, path } => ls(&img, &path),
        FsCommand::Cat { img, path } => {
            let data = read_file(&img, &path)?;
            std::io::stdout().write_all(&data).map_err(|e| e.to_string())
        }
        FsCommand::Get { img, path, out } => {
            let data = read_file(&img, &path)?;
            std::fs::write(&out, data).map_err(|e| format!("{}: {e}", out.display()))
        }
        FsCommand::FstestImage { img } => {
            let root = crate::host::env::target_dir().join("fs-test").join("root");
            write_fstest_tree(&root)?;
            mkimage_with(&root, &img, Some(fstest_files::IMAGE_MIB), fstest_layout()).map(|mib| println!("fs: {}: ext2, {mib} MiB in groups of 4 MiB, fstest's files", img.display()))
        }
        // Its boots are the test runner's (test.rs, `fs_command`), which cli.rs calls.
        FsCommand::Test => unreachable!("cli.rs dispatches `fs test` to test::fs_command"),
        FsCommand::Crash { kills, seed } => {
            let kernel = crate::host::env::build_kernel()?;
            let initrd = crate::host::user::build_initrd()?;
            let t = crash_test(&kernel, &initrd, kills, seed)?;
            println!("{} passed, {} failed", t.passed, t.failed);
            if t.failed == 0 {
                Ok(())
            } else {
                Err("fs crash test failed".into())
            }
        }
    }
}



/// An image in memory as a `Disk` (tests).
#[cfg(test)]
pub struct MemDisk(pub Vec<u8>);

#[cfg(test)]
impl Disk for MemDisk {
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> ext2::Result<()> {
        let s = usize::try_from(off).map_err(|_| FsError::Io)?;
        let src = s.checked_add(buf.len()).and_then(|e| self.0.get(s..e)).ok_or(FsError::Io)?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn write_at(&mut self, off: u64, buf: &[u8]) -> ext2::Result<()> {
        let s = usize::try_from(off).map_err(|_| FsError::Io)?;
        let dst = s.checked_add(buf.len()).and_then(|e| self.0.get_mut(s..e)).ok_or(FsError::Io)?;
        dst.copy_from_slice(buf);
        Ok(())
    }
    fn size(&self) -> u64 {
        self.0.len() as u64
    }
}

fn fs_err(img: &Path, what: &str, e: FsError) -> String {
    format!("{}: {what}: {} ({})", img.display(), e.as_str(), e.kind())
}

fn mount(img: &Path) -> Result<Ext2<ImageFile>, String> {
    Ext2::mount(ImageFile::open(img)?).map_err(|e| fs_err(img, "mount", e))
}

fn ls(img: &Path, path: &str) -> Result<(), String> {
    let mut fs = mount(img)?;
    let dir = fs.resolve(path.as_bytes()).map_err(|e| fs_err(img, path, e))?;
    let mut entries = fs.read_dir(&dir).map_err(|e| fs_err(img, path, e))?;
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    for e in entries {
        let ino = fs.inode(e.ino).map_err(|er| fs_err(img, path, er))?;
        let kind = if ino.is_dir() { 'd' } else if ino.is_symlink() { 'l' } else { '-' };
        println!("{kind} {:>10} {}", ino.size, String::from_utf8_lossy(&e.name));
    }
    Ok(())
}

pub fn read_file(img: &Path, path: &str) -> Result<Vec<u8>, String> {
    let mut fs = mount(img)?;
    let ino = fs.resolve(path.as_bytes()).map_err(|e| fs_err(img, path, e))?;
    if ino.is_dir() {
        return Err(fs_err(img, path, FsError::IsDir));
    }
    let mut out = vec![0u8; ino.size.min(1 << 32) as usize];
    let n = fs.read(&ino, 0, &mut out).map_err(|e| fs_err(img, path, e))?;
    out.truncate(n);
    Ok(out)
}

/// Write `fstest`'s files (`testdefs::fstest_files`) under `root`.
pub fn write_fstest_tree(root: &Path) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(root);
    for (path, len, seed) in fstest_files::FILES {
        let full = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(full.parent().ok_or("no parent")?).map_err(|e| e.to_string())?;
        let data: Vec<u8> = (0..len).map(|i| fstest_files::byte(seed, i)).collect();
        std::fs::write(&full, data).map_err(|e| format!("{}: {e}", full.display()))?;
    }
    let long = String::from_utf8(vec![fstest_files::LONG_NAME_BYTE; fstest_files::LONG_NAME_LEN]).map_err(|e| e.to_string())?;
    std::fs::write(root.join("sub").join(long), b"long name\n").map_err(|e| e.to_string())
}

/// `fstest`'s image layout: 4 KiB blocks in groups of 4 MiB, so the image has several groups
/// and the guest's larger writes land past group 0.
fn fstest_layout() -> Layout {
    Layout { blocks_per_group: Some(fstest_files::IMAGE_BLOCKS_PER_GROUP), ..Layout::DEFAULT }
}

/// `cargo xtask test`'s file-system suite (test.rs boots `init=fstest` on the image between
/// the two halves here): a fresh image of `fstest`'s files (several block groups); after the
/// boots, `e2fsck -fn` (what the guest wrote must leave it clean), a short crash test, and the
/// guest's files read back on the host, some of them from groups past 0.
pub fn ci_image() -> Result<std::path::PathBuf, String> {
    let dir = crate::host::env::target_dir().join("fs-test");
    write_fstest_tree(&dir.join("root"))?;
    let img = dir.join("fstest.img");
    mkimage_with(&dir.join("root"), &img, Some(fstest_files::IMAGE_MIB), fstest_layout())?;
    Ok(img)
}

/// The checks of the suite after the guest's boots on `img` (see [`ci_image`]).
pub fn ci_after_boots(kernel: &Path, initrd: &Path, img: &Path) -> Result<crate::host::outcome::TestTally, String> {
    let mut t = crate::host::outcome::TestTally::default();
    match check(img) {
        Ok(()) => {
            println!("   e2fsck -fn after fstest: clean");
            t.passed += 1;
        }
        Err(e) => {
            println!("   FAILED: {e}");
            t.failed += 1;
        }
    }
    // A short crash test (`cargo xtask fs crash` runs 20 kills).
    t.add(crash_test(kernel, initrd, 2, 7)?);
    // What the guest wrote, read on the host with our reader.
    match check_guest_files(img) {
        Ok(n) => {
            println!("   the guest's {n} files read back on the host byte for byte; removed names gone");
            t.passed += 1;
        }
        Err(e) => {
            println!("   FAILED: files the guest wrote: {e}");
            t.failed += 1;
        }
    }
    Ok(t)
}

/// The files `fstest` writes (`GUEST_FILES`) are on the image with the right bytes, and the
/// names it removed (`GUEST_GONE`) are not.
pub fn check_guest_files(img: &Path) -> Result<usize, String> {
    for (path, len, seed) in fstest_files::GUEST_FILES {
        let got = read_file(img, path)?;
        if got.len() != len {
            return Err(format!("{path}: {} bytes, want {len}", got.len()));
        }
        if let Some(i) = (0..len).find(|&i| got[i] != fstest_files::byte(seed, i)) {
            return Err(format!("{path}: byte {i} differs"));
        }
    }
    // The file larger than a group has blocks in groups past 0 (a writer that only knew
    // group 0 would have failed to write it, or written over another group's metadata, which
    // e2fsck would have found).
    let mut fs = mount(img)?;
    if fs.groups.len() < 2 {
        return Err(format!("the image has {} block group(s); the test needs several", fs.groups.len()));
    }
    let far = fs.resolve(b"/guest/far.bin").map_err(|e| fs_err(img, "/guest/far.bin", e))?;
    let mut groups = std::collections::BTreeSet::new();
    for lblk in 0..far.size.div_ceil(fs.bs) {
        let b = fs.bmap(&far, lblk).map_err(|e| fs_err(img, "/guest/far.bin", e))?;
        if b == 0 {
            return Err(format!("/guest/far.bin: block {lblk} is a hole; the guest wrote every byte"));
        }
        groups.insert((b - fs.sb.first_data_block as u64) / fs.sb.blocks_per_group as u64);
    }
    if !groups.iter().any(|&g| g > 0) || groups.len() < 2 {
        return Err(format!("/guest/far.bin's blocks are in groups {groups:?}, want several, past 0"));
    }
    for path in fstest_files::GUEST_GONE {
        if read_file(img, path).is_ok() || mount(img)?.resolve(path.as_bytes()).is_ok() {
            return Err(format!("{path} is still there"));
        }
    }
    println!("   /guest/far.bin ({} bytes) lies in block groups {groups:?} of {}", far.size, fs.groups.len());
    Ok(fstest_files::GUEST_FILES.len())
}

#[cfg(test)]
mod tests;

/// The shell's file commands on a disk (`init=sh` with an image of a few files, commands on
/// its serial input): listing, printing, making, writing and appending, linking, renaming and
/// removing, each refusal one line (the shell keeps going), `df`, `sync`, `umount` and a
/// mount again on the next command, and `halt` with nothing leaked. Then on the host: `e2fsck
/// -fn` finds the image clean and our reader finds what the shell made, with its bytes, and
/// not what it removed. Catches: a command that does nothing (its file absent on the host),
/// `append` that truncates or `write` that appends, `mv`/`ln` that lose the data, an error
/// that ends the shell, `umount` that does not write back (the host sees an old image), a
/// remount that fails.
pub fn shell_files(kernel: &Path, initrd: &Path) -> Result<crate::host::outcome::TestTally, String> {
    use crate::host::qemu::boot_captured;
    use crate::host::vm::{BootMedium, VmConfig};
    println!("== the shell's file commands on a disk");
    let dir = crate::host::env::target_dir().join("fs-shell");
    let root = dir.join("root");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("sub")).map_err(|e| e.to_string())?;
    std::fs::write(root.join("hello.txt"), fstest_files::HELLO).map_err(|e| e.to_string())?;
    std::fs::write(root.join("sub/inner.txt"), b"inner\n").map_err(|e| e.to_string())?;
    let img = dir.join("shell.img");
    mkimage(&root, &img, Some(8))?;
    let cfg = VmConfig {
        smp: 2,
        mem_mib: 192,
        cmdline: "init=sh".into(),
        medium: Some(BootMedium::Kernel(kernel.to_path_buf())),
        initrd: Some(initrd.to_path_buf()),
        disk: Some(img.clone()),
        timeout: Some(std::time::Duration::from_secs(240)),
        ..Default::default()
    };
    // Blank lines first: input sent while the kernel boots can lose its first bytes.
    let commands = [
        "ls /",
        "cat /hello.txt",
        "mkdir /shdir /shdir/sub",
        "write /shdir/note one two three",
        "append /shdir/note four",
        "cat /shdir/note",
        "ln /shdir/note /shdir/hard",
        "ln -s note /shdir/soft",
        "mv /shdir/hard /shdir/sub/moved",
        "write /shdir/gone x",
        "rm /shdir/gone",
        "write /shdir/over first version",
        "write /shdir/over second",
        "cat /nosuch",
        "rmdir /shdir",
        "mkdir /hello.txt/x",
        "rm /sub",
        "mv /nosuch /x",
        "ls /shdir",
        "df",
        "sync",
        "umount",
        "cat /shdir/soft",
        "rmdir /sub",
        "halt",
    ];
    let input = format!("{}{}\n", "\n".repeat(16), commands.join("\n"));
    let out = boot_captured(&cfg, Some(&input), false)?;
    let s = out.serial.as_str();
    let listed = |name: &str| s.lines().any(|l| l.trim_end().ends_with(&format!(" {name}")) && (l.starts_with("d ") || l.starts_with("- ")));
    let checks: [(&str, bool); 14] = [
        ("ls / lists the image's files", listed("hello.txt") && listed("sub") && listed("lost+found")),
        ("cat prints a file", s.contains("hello from the host")),
        ("write then append, cat shows both", s.contains("one two three\nfour\n") || s.contains("one two three\r\nfour")),
        ("ls /shdir lists what was made", listed("note") && listed("soft") && s.lines().any(|l| l.starts_with("d ") && l.trim_end().ends_with(" sub"))),
        ("cat of a missing file: one line", s.contains("sh: cat /nosuch: no such file or directory")),
        ("rmdir of a non-empty directory refused", s.contains("sh: rmdir /shdir: directory not empty")),
        ("mkdir under a file refused", s.contains("sh: mkdir /hello.txt/x: not a directory")),
        ("rm of a directory refused", s.contains("sh: rm /sub: is a directory")),
        ("mv of a missing name refused", s.contains("sh: mv /nosuch /x: no such file or directory")),
        ("rmdir of a non-empty image directory refused after the remount", s.contains("sh: rmdir /sub: directory not empty")),
        ("df", s.contains("blocks: ") && s.contains(" KiB free; inodes: ")),
        ("after umount, the next command mounts again (cat through the symlink)", s.matches("one two three").count() >= 2),
        ("no disk error", !s.contains("sh: disk:")),
        ("halt: clean exit, no leak", s.contains("init: `sh` exited with code 0") && out.kernel_exit_ok() && !out.timed_out),
    ];
    let mut t = crate::host::outcome::TestTally::default();
    for (what, ok) in checks {
        if ok {
            t.passed += 1;
        } else {
            println!("   FAILED: shell files: {what}");
            t.failed += 1;
        }
    }
    // The image, on the host.
    let host = (|| -> Result<String, String> {
        check(&img)?;
        let note = read_file(&img, "/shdir/note")?;
        if note != b"one two three\nfour\n" {
            return Err(format!("/shdir/note is {:?}", String::from_utf8_lossy(&note)));
        }
        if read_file(&img, "/shdir/sub/moved")? != note {
            return Err("/shdir/sub/moved differs from /shdir/note".into());
        }
        if read_file(&img, "/shdir/over")? != b"second\n" {
            return Err(format!("/shdir/over is {:?}, want the second write only", String::from_utf8_lossy(&read_file(&img, "/shdir/over")?)));
        }
        let mut fs = mount(&img)?;
        let (a, b) = (fs.resolve(b"/shdir/soft").map_err(|e| fs_err(&img, "/shdir/soft", e))?, fs.resolve(b"/shdir/note").map_err(|e| fs_err(&img, "/shdir/note", e))?);
        if a.ino != b.ino || b.links != 2 {
            return Err(format!("/shdir/soft -> inode {}, /shdir/note is {} with {} links (want the same, 2)", a.ino, b.ino, b.links));
        }
        for gone in ["/shdir/gone", "/shdir/hard"] {
            if fs.resolve(gone.as_bytes()).is_ok() {
                return Err(format!("{gone} is still there"));
            }
        }
        Ok("e2fsck -fn clean; note, moved, over and the symlink as the shell left them; gone and hard removed".into())
    })();
    match host {
        Ok(w) => {
            println!("   shell files on the host: {w}");
            t.passed += 1;
        }
        Err(e) => {
            println!("   FAILED: shell files on the host: {e}");
            t.failed += 1;
        }
    }
    if t.failed > 0 {
        for l in out.serial.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev() {
            println!("   | {l}");
        }
    }
    println!("   shell files: {} passed, {} failed ({:.1} s)", t.passed, t.failed, out.elapsed.as_secs_f64());
    Ok(t)
}

#[cfg(test)]
mod groups_tests;
