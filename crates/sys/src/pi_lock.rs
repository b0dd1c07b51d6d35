//! A priority-inheriting lock: the kernel's PI futex (FUTEX_LOCK_PI / FUTEX_UNLOCK_PI), what glibc's
//! `PTHREAD_PRIO_INHERIT` mutexes are built on. While a thread waits for it, the holder runs at the
//! waiter's priority, or for SCHED_DEADLINE with the waiter's deadline parameters — and a boosted
//! deadline thread that runs out of runtime is replenished rather than throttled. So a worker pool
//! whose queue lock is held by a thread that has used up its own budget is not stalled until that
//! thread's next period (docs/results.md, issue 15).
//!
//! The word holds 0 when free, else the holder's thread id (with the kernel's FUTEX_WAITERS bit
//! while others wait): uncontended lock and unlock are one compare-and-swap in user space, as in
//! glibc; the kernel is entered only to wait and to hand the lock over.

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

use rustix::io::Errno;
use rustix::thread::futex;

/// A lock with priority inheritance (no data: it orders critical sections, as a pthread mutex).
#[derive(Debug, Default)]
pub struct PiLock {
    word: AtomicU32,
}

/// Holds a [`PiLock`] until dropped.
#[must_use = "the lock is released when the guard is dropped"]
pub struct PiGuard<'a> {
    lock: &'a PiLock,
    tid: u32,
}

impl PiLock {
    pub const fn new() -> PiLock {
        PiLock { word: AtomicU32::new(0) }
    }

    /// Waits for the lock (the holder inherits this thread's priority meanwhile). Fails only with
    /// what the kernel refuses: EDEADLK when this thread already holds it, ENOSYS without PI futexes.
    pub fn lock(&self) -> io::Result<PiGuard<'_>> {
        let tid = crate::thread::gettid() as u32;
        if self.word.compare_exchange(0, tid, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            return Ok(PiGuard { lock: self, tid });
        }
        loop {
            // The kernel sets the owner (this tid) in the word when it hands the lock over.
            match futex::lock_pi(&self.word, futex::Flags::PRIVATE, None) {
                Ok(()) => return Ok(PiGuard { lock: self, tid }),
                Err(Errno::INTR) | Err(Errno::AGAIN) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl Drop for PiGuard<'_> {
    fn drop(&mut self) {
        // Waiters set FUTEX_WAITERS in the word, so the fast path fails and the kernel hands over.
        if self.lock.word.compare_exchange(self.tid, 0, Ordering::Release, Ordering::Relaxed).is_err() {
            // Only the owner unlocks; the kernel refuses (EPERM) nothing else here.
            let _ = futex::unlock_pi(&self.lock.word, futex::Flags::PRIVATE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn it_excludes_under_contention() {
        let lock = Arc::new(PiLock::new());
        let counter = Arc::new(AtomicU32::new(0));
        let inside = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (lock, counter, inside) = (lock.clone(), counter.clone(), inside.clone());
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        let _g = lock.lock().unwrap();
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders at once");
                        counter.fetch_add(1, Ordering::Relaxed);
                        if counter.load(Ordering::Relaxed) % 500 == 0 {
                            std::thread::yield_now();
                        }
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(counter.load(Ordering::Relaxed), 8000);
        assert_eq!(lock.word.load(Ordering::Relaxed), 0, "free at the end");
    }

    #[test]
    fn locking_twice_from_one_thread_is_refused_not_a_hang() {
        let lock = PiLock::new();
        let _g = lock.lock().unwrap();
        // The kernel sees the owner is the caller only once the word is contended: make it so.
        lock.word.fetch_or(0x8000_0000, Ordering::Relaxed);
        assert_eq!(lock.lock().err().and_then(|e| e.raw_os_error()), Some(libc::EDEADLK));
        lock.word.fetch_and(!0x8000_0000, Ordering::Relaxed);
    }

    /// The inheritance itself, on the real kernel: a SCHED_OTHER holder runs at the real-time
    /// priority of a SCHED_FIFO thread waiting for the lock, and drops back when it releases.
    #[test]
    fn a_waiting_fifo_thread_lends_its_priority_to_the_holder() {
        if !crate::process::is_root() {
            eprintln!("skipped: SCHED_FIFO needs root (CAP_SYS_NICE)");
            return;
        }
        let lock = Arc::new(PiLock::new());
        let guard = lock.lock().unwrap();
        let me = crate::thread::gettid();
        let prio = || crate::procfs::task_sched(me as u32, me as u32).map(|s| s.priority);
        let before = prio();
        let waiter = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                crate::sched::set_attr(0, crate::sched::SchedAttr::Fifo { priority: 10 }).unwrap();
                let _g = lock.lock().unwrap();
            })
        };
        // /proc's priority field: 20 + nice for SCHED_OTHER, −1 − rt_priority while boosted.
        let boosted = (0..200).find_map(|_| {
            std::thread::sleep(Duration::from_millis(5));
            prio().filter(|&p| p == -11)
        });
        drop(guard);
        waiter.join().unwrap();
        assert_eq!(boosted, Some(-11), "the holder was never boosted (before: {before:?})");
        assert_eq!(prio(), before, "the boost ends with the lock");
    }
}
