//! The words both front ends take (`metis` on this system, `metis-linux` on Linux) and the
//! lines they print, so the host parses one format:
//!
//! `APP [input=NAME] [size=BYTES] [seed=S] [workers=N] [parts=P] [layout=L] [print=0|1]
//! [insns=map|reduce|merge] [out=PATH] [prep=0|1] [tlbgrow=0|1]`
//!
//! `APP` is `wc`, `wri` or `wrmem` (wri over `size` bytes of generated text, seed `seed`).
//! `input=NAME` is a file of the boot image (ours) or a path (Linux). `workers` defaults to
//! every core, `parts` to 8 per worker, `print` to 1 (the output between `metis-begin` and
//! `metis-end`; with 0 only its digest), `insns` to no phase (the region markers of the
//! insncount plugin around that phase), `out` to none (with a path, the output is also written
//! to that file through the front end's [`OutFile`]; on ours a file of the attached disk),
//! `prep` to 1 (the end of map prepares the reducers' output pages; 0: reduce allocates and
//! faults in fresh pages, as in Corey's measurement: [`crate::run_with`]), `tlbgrow` to 0 (1:
//! the emulator knob [`crate::Tuning::tlb_grow`]).
//!
//! Printed: `metis-begin ...`, the output lines, `metis-end`, then `metis-digest fnv=...
//! lines=... bytes=...`, the [`crate::Report`] line (`metis-phases ...`) and `metis-done`, or
//! `metis-error msg=...` and `metis-done`.

use crate::{App, Digest, Error, Sink};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input<'a> {
    File(&'a str),
    Generated { size: u64, seed: u64 },
}

#[derive(Debug, Clone, Copy)]
pub struct Opts<'a> {
    pub app_name: &'a str,
    pub app: App,
    pub input: Input<'a>,
    pub workers: Option<usize>,
    pub parts: Option<usize>,
    pub layout: &'a str,
    pub print: bool,
    /// The phase the instruction-count markers enclose (`insns=map|reduce|merge`).
    pub marked: crate::Marked,
    /// `out=PATH`: the file the output is also written to.
    pub out: Option<&'a str>,
    /// `prep=0|1`: whether map's end prepares the reducers' output pages ([`crate::run_with`]).
    pub prep: bool,
    /// `tlbgrow=0|1`: [`crate::Tuning::tlb_grow`].
    pub tlb_grow: bool,
}

/// Where a front end writes the output file (`out=PATH`): opened before the run, so a path
/// that cannot be written fails before any phase.
pub trait OutFile {
    /// Append `bytes`. A failure is kept and reported by [`finish`](Self::finish); later
    /// writes are dropped.
    fn write(&mut self, bytes: &[u8]);
    /// Write back everything and close the file: its size, or the first error's words.
    fn finish(&mut self) -> Result<u64, &'static str>;
}

pub const BEGIN: &str = "metis-begin";
pub const END: &str = "metis-end";
pub const DONE: &str = "metis-done";

/// Parse a size: decimal with an optional k/m/g suffix (binary multiples).
pub fn parse_size(s: &str) -> Option<u64> {
    let (d, m) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    d.parse::<u64>().ok()?.checked_mul(m)
}

pub fn parse(args: &str) -> Result<Opts<'_>, &'static str> {
    let mut words = args.split_ascii_whitespace();
    let app_name = words.next().ok_or("missing application (wc, wri or wrmem)")?;
    let app = App::parse(app_name).ok_or("unknown application (wc, wri or wrmem)")?;
    let mut o = Opts { app_name, app, input: Input::File(""), workers: None, parts: None, layout: "per-core", print: true, marked: crate::Marked::None, out: None, prep: true, tlb_grow: false };
    let (mut file, mut size, mut seed) = (None, 1u64 << 20, 1u64);
    for w in words {
        let (k, v) = w.split_once('=').ok_or("arguments are key=value")?;
        let num = || parse_size(v).ok_or("a number was expected");
        match k {
            "input" => file = Some(v),
            "size" => size = num()?,
            "seed" => seed = num()?,
            "workers" => o.workers = Some(num()? as usize),
            "parts" => o.parts = Some(num()? as usize),
            "layout" => o.layout = v,
            "print" => o.print = num()? != 0,
            "insns" => o.marked = crate::Marked::parse(v).ok_or("insns is map, reduce, merge or none")?,
            "out" if v.is_empty() => return Err("out= needs a path"),
            "out" => o.out = Some(v),
            "prep" => o.prep = num()? != 0,
            "tlbgrow" => o.tlb_grow = num()? != 0,
            _ => return Err("unknown key (input, size, seed, workers, parts, layout, print, insns, out, prep, tlbgrow)"),
        }
    }
    o.input = match (app_name, file) {
        ("wrmem", None) => Input::Generated { size, seed },
        ("wrmem", Some(_)) => return Err("wrmem generates its input: give size= and seed=, not input="),
        (_, Some(f)) => Input::File(f),
        (_, None) => return Err("wc and wri need input=FILE"),
    };
    Ok(o)
}

