# shellcheck shell=bash
# The DRA scenario (issue 38, docs/dra.md), sourced by run.sh after the extender scenario, on the
# same node service and NRI plugin:
#   - rtslice-dra (k8s/dra), the kubelet plugin, publishes this node's ResourceSlice from the node
#     service: one device per reservable CPU, its free real-time bandwidth as consumable capacity
#     (what the annotated pods already placed leave of the 95% cap);
#   - a vBS pod with a ResourceClaim of $DRA_BW every $DRA_PERIOD on one CPU (class
#     rt-bandwidth.rtslice.io, deploy/k8s/dra.yaml) is allocated by kube-scheduler's own allocator,
#     prepared (admitted) by the node service, and runs with that budget in its container's cgroup
#     and its thread rules from its annotations;
#   - a claim of the whole device on top of it is refused by the allocator (Pending, FailedScheduling);
#   - deleting the pod unprepares its claim; once the claim is deallocated and deleted (what
#     kube-controller-manager's resourceclaim controller does; this cluster runs none, so the harness
#     does it), the refused claim fits and its pod runs.

DRA_BW=50m
DRA_PERIOD=10ms
DRA_RUNTIME_US=500
DRA_PERIOD_US=10000

dra_plugin_build() {
  [ -f "$K8S_REPO/k8s/dra/go.mod" ] || return 1
  (cd "$K8S_REPO/k8s/dra" && CGO_ENABLED=0 go build -trimpath -o "$K8S_LOGS/rtslice-dra" .) >"$K8S_LOGS/dra-build.log" 2>&1 || return 1
  echo "$K8S_LOGS/rtslice-dra"
}

# The devices of this node's rtslice ResourceSlice as "name=bandwidth" lines, sorted.
dra_slice_devices() {
  kc get resourceslices -o json 2>/dev/null | python3 -c '
import json, sys
node = sys.argv[1]
out = []
for s in json.load(sys.stdin).get("items", []):
    sp = s.get("spec", {})
    if sp.get("driver") == "rtslice.io" and sp.get("nodeName") == node:
        out += ["%s=%s" % (d["name"], d.get("capacity", {}).get("bandwidth", {}).get("value")) for d in sp.get("devices", [])]
print("\n".join(sorted(out)))' "$K8S_NODE"
}
dra_has_slice() { [ -n "$(dra_slice_devices)" ]; }

# What the node service computes, in the same form.
dra_node_devices() {
  curl -s --max-time 10 --unix-socket "$K8S_RUN/rtslice.sock" http://rtslice/v1/dra/devices | python3 -c '
import json, sys
print("\n".join(sorted("%s=%s" % (d["name"], d["capacity"]["bandwidth"]["value"]) for d in json.load(sys.stdin)["devices"])))'
}

dra_node_claims() {  # the node service's prepared claims: "namespace/name holder" lines
  curl -s --max-time 10 --unix-socket "$K8S_RUN/rtslice.sock" http://rtslice/v1/dra/claims | python3 -c '
import json, sys
for c in json.load(sys.stdin)["claims"]:
    print(c["namespace"] + "/" + c["name"], c.get("holder", "-"))'
}
dra_no_claims() { [ -z "$(dra_node_claims)" ]; }

dra_claim_yaml() {  # dra_claim_yaml NAME BANDWIDTH
  cat <<EOF
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: $1, namespace: default}
spec:
  devices:
    requests:
    - name: cpus
      exactly:
        deviceClassName: rt-bandwidth.rtslice.io
        count: 1
        capacity:
          requests: {bandwidth: "$2"}
    constraints:
    - {requests: [cpus], distinctAttribute: rtslice.io/cpu}
    config:
    - requests: [cpus]
      opaque: {driver: rtslice.io, parameters: {period: "$DRA_PERIOD"}}
EOF
}

dra_pod_yaml() {  # dra_pod_yaml NAME CLAIM: an emulated vBS whose CPU and budget come from CLAIM
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: default
  annotations:
    rtslice.io/threads: "$SCN_THREADS"
spec:
  hostNetwork: true
  restartPolicy: Never
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 5
  resourceClaims:
  - {name: rt, resourceClaimName: $2}
  containers:
  - name: main
    image: $EMU_IMAGE
    imagePullPolicy: Never
    command: ["/bin/rtslice", "emulate", "--profile", "oai-lte", "--duration", "1h", "--load", "5%"]
    resources:
      claims: [{name: rt}]
EOF
}

