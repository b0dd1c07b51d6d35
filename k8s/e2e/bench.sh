#!/bin/bash
# `make bench-k8s` (issue 38, docs/kubernetes.md "Benchmark: DRA against the extender"): scheduling
# latency per pod through rtslice's extender and through kube-scheduler's DRA allocator, on a real
# control plane (etcd, kube-apiserver and two kube-schedulers at k8s/build/control-plane's version)
# over the same inventory:
#   - $BENCH_NODES inventory-only nodes of 64 CPUs (CPU 0 housekeeping), each carrying the
#     rtslice.io/inventory annotation a real `rtslice daemon --inventory-only` published for such a
#     node, and a ResourceSlice shaped as rtslice's DRA driver publishes one for it (one device per
#     reservable CPU, `bandwidth` 950m, allowMultipleAllocations), written here: an inventory-only
#     daemon publishes no slice;
#   - $BENCH_PODS vBS pods per path, reservations of 10-60 % on 1-4 CPUs (the criterion bench's
#     mix), one pod in flight at a time, the two paths alternating; each timed from its POST to the
#     moment a watch sees it bound (k8s/e2e/bench_driver.py);
#   - then an empty node per path (bench-fill-extender, bench-fill-dra: a node's 110 pods would
#     bound two paths on one) filled through it until a pod stays unplaced.
# No kubelet runs: the pods are placed, never started, and the nodes' inventories and slices stay
# as published (each path counts its own pods: the extender those bound, the allocator its claims).
# Prints the result lines and leaves the raw numbers in target/k8s-bench/bench.json. Root (the cluster's
# state directories and ports are test-k8s's; both take the same lock). Environment: RTSLICE_K8S_RTSLICE
# (the rtslice binary; default the release build), BENCH_NODES (100), BENCH_PODS (1000),
# BENCH_CONTROL_PLANE=harness (make test-k8s's Kubernetes instead of control-plane/'s), BENCH_POLICY
# (the nodes' placement policy: worst-fit, best-fit, first-fit), BENCH_KEEP=1
# (leave the cluster up; k8s/e2e/cluster.sh down ends it).
set -uo pipefail
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
. "$K8S_E2E/plain.sh"
. "$K8S_E2E/scenario.sh"
K8S_LOGS=${RTSLICE_K8S_LOGS:-${CARGO_TARGET_DIR:-$K8S_REPO/target}/k8s-bench}
BENCH_NODES=${BENCH_NODES:-100}
BENCH_PODS=${BENCH_PODS:-1000}
SCHEDULER_RTSLICE_PORT=30260
die() { say "bench: error: $*"; exit 1; }

