//! `rtslice generate`: files derived from the CLI itself, for packaging (hidden from `--help`).
//! Generated from the same clap definition the binary parses with, so a man page or completion can
//! never disagree with the flags the binary accepts.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Man pages: rtslice.1 and one rtslice-SUBCOMMAND.1 per subcommand
    Man {
        /// Directory to write them to (created when missing)
        dir: PathBuf,
    },
    /// Shell completions for bash (rtslice.bash), zsh (_rtslice) and fish (rtslice.fish)
    Completions {
        /// Directory to write them to (created when missing)
        dir: PathBuf,
    },
    /// The spec's JSON Schema, derived from the spec's types (stdout, or FILE)
    Schema {
        /// File to write it to
        file: Option<PathBuf>,
    },
}

pub fn run(command: Command, cli: clap::Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Man { dir } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(cli, &dir).with_context(|| format!("cannot write man pages to {}", dir.display()))?;
        }
        Command::Completions { dir } => {
            use clap_complete::Shell;
            std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
            let mut cli = cli;
            for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
                clap_complete::generate_to(shell, &mut cli, "rtslice", &dir)
                    .with_context(|| format!("cannot write {shell} completions to {}", dir.display()))?;
            }
        }
        Command::Schema { file } => {
            let text = serde_json::to_string_pretty(&rtslice_spec::schema::spec_schema())? + "\n";
            match file {
                Some(f) => std::fs::write(&f, text).with_context(|| format!("cannot write {}", f.display()))?,
                None => print!("{text}"),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
