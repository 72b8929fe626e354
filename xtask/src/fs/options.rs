//! The command line of `cargo xtask fs` (cli.rs dispatches it).

use std::path::PathBuf;
use crate::host::args::{mem_size, number};

#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct FsArgs {
    #[command(subcommand)]
    pub command: FsCommand,
}

#[derive(clap::Subcommand, Debug, Clone, PartialEq)]
pub enum FsCommand {
    /// Make an ext2 image of DIR's files (mke2fs -t ext2 -d)
    Mkimage {
        dir: PathBuf,
        img: PathBuf,
        /// Image size, e.g. 8M (default: the files' size plus room, at least 4 MiB)
        #[arg(long, value_name = "S", value_parser = mem_size)]
        size: Option<u64>,
    },
    /// e2fsck -fn IMG (read-only; exit status says clean or not)
    Check { img: PathBuf },
    /// List a directory of the image (our reader)
    Ls {
        img: PathBuf,
        #[arg(default_value = "/")]
        path: String,
    },
    /// Print a file of the image (our reader)
    Cat { img: PathBuf, path: String },
    /// Copy a file of the image to OUT (our reader)
    Get { img: PathBuf, path: String, out: PathBuf },
    /// The file-system part of `cargo xtask test` alone
    Test,
    /// The crash test: boot `fscrash` N times, kill QEMU after a seeded number of fsyncs, check the image
    Crash {
        /// Boots
        #[arg(long, value_name = "N", default_value_t = 20)]
        kills: u32,
        /// The seed
        #[arg(long, value_name = "S", default_value = "1", value_parser = number)]
        seed: u64,
    },
    /// The image `fstest` checks (its files: crates/testdefs/src/fstest_files.rs)
    FstestImage { img: PathBuf },
}
