//! The cell's thread bodies: the TTI clock, the PHY stages, the worker pools, the stack and the
//! user plane. A child module of `runner`, so it shares the cell's private state (`Cell`, jobs,
//! grids) without widening their visibility beyond the runner.

use super::*;
use rtslice_sys::pi_lock::PiLock;

// The user-plane receiver's address, set once before the threads pass the start barrier.
static UP_ADDR: Mutex<Option<Option<SocketAddr>>> = Mutex::new(None);
pub(super) fn set_addr_shared(a: Option<SocketAddr>) {
    *UP_ADDR.lock().expect("addr") = Some(a);
}
pub(super) fn addr_rx_shared() -> Option<SocketAddr> {
    UP_ADDR.lock().expect("addr").flatten()
}

// ---------------------------------------------------------------------------------------------
// Thread bodies.

pub(super) fn clock_loop(
    cell: &Cell,
    profile: Profile,
    fep_tx: Option<Sender<HalfGrid>>,
    l1_tx: Option<SyncSender<Job>>,
    l1tx_tx: Option<SyncSender<(u64, u64, usize)>>,
    pool_tx: Option<Arc<handoff::Handoff<Job>>>,
) {
    // Workers end when the clock does, however it ends.
    let _close = pool_tx.as_deref().map(handoff::CloseOnDrop);
    let mut scratch = Scratch::default();
    let (done_tx, done_rx) = mpsc::sync_channel::<()>(1);
    // Start a little ahead, so every thread is waiting when the first TTI arrives.
    let t0 = clock::monotonic_ns() + 20 * cell.tti_ns;
    let half = SYMBOLS / 2;
    // The radio's receive buffer: a clock that falls further behind than this (blocked by a busy
    // pipeline, or stalled) loses the samples (overflow) and resynchronises to the TTI on the air.
    let radio_buffer_ns = RADIO_BUFFER_NS.max(2 * cell.budget_ns);
    let mut n = 0u64;
    while n < cell.total_ttis {
        if cell.stopping() {
            break;
        }
        // Samples of TTI n are complete at the end of its air time.
        let avail = t0 + (n + 1) * cell.tti_ns;
        let before = clock::monotonic_ns();
        clock::sleep_until_ns(avail);
        let wake = clock::monotonic_ns();
        let drop_both = |cell: &Cell, n: u64, avail: u64| {
            cell.send(Event::Ul { n, avail, done: None, ok: false, iterations: 0, code_blocks: 0 });
            cell.send(Event::Dl { n, avail, done: None });
        };
        if wake > avail + radio_buffer_ns {
            let current = ((wake - t0) / cell.tti_ns).saturating_sub(1).min(cell.total_ttis);
            for k in n..current {
                drop_both(cell, k, t0 + (k + 1) * cell.tti_ns);
            }
            n = current.max(n + 1);
            continue;
        }
        // A wake-up latency only when the clock really slept (not when it was behind already).
        if before < avail {
            cell.send(Event::Tick { avail, wake });
        }
        let (lvl, level) = cell.level(n);
        let buf = (n % level.ul.len() as u64) as usize;
        match profile {
            Profile::OaiLte => {
                // ru-thread transforms the first half of the symbols while fep_processing does the
                // second half, then hands the subframe to lte-softmodem (waiting while it is busy).
                let mut grid = cell.grid();
                let split = level.phy.symbol_offset(half);
                let (a, b) = grid.split_at_mut(split);
                let sent = fep_tx.as_ref().is_some_and(|f| {
                    f.send(HalfGrid { ptr: b.as_mut_ptr(), len: b.len(), buf, lvl, done: done_tx.clone() }).is_ok()
                });
                level.phy.ul_fft(&level.ul[buf].time, a, 0..half, &mut scratch);
                if sent {
                    let _ = done_rx.recv();
                } else {
                    level.phy.ul_fft(&level.ul[buf].time, b, half..SYMBOLS, &mut scratch);
                }
                if let Some(tx) = &l1_tx {
                    if let Err(e) = tx.send(Job { n, lvl, avail, buf, grid }) {
                        cell.put_grid(e.0.grid);
                        drop_both(cell, n, avail);
                    }
                }
            }
            Profile::Srsenb => {
                // TXRX waits for an idle worker, as srsENB's worker pool does.
                if let Some(pool) = &pool_tx {
                    if pool.give(Job { n, lvl, avail, buf, grid: Vec::new() }).is_err() {
                        drop_both(cell, n, avail);
                    }
                }
            }
            Profile::NrGnb => {
                // ru_thread runs the whole front end, then triggers L1_tx and feeds L1_rx.
                let mut grid = cell.grid();
                level.phy.ul_fft(&level.ul[buf].time, &mut grid, 0..SYMBOLS, &mut scratch);
                if let Some(tx) = &l1tx_tx {
                    if tx.send((n, avail, lvl)).is_err() {
                        cell.send(Event::Dl { n, avail, done: None });
                    }
                }
                if let Some(tx) = &l1_tx {
                    if let Err(e) = tx.send(Job { n, lvl, avail, buf, grid }) {
                        cell.put_grid(e.0.grid);
                        cell.send(Event::Ul { n, avail, done: None, ok: false, iterations: 0, code_blocks: 0 });
                    }
                }
            }
        }
        n += 1;
    }
    // Dropping the senders lets the pipeline drain and end.
    cell.stop.store(true, Ordering::Relaxed);
}

