//! Readers of /proc and of the few /sys files about CPUs. Per-process and per-thread files go
//! through the `procfs` crate (it handles `comm` with spaces and parentheses, missing fields of
//! older kernels); the system-wide tables it does not model the way rtslice needs (per-CPU rows of
//! /proc/stat keyed by CPU id, /proc/softirqs, /proc/net/snmp) are parsed here, once.
//!
//! A thread or process that exits between listing and reading is normal: readers of one task
//! return `None` (or skip it) instead of failing.

use std::path::{Path, PathBuf};

use procfs::process::{Process, Task};

use crate::cpulist::parse_cpu_list;
use crate::error::{Result, SysError};

fn task(pid: u32, tid: u32) -> Option<Task> {
    Process::new(pid as i32).ok()?.task_from_tid(tid as i32).ok()
}

/// Thread ids of process `pid`, sorted (empty when it is gone).
pub fn tasks(pid: u32) -> Vec<u32> {
    let mut v: Vec<u32> = Process::new(pid as i32)
        .and_then(|p| p.tasks())
        .map(|it| it.flatten().map(|t| t.tid as u32).collect())
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// True while /proc/<pid> exists (the process, or a zombie of it, is there).
pub fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The process (thread group) thread `tid` belongs to.
pub fn tgid_of(tid: u32) -> Option<u32> {
    // /proc/<tid> resolves for any thread id, not only for group leaders.
    Process::new(tid as i32).ok()?.status().ok().map(|s| s.tgid as u32)
}

/// The thread's name (`comm`, at most 15 bytes); `None` when it is gone.
pub fn comm(pid: u32, tid: u32) -> Option<String> {
    name_file(format!("/proc/{pid}/task/{tid}/comm"))
}

/// A `comm` file without its newline.
fn name_file(path: String) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim_end().to_string())
}

/// /proc/PID/stat of a process, or of a thread given its tid (/proc/TID resolves for any thread);
/// `None` when it is gone (or for pid 0 and negative ids, which name no task).
pub fn process_stat(pid: i32) -> Option<procfs::process::Stat> {
    if pid <= 0 {
        return None;
    }
    Process::new(pid).ok()?.stat().ok()
}

/// The CPU a thread last ran on (field `processor` of /proc/TID/stat); `None` when it is gone. A
/// sleeping thread keeps this CPU until it wakes up, even when its affinity no longer allows it.
pub fn last_cpu(tid: i32) -> Option<u32> {
    process_stat(tid).and_then(|s| s.processor).map(|c| c as u32)
}

/// A process's name (/proc/PID/comm), without the newline; `None` when it is gone.
pub fn process_comm(pid: i32) -> Option<String> {
    name_file(format!("/proc/{pid}/comm"))
}

/// PIDs of every process whose name is `name` (like `pgrep -x`).
pub fn pids_named(name: &str) -> Vec<i32> {
    let mut pids: Vec<i32> = match procfs::process::all_processes() {
        Ok(all) => all.filter_map(|p| p.ok()).map(|p| p.pid()).filter(|&pid| process_comm(pid).as_deref() == Some(name)).collect(),
        Err(_) => Vec::new(),
    };
    pids.sort_unstable();
    pids
}

/// True for kernel threads (PF_KTHREAD in /proc/PID/stat flags), and for PIDs that are gone (nothing to
/// move either way).
pub fn is_kernel_thread(pid: i32) -> bool {
    const PF_KTHREAD: u32 = 0x0020_0000;
    process_stat(pid).map(|s| s.flags & PF_KTHREAD != 0).unwrap_or(true)
}

/// True for threads whose CPU affinity the kernel owns (PF_NO_SETAFFINITY in /proc/<tid>/stat's
/// flags: per-CPU kernel threads, workqueue rescuers); sched_setaffinity refuses them.
pub fn no_setaffinity(tid: i32) -> bool {
    const PF_NO_SETAFFINITY: u32 = 0x0400_0000;
    process_stat(tid).is_some_and(|s| s.flags & PF_NO_SETAFFINITY != 0)
}

