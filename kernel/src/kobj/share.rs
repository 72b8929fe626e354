//! Shares: the id → object maps through which every system call names objects.
//!
//! A private share (every core's root share, or `SHARE_PRIVATE`) belongs to one core: only
//! that core may use it, so its map needs no lock at all. A shared share is protected by the
//! scalable reader-writer lock from `percore` (readers touch only their own core's counter),
//! since lookups vastly outnumber changes.

use alloc::vec::Vec;
use core::cell::UnsafeCell;

use super::ObjRef;
use abi::Error;
use percore::RwLock;

struct Entries(Vec<(u64, ObjRef)>);

impl Entries {
    fn find(&self, id: u64) -> Result<usize, usize> {
        self.0.binary_search_by_key(&id, |(k, _)| *k)
    }

    fn get(&self, id: u64) -> Option<ObjRef> {
        self.find(id).ok().map(|i| self.0[i].1.clone())
    }

    fn insert(&mut self, obj: ObjRef) -> Result<(), Error> {
        match self.find(obj.id) {
            Ok(_) => Err(Error::AlreadyExists),
            Err(pos) => {
                self.0.try_reserve(1).map_err(|_| Error::NoMemory)?;
                self.0.insert(pos, (obj.id, obj));
                Ok(())
            }
        }
    }

    fn remove(&mut self, id: u64) -> Result<ObjRef, Error> {
        match self.find(id) {
            Ok(i) => Ok(self.0.remove(i).1),
            Err(_) => Err(Error::NoSuchObject),
        }
    }
}

enum Map {
    Private { owner: usize, entries: UnsafeCell<Entries> },
    Shared(RwLock<Entries>),
}

pub struct Share {
    map: Map,
}

/// The entries of a private map, for its owner core only.
fn private(owner: usize, entries: &UnsafeCell<Entries>) -> Result<&mut Entries, Error> {
    if owner != crate::percpu::acting().index {
        return Err(Error::NotPermitted);
    }
    // SAFETY: only the owner core gets here, shares are never used from interrupt handlers,
    // and no caller keeps the reference across another call on the same share.
    Ok(unsafe { &mut *entries.get() })
}

// SAFETY: a private map is only touched by its owner core (checked on every access, and no
// share is used from interrupt context); a shared map is behind the RW lock.
unsafe impl Sync for Share {}
// SAFETY: as above; ownership moves with the object.
unsafe impl Send for Share {}

impl Share {
    pub fn new_private(owner: usize) -> Share {
        Share { map: Map::Private { owner, entries: UnsafeCell::new(Entries(Vec::new())) } }
    }

    /// A private share for `owner` holding `objs` from the start (a new context's root share,
    /// built by the core that starts the context).
    pub fn new_private_with(owner: usize, objs: Vec<ObjRef>) -> Result<Share, Error> {
        let mut e: Vec<(u64, ObjRef)> = Vec::new();
        e.try_reserve(objs.len()).map_err(|_| Error::NoMemory)?;
        for o in objs {
            e.push((o.id, o));
        }
        e.sort_by_key(|(k, _)| *k);
        e.dedup_by_key(|(k, _)| *k);
        Ok(Share { map: Map::Private { owner, entries: UnsafeCell::new(Entries(e)) } })
    }

    pub fn new_shared() -> Result<Share, Error> {
        let lock = RwLock::try_new(Entries(Vec::new())).map_err(|_| Error::NoMemory)?;
        Ok(Share { map: Map::Shared(lock) })
    }

    pub fn is_private(&self) -> bool {
        matches!(self.map, Map::Private { .. })
    }

    pub fn get(&self, id: u64) -> Result<ObjRef, Error> {
        match &self.map {
            Map::Private { owner, entries } => private(*owner, entries)?.get(id).ok_or(Error::NoSuchObject),
            Map::Shared(lock) => lock.read().get(id).ok_or(Error::NoSuchObject),
        }
    }

    pub fn insert(&self, obj: ObjRef) -> Result<(), Error> {
        match &self.map {
            Map::Private { owner, entries } => private(*owner, entries)?.insert(obj),
            Map::Shared(lock) => lock.write().insert(obj),
        }
    }

    /// Remove and return the entry; the caller drops it outside any lock (dropping the last
    /// reference frees the object, which may take other locks).
    pub fn remove(&self, id: u64) -> Result<ObjRef, Error> {
        match &self.map {
            Map::Private { owner, entries } => private(*owner, entries)?.remove(id),
            Map::Shared(lock) => lock.write().remove(id),
        }
    }

    pub fn ids(&self) -> Result<Vec<u64>, Error> {
        let collect = |e: &Entries| -> Result<Vec<u64>, Error> {
            let mut v = Vec::new();
            v.try_reserve(e.0.len()).map_err(|_| Error::NoMemory)?;
            v.extend(e.0.iter().map(|(k, _)| *k));
            Ok(v)
        };
        match &self.map {
            Map::Private { owner, entries } => collect(private(*owner, entries)?),
            Map::Shared(lock) => collect(&lock.read()),
        }
    }

    pub fn len(&self) -> usize {
        match &self.map {
            Map::Private { owner, entries } => private(*owner, entries).map(|e| e.0.len()).unwrap_or(0),
            Map::Shared(lock) => lock.read().0.len(),
        }
    }
}

/// Add `obj` to `share`, reporting failure as an error (used when creating objects).
pub fn add(share: &ObjRef, obj: ObjRef) -> Result<(), Error> {
    share.as_share()?.insert(obj)
}
