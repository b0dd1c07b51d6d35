# shellcheck shell=bash
# The one-node cluster of `make test-k8s`, as functions sourced by k8s/e2e/run.sh (the test) and
# k8s/e2e/cluster.sh (by hand: up, down, kubectl, status). See k8s/README.md.
#
# Everything the cluster writes lives under three directories of its own, so the teardown knows
# what to remove and can never touch a system containerd or kubelet:
#   $K8S_STATE (/var/lib/rtslice-k8s)  etcd data, containerd root, kubelet root, certs, configs
#   $K8S_RUN   (/run/rtslice-k8s)      sockets, pid files, runc state
#   $K8S_LOGS  ($CARGO_TARGET_DIR/k8s)  one log per component, kept after the run
# Every port is unusual (30xxx-31xxx) and bound to loopback or the node IP only; none lies in the
# kernel's ephemeral range (ip_local_port_range, 32768-60999 by default), where any outgoing
# connection of the cluster may hold it as its source port when its server starts, and the server
# then fails to listen.
# DRA consumable capacity (KEP-5075, alpha in 1.34): rtslice's DRA driver publishes each CPU's
# real-time bandwidth as a capacity that several claims share (docs/dra.md).
FEATURE_GATES=DRAConsumableCapacity=true
K8S_E2E=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
K8S_REPO=$(cd "$K8S_E2E/../.." && pwd)
. "$K8S_E2E/../build/versions.env"
K8S_STATE=${RTSLICE_K8S_STATE:-/var/lib/rtslice-k8s}
K8S_RUN=${RTSLICE_K8S_RUN:-/run/rtslice-k8s}
K8S_LOGS=${RTSLICE_K8S_LOGS:-${CARGO_TARGET_DIR:-$K8S_REPO/target}/k8s}
K8S_NODE=${RTSLICE_K8S_NODE:-rtslice-e2e}
ETCD_PORT=31379
ETCD_PEER_PORT=31380
APISERVER_PORT=31443
SCHEDULER_PORT=30259
KUBELET_PORT=30250
KUBELET_HEALTHZ_PORT=30248
EXTENDER_PORT=31888
KUBECONFIG_FILE=$K8S_STATE/pki/admin.kubeconfig
CONTAINERD_SOCK=$K8S_RUN/containerd/containerd.sock
NRI_SOCK=$K8S_RUN/nri/nri.sock
# Images, all imported from local OCI archives (k8s/images): nothing is ever pulled.
PAUSE_IMAGE=docker.io/rtslice/pause:e2e
BUSYBOX_IMAGE=docker.io/rtslice/busybox:e2e
EMU_IMAGE=docker.io/rtslice/emu:e2e
# Kubelet changes these at start (setupKernelTunables); the teardown writes back what was there.
KUBELET_SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes"

say() { echo "k8s: $*"; }
log() { echo "k8s: $*" >&2; }

node_ip() {  # the address of the default route's interface: kubelet refuses a loopback node IP
  ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -1
}

kc() { "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" --request-timeout=20s "$@"; }

# wait_for SECONDS WHAT LOG CMD...: run CMD every half second until it succeeds; on timeout print
# which component did not come up and where its log is.
wait_for() {
  local secs=$1 what=$2 logf=$3 t0; shift 3
  t0=$(date +%s)
  until "$@" >/dev/null 2>&1; do
    if [ $(( $(date +%s) - t0 )) -ge "$secs" ]; then
      log "timeout: $what not reached after ${secs}s (log: $logf; last lines below)"
      [ -f "$logf" ] && tail -n 15 "$logf" | sed 's/^/    /' >&2
      return 1
    fi
    sleep 0.5
  done
}

# start NAME CMD...: a component in its own session (so its children can be found by group), its
# pid in $K8S_RUN/pids/NAME, output in $K8S_LOGS/NAME.log.
start() {
  local name=$1; shift
  mkdir -p "$K8S_RUN/pids" "$K8S_LOGS"
  setsid "$@" >"$K8S_LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$K8S_RUN/pids/$name"
}

alive() { [ -f "$K8S_RUN/pids/$1" ] && kill -0 "$(cat "$K8S_RUN/pids/$1")" 2>/dev/null; }

