//! `cargo xtask fs`: ext2 images on the host (issue 16). `mkimage` and `check` wrap Debian's
//! e2fsprogs (`mke2fs -t ext2 -d DIR`, `e2fsck -fn`), installed on demand; `ls`, `cat` and
//! `get` read an image with the library OS's own ext2 reader (`user/libos/src/fs/ext2.rs`,
//! compiled here unchanged), so the host commands exercise the same code the guest runs, and
//! the host tests below run it against real `mke2fs` images, corrupted ones included.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../../../user/libos/src/fs/ext2.rs"]
#[allow(dead_code)]
pub mod ext2;
#[path = "../../../user/libos/src/fs/ext2_write.rs"]
#[allow(dead_code)]
pub mod ext2_write;
#[path = "../../../user/libos/src/fs/ext2_dir.rs"]
#[allow(dead_code)]
pub mod ext2_dir;

mod crash;
pub use crash::crash_test;

use ext2::{Disk, Ext2, FsError};

use crate::cli::tools::FsCommand;

/// The files of `fstest`'s image (shared with the guest test).
#[path = "../../../user/apps/src/common/fstest_files.rs"]
mod fstest_files;

/// `cargo xtask fs ...` (the command line: cli/tools.rs, [`FsCommand`]).
pub fn main(cmd: FsCommand) -> Result<(), crate::Failure> {
    crate::work(command(cmd))
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
            let root = crate::env::target_dir().join("fs-test").join("root");
            write_fstest_tree(&root)?;
            mkimage(&root, &img, Some(16)).map(|mib| println!("fs: {}: ext2, {mib} MiB, fstest's files", img.display()))
        }
        FsCommand::Test => {
            let kernel = crate::env::build_kernel()?;
            let initrd = crate::user::build_initrd()?;
            let t = ci_test(&kernel, &initrd)?;
            println!("{} passed, {} failed", t.passed, t.failed);
            if t.failed == 0 {
                Ok(())
            } else {
                Err("fs test failed".into())
            }
        }
        FsCommand::Crash { kills, seed } => {
            let kernel = crate::env::build_kernel()?;
            let initrd = crate::user::build_initrd()?;
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

pub fn ensure_e2fsprogs() -> Result<(), String> {
    crate::env::ensure_tool("mke2fs", &["e2fsprogs"])?;
    crate::env::ensure_tool("e2fsck", &["e2fsprogs"])
}

/// Find an e2fsprogs program (in /sbin on Debian, which a user's PATH may lack).
fn tool(name: &str) -> PathBuf {
    for d in ["/usr/sbin", "/sbin"] {
        let p = Path::new(d).join(name);
        if p.exists() {
            return p;
        }
    }
    PathBuf::from(name)
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => total += 4096 + dir_bytes(&e.path()),
                Ok(m) => total += m.len().next_multiple_of(4096),
                Err(_) => {}
            }
        }
    }
    total
}