/// The text of /proc/PID/cgroup (`hierarchy-id:controllers:path` lines); `None` when it is gone.
pub fn cgroup_membership(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()
}

/// Scheduling fields of /proc/<pid>/task/<tid>/stat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskSched {
    /// The kernel's numeric policy (field 41).
    pub policy: u32,
    /// Real-time priority 1..99, 0 for non-RT (field 40).
    pub rt_priority: u32,
    /// The CPU it last ran on (field 39).
    pub processor: u32,
    /// The priority it runs at now (field 18): 20 + nice for SCHED_OTHER, −1 − its real-time
    /// priority for FIFO/RR, −100 for SCHED_DEADLINE — a priority-inheritance boost included.
    pub priority: i64,
}

pub fn task_sched(pid: u32, tid: u32) -> Option<TaskSched> {
    let stat = task(pid, tid)?.stat().ok()?;
    Some(TaskSched { policy: stat.policy?, rt_priority: stat.rt_priority?, processor: stat.processor? as u32, priority: stat.priority })
}

/// Cumulative per-thread scheduler counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedStat {
    /// Time on CPU (ns): schedstat's sum_exec_runtime (exact, not tick-sampled).
    pub oncpu_ns: u64,
    /// Time waiting on a run queue (ns): schedstat's run_delay.
    pub run_delay_ns: u64,
    /// Times it was switched in (timeslices): schedstat's pcount.
    pub slices: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    /// se.nr_migrations of /proc/…/sched (0 when that file is absent: CONFIG_SCHED_DEBUG=n).
    pub migrations: u64,
}

/// Reads /proc/<pid>/task/<tid>/{schedstat,status,sched}. None when the thread is gone.
pub fn schedstat(pid: u32, tid: u32) -> Option<SchedStat> {
    let t = task(pid, tid)?;
    let ss = t.schedstat().ok()?;
    let status = t.status().ok();
    let sched = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/sched")).unwrap_or_default();
    Some(SchedStat {
        oncpu_ns: ss.sum_exec_runtime,
        run_delay_ns: ss.run_delay,
        slices: ss.pcount,
        voluntary_switches: status.as_ref().and_then(|s| s.voluntary_ctxt_switches).unwrap_or(0),
        involuntary_switches: status.as_ref().and_then(|s| s.nonvoluntary_ctxt_switches).unwrap_or(0),
        migrations: sched_field(&sched, "se.nr_migrations").unwrap_or(0),
    })
}

/// Time on CPU (ns) of one thread, from schedstat alone (cheaper than [`schedstat`]).
pub fn oncpu_ns(pid: u32, tid: u32) -> Option<u64> {
    task(pid, tid)?.schedstat().ok().map(|s| s.sum_exec_runtime)
}

/// Voluntary + involuntary context switches of one thread.
pub fn context_switches(pid: u32, tid: u32) -> Option<u64> {
    let s = task(pid, tid)?.status().ok()?;
    Some(s.voluntary_ctxt_switches.unwrap_or(0) + s.nonvoluntary_ctxt_switches.unwrap_or(0))
}

/// A `key : value` line of /proc/…/sched.
fn sched_field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.trim_start().strip_prefix(key))
        .and_then(|r| r.trim_start_matches([' ', ':', '\t']).split_whitespace().next()?.parse().ok())
}

/// Children of one thread (/proc/<pid>/task/<tid>/children).
pub fn children(pid: u32, tid: u32) -> Vec<u32> {
    task(pid, tid).and_then(|t| t.children().ok()).unwrap_or_default()
}

