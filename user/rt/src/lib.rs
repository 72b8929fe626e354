//! Placeholder: the user runtime is being written (issue 4/5).
#![no_std]