pub(super) fn fep_loop(cell: &Cell, rx: Receiver<HalfGrid>) {
    let mut scratch = Scratch::default();
    let half = SYMBOLS / 2;
    while let Ok(job) = rx.recv() {
        // SAFETY: see `HalfGrid`: the owner waits for `done` and does not touch this half meanwhile.
        let part = unsafe { std::slice::from_raw_parts_mut(job.ptr, job.len) };
        let level = &cell.levels[job.lvl];
        level.phy.ul_fft(&level.ul[job.buf].time, part, half..SYMBOLS, &mut scratch);
        let _ = job.done.send(());
    }
}

/// Uplink decode of one job on this thread (OAI LTE lte-softmodem), or with code blocks fanned out
/// to the pool (OAI NR L1_rx_thread).
pub(super) fn l1_loop(
    cell: &Cell,
    profile: Profile,
    rx: Receiver<Job>,
    dl_tx: Option<Sender<Job>>,
    cb_pool: Option<Sender<CbJob>>,
    l2: Option<Sender<Vec<u8>>>,
) {
    let mut scratch = Scratch::default();
    while let Ok(mut job) = rx.recv() {
        let mut payload = Vec::new();
        let level = &cell.levels[job.lvl];
        let (ok, iterations, cbs) = if profile == Profile::NrGnb {
            level.phy.ul_equalize(&job.grid, &mut scratch);
            let llr = Arc::new(std::mem::take(&mut scratch.llr));
            let (rtx, rrx) = mpsc::channel();
            let ncb = level.phy.cbs.len();
            for cb in 0..ncb {
                if let Some(p) = &cb_pool {
                    let _ = p.send(CbJob { cb, buf: job.buf, lvl: job.lvl, llr: llr.clone(), reply: rtx.clone() });
                }
            }
            drop(rtx);
            let mut ok = true;
            let mut it = 0;
            let mut got = 0;
            while let Ok((i, good, bytes)) = rrx.recv() {
                ok &= good;
                it += i;
                got += 1;
                payload.extend(bytes);
            }
            scratch.llr = Arc::try_unwrap(llr).unwrap_or_default();
            (ok && got == ncb, it, ncb as u32)
        } else {
            let r = level.phy.ul_decode(&job.grid, &level.ul[job.buf], &mut scratch, &mut payload);
            (r.ok, r.iterations_sum, r.code_blocks)
        };
        let done = clock::monotonic_ns();
        cell.send(Event::Ul { n: job.n, avail: job.avail, done: Some(done), ok, iterations, code_blocks: cbs });
        if ok && done <= job.avail + cell.budget_ns {
            if let Some(l2) = &l2 {
                let _ = l2.send(payload);
            }
        }
        if profile == Profile::OaiLte {
            // lte-softmodem also builds the downlink subframe; feptx_thread does the IFFT.
            level.phy.dl_build(job.n, &mut job.grid, &mut scratch);
            match &dl_tx {
                Some(tx) => {
                    if let Err(e) = tx.send(job) {
                        cell.put_grid(e.0.grid);
                    }
                }
                None => cell.put_grid(job.grid),
            }
        } else {
            cell.put_grid(job.grid);
        }
    }
}