/// `pid` and all its descendants, sorted (a workload may be a wrapper with children).
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        for t in tasks(p) {
            out.extend(children(p, t));
        }
        i += 1;
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Ticks (USER_HZ) of one row of /proc/stat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTicks {
    /// user + nice + system + idle + iowait + irq + softirq + steal (guest time is already in user).
    pub total: u64,
    /// idle + iowait.
    pub idle: u64,
    pub softirq: u64,
    /// Time the hypervisor ran something else while this CPU had work (a guest's paravirtual
    /// steal time; 0 on bare metal and where the hypervisor does not report it).
    pub steal: u64,
}

impl CpuTicks {
    pub fn busy(&self) -> u64 {
        self.total.saturating_sub(self.idle)
    }
}

/// /proc/stat's CPU rows: the whole machine and each online CPU by id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuStat {
    pub all: CpuTicks,
    pub cpus: Vec<(u32, CpuTicks)>,
}

/// Parses the text of /proc/stat. Rows with fewer than seven values (older than 2.6) are skipped.
pub fn parse_cpu_stat(text: &str) -> CpuStat {
    let mut out = CpuStat::default();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("cpu") else { continue };
        let mut fields = rest.split_whitespace();
        let id = if rest.starts_with(' ') {
            None
        } else {
            match fields.next().map(str::parse::<u32>) {
                Some(Ok(id)) => Some(id),
                _ => continue,
            }
        };
        let v: Vec<u64> = fields.filter_map(|x| x.parse().ok()).collect();
        if v.len() < 7 {
            continue;
        }
        let ticks = CpuTicks { total: v.iter().take(8).sum(), idle: v[3] + v[4], softirq: v[6], steal: v.get(7).copied().unwrap_or(0) };
        match id {
            Some(id) => out.cpus.push((id, ticks)),
            None => out.all = ticks,
        }
    }
    out
}

/// How many of /proc/stat's (and /proc/<pid>/stat's) ticks make a second: USER_HZ, whatever the
/// kernel's own HZ.
pub fn ticks_per_second() -> u64 {
    rustix::param::clock_ticks_per_second()
}

/// Each online CPU's steal time so far, in seconds (empty when /proc/stat is unreadable). The
/// kernel counts it in nanoseconds but shows it in USER_HZ ticks: to within 10 ms per reading.
pub fn stolen_s() -> Vec<(u32, f64)> {
    let per_tick = 1.0 / ticks_per_second().max(1) as f64;
    cpu_stat().map(|s| s.cpus.iter().map(|(cpu, t)| (*cpu, t.steal as f64 * per_tick)).collect()).unwrap_or_default()
}

/// What the hypervisor took from each CPU between two [`stolen_s`] readings, in seconds. A CPU in
/// only one of them (taken offline or brought online meanwhile) is left out: its time is unknown.
pub fn stolen_between(before: &[(u32, f64)], after: &[(u32, f64)]) -> Vec<(u32, f64)> {
    after
        .iter()
        .filter_map(|(cpu, t1)| {
            let t0 = before.iter().find(|(c, _)| c == cpu)?.1;
            Some((*cpu, (t1 - t0).max(0.0)))
        })
        .collect()
}

/// /proc/stat now.
pub fn cpu_stat() -> Result<CpuStat> {
    std::fs::read_to_string("/proc/stat").map(|t| parse_cpu_stat(&t)).map_err(SysError::read("/proc/stat"))
}

/// /proc/softirqs text: (name, counts per possible CPU in CPU order) for every row.
pub fn parse_softirqs(text: &str) -> Vec<(String, Vec<u64>)> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            Some((name.trim().to_string(), rest.split_whitespace().filter_map(|w| w.parse().ok()).collect()))
        })
        .collect()
}

/// /proc/softirqs now (empty when unreadable).
pub fn softirqs() -> Vec<(String, Vec<u64>)> {
    std::fs::read_to_string("/proc/softirqs").map(|t| parse_softirqs(&t)).unwrap_or_default()
}

/// One row of /proc/softirqs now (e.g. `NET_RX`); empty when absent.
pub fn softirq_row(name: &str) -> Vec<u64> {
    softirqs().into_iter().find(|(n, _)| n == name).map(|(_, v)| v).unwrap_or_default()
}

