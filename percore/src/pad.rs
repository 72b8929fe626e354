//! Cache-line padding. 128 bytes, because the adjacent-line prefetcher on Intel parts pulls
//! lines in pairs, so 64-byte padding still shares a pair between two cores.

use core::ops::{Deref, DerefMut};

#[repr(C, align(128))]
#[derive(Default)]
pub struct CachePadded<T> {
    value: T,
}

impl<T> CachePadded<T> {
    pub const fn new(value: T) -> Self {
        Self { value }
    }
    pub fn into_inner(self) -> T {
        self.value
    }
}

impl<T> Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> DerefMut for CachePadded<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}