/// Make `img` (replacing it) holding `dir`'s files. Returns its size in MiB. The image is
/// plain ext2 with 4 KiB blocks and no htree directory index (`-O ^dir_index`: the library OS
/// reads and writes directories linearly).
pub fn mkimage(dir: &Path, img: &Path, size_mib: Option<u64>) -> Result<u64, String> {
    if !dir.is_dir() {
        return Err(format!("fs mkimage: `{}` is not a directory", dir.display()));
    }
    ensure_e2fsprogs()?;
    let need = dir_bytes(dir);
    let mib = size_mib.unwrap_or_else(|| ((need * 2) >> 20).max(4) + 1);
    let _ = std::fs::remove_file(img);
    let f = File::create(img).map_err(|e| format!("{}: {e}", img.display()))?;
    f.set_len(mib << 20).map_err(|e| format!("{}: {e}", img.display()))?;
    drop(f);
    let out = Command::new(tool("mke2fs"))
        .args(["-q", "-F", "-t", "ext2", "-b", "4096", "-O", "^dir_index", "-E", "root_owner=0:0", "-d"])
        .arg(dir)
        .arg(img)
        .output()
        .map_err(|e| format!("cannot run mke2fs: {e}"))?;
    if !out.status.success() {
        return Err(format!("mke2fs failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(mib)
}

/// `e2fsck -fn`: Ok if the image is clean.
pub fn check(img: &Path) -> Result<(), String> {
    ensure_e2fsprogs()?;
    let out = Command::new(tool("e2fsck")).arg("-fn").arg(img).output().map_err(|e| format!("cannot run e2fsck: {e}"))?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    if out.status.success() {
        println!("fs: {}: clean", img.display());
        Ok(())
    } else {
        Err(format!("{}: e2fsck -fn found problems ({})", img.display(), out.status))
    }
}

/// An image file as a `Disk`.
pub struct ImageFile {
    f: File,
    len: u64,
}

impl ImageFile {
    pub fn open(img: &Path) -> Result<ImageFile, String> {
        let f = File::open(img).map_err(|e| format!("{}: {e}", img.display()))?;
        let len = f.metadata().map_err(|e| e.to_string())?.len();
        Ok(ImageFile { f, len })
    }
}

impl Disk for ImageFile {
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> ext2::Result<()> {
        if off.checked_add(buf.len() as u64).is_none_or(|e| e > self.len) {
            return Err(FsError::Io);
        }
        self.f.seek(SeekFrom::Start(off)).map_err(|_| FsError::Io)?;
        self.f.read_exact(buf).map_err(|_| FsError::Io)
    }
    fn write_at(&mut self, _off: u64, _buf: &[u8]) -> ext2::Result<()> {
        Err(FsError::ReadOnly)
    }
    fn size(&self) -> u64 {
        self.len
    }
}

/// An image in memory as a `Disk` (tests).
pub struct MemDisk(pub Vec<u8>);

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

/// Write `fstest`'s files (`user/apps/src/common/fstest_files.rs`) under `root`.
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

/// `cargo xtask test`'s file-system part: a fresh image of `fstest`'s files, `init=fstest` on
/// it, then `e2fsck -fn` (the test leaves the disk as it found it, so it must still be clean).
pub fn ci_test(kernel: &Path, initrd: &Path) -> Result<crate::TestTally, String> {
    let dir = crate::env::target_dir().join("fs-test");
    write_fstest_tree(&dir.join("root"))?;
    let img = dir.join("fstest.img");
    mkimage(&dir.join("root"), &img, Some(16))?;
    use crate::test::{user_boot, Expect, UserBoot};
    // Two requesting cores and a kernel core need 3 vCPUs: that test runs in the next boot.
    let two = Expect { may_skip: &["fs_blk_dedicated_two_cores"], must_pass: &[] };
    let mut t = user_boot(kernel, initrd, UserBoot { disk: Some(img.clone()), ..UserBoot::new(2, "init=fstest", two) })?;
    // The disk's Dedicated mode with two requesting cores and a kernel core (abi::blk).
    let three = Expect { may_skip: &[], must_pass: &["fs_blk_dedicated_two_cores", "fs_blk_dedicated_refuses_bad_entries", "fs_blk_dedicated_kernel_core_removed", "fs_blk_dedicated_given_up_write_not_replayed", "fs_blk_dedicated_mount"] };
    t.add(user_boot(kernel, initrd, UserBoot { disk: Some(img.clone()), ..UserBoot::new(3, "init=fstest -- fs_blk_dedicated", three) })?);
    match check(&img) {
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
    match check_guest_files(&img) {
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
    for path in fstest_files::GUEST_GONE {
        if read_file(img, path).is_ok() || mount(img)?.resolve(path.as_bytes()).is_ok() {
            return Err(format!("{path} is still there"));
        }
    }
    Ok(fstest_files::GUEST_FILES.len())
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod groups_tests;