/// One line of /proc/interrupts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IrqLine {
    /// The row's name: a number for device IRQs, `LOC`, `NMI`, `ERR`, … for the others.
    pub id: String,
    /// Everything after the counters: chip, hwirq, trigger and the action names.
    pub desc: String,
    pub per_cpu: Vec<u64>,
}

/// Parses /proc/interrupts text. Rows with a single total (ERR, MIS) get zeros for every CPU so
/// each row has one count per CPU column.
pub fn parse_interrupts(text: &str) -> Vec<IrqLine> {
    let mut lines = text.lines();
    let ncpu = lines.next().map(|h| h.split_whitespace().filter(|w| w.starts_with("CPU")).count()).unwrap_or(0);
    let mut out = Vec::new();
    for line in lines {
        let Some((id, rest)) = line.split_once(':') else { continue };
        let mut words = rest.split_whitespace().peekable();
        let mut per_cpu = Vec::with_capacity(ncpu);
        while per_cpu.len() < ncpu {
            match words.peek().and_then(|w| w.parse::<u64>().ok()) {
                Some(v) => {
                    per_cpu.push(v);
                    words.next();
                }
                None => break,
            }
        }
        per_cpu.resize(ncpu, 0);
        out.push(IrqLine { id: id.trim().to_string(), desc: words.collect::<Vec<_>>().join(" "), per_cpu });
    }
    out
}

/// /proc/interrupts now (empty when unreadable).
pub fn interrupts() -> Vec<IrqLine> {
    std::fs::read_to_string("/proc/interrupts").map(|t| parse_interrupts(&t)).unwrap_or_default()
}

/// (tgid, tid) of every thread in cgroup directory `dir` and its descendants (v1 `tasks`, v2
/// `cgroup.threads`), sorted and unique.
pub fn threads_in_cgroup(dir: &Path) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for file in ["tasks", "cgroup.threads"] {
            if let Ok(text) = std::fs::read_to_string(d.join(file)) {
                for tid in text.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
                    out.push((tgid_of(tid).unwrap_or(tid), tid));
                }
                break;
            }
        }
        if let Ok(rd) = std::fs::read_dir(&d) {
            stack.extend(rd.flatten().filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false)).map(|e| e.path()));
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// A counter of /proc/net/snmp text, e.g. `("Udp", "InDatagrams")`: a header line names the
/// columns, the next line with the same prefix holds the values.
pub fn parse_snmp(text: &str, protocol: &str, key: &str) -> Option<u64> {
    let prefix = format!("{protocol}:");
    let mut rows = text.lines().filter(|l| l.starts_with(&prefix));
    let names: Vec<&str> = rows.next()?.split_whitespace().collect();
    let values: Vec<&str> = rows.next()?.split_whitespace().collect();
    names.iter().position(|n| *n == key).and_then(|i| values.get(i)?.parse().ok())
}

/// A counter of /proc/<pid>/net/snmp: the network namespace of process `pid`.
pub fn snmp_of(pid: u32, protocol: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/snmp")).ok()?;
    parse_snmp(&text, protocol, key)
}

/// Packets received on device `dev` as seen from the network namespace of process `pid`.
pub fn rx_packets_of(pid: u32, dev: &str) -> Option<u64> {
    Process::new(pid as i32).ok()?.dev_status().ok()?.get(dev).map(|d| d.recv_packets)
}

/// The kernel and the machine, as a report's header shows them. Each field is None when its file is
/// unreadable (a container, a locked-down debugfs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KernelFacts {
    /// /proc/cpuinfo `model name` of the first CPU.
    pub cpu_model: Option<String>,
    /// /proc/meminfo MemTotal, bytes.
    pub mem_total_bytes: Option<u64>,
    /// /proc/sys/kernel/osrelease, e.g. `6.18.0`.
    pub release: Option<String>,
    /// /proc/version: the build string (carries PREEMPT, PREEMPT_RT, PREEMPT_DYNAMIC).
    pub version: Option<String>,
    /// /sys/kernel/debug/sched/preempt, e.g. `(none) voluntary full` (PREEMPT_DYNAMIC kernels).
    pub preempt_modes: Option<String>,
    /// /proc/cmdline.
    pub cmdline: Option<String>,
    /// /proc/sys/kernel/hostname.
    pub hostname: Option<String>,
}

