//! `chorus`: the Chorus control plane.

use clap::{Parser, Subcommand};

use chorus_control_plane::cli::{self, ClientCommand};
use chorus_control_plane::config::{self, ServeArgs, Settings};
use chorus_control_plane::permissions::PRESETS;
use chorus_control_plane::{serve, telemetry};

#[derive(Parser)]
#[command(
    name = "chorus",
    version,
    about = "Chorus runs autonomous LLM agents you reach from this terminal, an HTTP API or Discord.",
    long_about = "Chorus runs autonomous LLM agents you reach from this terminal, an HTTP API or Discord.\n\n\
        Each agent has its own git workspace, tools and model, and runs in its own worker\n\
        process (chorus-worker) that the control plane starts and supervises.\n\n\
        Settings come from built-in defaults, then chorus.toml, then the environment\n\
        (CHORUS_* and OPENAI_API_KEY / OPENAI_BASE_URL), then command-line flags."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the control plane: HTTP API, worker endpoint and one worker per agent.
    #[command(
        after_help = "Examples:\n  OPENAI_API_KEY=sk-… CHORUS_DEFAULT_MODEL=gpt-4o-mini chorus serve\n  chorus serve --config ./chorus.toml --http-addr 0.0.0.0:8080"
    )]
    Serve(ServeArgs),
    /// Say which model providers are usable and why not, the default model, where the
    /// data and listeners are, and what to set next.
    #[command(
        visible_alias = "doctor",
        after_help = "Examples:\n  chorus status\n  OPENAI_API_KEY=sk-… chorus status --config ./chorus.toml\n\n\
            When a Chorus answers (at --url, else at the --http-addr chorus serve would use),\n\
            this is what that server sees: its providers as it last checked them, its default\n\
            model, agents, workers and Discord. Only when none answers (or its status cannot\n\
            be read) does it show this shell's settings (flags, CHORUS_* and provider\n\
            variables, chorus.toml), checking each provider once; the first line says which.\n\
            Exits 0 when what it shows has a usable model provider, 1 otherwise."
    )]
    Status(cli::status::StatusArgs),
    /// Inspect permission profiles.
    #[command(
        subcommand,
        after_help = "Example:\n  chorus permissions explain standard 'tool:bash:git push'"
    )]
    Permissions(PermissionsCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Examples:\n  chorus completions bash > ~/.local/share/bash-completion/completions/chorus\n  chorus completions zsh > ~/.zfunc/_chorus"
    )]
    Completions { shell: clap_complete::Shell },
    #[command(flatten)]
    Client(ClientCommand),
}

#[derive(Subcommand)]
enum PermissionsCommand {
    /// Say whether a profile allows, asks for or denies an action, and which rule decides.
    #[command(
        after_help = "Example:\n  chorus permissions explain standard 'tool:bash:git status; rm -rf /'"
    )]
    Explain {
        /// A preset (open, standard, locked) or a JSON file with {"allow": [...], "ask": [...]}.
        profile: String,
        /// An action string, e.g. tool:create_file:src/main.rs or tool:bash:ls -la.
        action: String,
        /// Print JSON: the decision and, for each part of the action, the rule that
        /// decides it (its whole pattern) and why.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            // The whole chain of causes, without a backtrace: it is for the operator.
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `Ok(false)`: a failure already explained on stderr.
async fn run(cli: Cli) -> anyhow::Result<bool> {
    match cli.command {
        // Clients: none of the server's logging.
        Command::Client(command) => return cli::run(command).await,
        Command::Status(args) => return cli::status::run(args).await,
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "chorus", &mut std::io::stdout());
            return Ok(true);
        }
        _ => {}
    }
    let log_format = match &cli.command {
        Command::Serve(args) => args.log_format,
        _ => telemetry::json_log::LogFormat::Text,
    };
    let telemetry =
        telemetry::init(log_format).map_err(|e| anyhow::anyhow!("OpenTelemetry settings: {e}"))?;
    match cli.command {
        Command::Serve(args) => {
            let (file, path) = config::load_file(args.config.as_deref())?;
            if let Some(path) = path {
                tracing::info!(path = %path.display(), "settings file loaded");
            }
            let mut settings = Settings::resolve(args, file, |name| std::env::var(name).ok())?;
            settings.mcp.add_env(std::env::vars());
            // What an agent runs must not read our memory or environment: closed to
            // other processes of this user; `serve::start` blanks the secrets in the
            // block root could still read (see `environ`).
            if let Err(e) = nix::sys::prctl::set_dumpable(false) {
                tracing::warn!("cannot mark chorus non-dumpable: {e}");
            }
            let running = serve::start(settings, telemetry.collector().cloned()).await?;
            // The one line chorus prints on stdout: where to find it.
            println!(
                "chorus ready http=http://{} grpc={}://{} data_dir={}",
                running.http_addr,
                if running.grpc_tls { "https" } else { "http" },
                running.grpc_addr,
                running.data_dir.display()
            );
            running.until_signal().await?;
            telemetry.shutdown(std::time::Duration::from_secs(5)).await;
            Ok(true)
        }
        Command::Permissions(PermissionsCommand::Explain {
            profile,
            action,
            json,
        }) => {
            explain(&profile, &action, json)?;
            Ok(true)
        }
        Command::Client(_) | Command::Status(_) | Command::Completions { .. } => {
            unreachable!("handled above")
        }
    }
}

