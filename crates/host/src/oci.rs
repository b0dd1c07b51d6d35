//! Launching OCI bundles through runc. A bundle's own config.json is kept and rtslice's part merged
//! into it ([`merge_config`], with the `oci-spec` types): the cgroup path, CPUs, memory nodes, the RT
//! budget on v1, the scheduler on runc >= 1.2, the capabilities RT threads need, an optional network
//! namespace and Docker's default seccomp allow-list. A bundle without config.json gets rtslice's own
//! ([`config_json`]). rtslice writes the result into its state directory (the user's bundle is not
//! modified), then `runc create` / `runc start`. Images are unpacked into bundles by `image`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use rtslice_plan::Reservation;

use crate::cpus::CpuList;
use crate::error::{HostError, Result};
use crate::sched::SchedAttr;

/// runc's version triple from `runc --version` ("runc version 1.1.5+ds1").
pub fn runc_version(runc: &Path) -> Option<(u32, u32, u32)> {
    let out = Command::new(runc).arg("--version").output().ok()?;
    parse_runc_version(&String::from_utf8_lossy(&out.stdout))
}

pub fn parse_runc_version(text: &str) -> Option<(u32, u32, u32)> {
    let line = text.lines().find(|l| l.starts_with("runc version"))?;
    let v = line.split_whitespace().nth(2)?;
    let core: String = v.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    let mut it = core.split('.').map(|x| x.parse::<u32>().ok());
    Some((it.next()??, it.next().flatten().unwrap_or(0), it.next().flatten().unwrap_or(0)))
}

pub fn find_runc() -> Option<PathBuf> {
    find_in_path("runc")
}

pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin"].iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// What rtslice puts into a container's config.json.
#[derive(Clone, Debug)]
pub struct ContainerConfig {
    pub id: String,
    pub args: Vec<String>,
    /// cgroupsPath, relative to each hierarchy's root ("/rtslice/du1/rtslice-du1").
    pub cgroups_path: String,
    pub cpus: CpuList,
    pub mems: String,
    /// v1 RT group budget for the container's cgroup (whole microseconds).
    pub rt: Option<Reservation>,
    /// process.scheduler (written only when runc supports it, >= 1.2).
    pub scheduler: Option<SchedAttr>,
    pub netns: bool,
    pub seccomp: bool,
}

/// Docker's default capability set plus what real-time threads need (CAP_SYS_NICE for
/// sched_setattr, CAP_IPC_LOCK for mlockall).
const CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
    "CAP_SYS_NICE",
    "CAP_IPC_LOCK",
];

pub fn config_json(c: &ContainerConfig, runc_version: Option<(u32, u32, u32)>) -> Value {
    let caps: Vec<&str> = CAPS.to_vec();
    let mut process = json!({
        "terminal": false,
        "user": {"uid": 0, "gid": 0},
        "args": c.args,
        "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"],
        "cwd": "/",
        "capabilities": {"bounding": caps, "effective": caps, "permitted": caps, "ambient": caps},
        // No RLIMIT_RTPRIO/MEMLOCK raise: runc applies rlimits after dropping CAP_SYS_RESOURCE, so a raise
        // fails with EPERM; CAP_SYS_NICE and CAP_IPC_LOCK already bypass those limits.
        "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
        "noNewPrivileges": true
    });
    if let (Some(policy), Some(v)) = (c.scheduler, runc_version) {
        if v >= (1, 2, 0) {
            process["scheduler"] = scheduler_json(policy);
        }
    }
    let mut namespaces = vec![json!({"type": "pid"}), json!({"type": "ipc"}), json!({"type": "uts"}), json!({"type": "mount"})];
    if c.netns {
        namespaces.push(json!({"type": "network"}));
    }
    let mut cpu = json!({"cpus": c.cpus.to_string(), "mems": c.mems});
    if let Some(r) = c.rt {
        cpu["realtimeRuntime"] = json!(r.runtime_us());
        cpu["realtimePeriod"] = json!(r.period_us());
    }
    let mut linux = json!({
        "cgroupsPath": c.cgroups_path,
        "resources": {"devices": [{"allow": false, "access": "rwm"}], "cpu": cpu},
        "namespaces": namespaces,
        "maskedPaths": ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
            "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"],
        "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
    });
    if c.seccomp {
        linux["seccomp"] = default_seccomp();
    }
    json!({
        "ociVersion": "1.0.2",
        "process": process,
        "root": {"path": "rootfs", "readonly": true},
        "hostname": c.id,
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]}
        ],
        "linux": linux
    })
}

