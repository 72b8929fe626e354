//! The library against a straightforward reference (a BTreeMap over a byte scan), on edge
//! cases, at several worker and partition counts.

use std::collections::BTreeMap;
use std::string::{String, ToString};
use std::vec;
use std::vec::Vec;

use crate::host::HostEnv;
use crate::{run, App, Digest, Error};

/// The reference: words by a plain scan, lower-cased, in a BTreeMap (bytewise order).
fn reference(app: App, input: &[u8]) -> Vec<u8> {
    let mut m: BTreeMap<Vec<u8>, Vec<usize>> = BTreeMap::new();
    let mut i = 0;
    while i < input.len() {
        if input[i].is_ascii_alphabetic() {
            let s = i;
            while i < input.len() && input[i].is_ascii_alphabetic() {
                i += 1;
            }
            m.entry(input[s..i].to_ascii_lowercase()).or_default().push(s);
        } else {
            i += 1;
        }
    }
    let mut out = Vec::new();
    for (k, v) in m {
        out.extend_from_slice(&k);
        out.push(b'\t');
        let tail = match app {
            App::Wc => v.len().to_string(),
            App::Wri => v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(","),
        };
        out.extend_from_slice(tail.as_bytes());
        out.push(b'\n');
    }
    out
}

fn mr(app: App, input: &[u8], workers: usize, parts: usize) -> Result<Vec<u8>, Error> {
    // Big enough for every input here (the 3 MiB word's key is copied whole into one arena).
    let env = HostEnv::new(8, (16 << 20).max(input.len() * 16));
    let mut out = Vec::new();
    run(&env, app, input, workers, parts, &mut out).map(|_| out)
}

fn check(input: &[u8]) {
    for app in [App::Wc, App::Wri] {
        let want = reference(app, input);
        for (w, p) in [(1, 1), (1, 7), (2, 4), (3, 5), (4, 16), (8, 64)] {
            let got = mr(app, input, w, p).unwrap();
            assert!(got == want, "{app:?} workers={w} parts={p}: got\n{}\nwant\n{}", String::from_utf8_lossy(&got), String::from_utf8_lossy(&want));
        }
    }
}

/// The space `prep_reduce` makes present before reduce holds everything reduce allocates
/// (`table::reduce_bound`): on this system the reduce phase's zero soft faults rest on it.
/// A bound that forgot the joined offset arrays, the result entries or the padding would leave
/// `reduce_beyond_prep` above 0 here.
#[test]
fn reduce_allocates_only_inside_the_space_prepared_for_it() {
    let mut text = vec![0u8; 400_000];
    crate::gen::fill(3, &mut text);
    let mut rnd = vec![0u8; 100_000];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for b in rnd.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let inputs: [&[u8]; 4] = [&text, &rnd, b"a b a c a b x y z a", b"one"];
    for input in inputs {
        for app in [App::Wc, App::Wri] {
            for (w, p) in [(1, 1), (2, 4), (3, 5), (4, 16), (8, 64)] {
                let env = HostEnv::new(8, 64 << 20);
                let mut d = Digest::default();
                let r = run(&env, app, input, w, p, &mut d).unwrap();
                assert_eq!(r.reduce_beyond_prep, 0, "{app:?} workers={w} parts={p}: reduce allocated beyond the prepared space");
                assert!(r.reduce_arena_pages <= r.reduce_prep_pages, "{app:?} w={w} p={p}: {} new pages, {} prepared", r.reduce_arena_pages, r.reduce_prep_pages);
                if w > 1 && input.len() > 1000 {
                    assert!(r.reduce_arena_pages > 0, "the joined data takes new pages");
                }
            }
        }
    }
}

/// `prep == false` (`run_with`, the guests' `prep=0`: Corey's reduce, which allocates its
/// output fresh) gives the same output, prepares nothing, and all of reduce's allocation is
/// beyond the (empty) prepared space, so on the guests those pages are reduce's own faults.
/// An option that still prepared (or a `prep_end` left at 0, counting map's bytes too) fails
/// the counts here.
#[test]
fn unprepared_reduce_gives_the_same_output_and_allocates_fresh_pages() {
    let mut text = vec![0u8; 400_000];
    crate::gen::fill(5, &mut text);
    for app in [App::Wc, App::Wri] {
        let want = reference(app, &text);
        for (w, p) in [(1, 1), (2, 4), (3, 5), (8, 64)] {
            let env = HostEnv::new(8, 64 << 20);
            let mut out = Vec::new();
            let r = crate::run_with(&env, app, &text, w, p, crate::Marked::None, crate::Tuning { prep: false, tlb_grow: false }, &mut out).unwrap();
            assert!(out == want, "{app:?} workers={w} parts={p}: output differs without prep");
            assert_eq!(r.reduce_prep_pages, 0, "{app:?} w={w} p={p}: nothing is prepared");
            let reduce_bytes = r.reduce_beyond_prep;
            assert!(reduce_bytes > 0, "{app:?} w={w} p={p}: reduce allocates its output");
            // Every byte beyond the prepared end is reduce's own: at most its new pages' worth.
            assert!(reduce_bytes <= (r.reduce_arena_pages + w as u64) * 4096, "{app:?} w={w} p={p}: {reduce_bytes} bytes beyond prep for {} new pages", r.reduce_arena_pages);
            if w > 1 {
                assert!(r.reduce_arena_pages > 0, "the joined data takes new pages");
            }
        }
    }
}

