//! The interrupt-safe lock forms call the environment's save/restore hooks around the
//! critical section, in the right order. (Its own test binary: the hooks are process-global.)
#![cfg(not(loom))]

use percore::cpu;
use std::cell::Cell;

thread_local! {
    /// Interrupts "disabled" depth on this thread, and the most recent depth seen on restore.
    static OFF: Cell<usize> = const { Cell::new(0) };
}

fn save() -> usize {
    OFF.with(|o| {
        let prev = o.get();
        o.set(prev + 1);
        prev
    })
}

fn restore(token: usize) {
    OFF.with(|o| {
        assert_eq!(o.get(), token + 1, "restores must nest with saves");
        o.set(token)
    });
}

fn off() -> usize {
    OFF.with(|o| o.get())
}

#[test]
fn irqsave_forms_disable_interrupts_for_the_guard_lifetime() {
    cpu::set_irq_ops(save, restore);

    let t = percore::TicketLock::new(0);
    {
        let _g = t.lock_irqsave();
        assert_eq!(off(), 1);
    }
    assert_eq!(off(), 0);
    let it = percore::IrqTicketLock::new(0);
    {
        let _g = it.lock();
        assert_eq!(off(), 1);
        assert!(it.try_lock().is_none());
        assert_eq!(off(), 1, "a failed try_lock restores what it saved");
    }
    assert_eq!(off(), 0);

    let m = percore::McsLock::new(0);
    {
        let _g = m.lock_irqsave();
        assert_eq!(off(), 1);
        let m2 = percore::IrqMcsLock::new(0);
        let _g2 = m2.lock();
        assert_eq!(off(), 2);
    }
    assert_eq!(off(), 0);

    let rw = percore::RwLock::with_reader_slots(0, 2);
    {
        let _r = rw.read_irqsave();
        assert_eq!(off(), 1);
    }
    {
        let _w = rw.write_irqsave();
        assert_eq!(off(), 1);
    }
    {
        let _g = cpu::IrqGuard::new();
        assert_eq!(off(), 1);
    }
    assert_eq!(off(), 0);
    // Plain forms leave interrupts alone.
    {
        let _g = m.lock();
        let _r = rw.read();
        assert_eq!(off(), 0);
    }
}

#[test]
fn seqlock_write_irqsave_and_kernel_paths_disable_interrupts() {
    cpu::set_irq_ops(save, restore);
    let s = percore::SeqLock::new(1u64);
    s.write_irqsave(|v| {
        assert_eq!(off(), 1);
        *v = 2
    });
    assert_eq!(off(), 0);
    assert_eq!(s.read(), 2);
    // The object cache and the reclamation lists take their per-core locks with interrupts
    // off and restore them.
    let cache = percore::ObjectCache::with_cores(percore::HeapBackend::new(std::alloc::Layout::new::<u64>()).unwrap(), 1).unwrap();
    let p = cache.alloc_on(0).unwrap();
    assert_eq!(off(), 0);
    // SAFETY: from this cache, unused.
    unsafe { cache.free_on(0, p) };
    assert_eq!(off(), 0);
    let d = percore::Domain::with_cores(1);
    d.retire_on(0, Box::new(5u32));
    d.synchronize();
    assert_eq!(d.collect_on(0), 1);
    assert_eq!(off(), 0);
}