/// The user's own container configuration (a bundle's `config.json`, or the one made from an image)
/// with rtslice's part merged in, so the container runs as they built it:
/// - kept as the user wrote it: process (args, env, cwd, user, rlimits, …), mounts, hostname, the
///   device rules and other resources (memory, pids, …), namespaces, masked/readonly paths, their
///   seccomp profile, hooks, annotations;
/// - rtslice's: the root path (absolute, so the bundle is not modified; read-only as the user said),
///   `linux.cgroupsPath` (the workload's group), `resources.cpu` cpus/mems and the RT group budget,
///   the scheduler (runc >= 1.2) and `terminal: false` (output goes to the workload's log);
/// - added where missing: CAP_SYS_NICE and CAP_IPC_LOCK (RT threads need them), a network namespace
///   when `c.netns`, Docker's default seccomp profile when `c.seccomp` and the user has none;
/// - `args_override`: rtslice's args replace the user's (a spec or caller that names a command).
pub fn merge_config(
    mut spec: oci_spec::runtime::Spec,
    c: &ContainerConfig,
    args_override: bool,
    rootfs: &Path,
    runc_version: Option<(u32, u32, u32)>,
) -> Result<oci_spec::runtime::Spec> {
    use oci_spec::runtime::{Capability, LinuxCpu, LinuxNamespaceBuilder, LinuxNamespaceType, LinuxResources, LinuxSeccomp, RootBuilder, Scheduler};
    let bad = |what: &str, e: &dyn std::fmt::Display| HostError::Invalid(format!("container {}: {what}: {e}", c.id));
    // What a minimal config.json leaves out (mounts, namespaces, masked paths, capabilities, …) comes
    // from rtslice's own default, so a three-line config does not run in the host's mount namespace.
    let base: oci_spec::runtime::Spec = serde_json::from_value(config_json(c, runc_version)).map_err(|e| bad("rtslice's default configuration", &e))?;
    if spec.mounts().is_none() {
        spec.set_mounts(base.mounts().clone());
    }
    let base_process = base.process().clone().unwrap_or_default();
    if let Some(p) = spec.process_mut().as_mut() {
        if p.capabilities().is_none() {
            p.set_capabilities(base_process.capabilities().clone());
        }
        if p.rlimits().is_none() {
            p.set_rlimits(base_process.rlimits().clone());
        }
        if p.env().is_none() {
            p.set_env(base_process.env().clone());
        }
    }
    match (spec.linux_mut().as_mut(), base.linux().clone()) {
        (Some(l), Some(b)) => {
            if l.namespaces().is_none() {
                l.set_namespaces(b.namespaces().clone());
            }
            if l.masked_paths().is_none() {
                l.set_masked_paths(b.masked_paths().clone());
            }
            if l.readonly_paths().is_none() {
                l.set_readonly_paths(b.readonly_paths().clone());
            }
        }
        (None, Some(mut b)) => {
            // rtslice's seccomp choice is applied below, as for a user's linux section.
            b.set_seccomp(None);
            spec.set_linux(Some(b));
        }
        _ => {}
    }
    let readonly = spec.root().as_ref().and_then(|r| r.readonly()).unwrap_or(false);
    spec.set_root(Some(RootBuilder::default().path(rootfs).readonly(readonly).build().map_err(|e| bad("root", &e))?));
    if spec.hostname().is_none() {
        spec.set_hostname(Some(c.id.clone()));
    }
    let mut process = spec.process().clone().unwrap_or_default();
    if args_override || process.args().as_ref().is_none_or(|a| a.is_empty()) {
        process.set_args(Some(c.args.clone()));
    }
    process.set_terminal(Some(false));
    let mut caps = process.capabilities().clone().unwrap_or_default();
    for needed in [Capability::SysNice, Capability::IpcLock] {
        let add = |set: Option<oci_spec::runtime::Capabilities>| {
            let mut set = set.unwrap_or_default();
            set.insert(needed);
            Some(set)
        };
        caps.set_bounding(add(caps.bounding().clone()));
        caps.set_effective(add(caps.effective().clone()));
        caps.set_permitted(add(caps.permitted().clone()));
        // Ambient only where the user keeps an ambient set (a non-root process keeps it over exec).
        if caps.ambient().as_ref().is_some_and(|a| !a.is_empty()) {
            caps.set_ambient(add(caps.ambient().clone()));
        }
    }
    process.set_capabilities(Some(caps));
    if let (Some(policy), Some(v)) = (c.scheduler, runc_version) {
        if v >= (1, 2, 0) {
            let sched: Scheduler = serde_json::from_value(scheduler_json(policy)).map_err(|e| bad("scheduler", &e))?;
            process.set_scheduler(Some(sched));
        }
    }
    spec.set_process(Some(process));
    let mut linux = spec.linux().clone().unwrap_or_default();
    linux.set_cgroups_path(Some(PathBuf::from(&c.cgroups_path)));
    let mut resources = linux.resources().clone().unwrap_or_else(|| {
        // No resources at all: deny devices like runc's default spec (runc still allows its defaults).
        serde_json::from_value::<LinuxResources>(json!({"devices": [{"allow": false, "access": "rwm"}]})).unwrap_or_default()
    });
    let mut cpu = resources.cpu().clone().unwrap_or_else(LinuxCpu::default);
    cpu.set_cpus(Some(c.cpus.to_string()));
    cpu.set_mems(Some(c.mems.clone()));
    if let Some(r) = c.rt {
        cpu.set_realtime_runtime(Some(r.runtime_us() as i64));
        cpu.set_realtime_period(Some(r.period_us()));
    }
    resources.set_cpu(Some(cpu));
    linux.set_resources(Some(resources));
    let mut namespaces = linux.namespaces().clone().unwrap_or_default();
    if c.netns && !namespaces.iter().any(|n| n.typ() == LinuxNamespaceType::Network) {
        namespaces.push(LinuxNamespaceBuilder::default().typ(LinuxNamespaceType::Network).build().map_err(|e| bad("namespace", &e))?);
    }
    linux.set_namespaces(Some(namespaces));
    if c.seccomp && linux.seccomp().is_none() {
        let profile: LinuxSeccomp = serde_json::from_value(default_seccomp()).map_err(|e| bad("seccomp", &e))?;
        linux.set_seccomp(Some(profile));
    }
    spec.set_linux(Some(linux));
    Ok(spec)
}