# stop NAME [GRACE]: SIGTERM the component we started (by its recorded pid), SIGKILL after GRACE s.
stop() {
  local name=$1 grace=${2:-15} pid i
  [ -f "$K8S_RUN/pids/$name" ] || return 0
  pid=$(cat "$K8S_RUN/pids/$name")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < grace * 5; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      log "$name (pid $pid) ignored SIGTERM for ${grace}s; SIGKILL"
      kill -KILL "$pid" 2>/dev/null; sleep 0.2
    fi
  fi
  rm -f "$K8S_RUN/pids/$name"
}

# ---- certificates and kubeconfig ------------------------------------------------------------------
make_pki() {
  local d=$K8S_STATE/pki ip=$1
  mkdir -p "$d"; chmod 700 "$d"
  (
    cd "$d" || exit 1
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=rtslice-e2e-ca
    # apiserver serving certificate: every name a client of this cluster uses.
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj /CN=kube-apiserver
    printf 'subjectAltName=IP:127.0.0.1,IP:%s,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' "$ip" >apiserver.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile apiserver.ext -out apiserver.crt
    # One client identity in system:masters for every component and the harness: this is a
    # throw-away single-user cluster; RBAC and the Node authorizer are not what it tests.
    openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr -subj "/CN=rtslice-e2e-admin/O=system:masters"
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile client.ext -out admin.crt
    # Service-account token signing key (the apiserver requires one even though no pod mounts a token).
    openssl genrsa -out sa.key 2048
    openssl rsa -in sa.key -pubout -out sa.pub
  ) >"$K8S_LOGS/pki.log" 2>&1 || { log "openssl failed making the cluster's certificates (log: $K8S_LOGS/pki.log)"; return 1; }
  cat >"$KUBECONFIG_FILE" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: "https://127.0.0.1:$APISERVER_PORT", certificate-authority: "$d/ca.crt"}
users:
- name: admin
  user: {client-certificate: "$d/admin.crt", client-key: "$d/admin.key"}
contexts:
- name: e2e
  context: {cluster: e2e, user: admin}
current-context: e2e
EOF
}

# Directories the components make at fixed paths whatever they are configured with: containerd's
# /run/containerd (its shims' sockets), kubelet's /var/lib/kubelet (device-plugins/ is a constant)
# and /var/log/containers (its log symlinks). Those absent before the cluster started are the
# cluster's: the teardown removes them (see down).
FIXED_PATHS="/run/containerd /var/lib/kubelet /var/log/containers"
note_absent_paths() {
  local p
  mkdir -p "$K8S_RUN"
  for p in $FIXED_PATHS; do [ -e "$p" ] || echo "$p"; done >"$K8S_RUN/absent-paths"
}

# ---- the components, in start order ---------------------------------------------------------------
start_etcd() {
  mkdir -p "$K8S_STATE/etcd"; chmod 700 "$K8S_STATE/etcd"
  start etcd "$K8S_BIN/etcd" --name e2e --data-dir "$K8S_STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "e2e=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls "" \
    --unsafe-no-fsync --snapshot-count 100000 --log-level warn
  wait_for 60 "etcd answering on 127.0.0.1:$ETCD_PORT" "$K8S_LOGS/etcd.log" \
    curl -fsS "http://127.0.0.1:$ETCD_PORT/health"
}

start_apiserver() {
  local d=$K8S_STATE/pki ip=$1
  # ServiceAccount admission is off: no controller manager runs to create the namespaces' default
  # service accounts, and the pods here need no API token. The endpoint reconciler is off: there is
  # no Service traffic, and it would keep rewriting the `kubernetes` Endpoints.
  start kube-apiserver "$K8S_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" --bind-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
    --advertise-address "$ip" --endpoint-reconciler-type none \
    --tls-cert-file "$d/apiserver.crt" --tls-private-key-file "$d/apiserver.key" --client-ca-file "$d/ca.crt" \
    --kubelet-client-certificate "$d/admin.crt" --kubelet-client-key "$d/admin.key" \
    --kubelet-preferred-address-types InternalIP \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$d/sa.pub" \
    --service-account-signing-key-file "$d/sa.key" --service-cluster-ip-range 10.96.0.0/24 \
    --authorization-mode RBAC --disable-admission-plugins ServiceAccount --feature-gates "$FEATURE_GATES" \
    --cert-dir "$K8S_STATE/apiserver-certs" --profiling=false
  # kube-apiserver takes 10-40 s here to install its APIs and bootstrap RBAC.
  wait_for 180 "kube-apiserver ready on 127.0.0.1:$APISERVER_PORT" "$K8S_LOGS/kube-apiserver.log" \
    kc get --raw /readyz
}

