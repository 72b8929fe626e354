//! The model of the kernel interface the commutativity checker decides with (docs/commute.md):
//! the state the modelled system calls read and write (shares and their entries, segments and
//! their sizes, address ranges and their mappings, references), and each call's result and
//! state change, written from abi/src/lib.rs and kernel/src/syscall.rs (the order in which a
//! call checks its arguments decides which error it returns, so the model keeps that order).
//!
//! Two calls **commute** on a state when running A then B and B then A give each call the same
//! result and leave the same state (so every later call sees the same thing). Results that
//! the interface leaves unspecified compare equal: the ids of new objects (named after the call
//! that made them, `newA` / `newB`), the time (`time_now`), and the calling core's own pcore
//! (`pcore_current`, the same in either order on the same core).
//!
//! Results are strings in the format the guest prints (`user/apps/src/bin/commute.rs`), so the
//! host can also check that the kernel returned what the model predicts (`check_results`).

use super::pipeline::{model_of_case_table, Style};
use testdefs::commute_cases::{self as cases, Name, Op, Sym, FIXTURE_SEG_PAGES, NEW_SEG_BYTES, PAGE};
use std::collections::{BTreeMap, BTreeSet};

/// An object of the model: a fixture object or the one a case's call made (0 = A, 1 = B).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    Fix(Sym),
    New(u8),
}