/// Passes a workload's PCI device nodes into its container: each node in `linux.devices` (runc
/// creates it in the container's /dev with the host node's type, numbers, mode and owner; an entry
/// the user wrote for the same path is replaced, since the host's numbers are the true ones) and
/// allowed (`rwm`) in `linux.resources.devices`, after the user's rules so that a deny-all before
/// them does not hide it (runc applies the rules in order, the last match winning).
pub fn add_devices(spec: &mut oci_spec::runtime::Spec, nodes: &[rtslice_sys::pci::DeviceNode]) -> Result<()> {
    use oci_spec::runtime::{LinuxDeviceBuilder, LinuxDeviceCgroupBuilder, LinuxDeviceType, LinuxResources};
    use rtslice_sys::pci::NodeKind;
    if nodes.is_empty() {
        return Ok(());
    }
    let bad = |e: &dyn std::fmt::Display| HostError::Invalid(format!("a device entry of the container configuration: {e}"));
    let mut linux = spec.linux().clone().unwrap_or_default();
    let mut devices = linux.devices().clone().unwrap_or_default();
    let mut resources = linux.resources().clone().unwrap_or_else(LinuxResources::default);
    let mut rules = resources.devices().clone().unwrap_or_default();
    for n in nodes {
        let typ = match n.kind {
            NodeKind::Char => LinuxDeviceType::C,
            NodeKind::Block => LinuxDeviceType::B,
        };
        devices.retain(|d| d.path() != &n.path);
        devices.push(
            LinuxDeviceBuilder::default()
                .path(n.path.clone())
                .typ(typ)
                .major(n.major as i64)
                .minor(n.minor as i64)
                .file_mode(n.mode)
                .uid(n.uid)
                .gid(n.gid)
                .build()
                .map_err(|e| bad(&e))?,
        );
        rules.push(
            LinuxDeviceCgroupBuilder::default()
                .allow(true)
                .typ(typ)
                .major(n.major as i64)
                .minor(n.minor as i64)
                .access("rwm")
                .build()
                .map_err(|e| bad(&e))?,
        );
    }
    resources.set_devices(Some(rules));
    linux.set_resources(Some(resources));
    linux.set_devices(Some(devices));
    spec.set_linux(Some(linux));
    Ok(())
}

/// Reads a bundle's `config.json`; `None` when the bundle has none (rtslice then writes its own).
pub fn load_user_config(bundle: &Path) -> Result<Option<oci_spec::runtime::Spec>> {
    let path = bundle.join("config.json");
    if !path.exists() {
        return Ok(None);
    }
    let bad = |e: &dyn std::fmt::Display| {
        HostError::Invalid(format!("{}: not a valid OCI runtime configuration: {e}; fix it or remove it (rtslice then writes its own)", path.display()))
    };
    let text = std::fs::read_to_string(&path).map_err(|source| HostError::Read { path: path.clone(), source })?;
    let v: Value = serde_json::from_str(&text).map_err(|e| bad(&e))?;
    parse_user_config(v).map(Some).map_err(|e| bad(&e))
}

