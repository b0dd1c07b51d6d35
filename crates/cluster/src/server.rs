//! `rtslice extender`: the HTTP API kube-scheduler calls, and the watches that keep the cluster
//! snapshot current. Request and response keys are capitalised as kube-scheduler's extender types
//! (k8s.io/kube-scheduler/extender/v1, Go structs without JSON tags) are.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use kube::Client;
use rtslice_spec::FitPolicy;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::extender::{Cluster, PodRequest};
use crate::ClusterError;

/// `ExtenderArgs`.
#[derive(Debug, Deserialize)]
pub struct ExtenderArgs {
    #[serde(rename = "Pod")]
    pub pod: Pod,
    /// Full Node objects when the extender is not `nodeCacheCapable`.
    #[serde(rename = "Nodes", default)]
    pub nodes: Option<NodeList>,
    #[serde(rename = "NodeNames", default)]
    pub node_names: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
pub struct NodeList {
    #[serde(default)]
    pub items: Vec<Node>,
}

/// `ExtenderFilterResult`.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct FilterResult {
    #[serde(rename = "NodeNames")]
    pub node_names: Option<Vec<String>>,
    #[serde(rename = "FailedNodes")]
    pub failed_nodes: BTreeMap<String, String>,
    #[serde(rename = "FailedAndUnresolvableNodes")]
    pub failed_and_unresolvable: BTreeMap<String, String>,
    #[serde(rename = "Error")]
    pub error: String,
}

/// One `HostPriority`.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct HostPriority {
    #[serde(rename = "Host")]
    pub host: String,
    #[serde(rename = "Score")]
    pub score: i64,
}

/// `ExtenderBindingArgs`.
#[derive(Debug, Deserialize)]
pub struct BindingArgs {
    #[serde(rename = "PodName")]
    pub pod_name: String,
    #[serde(rename = "PodNamespace")]
    pub pod_namespace: String,
    #[serde(rename = "PodUID")]
    pub pod_uid: String,
    #[serde(rename = "Node")]
    pub node: String,
}

/// What every handler shares.
pub struct Extender {
    pub cluster: RwLock<Cluster>,
    /// Binds pods (`/bind`); `None` in tests without an API server.
    pub client: Option<Client>,
}

type Shared = Arc<Extender>;

impl Extender {
    fn names_of(&self, args: &ExtenderArgs) -> Vec<String> {
        match (&args.node_names, &args.nodes) {
            (Some(n), _) => n.clone(),
            (None, Some(list)) => {
                // Not nodeCacheCapable: the Node objects came with the request; take their inventories.
                let mut c = self.cluster.write().unwrap_or_else(|p| p.into_inner());
                list.items
                    .iter()
                    .filter_map(|n| {
                        let name = n.metadata.name.clone()?;
                        c.set_node(&name, inventory_of(n));
                        Some(name)
                    })
                    .collect()
            }
            (None, None) => Vec::new(),
        }
    }

    /// `/filter`. The reasons go out through [`printf_safe`].
    pub fn filter(&self, args: &ExtenderArgs) -> FilterResult {
        let names = self.names_of(args);
        let request = match PodRequest::from_pod(&args.pod) {
            Ok(Some(r)) => r,
            Ok(None) => {
                return FilterResult { node_names: Some(names), failed_nodes: BTreeMap::new(), failed_and_unresolvable: BTreeMap::new(), error: String::new() }
            }
            Err(errors) => {
                // Invalid annotations fail everywhere and cannot be resolved by preemption.
                let reason = printf_safe(format!("invalid rtslice annotations: {errors}"));
                let unresolvable = names.iter().map(|n| (n.clone(), reason.clone())).collect();
                return FilterResult { node_names: Some(Vec::new()), failed_nodes: BTreeMap::new(), failed_and_unresolvable: unresolvable, error: String::new() };
            }
        };
        let d = self.cluster.read().unwrap_or_else(|p| p.into_inner()).decide(&request, &names);
        // One line per decision: an operator (or the e2e test) can tell from the log alone why a pod
        // went where it went or nowhere.
        tracing::info!(
            pod = %format!("{}/{}", request.namespace, request.name),
            fits = ?d.fits.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            unfit = d.failed.len(),
            unresolvable = d.unresolvable.len(),
            "filter"
        );
        FilterResult {
            node_names: Some(d.fits.into_iter().map(|(n, _)| n).collect()),
            failed_nodes: d.failed.into_iter().map(|(n, r)| (n, printf_safe(r))).collect(),
            failed_and_unresolvable: d.unresolvable.into_iter().map(|(n, r)| (n, printf_safe(r))).collect(),
            error: String::new(),
        }
    }

