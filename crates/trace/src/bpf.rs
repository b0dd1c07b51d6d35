//! Loads rtlat.bpf.c (tp_btf, falling back to raw_tp), configures its filter and reads its maps.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject};

use crate::skel::{types, RtlatSkel, RtlatSkelBuilder};
use crate::TraceError;

const FILTER_PIDS: u32 = 1;
const FILTER_CGROUP: u32 = 2;
const FILTER_CGROUP_SET: u32 = 3;

/// What the kernel filter selects.
pub(crate) enum Filter {
    Pids { tgids: Vec<u32>, tids: Vec<u32> },
    /// cgroup inode id and which hierarchy (CG_* of rtlat.h).
    Cgroup { id: u64, ctrl: u32 },
    /// A set of cgroups of one hierarchy, empty at start, changed with `add_cgroup`/`remove_cgroup`.
    CgroupSet { ctrl: u32 },
}

/// Raw per-thread counters as the BPF program keeps them.
pub(crate) struct RawThread {
    pub tid: u32,
    pub stats: Box<types::tstats>,
}

pub(crate) struct BpfTracer {
    // Field order is drop order: the skeleton borrows `_storage` and must go first.
    skel: RtlatSkel<'static>,
    _storage: SkelStorage,
    pub attach_kind: &'static str,
    /// None when the kernel refused to switch its run-time statistics on (not permitted).
    stats: Option<StatsSampler>,
    /// The run time charged so far at the sampled ns per run, and the runs it covers: grown at each
    /// read, so it never decreases as the estimate per run changes (a Prometheus counter).
    charged: Mutex<(f64, u64)>,
}

/// What the programs cost, for the overhead report and the collector's health.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct RunStats {
    /// Runs of the programs (every sched_switch and wake-up on the machine), counted by the
    /// programs themselves: exact.
    pub runs: u64,
    /// Time in the programs: each run at the mean run time measured in the sample windows so far.
    /// None before the first window ends, or when the statistics could not be switched on.
    pub run_ns: Option<u64>,
    /// Runs measured in the sample windows (the estimate's sample size).
    pub sampled_runs: u64,
    /// Runs the kernel skipped (recursion): lost events.
    pub missed: u64,
}

/// The kernel's BPF run-time statistics (what `kernel.bpf_stats_enabled=1` turns on) cost every run
/// of every BPF program on the machine two sched_clock() reads and a counter update — tens of ns
/// per event for a tracer whose programs run at every context switch. They are switched on for a
/// window of STATS_WINDOW at the start and then once every STATS_EVERY (5 %), and the run time per
/// run measured in those windows is what the report and the health metrics scale by the exact run
/// count.
const STATS_WINDOW: Duration = Duration::from_millis(100);
const STATS_EVERY: Duration = Duration::from_secs(2);

/// A thread that switches the statistics on for the sample windows and sums the programs' run
/// time and runs within them. Stops (and joins) when dropped.
struct StatsSampler {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// (ns, runs) of the programs within the windows that ended.
    sampled: Arc<Mutex<(u64, u64)>>,
}

impl StatsSampler {
    /// Switches the statistics on for the first window now; None when the kernel refuses.
    fn start(progs: Vec<OwnedFd>) -> Option<StatsSampler> {
        // Held only as long as this fd: nothing global to restore afterwards.
        let first = rtslice_sys::bpf::enable_run_time_stats().ok()?;
        let sampled = Arc::new(Mutex::new((0u64, 0u64)));
        let (stop, rx) = mpsc::channel::<()>();
        let sums = sampled.clone();
        let thread = std::thread::Builder::new()
            .name("rtslice-bpfstats".into())
            .spawn(move || {
                let read = || -> Option<(u64, u64)> {
                    progs.iter().try_fold((0u64, 0u64), |(ns, n), p| {
                        let i = rtslice_sys::bpf::prog_run_stats(p.as_fd()).ok()?;
                        Some((ns + i.run_time_ns, n + i.run_cnt))
                    })
                };
                let mut on = Some(first);
                loop {
                    let Some(fd) = on.take().or_else(|| rtslice_sys::bpf::enable_run_time_stats().ok()) else { return };
                    let before = read();
                    let stopped = !matches!(rx.recv_timeout(STATS_WINDOW), Err(RecvTimeoutError::Timeout));
                    let after = read();
                    drop(fd);
                    if let (Some(b), Some(a), Ok(mut s)) = (before, after, sums.lock()) {
                        s.0 += a.0.saturating_sub(b.0);
                        s.1 += a.1.saturating_sub(b.1);
                    }
                    if stopped || !matches!(rx.recv_timeout(STATS_EVERY - STATS_WINDOW), Err(RecvTimeoutError::Timeout)) {
                        return;
                    }
                }
            })
            .ok()?;
        Some(StatsSampler { stop: Some(stop), thread: Some(thread), sampled })
    }

