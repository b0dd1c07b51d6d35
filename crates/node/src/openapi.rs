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

/// The document.
pub fn document() -> Value {
    let name = json!([{ "name": "name", "in": "path", "required": true, "schema": { "type": "string" } }]);
    let common: &[(&str, &str)] = &[("401", "TCP only: missing or wrong bearer token"), ("500", "the node's state or the host failed")];
    let with = |extra: &[(&'static str, &'static str)]| -> Vec<(&'static str, &'static str)> {
        let mut v: Vec<(&str, &str)> = extra.to_vec();
        v.extend_from_slice(common);
        v
    };
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "rtslice node API",
            "version": "v1",
            "description": "One node's real-time CPU reservations: the inventory (O2ims view) and the workloads (O2dms deployments). Served by `rtslice daemon` on a unix socket (root only) and optionally on TCP with a bearer token. See docs/api.md."
        },
        "security": [{}, { "bearer": [] }],
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
                "summary": "The event log: admitted, pending, removed, resized, exited, recovered, adopted, failed",
                "parameters": [{ "name": "since", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 0 }, "description": "only events with a larger sequence number" }],
                "responses": responses(&[("200", ok("events, oldest first", json!({ "type": "object", "properties": { "events": { "type": "array", "items": { "$ref": "#/components/schemas/Event" } } } })))], &with(&[("400", "bad query")]))
            }},
            "/v1/containers": {
                "get": {
                    "summary": "Kubernetes containers admitted through the NRI plugin (docs/kubernetes.md)",
                    "responses": responses(&[("200", ok("the containers", json!({ "type": "object", "properties": { "containers": { "type": "array", "items": { "type": "object" } } } })))], &with(&[]))
                },
                "post": {
                    "summary": "CreateContainer: admit a container by its pod's rtslice.io/ annotations through the live planner; the cpuset to give it",
                    "requestBody": { "required": true, "content": { "application/json": { "schema": { "type": "object", "required": ["id", "namespace", "pod", "container"], "properties": {
                        "id": { "type": "string" }, "namespace": { "type": "string" }, "pod": { "type": "string" }, "podUid": { "type": "string" },
                        "container": { "type": "string" }, "annotations": { "type": "object", "additionalProperties": { "type": "string" } } } } } } },
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
            }},
            "/v1/openapi.json": { "get": {
                "summary": "This document",
                "responses": { "200": { "description": "OpenAPI 3.1", "content": { "application/json": {} } } }
            }}
        },
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer", "description": "required on TCP (--listen), from --token-file; the unix socket needs none (mode 0600, root)" } },
            "schemas": {
                "Error": { "type": "object", "required": ["error", "status"], "properties": {
                    "error": { "type": "string", "description": "what happened and what to do" },
                    "status": { "type": "integer" },
                    "errors": { "type": "array", "items": { "type": "string" }, "description": "spec errors, each `file:line:col: field.path: reason`" }
                }},
                "Phase": { "type": "string", "enum": ["running", "pending"] },
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
                    "threads": { "type": "array", "items": { "type": "object" } }
                }},
                "Resize": { "type": "object", "required": ["generation"], "additionalProperties": false, "properties": {
                    "generation": { "type": "integer", "description": "the generation the client read; another one gives 409" },
                    "runtime": { "type": "string", "examples": ["300us"] }, "period": { "type": "string", "examples": ["1ms"] },
                    "count": { "type": "integer", "minimum": 1 }, "cpus": { "type": "string", "examples": ["2-3"] }
                }},
                "Node": { "type": "object", "properties": {
                    "cpus": { "type": "string" }, "isolated": { "type": "string" }, "housekeeping": { "type": "string" }, "cap": { "type": "number" },
                    "mechanism": { "type": "string", "enum": ["hcbs", "deadline", "rt_group", "none"] }, "partitions": { "type": "boolean" },
                    "perCpu": { "type": "array", "items": { "type": "object", "properties": {
                        "cpu": { "type": "integer" }, "reserved": { "type": "number" }, "free": { "type": "number" }, "by": { "type": "array" } } } },
                    "workloads": { "type": "object" }, "warnings": { "type": "array", "items": { "type": "string" } },
                    "kernel": { "type": "string" }, "preemption": { "type": "string" }, "findings": { "type": "array" }
                }},
                "Event": { "type": "object", "required": ["seq", "time", "kind", "message"], "properties": {
                    "seq": { "type": "integer" }, "time": { "type": "number", "description": "seconds since the epoch" },
                    "kind": { "type": "string" }, "workload": { "type": "string" }, "message": { "type": "string" }
                }}
            }
        }
    })
}
