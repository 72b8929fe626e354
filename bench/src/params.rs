//! Run parameters from a command line of `key=value` words (the kernel command line in a
//! guest, argv on the host). Allocation-free: keys are borrowed from the line.

use crate::catalog::{self, BenchSpec};
use crate::Error;

const MAX: usize = 16;

/// One run's request: which benchmark, how many workers, and its integer parameters (the
/// catalog's defaults overridden by `key=value` words on the line).
#[derive(Debug, Clone)]
pub struct Params<'a> {
    pub spec: &'static BenchSpec,
    /// Workers; 0 means "one per core the platform has".
    pub workers: usize,
    /// Execute the plugin's region markers (true unless the caller turns it off: the in-boot
    /// calibration runs unmarked so its instructions are not counted as the benchmark's).
    pub marked: bool,
    kv: [(&'a str, u64); MAX],
    n: usize,
}

impl<'a> Params<'a> {
    /// Parse `bench=NAME [workers=N] [key=value ...]`; other words (kernel options) are ignored.
    pub fn parse(line: &'a str) -> Result<Params<'a>, Error> {
        let mut name = None;
        let mut workers = 0usize;
        let mut kv = [("", 0u64); MAX];
        let mut n = 0;
        for word in line.split_ascii_whitespace() {
            let Some((k, v)) = word.split_once('=') else { continue };
            match k {
                "bench" => name = Some(v),
                "workers" => workers = v.parse().map_err(|_| Error::Param("workers is not a number"))?,
                _ => {
                    // Only integer values are ours; kernel options such as console=ttyS0 are not.
                    if let Ok(x) = v.parse::<u64>() {
                        if n == MAX {
                            return Err(Error::Param("more than 16 parameters"));
                        }
                        kv[n] = (k, x);
                        n += 1;
                    }
                }
            }
        }
        let name = name.ok_or(Error::Param("no bench=NAME on the command line"))?;
        let spec = catalog::find(name).ok_or(Error::Param("unknown benchmark name"))?;
        if workers > catalog::MAX_CORES {
            return Err(Error::Param("workers over 255"));
        }
        Ok(Params { spec, workers, marked: true, kv, n })
    }

    /// Parameter `key`: from the line if given there, else the catalog default.
    pub fn get(&self, key: &str) -> Result<u64, Error> {
        if let Some((_, v)) = self.kv[..self.n].iter().find(|(k, _)| *k == key) {
            return Ok(*v);
        }
        self.spec.defaults.iter().find(|(k, _)| *k == key).map(|(_, v)| *v).ok_or(Error::Param("parameter missing"))
    }

    /// A value given on the line, whether or not the benchmark declares it (harness options
    /// such as `reps`).
    pub fn given(&self, key: &str) -> Option<u64> {
        self.kv[..self.n].iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    /// `get` for a count that must be at least 1.
    pub fn count(&self, key: &str) -> Result<usize, Error> {
        match self.get(key)? {
            0 => Err(Error::Param("a count parameter is 0")),
            v => Ok(v as usize),
        }
    }

    /// The effective parameters (defaults with overrides), for the result line.
    pub fn effective(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.spec.defaults.iter().map(move |(k, _)| (*k, self.get(k).unwrap_or(0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let p = Params::parse("console=ttyS0 quiet bench=dupclose workers=2 iters=7 tsc=reliable").unwrap();
        assert_eq!(p.spec.name, "dupclose");
        assert_eq!(p.workers, 2);
        assert_eq!(p.get("iters").unwrap(), 7);
        let p = Params::parse("bench=counter_sloppy").unwrap();
        assert_eq!(p.get("batch").unwrap(), 64);
        assert!(p.get("nope").is_err());
    }

    #[test]
    fn bad_lines() {
        assert!(Params::parse("quiet").is_err());
        assert!(Params::parse("bench=nosuch").is_err());
        assert!(Params::parse("bench=calib workers=300").is_err());
        assert!(Params::parse("bench=calib workers=x").is_err());
        assert!(Params::parse("bench=thread_mt iters=0").unwrap().count("iters").is_err());
    }
}
