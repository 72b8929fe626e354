//! Console output. Every line is tagged with the core that wrote it: `[3] ...`.

#[macro_export]
macro_rules! kprintln {
    () => { $crate::arch::x86_64::serial::write_fmt_locked(format_args!("[{}]\n", percore::cpu_id())) };
    ($($arg:tt)*) => {
        $crate::arch::x86_64::serial::write_fmt_locked(format_args!("[{}] {}\n", percore::cpu_id(), format_args!($($arg)*)))
    };
}

/// Print without the core tag (tool-parsed lines such as the boot summary still carry it;
/// this is for continuation output).
#[macro_export]
macro_rules! kprint_raw {
    ($($arg:tt)*) => { $crate::arch::x86_64::serial::write_fmt_locked(format_args!($($arg)*)) };
}
