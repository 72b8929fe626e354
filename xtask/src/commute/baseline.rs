//! The CI samples' baselines and the reviewed file of accepted regressions (docs/commute.md,
//! "Baselines cannot drift to green"), shared by the kernel calls' sample (`baseline.txt`,
//! set `kernel`) and the POSIX calls' sample on the library OS (`baseline-posix-ours.txt`,
//! set `posix-ours`).
//!
//! A baseline line is `INDEX STATUS LABEL`, STATUS one of
//! - `free`: conflict-free when the line was written;
//! - `conflict`: conflicting, and never recorded free;
//! - `accepted`: recorded free once, conflicting since, and listed with its reason in
//!   `accepted-regressions.txt`.
//!
//! CI fails a case recorded `free` that now conflicts unless the accepted-regressions file
//! lists it, and a case recorded `accepted` that the file does not list. `--update-baseline`
//! never writes a `free` case as conflicting: it writes `accepted` for the cases named with
//! `--accept CASE` (each must be in the file, with its reason) and refuses otherwise, writing
//! nothing. A case is matched to its old line by its label (calls and arguments), so a change
//! to the case list that renumbers cases cannot turn a free case into a new, conflicting one.

use crate::host::outcome::TestTally;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The reviewed file of accepted regressions.
pub fn accepted_path() -> PathBuf {
    crate::host::env::workspace_root().join("xtask/src/commute/accepted-regressions.txt")
}

/// The sets a baseline belongs to (the first word of an accepted-regressions line).
pub const SETS: &[&str] = &["kernel", "posix-ours"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Free,
    Conflict,
    Accepted,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Free => "free",
            Status::Conflict => "conflict",
            Status::Accepted => "accepted",
        }
    }
}

/// A baseline: index -> (status, label).
pub type Baseline = BTreeMap<usize, (Status, String)>;

/// Parse a baseline file (`#` comments and blank lines skipped). Any other status word, or a
/// line without an index, is an error: a typo must not read as `conflict`.
pub fn parse_baseline(text: &str) -> Result<Baseline, String> {
    let mut base = Baseline::new();
    for l in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let mut w = l.splitn(3, ' ');
        let (i, st, label) = (w.next().unwrap_or(""), w.next().unwrap_or(""), w.next().unwrap_or(""));
        let i: usize = i.parse().map_err(|_| format!("baseline: bad line `{l}`"))?;
        let st = match st {
            "free" => Status::Free,
            "conflict" => Status::Conflict,
            "accepted" => Status::Accepted,
            _ => return Err(format!("baseline: line `{l}`: the status is `free`, `conflict` or `accepted`")),
        };
        if base.insert(i, (st, label.to_string())).is_some() {
            return Err(format!("baseline: case {i} listed twice"));
        }
    }
    Ok(base)
}

/// The accepted regressions: (set, index) -> reason.
pub type Accepted = BTreeMap<(String, usize), String>;

/// Parse the accepted-regressions file: `SET INDEX REASON` per line, the reason required.
pub fn parse_accepted(text: &str) -> Result<Accepted, String> {
    let mut acc = Accepted::new();
    for l in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let mut w = l.trim().splitn(3, ' ');
        let (set, i, reason) = (w.next().unwrap_or(""), w.next().unwrap_or(""), w.next().unwrap_or("").trim());
        if !SETS.contains(&set) {
            return Err(format!("accepted regressions: line `{l}`: the set is one of {SETS:?}"));
        }
        let i: usize = i.parse().map_err(|_| format!("accepted regressions: line `{l}`: no case index"))?;
        if reason.is_empty() {
            return Err(format!("accepted regressions: {set} case {i} has no reason (each line is `SET INDEX REASON`)"));
        }
        if acc.insert((set.to_string(), i), reason.to_string()).is_some() {
            return Err(format!("accepted regressions: {set} case {i} listed twice"));
        }
    }
    Ok(acc)
}

/// The accepted regressions as checked in.
pub fn read_accepted() -> Result<Accepted, String> {
    let p = accepted_path();
    let text = std::fs::read_to_string(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    parse_accepted(&text)
}

/// One case of a CI run, as the baseline sees it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub index: usize,
    pub label: String,
    /// The test's name in the output (`commute::case_...`).
    pub name: String,
    /// The conflicting lines' symbols, sorted, each once; empty: conflict-free.
    pub symbols: Vec<String>,
    /// How many lines conflicted.
    pub lines: usize,
    /// Why the results are not ones the model allows, if they are not.
    pub results_error: Option<String>,
}