impl Key {
    fn label(self) -> String {
        match self {
            Key::Fix(s) => s.name().to_string(),
            Key::New(0) => "newA".into(),
            Key::New(_) => "newB".into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Map {
    pub voff: u64,
    pub len: u64,
    pub seg: Key,
    pub soff: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Obj {
    Share(BTreeSet<Key>),
    /// Its size in bytes.
    Segment(u64),
    /// Its mappings, by `voff` (offsets and lengths in pages).
    Range(Vec<Map>),
}

impl Obj {
    fn type_name(&self) -> &'static str {
        match self {
            Obj::Share(_) => "share",
            Obj::Segment(_) => "segment",
            Obj::Range(_) => "ar",
        }
    }
}

/// The state a case sees: the live objects, and what the process share (which both cores'
/// share sets hold, so shares in it are reachable) holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    pub objs: BTreeMap<Key, Obj>,
    pub proc_holds: BTreeSet<Key>,
}

fn err(e: &str) -> String {
    format!("E:{e}")
}

impl State {
    /// The fixture of `cases.rs`.
    pub fn fixture() -> State {
        let fx = Key::Fix;
        let mut objs = BTreeMap::new();
        objs.insert(fx(Sym::SA), Obj::Share([fx(Sym::X), fx(Sym::Y), fx(Sym::R), fx(Sym::Q)].into_iter().collect()));
        objs.insert(fx(Sym::SB), Obj::Share([fx(Sym::X)].into_iter().collect()));
        objs.insert(fx(Sym::X), Obj::Segment(FIXTURE_SEG_PAGES * PAGE));
        objs.insert(fx(Sym::Y), Obj::Segment(FIXTURE_SEG_PAGES * PAGE));
        objs.insert(fx(Sym::R), Obj::Range(vec![Map { voff: 0, len: 1, seg: fx(Sym::X), soff: 0 }]));
        objs.insert(fx(Sym::Q), Obj::Range(Vec::new()));
        State { objs, proc_holds: [fx(Sym::SA), fx(Sym::SB)].into_iter().collect() }
    }

    /// References to `k`: shares holding it (the process share included) and mappings of live
    /// ranges using it (`ObjStat::refs`).
    pub fn refs(&self, k: Key) -> u64 {
        let held = self.objs.values().filter(|o| matches!(o, Obj::Share(m) if m.contains(&k))).count() + self.proc_holds.contains(&k) as usize;
        let mapped: usize = self.objs.values().map(|o| if let Obj::Range(maps) = o { maps.iter().filter(|m| m.seg == k).count() } else { 0 }).sum();
        (held + mapped) as u64
    }

    /// Free every object nothing references any more (and what only it referenced).
    fn collect(&mut self) {
        loop {
            let dead: Vec<Key> = self.objs.keys().copied().filter(|k| self.refs(*k) == 0).collect();
            if dead.is_empty() {
                return;
            }
            for k in dead {
                self.objs.remove(&k);
            }
        }
    }

    /// A share named directly by a call: it must be held by a share in the caller's set (the
    /// process share; the cases name no other).
    fn reach_share(&self, s: Sym) -> Result<&BTreeSet<Key>, String> {
        let k = Key::Fix(s);
        if !self.proc_holds.contains(&k) {
            return Err(err("ShareNotReachable"));
        }
        match self.objs.get(&k) {
            Some(Obj::Share(m)) => Ok(m),
            Some(_) => Err(err("WrongType")),
            None => Err(err("ShareNotReachable")),
        }
    }

    /// `<share, object>` lookup: the share is reachable and holds the object.
    fn lookup(&self, n: Name) -> Result<Key, String> {
        let m = self.reach_share(n.0)?;
        let k = Key::Fix(n.1);
        if !m.contains(&k) || !self.objs.contains_key(&k) {
            return Err(err("NoSuchObject"));
        }
        Ok(k)
    }

    fn share_mut(&mut self, s: Sym) -> &mut BTreeSet<Key> {
        match self.objs.get_mut(&Key::Fix(s)) {
            Some(Obj::Share(m)) => m,
            _ => unreachable!("share_mut after reach_share"),
        }
    }

    fn segment(&self, k: Key) -> Result<u64, String> {
        match self.objs.get(&k) {
            Some(Obj::Segment(n)) => Ok(*n),
            _ => Err(err("WrongType")),
        }
    }

    fn range(&self, k: Key) -> Result<&Vec<Map>, String> {
        match self.objs.get(&k) {
            Some(Obj::Range(m)) => Ok(m),
            _ => Err(err("WrongType")),
        }
    }

    /// Run `op` as call `who` (0 = A, 1 = B): its result, in the guest's format.
    pub fn apply(&mut self, op: Op, who: u8) -> String {
        match self.step(op, who) {
            Ok(s) | Err(s) => s,
        }
    }

    fn step(&mut self, op: Op, who: u8) -> Result<String, String> {
        let new = Key::New(who);
        match op {
            Op::Null => Ok("0".into()),
            Op::TimeNow => Ok("t".into()),
            Op::PcoreCurrent => Ok("self".into()),
            // The caller's own share set: no case changes it (self_drop is not modelled).
            Op::SelfShares => Ok("own".into()),
            Op::ObjStat(n) => {
                let k = self.lookup(n)?;
                Ok(format!("{}/refs={}", self.objs[&k].type_name(), self.refs(k)))
            }
            Op::ObjGetName(n) => Ok(self.lookup(n)?.label()),
            Op::ShareAlloc(p) => {
                self.reach_share(p)?;
                self.objs.insert(new, Obj::Share(BTreeSet::new()));
                self.share_mut(p).insert(new);
                Ok(new.label())
            }
            Op::ShareAddobj { dst, src } => {
                let k = self.lookup(src)?;
                if self.reach_share(dst)?.contains(&k) {
                    return Err(err("AlreadyExists"));
                }
                self.share_mut(dst).insert(k);
                Ok("0".into())
            }
            Op::ShareDelobj(n) => {
                let k = self.lookup(n)?;
                self.share_mut(n.0).remove(&k);
                self.collect();
                Ok("0".into())
            }
            Op::ShareList(s) => {
                let mut v: Vec<String> = self.reach_share(s)?.iter().map(|k| k.label()).collect();
                v.sort();
                Ok(format!("[{}]", v.join(",")))
            }
            Op::SegmentAlloc(s) => {
                self.reach_share(s)?;
                self.objs.insert(new, Obj::Segment(NEW_SEG_BYTES));
                self.share_mut(s).insert(new);
                Ok(new.label())
            }
            Op::SegmentCopy { dst, src } | Op::SegmentCopyCow { dst, src } => {
                self.reach_share(dst)?;
                let k = self.lookup(src)?;
                let n = self.segment(k)?;
                self.objs.insert(new, Obj::Segment(n));
                self.share_mut(dst).insert(new);
                Ok(new.label())
            }
            Op::SegmentGetNbytes(n) => {
                let k = self.lookup(n)?;
                Ok(self.segment(k)?.to_string())
            }
            Op::SegmentSetNbytes(n, pages) => {
                let k = self.lookup(n)?;
                self.segment(k)?;
                let mapped_end = self
                    .objs
                    .values()
                    .filter_map(|o| if let Obj::Range(m) = o { Some(m) } else { None })
                    .flatten()
                    .filter(|m| m.seg == k)
                    .map(|m| m.soff + m.len)
                    .max()
                    .unwrap_or(0);
                if pages < mapped_end {
                    return Err(err("Busy"));
                }
                self.objs.insert(k, Obj::Segment(pages * PAGE));
                Ok("0".into())
            }
            Op::ArAlloc(s) => {
                self.reach_share(s)?;
                self.objs.insert(new, Obj::Range(Vec::new()));
                self.share_mut(s).insert(new);
                Ok(new.label())
            }
            Op::ArSetSeg { ar, voff, seg, soff, len } => {
                let a = self.lookup(ar)?;
                let s = self.lookup(seg)?;
                self.range(a)?;
                let nbytes = self.segment(s)?;
                // The range before the segment (abi `AR_SET_SEG`): an overlap wins over a
                // segment too small, so a refusal for overlap does not depend on the size.
                if self.range(a)?.iter().any(|m| m.voff < voff + len && voff < m.voff + m.len) {
                    return Err(err("Overlap"));
                }
                if soff + len > nbytes.div_ceil(PAGE) {
                    return Err(err("OutOfRange"));
                }
                if let Some(Obj::Range(maps)) = self.objs.get_mut(&a) {
                    maps.push(Map { voff, len, seg: s, soff });
                    maps.sort_by_key(|m| m.voff);
                }
                Ok("0".into())
            }
            Op::ArGet(n) => {
                let a = self.lookup(n)?;
                let v: Vec<String> = self.range(a)?.iter().map(|m| format!("{}+{}:{}@{}", m.voff, m.len, m.seg.label(), m.soff)).collect();
                Ok(format!("[{}]", v.join(",")))
            }
            Op::ArUnmap { ar, voff, len } => {
                let a = self.lookup(ar)?;
                let end = voff + len;
                let maps = self.range(a)?;
                if maps.iter().any(|m| m.voff < end && voff < m.voff + m.len && !(m.voff >= voff && m.voff + m.len <= end)) {
                    return Err(err("Overlap"));
                }
                if let Some(Obj::Range(maps)) = self.objs.get_mut(&a) {
                    maps.retain(|m| !(m.voff >= voff && m.voff + m.len <= end));
                }
                self.collect();
                Ok("0".into())
            }
        }
    }
}

/// The kernel's own calls as the pipeline sees them (cases.rs, this model).
pub struct Kernel;

model_of_case_table!(Kernel, cases, "commute-case", Style { call_width: 22, call_heads: ("call A (core 0)", "call B (core 1)"), index_width: 4, list_width: 20, by_pair: false, got_word: "kernel", results_word: "kernel results" });

#[cfg(test)]
mod tests {
    use super::*;
    use super::super::pipeline::{self, Verdict};

    /// The pipeline's decision on this model.
    fn decide(start: &State, a: Op, b: Op) -> Verdict {
        pipeline::decide::<Kernel>(start, a, b)
    }
    use Sym::*;

    fn commutes(a: Op, b: Op) -> bool {
        decide(&State::fixture(), a, b).commutes
    }

    // Catches a model that serializes every insert into one share: adding two different
    // objects to the same share commutes (sv6's example of a commutative pair).
    #[test]
    fn addobj_of_different_objects_commute() {
        assert!(commutes(Op::ShareAddobj { dst: SB, src: (SA, Y) }, Op::ShareAddobj { dst: SB, src: (SA, R) }));
    }

    // Catches a model that ignores order: add then delete of the same name is not delete then
    // add (one of them fails, or the name ends up present in one order and absent in the other).
    #[test]
    fn addobj_and_delobj_of_the_same_name_do_not_commute() {
        assert!(!commutes(Op::ShareAddobj { dst: SB, src: (SA, Y) }, Op::ShareDelobj((SB, Y))));
        // The same object deleted from another share: both succeed in either order.
        assert!(commutes(Op::ShareAddobj { dst: SB, src: (SA, R) }, Op::ShareDelobj((SA, Y))));
    }

    // Catches results that depend on the other call: the same add twice is AlreadyExists for
    // whichever runs second.
    #[test]
    fn the_same_addobj_twice_does_not_commute() {
        let v = decide(&State::fixture(), Op::ShareAddobj { dst: SB, src: (SA, Y) }, Op::ShareAddobj { dst: SB, src: (SA, Y) });
        assert!(!v.commutes);
        assert_eq!(v.ab, ("0".to_string(), "E:AlreadyExists".to_string()));
    }

    // Catches a model that compares new object ids literally: two allocations commute although
    // the ids they get depend on the order.
    #[test]
    fn allocations_commute_but_not_with_a_list_of_their_share() {
        assert!(commutes(Op::SegmentAlloc(SA), Op::SegmentAlloc(SA)));
        assert!(commutes(Op::ShareAlloc(SA), Op::ArAlloc(SB)));
        assert!(!commutes(Op::SegmentAlloc(SA), Op::ShareList(SA)));
        assert!(commutes(Op::SegmentAlloc(SA), Op::ShareList(SB)));
    }

    // Catches a model without references: a stat sees the count another share's delete changes,
    // and deleting the range that maps X drops X's count too.
    #[test]
    fn stat_sees_references() {
        let s = State::fixture();
        assert_eq!(s.refs(Key::Fix(X)), 3);
        assert!(!commutes(Op::ObjStat((SA, X)), Op::ShareDelobj((SB, X))));
        assert!(!commutes(Op::ObjStat((SA, X)), Op::ShareDelobj((SA, R))));
        assert!(commutes(Op::ObjStat((SA, Y)), Op::ShareDelobj((SB, X))));
    }

    // Catches a size model that ignores mappings: shrinking below a mapped page is Busy, and a
    // mapping of a page that a shrink removes fails; both orders differ.
    #[test]
    fn shrink_and_map_of_the_same_page_do_not_commute() {
        let shrink = Op::SegmentSetNbytes((SA, Y), 1);
        let map_page1 = Op::ArSetSeg { ar: (SA, Q), voff: 1, seg: (SA, Y), soff: 1, len: 1 };
        let v = decide(&State::fixture(), shrink, map_page1);
        assert!(!v.commutes);
        assert_eq!(v.ab, ("0".to_string(), "E:OutOfRange".to_string()));
        assert_eq!(v.ba, ("E:Busy".to_string(), "0".to_string()));
        // Mapping page 0 survives the shrink: commutes.
        assert!(commutes(shrink, Op::ArSetSeg { ar: (SA, R), voff: 1, seg: (SA, Y), soff: 0, len: 1 }));
        assert!(!commutes(Op::SegmentSetNbytes((SA, X), 0), Op::ArUnmap { ar: (SA, R), voff: 0, len: 1 }));
    }

    // Catches a model that judges by results alone: two resizes of one segment to different
    // sizes both succeed, with the same results in either order, but leave different sizes,
    // so every later call can tell the orders apart: they do not commute.
    #[test]
    fn equal_results_with_different_final_states_do_not_commute() {
        let (grow, shrink) = (Op::SegmentSetNbytes((SA, Y), 3), Op::SegmentSetNbytes((SA, Y), 1));
        let v = decide(&State::fixture(), grow, shrink);
        assert_eq!(v.ab, v.ba, "the same results in both orders");
        assert!(!v.commutes, "different final sizes: not commutative");
        // The same resize twice leaves one state: it commutes.
        assert!(commutes(grow, grow));
    }

    // Catches the old error order (the segment's size before the range's overlap): a mapping
    // over a mapped page that is also past the shrunk size is refused `Overlap` in both orders,
    // so it commutes with the shrink (planted once, 2026-11-29: the size check moved back
    // first gives `E:OutOfRange` after the shrink and fails here).
    #[test]
    fn overlap_is_checked_before_the_segment_size() {
        let shrink = Op::SegmentSetNbytes((SA, Y), 1);
        let over_x_past_end = Op::ArSetSeg { ar: (SA, R), voff: 0, seg: (SA, Y), soff: 1, len: 1 };
        let v = decide(&State::fixture(), shrink, over_x_past_end);
        assert_eq!(v.ab, ("0".to_string(), "E:Overlap".to_string()));
        assert_eq!(v.ba, v.ab);
        assert!(v.commutes);
        // Past the end with the page free: the size still refuses after the shrink.
        let past_end = Op::ArSetSeg { ar: (SA, Q), voff: 0, seg: (SA, Y), soff: 1, len: 1 };
        assert!(!commutes(shrink, past_end));
    }

    // Catches range operations that ignore pages: mappings of different pages of one range
    // commute; a map and an unmap of the same page do not.
    #[test]
    fn range_pages() {
        let q0 = Op::ArSetSeg { ar: (SA, Q), voff: 0, seg: (SA, X), soff: 0, len: 1 };
        let q1 = Op::ArSetSeg { ar: (SA, Q), voff: 1, seg: (SA, Y), soff: 1, len: 1 };
        assert!(commutes(q0, q1));
        assert!(!commutes(q0, Op::ArUnmap { ar: (SA, Q), voff: 0, len: 1 }));
        assert!(!commutes(q0, Op::ArGet((SA, Q))));
        assert!(commutes(q0, Op::ArGet((SA, R))));
        assert!(!commutes(q0, q0));
    }

    // Catches a freed object that stays nameable: after its last share drops it, Y is gone.
    #[test]
    fn delete_frees_the_last_reference() {
        let mut s = State::fixture();
        assert_eq!(s.apply(Op::ShareDelobj((SA, Y)), 0), "0");
        assert!(!s.objs.contains_key(&Key::Fix(Y)));
        assert_eq!(s.apply(Op::SegmentGetNbytes((SA, Y)), 1), "E:NoSuchObject");
        assert_eq!(s.apply(Op::ShareDelobj((SB, Y)), 1), "E:NoSuchObject");
    }

    // Catches a case table the two sides could disagree on: indices are dense and stable.
    #[test]
    fn case_enumeration_is_dense() {
        let n = testdefs::pairs::count(cases::CALLS);
        assert!(n > 500, "{n}");
        for i in [0, n / 2, n - 1] {
            assert_eq!(testdefs::pairs::case(cases::CALLS, i).unwrap().index, i);
        }
        assert!(testdefs::pairs::case(cases::CALLS, n).is_none());
    }
}
