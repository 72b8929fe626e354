//! The files webd serves in a run or a benchmark: `COUNTxSIZE` (e.g. `8x1M`) files of
//! deterministic content, their sums (the host's own filesum, what every `/filesum/NAME`
//! answer is compared with), and the two ways the guest gets them: an ext2 image for ours
//! (`cargo xtask fs mkimage`'s `mkimage`) and `/files/NAME` in the Linux baseline's
//! initramfs.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The largest file set a run may ask for (every file is held in guest memory, and the Linux
/// baseline's initramfs is copied into a 512 MiB guest).
pub const MAX_TOTAL_BYTES: u64 = 128 << 20;
pub const MAX_COUNT: u64 = 1024;

/// `COUNT` files of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileSpec {
    pub count: u64,
    pub size: u64,
}

/// `64K`, `512K`, `1M`, `100` (bytes): K and M are KiB and MiB.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 1u64 << 10),
        Some((i, 'M' | 'm')) => (&t[..i], 1 << 20),
        _ => (t, 1),
    };
    let n: u64 = num.parse().map_err(|_| format!("`{s}` is not a size (e.g. 64K, 1M, 4096)"))?;
    n.checked_mul(mult).ok_or_else(|| format!("`{s}` is too large"))
}

/// The short form of a size: `64K`, `1M`, or the byte count.
pub fn size_name(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{}M", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{}K", bytes >> 10)
    } else {
        bytes.to_string()
    }
}

impl FileSpec {
    /// `8x1M`.
    pub fn parse(s: &str) -> Result<FileSpec, String> {
        let bad = |why: String| format!("--files: `{s}`: {why} (want COUNTxSIZE, e.g. 8x1M or 4x64K)");
        let (c, z) = s.split_once(['x', 'X']).ok_or_else(|| bad("no `x`".into()))?;
        let count: u64 = c.trim().parse().map_err(|_| bad(format!("`{c}` is not a count")))?;
        let size = parse_size(z).map_err(bad)?;
        let spec = FileSpec { count, size };
        spec.validate().map_err(bad)?;
        Ok(spec)
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.count == 0 || self.count > MAX_COUNT {
            return Err(format!("{} files is not in 1..={MAX_COUNT}", self.count));
        }
        if self.size == 0 {
            return Err("files of 0 bytes have nothing to sum".into());
        }
        if self.count.saturating_mul(self.size) > MAX_TOTAL_BYTES {
            return Err(format!("{} bytes in all is more than {} MiB", self.count.saturating_mul(self.size), MAX_TOTAL_BYTES >> 20));
        }
        Ok(())
    }

    /// `8x1M`: also the stem of every artifact made for this set.
    pub fn name(&self) -> String {
        format!("{}x{}", self.count, size_name(self.size))
    }

    /// File `i`'s name: `f00` .. (zero-padded to the count's width, so names sort in order).
    pub fn file_name(&self, i: u64) -> String {
        let width = (self.count - 1).max(1).to_string().len().max(2);
        format!("f{i:0width$}")
    }

    /// File `i`'s bytes: a splitmix64 stream seeded by the index and the size, so every
    /// file differs from every other and the same spec always gives the same bytes.
    pub fn content(&self, i: u64) -> Vec<u8> {
        let mut rng = crate::host::rng::Rng::new(0x5EED_F11E_0000_0000 ^ (i << 32) ^ self.size);
        let mut v = Vec::with_capacity(self.size as usize + 8);
        while (v.len() as u64) < self.size {
            v.extend_from_slice(&rng.next().to_le_bytes());
        }
        v.truncate(self.size as usize);
        v
    }

    /// Every file: (name, bytes).
    pub fn files(&self) -> Vec<(String, Vec<u8>)> {
        (0..self.count).map(|i| (self.file_name(i), self.content(i))).collect()
    }
}

/// The sum of a file's bytes as u64: what `/filesum/NAME` answers (webcore's `filesum`).
pub fn filesum(data: &[u8]) -> u64 {
    data.iter().map(|&b| b as u64).sum()
}

/// What the host expects of each file: its size and sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    pub size: Option<u64>,
    pub sum: u64,
}

/// The expected sums file (`--expect-sums`): one `NAME SIZE SUM` (or `NAME SUM`) per line;
/// blank lines and `#` comments are skipped.
pub fn parse_sums(text: &str) -> Result<BTreeMap<String, Expect>, String> {
    let mut m = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let w: Vec<&str> = l.split_whitespace().collect();
        let num = |s: &str| s.parse::<u64>().map_err(|_| format!("sums line {}: `{s}` is not a whole number", n + 1));
        let (name, e) = match w.as_slice() {
            [name, sum] => (*name, Expect { size: None, sum: num(sum)? }),
            [name, size, sum] => (*name, Expect { size: Some(num(size)?), sum: num(sum)? }),
            _ => return Err(format!("sums line {}: `{l}` is not `NAME SIZE SUM`", n + 1)),
        };
        let name = name.trim_start_matches('/').to_string();
        if m.insert(name.clone(), e).is_some() {
            return Err(format!("sums line {}: `{name}` is listed twice", n + 1));
        }
    }
    if m.is_empty() {
        return Err("the sums file names no file".into());
    }
    Ok(m)
}

