//! Standard output and error. Under `cargo xtask exec` (framed) each write goes to the
//! serial console as one record the host decodes: `\x1e` `O` (output) or `E` (error), the
//! bytes in hexadecimal, `\n` — so the two streams stay apart and byte-exact on one serial
//! line shared with the kernel's messages. Otherwise the bytes go to the console as they are.

const HEX: &[u8; 16] = b"0123456789abcdef";
/// Payload bytes per record.
const CHUNK: usize = 1024;

pub fn write(fd: u32, bytes: &[u8], framed: bool) {
    if !framed {
        crate::console::write_all(bytes);
        return;
    }
    let mut rec = alloc::vec::Vec::with_capacity(3 + 2 * CHUNK);
    for c in bytes.chunks(CHUNK) {
        rec.clear();
        rec.push(0x1e);
        rec.push(if fd == 2 { b'E' } else { b'O' });
        for &b in c {
            rec.push(HEX[usize::from(b >> 4)]);
            rec.push(HEX[usize::from(b & 15)]);
        }
        rec.push(b'\n');
        crate::console::write_all(&rec);
    }
}