pub(super) fn dl_loop(cell: &Cell, rx: Receiver<Job>) {
    let mut scratch = Scratch::default();
    while let Ok(mut job) = rx.recv() {
        cell.levels[job.lvl].phy.dl_ifft(&mut job.grid, &mut scratch);
        cell.send(Event::Dl { n: job.n, avail: job.avail, done: Some(clock::monotonic_ns()) });
        cell.put_grid(job.grid);
    }
}

pub(super) fn l1tx_loop(cell: &Cell, rx: Receiver<(u64, u64, usize)>) {
    let mut scratch = Scratch::default();
    while let Ok((n, avail, lvl)) = rx.recv() {
        let mut grid = cell.grid();
        let phy = &cell.levels[lvl].phy;
        phy.dl_build(n, &mut grid, &mut scratch);
        phy.dl_ifft(&mut grid, &mut scratch);
        cell.send(Event::Dl { n, avail, done: Some(clock::monotonic_ns()) });
        cell.put_grid(grid);
    }
}

/// OAI NR's Tpool queue: the worker holding its lock waits for the next code block, the others
/// wait for the lock, so each block goes to one worker (OAI's pool, a mutex and a condition
/// variable, likewise wakes one). With `pi`, that lock inherits priority (a PI futex, as a
/// `PTHREAD_PRIO_INHERIT` mutex): a worker waiting for it lends its priority, or under
/// SCHED_DEADLINE its deadline and budget, to the holder. Measured under per-thread DEADLINE
/// budgets it made things worse, not better (docs/results.md, issue 15, Run 6): the wait is for a
/// block a throttled worker already has, not for the lock.
pub(super) struct CbQueue {
    rx: Mutex<Receiver<CbJob>>,
    pi: Option<PiLock>,
}

impl CbQueue {
    pub(super) fn new(rx: Receiver<CbJob>, pi: bool) -> CbQueue {
        CbQueue { rx: Mutex::new(rx), pi: pi.then(PiLock::new) }
    }

    /// The next code block; `None` once the pipeline has ended.
    fn take(&self) -> Option<CbJob> {
        // Only the PI lock is ever waited for when it is there: the std mutex is then uncontended.
        let _pi = match self.pi.as_ref().map(PiLock::lock) {
            Some(Ok(g)) => Some(g),
            Some(Err(e)) => {
                eprintln!("rtslice emulate: a Tpool worker stops: the kernel refused its PI lock ({e}); run without --pi-locks");
                return None;
            }
            None => None,
        };
        self.rx.lock().ok()?.recv().ok()
    }
}

/// srsENB WORKERn: the whole TTI (FFT, decode, DL build, IFFT) on one thread.
pub(super) fn worker_loop(cell: &Cell, pool: Arc<handoff::Handoff<Job>>, l2: Option<Sender<Vec<u8>>>) {
    let mut scratch = Scratch::default();
    let mut grid = vec![Complex32::new(0.0, 0.0); cell.grid_len()];
    while let Some(job) = pool.take() {
        let Level { phy, ul } = &cell.levels[job.lvl];
        let sf = &ul[job.buf];
        phy.ul_fft(&sf.time, &mut grid, 0..SYMBOLS, &mut scratch);
        let mut payload = Vec::new();
        let r = phy.ul_decode(&grid, sf, &mut scratch, &mut payload);
        let done = clock::monotonic_ns();
        cell.send(Event::Ul { n: job.n, avail: job.avail, done: Some(done), ok: r.ok, iterations: r.iterations_sum, code_blocks: r.code_blocks });
        if r.ok && done <= job.avail + cell.budget_ns {
            if let Some(l2) = &l2 {
                let _ = l2.send(payload);
            }
        }
        phy.dl_build(job.n, &mut grid, &mut scratch);
        phy.dl_ifft(&mut grid, &mut scratch);
        cell.send(Event::Dl { n: job.n, avail: job.avail, done: Some(clock::monotonic_ns()) });
    }
}