# start_scheduler [EXTENDER_URL]: with an extender, kube-scheduler asks it to filter, prioritize and
# bind every pod (nodeCacheCapable: only node names travel; not ignorable: no extender, no placement).
start_scheduler() {
  local ext=${1:-} cfg=$K8S_STATE/scheduler.yaml
  cat >"$cfg" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: "$KUBECONFIG_FILE"}
leaderElection: {leaderElect: false}
EOF
  if [ -n "$ext" ]; then
    cat >>"$cfg" <<EOF
extenders:
- urlPrefix: "$ext"
  filterVerb: filter
  prioritizeVerb: prioritize
  bindVerb: bind
  weight: 1
  nodeCacheCapable: true
  ignorable: false
  httpTimeout: 10s
EOF
  fi
  start kube-scheduler "$K8S_BIN/kube-scheduler" --config "$cfg" --feature-gates "$FEATURE_GATES" \
    --bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT" \
    --authentication-kubeconfig "$KUBECONFIG_FILE" --authorization-kubeconfig "$KUBECONFIG_FILE"
  wait_for 60 "kube-scheduler healthy on 127.0.0.1:$SCHEDULER_PORT" "$K8S_LOGS/kube-scheduler.log" \
    curl -fsSk "https://127.0.0.1:$SCHEDULER_PORT/healthz"
}

start_containerd() {
  local cfg=$K8S_STATE/containerd.toml
  mkdir -p "$K8S_STATE/cni/net.d" "$K8S_STATE/cni/ipam" "$K8S_RUN/containerd" "$K8S_RUN/nri" "$K8S_RUN/cdi"
  # A CNI network must be configured or containerd reports NetworkReady=false and the node never
  # gets Ready. The harness's pods use hostNetwork (a vBS's fronthaul is the host's NIC anyway), so
  # the bridge below is only set up if a pod without hostNetwork comes; the teardown removes it then.
  cat >"$K8S_STATE/cni/net.d/10-e2e.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "rtslice-e2e", "plugins": [
 {"type": "bridge", "bridge": "rtse2e0", "isGateway": false, "ipMasq": false,
  "ipam": {"type": "host-local", "dataDir": "$K8S_STATE/cni/ipam", "ranges": [[{"subnet": "10.244.77.0/24"}]]}},
 {"type": "loopback"}]}
EOF
  cat >"$cfg" <<EOF
version = 3
root = "$K8S_STATE/containerd"
state = "$K8S_RUN/containerd"
# Plugins that would probe devices or write outside root/state; none is needed here.
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$CONTAINERD_SOCK"

[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"

[plugins.'io.containerd.internal.v1.opt']
  path = "$K8S_STATE/opt"

[plugins.'io.containerd.cri.v1.runtime']
  # This VM lacks CAP_SYS_RESOURCE: containerd may not lower a container's oom_score_adj below its own.
  restrict_oom_score_adj = true
  # CDI specs (DRA claims' container edits, written by rtslice-dra) under our own run directory.
  enable_cdi = true
  cdi_spec_dirs = ["$K8S_RUN/cdi"]
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$K8S_STATE/cni/net.d"
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$K8S_RUN/runc"
        SystemdCgroup = false

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE_IMAGE"

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

# NRI: the rtslice plugin connects here (containerd calls NRI plugins only for containers made
# through CRI, i.e. by kubelet, never for \`ctr run\`).
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = "$NRI_SOCK"
  plugin_path = "$K8S_STATE/nri/plugins"
  plugin_config_path = "$K8S_STATE/nri/conf.d"
EOF
  start containerd "$K8S_BIN/containerd" --config "$cfg"
  wait_for 60 "containerd serving $CONTAINERD_SOCK" "$K8S_LOGS/containerd.log" \
    "$K8S_BIN/ctr" --address "$CONTAINERD_SOCK" version
}

# import_images ARCHIVE...: into containerd's k8s.io namespace (the one CRI uses).
import_images() {
  local a
  for a in "$@"; do
    "$K8S_BIN/ctr" --address "$CONTAINERD_SOCK" -n k8s.io images import --no-unpack=false "$a" >>"$K8S_LOGS/images.log" 2>&1 \
      || { log "ctr images import $a failed (log: $K8S_LOGS/images.log)"; return 1; }
  done
}

