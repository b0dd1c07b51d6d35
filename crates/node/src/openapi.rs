//! The OpenAPI 3.1 document of the `/v1` API. Checked in as docs/openapi.json; a test keeps the two
//! equal (regenerate with `rtslice daemon --openapi > docs/openapi.json`).

use serde_json::{json, Value};

fn error_ref() -> Value {
    json!({ "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } })
}

fn ok(description: &str, schema: Value) -> Value {
    json!({ "description": description, "content": { "application/json": { "schema": schema } } })
}

fn spec_body() -> Value {
    json!({
        "required": true,
        "description": "An rtslice spec (YAML, or JSON, which is YAML too): `apiVersion: rtslice/v1` and `workloads:`; the `node:` section is ignored (the daemon's node applies). At most 256 KiB.",
        "content": {
            "application/yaml": { "schema": { "type": "string" } },
            "application/json": { "schema": { "type": "object" } }
        }
    })
}

fn errors(codes: &[(&str, &str)]) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    for (code, what) in codes {
        let mut e = error_ref();
        e["description"] = json!(what);
        m.insert(code.to_string(), e);
    }
    m
}

fn responses(success: &[(&str, Value)], errs: &[(&str, &str)]) -> Value {
    let mut m = errors(errs);
    for (code, v) in success {
        m.insert(code.to_string(), v.clone());
    }
    Value::Object(m)
}

/// `GET /v1/telemetry` (the dashboard's and `rtslice top`'s data).
fn telemetry_path(errs: &[(&str, &str)]) -> Value {
    json!({ "get": {
        "summary": "Live measurements of the deployed workloads (the dashboard's and `rtslice top`'s data): one reading of the collector every interval, kept for 10 minutes; for the reading asked for, per workload the wake-up and preemption latency histogram and percentiles (computed as PromQL's histogram_quantile), deadline-miss ratio, TTIs and throughput per second, throttling and budget use over the window before it, cumulative totals, and per-interval series over the minutes before it; per CPU reserved share and IRQ/softirq rates",
        "parameters": [
            { "name": "at", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 1 }, "description": "a reading's sequence number (`seq` of an earlier answer); default the latest" },
            { "name": "window", "in": "query", "required": false, "schema": { "type": "number", "exclusiveMinimum": 0, "default": 10 }, "description": "seconds the rates and percentiles look back" },
            { "name": "minutes", "in": "query", "required": false, "schema": { "type": "number", "minimum": 0, "default": 5 }, "description": "minutes of per-interval series" }
        ],
        "responses": responses(&[("200", ok("the reading", json!({ "$ref": "#/components/schemas/Telemetry" })))], errs)
    }})
}

/// `GET /metrics` and the dashboard at `/`.
fn observe_paths() -> (Value, Value) {
    let metrics = json!({ "get": {
        "summary": "Prometheus/OpenMetrics text of every rtslice_* family (docs/metrics.md); also on the plain-HTTP port of `rtslice daemon --metrics-listen`",
        "responses": {
            "200": { "description": "OpenMetrics text 1.0", "content": { "application/openmetrics-text": { "schema": { "type": "string" } } } },
            "401": { "description": "TCP only: missing or wrong bearer token" }
        }
    }});
    let page = json!({ "get": {
        "summary": "The live dashboard: one self-contained HTML page refreshing itself from /v1/node, /v1/workloads, /v1/telemetry and /v1/events. On TCP, open /?token=TOKEN once: the answer is a redirect to / setting the token in an HttpOnly SameSite=Strict cookie (rtslice_token) that authorizes the page's requests",
        "parameters": [{ "name": "token", "in": "query", "required": false, "schema": { "type": "string" }, "description": "TCP only: the bearer token, exchanged for the cookie" }],
        "responses": {
            "200": { "description": "the page", "content": { "text/html": {} } },
            "303": { "description": "the token matched: the cookie is set, go to /" },
            "401": { "description": "TCP only: no or wrong token or cookie" }
        }
    }});
    (metrics, page)
}

