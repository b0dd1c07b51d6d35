# shellcheck shell=bash
# Plain pods (sourced by run.sh): what any Kubernetes node must do, before rtslice is involved.

# pod_yaml NAME IMAGE COMMAND [ANNOTATIONS_YAML] [RESOURCES_YAML]: a hostNetwork pod (see the CNI
# note in lib.sh), never restarted, no API token, short grace.
pod_yaml() {
  cat <<EOF2
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: default
${4:+  annotations:
$4}
spec:
  hostNetwork: true
  restartPolicy: Never
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 5
  containers:
  - name: main
    image: $2
    imagePullPolicy: Never
    command: $3
${5:+    resources:
$5}
EOF2
}

pod_phase() { kc get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null; }
phase_is() { [ "$(pod_phase "$1")" = "$2" ]; }
pod_gone() { ! kc get pod "$1" >/dev/null 2>&1; }
why_not() {  # one line on a pod that did not get where it should: phase, reasons, last events
  echo "phase $(pod_phase "$1"); $(kc get pod "$1" -o jsonpath='{range .status.containerStatuses[*]}{.name}: {.state}{end}' 2>/dev/null | cut -c1-200); events: $(kc get events --field-selector involvedObject.name="$1" -o jsonpath='{range .items[*]}{.reason}: {.message}; {end}' 2>/dev/null | cut -c1-400)"
}

# The v1 cgroup directory (cpu controller) of a running pod's container: kubepods/<qos>/pod<uid>/<id>.
container_cgroup() {
  local uid cid
  uid=$(kc get pod "$1" -o jsonpath='{.metadata.uid}') || return 1
  cid=$(kc get pod "$1" -o jsonpath='{.status.containerStatuses[0].containerID}') || return 1
  cid=${cid#containerd://}
  ls -d /sys/fs/cgroup/cpu/kubepods/pod"$uid"/"$cid" /sys/fs/cgroup/cpu/kubepods/*/pod"$uid"/"$cid" 2>/dev/null | head -1
}

plain_pods() {
  local t out cg pids p
  # 1. A pod runs to completion and its output comes back through the apiserver -> kubelet path.
  t=$(date +%s)
  pod_yaml hello "$BUSYBOX_IMAGE" '["/bin/sh", "-c", "echo hello from a pod on $(uname -n)"]' | kc apply -f - >/dev/null
  if wait_for 240 "pod hello Succeeded" "$K8S_LOGS/kubelet.log" phase_is hello Succeeded 2>/dev/null; then
    # containerd's shim copies the container's output into the CRI log file beside the process, and
    # the exit can be reported before the copy has drained (docs/testing.md): the line must arrive,
    # within 30 s.
    hello_logged() { [ -n "$(kc logs hello 2>/dev/null)" ]; }
    wait_for 30 "pod hello's output in kubectl logs" "$K8S_LOGS/containerd.log" hello_logged 2>/dev/null
    out=$(kc logs hello 2>&1)
    if [ "$out" = "hello from a pod on $(uname -n)" ]; then pass "plain pod" "ran to completion in $(( $(date +%s) - t ))s, kubectl logs: $out"
    else fail "plain pod" "Succeeded, but kubectl logs says: $out"; fi
  else
    fail "plain pod" "not Succeeded after 90s: $(why_not hello) (logs: $K8S_LOGS/kubelet.log, containerd.log)"
  fi
  kc delete pod hello --wait=false >/dev/null 2>&1

  # 2. A long-running pod's processes are in kubelet's own cgroups, and deleting the pod stops them
  # (busybox sh as PID 1 ignores SIGTERM unless it traps it) and removes the cgroup.
  pod_yaml sleeper "$BUSYBOX_IMAGE" '["/bin/sh", "-c", "trap \"exit 0\" TERM; while true; do sleep 1; done"]' | kc apply -f - >/dev/null
  if ! wait_for 180 "pod sleeper Running" "$K8S_LOGS/kubelet.log" phase_is sleeper Running 2>/dev/null; then
    fail "pod in kubelet's cgroups" "sleeper not Running after 180s: $(why_not sleeper)"; return
  fi
  cg=$(container_cgroup sleeper)
  pids=$(cat "$cg/cgroup.procs" 2>/dev/null | tr '\n' ' ')
  if [ -n "$cg" ] && [ -n "$pids" ] && grep -Eq "^[0-9]+:cpu(,cpuacct)?:/kubepods/.*/$(basename "$cg")\$" /proc/${pids%% *}/cgroup; then
    pass "pod in kubelet's cgroups" "${cg#/sys/fs/cgroup/cpu/} holds pids $pids"
  else
    fail "pod in kubelet's cgroups" "cgroup '${cg:-none found}' holds '${pids:-no pid}'"
  fi
  t=$(date +%s)
  kc delete pod sleeper --wait=false >/dev/null 2>&1
  if wait_for 120 "pod sleeper deleted" "$K8S_LOGS/kubelet.log" pod_gone sleeper 2>/dev/null; then
    local left=""
    for p in $pids; do [ -d /proc/$p ] && left="$left $p"; done
    if [ -z "$left" ] && [ ! -d "$cg" ]; then pass "pod deleted" "in $(( $(date +%s) - t ))s: processes gone, cgroup removed"
    else fail "pod deleted" "gone from the API but pids${left:- none} alive, cgroup $([ -d "$cg" ] && echo still there || echo removed)"; fi
  else
    fail "pod deleted" "still in the API after 120s: $(why_not sleeper)"
  fi
}