    fn sampled(&self) -> (u64, u64) {
        self.sampled.lock().map(|s| *s).unwrap_or_default()
    }
}

impl Drop for StatsSampler {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// SAFETY: the skeleton is Send + Sync (libbpf-cargo declares it so); `storage` is only touched in Drop.
unsafe impl Send for BpfTracer {}

/// The heap object libbpf-rs's generated skeleton borrows for its whole life. The generated API
/// takes `&'a mut MaybeUninit<OpenObject>` and ties the skeleton's lifetime to it, so a skeleton
/// kept in a struct needs storage that outlives it: this one is freed when dropped, which
/// `BpfTracer`'s field order (or `try_start`'s scope on failure) puts after the skeleton.
struct SkelStorage(std::ptr::NonNull<MaybeUninit<OpenObject>>);

impl SkelStorage {
    fn new() -> SkelStorage {
        SkelStorage(std::ptr::NonNull::from(Box::leak(Box::new(MaybeUninit::uninit()))))
    }
}

impl Drop for SkelStorage {
    fn drop(&mut self) {
        // SAFETY: the pointer came from Box::leak in `new` and is freed only here, once; every
        // skeleton that borrowed it was dropped before (field order of BpfTracer, or the end of the
        // closure in try_start).
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

static LIBBPF_LOG: Mutex<String> = Mutex::new(String::new());

fn capture_libbpf(_level: libbpf_rs::PrintLevel, msg: String) {
    if let Ok(mut log) = LIBBPF_LOG.lock() {
        // Keep the tail: the verifier's reason comes last.
        if log.len() > 64 * 1024 {
            let cut = log.len() - 32 * 1024;
            let cut = (cut..log.len()).find(|&i| log.is_char_boundary(i)).unwrap_or(log.len());
            log.drain(..cut);
        }
        log.push_str(&msg);
    }
}

fn take_log() -> String {
    let mut log = LIBBPF_LOG.lock().map(|mut l| std::mem::take(&mut *l)).unwrap_or_default();
    if log.len() > 4000 {
        let start = (log.len() - 4000..log.len()).find(|&i| log.is_char_boundary(i)).unwrap_or(0);
        log = format!("…{}", &log[start..]);
    }
    log.trim_end().to_string()
}

/// The demand ring's shape: `slots` buckets of `bucket_ns` each; a slice ending on a CPU is added
/// to at most its last `span` buckets (those its reader has not read yet), the rest to the
/// overflow count ([`BpfTracer::demand_overflow_ns`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DemandRing {
    pub bucket_ns: u64,
    pub slots: u32,
    pub span: u32,
}

impl BpfTracer {
    /// Loads and attaches the tp_btf programs, or the raw_tp ones when tp_btf fails (or when
    /// `raw_only`).
    pub fn start(filter: &Filter, raw_only: bool) -> Result<BpfTracer, TraceError> {
        Self::start_with_demand(filter, raw_only, None)
    }