/// A user's configuration as the `oci-spec` types take it. runc accepts configs that leave out
/// `ociVersion`, `process.user` and `process.cwd` (`runc spec` writes them, hand-written ones often
/// do not); the types require them, so their runc defaults are filled in first.
pub fn parse_user_config(mut v: Value) -> std::result::Result<oci_spec::runtime::Spec, serde_json::Error> {
    if let Some(obj) = v.as_object_mut() {
        obj.entry("ociVersion").or_insert_with(|| json!("1.0.2"));
        if let Some(p) = obj.get_mut("process").and_then(Value::as_object_mut) {
            p.entry("user").or_insert_with(|| json!({"uid": 0, "gid": 0}));
            p.entry("cwd").or_insert_with(|| json!("/"));
        }
    }
    serde_json::from_value(v)
}

fn scheduler_json(p: SchedAttr) -> Value {
    match p {
        SchedAttr::Fifo { priority } => json!({"policy": "SCHED_FIFO", "priority": priority}),
        SchedAttr::Rr { priority } => json!({"policy": "SCHED_RR", "priority": priority}),
        SchedAttr::Deadline { runtime_ns, deadline_ns, period_ns, reclaim } => {
            let mut flags = vec!["SCHED_FLAG_RESET_ON_FORK"];
            if reclaim {
                flags.push("SCHED_FLAG_RECLAIM");
            }
            json!({"policy": "SCHED_DEADLINE", "runtime": runtime_ns, "deadline": deadline_ns, "period": period_ns, "flags": flags})
        }
        SchedAttr::Batch { nice } => json!({"policy": "SCHED_BATCH", "nice": nice}),
        SchedAttr::Idle => json!({"policy": "SCHED_IDLE"}),
        SchedAttr::Other { nice } => json!({"policy": "SCHED_OTHER", "nice": nice}),
    }
}

/// An allow-list equivalent to Docker's default seccomp profile (moby profiles/seccomp/default.json):
/// everything a normal program needs; kernel-module, keyring, clock-setting, reboot, mount, BPF and
/// similar calls are refused with EPERM. sched_setattr/sched_setscheduler stay allowed (RT threads).
pub fn default_seccomp() -> Value {
    const ALLOWED: &str = "accept accept4 access adjtimex alarm bind brk capget capset chdir chmod chown chown32 \
clock_adjtime clock_getres clock_gettime clock_nanosleep close close_range connect copy_file_range creat dup dup2 dup3 \
epoll_create epoll_create1 epoll_ctl epoll_pwait epoll_pwait2 epoll_wait eventfd eventfd2 execve execveat exit exit_group \
faccessat faccessat2 fadvise64 fallocate fanotify_mark fchdir fchmod fchmodat fchown fchownat fcntl fdatasync \
fgetxattr flistxattr flock fork fremovexattr fsetxattr fstat fstatfs fsync ftruncate futex futex_waitv futimesat \
get_robust_list get_thread_area getcpu getcwd getdents getdents64 getegid geteuid getgid getgroups getitimer \
getpeername getpgid getpgrp getpid getppid getpriority getrandom getresgid getresuid getrlimit getrusage getsid \
getsockname getsockopt gettid gettimeofday getuid getxattr inotify_add_watch inotify_init inotify_init1 \
inotify_rm_watch io_cancel io_destroy io_getevents io_pgetevents io_setup io_submit ioctl ioprio_get ioprio_set \
kill landlock_add_rule landlock_create_ruleset landlock_restrict_self lchown lgetxattr link linkat listen listxattr \
llistxattr lremovexattr lseek lsetxattr lstat madvise membarrier memfd_create mincore mkdir mkdirat mknod mknodat \
mlock mlock2 mlockall mmap mprotect mq_getsetattr mq_notify mq_open mq_timedreceive mq_timedsend mq_unlink mremap \
msgctl msgget msgrcv msgsnd msync munlock munlockall munmap nanosleep newfstatat open openat openat2 pause pidfd_open \
pidfd_send_signal pipe pipe2 poll ppoll prctl pread64 preadv preadv2 prlimit64 pselect6 pwrite64 pwritev pwritev2 \
read readahead readlink readlinkat readv recv recvfrom recvmmsg recvmsg remap_file_pages removexattr rename renameat \
renameat2 restart_syscall rmdir rseq rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn \
rt_sigsuspend rt_sigtimedwait rt_tgsigqueueinfo sched_get_priority_max sched_get_priority_min sched_getaffinity \
sched_getattr sched_getparam sched_getscheduler sched_rr_get_interval sched_setaffinity sched_setattr sched_setparam \
sched_setscheduler sched_yield select semctl semget semop semtimedop send sendfile sendmmsg sendmsg sendto \
set_robust_list set_thread_area set_tid_address setfsgid setfsuid setgid setgroups setitimer setpgid setpriority \
setregid setresgid setresuid setreuid setrlimit setsid setsockopt setuid setxattr shmat shmctl shmdt shmget shutdown \
sigaltstack signalfd signalfd4 socket socketpair splice stat statfs statx symlink symlinkat sync sync_file_range \
syncfs sysinfo tee tgkill time timer_create timer_delete timer_getoverrun timer_gettime timer_settime timerfd_create \
timerfd_gettime timerfd_settime times tkill truncate umask uname unlink unlinkat utime utimensat utimes vfork \
wait4 waitid waitpid write writev arch_prctl clone clone3 chroot";
    let names: Vec<&str> = ALLOWED.split_whitespace().collect();
    json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 1,
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
        "syscalls": [{"names": names, "action": "SCMP_ACT_ALLOW"}]
    })
}

