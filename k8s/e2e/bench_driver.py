#!/usr/bin/env python3
"""The pod driver of `make bench-k8s` (k8s/e2e/bench.sh): creates vBS pods one at a time, alternating
the two paths, and times each from its POST to the moment a watch sees it bound.

  extender  a pod with rtslice.io/ annotations, scheduled by the kube-scheduler profile `rtslice`,
            which asks rtslice's extender to filter, prioritize and bind;
  dra       the same reservation as a ResourceClaim (N devices of rt-bandwidth.rtslice.io, each
            consuming R/P of `bandwidth`, distinct CPUs), scheduled by the default profile, whose
            DRA allocator admits it per CPU; the claim is created first and is not timed.

Only one pod is in flight at a time, so a latency is one pod's scheduling cycle and binding, not
queueing. Usage: bench_driver.py CONFIG.json; results as JSON on stdout. Standard library only.
"""
import http.client
import json
import ssl
import sys
import threading
import time


class Api:
    def __init__(self, cfg):
        self.host, self.port = cfg["host"], cfg["port"]
        self.ctx = ssl.create_default_context(cafile=cfg["ca"])
        self.ctx.load_cert_chain(cfg["cert"], cfg["key"])
        self.conn = self.connect()

    def connect(self, timeout=30):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        for attempt in (1, 2):
            try:
                self.conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
                r = self.conn.getresponse()
                text = r.read()
                break
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = self.connect()
                if attempt == 2:
                    raise
        if r.status >= 300:
            raise RuntimeError("%s %s: HTTP %d: %s" % (method, path, r.status, text[:300].decode(errors="replace")))
        return json.loads(text) if text else None


class Watch(threading.Thread):
    """Pods of one namespace: the monotonic time each was first seen with a node, or kube-scheduler's
    message when it marked the pod unschedulable first."""

    def __init__(self, api, ns, rv):
        super().__init__(daemon=True)
        self.api, self.ns, self.rv = api, ns, rv
        self.bound, self.cond = {}, threading.Condition()

    def run(self):
        while True:
            conn = self.api.connect(timeout=3600)
            conn.request("GET", "/api/v1/namespaces/%s/pods?watch=1&allowWatchBookmarks=true&resourceVersion=%s" % (self.ns, self.rv))
            r = conn.getresponse()
            while True:
                line = r.readline()
                if not line:
                    break
                now = time.monotonic()
                ev = json.loads(line)
                obj = ev.get("object", {})
                rv = obj.get("metadata", {}).get("resourceVersion")
                if rv:
                    self.rv = rv
                node = obj.get("spec", {}).get("nodeName")
                name = obj.get("metadata", {}).get("name")
                # kube-scheduler marks a pod it could not place: PodScheduled False, Unschedulable.
                refused = [c.get("message", "") for c in obj.get("status", {}).get("conditions", [])
                           if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"]
                if name and (node or refused):
                    with self.cond:
                        if name not in self.bound:
                            self.bound[name] = (now, node) if node else (None, refused[0])
                            self.cond.notify_all()
            conn.close()

    def wait(self, name, timeout):
        end = time.monotonic() + timeout
        with self.cond:
            while name not in self.bound:
                left = end - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)
            return self.bound[name]


def mix(i):
    """The criterion bench's mix (crates/cluster/benches/extender.rs): 10-60 % on 1-4 CPUs."""
    return 10 + (i * 7) % 51, 1 + i % 4


