//! Console output. Every line is tagged with the core that wrote it: `[3] ...`.

macro_rules! kprintln {
    () => { $crate::arch::x86_64::serial::write_fmt_locked(format_args!("[{}]\n", percore::cpu_id())) };
    ($($arg:tt)*) => {
        $crate::arch::x86_64::serial::write_fmt_locked(format_args!("[{}] {}\n", percore::cpu_id(), format_args!($($arg)*)))
    };
}

// Reached by path (`crate::log::kprintln!`), so a user of the console names this module.
pub(crate) use kprintln;
