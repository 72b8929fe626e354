//! Where the library OS and programs put things in a user address space. The program image
//! sits below `abi::INIT_IMAGE_LIMIT` (linked at `IMAGE_BASE` by user/link.ld; the shell is
//! linked at `SH_IMAGE_BASE` by user/link-sh.ld so it can run a program inside its own
//! context) and the first program's stack just below `abi::INIT_STACK_TOP`; the rest is
//! convention, chosen so every window is aligned to 512 GiB and a range of any kind can be
//! linked at its start.
//!
//! The library OS keeps everything it maps in an *arena* of 16 TiB (`ARENA_DEFAULT`, or
//! another base a launcher chose, see `start`):
//!
//! | offset | what |
//! | --- | --- |
//! | `0` | the context segment (one per context): the context page (`ctx`: core index, root share, pcore, root range), then the private descriptor table (`fd::PrivateTable`) |
//! | `1 GiB + slot * 64 MiB` | segments the descriptor layer maps (pipe rings, files), 256 slots |
//! | `(64 + k) GiB` (top) | stacks of cfork children |
//! | `128 GiB + k MiB` (top) | stacks of protected-procedure-call handlers (`ppc`) |
//! | `(1 + c) * 512 GiB` | core `c`'s heap range (`ArKind::Span512G`), for `c < HEAP_CORES` |

/// Link address of every program (user/link.ld).
pub const IMAGE_BASE: u64 = 0x40_0000;
/// Link address of the shell (user/link-sh.ld): 512 MiB, clear of any program image.
pub const SH_IMAGE_BASE: u64 = 0x2000_0000;
/// Default arena base (16 TiB).
pub const ARENA_DEFAULT: u64 = 0x1000_0000_0000;
/// Arena of a program the shell runs inside its own context (80 TiB).
pub const ARENA_EMBEDDED: u64 = 0x5000_0000_0000;
/// Size of an arena.
pub const ARENA_SIZE: u64 = 0x1000_0000_0000;
/// Span of one heap range.
pub const HEAP_SPAN: u64 = 512 << 30;
/// Offset of `mman`'s mapping window in each core's heap range (its top half): the heap
/// stays below it.
pub const MMAP_WINDOW_OFF: u64 = HEAP_SPAN / 2;
/// Cores with a heap (the arena holds 31 heap ranges after the context slot).
pub const HEAP_CORES: usize = 31;
/// Offset of the descriptor-layer mapping window and its slots.
pub const MAPWIN_OFF: u64 = 1 << 30;
pub const MAPWIN_SLOT: u64 = 64 << 20;
pub const MAPWIN_SLOTS: u64 = 256;
/// Offset of the first cfork stack slot (each slot 1 GiB; the stack sits at its top).
pub const CFORK_STACK_OFF: u64 = 64 << 30;
pub const CFORK_STACK_SLOTS: u64 = 64;
/// Offset of the first handler-stack slot of `ppc` (each slot 1 MiB; the stack sits at its
/// top, the rest is unmapped: an overflow faults and aborts the call).
pub const PPC_STACK_OFF: u64 = 128 << 30;
pub const PPC_STACK_SLOT: u64 = 1 << 20;
pub const PPC_STACK_SLOTS: u64 = 256;
/// Stack size of a `ppc` handler.
pub const PPC_STACK_SIZE: u64 = 64 << 10;
/// Stack size of threads and cfork children.
pub const THREAD_STACK_SIZE: u64 = 256 << 10;

/// The old fixed heap base (kept for programs that name it): the default arena.
pub const HEAP_BASE: u64 = ARENA_DEFAULT;
/// Shared address ranges programs link into every participating core's root range.
pub const SHARED_BASE: u64 = 0x2000_0000_0000;
/// Per-core private data (memclone's arrays).
pub const PRIVATE_BASE: u64 = 0x3000_0000_0000;
/// Scratch mappings made by tests.
pub const SCRATCH_BASE: u64 = 0x4000_0000_0000;
/// Scratch window the shell and the loader use to fill segments (below the embedded arena).
pub const LOADER_SCRATCH: u64 = 0x4800_0000_0000;
/// Stack of a program the shell runs inside its own context.
pub const EMBEDDED_STACK_TOP: u64 = 0x6000_0000_0000;
/// Top of the stack of contexts started with `cores::Core::start` and of threads.
pub const CORE_STACK_TOP: u64 = 0x7F00_0000_0000;
/// Default size of such a stack.
pub const CORE_STACK_SIZE: u64 = 64 << 10;
