//! `rtslice extender`: the kube-scheduler extender (docs/kubernetes.md) — filters and scores nodes
//! by real-time bandwidth with each node's own planner, and binds the pods it placed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use super::invalid;

#[derive(clap::Args)]
pub struct Args {
    /// Address kube-scheduler calls (its `urlPrefix`), e.g. 0.0.0.0:8888
    #[arg(long, value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Kubeconfig to reach the API server (default: in-cluster service account, $KUBECONFIG, ~/.kube/config)
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// How nodes are scored among those that fit: worst-fit (spread, study B), best-fit (pack) or first-fit
    #[arg(long, default_value = "worst-fit")]
    pub policy: String,
    /// Which namespaces may ask for real-time CPUs, and for what (the node service's `--access`
    /// file; docs/kubernetes.md "Who may ask"). Without it every rtslice pod is refused
    #[arg(long, value_name = "FILE")]
    pub access: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Some(policy) = rtslice_spec::FitPolicy::ALL.into_iter().find(|p| p.name() == args.policy) else {
        return invalid(format_args!("--policy {}: use worst-fit, best-fit or first-fit", args.policy));
    };
    let access = match &args.access {
        Some(f) => match super::read_access(f) {
            Ok(a) => a,
            Err(e) => return invalid(e),
        },
        None => Default::default(),
    };
    init_logs();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match rt.block_on(rtslice_cluster::server::run(args.listen, args.kubeconfig, policy, access)) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e @ rtslice_cluster::ClusterError::Kube(_)) => {
            super::error(e);
            Ok(ExitCode::from(super::EXIT_FAILURE))
        }
        Err(e) => Err(e.into()),
    }
}

/// Logs on stderr; colours only for a person watching.
pub fn init_logs() {
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt().with_target(false).with_ansi(std::io::stderr().is_terminal()).with_writer(std::io::stderr).try_init();
}

/// `rtslice daemon --kube-node NAME [--inventory-only]`: the node service (or, inventory-only, the
/// planner over the declared node) with its inventory published on the Kubernetes Node.
pub fn run_kube_node(
    rt: &tokio::runtime::Runtime,
    opts: rtslice_node::DaemonOptions,
    kube_node: String,
    kubeconfig: Option<PathBuf>,
    inventory_only: bool,
) -> anyhow::Result<ExitCode> {
    if inventory_only {
        return match rt.block_on(rtslice_cluster::publish::run_inventory_only(opts.service.node, kube_node, kubeconfig)) {
            Ok(()) => Ok(ExitCode::SUCCESS),
            Err(e @ rtslice_cluster::ClusterError::Invalid(_)) => invalid(e),
            Err(e) => {
                super::error(e);
                Ok(ExitCode::from(super::EXIT_FAILURE))
            }
        };
    }
    rt.block_on(async move {
        let client = match rtslice_cluster::server::client(kubeconfig.as_ref()).await {
            Ok(c) => c,
            Err(e) => {
                super::error(e);
                return Ok(ExitCode::from(super::EXIT_FAILURE));
            }
        };
        let socket = opts.socket.clone();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        // The node's own API is the source: what it serves as GET /v1/inventory is what it publishes.
        let current = move || {
            let socket = socket.clone();
            async move {
                let r = rtslice_node::request(&socket, "GET", "/v1/inventory", None)
                    .await
                    .map_err(|e| rtslice_cluster::ClusterError::Io(e.to_string()))?;
                if r.status != 200 {
                    return Err(rtslice_cluster::ClusterError::Io(format!("GET /v1/inventory answered {}: {}", r.status, r.body)));
                }
                serde_json::from_value::<rtslice_cluster::Inventory>(r.body).map_err(|e| rtslice_cluster::ClusterError::Inventory(e.to_string()))
            }
        };
        let publisher = tokio::spawn(rtslice_cluster::publish::publish_until(client, kube_node, current, async move {
            let _ = stop_rx.await;
        }));
        let result = rtslice_node::run(opts).await;
        let _ = stop_tx.send(());
        if let Ok(Err(e)) = publisher.await {
            super::warning(format_args!("removing the inventory annotation: {e}"));
        }
        match result {
            Ok(()) => Ok(ExitCode::SUCCESS),
            Err(e @ rtslice_node::NodeError::Invalid(_)) => invalid(e),
            Err(e) => Err(e.into()),
        }
    })
}
