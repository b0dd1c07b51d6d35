//! Starting processes inside a workload's cgroups: a command (joining its cgroups before exec, in its
//! own session), existing processes (attach), an OCI container through runc, and the agent. Every
//! start is journaled so `reset` can stop it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rtslice_sys::proc_ref::{self, ProcRef};
use rtslice_sys::procfs;
use serde::{Deserialize, Serialize};

use crate::cgroup::Backend;
use crate::cpus::CpuList;
use crate::error::{HostError, Result};
use crate::journal::{Change, StateDir};
use crate::ops::memory_mount;
use crate::facts::HostFacts;
use crate::prepare::{rejected, Prepared};
use crate::record::WorkloadRecord;
use crate::resctrl::Resctrl;
use crate::rules::CompiledRules;
use crate::sched::SchedAttr;
use crate::setup::Launch;
use crate::txn::{step, StepResult, Txn};

/// How to start the agent that gives threads born later their rules: `program args.. --state-dir DIR`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Extra environment. The agent also always gets RTSLICE_STATE_DIR.
    pub env: Vec<(String, String)>,
    /// Append `--state-dir DIR` to the arguments (the `rtslice agent` CLI form).
    pub state_dir_arg: bool,
}

impl AgentCommand {
    /// `rtslice agent --state-dir DIR` from an rtslice binary (e.g. `std::env::current_exe()`).
    pub fn rtslice_binary(exe: PathBuf) -> AgentCommand {
        AgentCommand { program: exe, args: vec!["agent".into()], env: Vec::new(), state_dir_arg: true }
    }
}

/// The cgroup.procs files a workload's processes join (one per hierarchy it has a group in).
pub(crate) fn procs_files_for(p: &Prepared, facts: &HostFacts) -> Vec<PathBuf> {
    let mut v = vec![p.group.cpuset.join("cgroup.procs")];
    if facts.backend.is_v1() && p.cpu_group {
        v.push(p.group.cpu.join("cgroup.procs"));
    }
    if let (true, Some(mem)) = (facts.backend.is_v1() && p.ws.memory.is_some(), memory_mount(facts)) {
        v.push(mem.join(crate::cgroup::V1_PARENT).join(&p.ws.name).join("cgroup.procs"));
    }
    v
}