fn text(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

pub fn kernel_facts() -> KernelFacts {
    use procfs::Current;
    KernelFacts {
        cpu_model: procfs::CpuInfo::current().ok().and_then(|c| c.model_name(0).map(|m| m.trim().to_string())),
        mem_total_bytes: procfs::Meminfo::current().ok().map(|m| m.mem_total),
        release: text("/proc/sys/kernel/osrelease"),
        version: text("/proc/version"),
        preempt_modes: text("/sys/kernel/debug/sched/preempt"),
        cmdline: text("/proc/cmdline"),
        hostname: text("/proc/sys/kernel/hostname"),
    }
}

fn cpu_file(path: &str) -> Result<Vec<u32>> {
    let text = std::fs::read_to_string(path).map_err(SysError::read(path))?;
    parse_cpu_list(&text).map_err(|e| SysError::Invalid(format!("{path}: {e}")))
}

/// /sys/devices/system/cpu/online.
pub fn online_cpus() -> Result<Vec<u32>> {
    cpu_file("/sys/devices/system/cpu/online")
}

/// Online CPUs according to `sysconf(_SC_NPROCESSORS_ONLN)`, at least 1: the fallback for when
/// [`online_cpus`] cannot read /sys (prefer the list: it names the CPUs, not just their count).
pub fn online_cpu_count() -> u32 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN) {
        Ok(Some(n)) if n > 0 => n as u32,
        _ => 1,
    }
}

/// /sys/devices/system/cpu/isolated (isolcpus=); empty when the file is absent.
pub fn isolated_cpus() -> Result<Vec<u32>> {
    if !Path::new("/sys/devices/system/cpu/isolated").exists() {
        return Ok(Vec::new());
    }
    cpu_file("/sys/devices/system/cpu/isolated")
}

/// A mounted cgroup hierarchy, as /proc/self/mountinfo lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupMount {
    /// The mount point (mountinfo's octal escapes of space, tab, newline and backslash undone).
    pub path: PathBuf,
    /// The unified hierarchy (`cgroup2`) rather than a v1 one.
    pub unified: bool,
    /// The super options: on v1 the hierarchy's controllers are among them (`rw,cpuset`).
    pub options: Vec<String>,
}

impl CgroupMount {
    /// A v1 hierarchy with this controller.
    pub fn has_controller(&self, controller: &str) -> bool {
        !self.unified && self.options.iter().any(|o| o == controller)
    }
}

/// The cgroup mounts in mountinfo text, in its order (a line: `… mount_point … - fstype source
/// super_options`). Pure, so layouts of other hosts can be parsed in tests.
pub fn parse_cgroup_mounts(text: &str) -> Vec<CgroupMount> {
    let unescape = |s: &str| s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\");
    let mut mounts = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let Some(mount_point) = left.split_whitespace().nth(4) else { continue };
        let mut r = right.split_whitespace();
        let unified = match r.next() {
            Some("cgroup2") => true,
            Some("cgroup") => false,
            _ => continue,
        };
        let _source = r.next();
        let options = r.next().unwrap_or("").split(',').filter(|o| !o.is_empty()).map(String::from).collect();
        mounts.push(CgroupMount { path: PathBuf::from(unescape(mount_point)), unified, options });
    }
    mounts
}