    /// [`BpfTracer::start`], also summing the traced threads' on-CPU time into a ring of buckets
    /// (`demand`, read with [`BpfTracer::demand_buckets`]).
    pub fn start_with_demand(filter: &Filter, raw_only: bool, demand: Option<DemandRing>) -> Result<BpfTracer, TraceError> {
        libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Warn, capture_libbpf)));
        let mut errors = Vec::new();
        let kinds: &[bool] = if raw_only { &[true] } else { &[false, true] };
        for &raw in kinds {
            match Self::try_start(filter, raw, demand) {
                Ok(t) => return Ok(t),
                Err(e) => errors.push(format!("{}: {e}", if raw { "raw_tp" } else { "tp_btf" })),
            }
        }
        Err(TraceError::Bpf(errors.join("; ")))
    }

    fn try_start(filter: &Filter, raw: bool, demand: Option<DemandRing>) -> Result<BpfTracer, String> {
        take_log();
        let mut storage = SkelStorage::new();
        let result = (|| {
            // SAFETY: `storage` outlives the skeleton built on it (see SkelStorage) and nothing else
            // accesses it while this reference lives.
            let storage_ref: &'static mut MaybeUninit<OpenObject> = unsafe { storage.0.as_mut() };
            let mut open = RtlatSkelBuilder::default().open(storage_ref).map_err(|e| format!("open: {e}"))?;
            let rodata = open.maps.rodata_data.as_deref_mut().ok_or("the object has no .rodata")?;
            match filter {
                Filter::Pids { tgids, tids } => {
                    rodata.filter_mode = FILTER_PIDS;
                    rodata.have_tgids = !tgids.is_empty();
                    rodata.have_tids = !tids.is_empty();
                }
                Filter::Cgroup { id, ctrl } => {
                    rodata.filter_mode = FILTER_CGROUP;
                    rodata.cg_id = *id;
                    rodata.cg_ctrl = *ctrl;
                }
                Filter::CgroupSet { ctrl } => {
                    rodata.filter_mode = FILTER_CGROUP_SET;
                    rodata.cg_ctrl = *ctrl;
                }
            }
            if let Some(ring) = demand {
                rodata.demand_bucket_ns = ring.bucket_ns;
                rodata.demand_slots = ring.slots;
                // More than the ring holds would add a slice's head to slots of later buckets.
                rodata.demand_span = ring.span.clamp(1, ring.slots);
                open.maps.demand.set_max_entries(ring.slots).map_err(|e| format!("size the demand ring: {e}"))?;
            }
            let p = &mut open.progs;
            for prog in [&mut p.wakeup_btf, &mut p.wakeup_new_btf, &mut p.switch_btf] {
                prog.set_autoload(!raw);
            }
            for prog in [&mut p.wakeup_raw, &mut p.wakeup_new_raw, &mut p.switch_raw] {
                prog.set_autoload(raw);
            }
            let mut skel = open.load().map_err(|e| format!("load: {e}\n{}", take_log()))?;
            if let Filter::Pids { tgids, tids } = filter {
                for t in tgids {
                    skel.maps.filter_tgids.update(&t.to_ne_bytes(), &[1], MapFlags::ANY).map_err(|e| e.to_string())?;
                }
                for t in tids {
                    skel.maps.filter_tids.update(&t.to_ne_bytes(), &[1], MapFlags::ANY).map_err(|e| e.to_string())?;
                }
                set_single_tgid(&skel)?;
            }
            skel.attach().map_err(|e| format!("attach: {e}\n{}", take_log()))?;
            if demand.is_some() {
                if let Some(bss) = skel.maps.bss_data.as_deref_mut() {
                    bss.demand_since = rtslice_sys::time::monotonic_ns();
                }
            }
            Ok(skel)
        })();
        match result {
            Ok(skel) => {
                let p = &skel.progs;
                let progs = if raw { [&p.wakeup_raw, &p.wakeup_new_raw, &p.switch_raw] } else { [&p.wakeup_btf, &p.wakeup_new_btf, &p.switch_btf] };
                let fds = progs.iter().filter_map(|p| p.as_fd().try_clone_to_owned().ok()).collect();
                Ok(BpfTracer {
                    skel,
                    _storage: storage,
                    attach_kind: if raw { "raw_tp" } else { "tp_btf" },
                    stats: StatsSampler::start(fds),
                    charged: Mutex::new((0.0, 0)),
                })
            }
            // The failed skeleton (if any) was dropped inside the closure; `storage` goes now.
            Err(e) => Err(e),
        }
    }

    /// Adds processes to the kernel filter (e.g. a workload that started after the session). Only
    /// for sessions started with at least one process (the program skips an empty process filter).
    pub fn add_tgids(&self, tgids: &[u32]) -> Result<(), TraceError> {
        if !self.skel.maps.rodata_data.as_deref().is_some_and(|r| r.have_tgids) {
            return Err(TraceError::Bpf("this session filters by thread or cgroup; processes cannot be added".into()));
        }
        for t in tgids {
            self.skel
                .maps
                .filter_tgids
                .update(&t.to_ne_bytes(), &[1], MapFlags::ANY)
                .map_err(|e| TraceError::Bpf(format!("add tgid {t} to the filter: {e}")))?;
        }
        set_single_tgid(&self.skel).map_err(TraceError::Bpf)
    }

    /// Removes processes from the kernel filter (their threads' statistics stay until `forget`).
    pub fn remove_tgids(&self, tgids: &[u32]) -> Result<(), TraceError> {
        for t in tgids {
            match self.skel.maps.filter_tgids.delete(&t.to_ne_bytes()) {
                Ok(()) => {}
                Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => {}
                Err(e) => return Err(TraceError::Bpf(format!("remove tgid {t} from the filter: {e}"))),
            }
        }
        set_single_tgid(&self.skel).map_err(TraceError::Bpf)
    }

    /// Starts following a cgroup (and its descendants) of a `Filter::CgroupSet` program.
    pub fn add_cgroup(&mut self, id: u64) -> Result<(), TraceError> {
        self.skel
            .maps
            .filter_cgroups
            .update(&id.to_ne_bytes(), &[1], MapFlags::ANY)
            .map_err(|e| TraceError::Bpf(format!("add cgroup id {id} to the filter: {e} (at most 1024 cgroups)")))?;
        self.sync_cgroup_set_size();
        Ok(())
    }

    /// Stops following a cgroup; its threads' statistics stay until `forget`.
    pub fn remove_cgroup(&mut self, id: u64) -> Result<(), TraceError> {
        match self.skel.maps.filter_cgroups.delete(&id.to_ne_bytes()) {
            Ok(()) => {}
            Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => {}
            Err(e) => return Err(TraceError::Bpf(format!("remove cgroup id {id} from the filter: {e}"))),
        }
        self.sync_cgroup_set_size();
        Ok(())
    }

    /// The program skips the hierarchy walk while the set is empty; it learns the size from .bss.
    fn sync_cgroup_set_size(&mut self) {
        let n = self.skel.maps.filter_cgroups.keys().count() as u32;
        if let Some(bss) = self.skel.maps.bss_data.as_deref_mut() {
            // The .bss map is mmapped and shared with the programs: an aligned u32 store, which
            // they see as the old or the new size (either only costs or saves a walk).
            bss.cgroup_set_size = n;
        }
    }

    /// Drops a thread's statistics from the map (an exited thread: its entry would otherwise hold
    /// one of the map's slots for ever).
    pub fn forget(&self, tid: u32) {
        let _ = self.skel.maps.stats.delete(&tid.to_ne_bytes());
    }

    pub fn read(&self) -> Vec<RawThread> {
        let map = &self.skel.maps.stats;
        let mut out = Vec::new();
        let size = std::mem::size_of::<types::tstats>();
        for key in map.keys() {
            let Ok(Some(bytes)) = map.lookup(&key, MapFlags::ANY) else { continue };
            if bytes.len() != size || key.len() != 4 {
                continue;
            }
            // SAFETY: tstats is plain old data generated from the same C struct; sizes checked.
            let stats: types::tstats = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
            out.push(RawThread { tid: u32::from_ne_bytes(key[..4].try_into().unwrap()), stats: Box::new(stats) });
        }
        out.sort_by_key(|t| t.tid);
        out
    }

    /// The demand buckets numbered `from..to` (bucket number = CLOCK_MONOTONIC ns / bucket_ns):
    /// on-CPU ns of each, 0 for a bucket no slice touched. Buckets whose ring slot already holds
    /// a later round (read too late) are `None`.
    pub fn demand_buckets(&self, from: u64, to: u64, slots: u32) -> Vec<Option<u64>> {
        let map = &self.skel.maps.demand;
        let size = std::mem::size_of::<types::demand_bucket>();
        (from..to)
            .map(|idx| {
                let key = ((idx % slots as u64) as u32).to_ne_bytes();
                let Ok(Some(bytes)) = map.lookup(&key, MapFlags::ANY) else { return None };
                if bytes.len() != size {
                    return None;
                }
                // SAFETY: demand_bucket is plain old data generated from the same C struct; size checked.
                let b: types::demand_bucket = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
                match b.index {
                    i if i == idx => Some(b.ns),
                    i if i < idx => Some(0),
                    _ => None,
                }
            })
            .collect()
    }

    /// On-CPU time of slices too long to spread over their buckets: the part before their last
    /// [`DemandRing::span`] buckets.
    pub fn demand_overflow_ns(&self) -> u64 {
        self.bss_u64(std::mem::offset_of!(types::bss, demand_overflow_ns))
    }

    /// Threads whose entry could not be created (stats map full).
    pub fn lost_threads(&self) -> u64 {
        self.bss_u64(std::mem::offset_of!(types::bss, lost_stats))
    }

    /// Events of new threads whose entry could not be made at that moment (the map's allocator or a
    /// bucket lock busy); each such thread's next event made it.
    pub fn unstored_events(&self) -> u64 {
        self.bss_u64(std::mem::offset_of!(types::bss, unstored_events))
    }

    /// A counter of the programs' .bss at `offset`, through the map (a copy made by the kernel)
    /// rather than the mmapped .bss, which the programs write concurrently.
    fn bss_u64(&self, offset: usize) -> u64 {
        match self.skel.maps.bss.lookup(&0u32.to_ne_bytes(), MapFlags::ANY) {
            Ok(Some(bytes)) => bytes.get(offset..offset + 8).and_then(|b| b.try_into().ok()).map(u64::from_ne_bytes).unwrap_or(0),
            _ => 0,
        }
    }

    /// What the attached programs cost so far: exact runs, run time at the sampled ns per run.
    pub fn run_stats(&self) -> RunStats {
        let p = &self.skel.progs;
        let progs = if self.attach_kind == "raw_tp" {
            [&p.wakeup_raw, &p.wakeup_new_raw, &p.switch_raw]
        } else {
            [&p.wakeup_btf, &p.wakeup_new_btf, &p.switch_btf]
        };
        let missed = progs.iter().filter_map(|p| rtslice_sys::bpf::prog_run_stats(p.as_fd()).ok()).map(|i| i.recursion_misses).sum();
        let runs = match self.skel.maps.runs.lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY) {
            Ok(Some(per_cpu)) => per_cpu.iter().filter_map(|v| v.get(..8)?.try_into().ok()).map(u64::from_ne_bytes).sum(),
            _ => 0,
        };
        let (sampled_ns, sampled_runs) = self.stats.as_ref().map(StatsSampler::sampled).unwrap_or_default();
        let run_ns = (sampled_runs > 0).then(|| {
            let mut charged = self.charged.lock().unwrap_or_else(|e| e.into_inner());
            let per_run = sampled_ns as f64 / sampled_runs as f64;
            charged.0 += runs.saturating_sub(charged.1) as f64 * per_run;
            charged.1 = charged.1.max(runs);
            charged.0.round() as u64
        });
        RunStats { runs, run_ns, sampled_runs, missed }
    }
}