fn explain(profile: &str, action: &str, json: bool) -> anyhow::Result<()> {
    use chorus_control_plane::permissions::{PermissionsSetting, Profile, bash_actions};
    let setting = if PRESETS.contains(&profile) {
        PermissionsSetting::Preset(profile.to_string())
    } else {
        let text = std::fs::read_to_string(profile).map_err(|e| {
            anyhow::anyhow!(
                "'{profile}' is neither a preset ({}) nor a readable file: {e}",
                PRESETS.join(", ")
            )
        })?;
        PermissionsSetting::Custom(
            serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{profile}: {e}"))?,
        )
    };
    let profile = Profile::from_setting(&setting)?;
    // A bash line is checked part by part, as the gate does.
    let actions = match action.strip_prefix("tool:bash:") {
        Some(command) => bash_actions(command),
        None => vec![action.to_string()],
    };
    let (decision, explanations) =
        chorus_control_plane::gate::actions::decide_actions(&profile, &actions);
    if json {
        // The shape of `POST /api/permissions/explain`'s `profile`, `decision`, `actions`.
        let answer = serde_json::json!({
            "profile": profile.name(),
            "decision": decision,
            "actions": explanations,
        });
        println!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(());
    }
    println!("{decision}  ({} profile)", profile.name());
    for e in &explanations {
        // The reason names the rule (`allow[2]`), in words when its pattern is long
        // (`--json` has the whole pattern).
        println!(
            "  {:<5} {}\n        {}",
            e.decision.as_str(),
            e.action,
            e.reason
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every command a person can type says in its --help how it is used.
    #[test]
    fn every_command_has_an_example_in_its_help() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for sub in command.get_subcommands() {
                let name = format!("{path} {}", sub.get_name());
                let help = sub
                    .get_after_help()
                    .map(std::string::ToString::to_string)
                    .unwrap_or_default();
                if !help.contains("chorus ") {
                    missing.push(name.clone());
                }
                walk(sub, &name, missing);
            }
        }
        let command = Cli::command();
        command.clone().debug_assert();
        let mut missing = Vec::new();
        walk(&command, "chorus", &mut missing);
        assert!(missing.is_empty(), "no example in the help of: {missing:?}");
    }

    /// Every command a script may call answers in JSON with `--json`. `serve` (its
    /// output is its log: `--log-format json`) and `completions` (a shell script) are
    /// not answers.
    #[test]
    fn every_command_takes_json() {
        fn walk(
            command: &clap::Command,
            path: &str,
            missing: &mut Vec<String>,
            leaves: &mut usize,
        ) {
            for sub in command.get_subcommands() {
                let name = format!("{path} {}", sub.get_name());
                if ["chorus serve", "chorus completions"].contains(&name.as_str())
                    || sub.get_name() == "help"
                {
                    continue;
                }
                if sub.has_subcommands() {
                    walk(sub, &name, missing, leaves);
                    continue;
                }
                *leaves += 1;
                if !sub.get_arguments().any(|a| a.get_long() == Some("json")) {
                    missing.push(name);
                }
            }
        }
        let mut command = Cli::command();
        // Global flags (`--json` of the client's commands) reach the leaves here.
        command.build();
        let (mut missing, mut leaves) = (Vec::new(), 0);
        walk(&command, "chorus", &mut missing, &mut leaves);
        assert!(leaves > 20, "only {leaves} commands walked");
        assert!(missing.is_empty(), "no --json on: {missing:?}");
    }

    /// The help promises nothing that does not exist (no web UI yet).
    #[test]
    fn the_help_promises_only_what_exists() {
        let mut command = Cli::command();
        let top = command.render_long_help().to_string();
        let serve = command
            .find_subcommand_mut("serve")
            .unwrap()
            .render_long_help()
            .to_string();
        for help in [&top, &serve] {
            let lower = help.to_lowercase();
            assert!(
                !lower.contains("web ui") && !lower.contains("web page"),
                "{help}"
            );
        }
        assert!(top.contains("Discord"), "{top}");
    }
}
