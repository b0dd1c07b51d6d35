#!/bin/bash
# `make test-k8s` (issue 14): builds (or takes from the cache) a real Kubernetes control plane and
# node, starts them on this machine, runs the end-to-end checks, tears everything down and checks
# that nothing is left. One line per check, `k8s: PASS|FAIL <check> …`, then `k8s: N passed, M failed`;
# non-zero exit on any failure. See k8s/README.md.
#
# Environment: CARGO, CARGO_TARGET_DIR, RTSLICE_K8S_RTSLICE (an rtslice binary to use instead of
# the one `cargo test --workspace --no-run` builds), RTSLICE_K8S_CACHE (binaries, default /var/cache/rtslice/k8s),
# RTSLICE_K8S_LOGS (default $CARGO_TARGET_DIR/k8s), RTSLICE_K8S_KEEP=1 (leave the cluster up after
# the checks, for a look by hand; `k8s/e2e/cluster.sh down` ends it), RTSLICE_K8S_LOCK_TIMEOUT (s to
# wait for the host-wide kernel-test lock, default 1800).
set -uo pipefail
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
# All of it in one function: bash reads a script as it runs it, and the whole function is parsed
# before it starts, so editing this file cannot derail a run in progress.
main() {
T0=$(date +%s)
passed=0 failed=0
pass() { passed=$((passed + 1)); say "PASS $1${2:+ — $2}"; }
fail() { failed=$((failed + 1)); say "FAIL $1 — $2"; }
finish() {
  say "wall time $(( $(date +%s) - T0 ))s; logs in $K8S_LOGS/"
  echo "k8s: $passed passed, $failed failed"
  # An explicit status: a bare `exit` in an EXIT trap keeps the status the shell was leaving with.
  [ "$failed" -eq 0 ] && exit 0
  exit 1
}

if [ "$(id -u)" -ne 0 ]; then
  say "skipped: the cluster needs root (kubelet, containerd, cgroups, mounts); run: sudo make test-k8s"
  exit 0
fi
CARGO=${CARGO:-cargo}
rm -rf "$K8S_LOGS" && mkdir -p "$K8S_LOGS"

# ---- 1. binaries and images -----------------------------------------------------------------------
t=$(date +%s)
if K8S_BIN=$("$K8S_E2E/../build/build.sh" 2>"$K8S_LOGS/build.log" | tail -1) && [ -x "$K8S_BIN/kubelet" ]; then
  pass build "Kubernetes $K8S_VERSION, containerd $CONTAINERD_VERSION, $(basename "$(readlink -f "$K8S_BIN/etcd" | sed 's|/root/usr/bin/etcd||')") in $(( $(date +%s) - t ))s ($K8S_BIN)"
else
  fail build "k8s/build/build.sh failed: $(tail -1 "$K8S_LOGS/build.log")"; finish
fi
export K8S_BIN
t=$(date +%s)
# The rtslice binary `cargo test --workspace` built (what `make test` just ran: no second build, no
# feature-unification rebuild, as the kernel matrix does), unless RTSLICE_K8S_RTSLICE names one.
RTSLICE=${RTSLICE_K8S_RTSLICE:-}
if [ -z "$RTSLICE" ]; then
  RTSLICE=$(cd "$K8S_REPO" && "$CARGO" test --workspace --no-run --message-format=json 2>"$K8S_LOGS/cargo-build.log" \
    | python3 -c 'import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "rtslice" and not m["profile"]["test"]:
        print(m["executable"])' | tail -1)
fi
[ -x "$RTSLICE" ] || { fail images "no rtslice binary from cargo test --workspace --no-run (log: $K8S_LOGS/cargo-build.log)"; finish; }
if "$K8S_E2E/../images/build.sh" "$K8S_LOGS/images" "$RTSLICE" >"$K8S_LOGS/images-build.log" 2>&1; then
  pass images "pause, busybox, emu as OCI archives in $(( $(date +%s) - t ))s"
else
  fail images "k8s/images/build.sh failed: $(tail -1 "$K8S_LOGS/images-build.log")"; finish
fi

# ---- 2. the cluster, under the host-wide kernel-test lock -----------------------------------------
# kubelet and containerd write cgroups, mounts and sysctls: the same state the kernel tests snapshot,
# so the cluster runs only while no kernel test does (crates/testkit KernelLock's file).
exec 9>/tmp/rtslice-kernel-tests.lock
t=$(date +%s)
if ! flock -n 9; then
  say "waiting for the kernel-test lock (/tmp/rtslice-kernel-tests.lock: another test changes kernel state now)"
  flock -w "${RTSLICE_K8S_LOCK_TIMEOUT:-1800}" 9 || { fail lock "the kernel-test lock stayed taken for ${RTSLICE_K8S_LOCK_TIMEOUT:-1800}s"; finish; }
fi
[ $(( $(date +%s) - t )) -gt 2 ] && say "waited $(( $(date +%s) - t ))s for the kernel-test lock"
if [ -e "$K8S_STATE" ] || [ -e "$K8S_RUN" ]; then
  say "a previous cluster's directories exist ($K8S_STATE, $K8S_RUN): tearing it down first"
  down >>"$K8S_LOGS/teardown.log" 2>&1
fi
"$K8S_E2E/snapshot.sh" "$K8S_LOGS/snapshot.before"
mkdir -p "$K8S_STATE" "$K8S_RUN"
note_absent_paths
save_iptables

teardown_and_check() {
  trap - EXIT INT TERM
  if [ -n "${RTSLICE_K8S_KEEP:-}" ]; then
    say "RTSLICE_K8S_KEEP: the cluster stays up (kubectl --kubeconfig $KUBECONFIG_FILE; k8s/e2e/cluster.sh down)"
    finish
  fi
  local t kind what restored
  t=$(date +%s)
  down >>"$K8S_LOGS/teardown.log" 2>&1
  restored=$(restore_sysctls "$K8S_LOGS/snapshot.before")
  "$K8S_E2E/snapshot.sh" "$K8S_LOGS/snapshot.after"
  flock -u 9
  what=$(our_processes)
  if [ -z "$what" ]; then pass "teardown: processes" "none of the cluster's left ($(( $(date +%s) - t ))s)"
  else fail "teardown: processes" "still running: $(echo "$what" | tr '\n' ';')"; fi
  for kind in mounts cgroups netns links iptables paths; do
    what=$(leftovers "$K8S_LOGS/snapshot.before" "$K8S_LOGS/snapshot.after" "$kind")
    if [ -z "$what" ]; then pass "teardown: $kind" "as before ($(wc -l <"$K8S_LOGS/snapshot.after/$kind") entries)"
    else fail "teardown: $kind" "$(echo "$what" | head -5 | tr '\n' ';') (snapshots: $K8S_LOGS/snapshot.{before,after}/$kind)"; fi
  done
  what=$(leftovers "$K8S_LOGS/snapshot.before" "$K8S_LOGS/snapshot.after" sysctls)
  if [ -z "$what" ]; then pass "teardown: sysctls" "as before${restored:+; written back: $(echo "$restored" | tr '\n' ';' | sed 's/;$//')}"
  else fail "teardown: sysctls" "$(echo "$what" | head -6 | tr '\n' ';')"; fi
  finish
}
trap teardown_and_check EXIT
trap 'fail run "interrupted by a signal (RTSLICE_K8S_TIMEOUT of make test-k8s?)"; exit 1' INT TERM

ip=$(node_ip)
[ -n "$ip" ] || { fail "control plane" "this host has no IPv4 default route: kubelet needs a non-loopback node IP"; exit 1; }
up_step() {  # up_step NAME CMD...: one component; on failure the check names it and its log
  local t=$(date +%s)
  if "$@" 2>"$K8S_LOGS/$1.err"; then pass "$1" "up in $(( $(date +%s) - t ))s"; return 0; fi
  fail "$1" "$(head -1 "$K8S_LOGS/$1.err") (log: $K8S_LOGS/${1#start_}.log)"
  sed 's/^/    /' "$K8S_LOGS/$1.err"; return 1
}
make_pki "$ip" || { fail pki "openssl failed (log: $K8S_LOGS/pki.log)"; exit 1; }
up_step start_etcd || exit 1
up_step start_apiserver "$ip" || exit 1
up_step start_containerd || exit 1
t=$(date +%s)
if import_images "$K8S_LOGS"/images/{pause,busybox,emu}.tar; then pass "import images" "ctr -n k8s.io images import, $(( $(date +%s) - t ))s"
else fail "import images" "see $K8S_LOGS/images.log"; exit 1; fi
up_step start_kubelet "$ip" || exit 1
up_step start_scheduler || exit 1

# The node registers itself; Ready once containerd reports runtime and network ready.
t=$(date +%s)
if wait_for 120 "node $K8S_NODE Ready" "$K8S_LOGS/kubelet.log" node_ready 2>"$K8S_LOGS/node.err"; then
  pass "node Ready" "$K8S_NODE after $(( $(date +%s) - t ))s"
else
  fail "node Ready" "$(head -1 "$K8S_LOGS/node.err"); conditions: $(kc get node "$K8S_NODE" -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.message}; {end}' 2>&1)"
  exit 1
fi
# kubelet registers its Node with the not-ready taint; the node lifecycle controller of
# kube-controller-manager, which this cluster does not run, is what removes it once Ready.
kc taint nodes "$K8S_NODE" node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
if [ -z "$(kc get node "$K8S_NODE" -o jsonpath='{.spec.taints}')" ]; then pass "node untainted"
else fail "node untainted" "taints left: $(kc get node "$K8S_NODE" -o jsonpath='{.spec.taints}')"; exit 1; fi

# ---- 3. plain pods --------------------------------------------------------------------------------
. "$K8S_E2E/plain.sh"
plain_pods

# ---- 4. the rtslice scenario (extender, node service, NRI plugin, inventory-only nodes) -----------
. "$K8S_E2E/scenario.sh"
scenario

# ---- 5. DRA: rtslice's kubelet plugin, claims of real-time bandwidth (same node service) ----------
. "$K8S_E2E/dra.sh"
dra_scenario

exit 0
}
main "$@"
