//! `rtslice daemon`: the node service — owns the node's workloads, admits them one at a time and
//! serves the HTTP API (docs/api.md) on a unix socket, optionally on TCP with a bearer token (HTTPS
//! with --tls-cert/--tls-key).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use super::{invalid, MechanismArg};

#[derive(clap::Args)]
pub struct Args {
    /// Unix socket to serve on (mode 0600: root only)
    #[arg(long, env = "RTSLICE_SOCKET", default_value = rtslice_node::DEFAULT_SOCKET)]
    pub socket: PathBuf,
    #[arg(long, default_value = rtslice_host::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Also serve on this TCP address (needs --token-file; HTTPS with --tls-cert/--tls-key)
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// File holding the bearer token TCP clients must send (mode 0600, at least 16 characters)
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Serve --listen over HTTPS with this PEM certificate chain (server certificate first)
    #[arg(long, value_name = "CERT", requires_all = ["tls_key", "listen"])]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert (mode 0600)
    #[arg(long, value_name = "KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Mutual TLS: accept only clients presenting a certificate this CA (PEM) signed — besides the
    /// bearer token
    #[arg(long, value_name = "CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// A spec whose `node:` section (housekeeping CPUs, cap, fit policy) the node uses
    #[arg(long, value_name = "FILE", alias = "node-file")]
    pub node: Option<PathBuf>,
    /// Which Kubernetes namespaces may ask for real-time CPUs, and for what (an access policy:
    /// `apiVersion: rtslice/v1`, `access: {namespaces: …}`; docs/kubernetes.md "Who may ask").
    /// Without it no pod or claim is admitted
    #[arg(long, value_name = "FILE")]
    pub access: Option<PathBuf>,
    /// Publish this node's inventory on the Kubernetes Node NAME (annotation rtslice.io/inventory)
    /// for the scheduler extender (docs/kubernetes.md)
    #[arg(long, value_name = "NAME")]
    pub kube_node: Option<String>,
    /// Kubeconfig for --kube-node (default: in-cluster service account, $KUBECONFIG, ~/.kube/config)
    #[arg(long, value_name = "FILE", requires = "kube_node")]
    pub kubeconfig: Option<PathBuf>,
    /// Plan the pods bound to --kube-node on the node declared by --node-file and publish the
    /// inventory, launching nothing and touching no kernel state (a simulated node)
    #[arg(long, requires_all = ["kube_node", "node"])]
    pub inventory_only: bool,
    /// Reservation mechanism (default: HCBS, else RT groups, else SCHED_DEADLINE)
    #[arg(long, value_enum)]
    pub mechanism: Option<MechanismArg>,
    /// Turn HRTICK and HRTICK_DL on for the node's life: SCHED_DEADLINE runtimes and CFS slices
    /// enforced by high-resolution timers instead of the tick (debugfs; reset restores them)
    #[arg(long)]
    pub hrtick: bool,
    /// Set the fair_server runtime to 0 on CPUs holding only reserved RT work, while it is deployed
    /// there (debugfs; CFS tasks on those CPUs may starve)
    #[arg(long)]
    pub fair_server_off: bool,
    /// OCI launches: give each container its own network namespace
    #[arg(long)]
    pub netns: bool,
    /// OCI launches: apply Docker's default seccomp allow-list
    #[arg(long)]
    pub seccomp: bool,
    /// SIGTERM → SIGKILL delay for removed workloads, in seconds
    #[arg(long, default_value_t = 5.0)]
    pub grace: f64,
    /// Stop every workload and undo the node when the daemon exits (default: they keep running and
    /// the next daemon re-adopts them)
    #[arg(long)]
    pub reset_on_exit: bool,
    /// Also serve GET /metrics on this address, plain HTTP without a token (for Prometheus; the API
    /// listeners serve it too, with their access rules)
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// The socket workloads send their SLI reports to (they get its path in RTSLICE_REPORT_SOCKET);
    /// default: report.sock next to --socket
    #[arg(long, value_name = "PATH")]
    pub report_socket: Option<PathBuf>,
    /// No continuous BPF tracer (no per-thread latency, switches or CPU time in /metrics and the dashboard)
    #[arg(long)]
    pub no_trace: bool,
    /// Print the API's OpenAPI document and exit
    #[arg(long)]
    pub openapi: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.openapi {
        println!("{}", serde_json::to_string_pretty(&rtslice_node::openapi_document())?);
        return Ok(ExitCode::SUCCESS);
    }
    let node = match &args.node {
        Some(f) => {
            let text = match std::fs::read(f) {
                Ok(t) => t,
                Err(e) => return invalid(format_args!("{}: {e}", f.display())),
            };
            let file = f.display().to_string();
            match rtslice_spec::utf8_text(&text, &file).and_then(|t| rtslice_spec::parse(t, &file)) {
                Ok(s) => s.node,
                Err(e) => return invalid(e),
            }
        }
        None => rtslice_spec::Node::default(),
    };
    let access = match &args.access {
        Some(f) => match super::read_access(f) {
            Ok(a) => a,
            Err(e) => return invalid(e),
        },
        None => Default::default(),
    };
    if !(args.grace.is_finite() && args.grace >= 0.0) {
        return invalid("--grace must be a number of seconds ≥ 0");
    }
    let opts = rtslice_node::DaemonOptions {
        service: rtslice_node::ServiceOptions {
            state_dir: args.state_dir,
            node,
            mechanism: args.mechanism.map(Into::into),
            grace: Duration::from_secs_f64(args.grace),
            launch_env: Vec::new(),
            // Tests only (docs/api.md): emulate a reboot by changing the boot id the node compares.
            boot_id_file: std::env::var_os("RTSLICE_BOOT_ID_FILE").map(PathBuf::from),
            resctrl: None,
            hrtick: args.hrtick,
            fair_server_off: args.fair_server_off,
            oci: rtslice_host::OciDefaults { netns: args.netns, seccomp: args.seccomp },
            access,
        },
        socket: args.socket,
        listen: args.listen,
        token_file: args.token_file,
        tls: args.tls_cert.zip(args.tls_key).map(|(cert, key)| rtslice_node::TlsFiles { cert, key, client_ca: args.tls_client_ca }),
        reset_on_exit: args.reset_on_exit,
        telemetry: Some(rtslice_node::TelemetryOptions {
            trace: !args.no_trace,
            report_socket: args.report_socket,
            metrics_listen: args.metrics_listen,
            ..Default::default()
        }),
    };
    use std::io::IsTerminal;
    // Colours only for a person watching; a journal or log file gets plain text.
    tracing_subscriber::fmt().with_target(false).with_ansi(std::io::stderr().is_terminal()).with_writer(std::io::stderr).init();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    if let Some(kube_node) = args.kube_node {
        return super::extender::run_kube_node(&rt, opts, kube_node, args.kubeconfig, args.inventory_only);
    }
    match rt.block_on(rtslice_node::run(opts)) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e @ rtslice_node::NodeError::Invalid(_)) => invalid(e),
        Err(e) => Err(e.into()),
    }
}
