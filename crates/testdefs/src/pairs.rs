//! The enumeration both commutativity tables share: a case is an ordered pair of calls, each
//! with one of its argument classes, and every case has an index that means the same case on
//! the host and in the guest. `commute_cases` and `posix_cases` each instantiate it with their
//! own `Op`.

/// A system call and its argument classes.
pub struct Call<Op: 'static> {
    pub name: &'static str,
    pub variants: &'static [Op],
}

/// One case: its index in the enumeration, and the two calls (A on core 0, B on core 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Case<Op> {
    pub index: usize,
    pub call_a: &'static str,
    pub a: Op,
    pub call_b: &'static str,
    pub b: Op,
}

/// Every case of `calls`, in the one order all sides use: pairs of calls `(i, j >= i)` in
/// `calls` order, then A's argument classes, then B's.
pub fn for_each_case<Op: Copy>(calls: &[Call<Op>], mut f: impl FnMut(Case<Op>)) {
    let mut index = 0;
    for i in 0..calls.len() {
        for j in i..calls.len() {
            for &a in calls[i].variants {
                for &b in calls[j].variants {
                    f(Case { index, call_a: calls[i].name, a, call_b: calls[j].name, b });
                    index += 1;
                }
            }
        }
    }
}

/// The case of `calls` with this index.
pub fn case<Op: Copy>(calls: &[Call<Op>], index: usize) -> Option<Case<Op>> {
    let mut found = None;
    for_each_case(calls, |c| {
        if c.index == index {
            found = Some(c);
        }
    });
    found
}

/// How many cases `calls` has.
pub fn count<Op: Copy>(calls: &[Call<Op>]) -> usize {
    let mut n = 0;
    for_each_case(calls, |_| n += 1);
    n
}