impl Seen {
    pub fn free(&self) -> bool {
        self.symbols.is_empty()
    }
}

/// Compare a CI run of `set` with its baseline and the accepted regressions: one test per
/// case, plus one for the accepted-regressions file (an entry of this set that names no case
/// of the baseline is stale and fails). `update` is the command that rewrites the baseline.
pub fn check(set: &str, seen: &[Seen], baseline: &str, accepted: &Accepted, update: &str) -> Result<TestTally, String> {
    let base = parse_baseline(baseline)?;
    let mut t = TestTally::default();
    let fail = |t: &mut TestTally, name: &str, why: String| {
        println!("{name} ... FAILED ({why})");
        t.add(TestTally::FAIL);
    };
    for s in seen {
        let listed = accepted.get(&(set.to_string(), s.index));
        let Some((status, label)) = base.get(&s.index) else {
            fail(&mut t, &s.name, format!("not in the baseline: `{update}`"));
            continue;
        };
        if *label != s.label {
            fail(&mut t, &s.name, format!("the baseline names another case, `{label}`: the case list changed; `{update}`"));
            continue;
        }
        if let Some(e) = &s.results_error {
            fail(&mut t, &s.name, e.clone());
            continue;
        }
        match (status, s.free(), listed) {
            (Status::Free, false, None) => {
                fail(
                    &mut t,
                    &s.name,
                    format!(
                        "{}: conflict-free in the baseline, now {} shared line(s): {}; not listed in xtask/src/commute/accepted-regressions.txt",
                        s.label,
                        s.lines,
                        s.symbols.join(", ")
                    ),
                );
                if s.symbols.iter().all(|x| x.starts_with("[heap]")) {
                    // A heap line that two unrelated objects share (false sharing) can appear or
                    // vanish when any change moves allocations; docs/commute.md, "CI".
                    println!("   hint: only [heap] lines: if the change did not add sharing, this may be two objects placed on one line; see `cargo xtask commute` and docs/commute.md before accepting it");
                }
            }
            (Status::Accepted, _, None) => {
                fail(&mut t, &s.name, format!("the baseline records case {} as an accepted regression, but xtask/src/commute/accepted-regressions.txt does not list `{set} {}` with a reason", s.index, s.index));
            }
            (_, free, listed) => {
                if let (false, Some(reason)) = (free, listed) {
                    println!("   note: case {} conflicts ({}): an accepted regression: {reason}", s.index, s.symbols.join(", "));
                }
                if free && *status != Status::Free {
                    println!("   note: case {} is conflict-free now (was {}): `{update}` records it free{}", s.index, status.word(), if listed.is_some() { "; then remove its line from accepted-regressions.txt" } else { "" });
                }
                println!("{} ... ok", s.name);
                t.add(TestTally::PASS);
            }
        }
    }
    let stale: Vec<usize> = accepted.keys().filter(|(s, i)| s == set && !base.contains_key(i)).map(|(_, i)| *i).collect();
    let name = format!("commute::accepted_regressions_{}", set.replace('-', "_"));
    if stale.is_empty() {
        println!("{name} ... ok");
        t.add(TestTally::PASS);
    } else {
        fail(&mut t, &name, format!("accepted-regressions.txt lists {set} case(s) {stale:?} that the baseline does not have"));
    }
    Ok(t)
}