pub(crate) fn start_agent(txn: &mut Txn, cmd: &AgentCommand, state_dir: &StateDir) -> Result<ProcRef> {
    let ready = state_dir.path.join("agent.ready");
    let _ = std::fs::remove_file(&ready);
    let log = std::fs::File::create(state_dir.path.join("agent.log"))
        .map_err(|source| HostError::Create { path: state_dir.path.join("agent.log"), source })?;
    let mut c = Command::new(&cmd.program);
    c.args(&cmd.args);
    if cmd.state_dir_arg {
        c.arg("--state-dir").arg(&state_dir.path);
    }
    c.envs(cmd.env.iter().map(|(k, v)| (k, v))).env("RTSLICE_STATE_DIR", &state_dir.path);
    c.stdin(Stdio::null()).stdout(log.try_clone().map_err(|e| HostError::other(e.to_string()))?).stderr(log);
    // Its own session: the agent must outlive this process and its terminal.
    let (_child, proc) = proc_ref::spawn_in_session(&mut c, &[])
        .map_err(|e| HostError::Launch { what: format!("agent {}", cmd.program.display()), reason: e.to_string() })?;
    let pid = proc.pid;
    journal_started(txn, proc, Change::Agent { proc })?;
    // An agent that dies says so at once (its liveness is checked every 2 ms); one that is alive but
    // slow to start gets 30 s, as a loaded 2-vCPU host (compilers and test guests beside it) takes
    // more than 5 s to start it (docs/testing.md).
    let deadline = Instant::now() + AGENT_READY_WITHIN;
    loop {
        if std::fs::read_to_string(&ready).map(|s| s.trim() == pid.to_string()).unwrap_or(false) {
            return Ok(proc);
        }
        if !proc.alive() || Instant::now() > deadline {
            let log = std::fs::read_to_string(state_dir.path.join("agent.log")).unwrap_or_default();
            return Err(HostError::Launch {
                what: "agent".into(),
                reason: if proc.alive() {
                    format!("it did not report ready within {} s: {}", AGENT_READY_WITHIN.as_secs(), log.trim())
                } else {
                    format!("it exited before it reported ready: {}", log.trim())
                },
            });
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// How long a live agent may take to report ready.
const AGENT_READY_WITHIN: Duration = Duration::from_secs(30);

/// Starts a workload's command inside its cgroups (`procs_files`) in its own session.
pub(crate) fn command(
    txn: &mut Txn,
    name: &str,
    argv: &[String],
    env: &[(String, String)],
    cwd: Option<&Path>,
    procs_files: &[PathBuf],
    state_dir: &StateDir,
) -> Result<ProcRef> {
    let fail = |reason: String| HostError::Launch { what: format!("workload {name}"), reason };
    let (prog, args) = argv.split_first().ok_or_else(|| fail("empty command".into()))?;
    let log_path = state_dir.path.join(format!("{name}.log"));
    let log = std::fs::File::create(&log_path).map_err(|e| fail(format!("creating {}: {e}", log_path.display())))?;
    let mut c = Command::new(prog);
    c.args(args).envs(env.iter().map(|(k, v)| (k, v)));
    if let Some(d) = cwd {
        c.current_dir(d);
    }
    c.stdin(Stdio::null()).stdout(log.try_clone().map_err(|e| fail(e.to_string()))?).stderr(log);
    // The child joins its cgroups itself before exec, so every thread it ever creates starts inside
    // them; its own session lets reset kill the whole process group.
    let (_child, proc) = proc_ref::spawn_in_session(&mut c, procs_files).map_err(|e| fail(format!("{prog}: {e}")))?;
    journal_started(txn, proc, Change::Launched { proc, what: format!("{name}: {}", argv.join(" ")), procs_files: procs_files.to_vec() })?;
    Ok(proc)
}

/// Journals a process just started. A process's identity exists only once it runs, so its entry
/// follows the start; if the journal cannot take it, the process (and its group) is killed and
/// reaped before the error returns: one the journal does not list is one no rollback or reset
/// would ever stop. (Found by the examples test's fault injection at this very entry: the `sleep`
/// it started outlived the rollback, and its exit 60 s later, unreaped, left a zombie whose
/// affinity a later partition change rewrote.)
fn journal_started(txn: &mut Txn, proc: ProcRef, change: Change) -> Result<()> {
    txn.record(change).inspect_err(|_| {
        proc.kill_and_wait(true, Duration::from_secs(5));
    })
}

/// The cgroup.procs file a process is in now, in the hierarchy mounted at `mount`.
fn current_procs_file(pid: i32, mount: &Path, ctrl: Option<&str>) -> Option<PathBuf> {
    let text = procfs::cgroup_membership(pid)?;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = match ctrl {
            Some(c) => ctrls.split(',').any(|x| x == c),
            None => ctrls.is_empty(),
        };
        if hit {
            return Some(mount.join(path.trim_start_matches('/')).join("cgroup.procs"));
        }
    }
    None
}

/// Moves an existing process into the workload's cgroups, journaling where it was.
pub(crate) fn attach(txn: &mut Txn, pid: i32, facts: &HostFacts, p: &Prepared) -> Result<()> {
    match &facts.backend {
        Backend::V1 { cpuset, cpu } => {
            let from = current_procs_file(pid, cpuset, Some("cpuset")).unwrap_or_else(|| cpuset.join("cgroup.procs"));
            txn.move_process(pid, &from, &p.group.cpuset.join("cgroup.procs"))?;
            if p.cpu_group {
                let from = current_procs_file(pid, cpu, Some("cpu")).unwrap_or_else(|| cpu.join("cgroup.procs"));
                txn.move_process(pid, &from, &p.group.cpu.join("cgroup.procs"))?;
            }
            if let (Some(_), Some(mem)) = (p.ws.memory, memory_mount(facts)) {
                let from = current_procs_file(pid, &mem, Some("memory")).unwrap_or_else(|| mem.join("cgroup.procs"));
                txn.move_process(pid, &from, &mem.join(crate::cgroup::V1_PARENT).join(&p.ws.name).join("cgroup.procs"))?;
            }
        }
        Backend::V2 { root } => {
            let from = current_procs_file(pid, root, None).unwrap_or_else(|| root.join("cgroup.procs"));
            txn.move_process(pid, &from, &p.group.cpuset.join("cgroup.procs"))?;
        }
    }
    Ok(())
}

/// What a workload's launch needs from this host, checked before anything is touched: an OCI
/// source (bundle, image layout or archive) and runc (`runc`, else from PATH), which is returned;
/// podman; the attached PIDs. The one check apply and the node make.
pub(crate) fn check_launch(ws: &crate::setup::WorkloadSetup, runc: Option<&Path>) -> Result<Option<PathBuf>> {
    match &ws.launch {
        Launch::Oci(o) => {
            if let Err(e) = crate::image::OciSource::detect(&o.bundle) {
                return Err(rejected(format!("workload {}: {e}", ws.name)));
            }
            let runc = runc.map(Path::to_path_buf).or_else(crate::oci::find_runc);
            Ok(Some(runc.ok_or_else(|| rejected("an OCI launch needs runc, which is not installed (apt-get install runc)"))?))
        }
        Launch::Podman(_) => crate::podman::require(&ws.name).map(|_| None),
        Launch::Attach { pids } => {
            if let Some(pid) = pids.iter().find(|pid| ProcRef::of(**pid).is_none()) {
                return Err(rejected(format!("workload {}: pid {pid} does not exist", ws.name)));
            }
            Ok(None)
        }
        Launch::None | Launch::Command { .. } => Ok(None),
    }
}

/// A prepared workload's record before anything of it runs: its CPUs, cgroups, rules and resctrl
/// group (a node deploy's).
pub(crate) fn planned_record(p: &Prepared, resctrl: &Resctrl) -> WorkloadRecord {
    WorkloadRecord {
        name: p.ws.name.clone(),
        cpus: p.ws.cpus.clone(),
        group: p.group.clone(),
        pids: Vec::new(),
        container: None,
        rules: p.ws.threads.clone(),
        resctrl_group: p.ws.cache.as_ref().map(|_| resctrl.group(&p.ws.name)),
    }
}

/// Starts a prepared workload inside its transaction (a node's deploy), after its cgroups exist: what it launches — nothing, a command, attached processes,
/// a runc or a podman container — inside its groups, then the thread rules ([`workload_rules`]) of
/// what runs, then its threads into its resctrl group. A container's rules are applied once its init
/// process is in the groups and before its program runs, so nothing it forks escapes them. A failure
/// names its step. `runc`: the runc binary (required for OCI bundles; podman looks for one when
/// absent). `rec` gets the processes and the container.
#[allow(clippy::too_many_arguments)]
pub(crate) fn start(
    txn: &mut Txn,
    facts: &HostFacts,
    state_dir: &StateDir,
    p: &Prepared,
    runc: Option<&Path>,
    devices: &[rtslice_sys::pci::DeviceNode],
    resctrl: &Resctrl,
    rec: &mut WorkloadRecord,
) -> StepResult<()> {
    let name = &p.ws.name;
    match &p.ws.launch {
        Launch::None => {}
        Launch::Command { argv, env, cwd } => {
            let procs_files = procs_files_for(p, facts);
            let proc = step(format!("launch {name} ({})", argv.join(" ")), command(txn, name, argv, env, cwd.as_deref(), &procs_files, state_dir))?;
            rec.pids.push(proc);
        }
        Launch::Attach { pids } => {
            for &pid in pids {
                step(format!("attach pid {pid} to {name}"), attach(txn, pid, facts, p))?;
                rec.pids.extend(ProcRef::of(pid));
            }
        }
        Launch::Oci(o) => {
            let id = o.id.clone().unwrap_or_else(|| format!("rtslice-{name}"));
            let what = format!("create container {id} for {name}");
            let runc = runc.ok_or_else(|| {
                (what.clone(), HostError::Unsupported { what: "runc is not installed".into(), fix: "apt-get install runc".into() })
            })?;
            let (pid, root) = step(what, oci_create(txn, facts, state_dir, p, o, &id, runc, devices))?;
            step(format!("thread rules in container {id}"), workload_rules(txn, p))?;
            step(format!("start container {id}"), crate::oci::runc_start(runc, &root, &id))?;
            wait_for_exec(pid);
            rec.container = Some(id);
            rec.pids.extend(ProcRef::of(pid));
        }
        Launch::Podman(l) => {
            let runc = runc.map(Path::to_path_buf).or_else(crate::oci::find_runc);
            let (bin, cname, pid) = step(format!("create podman container for {name}"), podman_create(txn, facts, p, l, runc.as_deref()))?;
            step(format!("thread rules in podman container {cname}"), workload_rules(txn, p))?;
            step(format!("start podman container {cname}"), crate::podman::start(&bin, &cname))?;
            wait_for_exec(pid);
            rec.container = Some(cname);
            rec.pids.extend(ProcRef::of(pid));
        }
    }
    step(format!("thread rules of {name}"), workload_rules(txn, p))?;
    if p.ws.cache.is_some() {
        step(format!("move the threads of {name} into its resctrl group"), resctrl.assign_workload(txn, name, &p.group.cpuset))?;
    }
    Ok(())
}

/// The thread rules of one prepared workload, for the threads its cgroup holds now (journaled).
pub(crate) fn workload_rules(txn: &mut Txn, p: &Prepared) -> Result<()> {
    let wide = if p.ws.wide_affinity { Some(p.ws.cpus.clone()) } else { None };
    let rules = CompiledRules::new(&p.ws.threads, wide).map_err(HostError::Invalid)?;
    if rules.is_empty() {
        return Ok(());
    }
    let threads = crate::rules::workload_threads(&p.group.cpuset);
    let names: Vec<(i32, String)> = threads.iter().map(|(_, tid, comm)| (*tid, comm.clone())).collect();
    let assigned = rules.assign(&names);
    // The bandwidth a reclaiming pool's threads hold now against what this plan gives the pool: the
    // agent's split (below) is kept only while it fits the pool. A resize that shrinks the
    // reservation must shrink the threads whatever split they hold — kept, the old budget stayed in
    // force until the agent's next re-split, and the kernel counted it against what the shrink had
    // freed.
    let bw = |a: SchedAttr| match a {
        SchedAttr::Deadline { runtime_ns, period_ns, .. } if period_ns > 0 => runtime_ns as f64 / period_ns as f64,
        _ => 0.0,
    };
    let pool: Vec<&(i32, crate::rules::Wanted)> =
        assigned.iter().filter(|(_, w)| matches!(w.policy, Some(SchedAttr::Deadline { reclaim: true, .. }))).collect();
    let pool_planned: f64 = pool.iter().filter_map(|(_, w)| w.policy).map(bw).sum();
    let pool_held: f64 = pool.iter().filter_map(|(tid, _)| crate::sched::get_attr(*tid).ok()).map(bw).sum();
    let split_fits = pool_held <= pool_planned * (1.0 + 1e-6);
    // A SCHED_DEADLINE rule's budget is split over every thread it matches; threads the agent already
    // ruled (born since launch) shrink before any thread takes more.
    for (tid, w) in crate::rules::shrink_first(assigned) {
        let comm = names.iter().find(|(t, _)| *t == tid).map(|(_, c)| c.as_str()).unwrap_or("?");
        let deadline = matches!(w.policy, Some(SchedAttr::Deadline { .. }));
        // A reclaiming pool's thread the agent has already given its share: the agent runs from
        // before the launch and re-splits the pool by measured use every 200 ms, so while apply
        // waits for sleeping threads to reach the partition its parts and apply's equal ones would
        // be mixed — more than the pool, refused (EBUSY). The agent owns the split of a pool; apply
        // leaves a thread it has ruled as it is.
        let agent_ruled = || {
            matches!(w.policy, Some(SchedAttr::Deadline { reclaim: true, .. }))
                && matches!(crate::sched::get_attr(tid), Ok(SchedAttr::Deadline { .. }))
                && crate::rules::conforms(tid, &w).is_ok()
        };
        if split_fits && agent_ruled() {
            continue;
        }
        let r = (|| {
            if let (Some(cpus), false) = (&w.cpus, deadline) {
                txn.set_affinity(tid, cpus)?;
            }
            match w.policy {
                Some(pol @ SchedAttr::Deadline { .. }) => admit_deadline(txn, tid, pol, &p.ws.cpus),
                Some(pol) => txn.set_attr(tid, pol),
                None => Ok(()),
            }
        })();
        match r {
            // A thread that exited meanwhile is not an error.
            Err(HostError::Sched { source, .. }) if source.raw_os_error() == Some(libc::ESRCH) => {}
            // Refused because the agent gave the pool's thread its share meanwhile (above).
            Err(_) if agent_ruled() => {}
            // The policy asked for and the thread's own now: a refusal that cannot be explained from
            // the plan says more.
            Err(e) => {
                let asked = w.policy.map_or("its CPUs only".to_string(), |x| x.to_string());
                let now = crate::sched::get_attr(tid).map_or_else(|e| e.to_string(), |x| x.to_string());
                return Err(HostError::other(format!("thread {tid} ({comm}) of workload {} (asked {asked}, has {now}): {e}", p.ws.name)));
            }
            Ok(()) => {}
        }
    }
    Ok(())
}

/// How long apply waits for a thread that still sits on a CPU outside its partition to wake up there.
const MIGRATION_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// SCHED_DEADLINE admission that does not race with where the thread last ran. The kernel admits a
/// deadline thread in the root domain of the CPU it *last ran on* and requires its affinity to span
/// that domain; a thread that was moved into the partition while asleep (an attached process) stays
/// on its old CPU until it wakes, so `sched_setattr` answers EPERM or EBUSY depending on where it
/// slept. So: wait (bounded) until the thread has run inside the partition, then set the policy;
/// retry EPERM/EBUSY, outside the partition or inside (bandwidth not yet released, a root domain
/// not yet matching), within the bound. Any other failure, or one that outlasts the bound, is
/// reported with the reason that applies.
fn admit_deadline(txn: &mut Txn, tid: i32, pol: SchedAttr, partition: &CpuList) -> Result<()> {
    let started = std::time::Instant::now();
    let outside = |tid| procfs::last_cpu(tid).is_some_and(|c| !partition.contains(c));
    while outside(tid) && started.elapsed() < MIGRATION_WAIT {
        std::thread::sleep(std::time::Duration::from_micros(500));
    }
    loop {
        match txn.set_attr(tid, pol) {
            Err(HostError::Sched { source, .. })
                if matches!(source.raw_os_error(), Some(libc::EPERM) | Some(libc::EBUSY))
                    && outside(tid)
                    && started.elapsed() < MIGRATION_WAIT =>
            {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            // EBUSY inside the partition: deadline bandwidth that the plan left free may still be
            // held for a moment — an exited deadline thread's until its 0-lag time (later after an
            // overrun pushed its deadline ahead). Retry within the bound. (Not cured by waiting: the
            // bench's back-to-back runs still saw 1 first apply in 32 fail so, each time right after
            // an 11-thread deadline workload's run, and succeed when its retry re-created the
            // partition — stale root-domain accounting that only a rebuild clears; open.)
            // EPERM inside the partition, too: once in 480 generated specs on the 8-CPU isolcpus guest
            // (6.12-rt) a thread that had run inside its 2-CPU partition was refused EPERM, and the same
            // spec applied three times right after; a root domain not yet matching the partition is
            // what the kernel says then. A lasting EPERM (affinity narrower than the partition) is
            // reported after the bound.
            Err(HostError::Sched { source, .. })
                if matches!(source.raw_os_error(), Some(libc::EPERM) | Some(libc::EBUSY)) && started.elapsed() < MIGRATION_WAIT =>
            {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            Err(HostError::Sched { source, .. }) if matches!(source.raw_os_error(), Some(libc::EPERM) | Some(libc::EBUSY)) => {
                let errno = source.raw_os_error().unwrap_or(0);
                let reason = match procfs::last_cpu(tid) {
                    Some(c) if !partition.contains(c) => format!(
                        "the thread last ran on CPU {c}, outside its partition [{partition}], and did not wake up within {} s: the \
                         kernel admits a deadline thread where it last ran. It gets its policy when it runs again if the agent is on \
                         (rtslice agent); or apply once it is awake",
                        MIGRATION_WAIT.as_secs()
                    ),
                    _ if errno == libc::EBUSY => format!(
                        "the partition [{partition}] has no deadline bandwidth left for {pol}: the kernel admits at most \
                         sched_rt_runtime_us/sched_rt_period_us of each CPU, less its deadline servers' share (fair_server), to \
                         SCHED_DEADLINE threads; lower the reservation or give the workload more CPUs (`rtslice plan` shows the budget)"
                    ),
                    _ => format!(
                        "the kernel refused {pol} (EPERM): the thread's affinity must span its partition [{partition}] and rtslice \
                         must run as root (CAP_SYS_NICE)"
                    ),
                };
                return Err(HostError::Sched { call: "sched_setattr", tid, source: std::io::Error::new(source.kind(), reason) });
            }
            other => return other,
        }
    }
}

/// Writes the container's config.json into rtslice's own bundle directory and `runc create`s it
/// (started later, after its thread rules are in place). Returns its init pid and runc root.
///
/// `o.bundle` may be a runtime bundle, an OCI image layout or a `docker save` archive (an image is
/// unpacked into the state directory first, `image`). The user's configuration (the bundle's
/// config.json, or the image's) is kept and rtslice's resources, scheduler and namespaces are merged
/// into it (`oci::merge_config`); a bundle without config.json gets rtslice's own default.
pub(crate) fn oci_create(
    txn: &mut Txn,
    facts: &HostFacts,
    state_dir: &StateDir,
    p: &Prepared,
    o: &crate::setup::OciLaunch,
    id: &str,
    runc: &Path,
    devices: &[rtslice_sys::pci::DeviceNode],
) -> Result<(i32, PathBuf)> {
    let state = &state_dir.path;
    let runc_root = state.join("runc");
    // rtslice's own bundle dir: config.json here, rootfs by absolute path — the user's bundle is not modified.
    let bundle = state.join("oci-configs").join(id);
    std::fs::create_dir_all(&bundle).map_err(|source| HostError::Create { path: bundle.clone(), source })?;
    let source = crate::image::OciSource::detect(&o.bundle)?;
    let user_bundle = crate::image::bundle_for(&source, &state.join("oci-images").join(id))?;
    let user_cfg = crate::oci::load_user_config(&user_bundle)?;
    let cgroups_path = match &facts.backend {
        Backend::V1 { .. } => format!("/{}/{}/{id}", crate::cgroup::V1_PARENT, p.ws.name),
        // The workload's group wherever it is: under rtslice.slice, or a member of a node partition
        // at the root (`rtslice-partition-<cpus>/<name>`).
        Backend::V2 { root } => match p.group.cpuset.strip_prefix(root) {
            Ok(rel) => format!("/{}/{id}", rel.display()),
            Err(_) => format!("/{}/{}/{id}", crate::cgroup::V2_PARENT, p.ws.name),
        },
    };
    let scheduler = p.ws.threads.iter().find_map(|r| r.policy.filter(|x| x.is_realtime()));
    let cc = crate::oci::ContainerConfig {
        id: id.to_string(),
        args: if o.args.is_empty() { vec!["sh".to_string()] } else { o.args.clone() },
        cgroups_path,
        cpus: p.ws.cpus.clone(),
        mems: p.ws.mems.clone().unwrap_or_else(|| facts.mems.clone()),
        rt: if facts.backend.is_v1() { p.rt_budget } else { None },
        scheduler,
        netns: o.netns,
        seccomp: o.seccomp,
    };
    let rootfs_rel = user_cfg
        .as_ref()
        .and_then(|c| c.root().as_ref().map(|r| r.path().clone()))
        .unwrap_or_else(|| PathBuf::from("rootfs"));
    let rootfs_dir = if rootfs_rel.is_absolute() { rootfs_rel } else { user_bundle.join(rootfs_rel) };
    let rootfs = std::fs::canonicalize(&rootfs_dir).map_err(|source| HostError::Read { path: rootfs_dir.clone(), source })?;
    let runc_version = crate::oci::runc_version(runc);
    // One path for both: the user's configuration merged, or rtslice's own default, then the
    // workload's PCI device nodes added (oci-spec types, so the result is checked as it is built).
    let mut spec = match user_cfg {
        Some(user) => crate::oci::merge_config(user, &cc, !o.args.is_empty(), &rootfs, runc_version)?,
        None => {
            let mut cfg = crate::oci::config_json(&cc, runc_version);
            cfg["root"]["path"] = serde_json::json!(rootfs);
            serde_json::from_value(cfg).map_err(|e| HostError::Invalid(format!("container {id}: rtslice's default configuration: {e}")))?
        }
    };
    crate::oci::add_devices(&mut spec, devices)?;
    let path = bundle.join("config.json");
    spec.save(&path).map_err(|e| HostError::Write { path, value: "<config.json>".into(), source: std::io::Error::other(e.to_string()) })?;
    txn.record(Change::Container { id: id.to_string(), runc_root: runc_root.clone(), runc: runc.to_path_buf() })?;
    let pid = crate::oci::runc_run(runc, &runc_root, &bundle, id, &state.join(format!("{id}.log")))?;
    Ok((pid, runc_root))
}

/// A podman container created and initialised, its init process moved into the workload's groups
/// (started later, after its thread rules are in place). Returns podman's path, the container's
/// name and the init pid.
pub(crate) fn podman_create(
    txn: &mut Txn,
    facts: &HostFacts,
    p: &Prepared,
    l: &crate::setup::PodmanLaunch,
    runc: Option<&Path>,
) -> Result<(PathBuf, String, i32)> {
    let bin = crate::podman::require(&p.ws.name)?;
    let name = crate::podman::container_name(&p.ws.name, l);
    // Journaled first: a crash between create and the next save still removes it.
    txn.record(crate::journal::Change::Podman { name: name.clone(), podman: bin.clone() })?;
    let pid = crate::podman::create(&bin, &name, l, runc)?;
    attach(txn, pid, facts, p)?;
    Ok((bin, name, pid))
}

/// After `runc start` the init process execs the container's program; rules match its new name, so
/// wait (briefly) until it no longer runs as runc's init.
pub(crate) fn wait_for_exec(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        match procfs::process_comm(pid) {
            Some(c) if c.starts_with("runc") => std::thread::sleep(Duration::from_millis(1)),
            _ => return,
        }
    }
}