    /// `/prioritize`.
    pub fn prioritize(&self, args: &ExtenderArgs) -> Vec<HostPriority> {
        let names = self.names_of(args);
        let request = match PodRequest::from_pod(&args.pod) {
            Ok(Some(r)) => r,
            _ => return names.into_iter().map(|host| HostPriority { host, score: 0 }).collect(),
        };
        let d = self.cluster.read().unwrap_or_else(|p| p.into_inner()).decide(&request, &names);
        let scores: BTreeMap<String, i64> = d.fits.into_iter().collect();
        names.into_iter().map(|host| HostPriority { score: scores.get(&host).copied().unwrap_or(0), host }).collect()
    }

    /// `/bind`: remembers the pod on the node before binding, so the next pod's filter counts it even
    /// before the watch delivers the bound pod.
    pub async fn bind(&self, args: &BindingArgs) -> Result<(), ClusterError> {
        let client = self.client.clone().ok_or_else(|| ClusterError::Invalid("no Kubernetes client to bind with".into()))?;
        let pods: Api<Pod> = Api::namespaced(client, &args.pod_namespace);
        let pod = pods.get(&args.pod_name).await?;
        if let Ok(Some(r)) = PodRequest::from_pod(&pod) {
            let mut c = self.cluster.write().unwrap_or_else(|p| p.into_inner());
            c.bind(&args.node, r);
            tracing::info!(pod = %format!("{}/{}", args.pod_namespace, args.pod_name), node = %args.node, bound = c.bound_count(), "bind");
        }
        let binding = json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": args.pod_name, "namespace": args.pod_namespace, "uid": args.pod_uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": args.node},
        });
        let result: Result<Value, kube::Error> = pods.create_subresource("binding", &args.pod_name, &PostParams::default(), &binding).await;
        if let Err(e) = result {
            self.cluster.write().unwrap_or_else(|p| p.into_inner()).unbind(&args.pod_uid);
            return Err(e.into());
        }
        Ok(())
    }
}

fn inventory_of(n: &Node) -> Option<&str> {
    n.metadata.annotations.as_ref().and_then(|a| a.get(crate::ANNOTATION)).map(String::as_str)
}

/// The extender's routes.
pub fn router(ext: Shared) -> Router {
    async fn filter(State(e): State<Shared>, Json(args): Json<ExtenderArgs>) -> Json<FilterResult> {
        Json(e.filter(&args))
    }
    async fn prioritize(State(e): State<Shared>, Json(args): Json<ExtenderArgs>) -> Json<Vec<HostPriority>> {
        Json(e.prioritize(&args))
    }
    async fn bind(State(e): State<Shared>, Json(args): Json<BindingArgs>) -> Json<Value> {
        match e.bind(&args).await {
            Ok(()) => Json(json!({"Error": ""})),
            Err(err) => Json(json!({"Error": format!("rtslice extender could not bind {}/{} to {}: {err}", args.pod_namespace, args.pod_name, args.node)})),
        }
    }
    async fn healthz(State(e): State<Shared>) -> Json<Value> {
        let bound = e.cluster.read().unwrap_or_else(|p| p.into_inner()).bound_count();
        Json(json!({"ok": true, "boundPods": bound}))
    }
    Router::new()
        .route("/filter", post(filter))
        .route("/prioritize", post(prioritize))
        .route("/bind", post(bind))
        .route("/healthz", get(healthz))
        .with_state(ext)
}

/// A client from `kubeconfig`, else the usual inference (in-cluster service account, $KUBECONFIG,
/// ~/.kube/config).
pub async fn client(kubeconfig: Option<&PathBuf>) -> Result<Client, ClusterError> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| ClusterError::Kube(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| ClusterError::Kube(format!("{}: {e}", path.display())))?
        }
        None => kube::Config::infer().await.map_err(|e| ClusterError::Kube(format!("no cluster configuration found ({e}); give --kubeconfig")))?,
    };
    Client::try_from(config).map_err(ClusterError::from)
}