start_kubelet() {
  local ip=$1 cfg=$K8S_STATE/kubelet.yaml
  mkdir -p "$K8S_STATE/kubelet" "$K8S_STATE/pod-logs"
  # cgroupfs: this host's controllers are cgroup v1 and no systemd manages them. Eviction and image
  # GC thresholds are near zero, in bytes: the CI machine's disk may be fuller than kubelet's defaults
  # (15% free) allow — and than any percentage (under 1% free after the builds has been seen):
  # kubelet then evicts every pod right after placement, the extender rightly counts the failed pods
  # as nothing, and kube-scheduler keeps placing on the node. Under DiskPressure nothing here works.
  cat >"$cfg" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
containerRuntimeEndpoint: "unix://$CONTAINERD_SOCK"
address: "$ip"
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: "$K8S_STATE/pki/ca.crt"}
authorization: {mode: AlwaysAllow}
failSwapOn: false
failCgroupV1: false
podLogsDir: "$K8S_STATE/pod-logs"
evictionHard: {memory.available: "50Mi", nodefs.available: "100Mi", imagefs.available: "100Mi", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: ""
registerNode: true
syncFrequency: 10s
nodeStatusReportFrequency: 10s
featureGates: {${FEATURE_GATES%%=*}: true}
EOF
  start kubelet "$K8S_BIN/kubelet" --config "$cfg" --kubeconfig "$KUBECONFIG_FILE" \
    --root-dir "$K8S_STATE/kubelet" --cert-dir "$K8S_STATE/kubelet/pki" --hostname-override "$K8S_NODE" --node-ip "$ip" \
    --pod-infra-container-image "$PAUSE_IMAGE" --v 1
  wait_for 120 "kubelet healthy on 127.0.0.1:$KUBELET_HEALTHZ_PORT" "$K8S_LOGS/kubelet.log" \
    curl -fsS "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz"
}

