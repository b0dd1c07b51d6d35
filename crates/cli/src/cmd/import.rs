//! `rtslice import tosca FILE`: print a spec made from a TOSCA NFV template (SOL001 or Tacker VDUs).
//! What cannot be mapped is listed on stderr and as comments on top of the spec.

use std::path::PathBuf;
use std::process::ExitCode;

use super::EXIT_INVALID;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Turn VDUs (ETSI SOL001 tosca.nodes.nfv.Vdu.Compute, or Tacker's nfv_compute form) with
    /// their CPUs, memory and cpu.rt_runtime_us / cpu.rt_period_us into spec workloads; prints the
    /// spec on stdout (docs/spec.md, "TOSCA import")
    Tosca {
        /// The TOSCA template (YAML); `-` reads standard input
        file: PathBuf,
        /// Fail (exit 2) when anything could not be mapped, instead of only reporting it
        #[arg(long)]
        strict: bool,
        // JSON: the spec's own field names, as `rtslice generate schema` describes
        #[command(flatten)]
        json: super::Json,
    },
}

pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Tosca { file, strict, json } => {
            // A spec that cannot be read is invalid input (exit 2), like one that cannot be parsed.
            let (text, name) = match super::plan::read_spec(&file) {
                Ok(t) => t,
                Err(e) => return super::invalid(super::chain(&e)),
            };
            let imported = match rtslice_spec::import_tosca(&text, &name) {
                Ok(i) => i,
                Err(errors) => {
                    eprintln!("{errors}");
                    super::error(format_args!("{} error(s) in {name}; nothing imported", errors.len()));
                    return Ok(ExitCode::from(EXIT_INVALID));
                }
            };
            let mut out = format!("# Imported from {name} by `rtslice import tosca`.\n");
            if !imported.unmapped.is_empty() {
                out.push_str("# Not mapped (no counterpart in an rtslice spec):\n");
                for u in &imported.unmapped {
                    out.push_str(&format!("#   line {}: {}: {}\n", u.line, u.path, u.reason));
                    super::warning(format_args!("not imported: {u}"));
                }
            }
            if json.json {
                println!("{}", serde_json::to_string_pretty(&imported.spec)?);
            } else {
                out.push_str(&rtslice_spec::to_yaml(&imported.spec));
                print!("{out}");
            }
            if strict && !imported.unmapped.is_empty() {
                return Ok(ExitCode::from(EXIT_INVALID));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
