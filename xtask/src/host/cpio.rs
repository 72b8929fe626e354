//! newc ("070701") cpio archives, the format of both boot modules: this kernel's program
//! archive (`user::pack`) and the Linux guest's initramfs (linux.rs).

/// One file in a newc cpio archive.
pub enum CpioEntry {
    Dir(String),
    File { path: String, mode: u32, data: Vec<u8> },
    CharDev { path: String, major: u32, minor: u32 },
}

fn cpio_header(out: &mut Vec<u8>, ino: u32, mode: u32, size: usize, rmajor: u32, rminor: u32, name: &str) {
    let fields = [ino, mode, 0, 0, 1, 0, size as u32, 0, 0, rmajor, rminor, (name.len() + 1) as u32, 0];
    out.extend_from_slice(b"070701");
    for f in fields {
        out.extend_from_slice(format!("{f:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    while out.len() % 4 != 0 {
        out.push(0);
    }
}

/// Serialize entries as a newc ("070701") cpio archive, as the kernel's initramfs unpacker reads.
pub fn cpio_newc(entries: &[CpioEntry]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let ino = i as u32 + 1;
        match e {
            CpioEntry::Dir(p) => cpio_header(&mut out, ino, 0o040755, 0, 0, 0, p),
            CpioEntry::CharDev { path, major, minor } => cpio_header(&mut out, ino, 0o020600, 0, *major, *minor, path),
            CpioEntry::File { path, mode, data } => {
                cpio_header(&mut out, ino, 0o100000 | mode, data.len(), 0, 0, path);
                out.extend_from_slice(data);
                while out.len() % 4 != 0 {
                    out.push(0);
                }
            }
        }
    }
    cpio_header(&mut out, 0, 0, 0, 0, 0, "TRAILER!!!");
    out
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpio_layout() {
        let a = cpio_newc(&[CpioEntry::File { path: "init".into(), mode: 0o755, data: b"abc".to_vec() }]);
        assert!(a.starts_with(b"070701"));
        // header is 110 bytes, name "init\0" pads to 116, data 3 pads to 120, then the trailer
        assert_eq!(&a[110..114], b"init");
        assert_eq!(&a[116..119], b"abc");
        assert_eq!(&a[120..126], b"070701");
        assert_eq!(a.len() % 4, 0);
    }
}