/// Builds a minimal bundle from Debian's busybox-static (/bin/busybox): rootfs/bin/busybox and one
/// symlink per applet. `config.json` is written later by apply.
pub fn busybox_bundle(dir: &Path) -> Result<PathBuf> {
    let busybox = ["/bin/busybox", "/usr/bin/busybox"].iter().map(PathBuf::from).find(|p| p.is_file()).ok_or_else(|| {
        HostError::Unsupported {
            what: "busybox not found".into(),
            fix: "install Debian's busybox-static (apt-get install busybox-static)".into(),
        }
    })?;
    let bin = dir.join("rootfs/bin");
    let io = |e: std::io::Error| HostError::Create { path: bin.clone(), source: e };
    std::fs::create_dir_all(&bin).map_err(io)?;
    for d in ["proc", "sys", "dev", "tmp", "etc", "usr/bin", "sbin"] {
        std::fs::create_dir_all(dir.join("rootfs").join(d)).map_err(io)?;
    }
    let target = bin.join("busybox");
    std::fs::copy(&busybox, &target).map_err(io)?;
    let list = Command::new(&target).arg("--list").output().map_err(io)?;
    if !list.status.success() {
        return Err(HostError::Unsupported {
            what: format!("{} --list failed", busybox.display()),
            fix: "install busybox-static (a statically linked busybox)".into(),
        });
    }
    for applet in String::from_utf8_lossy(&list.stdout).split_whitespace() {
        if applet == "busybox" {
            continue;
        }
        let link = bin.join(applet);
        if !link.exists() {
            std::os::unix::fs::symlink("busybox", &link).map_err(io)?;
        }
    }
    Ok(dir.to_path_buf())
}

pub fn write_config(bundle: &Path, config: &Value) -> Result<()> {
    let path = bundle.join("config.json");
    let text = serde_json::to_string_pretty(config).map_err(|e| HostError::other(e.to_string()))?;
    std::fs::write(&path, text).map_err(|source| HostError::Write { path, value: "<config.json>".into(), source })
}

fn runc_cmd(runc: &Path, root: &Path) -> Command {
    let mut c = Command::new(runc);
    c.arg("--root").arg(root);
    c
}

/// `runc create` then `runc start`; returns the container's init pid. Output goes to `log`.
pub fn runc_run(runc: &Path, root: &Path, bundle: &Path, id: &str, log: &Path) -> Result<i32> {
    let fail = |reason: String| HostError::Launch { what: format!("runc container {id}"), reason };
    let pid_file = root.join(format!("{id}.pid"));
    std::fs::create_dir_all(root).map_err(|e| fail(format!("creating {}: {e}", root.display())))?;
    let logf = std::fs::File::create(log).map_err(|e| fail(format!("creating {}: {e}", log.display())))?;
    let status = runc_cmd(runc, root)
        .args(["create", "--bundle"])
        .arg(bundle)
        .arg("--pid-file")
        .arg(&pid_file)
        .arg(id)
        .stdin(Stdio::null())
        .stdout(logf.try_clone().map_err(|e| fail(e.to_string()))?)
        .stderr(logf)
        .status()
        .map_err(|e| fail(format!("running {}: {e}", runc.display())))?;
    if !status.success() {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        return Err(fail(format!("runc create failed ({status}): {}", text.trim())));
    }
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| fail(format!("runc wrote no pid file {}", pid_file.display())))?;
    Ok(pid)
}