/// `Tuning::tlb_grow`: every mapper calls `Env::tlb_grow` once per `TLB_GROW_WORDS` words it
/// mapped (one worker here, so words / TLB_GROW_WORDS calls), never without the option, and
/// the output is unchanged. A call per word, a missed call, or calls without the option fail.
#[test]
fn tlb_grow_calls_the_env_every_so_many_words_and_changes_nothing_else() {
    use core::sync::atomic::Ordering;
    let mut text = vec![0u8; 2_500_000];
    crate::gen::fill(7, &mut text);
    let want = reference(App::Wc, &text);
    for grow in [false, true] {
        let env = HostEnv::new(8, 64 << 20);
        let mut out = Vec::new();
        let r = crate::run_with(&env, App::Wc, &text, 1, 4, crate::Marked::None, crate::Tuning { prep: true, tlb_grow: grow }, &mut out).unwrap();
        assert!(out == want, "tlb_grow={grow}: output differs");
        let calls = env.tlb_grows.load(Ordering::Relaxed);
        let expect = if grow { r.words / crate::TLB_GROW_WORDS } else { 0 };
        assert!(expect > 0 || !grow, "the text is too short to test: {} words", r.words);
        assert_eq!(calls, expect, "tlb_grow={grow}: {} words", r.words);
    }
}

#[test]
fn small_texts_match_the_reference() {
    check(b"the quick brown Fox jumps over the lazy dog. THE end");
    check(b"a b a B A c");
    check(b"don't stop-me now 42times x9y");
}

#[test]
fn empty_and_wordless_inputs_give_empty_output() {
    check(b"");
    check(b"1234 5678 ,,, \n\n\t");
    assert!(mr(App::Wc, b"", 4, 8).unwrap().is_empty());
}

#[test]
fn binary_bytes_separate_words() {
    let bin: Vec<u8> = (0..20000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    check(&bin);
    // UTF-8 letters are not ASCII letters: "café" is "caf".
    check("café naïve Über".as_bytes());
}

#[test]
fn one_huge_word_is_one_key() {
    let mut big = vec![b'x'; 3 << 20];
    big[1000] = b'X';
    let want = reference(App::Wc, &big);
    assert_eq!(mr(App::Wc, &big, 4, 8).unwrap(), want);
    assert_eq!(mr(App::Wri, &big, 3, 8).unwrap(), b"".iter().copied().chain(vec![b'x'; 3 << 20]).chain(*b"\t0\n").collect::<Vec<u8>>());
}

#[test]
fn words_across_split_boundaries_are_counted_once() {
    // Words of every length around every possible split point of small inputs.
    for len in 1..40 {
        let s: Vec<u8> = (0..len).map(|i| if i % 7 == 3 { b' ' } else { b'a' + (i % 3) as u8 }).collect();
        check(&s);
    }
    let s = crate::words::split(b"abcdef ghi", 1, 2);
    assert_eq!(s, (6, 10), "the split starting inside `abcdef` skips to its end");
}

#[test]
fn generated_text_matches_the_reference() {
    let mut text = vec![0u8; 300_000];
    crate::gen::fill(7, &mut text);
    check(&text);
    let mut again = vec![0u8; 300_000];
    crate::gen::fill(7, &mut again);
    assert_eq!(text, again, "the generator is deterministic");
    crate::gen::fill(8, &mut again);
    assert_ne!(text, again, "the seed matters");
}

#[test]
fn too_little_memory_is_a_clear_error_naming_what_fits() {
    let mut text = vec![0u8; 4 << 20];
    crate::gen::fill(1, &mut text);
    let env = HostEnv::new(4, 2 << 20);
    let mut d = Digest::default();
    match run(&env, App::Wri, &text, 2, 8, &mut d) {
        Err(Error::NoMemory { fits, arena, .. }) => {
            assert_eq!(arena, 1 << 20);
            assert!(fits > 0 && fits < text.len(), "fits={fits}");
        }
        other => panic!("want NoMemory, got {other:?}"),
    }
    // Too small a budget to even start.
    let env = HostEnv::new(4, 1 << 20);
    assert!(matches!(run(&env, App::Wc, b"a", 4, 8, &mut d), Err(Error::InputTooLarge { .. })));
}

#[test]
fn bad_parameters_are_errors() {
    assert!(matches!(mr(App::Wc, b"a", 0, 1), Err(Error::Param(_))));
    assert!(matches!(mr(App::Wc, b"a", 9, 1), Err(Error::Param(_))));
    assert!(matches!(mr(App::Wc, b"a", 1, 0), Err(Error::Param(_))));
}

#[test]
fn digest_matches_the_bytes() {
    let out = mr(App::Wri, b"b a b", 2, 3).unwrap();
    assert_eq!(out, b"a\t2\nb\t0,4\n");
    let mut d = Digest::default();
    let env = HostEnv::new(2, 8 << 20);
    run(&env, App::Wri, b"b a b", 2, 3, &mut d).unwrap();
    assert_eq!(d, Digest::of(&out));
    assert_eq!((d.lines, d.bytes), (2, 10));
}

/// An `out=` file in memory; `fail_after` bytes accepted, then a write error.
struct MemFile {
    data: Vec<u8>,
    fail_after: usize,
    error: bool,
    finished: bool,
}

impl crate::cli::OutFile for MemFile {
    fn write(&mut self, bytes: &[u8]) {
        if self.data.len() + bytes.len() > self.fail_after {
            self.error = true;
        } else {
            self.data.extend_from_slice(bytes);
        }
    }
    fn finish(&mut self) -> Result<u64, &'static str> {
        self.finished = true;
        if self.error {
            Err("no space left on device")
        } else {
            Ok(self.data.len() as u64)
        }
    }
}