/// OAI NR Tpool worker: one code block per job.
pub(super) fn cb_worker_loop(cell: &Cell, pool: Arc<CbQueue>) {
    let mut work = DecoderWork::default();
    while let Some(job) = pool.take() {
        let level = &cell.levels[job.lvl];
        let (d, ok) = level.phy.decode_cb(job.cb, &job.llr, &level.ul[job.buf].info[job.cb], &mut work);
        let mut bytes = Vec::new();
        if ok {
            pack_bits(&work.hard, &mut bytes);
        }
        let _ = job.reply.send((d.iterations, ok, bytes));
    }
}

/// srsENB STACK: MAC/RLC work on delivered uplink PDUs (reassembly checksum), then to the tunnel.
pub(super) fn stack_loop(cell: &Cell, rx: Receiver<Vec<u8>>, up: Option<Sender<Vec<u8>>>) {
    let _ = cell;
    while let Ok(pdu) = rx.recv() {
        let crc = crc32(&pdu);
        let mut sdu = pdu;
        sdu.extend_from_slice(&crc.to_be_bytes());
        if let Some(up) = &up {
            let _ = up.send(sdu);
        }
    }
}

/// GTP-U towards the core: each delivered payload in datagrams of at most 1,400 bytes behind an
/// 8-byte GTPv1-U header (flags 0x30, type 255 = G-PDU, length, TEID).
pub(super) fn up_tx_loop(cell: &Cell, rx: Receiver<Vec<u8>>, addr: Option<SocketAddr>) {
    let sock = addr.and_then(|a| {
        let local = if a.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
        let s = UdpSocket::bind(local).ok()?;
        s.connect(a).ok()?;
        Some(s)
    });
    let mut dgram = Vec::with_capacity(1408);
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(payload) => {
                let Some(s) = &sock else { continue };
                for chunk in payload.chunks(1400) {
                    dgram.clear();
                    dgram.extend_from_slice(&[0x30, 0xFF]);
                    dgram.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
                    dgram.extend_from_slice(&0x0000_0001u32.to_be_bytes());
                    dgram.extend_from_slice(chunk);
                    if s.send(&dgram).is_ok() {
                        cell.up_sent.fetch_add(1, Ordering::Relaxed);
                        cell.up_bytes_sent.fetch_add(dgram.len(), Ordering::Relaxed);
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            // Every producer (L1, workers, stack) has ended: the pipeline is drained.
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
}

pub(super) fn bind_userplane(up: &UserPlane) -> Result<UdpSocket, String> {
    if let Some(ns) = &up.netns {
        rtslice_sys::netns::enter(ns).map_err(|e| e.to_string())?;
    }
    let bind = up.bind.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
    let s = UdpSocket::bind(bind).map_err(|e| format!("cannot bind the user-plane socket to {bind}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_millis(100))).map_err(|e| e.to_string())?;
    Ok(s)
}

pub(super) fn up_rx_loop(cell: &Cell, sock: UdpSocket) {
    let mut buf = vec![0u8; 65536];
    let mut idle_after_stop = 0;
    loop {
        match sock.recv(&mut buf) {
            Ok(n) => {
                cell.up_received.fetch_add(1, Ordering::Relaxed);
                cell.up_bytes_received.fetch_add(n, Ordering::Relaxed);
            }
            Err(_) => {
                if cell.stop.load(Ordering::Relaxed) {
                    idle_after_stop += 1;
                    if idle_after_stop >= 2 {
                        break;
                    }
                }
            }
        }
    }
}

/// Control-plane task: wakes every `period_ms` (absolute time) and builds and checks a message.
pub(super) fn control_loop(cell: &Cell, period_ms: u64) {
    let period = period_ms.max(1) * 1_000_000;
    let mut next = clock::monotonic_ns() + period;
    let mut seq = 0u64;
    while !cell.stopping() {
        // Sleep in slices so that the end of the run is noticed within 50 ms.
        let now = clock::monotonic_ns();
        if now < next {
            clock::sleep_until_ns(next.min(now + 50_000_000));
            continue;
        }
        next += period;
        seq += 1;
        let msg = serde_json::json!({ "procedure": "status", "seq": seq, "cells": [{ "id": 1, "ues": seq % 8 }] });
        let bytes = serde_json::to_vec(&msg).unwrap_or_default();
        std::hint::black_box(crc32(&bytes));
    }
}

/// CRC-32 (IEEE), bitwise: what RLC/GTP layers spend on integrity per byte.
pub(super) fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}