fn latency_schema() -> Value {
    let opt = json!({ "type": ["number", "null"] });
    json!({ "type": ["object", "null"], "description": "the window's latencies (null before a second reading)", "properties": {
        "count": { "type": "integer" }, "mean_s": opt, "p50_s": opt, "p90_s": opt, "p99_s": opt, "p999_s": opt,
        "buckets": { "type": "array", "items": { "type": "integer" }, "description": "events per bucket of bounds_s (last: +Inf), not cumulative" }
    }})
}

fn telemetry_workload_schema() -> Value {
    let opt = json!({ "type": ["number", "null"] });
    let series = json!({ "type": "array", "items": { "type": "object", "properties": {
        "seq": { "type": "integer" }, "time": { "type": "number" }, "wakeup_p99_s": opt,
        "miss_ratio": opt, "throughput_bps": opt, "throttled_per_s": opt
    }}});
    json!({ "type": "object", "properties": {
        "name": { "type": "string" }, "mechanism": { "type": "string" },
        "runtime_us": { "type": ["integer", "null"] }, "period_us": { "type": ["integer", "null"] },
        "cpus": { "type": "array", "items": { "type": "integer" } }, "threads": { "type": "integer" },
        "totals": { "type": "object", "description": "cumulative counters: wakeups, ttis, deadline_misses, throughput_bits, nacks, throttled, throttled_s, used_s, migrations, voluntary_switches, involuntary_switches (null when not reported)" },
        "wakeup": { "$ref": "#/components/schemas/Latency" }, "preempt": { "$ref": "#/components/schemas/Latency" },
        "miss_ratio": opt, "ttis_per_s": opt, "throughput_bps": opt, "throttled_per_s": opt,
        "budget_used": { "type": ["number", "null"], "description": "CPU used / reserved (runtime/period x CPUs)" },
        "series": series
    }})
}

fn telemetry_schema() -> Value {
    let opt = json!({ "type": ["number", "null"] });
    let cpu = json!({ "type": "object", "properties": {
        "cpu": { "type": "integer" }, "reserved": { "type": "number" }, "irqs_per_s": opt, "softirqs_per_s": opt, "stolen_ratio": opt
    }});
    let tracer = json!({ "type": "object", "properties": {
        "up": { "type": "boolean" }, "error": { "type": ["string", "null"] }, "events": { "type": ["integer", "null"] }, "lost_events": { "type": "integer" }
    }});
    json!({ "type": "object", "properties": {
        "seq": { "type": ["integer", "null"], "description": "the reading's sequence number; null before the first" },
        "time": { "type": "number", "description": "seconds since the epoch" },
        "interval_s": { "type": "number" }, "window_s": { "type": ["number", "null"], "description": "the window actually covered" },
        "samples": { "type": "integer" }, "tracer": tracer,
        "bounds_s": { "type": "array", "items": { "type": "number" }, "description": "upper bounds of the latency buckets, seconds" },
        "cpus": { "type": "array", "items": cpu },
        "workloads": { "type": "array", "items": telemetry_workload_schema() }
    }})
}