/// Keeps `ext.cluster` current from watches of Nodes and Pods; returns only on a fatal error.
pub async fn watch(ext: Shared, client: Client) {
    let nodes = {
        let ext = ext.clone();
        let api: Api<Node> = Api::all(client.clone());
        async move {
            let mut s = watcher(api, watcher::Config::default()).boxed();
            while let Some(ev) = s.next().await {
                let mut c = ext.cluster.write().unwrap_or_else(|p| p.into_inner());
                match ev {
                    Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => {
                        if let Some(name) = &n.metadata.name {
                            c.set_node(name, inventory_of(&n));
                        }
                    }
                    Ok(watcher::Event::Delete(n)) => {
                        if let Some(name) = &n.metadata.name {
                            c.remove_node(name);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!("watching nodes: {e}"),
                }
            }
        }
    };
    let pods = {
        let ext = ext.clone();
        let api: Api<Pod> = Api::all(client);
        // Only bound pods matter; finished ones hold nothing.
        let cfg = watcher::Config::default().fields("spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed");
        async move {
            let mut s = watcher(api, cfg).boxed();
            while let Some(ev) = s.next().await {
                match ev {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                        ext.cluster.write().unwrap_or_else(|p| p.into_inner()).pod_seen(&p);
                    }
                    Ok(watcher::Event::Delete(p)) => {
                        if let Some(uid) = &p.metadata.uid {
                            ext.cluster.write().unwrap_or_else(|p| p.into_inner()).unbind(uid);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!("watching pods: {e}"),
                }
            }
        }
    };
    tokio::join!(nodes, pods);
}

/// Runs `rtslice extender` until SIGTERM/SIGINT.
pub async fn run(listen: SocketAddr, kubeconfig: Option<PathBuf>, policy: FitPolicy, access: rtslice_spec::access::Access) -> Result<(), ClusterError> {
    let client = client(kubeconfig.as_ref()).await?;
    let ext = Arc::new(Extender { cluster: RwLock::new(Cluster::new(policy).with_access(access)), client: Some(client.clone()) });
    let watcher = tokio::spawn(watch(ext.clone(), client));
    let l = tokio::net::TcpListener::bind(listen).await.map_err(|e| ClusterError::Io(format!("cannot listen on {listen}: {e}")))?;
    tracing::info!(%listen, policy = policy.name(), "rtslice extender ready");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(|e| ClusterError::Io(e.to_string()))?;
    axum::serve(l, router(ext))
        .with_graceful_shutdown(async move {
            tokio::select! { _ = term.recv() => {}, _ = tokio::signal::ctrl_c() => {} }
        })
        .await
        .map_err(|e| ClusterError::Io(e.to_string()))?;
    watcher.abort();
    Ok(())
}

/// kube-scheduler passes a FailedScheduling event's message to `Eventf` as the format string, so a
/// `%` of ours ("asks for 40% on each …") comes out as `%!o(MISSING)` in `kubectl describe pod`.
/// The pod's condition takes the message verbatim, so `%%` would show doubled there; the fullwidth
/// percent sign (U+FF05) reads the same in both and is no printf verb.
fn printf_safe(reason: String) -> String {
    reason.replace('%', "\u{ff05}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON kube-scheduler sends (capitalised keys, nodeCacheCapable) gives the JSON it expects.
    #[test]
    fn filter_and_prioritize_speak_kube_schedulers_json() {
        let mut cluster = Cluster::new(FitPolicy::WorstFit);
        let mut spec = rtslice_spec::Spec::default();
        spec.node.cpus = rtslice_spec::NodeCpus::List(vec![0, 1]);
        let plan = rtslice_plan::Planner::new(&spec, &rtslice_plan::NodeFacts::default()).plan();
        let inv = crate::Inventory::from_plan(&plan, spec.node.default_period, "rt_group", true, vec![]);
        cluster.set_node("a", Some(&serde_json::to_string(&inv).unwrap()));
        let ext = Extender { cluster: RwLock::new(cluster), client: None };
        let body = json!({
            "Pod": {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "annotations": {"rtslice.io/reservation": "{runtime: 50ms, period: 100ms, count: 3}"}},
                    "spec": {"containers": [{"name": "c"}]}},
            "NodeNames": ["a", "b"],
        });
        let args: ExtenderArgs = serde_json::from_value(body.clone()).unwrap();
        let r = serde_json::to_value(ext.filter(&args)).unwrap();
        assert_eq!(r["NodeNames"], json!([]));
        assert!(r["FailedNodes"]["a"].as_str().unwrap().contains("container c: asks for 50\u{ff05} on each of 3 CPU(s)"), "{r}");
        assert!(r["FailedAndUnresolvableNodes"]["b"].as_str().unwrap().contains("not known"), "{r}");
        assert_eq!(r["Error"], "");
        let mut ok = body.clone();
        ok["Pod"]["metadata"]["annotations"]["rtslice.io/reservation"] = json!("{runtime: 50ms, period: 100ms, count: 2}");
        let args: ExtenderArgs = serde_json::from_value(ok).unwrap();
        assert_eq!(serde_json::to_value(ext.filter(&args)).unwrap()["NodeNames"], json!(["a"]));
        let p = serde_json::to_value(ext.prioritize(&args)).unwrap();
        assert_eq!(p[0]["Host"], "a");
        assert!(p[0]["Score"].as_i64().unwrap() >= 0);
        assert_eq!(p[1], json!({"Host": "b", "Score": 0}));
    }
}
