//! The file-system rows' disk: one ext2 image of the tree in bench/src/catalog.rs
//! (`FS_*`), made with `mke2fs -d` (`crate::host::ext2img::mkimage`), attached to every boot of a file
//! row on both systems. QEMU opens it with `snapshot=on`: each boot writes into a temporary
//! overlay, so every boot (ours and Linux, every vCPU count) starts from the very same bytes.
//! Linux mounts it as ext2 at /mnt (its disk and ext4 modules are packed into the initramfs:
//! [`linux_modules`]); ours' library OS mounts it itself.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use testdefs::bench_catalog::{fs_file_byte, uses_files, FS_FILE_BYTES, FS_MAX_WORKERS, FS_PRIVATE_DIR, FS_SHARED_FILE};

/// The modules Debian's kernel needs to see the disk and mount ext2 (their dependencies, such
/// as virtio, virtio_ring, jbd2, mbcache and crc16, follow from `depends=`); ext4 asks the crypto
/// layer for crc32c at mount time without naming a module, so `crc32c_generic` is listed.
pub const LINUX_MODULE_ROOTS: [&str; 4] = ["crc32c_generic", "virtio_pci", "virtio_blk", "ext4"];

/// Image size: the tree is 65 files of 64 KiB; the rest is room for the create rows.
const IMAGE_MIB: u64 = 32;

/// Write the tree under `root` (emptied first).
pub fn write_tree(root: &Path) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(root);
    let data: Vec<u8> = (0..FS_FILE_BYTES).map(fs_file_byte).collect();
    let mut files = vec![FS_SHARED_FILE.to_string()];
    files.extend((0..FS_MAX_WORKERS).map(|w| format!("{FS_PRIVATE_DIR}{w}/f")));
    for f in files {
        let p = root.join(f.trim_start_matches('/'));
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        std::fs::write(&p, &data).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    Ok(())
}

/// Build the image once per command (target/bench/fs-bench.img) and return its path.
pub fn image() -> Result<PathBuf, String> {
    static IMAGE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            let dir = crate::host::env::target_dir().join("bench");
            let tree = dir.join("fs-tree");
            let img = dir.join("fs-bench.img");
            write_tree(&tree)?;
            crate::host::ext2img::mkimage(&tree, &img, Some(IMAGE_MIB)).map_err(|e| format!("benchmark image: {e}"))?;
            crate::host::ext2img::check(&img).map_err(|e| format!("benchmark image does not check clean: {e}"))?;
            Ok(img)
        })
        .clone()
}

/// QEMU options attaching `img` as the guest's virtio-blk disk, writes kept out of the file.
pub fn disk_args(img: &Path) -> Vec<String> {
    vec![
        "-drive".into(),
        format!("file={},format=raw,if=none,id=fsbench,snapshot=on", img.display()),
        "-device".into(),
        "virtio-blk-pci,drive=fsbench".into(),
    ]
}

/// The disk for a run of `bench` (None for a row without files), or why it cannot be had.
pub fn disk_for(bench: &str) -> Option<Result<Vec<String>, String>> {
    uses_files(bench).then(|| image().map(|img| disk_args(&img)))
}

/// The initramfs entries with the disk's modules for kernel `k`, in load order.
pub fn linux_modules(k: &crate::guest::linux::LinuxKernel) -> Result<Vec<crate::host::cpio::CpioEntry>, String> {
    let mods = crate::guest::linux_net::modules_for(k, &LINUX_MODULE_ROOTS)?;
    Ok(crate::guest::linux_net::module_entries(mods))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches: the image's tree drifting from what the suite reads (a file short, the bytes
    /// not the catalog's, a worker without its directory).
    #[test]
    fn the_tree_has_every_file_the_rows_read() {
        let root = crate::host::env::target_dir().join("fsimage-tree-test");
        write_tree(&root).unwrap();
        let shared = std::fs::read(root.join("bench/shared/f")).unwrap();
        assert_eq!(shared.len(), FS_FILE_BYTES);
        assert!(shared.iter().enumerate().all(|(i, &b)| b == fs_file_byte(i)));
        assert_eq!(std::fs::read(root.join(format!("bench/c{}/f", FS_MAX_WORKERS - 1))).unwrap(), shared);
        assert!(!root.join(format!("bench/c{FS_MAX_WORKERS}")).exists());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn only_file_rows_get_a_disk_attached_without_writing_the_image() {
        assert!(disk_for("dupclose").is_none());
        let a = disk_args(Path::new("/x/img"));
        assert!(a[1].contains("snapshot=on") && a[1].contains("format=raw"), "{a:?}");
        assert_eq!(a[3], "virtio-blk-pci,drive=fsbench");
    }
}
