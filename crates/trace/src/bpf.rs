//! Loads rtlat.bpf.c (tp_btf, falling back to raw_tp), configures its filter and reads its maps.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject};

use crate::skel::{types, RtlatSkel, RtlatSkelBuilder};
use crate::TraceError;

const FILTER_PIDS: u32 = 1;
const FILTER_CGROUP: u32 = 2;

/// What the kernel filter selects.
pub(crate) enum Filter {
    Pids { tgids: Vec<u32>, tids: Vec<u32> },
    /// cgroup inode id and which hierarchy (CG_* of rtlat.h).
    Cgroup { id: u64, ctrl: u32 },
}

/// Raw per-thread counters as the BPF program keeps them.
pub(crate) struct RawThread {
    pub tid: u32,
    pub stats: Box<types::tstats>,
}

pub(crate) struct BpfTracer {
    // Drop order matters: the skeleton borrows `storage` and must go first (see Drop).
    skel: std::mem::ManuallyDrop<RtlatSkel<'static>>,
    storage: *mut MaybeUninit<OpenObject>,
    pub attach_kind: &'static str,
    stats_fd: Option<OwnedFd>,
}

// SAFETY: the skeleton is Send + Sync (libbpf-cargo declares it so); `storage` is only touched in Drop.
unsafe impl Send for BpfTracer {}

impl Drop for BpfTracer {
    fn drop(&mut self) {
        // SAFETY: the skeleton is dropped exactly once, before the storage it borrows is freed.
        unsafe {
            std::mem::ManuallyDrop::drop(&mut self.skel);
            drop(Box::from_raw(self.storage));
        }
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

impl BpfTracer {
    /// Loads and attaches the tp_btf programs, or the raw_tp ones when tp_btf fails (or when
    /// `raw_only`).
    pub fn start(filter: &Filter, raw_only: bool) -> Result<BpfTracer, TraceError> {
        libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Warn, capture_libbpf)));
        let mut errors = Vec::new();
        let kinds: &[bool] = if raw_only { &[true] } else { &[false, true] };
        for &raw in kinds {
            match Self::try_start(filter, raw) {
                Ok(t) => return Ok(t),
                Err(e) => errors.push(format!("{}: {e}", if raw { "raw_tp" } else { "tp_btf" })),
            }
        }
        Err(TraceError::Bpf(errors.join("; ")))
    }

    fn try_start(filter: &Filter, raw: bool) -> Result<BpfTracer, String> {
        take_log();
        let storage: *mut MaybeUninit<OpenObject> = Box::into_raw(Box::new(MaybeUninit::uninit()));
        let result = (|| {
            // SAFETY: `storage` lives until after the skeleton is dropped (BpfTracer::drop, or below).
            let storage_ref: &'static mut MaybeUninit<OpenObject> = unsafe { &mut *storage };
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
            }
            // Run-time statistics of BPF programs (what kernel.bpf_stats_enabled=1 turns on), held
            // only as long as this fd: nothing global to restore afterwards.
            // SAFETY: plain syscall wrapper; a negative return is an error code.
            let fd = unsafe { libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME) };
            let stats_fd = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) });
            skel.attach().map_err(|e| format!("attach: {e}\n{}", take_log()))?;
            Ok((skel, stats_fd))
        })();
        match result {
            Ok((skel, stats_fd)) => Ok(BpfTracer {
                skel: std::mem::ManuallyDrop::new(skel),
                storage,
                attach_kind: if raw { "raw_tp" } else { "tp_btf" },
                stats_fd,
            }),
            Err(e) => {
                // SAFETY: the failed skeleton (if any) was dropped inside the closure.
                unsafe { drop(Box::from_raw(storage)) };
                Err(e)
            }
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
        Ok(())
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

    /// Threads whose entry could not be created (stats map full).
    pub fn lost_threads(&self) -> u64 {
        match self.skel.maps.bss_data.as_deref() {
            // SAFETY: .bss is mmapped and written by the kernel concurrently; read volatile.
            Some(bss) => unsafe { std::ptr::read_volatile(&bss.lost_stats) },
            None => 0,
        }
    }

    /// (total run time ns, run count, runs the kernel skipped) of the attached programs; time and
    /// count only while bpf_stats could be enabled. Skipped runs (recursion misses) are lost events.
    pub fn run_stats(&self) -> (Option<(u64, u64)>, u64) {
        let p = &self.skel.progs;
        let progs = if self.attach_kind == "raw_tp" {
            [&p.wakeup_raw, &p.wakeup_new_raw, &p.switch_raw]
        } else {
            [&p.wakeup_btf, &p.wakeup_new_btf, &p.switch_btf]
        };
        let (mut ns, mut cnt, mut missed) = (0, 0, 0);
        for prog in progs {
            let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
            let mut len = std::mem::size_of_val(&info) as u32;
            // SAFETY: info is a valid, zeroed bpf_prog_info of `len` bytes.
            let rc = unsafe {
                libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(
                    prog.as_fd().as_raw_fd(),
                    &mut info,
                    &mut len,
                )
            };
            if rc != 0 {
                return (None, 0);
            }
            ns += info.run_time_ns;
            cnt += info.run_cnt;
            missed += info.recursion_misses;
        }
        (self.stats_fd.as_ref().map(|_| (ns, cnt)), missed)
    }
}
