//! srsENB's worker pool hand-off: TXRX waits until a worker is idle and gives it the TTI.
//!
//! Not `mpsc::sync_channel(0)`: std's rendezvous channel makes the sender *spin* (sched_yield in a
//! loop, `Backoff::spin_heavy`) until the receiver has taken the message. TXRX is SCHED_FIFO 97 and
//! the workers 96, so with two emulators on two CPUs both TXRX threads spun on both CPUs and the
//! workers, runnable but of lower priority, never ran: the emulators never ended (study C's density
//! runs with the srsenb profile lost their summaries). Here every wait sleeps on a condition
//! variable (a futex), so a waiting TXRX leaves its CPU to the workers.

use std::sync::{Condvar, Mutex};

struct State<T> {
    /// The TTI given to the pool and not yet taken by a worker.
    job: Option<T>,
    /// Workers waiting for a TTI.
    idle: usize,
    /// No more TTIs: workers end once the slot is empty.
    closed: bool,
}

pub(crate) struct Handoff<T> {
    state: Mutex<State<T>>,
    /// Signalled when a TTI is put in the slot or the hand-off closes (workers wait on it).
    for_workers: Condvar,
    /// Signalled when a worker becomes idle or takes the TTI (TXRX waits on it).
    for_clock: Condvar,
}

impl<T> Handoff<T> {
    pub(crate) fn new() -> Handoff<T> {
        Handoff { state: Mutex::new(State { job: None, idle: 0, closed: false }), for_workers: Condvar::new(), for_clock: Condvar::new() }
    }

    /// Waits until a worker is idle and the slot is free, then puts `job` there (taken at once by
    /// that worker). `Err(job)` when the hand-off is closed.
    pub(crate) fn give(&self, job: T) -> Result<(), T> {
        let Ok(mut st) = self.state.lock() else { return Err(job) };
        while !st.closed && (st.idle == 0 || st.job.is_some()) {
            st = match self.for_clock.wait(st) {
                Ok(s) => s,
                Err(_) => return Err(job),
            };
        }
        if st.closed {
            return Err(job);
        }
        st.job = Some(job);
        self.for_workers.notify_one();
        Ok(())
    }

    /// A worker's wait for its next TTI; `None` once closed and drained.
    pub(crate) fn take(&self) -> Option<T> {
        let mut st = self.state.lock().ok()?;
        st.idle += 1;
        self.for_clock.notify_one();
        loop {
            if let Some(job) = st.job.take() {
                st.idle -= 1;
                self.for_clock.notify_one();
                return Some(job);
            }
            if st.closed {
                st.idle -= 1;
                return None;
            }
            st = self.for_workers.wait(st).ok()?;
        }
    }

    /// No more TTIs: every waiting worker and the clock return.
    pub(crate) fn close(&self) {
        if let Ok(mut st) = self.state.lock() {
            st.closed = true;
        }
        self.for_workers.notify_all();
        self.for_clock.notify_all();
    }
}

/// Closes the hand-off when the clock thread ends, however it ends (a panic included), so the
/// workers do not wait for ever.
pub(crate) struct CloseOnDrop<'a, T>(pub(crate) &'a Handoff<T>);

impl<T> Drop for CloseOnDrop<'_, T> {
    fn drop(&mut self) {
        self.0.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn every_job_reaches_one_worker_and_workers_end_on_close() {
        let h = Arc::new(Handoff::new());
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let h = h.clone();
                std::thread::spawn(move || {
                    let mut got = vec![];
                    while let Some(j) = h.take() {
                        got.push(j);
                    }
                    got
                })
            })
            .collect();
        for j in 0..1000u32 {
            h.give(j).unwrap();
        }
        h.close();
        let mut all: Vec<u32> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
        all.sort_unstable();
        assert_eq!(all, (0..1000).collect::<Vec<_>>());
        assert_eq!(h.give(7), Err(7), "closed");
    }
}