/// The document.
pub fn document() -> Value {
    let name = json!([{ "name": "name", "in": "path", "required": true, "schema": { "type": "string" } }]);
    let common: &[(&str, &str)] = &[("401", "TCP only: missing or wrong bearer token"), ("500", "the node's state or the host failed")];
    let with = |extra: &[(&'static str, &'static str)]| -> Vec<(&'static str, &'static str)> {
        let mut v: Vec<(&str, &str)> = extra.to_vec();
        v.extend_from_slice(common);
        v
    };
    let telemetry = telemetry_path(&with(&[("400", "bad query"), ("404", "that reading is no longer (or not yet) in the history; or telemetry is off")]));
    let (metrics, page) = observe_paths();
    // Kubernetes containers through the NRI plugin: built apart and added to `paths` below, because one
    // json! of the whole document exceeds the macro's recursion limit.
    let containers = json!({
            "/v1/containers": {
                "get": {
                    "summary": "Kubernetes containers admitted through the NRI plugin (docs/kubernetes.md)",
                    "responses": responses(&[("200", ok("the containers", json!({ "type": "object", "properties": { "containers": { "type": "array", "items": { "type": "object" } } } })))], &with(&[]))
                },
                "post": {
                    "summary": "CreateContainer: admit a container by its pod's rtslice.io/ annotations through the live planner; the cpuset to give it",
                    "requestBody": { "required": true, "content": { "application/json": { "schema": { "type": "object", "required": ["id", "namespace", "pod", "container"], "properties": {
                        "id": { "type": "string" }, "namespace": { "type": "string" }, "pod": { "type": "string" }, "podUid": { "type": "string" },
                        "container": { "type": "string" }, "annotations": { "type": "object", "additionalProperties": { "type": "string" } },
                        "env": { "type": "array", "items": { "type": "string" }, "description": "the container's RTSLICE_CLAIM_… entries (DRA claims)" } } } } } },
                    "responses": responses(&[
                        ("201", ok("admitted", json!({ "type": "object", "properties": { "workload": { "type": "string" }, "cpus": { "type": "string" }, "mems": { "type": "string" } } }))),
                        ("204", json!({ "description": "no rtslice annotation applies to this container: nothing to do" }))
                    ], &with(&[("400", "malformed body or invalid annotations (located, in `errors`)"), ("422", "does not fit (the planner's reason), or not possible inside kubelet's cgroups")]))
                }
            },
            "/v1/containers/{id}": {
                "parameters": [{ "name": "id", "in": "path", "required": true, "schema": { "type": "string" } }],
                "delete": {
                    "summary": "Stop/RemoveContainer: undo the in-place changes, return the CPUs and bandwidth",
                    "responses": responses(&[("200", ok("released", json!({ "type": "object" })))], &with(&[("404", "no such container")]))
                }
            },
            "/v1/containers/{id}/start": {
                "parameters": [{ "name": "id", "in": "path", "required": true, "schema": { "type": "string" } }],
                "post": {
                    "summary": "StartContainer: apply the reservation, thread and IRQ rules to the cgroup of `pid`, in place",
                    "requestBody": { "required": true, "content": { "application/json": { "schema": { "type": "object", "required": ["pid"], "properties": { "pid": { "type": "integer" } } } } } },
                    "responses": responses(&[("200", ok("applied", json!({ "type": "object" })))], &with(&[("404", "no such container"), ("422", "the host refused it")]))
                }
            },
            "/v1/inventory": { "get": {
                "summary": "What the node publishes for the scheduler extender (the Node annotation rtslice.io/inventory)",
                "responses": responses(&[("200", ok("the inventory", json!({ "type": "object" })))], &with(&[]))
            }}
    });
    // DRA: the kubelet plugin's calls (k8s/dra, docs/dra.md).
    let dra = json!({
            "/v1/dra/devices": { "get": {
                "summary": "This node's CPUs as the devices of its DRA ResourceSlice: one per reservable CPU, its free real-time bandwidth as consumable capacity",
                "responses": responses(&[("200", ok("the driver and its devices (resource.k8s.io/v1 Device)", json!({ "type": "object", "properties": { "driver": { "type": "string" }, "devices": { "type": "array", "items": { "type": "object" } } } })))], &with(&[]))
            }},
            "/v1/dra/claims": {
                "get": {
                    "summary": "The DRA claims prepared on this node",
                    "responses": responses(&[("200", ok("the claims", json!({ "type": "object", "properties": { "claims": { "type": "array", "items": { "type": "object" } } } })))], &with(&[]))
                },
                "post": {
                    "summary": "NodePrepareResources: admit an allocated ResourceClaim through the live planner; the environment entry of its CDI device",
                    "requestBody": { "required": true, "content": { "application/json": { "schema": { "type": "object", "required": ["pool", "claim"], "properties": {
                        "pool": { "type": "string", "description": "the plugin's pool: its node's name" }, "claim": { "type": "object", "description": "the resource.k8s.io/v1 ResourceClaim" } } } } } },
                    "responses": responses(&[
                        ("201", ok("prepared", json!({ "type": "object", "properties": { "uid": { "type": "string" }, "workload": { "type": "string" }, "cpus": { "type": "string" }, "env": { "type": "array", "items": { "type": "string" } } } })))
                    ], &with(&[("400", "malformed body"), ("422", "not a claim this node can honour (the planner's reason)")]))
                }
            },
            "/v1/dra/claims/{uid}": {
                "parameters": [{ "name": "uid", "in": "path", "required": true, "schema": { "type": "string" } }],
                "delete": {
                    "summary": "NodeUnprepareResources: forget the claim, releasing the container still holding it; unknown claims are not an error",
                    "responses": responses(&[("200", ok("unprepared", json!({ "type": "object" })))], &with(&[]))
                }
            }
    });
    let mut doc = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "rtslice node API",
            "version": "v1",
            "description": "One node's real-time CPU reservations: the inventory (O2ims view) and the workloads (O2dms deployments). Served by `rtslice daemon` on a unix socket (root only) and optionally on TCP with a bearer token, over HTTPS when the daemon has `--tls-cert`/`--tls-key` (rustls; then the dashboard's cookie is `Secure`). See docs/api.md."
        },
        "security": [{}, { "bearer": [] }, { "cookie": [] }],
        "paths": {
            "/v1/node": { "get": {
                "summary": "Node inventory: CPUs, per-CPU reserved and free bandwidth, mechanism, kernel facts and doctor findings",
                "responses": responses(&[("200", ok("the inventory", json!({ "$ref": "#/components/schemas/Node" })))], &with(&[]))
            }},
            "/v1/workloads": {
                "get": {
                    "summary": "Every workload of the node, running or pending",
                    "responses": responses(&[("200", ok("the workloads", json!({ "type": "object", "properties": { "workloads": { "type": "array", "items": { "$ref": "#/components/schemas/Workload" } } } })))], &with(&[]))
                },
                "post": {
                    "summary": "Deploy workloads: each is admitted on its own; the ones that fit run, the others stay pending with the reason",
                    "requestBody": spec_body(),
                    "responses": responses(&[
                        ("201", ok("every workload runs", json!({ "$ref": "#/components/schemas/Deployed" }))),
                        ("202", ok("some workloads are pending (reason and defragmentation proposal given)", json!({ "$ref": "#/components/schemas/Deployed" })))
                    ], &with(&[("400", "malformed body or spec errors (located, in `errors`)"), ("409", "a workload of that name exists"), ("413", "body larger than 256 KiB")]))
                },
                "put": {
                    "summary": "Declarative apply: the node runs exactly the spec's workloads. Only the difference is deployed, resized in place, replaced (another launch) or removed; unchanged workloads are not touched",
                    "parameters": [{ "name": "dryRun", "in": "query", "required": false, "schema": { "type": "boolean" }, "description": "compute the difference and the admission each change would get; change nothing" }],
                    "requestBody": spec_body(),
                    "responses": responses(&[("200", ok("the difference, and where each workload stands (`pending` true when one does not fit)", json!({ "$ref": "#/components/schemas/Applied" })))],
                        &with(&[("400", "malformed body, spec errors, or a name given twice"), ("413", "body larger than 256 KiB"), ("422", "a resize does not fit: the changes before it stay, the rest is not done")]))
                }
            },
            "/v1/workloads/{name}": {
                "parameters": name,
                "get": {
                    "summary": "One workload: phase, generation, CPUs, pids, threads and drift",
                    "responses": responses(&[("200", ok("the workload", json!({ "$ref": "#/components/schemas/Workload" })))], &with(&[("404", "no such workload")]))
                },
                "put": {
                    "summary": "Resize in place (runtime, period, count or CPUs) through admission; the others are not touched",
                    "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Resize" } } } },
                    "responses": responses(&[("200", ok("resized", json!({ "$ref": "#/components/schemas/Outcome" })))],
                        &with(&[("400", "malformed body or unknown field"), ("404", "no such workload"), ("409", "stale generation, or the workload is pending"), ("413", "body larger than 256 KiB"), ("422", "the new size does not fit; nothing changed")]))
                },
                "delete": {
                    "summary": "Stop the workload and return its CPUs and bandwidth; pending workloads that fit then are deployed",
                    "responses": responses(&[("200", ok("removed", json!({ "type": "object" })))], &with(&[("404", "no such workload")]))
                }
            },
            "/v1/plan": { "post": {
                "summary": "Dry run: would these workloads fit now, where, with what kernel parameters (nothing changes)",
                "requestBody": spec_body(),
                "responses": responses(&[("200", ok("one answer per workload", json!({ "type": "object", "properties": { "workloads": { "type": "array", "items": { "type": "object" } } } })))],
                    &with(&[("400", "malformed body or spec errors"), ("413", "body larger than 256 KiB")]))
            }},
            "/v1/events": { "get": {
                "summary": "The event log: admitted, pending, started, exited, restarted, resized, updated, removed, drift, recovered, adopted, failed",
                "parameters": [{ "name": "since", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 0 }, "description": "only events with a larger sequence number" }],
                "responses": responses(&[("200", ok("events, oldest first", json!({ "type": "object", "properties": { "events": { "type": "array", "items": { "$ref": "#/components/schemas/Event" } } } })))], &with(&[("400", "bad query")]))
            }},
            "/v1/telemetry": telemetry,
            "/metrics": metrics,
            "/": page,
            "/v1/openapi.json": { "get": {
                "summary": "This document",
                "responses": { "200": { "description": "OpenAPI 3.1", "content": { "application/json": {} } } }
            }}
        },
        "components": {
            "securitySchemes": {
                "bearer": { "type": "http", "scheme": "bearer", "description": "required on TCP (--listen), from --token-file; the unix socket needs none (mode 0600, root)" },
                "cookie": { "type": "apiKey", "in": "cookie", "name": "rtslice_token", "description": "the bearer token as a cookie, set by GET /?token=TOKEN for the dashboard in a browser" }
            },
            "schemas": {
                "Error": { "type": "object", "required": ["error", "status"], "properties": {
                    "error": { "type": "string", "description": "what happened and what to do" },
                    "status": { "type": "integer" },
                    "errors": { "type": "array", "items": { "type": "string" }, "description": "spec errors, each `file:line:col: field.path: reason`" }
                }},
                "Phase": { "type": "string", "enum": ["running", "pending", "exited"] },
                "Change": { "type": "object", "required": ["name", "action"], "properties": {
                    "name": { "type": "string" },
                    "action": { "type": "string", "enum": ["deploy", "resize", "replace", "update", "remove", "unchanged"] },
                    "detail": { "type": "string", "description": "the fields that differ, e.g. `demand, threads`" },
                    "phase": { "$ref": "#/components/schemas/Phase" }, "cpus": { "type": "array", "items": { "type": "integer" } },
                    "reason": { "type": "string" }, "defrag": { "type": ["object", "null"] }
                }},
                "Applied": { "type": "object", "properties": {
                    "dryRun": { "type": "boolean" }, "pending": { "type": "boolean" },
                    "changes": { "type": "array", "items": { "$ref": "#/components/schemas/Change" } },
                    "warnings": { "type": "array", "items": { "type": "string" } }
                }},
                "Outcome": { "type": "object", "required": ["name", "phase", "generation"], "properties": {
                    "name": { "type": "string" }, "phase": { "$ref": "#/components/schemas/Phase" }, "generation": { "type": "integer" },
                    "cpus": { "type": "array", "items": { "type": "integer" } }, "reason": { "type": "string" }, "defrag": { "type": ["object", "null"] }
                }},
                "Deployed": { "type": "object", "properties": {
                    "workloads": { "type": "array", "items": { "$ref": "#/components/schemas/Outcome" } },
                    "warnings": { "type": "array", "items": { "type": "string" } }
                }},
                "Workload": { "type": "object", "required": ["name", "phase", "generation"], "properties": {
                    "name": { "type": "string" }, "phase": { "$ref": "#/components/schemas/Phase" }, "generation": { "type": "integer" },
                    "cpus": { "type": "string", "description": "kernel CPU list, e.g. 0-1" }, "demand": { "type": ["object", "null"] },
                    "reason": { "type": "string" }, "defrag": { "type": ["object", "null"] },
                    "pids": { "type": "array", "items": { "type": "integer" } }, "drift": { "type": "array", "items": { "type": "object" } },
                    "threads": { "type": "array", "items": { "type": "object" } },
                    "restart": { "type": "object", "description": "the restart policy (absent: never)" },
                    "exit": { "type": "string", "description": "how its launched process ended (exited)" },
                    "restarts": { "type": "integer", "description": "restarts in a row" },
                    "restartAt": { "type": "number", "description": "when it is started again (seconds since the epoch)" },
                    "cache": { "type": "object", "description": "its resctrl group as granted: ways, the L3 masks (hex, as schemata takes them), the memory-bandwidth ceiling" }
                }},
                "Resize": { "type": "object", "required": ["generation"], "additionalProperties": false, "properties": {
                    "generation": { "type": "integer", "description": "the generation the client read; another one gives 409" },
                    "runtime": { "type": "string", "examples": ["300us"] }, "period": { "type": "string", "examples": ["1ms"] },
                    "count": { "type": "integer", "minimum": 1 }, "cpus": { "type": "string", "examples": ["2-3"] }
                }},
                "Node": { "type": "object", "properties": {
                    "cpus": { "type": "string" }, "isolated": { "type": "string" }, "housekeeping": { "type": "string" }, "cap": { "type": "number" },
                    "mechanism": { "type": "string", "enum": ["hcbs", "deadline", "rt_group", "none"] }, "partitions": { "type": "boolean" },
                    "hrtick": { "type": "boolean" }, "fairServerOff": { "type": "boolean" },
                    "perCpu": { "type": "array", "items": { "type": "object", "properties": {
                        "cpu": { "type": "integer" }, "reserved": { "type": "number" }, "free": { "type": "number" }, "by": { "type": "array" } } } },
                    "workloads": { "type": "object" }, "warnings": { "type": "array", "items": { "type": "string" } },
                    "kernel": { "type": "string" }, "preemption": { "type": "string" }, "findings": { "type": "array" },
                    "planningFacts": { "type": "object", "description": "what admission plans from (online and boot-isolated CPUs, topology, L3): what `rtslice plan --json` gives as this_host.facts on this host",
                        "properties": { "online": { "type": "array", "items": { "type": "integer" } }, "isolcpus": { "type": "array", "items": { "type": "integer" } },
                                        "topology": { "type": "object" }, "cache": { "type": "object" } } }
                }},
                "Latency": latency_schema(),
                "Telemetry": telemetry_schema(),
                "Event": { "type": "object", "required": ["seq", "time", "kind", "message"], "properties": {
                    "seq": { "type": "integer" }, "time": { "type": "number", "description": "seconds since the epoch" },
                    "kind": { "type": "string" }, "workload": { "type": "string" }, "message": { "type": "string" }
                }}
            }
        }
    });
    for more in [containers, dra] {
        if let (Some(paths), Value::Object(more)) = (doc["paths"].as_object_mut(), more) {
            paths.extend(more);
        }
    }
    doc
}
