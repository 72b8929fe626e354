//! What the command lines of the host tool share: the value parsers of options that several
//! commands take (each error names what is wrong and what is allowed; clap adds the option),
//! a clap error as one line, and, for the commands' own tests, parsing one command's options
//! as `cargo xtask COMMAND` would.


/// A comma-separated list of vCPU counts, each 1..=255 (`1,2,4`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreList(pub Vec<u32>);

pub fn core_list(v: &str) -> Result<CoreList, String> {
    let mut out = Vec::new();
    for s in v.split(',').map(str::trim) {
        let n: u32 = s.parse().map_err(|_| format!("`{s}` is not a number (want a list of vCPU counts such as 1,2,4)"))?;
        if n == 0 || n > 255 {
            return Err(format!("{n} vCPUs is not in 1..=255"));
        }
        out.push(n);
    }
    Ok(CoreList(out))
}

/// A guest memory size: `512M`, `2G`, `64` (MiB).
pub fn mem_size(v: &str) -> Result<u64, String> {
    crate::host::vm::parse_size_mib(v)
}

/// A number, decimal (`1_000` allowed) or `0x` hexadecimal.
pub fn number(v: &str) -> Result<u64, String> {
    let t = v.trim();
    let r = if let Some(h) = t.strip_prefix("0x") { u64::from_str_radix(h, 16) } else { t.replace('_', "").parse::<u64>() };
    r.map_err(|_| format!("`{v}` is not a number"))
}

/// `--gdb`'s port: 1..=65535.
pub fn tcp_port(v: &str) -> Result<u16, String> {
    v.parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(|| format!("`{v}` is not a TCP port in 1..=65535"))
}

pub fn hostfwd(v: &str) -> Result<crate::host::vm::Forward, String> {
    crate::host::vm::parse_hostfwd(v).map_err(|e| e.trim_start_matches("--hostfwd: ").to_string())
}

pub fn at_least_one(v: &str) -> Result<u64, String> {
    match number(v)? {
        0 => Err("need at least 1".into()),
        n => Ok(n),
    }
}

/// `on` or `off`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnOff {
    On,
    Off,
}

impl OnOff {
    pub fn is_on(self) -> bool {
        self == OnOff::On
    }
}

/// A clap error as one line: what is wrong (clap names the option and the value), its tip if
/// it has one, and where the help is.
pub fn one_line(e: &clap::Error, command: Option<&str>) -> String {
    let text = e.to_string();
    // The message, and the lines it continues on (`...not provided:` and the arguments),
    // up to the usage line; clap's tip if it gives one.
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let body: Vec<&str> = lines.iter().copied().take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information") && !l.starts_with("tip:")).collect();
    let joined = if body.is_empty() { "bad command line".to_string() } else { body.join(" ") };
    let first = joined.strip_prefix("error: ").unwrap_or(&joined);
    let tip = lines.iter().find_map(|l| l.strip_prefix("tip: ")).map(|t| format!(" ({t})")).unwrap_or_default();
    let help = match command {
        Some(c) => format!("cargo xtask {c} --help"),
        None => "cargo xtask help".into(),
    };
    format!("{first}{tip}; see `{help}`")
}

/// Parse `args` as the options `T` of `cargo xtask COMMAND` (`command`: its words, e.g.
/// `net load`), with the one-line error `cargo xtask` gives (for the commands' own tests).
#[cfg(test)]
pub fn parse_args<T: clap::Args + clap::FromArgMatches>(command: &str, args: &[String]) -> Result<T, String> {
    let c = T::augment_args(clap::Command::new("cargo xtask").no_binary_name(true));
    let m = c.try_get_matches_from(args).map_err(|e| one_line(&e, Some(command)))?;
    T::from_arg_matches(&m).map_err(|e| one_line(&e, Some(command)))
}