/// The new baseline from a run: each case's status from its old line (matched by label) and
/// what the run saw. A case recorded free that now conflicts is written `accepted` only when
/// `accept` names it and the accepted-regressions file lists it with a reason; otherwise the
/// whole update is refused (nothing is written). `accept` naming a case that is not such a
/// regression is refused too. Returns the new text and notes to print.
pub fn update(set: &str, seen: &[Seen], old: &str, accepted: &Accepted, accept: &[usize], header: &str) -> Result<(String, Vec<String>), String> {
    let by_label: BTreeMap<String, Status> = parse_baseline(old)?.into_values().map(|(st, l)| (l, st)).collect();
    let mut body = header.to_string();
    let mut refused = Vec::new();
    let mut notes = Vec::new();
    let mut accepted_here = Vec::new();
    for s in seen {
        let was = by_label.get(&s.label).copied();
        let listed = accepted.contains_key(&(set.to_string(), s.index));
        let status = match (was, s.free()) {
            (_, true) => {
                if was == Some(Status::Accepted) && listed {
                    notes.push(format!("case {} is conflict-free again: remove `{set} {}` from accepted-regressions.txt", s.index, s.index));
                }
                Status::Free
            }
            (None, false) | (Some(Status::Conflict), false) => Status::Conflict,
            (Some(Status::Accepted), false) => {
                if !listed {
                    refused.push(format!("case {} ({}) is recorded as an accepted regression but accepted-regressions.txt does not list `{set} {}`", s.index, s.label, s.index));
                }
                Status::Accepted
            }
            (Some(Status::Free), false) => {
                if !accept.contains(&s.index) {
                    refused.push(format!("case {} ({}) was conflict-free and now shares {}: not written as a conflict without `--accept {}`", s.index, s.label, s.symbols.join(", "), s.index));
                } else if !listed {
                    refused.push(format!("case {}: `--accept {}` needs a line `{set} {} REASON` in xtask/src/commute/accepted-regressions.txt (reviewed with the change)", s.index, s.index, s.index));
                } else {
                    accepted_here.push(s.index);
                }
                Status::Accepted
            }
        };
        body.push_str(&format!("{} {} {}\n", s.index, status.word(), s.label));
    }
    for a in accept {
        if !accepted_here.contains(a) {
            refused.push(format!("--accept {a}: case {a} is not a case of this run that was conflict-free and now conflicts"));
        }
    }
    if !refused.is_empty() {
        return Err(format!("commute: the baseline is not updated:\n  {}", refused.join("\n  ")));
    }
    for a in accepted_here {
        notes.push(format!("case {a} written as an accepted regression"));
    }
    Ok((body, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(index: usize, label: &str, symbols: &[&str]) -> Seen {
        Seen { index, label: label.into(), name: format!("commute::case_{index}"), symbols: symbols.iter().map(|s| s.to_string()).collect(), lines: symbols.len(), results_error: None }
    }

    const BASE: &str = "# header\n1 free A | B\n2 conflict C | D\n3 accepted E | F\n";

    fn accepted(lines: &str) -> Accepted {
        parse_accepted(lines).unwrap()
    }

    // Catches a CI check that lets a free case conflict unless the reviewed file lists it, or
    // that passes a case recorded `accepted` that the file does not list.
    #[test]
    fn a_free_case_that_conflicts_fails_unless_accepted() {
        let none = Accepted::new();
        let run = [seen(1, "A | B", &["OBJECT_IDS"]), seen(2, "C | D", &["X"]), seen(3, "E | F", &["Y"])];
        let t = check("kernel", &run, BASE, &none, "u").unwrap();
        // Case 1 (free, now conflicting) and case 3 (accepted, not listed) fail; case 2 and
        // the (empty) file pass.
        assert_eq!((t.passed, t.failed), (2, 2));
        let acc = accepted("kernel 1 a counter every allocation bumps, on purpose\nkernel 3 shared on purpose\n");
        let t = check("kernel", &run, BASE, &acc, "u").unwrap();
        assert_eq!((t.passed, t.failed), (4, 0));
        // The same index in the other set does not count.
        let other = accepted("posix-ours 1 another set\nposix-ours 3 another set\n");
        let t = check("kernel", &run, BASE, &other, "u").unwrap();
        assert_eq!(t.failed, 2);
        // Free cases that stay free pass without any entry.
        let t = check("kernel", &[seen(1, "A | B", &[])], BASE, &none, "u").unwrap();
        assert_eq!((t.passed, t.failed), (2, 0));
    }

    // Catches stale entries (a case the baseline does not have) passing, and other failures
    // the check must keep: unknown case, relabelled case, results the model does not allow.
    #[test]
    fn stale_entries_and_changed_cases_fail() {
        let stale = accepted("kernel 9 gone\n");
        let t = check("kernel", &[seen(1, "A | B", &[])], BASE, &stale, "u").unwrap();
        assert_eq!((t.passed, t.failed), (1, 1));
        let none = Accepted::new();
        assert_eq!(check("kernel", &[seen(7, "A | B", &[])], BASE, &none, "u").unwrap().failed, 1);
        assert_eq!(check("kernel", &[seen(1, "Z | B", &[])], BASE, &none, "u").unwrap().failed, 1);
        let mut bad = seen(1, "A | B", &[]);
        bad.results_error = Some("results a=1 b=2".into());
        assert_eq!(check("kernel", &[bad], BASE, &none, "u").unwrap().failed, 1);
    }

    // Catches an update that turns a free case into a conflict without `--accept`, accepts
    // without a reason in the file, or lets `--accept` name a case that did not regress.
    #[test]
    fn update_refuses_to_turn_free_into_conflict_without_accept() {
        let header = "# h\n";
        let run = [seen(1, "A | B", &["OBJECT_IDS"]), seen(2, "C | D", &[])];
        let none = Accepted::new();
        let e = update("kernel", &run, BASE, &none, &[], header).unwrap_err();
        assert!(e.contains("not written as a conflict without `--accept 1`"), "{e}");
        let e = update("kernel", &run, BASE, &none, &[1], header).unwrap_err();
        assert!(e.contains("needs a line `kernel 1 REASON`"), "{e}");
        let acc = accepted("kernel 1 reviewed: a counter on purpose\n");
        let (text, _) = update("kernel", &run, BASE, &acc, &[1], header).unwrap();
        assert_eq!(text, "# h\n1 accepted A | B\n2 free C | D\n");
        let e = update("kernel", &run, BASE, &acc, &[1, 2], header).unwrap_err();
        assert!(e.contains("--accept 2: case 2 is not"), "{e}");
        // The written baseline passes CI with the file, and fails without it.
        assert_eq!(check("kernel", &run, &text, &acc, "u").unwrap().failed, 0);
        assert_eq!(check("kernel", &run, &text, &none, "u").unwrap().failed, 1);
    }

    // Catches an update that matches cases by index: a renumbered case list must not let a
    // free case come back as a new, conflicting one.
    #[test]
    fn update_matches_old_lines_by_label() {
        let run = [seen(5, "A | B", &["X"]), seen(6, "new | case", &["X"]), seen(7, "E | F", &["Y"])];
        let none = Accepted::new();
        let e = update("kernel", &run, BASE, &none, &[], "").unwrap_err();
        assert!(e.contains("case 5 (A | B) was conflict-free"), "{e}");
        // Case 7 is E | F, recorded accepted as case 3: its entry must follow the new index.
        assert!(e.contains("case 7 (E | F) is recorded as an accepted regression"), "{e}");
        let acc = accepted("kernel 5 reviewed\nkernel 7 reviewed\n");
        let (text, _) = update("kernel", &run, BASE, &acc, &[5], "").unwrap();
        assert_eq!(text, "5 accepted A | B\n6 conflict new | case\n7 accepted E | F\n");
    }

    // Catches parse errors read as something else: an unknown status is not `conflict`, a
    // line without a reason is refused.
    #[test]
    fn bad_lines_are_errors() {
        assert!(parse_baseline("1 fre A | B\n").unwrap_err().contains("status"));
        assert!(parse_baseline("1 free A\n1 free A\n").unwrap_err().contains("twice"));
        assert!(parse_accepted("kernel 1\n").unwrap_err().contains("no reason"));
        assert!(parse_accepted("kernel 1    \n").unwrap_err().contains("no reason"));
        assert!(parse_accepted("linux 1 x\n").unwrap_err().contains("set"));
        assert!(parse_accepted("kernel x why\n").unwrap_err().contains("index"));
        assert!(parse_accepted("kernel 1 a\nkernel 1 b\n").unwrap_err().contains("twice"));
    }

    // Catches a checked-in file that does not parse (CI would fail on every run).
    #[test]
    fn the_checked_in_files_parse() {
        read_accepted().unwrap();
        for f in ["baseline.txt", "baseline-posix-ours.txt"] {
            let p = crate::host::env::workspace_root().join("xtask/src/commute").join(f);
            parse_baseline(&std::fs::read_to_string(p).unwrap()).unwrap();
        }
    }
}