def pod(cfg, path, name, pct, k, node_selector=None):
    container = {"name": "du", "image": cfg["image"], "command": ["/bin/rtslice", "emulate", "--duration", "0"]}
    meta = {"name": name, "namespace": cfg["namespace"], "labels": {"bench": path}}
    spec = {"restartPolicy": "Never", "automountServiceAccountToken": False, "containers": [container]}
    if node_selector:
        # The fill node is tainted so that the latency phase's pods never land on it.
        spec["nodeSelector"] = {"kubernetes.io/hostname": node_selector}
        spec["tolerations"] = [{"key": "rtslice.io/bench-fill", "operator": "Exists", "effect": "NoSchedule"}]
    if path == "extender":
        spec["schedulerName"] = "rtslice"
        meta["annotations"] = {"rtslice.io/reservation": "{runtime: %dus, period: 1ms, count: %d}" % (pct * 10, k)}
    else:
        spec["resourceClaims"] = [{"name": "rt", "resourceClaimName": name}]
        container["resources"] = {"claims": [{"name": "rt"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def claim(cfg, name, pct, k):
    # One request per CPU, all under one distinctAttribute constraint: the form whose CPUs are
    # distinct on every Kubernetes from 1.34 (docs/dra.md, "Kubernetes versions").
    names = ["cpu%d" % j for j in range(k)]
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": cfg["namespace"]},
        "spec": {"devices": {
            "requests": [{"name": n, "exactly": {
                "deviceClassName": "rt-bandwidth.rtslice.io", "count": 1,
                "capacity": {"requests": {"bandwidth": "%dm" % (pct * 10)}}}} for n in names],
            "constraints": [{"requests": names, "distinctAttribute": "rtslice.io/cpu"}],
            "config": [{"requests": names, "opaque": {"driver": "rtslice.io", "parameters": {"period": "1ms"}}}],
        }},
    }


def place(api, watch, cfg, path, name, pct, k, timeout, node_selector=None):
    """(latency in s, node), or (None, kube-scheduler's reason) when it was marked unschedulable or
    not bound within `timeout`."""
    ns = cfg["namespace"]
    if path == "dra":
        api.call("POST", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims" % ns, claim(cfg, name, pct, k))
    t0 = time.monotonic()
    api.call("POST", "/api/v1/namespaces/%s/pods" % ns, pod(cfg, path, name, pct, k, node_selector))
    seen = watch.wait(name, timeout)
    if seen is None or seen[0] is None:
        reason = why(api, ns, name) if seen is None else seen[1]
        # Gone at once, so that a later retry cannot place it behind the measurement's back.
        api.call("DELETE", "/api/v1/namespaces/%s/pods/%s?gracePeriodSeconds=0" % (ns, name))
        return None, reason
    return seen[0] - t0, seen[1]


def why(api, ns, name):
    """kube-scheduler's FailedScheduling message for a pod it did not place."""
    sel = "involvedObject.name=%s,reason=FailedScheduling" % name
    events = api.call("GET", "/api/v1/namespaces/%s/events?fieldSelector=%s" % (ns, sel)).get("items", [])
    return events[-1]["message"] if events else "no FailedScheduling event"


def quantile_ci(xs, q, z=1.96):
    """The q-quantile of sorted xs and a distribution-free 95 % interval from the order statistics
    whose ranks bound it (normal approximation of the binomial)."""
    n = len(xs)
    lo = max(0, int(n * q - z * (n * q * (1 - q)) ** 0.5) - 1)
    hi = min(n - 1, int(n * q + z * (n * q * (1 - q)) ** 0.5))
    return xs[min(n - 1, int(q * (n - 1) + 0.5))], xs[lo], xs[hi]


def report(path):
    r = json.load(open(path))
    rows = []
    for p in ("extender", "dra"):
        xs = sorted(r["latency"][p])
        if not xs:
            rows.append("%-8s no pod placed in the latency phase; one empty node filled with the mix: %s pods" % (p, r["fill"].get(p, {}).get("placed", "?")))
            continue
        ms = lambda v: "%.1f" % (v * 1e3)
        cells = []
        for q in (0.5, 0.9, 0.99):
            v, lo, hi = quantile_ci(xs, q)
            cells.append("p%g %s ms [%s, %s]" % (q * 100, ms(v), ms(lo), ms(hi)))
        per = sorted(r["nodes"][p].values())
        fill = r["fill"].get(p, {})
        stopped = r.get("stopped", {}).get(p)
        rows.append("%-8s %d placed, %d unplaced%s; %s; max %s ms; pods per node min %d median %d max %d over %d nodes; "
                    "one empty node filled with the mix: %s pods" % (
                        p, len(xs), r["unplaced"][p], "" if stopped is None else " (stopped at pod %d: 5 unplaced in a row)" % stopped,
                        ", ".join(cells), ms(xs[-1]), per[0], per[len(per) // 2], per[-1], len(per), fill.get("placed", "?")))
        for reason in r.get("reasons", {}).get(p, [])[:3] + ([("fill refused %(percent)d %% on %(cpus)d CPUs: %(why)s" % fill["refused"])] if fill.get("refused") else []):
            rows.append("%-8s   %s" % (p, reason[:400]))
    print("\n".join(rows))


def main():
    if sys.argv[1] == "report":
        return report(sys.argv[2])
    cfg = json.load(open(sys.argv[1]))
    api = Api(cfg)
    ns = cfg["namespace"]
    rv = api.call("GET", "/api/v1/namespaces/%s/pods?limit=1" % ns)["metadata"]["resourceVersion"]
    watch = Watch(api, ns, rv)
    watch.start()
    out = {"latency": {"extender": [], "dra": []}, "nodes": {"extender": {}, "dra": {}}, "unplaced": {"extender": 0, "dra": 0}, "fill": {}}
    # Warm-up: the first pods of each path pay for connections and caches; not counted.
    for i in range(cfg["warmup"]):
        for path in ("extender", "dra"):
            place(api, watch, cfg, path, "warm-%s-%d" % (path, i), 10, 1, cfg["timeout"])
    t_start = time.time()
    # A path that leaves 5 pods in a row unplaced while the cluster has room is broken, not full:
    # it stops there (each unplaced pod costs the whole timeout) and the report says where.
    misses = {"extender": 0, "dra": 0}
    out["stopped"] = {}
    for i in range(cfg["pods"]):
        pct, k = mix(i)
        # Alternate which path goes first, so neither always follows the other's binding.
        for path in (("extender", "dra") if i % 2 == 0 else ("dra", "extender")):
            if path in out["stopped"]:
                continue
            lat, node = place(api, watch, cfg, path, "%s-%d" % (path, i), pct, k, cfg["timeout"])
            misses[path] = misses[path] + 1 if lat is None else 0
            if misses[path] >= 5:
                out["stopped"][path] = i
            if lat is None:
                out["unplaced"][path] += 1
                out.setdefault("reasons", {}).setdefault(path, []).append("%s-%d (%d %% on %d CPUs): %s" % (path, i, pct, k, node))
            else:
                out["latency"][path].append(lat)
                out["nodes"][path][node] = out["nodes"][path].get(node, 0) + 1
        if (i + 1) % 100 == 0:
            print("bench-k8s: %d of %d pods per path placed (%.0f s)" % (i + 1, cfg["pods"], time.time() - t_start), file=sys.stderr, flush=True)
    # Placement quality: one more node of the same CPUs per path, filled through it with the same
    # mix until a pod stays unplaced (the path's own accounting of the node: the extender's
    # planner over the inventory, the allocator over the ResourceSlice).
    for path in ("extender", "dra"):
        n = 0
        while n < 400:
            pct, k = mix(n)
            lat, node = place(api, watch, cfg, path, "fill-%s-%d" % (path, n), pct, k, cfg["fill_timeout"], "bench-fill-" + path)
            if lat is None:
                out["fill"][path] = {"placed": n, "refused": {"percent": pct, "cpus": k, "why": node}}
                break
            n += 1
        else:
            out["fill"][path] = {"placed": n, "refused": None}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