/// A sink that digests everything and, if `print`, passes it on to `out` in blocks.
pub struct Tee<'a> {
    pub digest: Digest,
    pub print: bool,
    pub out: &'a mut dyn FnMut(&[u8]),
    /// The output file, if any (it gets every byte, printed or not).
    pub file: Option<&'a mut dyn OutFile>,
    buf: [u8; 4096],
    len: usize,
}

impl<'a> Tee<'a> {
    pub fn new(print: bool, out: &'a mut dyn FnMut(&[u8])) -> Tee<'a> {
        Tee { digest: Digest::default(), print, out, file: None, buf: [0; 4096], len: 0 }
    }
    pub fn flush(&mut self) {
        if self.len > 0 {
            (self.out)(&self.buf[..self.len]);
            self.len = 0;
        }
    }
}

impl Sink for Tee<'_> {
    fn write(&mut self, bytes: &[u8]) {
        self.digest.write(bytes);
        if let Some(f) = self.file.as_mut() {
            f.write(bytes);
        }
        if !self.print {
            return;
        }
        for chunk in bytes.chunks(self.buf.len()) {
            if self.len + chunk.len() > self.buf.len() {
                self.flush();
            }
            self.buf[self.len..self.len + chunk.len()].copy_from_slice(chunk);
            self.len += chunk.len();
        }
    }
}

/// Run and print everything after the input is in memory. `out` writes raw bytes to the
/// console; `file` is the opened `out=` file (`None` where the front end has none: then
/// `out=` is refused). Returns whether the run (and the file) succeeded.
pub fn run_and_print<E: crate::Env + ?Sized>(env: &E, o: &Opts, input: &[u8], out: &mut dyn FnMut(&[u8]), mut file: Option<&mut dyn OutFile>) -> bool {
    if o.out.is_some() && file.is_none() {
        print_error(out, &"out=: this system's front end writes no output file");
        return false;
    }
    let workers = o.workers.unwrap_or(env.cores()).min(crate::MAX_WORKERS);
    let parts = o.parts.unwrap_or(workers * 8);
    let mut line = alloc::format!("{BEGIN} app={} system={} layout={} workers={workers} parts={parts} input_bytes={}\n", o.app_name, env.name(), o.layout, input.len());
    out(line.as_bytes());
    let mut tee = Tee::new(o.print, out);
    tee.file = file.as_mut().map(|f| &mut **f as &mut dyn OutFile);
    let r = crate::run_with(env, o.app, input, workers, parts, o.marked, crate::Tuning { prep: o.prep, tlb_grow: o.tlb_grow }, &mut tee);
    tee.flush();
    let digest = tee.digest;
    line = alloc::format!("{END}\n");
    // The file is written back and closed whether the run succeeded or not (a failed run's
    // file holds what was written, which is nothing: the output comes after the phases).
    let written = file.map(|f| f.finish());
    let r = match (r, written) {
        (Ok(_), Some(Err(e))) => Err(crate::Error::Output(e)),
        (r, _) => r,
    };
    match &r {
        Ok(rep) => {
            line += &alloc::format!("metis-digest {digest}\n{rep}\n");
            if let (Some(path), Some(Ok(bytes))) = (o.out, written) {
                line += &alloc::format!("metis-file path={path} bytes={bytes}\n");
            }
            // The share-nothing loop in the same boot, same workers (docs/bench.md): divides
            // out how fast the host ran this boot.
            if let Some((ops, ticks)) = env.calibration(workers) {
                let ns = (ticks as u128 * 1_000_000_000 / env.ticks_per_sec().max(1) as u128) as u64;
                line += &alloc::format!("metis-calib workers={workers} ops={ops} ns={ns}\n");
            }
            line += &alloc::format!("{DONE}\n");
        }
        Err(e) => line += &alloc::format!("metis-error msg={e}\n{DONE}\n"),
    }
    out(line.as_bytes());
    r.is_ok()
}

/// An error before the run (bad words, input that cannot be had), printed the same way.
pub fn print_error(out: &mut dyn FnMut(&[u8]), e: &dyn core::fmt::Display) {
    out(alloc::format!("metis-error msg={e}\n{DONE}\n").as_bytes());
}

impl From<&'static str> for Error {
    fn from(s: &'static str) -> Error {
        Error::Param(s)
    }
}