node_ready() {
  [ "$(kc get node "$K8S_NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# ---- teardown -------------------------------------------------------------------------------------
# pids in every cgroup below /kubepods, in any v1 controller (the containers kubelet started).
kubepods_pids() {
  local c
  for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods; do
    [ -d "$c" ] && find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null
  done | sort -un
}

# Our shims: containerd-shim-runc-v2 processes running our binary (they outlive containerd).
shim_pids() {
  local p exe
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    [ "$exe" = "$(readlink -f "$K8S_BIN/containerd-shim-runc-v2")" ] && echo "${p#/proc/}"
  done
}

# down: delete the pods through the API first (kubelet stops them and releases what the NRI plugin
# applied), then stop every component, then remove what a crash could have left.
down() {
  local t0 p m c
  if alive kube-apiserver && alive kubelet; then
    kc delete pods --all --all-namespaces --grace-period=2 --wait=false >/dev/null 2>&1
    t0=$(date +%s)
    while [ -n "$(kc get pods -A --field-selector spec.nodeName="$K8S_NODE" -o name 2>/dev/null)" ]; do
      [ $(( $(date +%s) - t0 )) -ge 60 ] && { log "teardown: the node's pods still exist after 60s; stopping anyway"; break; }
      sleep 1
    done
  fi
  stop extender 10
  for p in $(ls "$K8S_RUN/pids" 2>/dev/null | grep '^inventory-'); do stop "$p" 10; done
  stop dra-plugin 10
  stop nri-plugin 10
  stop node-service 20
  # The node service undoes its node on exit (--reset-on-exit); if it died before, undo it here so no
  # rtslice cgroup outlives the run (the next apply on this host would find it taken).
  if [ -n "${RTSLICE:-}" ] && [ -d "$K8S_STATE/rtslice/state" ]; then
    "$RTSLICE" reset --state-dir "$K8S_STATE/rtslice/state" >>"$K8S_LOGS/teardown.log" 2>&1 \
      || log "teardown: rtslice reset of the node service's state failed (see $K8S_LOGS/teardown.log)"
  fi
  stop kubelet 20
  stop containerd 20
  stop kube-scheduler 10
  stop kube-scheduler-rtslice 10  # make bench-k8s's second profile
  stop kube-apiserver 20
  stop etcd 15
  # Whatever is left of the containers (a crash, a kill): their processes (found by kubelet's
  # cgroups), then our shims. These are all processes this cluster started.
  for p in $(kubepods_pids) $(shim_pids); do kill -KILL "$p" 2>/dev/null && log "teardown: killed leftover pid $p"; done
  sleep 0.5
  # Mounts under our directories (container rootfs overlays, sandbox shm, kubelet volumes), deepest first.
  for m in $(awk '{print $5}' /proc/self/mountinfo | grep -E "^($K8S_STATE|$K8S_RUN)(/|$)" | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "teardown: cannot unmount $m"
  done
  # kubelet's cgroups, deepest first, in every hierarchy.
  for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods; do
    [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
  for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods; do
    [ -d "$c" ] && log "teardown: cannot remove cgroup $c"
  done
  # The CNI bridge, only if a non-hostNetwork pod made it.
  ip link show rtse2e0 >/dev/null 2>&1 && ip link delete rtse2e0
  for p in $(cat "$K8S_RUN/absent-paths" 2>/dev/null); do
    if grep -q " $p/" /proc/self/mountinfo; then log "teardown: $p still has mounts; left in place"
    else rm -rf "$p"; fi
  done
  restore_iptables
  rm -rf "$K8S_STATE" "$K8S_RUN"
  return 0
}

# ---- what the teardown must leave as it found -----------------------------------------------------
# restore_sysctls BEFORE_DIR: write back every sysctl whose value differs from the snapshot (kubelet
# sets vm.overcommit_memory, kernel.panic, kernel.panic_on_oops and kernel.keys.* at start and never
# undoes them). Prints `key: now -> restored` per key.
restore_sysctls() {
  local before=$1 now key val
  "$K8S_E2E/snapshot.sh" "$K8S_LOGS/snapshot.tmp"
  while IFS= read -r line; do
    key=${line%% = *}; val=${line#* = }
    now=$(grep -m1 "^$key = " "$K8S_LOGS/snapshot.tmp/sysctls" | sed 's/^[^=]* = //')
    [ "$now" = "$val" ] && continue
    if sysctl -q -w "$key=$val" >/dev/null 2>&1; then echo "$key: ${now:-?} -> $val"
    else echo "$key: ${now:-?}, cannot write back $val"; fi
  done < <(comm -23 "$before/sysctls" "$K8S_LOGS/snapshot.tmp/sysctls")
  rm -rf "$K8S_LOGS/snapshot.tmp"
}

# restore_iptables: kubelet adds KUBE-FIREWALL (a rule in INPUT/OUTPUT), KUBE-KUBELET-CANARY and
# KUBE-IPTABLES-HINT to the filter, nat and mangle tables and never removes them. Each table the
# snapshot taken before the cluster ($K8S_RUN/iptables-v4|v6) did not hold as it is now is restored
# from it (iptables-restore replaces a table whole: rules flushed, user chains deleted); a table that
# did not exist then is restored empty.
restore_iptables() {
  local fam save restore t before now
  for fam in v4 v6; do
    save=iptables-save restore=iptables-restore
    [ $fam = v6 ] && save=ip6tables-save restore=ip6tables-restore
    command -v $save >/dev/null && [ -f "$K8S_RUN/iptables-$fam" ] || continue
    for t in $($save 2>/dev/null | sed -n 's/^\*//p'); do
      before=$(sed -n "/^\*$t\$/,/^COMMIT\$/p" "$K8S_RUN/iptables-$fam")
      now=$($save -t "$t" 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//')
      [ "$now" = "$before" ] && continue
      printf '%s\n' "${before:-*$t
COMMIT}" | $restore -T "$t" 2>&1 | sed "s/^/teardown: $restore -T $t: /" >&2
    done
  done
}

# save_iptables: the rules before the cluster, for restore_iptables.
save_iptables() {
  mkdir -p "$K8S_RUN"
  command -v iptables-save >/dev/null && iptables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//' >"$K8S_RUN/iptables-v4"
  command -v ip6tables-save >/dev/null && ip6tables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//' >"$K8S_RUN/iptables-v6"
  return 0
}

# leftovers BEFORE_DIR AFTER_DIR KIND: what AFTER has of KIND that BEFORE had not, or lost (one a line).
leftovers() {
  diff "$1/$3" "$2/$3" | grep '^[<>]' | sed 's/^>/added:/; s/^</removed:/'
}

# Processes of this cluster still alive: by the binaries we built (cache), runc, and the cgroups.
our_processes() {
  local p exe
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    case $exe in "${RTSLICE_K8S_CACHE:-/var/cache/rtslice/k8s}"/*) echo "${p#/proc/} $exe" ;; esac
  done
  for p in $(kubepods_pids); do echo "$p $(cat /proc/$p/comm 2>/dev/null) (in kubepods)"; done
}