/// This process's cgroup mounts (/proc/self/mountinfo).
pub fn cgroup_mounts() -> Result<Vec<CgroupMount>> {
    let path = "/proc/self/mountinfo";
    Ok(parse_cgroup_mounts(&std::fs::read_to_string(path).map_err(SysError::read(path))?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_mounts_of_a_hybrid_host_with_an_escaped_path() {
        let text = "\
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
34 31 0:31 / /sys/fs/cgroup/my\\040tree rw - cgroup2 cgroup2 rw,nsdelegate
35 22 0:5 / /proc rw - proc proc rw
";
        let m = parse_cgroup_mounts(text);
        assert_eq!(m.len(), 3);
        assert!(m[0].has_controller("cpu") && !m[0].has_controller("cpuset"));
        assert_eq!(m[1].path, PathBuf::from("/sys/fs/cgroup/cpuset"));
        assert!(m[2].unified && !m[2].has_controller("nsdelegate"));
        assert_eq!(m[2].path, PathBuf::from("/sys/fs/cgroup/my tree"));
    }

    #[test]
    fn reads_our_own_thread() {
        let pid = std::process::id();
        let tid = crate::thread::gettid() as u32;
        assert!(tasks(pid).contains(&tid));
        assert!(tasks(pid).windows(2).all(|w| w[0] < w[1]));
        assert_eq!(tgid_of(tid), Some(pid));
        let s = schedstat(pid, tid).expect("schedstat of our own thread");
        // sum_exec_runtime of a running thread is only folded in at ticks and switches: may still be 0.
        assert!(s.slices > 0);
        assert!(context_switches(pid, tid).is_some());
        assert!(oncpu_ns(pid, tid).is_some());
        let ts = task_sched(pid, tid).unwrap();
        assert_eq!((ts.policy, ts.rt_priority), (0, 0));
        assert!(comm(pid, tid).is_some());
        assert!(process_tree(pid).contains(&pid));
        assert!(process_exists(pid));
        assert!(!process_exists(u32::MAX >> 1));
        assert_eq!(tasks(u32::MAX >> 1), Vec::<u32>::new());
        assert_eq!(schedstat(u32::MAX >> 1, 1), None);
    }

    #[test]
    fn finds_a_child_in_the_tree() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let tree = process_tree(std::process::id());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(tree.contains(&child.id()), "{tree:?} lacks {}", child.id());
    }

    #[test]
    fn proc_stat_rows() {
        let text = "cpu  10 1 5 100 4 1 2 3 7 0\ncpu0 5 0 2 50 2 1 1 1 0 0\ncpu3 5 1 3 50 2 0 1 2 7 0\nintr 1 2\nctxt 9\n";
        let s = parse_cpu_stat(text);
        assert_eq!(s.all, CpuTicks { total: 126, idle: 104, softirq: 2, steal: 3 });
        assert_eq!(s.all.busy(), 22);
        assert_eq!(s.cpus.iter().map(|c| c.0).collect::<Vec<_>>(), vec![0, 3]);
        assert_eq!(s.cpus[1].1, CpuTicks { total: 64, idle: 52, softirq: 1, steal: 2 });
        // A row without the steal column (kernels before 2.6.11) reads as none stolen.
        assert_eq!(parse_cpu_stat("cpu0 5 0 2 50 2 1 1\n").cpus[0].1.steal, 0);
        let live = cpu_stat().unwrap();
        assert!(live.all.total > 0);
        let online = online_cpus().unwrap();
        assert_eq!(live.cpus.iter().map(|c| c.0).collect::<Vec<_>>(), online);
        assert_eq!(online_cpu_count() as usize, online.len());
        isolated_cpus().unwrap();
    }

    #[test]
    fn steal_is_the_difference_per_cpu() {
        let stolen = stolen_between(&[(0, 0.10), (1, 0.04), (3, 0.07)], &[(0, 0.13), (1, 0.04), (2, 0.09)]);
        // CPU 3 went offline and CPU 2 came online between the readings: neither is known.
        assert_eq!(stolen.iter().map(|c| c.0).collect::<Vec<_>>(), vec![0, 1]);
        assert!((stolen[0].1 - 0.03).abs() < 1e-12 && stolen[1].1 == 0.0, "{stolen:?}");
        // A counter that went back (it cannot; a reading from another boot could) is no time.
        assert_eq!(stolen_between(&[(0, 0.09)], &[(0, 0.02)]), vec![(0, 0.0)]);
        let live = stolen_s();
        assert_eq!(live.iter().map(|c| c.0).collect::<Vec<_>>(), online_cpus().unwrap());
        assert!(stolen_between(&live, &stolen_s()).iter().all(|s| s.1 >= 0.0));
    }

    #[test]
    fn softirq_and_snmp_tables() {
        let soft = "                    CPU0       CPU1\n          HI:          0          1\n      NET_RX:        12         34\n";
        assert_eq!(parse_softirqs(soft), vec![("HI".to_string(), vec![0, 1]), ("NET_RX".to_string(), vec![12, 34])]);
        let online = online_cpus().unwrap();
        assert!(softirq_row("TIMER").len() > *online.last().unwrap() as usize);
        assert_eq!(softirq_row("NO_SUCH"), Vec::<u64>::new());
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\nUdp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors\nUdp: 7 0 0 9 3\n";
        assert_eq!(parse_snmp(snmp, "Udp", "InDatagrams"), Some(7));
        assert_eq!(parse_snmp(snmp, "Udp", "RcvbufErrors"), Some(3));
        assert_eq!(parse_snmp(snmp, "Udp", "Nope"), None);
        assert_eq!(parse_snmp(snmp, "Tcp", "InDatagrams"), None);
        let me = std::process::id();
        assert!(snmp_of(me, "Udp", "InDatagrams").is_some());
        assert!(rx_packets_of(me, "lo").is_some());
        assert_eq!(rx_packets_of(me, "no-such-dev0"), None);
    }

    #[test]
    fn interrupts_with_names_and_short_rows() {
        let text = "           CPU0       CPU1\n  0:         45          0   IO-APIC   2-edge      timer\n 24:       1000         20   PCI-MSI 49152-edge      virtio0-input.0\nLOC:      51337      49981   Local timer interrupts\nERR:          0\n";
        let l = parse_interrupts(text);
        assert_eq!(l.len(), 4);
        assert_eq!(l[1], IrqLine { id: "24".into(), desc: "PCI-MSI 49152-edge virtio0-input.0".into(), per_cpu: vec![1000, 20] });
        assert_eq!(l[3].per_cpu, vec![0, 0]);
        let live = interrupts();
        assert!(live.iter().any(|l| l.id == "LOC" && l.per_cpu.len() == online_cpus().unwrap().len()));
    }

    #[test]
    fn threads_of_a_cgroup_tree() {
        let dir = std::env::temp_dir().join(format!("rtslice-sys-cg-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("child")).unwrap();
        let me = crate::thread::gettid() as u32;
        std::fs::write(dir.join("tasks"), format!("{me}\n")).unwrap();
        std::fs::write(dir.join("child/cgroup.threads"), format!("{me}\n1\n")).unwrap();
        let got = threads_in_cgroup(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(got, vec![(1, 1), (std::process::id(), me)]);
    }

    #[test]
    fn facts_of_this_machine() {
        let f = kernel_facts();
        assert!(f.release.as_deref().is_some_and(|r| !r.is_empty()));
        assert!(f.version.as_deref().is_some_and(|v| v.starts_with("Linux version")));
        assert!(f.mem_total_bytes.unwrap() > 0);
        assert!(f.cmdline.is_some() && f.hostname.is_some());
    }

    #[test]
    fn sched_file_fields() {
        let text = "x (1, #threads: 1)\n-----\nse.exec_start   :   1.5\nse.nr_migrations                             :                   42\n";
        assert_eq!(sched_field(text, "se.nr_migrations"), Some(42));
        assert_eq!(sched_field(text, "nr_switches"), None);
    }
}