#[cfg(test)]
mod tests {
    use libbpf_rs::libbpf_sys::bpf_prog_info;
    use rtslice_sys::bpf::prog_info_layout as at;

    /// rtslice-sys reads the run counters at fixed offsets: they must be the kernel ABI's, as
    /// libbpf-sys generates it from the uapi header.
    #[test]
    fn sys_reads_bpf_prog_info_at_the_abi_offsets() {
        assert_eq!(at::RUN_TIME_NS, std::mem::offset_of!(bpf_prog_info, run_time_ns));
        assert_eq!(at::RUN_CNT, std::mem::offset_of!(bpf_prog_info, run_cnt));
        assert_eq!(at::RECURSION_MISSES, std::mem::offset_of!(bpf_prog_info, recursion_misses));
        assert!(at::SIZE >= std::mem::size_of::<bpf_prog_info>());
    }

    /// hist.rs's hand copies of rtlat.h's histogram sizes are the BPF program's, as the skeleton's
    /// generated types carry them.
    #[test]
    fn hist_constants_match_the_bpf_layout() {
        let h = super::types::hist::default();
        assert_eq!(h.log2_us.len(), crate::hist::LOG2_SLOTS);
        assert_eq!(h.fine.len(), crate::hist::FINE_SLOTS);
    }
}

/// Keeps the program's `single_tgid` fast path in step with the process filter: the one process's
/// tgid when the filter holds exactly one (and no threads: `have_tids` is fixed at load), else 0
/// (the program then looks the maps up).
fn set_single_tgid(skel: &RtlatSkel<'_>) -> Result<(), String> {
    let single_thread_free = !skel.maps.rodata_data.as_deref().is_some_and(|r| r.have_tids);
    let keys: Vec<Vec<u8>> = skel.maps.filter_tgids.keys().take(2).collect();
    let value: u32 = match keys.as_slice() {
        [k] if single_thread_free => k.get(..4).and_then(|b| b.try_into().ok()).map(u32::from_ne_bytes).unwrap_or(0),
        _ => 0,
    };
    skel.maps
        .single_tgid
        .update(&0u32.to_ne_bytes(), &value.to_ne_bytes(), MapFlags::ANY)
        .map_err(|e| format!("set the single-process filter: {e}"))
}