pub fn read_sums(path: &Path) -> Result<BTreeMap<String, Expect>, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("--expect-sums: {}: {e}", path.display()))?;
    parse_sums(&text).map_err(|e| format!("--expect-sums: {}: {e}", path.display()))
}

/// Where the artifacts of one file set live: `target/webd/`.
pub fn work_dir() -> PathBuf {
    crate::host::env::target_dir().join("webd")
}

/// A file set made on the host: its directory of files and its sums file.
#[derive(Debug, Clone)]
pub struct Made {
    pub spec: FileSpec,
    pub dir: PathBuf,
    pub sums_path: PathBuf,
    pub sums: BTreeMap<String, Expect>,
}

/// Write the files of `spec` into `target/webd/files-SPEC/` (again only if a file is not
/// what it must be) and their sums into `target/webd/files-SPEC.sums`.
pub fn make(spec: &FileSpec) -> Result<Made, String> {
    let dir = work_dir().join(format!("files-{}", spec.name()));
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut sums = BTreeMap::new();
    let mut text = format!("# webd files {}: NAME SIZE SUM (the sum of the bytes as u64)\n", spec.name());
    for (name, data) in spec.files() {
        let p = dir.join(&name);
        if fs::read(&p).ok().as_deref() != Some(&data[..]) {
            fs::write(&p, &data).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
        }
        let e = Expect { size: Some(data.len() as u64), sum: filesum(&data) };
        text.push_str(&format!("{name} {} {}\n", data.len(), e.sum));
        sums.insert(name, e);
    }
    // Nothing else in the directory: the image and the initramfs take all of it.
    for entry in fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?.flatten() {
        if !sums.contains_key(&*entry.file_name().to_string_lossy()) {
            let _ = fs::remove_file(entry.path());
        }
    }
    let sums_path = work_dir().join(format!("files-{}.sums", spec.name()));
    fs::write(&sums_path, text).map_err(|e| format!("cannot write {}: {e}", sums_path.display()))?;
    Ok(Made { spec: *spec, dir, sums_path, sums })
}

/// The ext2 image of a made file set, for ours (`--disk`): `target/webd/webd-SPEC.img`.
pub fn image(m: &Made) -> Result<PathBuf, String> {
    let img = work_dir().join(format!("webd-{}.img", m.spec.name()));
    crate::host::ext2img::mkimage(&m.dir, &img, None)?;
    Ok(img)
}

/// The initramfs entries that put the files at `/files/NAME` for the Linux baseline.
pub fn initramfs_entries(m: &Made) -> Result<Vec<crate::host::cpio::CpioEntry>, String> {
    let mut e = vec![crate::host::cpio::CpioEntry::Dir("files".into())];
    for name in m.sums.keys() {
        let p = m.dir.join(name);
        let data = fs::read(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
        e.push(crate::host::cpio::CpioEntry::File { path: format!("files/{name}"), mode: 0o644, data });
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_name_the_problem() {
        assert_eq!(FileSpec::parse("8x1M").unwrap(), FileSpec { count: 8, size: 1 << 20 });
        assert_eq!(FileSpec::parse("4x64K").unwrap(), FileSpec { count: 4, size: 64 << 10 });
        assert_eq!(FileSpec::parse("3x100").unwrap(), FileSpec { count: 3, size: 100 });
        assert_eq!(FileSpec::parse("4x64K").unwrap().name(), "4x64K");
        assert_eq!(FileSpec::parse("2x512K").unwrap().name(), "2x512K");
        for bad in ["8", "x1M", "8x", "0x1M", "8x0", "ax1M", "8x1Q", "2000x1K", "200x1M", "8x99999999999999999999"] {
            let e = FileSpec::parse(bad).unwrap_err();
            assert!(e.starts_with("--files:"), "{bad}: {e}");
        }
    }

    #[test]
    fn content_is_deterministic_distinct_and_summed_as_u64() {
        let s = FileSpec { count: 3, size: 1001 };
        assert_eq!(s.content(1), s.content(1), "the same bytes every time");
        assert_ne!(s.content(0), s.content(1), "files differ");
        assert_eq!(s.content(2).len(), 1001);
        assert_eq!((s.file_name(0), s.file_name(2)), ("f00".to_string(), "f02".to_string()));
        assert_eq!(FileSpec { count: 200, size: 1 }.file_name(7), "f007");
        // A sum past u32: 32 MiB of 0xff.
        assert_eq!(filesum(&vec![0xff; 32 << 20]), 255 * (32 << 20));
        assert_eq!(filesum(b""), 0);
        assert_eq!(filesum(&[1, 2, 250]), 253);
    }

    #[test]
    fn sums_files_round_trip_and_refuse_junk() {
        let m = parse_sums("# c\nf00 10 500\n\n/f01 7\n").unwrap();
        assert_eq!(m["f00"], Expect { size: Some(10), sum: 500 });
        assert_eq!(m["f01"], Expect { size: None, sum: 7 }, "a leading / is dropped");
        assert!(parse_sums("f00 x").unwrap_err().contains("line 1"));
        assert!(parse_sums("f00 1 2 3").unwrap_err().contains("NAME SIZE SUM"));
        assert!(parse_sums("f00 1\nf00 2").unwrap_err().contains("twice"));
        assert!(parse_sums("# nothing\n").unwrap_err().contains("no file"));
    }
}