/// Catches: the output file missing bytes the console or digest got, a file never finished
/// (synced and closed), a write error reported as success, `out=` silently ignored by a
/// front end that has no file.
#[test]
fn out_file_gets_the_output_and_its_errors_fail_the_run() {
    let env = HostEnv::new(2, 64 << 20);
    let text = b"b a B c, a";
    let args = "wc input=x out=/r workers=2 print=0";
    let o = crate::cli::parse(args).unwrap();
    assert_eq!(o.out, Some("/r"));
    let mut console = Vec::new();
    let mut f = MemFile { data: Vec::new(), fail_after: usize::MAX, error: false, finished: false };
    assert!(crate::cli::run_and_print(&env, &o, text, &mut |b: &[u8]| console.extend_from_slice(b), Some(&mut f)));
    assert!(f.finished);
    assert_eq!(f.data, reference(App::Wc, text));
    let console = String::from_utf8(console).unwrap();
    assert!(console.contains("metis-file path=/r bytes=12\n"), "{console}");
    assert!(!console.contains("a\t2"), "print=0 sends no output to the console");

    let mut console = Vec::new();
    let mut f = MemFile { data: Vec::new(), fail_after: 4, error: false, finished: false };
    assert!(!crate::cli::run_and_print(&env, &o, text, &mut |b: &[u8]| console.extend_from_slice(b), Some(&mut f)));
    assert!(f.finished, "a failed file is still synced and closed");
    let console = String::from_utf8(console).unwrap();
    assert!(console.contains("metis-error msg=cannot write the output: no space left on device"), "{console}");
    assert!(!console.contains("metis-file"));

    let mut console = Vec::new();
    assert!(!crate::cli::run_and_print(&env, &o, text, &mut |b: &[u8]| console.extend_from_slice(b), None));
    assert!(String::from_utf8(console).unwrap().contains("metis-error"));
    assert!(crate::cli::parse("wc input=x out=").is_err());
}

/// Catches: an outgrown value array handed to a key of another size (overlapping arrays: a
/// key's offsets overwritten by another's), or never reused (the page footprint the free lists
/// exist to cut).
#[test]
fn outgrown_value_arrays_are_reused_only_at_their_size() {
    use crate::table::{Arena, Off};
    let mut mem = vec![0u64; 4096];
    // SAFETY: `mem` is zeroed, 32 KiB, used by nothing else while the arena lives.
    let mut a = unsafe { Arena::new(mem.as_mut_ptr() as *mut u8, mem.len() * 8) };
    let two: *mut Off = a.alloc_vals(2).unwrap();
    let four: *mut Off = a.alloc_vals(4).unwrap();
    a.free_vals(two, 2);
    let used = a.used();
    let eight = a.alloc_vals(8).unwrap();
    assert!(eight != two && a.used() > used, "an array of 2 must not serve 8");
    assert_eq!(a.alloc_vals(2).unwrap(), two, "a freed array of 2 serves the next 2");
    assert_ne!(a.alloc_vals(2).unwrap(), two, "and only once");
    a.free_vals(four, 4);
    a.free_vals(eight, 8);
    assert_eq!(a.alloc_vals(8).unwrap(), eight);
    assert_eq!(a.alloc_vals(4).unwrap(), four);
}

#[test]
fn key_order_is_the_byte_order() {
    // Lengths around the 8-byte step, shared prefixes, and bytes whose order differs when
    // read as signed or as little-endian words.
    let mut keys: Vec<Vec<u8>> = vec![Vec::new()];
    for base in [&b"abcdefghijklmnopq"[..], b"abcdefgh\xffjklmnopq", b"abcdefgi", b"\x00\x80\x7f\xff\x01abcdefghi"] {
        for n in 0..=base.len() {
            keys.push(base[..n].to_vec());
        }
    }
    keys.push(b"abcdefghzbcdefgh".to_vec());
    keys.push(b"abcdefgha".to_vec());
    for a in &keys {
        for b in &keys {
            assert_eq!(crate::table::key_cmp(a, b), a.as_slice().cmp(b.as_slice()), "{a:?} {b:?}");
        }
    }
}