kubepods_budget_is() { [ "$(cat /sys/fs/cgroup/cpu/kubepods/cpu.rt_runtime_us 2>/dev/null)" = "$1" ]; }

claim_device() { kc get resourceclaim "$1" -o jsonpath='{.status.allocation.devices.results[0].device}' 2>/dev/null; }

# What kube-controller-manager's resourceclaim controller does once a claim's pods are gone:
# clear its reservation and allocation, drop its finalizer; then delete it.
dra_release_claim() {
  kc patch resourceclaim "$1" --subresource=status --type=merge -p '{"status":{"reservedFor":null,"allocation":null}}' >/dev/null \
    && kc patch resourceclaim "$1" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null \
    && kc delete resourceclaim "$1" --wait=false >/dev/null
}

dra_scenario() {
  local dra t cg pid dev cap slice node_view msg kp_before
  alive node-service || { fail "dra: node service" "not running (the extender scenario starts it)"; return; }
  if ! dra=$(dra_plugin_build); then
    fail "dra: kubelet plugin" "k8s/dra missing or its go build failed (log: $K8S_LOGS/dra-build.log)"; return
  fi
  mkdir -p "$K8S_RUN/cdi"
  start dra-plugin "$dra" --socket "$K8S_RUN/rtslice.sock" --node-name "$K8S_NODE" --kubeconfig "$KUBECONFIG_FILE" \
    --kubelet-dir "$K8S_STATE/kubelet" --cdi-dir "$K8S_RUN/cdi" --resync 2s
  if ! wait_for 90 "the rtslice ResourceSlice of $K8S_NODE" "$K8S_LOGS/dra-plugin.log" dra_has_slice; then
    fail "dra: slice published" "no ResourceSlice of driver rtslice.io for $K8S_NODE after 90s: $(tail -3 "$K8S_LOGS/dra-plugin.log" | tr '\n' ';')"; return
  fi
  # The plugin republishes within --resync when the node's view changes (the fill above may still
  # be settling): compare until they agree.
  t=$(date +%s)
  until slice=$(dra_slice_devices) && node_view=$(dra_node_devices) && [ "$slice" = "$node_view" ]; do
    [ $(( $(date +%s) - t )) -ge 30 ] && break
    sleep 1
  done
  if [ -n "$slice" ] && [ "$slice" = "$node_view" ]; then pass "dra: slice published" "devices $(echo "$slice" | tr '\n' ' ')— as the node service computes them"
  else fail "dra: slice published" "slice: $(echo "$slice" | tr '\n' ' '); node service: $(echo "$node_view" | tr '\n' ' ')"; return; fi
  if ! kc apply -f "$K8S_REPO/deploy/k8s/dra.yaml" >"$K8S_LOGS/dra-classes.log" 2>&1; then
    fail "dra: device classes" "$(tail -2 "$K8S_LOGS/dra-classes.log" | tr '\n' ';')"; return
  fi

  # 1. A claim that fits: allocated, prepared by the node service, its budget in the container.
  # kubelet's tree's RT budget now: the pod's release must give back what its start raised.
  kp_before=$(cat /sys/fs/cgroup/cpu/kubepods/cpu.rt_runtime_us 2>/dev/null)
  dra_claim_yaml rt-1 "$DRA_BW" | kc apply -f - >/dev/null && dra_pod_yaml dra-vbs-1 rt-1 | kc apply -f - >/dev/null
  if ! wait_for 180 "pod dra-vbs-1 Running" "$K8S_LOGS/kubelet.log" phase_is dra-vbs-1 Running 2>/dev/null; then
    fail "dra: claimed pod runs" "$(why_not dra-vbs-1); claim: $(kc get resourceclaim rt-1 -o jsonpath='{.status}' 2>&1 | cut -c1-300)"; return
  fi
  dev=$(claim_device rt-1)
  cg=$(container_cgroup dra-vbs-1)
  if [ "$(cat "$cg/cpu.rt_runtime_us" 2>/dev/null)/$(cat "$cg/cpu.rt_period_us" 2>/dev/null)" = "$DRA_RUNTIME_US/$DRA_PERIOD_US" ] \
     && [ "cpu-$(cat "${cg/\/cpu\//\/cpuset\/}/cpuset.cpus" 2>/dev/null)" = "$dev" ]; then
    pass "dra: claimed pod runs" "claim rt-1 allocated $dev; ${cg#/sys/fs/cgroup/cpu/}: cpu.rt_runtime_us $DRA_RUNTIME_US every $DRA_PERIOD_US µs, cpuset ${dev#cpu-}"
  else
    fail "dra: claimed pod runs" "claim on ${dev:-?}; ${cg:-no cgroup}: rt $(cat "$cg/cpu.rt_runtime_us" 2>/dev/null)/$(cat "$cg/cpu.rt_period_us" 2>/dev/null), cpuset $(cat "${cg/\/cpu\//\/cpuset\/}/cpuset.cpus" 2>/dev/null)"
  fi
  pid=$(head -1 "$cg/cgroup.procs" 2>/dev/null)
  t=$(date +%s)
  until [ -n "$pid" ] && awk '{print $41}' /proc/"$pid"/task/*/stat 2>/dev/null | grep -qx 1; do
    [ $(( $(date +%s) - t )) -ge 60 ] && break
    sleep 1
  done
  if [ -n "$pid" ] && awk '{print $41}' /proc/"$pid"/task/*/stat 2>/dev/null | grep -qx 1; then
    pass "dra: thread rules from the pod's annotations" "a thread of pid $pid runs SCHED_FIFO"
  else fail "dra: thread rules from the pod's annotations" "no SCHED_FIFO thread in pid ${pid:-?}"; fi
  msg=$(dra_node_claims)
  if echo "$msg" | grep -q "^default/rt-1 [0-9a-f]"; then pass "dra: prepared by the node service" "$msg"
  else fail "dra: prepared by the node service" "the node service's claims: ${msg:-none}"; fi

  # 2. The whole device on top of it: the scheduler's allocator refuses it.
  cap=$(dra_slice_devices | sed -n "s/^$dev=//p")
  dra_claim_yaml rt-2 "$cap" | kc apply -f - >/dev/null && dra_pod_yaml dra-vbs-2 rt-2 | kc apply -f - >/dev/null
  if wait_for 60 "a FailedScheduling event of dra-vbs-2" "$K8S_LOGS/kube-scheduler.log" has_failed_scheduling dra-vbs-2 2>/dev/null \
     && [ "$(pod_phase dra-vbs-2)" = Pending ] && [ -z "$(claim_device rt-2)" ]; then
    pass "dra: the allocator refuses what exceeds the cap" "rt-2 asks $cap of $dev: $(sched_failed dra-vbs-2 | tail -1 | cut -c1-200)"
  else
    fail "dra: the allocator refuses what exceeds the cap" "dra-vbs-2 $(pod_phase dra-vbs-2) on '$(pod_node dra-vbs-2)', rt-2 on '$(claim_device rt-2)'"
  fi

  # 3. Delete the pod: its budget goes and kubelet unprepares the claim; release the claim as the
  # resourceclaim controller would: the refused pod then fits.
  kc delete pod dra-vbs-1 --grace-period=2 --wait=false >/dev/null 2>&1
  if wait_for 90 "the claim of dra-vbs-1 unprepared" "$K8S_LOGS/dra-plugin.log" dra_no_claims \
     && wait_for 60 "kubepods' RT budget back to $kp_before" "$K8S_LOGS/node-service.log" kubepods_budget_is "$kp_before"; then
    pass "dra: unprepared when the pod goes" "the node service holds no claim; kubepods' cpu.rt_runtime_us back to $kp_before"
  else fail "dra: unprepared when the pod goes" "claims: $(dra_node_claims | tr '\n' ';'); kubepods' cpu.rt_runtime_us $(cat /sys/fs/cgroup/cpu/kubepods/cpu.rt_runtime_us), was $kp_before"; fi
  wait_for 60 "pod dra-vbs-1 gone" "$K8S_LOGS/kubelet.log" pod_gone dra-vbs-1 2>/dev/null
  dra_release_claim rt-1
  if wait_for 120 "pod dra-vbs-2 Running" "$K8S_LOGS/kubelet.log" phase_is dra-vbs-2 Running 2>/dev/null; then
    cg=$(container_cgroup dra-vbs-2)
    pass "dra: the bandwidth returns when the claim goes" "dra-vbs-2 runs on $(claim_device rt-2) with $cap: cpu.rt_runtime_us $(cat "$cg/cpu.rt_runtime_us" 2>/dev/null)"
  else
    fail "dra: the bandwidth returns when the claim goes" "$(why_not dra-vbs-2)"
  fi
}