pub fn runc_start(runc: &Path, root: &Path, id: &str) -> Result<()> {
    let out = runc_cmd(runc, root)
        .args(["start", id])
        .output()
        .map_err(|e| HostError::Launch { what: format!("runc container {id}"), reason: e.to_string() })?;
    if !out.status.success() {
        return Err(HostError::Launch {
            what: format!("runc container {id}"),
            reason: format!("runc start failed: {}", String::from_utf8_lossy(&out.stderr).trim()),
        });
    }
    Ok(())
}

/// Kills and deletes a container; a container that no longer exists is fine.
/// Stops a container as `docker stop` does: SIGTERM to every process in it, up to `grace` for them to
/// exit (polling `runc state`), then [`runc_delete`] (SIGKILL and removal).
pub fn runc_stop(runc: &Path, root: &Path, id: &str, grace: std::time::Duration) -> Result<()> {
    // Read before the container's processes go: their deadline bandwidth is released late.
    let dl_period = runc_init_pid(runc, root, id).and_then(|pid| crate::sched::longest_deadline_period(container_pids(pid)));
    let sent = runc_cmd(runc, root).args(["kill", "--all", id, "TERM"]).output();
    if sent.is_ok_and(|o| o.status.success()) {
        let deadline = std::time::Instant::now() + grace;
        while std::time::Instant::now() < deadline {
            let state = runc_cmd(runc, root).args(["state", id]).output();
            let running = state.as_ref().is_ok_and(|o| {
                o.status.success() && String::from_utf8_lossy(&o.stdout).contains("\"running\"")
            });
            if !running {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    let deleted = runc_delete(runc, root, id);
    crate::sched::wait_deadline_release(dl_period);
    deleted
}

/// The pid of a container's init process (`runc state`), None when it is not running.
fn runc_init_pid(runc: &Path, root: &Path, id: &str) -> Option<i32> {
    let out = runc_cmd(runc, root).args(["state", id]).output().ok().filter(|o| o.status.success())?;
    let state: Value = serde_json::from_slice(&out.stdout).ok()?;
    state["pid"].as_i64().filter(|&p| p > 0).and_then(|p| i32::try_from(p).ok())
}

/// A container's processes: its init and every descendant.
pub(crate) fn container_pids(init: i32) -> Vec<i32> {
    let Ok(init) = u32::try_from(init) else { return Vec::new() };
    rtslice_sys::procfs::process_tree(init).into_iter().filter_map(|p| i32::try_from(p).ok()).collect()
}

pub fn runc_delete(runc: &Path, root: &Path, id: &str) -> Result<()> {
    let _ = runc_cmd(runc, root).args(["kill", id, "KILL"]).output();
    let out = runc_cmd(runc, root)
        .args(["delete", "--force", id])
        .output()
        .map_err(|e| HostError::Launch { what: format!("runc delete {id}"), reason: e.to_string() })?;
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success() || err.contains("does not exist") || err.contains("not exist") {
        Ok(())
    } else {
        Err(HostError::Launch { what: format!("runc delete {id}"), reason: err.trim().to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_parsing() {
        assert_eq!(parse_runc_version("runc version 1.1.5+ds1\ncommit: x\n"), Some((1, 1, 5)));
        assert_eq!(parse_runc_version("runc version 1.2.0-rc.1\n"), Some((1, 2, 0)));
        assert_eq!(parse_runc_version("crun version 1.8\n"), None);
    }

    #[test]
    fn config_carries_budget_caps_and_scheduler_only_when_supported() {
        let c = ContainerConfig {
            id: "t".into(),
            args: vec!["sh".into()],
            cgroups_path: "/rtslice/w/t".into(),
            cpus: CpuList::parse("1").unwrap(),
            mems: "0".into(),
            rt: Some(Reservation::from_micros(300000, 1000000)),
            scheduler: Some(SchedAttr::Fifo { priority: 10 }),
            netns: true,
            seccomp: true,
        };
        let old = config_json(&c, Some((1, 1, 5)));
        assert_eq!(old["linux"]["resources"]["cpu"]["realtimeRuntime"], 300000);
        assert_eq!(old["linux"]["resources"]["cpu"]["cpus"], "1");
        assert!(old["process"].get("scheduler").is_none());
        assert!(old["process"]["capabilities"]["bounding"].as_array().unwrap().iter().any(|v| v == "CAP_SYS_NICE"));
        assert!(old["linux"]["namespaces"].as_array().unwrap().iter().any(|n| n["type"] == "network"));
        assert_eq!(old["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ERRNO");
        let new = config_json(&c, Some((1, 2, 3)));
        assert_eq!(new["process"]["scheduler"]["policy"], "SCHED_FIFO");
        let names = default_seccomp()["syscalls"][0]["names"].as_array().unwrap().clone();
        assert!(names.iter().any(|n| n == "sched_setattr"));
        assert!(!names.iter().any(|n| n == "init_module" || n == "kexec_load" || n == "bpf"));
    }

    fn cc() -> ContainerConfig {
        ContainerConfig {
            id: "vbs".into(),
            args: vec!["sh".into()],
            cgroups_path: "/rtslice/w/vbs".into(),
            cpus: CpuList::parse("1").unwrap(),
            mems: "0".into(),
            rt: Some(Reservation::from_micros(20000, 100000)),
            scheduler: Some(SchedAttr::Fifo { priority: 10 }),
            netns: true,
            seccomp: true,
        }
    }

    #[test]
    fn merge_keeps_the_users_configuration_and_adds_rtslices_part() {
        let user: oci_spec::runtime::Spec = serde_json::from_value(json!({
            "ociVersion": "1.0.2",
            "process": {"args": ["/bin/emu", "--profile", "srsenb"], "env": ["MODE=lte"], "cwd": "/work", "user": {"uid": 1000, "gid": 100},
                        "terminal": true, "capabilities": {"bounding": ["CAP_KILL"], "effective": ["CAP_KILL"], "permitted": ["CAP_KILL"]}},
            "root": {"path": "rootfs", "readonly": true},
            "hostname": "users-box",
            "mounts": [{"destination": "/data", "type": "bind", "source": "/srv/data", "options": ["rbind", "ro"]}],
            "linux": {"resources": {"devices": [{"allow": true, "type": "c", "major": 10, "minor": 200, "access": "rwm"}], "memory": {"limit": 1073741824},
                                    "cpu": {"shares": 512}},
                      "namespaces": [{"type": "pid"}, {"type": "mount"}], "cgroupsPath": "/users/own"}
        }))
        .unwrap();
        let m = merge_config(user, &cc(), false, Path::new("/abs/rootfs"), Some((1, 1, 5))).unwrap();
        let v = serde_json::to_value(&m).unwrap();
        // The user's.
        assert_eq!(v["process"]["args"], json!(["/bin/emu", "--profile", "srsenb"]));
        assert_eq!(v["process"]["env"], json!(["MODE=lte"]));
        assert_eq!(v["process"]["cwd"], "/work");
        assert_eq!(v["process"]["user"]["uid"], 1000);
        assert_eq!(v["hostname"], "users-box");
        assert_eq!(v["mounts"][0]["destination"], "/data");
        assert_eq!(v["mounts"].as_array().unwrap().len(), 1);
        assert_eq!(v["linux"]["resources"]["devices"][0]["major"], 10);
        assert_eq!(v["linux"]["resources"]["memory"]["limit"], 1073741824i64);
        assert_eq!(v["linux"]["resources"]["cpu"]["shares"], 512);
        assert_eq!(v["root"]["readonly"], true);
        // rtslice's.
        assert_eq!(v["root"]["path"], "/abs/rootfs");
        assert_eq!(v["process"]["terminal"], false);
        assert_eq!(v["linux"]["cgroupsPath"], "/rtslice/w/vbs");
        assert_eq!(v["linux"]["resources"]["cpu"]["cpus"], "1");
        assert_eq!(v["linux"]["resources"]["cpu"]["realtimeRuntime"], 20000);
        assert_eq!(v["linux"]["resources"]["cpu"]["realtimePeriod"], 100000);
        let caps = v["process"]["capabilities"]["bounding"].as_array().unwrap();
        assert!(["CAP_KILL", "CAP_SYS_NICE", "CAP_IPC_LOCK"].iter().all(|c| caps.iter().any(|x| x == c)), "{caps:?}");
        let ns: Vec<&str> = v["linux"]["namespaces"].as_array().unwrap().iter().map(|n| n["type"].as_str().unwrap()).collect();
        assert_eq!(ns, vec!["pid", "mount", "network"]);
        assert_eq!(v["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ERRNO");
        assert!(v["process"].get("scheduler").is_none(), "runc 1.1 has no process.scheduler");
        // rtslice's args only when asked to replace the user's; the scheduler with runc >= 1.2.
        let user2: oci_spec::runtime::Spec = serde_json::from_value(v.clone()).unwrap();
        let m2 = serde_json::to_value(merge_config(user2, &cc(), true, Path::new("/abs/rootfs"), Some((1, 2, 0))).unwrap()).unwrap();
        assert_eq!(m2["process"]["args"], json!(["sh"]));
        assert_eq!(m2["process"]["scheduler"]["policy"], "SCHED_FIFO");
    }

    #[test]
    fn a_minimal_config_gets_namespaces_mounts_and_capabilities() {
        // What examples/oci/make-busybox-bundle.sh writes: no user, no linux section, no mounts.
        let user = parse_user_config(json!({
            "ociVersion": "1.0.2", "process": {"args": ["sh"], "env": ["PATH=/bin"], "cwd": "/"}, "root": {"path": "rootfs", "readonly": true}
        }))
        .unwrap();
        let c = ContainerConfig { netns: false, seccomp: false, ..cc() };
        let v = serde_json::to_value(merge_config(user, &c, false, Path::new("/r"), None).unwrap()).unwrap();
        let ns: Vec<&str> = v["linux"]["namespaces"].as_array().unwrap().iter().map(|n| n["type"].as_str().unwrap()).collect();
        assert_eq!(ns, vec!["pid", "ipc", "uts", "mount"]);
        assert!(v["mounts"].as_array().unwrap().iter().any(|m| m["destination"] == "/proc"));
        assert!(v["process"]["capabilities"]["bounding"].as_array().unwrap().iter().any(|c| c == "CAP_SYS_NICE"));
        assert!(v["linux"].get("seccomp").is_none());
        assert_eq!(v["linux"]["resources"]["cpu"]["realtimeRuntime"], 20000);
    }

    #[test]
    fn device_nodes_are_added_and_allowed_after_the_users_rules() {
        use rtslice_sys::pci::{DeviceNode, NodeKind};
        let user: Value = json!({
            "ociVersion": "1.0.2",
            "process": {"args": ["du"], "cwd": "/", "user": {"uid": 0, "gid": 0}},
            "root": {"path": "rootfs"},
            "linux": {
                "devices": [{"path": "/dev/vfio/12", "type": "c", "major": 1, "minor": 1}, {"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}],
                "resources": {"devices": [{"allow": false, "access": "rwm"}, {"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rwm"}]}
            }
        });
        let mut spec = merge_config(parse_user_config(user).unwrap(), &cc(), false, Path::new("/b/rootfs"), None).unwrap();
        let node = |path: &str, kind, major, minor| DeviceNode { path: path.into(), kind, major, minor, mode: 0o660, uid: 0, gid: 6 };
        let nodes = [node("/dev/vfio/12", NodeKind::Char, 243, 0), node("/dev/vfio/vfio", NodeKind::Char, 10, 196), node("/dev/nvme0n1", NodeKind::Block, 259, 0)];
        add_devices(&mut spec, &nodes).unwrap();
        let v = serde_json::to_value(&spec).unwrap();
        let devices = v["linux"]["devices"].as_array().unwrap();
        let paths: Vec<&str> = devices.iter().map(|d| d["path"].as_str().unwrap()).collect();
        assert_eq!(paths, ["/dev/fuse", "/dev/vfio/12", "/dev/vfio/vfio", "/dev/nvme0n1"], "the user's stale /dev/vfio/12 is replaced");
        assert_eq!(devices[1], json!({"path": "/dev/vfio/12", "type": "c", "major": 243, "minor": 0, "fileMode": 0o660, "uid": 0, "gid": 6}));
        assert_eq!(devices[3]["type"], "b");
        let rules = v["linux"]["resources"]["devices"].as_array().unwrap();
        assert_eq!(rules.len(), 5);
        assert_eq!(rules[0], json!({"allow": false, "access": "rwm"}), "the user's deny-all stays first");
        assert_eq!(rules[2], json!({"allow": true, "type": "c", "major": 243, "minor": 0, "access": "rwm"}));
        assert_eq!(rules[4], json!({"allow": true, "type": "b", "major": 259, "minor": 0, "access": "rwm"}));
        // rtslice's part is still there, and nothing is added without nodes.
        assert_eq!(v["linux"]["resources"]["cpu"]["cpus"], "1");
        let before = serde_json::to_value(&spec).unwrap();
        add_devices(&mut spec, &[]).unwrap();
        assert_eq!(serde_json::to_value(&spec).unwrap(), before);
    }
}
