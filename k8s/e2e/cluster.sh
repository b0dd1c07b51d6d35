#!/bin/bash
# cluster.sh up|down|kubectl ARGS…|status: the harness's one-node cluster by hand (root), for
# looking into a failure of `make test-k8s` stage by stage. `up` builds/takes the binaries and images
# and starts etcd, kube-apiserver, containerd (NRI on), kubelet and kube-scheduler, waits for the
# node Ready and removes the not-ready taint; it takes the host-wide kernel-test lock only for the
# snapshot. `down` tears everything down, writes back the sysctls kubelet changed and prints what
# differs from the snapshot `up` took. Logs: $CARGO_TARGET_DIR/k8s/ (see lib.sh).
set -uo pipefail
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "cluster.sh: needs root"; exit 1; }
K8S_BIN=$("$K8S_E2E/../build/build.sh" | tail -1) || exit 1
snap=$K8S_LOGS/snapshot.manual
case ${1:-} in
  up)
    mkdir -p "$K8S_LOGS"
    [ -d "$snap" ] || "$K8S_E2E/snapshot.sh" "$snap"
    (cd "$K8S_REPO" && ${CARGO:-cargo} build -p rtslice -q) || exit 1
    "$K8S_E2E/../images/build.sh" "$K8S_LOGS/images" "${CARGO_TARGET_DIR:-$K8S_REPO/target}/debug/rtslice" >/dev/null || exit 1
    ip=$(node_ip); mkdir -p "$K8S_STATE" "$K8S_RUN"
    [ -f "$K8S_RUN/absent-paths" ] || note_absent_paths
    [ -f "$K8S_RUN/iptables-v4" ] || save_iptables
    make_pki "$ip" && start_etcd && start_apiserver "$ip" && start_containerd \
      && import_images "$K8S_LOGS"/images/{pause,busybox,emu}.tar && start_kubelet "$ip" \
      && start_scheduler "${RTSLICE_K8S_EXTENDER:-}" \
      && wait_for 120 "node Ready" "$K8S_LOGS/kubelet.log" node_ready \
      && kc taint nodes "$K8S_NODE" node.kubernetes.io/not-ready:NoSchedule- \
      && echo "cluster.sh: up; kubectl: $0 kubectl get pods -A" ;;
  down)
    down
    [ -d "$snap" ] || { echo "cluster.sh: down (no snapshot of before up to compare with)"; exit 0; }
    restore_sysctls "$snap"
    "$K8S_E2E/snapshot.sh" "$K8S_LOGS/snapshot.manual-after"
    for kind in mounts cgroups netns links iptables sysctls paths; do leftovers "$snap" "$K8S_LOGS/snapshot.manual-after" $kind | sed "s/^/$kind /"; done
    our_processes | sed 's/^/process /'
    rm -rf "$snap" "$K8S_LOGS/snapshot.manual-after" ;;
  kubectl) shift; kc "$@" ;;
  status)
    for c in etcd kube-apiserver containerd kubelet kube-scheduler node-service nri-plugin dra-plugin extender; do
      alive "$c" && echo "$c: running (pid $(cat "$K8S_RUN/pids/$c"), log $K8S_LOGS/$c.log)" || echo "$c: not running"
    done ;;
  *) echo "usage: $0 up|down|kubectl ARGS...|status"; exit 2 ;;
esac
