use std::process::ExitCode;

use rtslice_host::doctor::Level;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    json: super::Json,
    /// Exit with 1 when a warning or missing feature is found
    #[arg(long)]
    strict: bool,
    /// Judge SMT siblings, irqbalance, NUMA and the host tuning against these reserved CPUs
    /// (default: the boot-isolated CPUs and those of the applied workloads)
    #[arg(long, value_name = "CPUS")]
    reserved: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let reserved = match args.reserved.as_deref().map(rtslice_host::CpuList::parse).transpose() {
        Ok(r) => r,
        Err(e) => return super::invalid(format_args!("--reserved: {e}; write a CPU list such as 2-15")),
    };
    let report = rtslice_host::doctor::doctor_for(reserved.as_ref());
    if args.json.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("rtslice doctor — kernel {}, {} CPUs [{}]", report.kernel, report.cpus_online.len(), report.cpus_online);
        for f in &report.findings {
            let tag = match f.level {
                Level::Ok => "ok  ",
                Level::Info => "info",
                Level::Warn => "WARN",
                Level::Missing => "MISS",
            };
            println!("[{tag}] {:<14} {}", f.topic, f.detail);
            if !f.fix.is_empty() {
                println!("       {:<14} fix: {}", "", f.fix);
            }
        }
        println!("reservation mechanism in force by default: {} — {}", report.default_mechanism, report.default_mechanism.describe());
    }
    if args.strict && report.problems().next().is_some() {
        return Ok(ExitCode::from(super::EXIT_REJECTED));
    }
    Ok(ExitCode::SUCCESS)
}
