//! Where the runtime and programs put things in a user address space. The first program's
//! image sits below `abi::INIT_IMAGE_LIMIT` (linked at `IMAGE_BASE` by user/link.ld) and its
//! stack just below `abi::INIT_STACK_TOP`; the rest is convention, chosen so every window is
//! aligned to 512 GiB and a shared range of any kind can be linked at its start.

/// Link address of every program (user/link.ld).
pub const IMAGE_BASE: u64 = 0x40_0000;
/// The temporary heap (`heap`): grows upwards from here.
pub const HEAP_BASE: u64 = 0x1000_0000_0000;
/// Heap limit (1 TiB of address space).
pub const HEAP_END: u64 = 0x1100_0000_0000;
/// Shared address ranges programs link into every participating core's root range.
pub const SHARED_BASE: u64 = 0x2000_0000_0000;
/// Per-core private data (memclone's arrays).
pub const PRIVATE_BASE: u64 = 0x3000_0000_0000;
/// Scratch mappings made by tests.
pub const SCRATCH_BASE: u64 = 0x4000_0000_0000;
/// Top of the stack of contexts started with `cores::Core::start`.
pub const CORE_STACK_TOP: u64 = 0x7F00_0000_0000;
/// Default size of such a stack.
pub const CORE_STACK_SIZE: u64 = 64 << 10;
