//! ext2 images from a directory tree with e2fsprogs (`mke2fs -d`, installed on demand), and
//! their check (`e2fsck -fn`): the benchmark disk, webd's and Metis's trees, `cargo xtask fs`.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

use ext2::{Disk, FsError};
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn ensure_e2fsprogs() -> Result<(), String> {
    crate::host::env::ensure_tool("mke2fs", &["e2fsprogs"])?;
    crate::host::env::ensure_tool("e2fsck", &["e2fsprogs"])
}

/// Find an e2fsprogs program (in /sbin on Debian, which a user's PATH may lack).
pub fn tool(name: &str) -> PathBuf {
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

/// The layout `mke2fs` gives an image: block size, blocks per group (`-g`: a small value
/// gives many groups in a small image) and inode count (`-N`), each `mke2fs`'s default when
/// None.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub block_size: u32,
    pub blocks_per_group: Option<u32>,
    pub inodes: Option<u32>,
}

impl Layout {
    /// 4 KiB blocks, `mke2fs`'s groups (32 768 blocks: one group up to 128 MiB).
    pub const DEFAULT: Layout = Layout { block_size: 4096, blocks_per_group: None, inodes: None };
}

/// Make `img` (replacing it) holding `dir`'s files. Returns its size in MiB. The image is
/// plain ext2 with 4 KiB blocks and no htree directory index (`-O ^dir_index`: the library OS
/// reads and writes directories linearly).
pub fn mkimage(dir: &Path, img: &Path, size_mib: Option<u64>) -> Result<u64, String> {
    mkimage_with(dir, img, size_mib, Layout::DEFAULT)
}

/// [`mkimage`] with a chosen [`Layout`].
pub fn mkimage_with(dir: &Path, img: &Path, size_mib: Option<u64>, layout: Layout) -> Result<u64, String> {
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
    let mut cmd = Command::new(tool("mke2fs"));
    cmd.args(["-q", "-F", "-t", "ext2", "-b", &layout.block_size.to_string(), "-O", "^dir_index", "-E", "root_owner=0:0"]);
    if let Some(g) = layout.blocks_per_group {
        cmd.args(["-g", &g.to_string()]);
    }
    if let Some(n) = layout.inodes {
        cmd.args(["-N", &n.to_string()]);
    }
    let out = cmd.arg("-d").arg(dir).arg(img).output().map_err(|e| format!("cannot run mke2fs: {e}"))?;
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
