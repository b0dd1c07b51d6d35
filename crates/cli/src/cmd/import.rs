use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum Command {}

pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {}
}