main() {
[ "$(id -u)" -eq 0 ] || die "needs root (the cluster's directories under /var/lib and /run); run: sudo make bench-k8s"
RTSLICE=${RTSLICE_K8S_RTSLICE:-${CARGO_TARGET_DIR:-$K8S_REPO/target}/release/rtslice}
[ -x "$RTSLICE" ] || die "no rtslice binary at $RTSLICE: build it (cargo build --release -p rtslice) or set RTSLICE_K8S_RTSLICE"
rm -rf "$K8S_LOGS" && mkdir -p "$K8S_LOGS"
base=$("$K8S_E2E/../build/build.sh" 2>"$K8S_LOGS/build.log" | tail -1)
[ -x "${base:-}/kubectl" ] || die "k8s/build/build.sh failed: $(tail -1 "$K8S_LOGS/build.log")"
# The control plane at the newer version of k8s/build/control-plane (1.34's DRA allocator checks a
# device's capacity against another device, docs/dra.md), etcd and kubectl from the harness's set.
# BENCH_CONTROL_PLANE=harness runs the harness's own (make test-k8s's) version instead, to see 1.34.
if [ "${BENCH_CONTROL_PLANE:-}" = harness ]; then cp=$base
else cp=$("$K8S_E2E/../build/build.sh" control-plane 2>>"$K8S_LOGS/build.log" | tail -1); fi
[ -x "${cp:-}/kube-scheduler" ] || die "k8s/build/build.sh control-plane failed: $(tail -1 "$K8S_LOGS/build.log")"
say "bench: control plane $("$cp/kube-scheduler" --version 2>/dev/null | awk '{print $2}') ($cp)"
K8S_BIN=$K8S_LOGS/bin
mkdir -p "$K8S_BIN"
for b in kube-apiserver kube-scheduler; do ln -sf "$cp/$b" "$K8S_BIN/$b"; done
for b in kubectl etcd; do ln -sf "$base/$b" "$K8S_BIN/$b"; done
exec 9>/tmp/rtslice-kernel-tests.lock
flock -w 1800 9 || die "the lock /tmp/rtslice-kernel-tests.lock (make test-k8s uses the same ports) stayed taken"
if [ -e "$K8S_STATE" ] || [ -e "$K8S_RUN" ]; then
  say "bench: a previous cluster's directories exist ($K8S_STATE, $K8S_RUN): tearing it down first"
  down >>"$K8S_LOGS/teardown.log" 2>&1
fi
mkdir -p "$K8S_STATE/rtslice" "$K8S_RUN"
[ -n "${BENCH_KEEP:-}" ] || trap 'down >>"$K8S_LOGS/teardown.log" 2>&1; flock -u 9' EXIT
ip=$(node_ip)
[ -n "$ip" ] || die "this host has no IPv4 default route (kube-apiserver advertises it)"
make_pki "$ip" && start_etcd && start_apiserver "$ip" || die "the control plane did not start (logs: $K8S_LOGS/)"

# ---- the inventory: one real inventory-only node's annotation, copied to every node -------------
t=$(date +%s)
kc create namespace bench >/dev/null || die "cannot create namespace bench"
kc apply -f "$K8S_REPO/deploy/k8s/dra.yaml" >/dev/null || die "cannot create the DeviceClasses of deploy/k8s/dra.yaml"
# The node's own placement policy inside the node (BENCH_POLICY, default worst-fit as the scenario).
scn_node_yaml bench-template 0-63 0 | sed "s/policy: worst-fit/policy: ${BENCH_POLICY:-worst-fit}/" >"$K8S_STATE/rtslice/node.yaml"
scn_make_node bench-template || die "cannot create Node bench-template"
start inventory-template "$RTSLICE" daemon --inventory-only --node-file "$K8S_STATE/rtslice/node.yaml" \
  --kube-node bench-template --kubeconfig "$KUBECONFIG_FILE" --socket "$K8S_RUN/inventory.sock" --state-dir "$K8S_STATE/rtslice/state"
wait_for 120 "the inventory annotation of Node bench-template" "$K8S_LOGS/inventory-template.log" has_inventory bench-template \
  || die "the inventory-only daemon published no inventory (log: $K8S_LOGS/inventory-template.log)"
inv=$(kc get node bench-template -o jsonpath='{.metadata.annotations.rtslice\.io/inventory}')
stop inventory-template 10
kc delete node bench-template >/dev/null
nodes=$(seq -f 'bench-%g' 1 "$BENCH_NODES")
for n in $nodes bench-fill-extender bench-fill-dra; do
  scn_make_node "$n" || die "cannot create Node $n"
done
kc taint nodes bench-fill-extender bench-fill-dra rtslice.io/bench-fill=true:NoSchedule >/dev/null || die "cannot taint the fill nodes"
# One patch per node; the annotation is the same document for each (the extender keys by Node name).
printf '%s' "$inv" >"$K8S_STATE/rtslice/inventory.json"
python3 - "$K8S_STATE/rtslice/inventory.json" $nodes bench-fill-extender bench-fill-dra >"$K8S_STATE/rtslice/objects.json" <<'PY' || die "cannot build the ResourceSlices"
import json, sys
inv = json.load(open(sys.argv[1]))
items = []
for node in sys.argv[2:]:
    # What rtslice_dra::devices publishes for a CPU of an empty node: its free bandwidth under the
    # cap as consumable capacity, shared by several claims.
    devices = [{
        "name": "cpu-%d" % u["cpu"],
        "attributes": {"cpu": {"int": u["cpu"]}, "core": {"int": u["cpu"]}, "isolated": {"bool": False},
                       "mechanism": {"string": inv["mechanism"]}, "idle": {"bool": True}},
        "capacity": {"bandwidth": {"value": "%dm" % round(inv["node"].get("cap", 0.95) * 1000)}},
        "allowMultipleAllocations": True,
    } for u in inv["perCpu"] if not u.get("housekeeping")]
    items.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "rtslice.io-" + node},
                  "spec": {"driver": "rtslice.io", "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                           "devices": devices}})
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
PY
kc apply -f "$K8S_STATE/rtslice/objects.json" >/dev/null || die "cannot create the ResourceSlices"
for n in $nodes bench-fill-extender bench-fill-dra; do
  kc annotate --overwrite node "$n" "rtslice.io/inventory=$inv" >/dev/null || die "cannot annotate Node $n"
done
say "bench: $BENCH_NODES nodes + a fill node per path with inventory and ResourceSlice in $(( $(date +%s) - t ))s"

# ---- the two paths: the default profile (DRA), the `rtslice` profile (extender) -----------------
printf 'apiVersion: rtslice/v1\naccess:\n  namespaces:\n    bench: {maxPriority: 90}\n' >"$K8S_STATE/rtslice/access.yaml"
start extender "$RTSLICE" extender --listen "127.0.0.1:$EXTENDER_PORT" --kubeconfig "$KUBECONFIG_FILE" --access "$K8S_STATE/rtslice/access.yaml"
wait_for 60 "the extender's /healthz" "$K8S_LOGS/extender.log" curl -fsS "http://127.0.0.1:$EXTENDER_PORT/healthz" \
  || die "the extender is not answering (log: $K8S_LOGS/extender.log)"
start_scheduler || die "kube-scheduler (default profile) did not start (log: $K8S_LOGS/kube-scheduler.log)"
cat >"$K8S_STATE/scheduler-rtslice.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: "$KUBECONFIG_FILE"}
leaderElection: {leaderElect: false}
profiles:
- schedulerName: rtslice
extenders:
- {urlPrefix: "http://127.0.0.1:$EXTENDER_PORT", filterVerb: filter, prioritizeVerb: prioritize, bindVerb: bind, weight: 1, nodeCacheCapable: true, ignorable: false, httpTimeout: 10s}
EOF
start kube-scheduler-rtslice "$K8S_BIN/kube-scheduler" --config "$K8S_STATE/scheduler-rtslice.yaml" --feature-gates "$FEATURE_GATES" \
  --bind-address 127.0.0.1 --secure-port "$SCHEDULER_RTSLICE_PORT" \
  --authentication-kubeconfig "$KUBECONFIG_FILE" --authorization-kubeconfig "$KUBECONFIG_FILE"
wait_for 60 "kube-scheduler (profile rtslice) healthy" "$K8S_LOGS/kube-scheduler-rtslice.log" \
  curl -fsSk "https://127.0.0.1:$SCHEDULER_RTSLICE_PORT/healthz" || die "kube-scheduler (profile rtslice) did not start"

cat >"$K8S_STATE/bench.json" <<EOF
{"host": "127.0.0.1", "port": $APISERVER_PORT, "ca": "$K8S_STATE/pki/ca.crt", "cert": "$K8S_STATE/pki/admin.crt",
 "key": "$K8S_STATE/pki/admin.key", "namespace": "bench", "image": "$EMU_IMAGE", "pods": $BENCH_PODS, "warmup": 5,
 "timeout": 30, "fill_timeout": 10}
EOF
t=$(date +%s)
say "bench: $BENCH_PODS pods per path over $BENCH_NODES nodes, alternating (load $(cut -d' ' -f1-3 /proc/loadavg), steal $(awk '/^cpu /{print $9}' /proc/stat) ticks so far)"
python3 "$K8S_E2E/bench_driver.py" "$K8S_STATE/bench.json" >"$K8S_LOGS/bench.json" || die "the driver failed (see above)"
say "bench: done in $(( $(date +%s) - t ))s (load $(cut -d' ' -f1-3 /proc/loadavg), steal $(awk '/^cpu /{print $9}' /proc/stat) ticks so far)"
python3 "$K8S_E2E/bench_driver.py" report "$K8S_LOGS/bench.json" | sed 's/^/bench-k8s: /'
}
main "$@"
