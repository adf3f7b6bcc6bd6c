//! The slash commands Chorus registers (issue 12's pinned interface): `agent`
//! (`init`, `destroy`, `list`, `configure`), `thread` (`list`, `kill`, `history`),
//! `context` (`save`, `clear`, `restore`, `history`), and `status`, `jobs`,
//! `settings`, the task board's `task` (`create`, `list`, `show`, `answer`,
//! `start`), `schedule` (`add`, `list`, `runs`, `remove`, `run`) and `memory`
//! (`show`, `forget`) for the channel's agent. `tasks` is `jobs` under its old name, kept registered so the command
//! people know still answers.

use serenity::all::{CommandOptionType, CreateCommand, CreateCommandOption};

fn sub(name: &str, description: &str) -> CreateCommandOption {
    CreateCommandOption::new(CommandOptionType::SubCommand, name, description)
}

fn text(name: &str, description: &str, required: bool) -> CreateCommandOption {
    CreateCommandOption::new(CommandOptionType::String, name, description).required(required)
}

fn task_id() -> CreateCommandOption {
    CreateCommandOption::new(CommandOptionType::Integer, "id", "The task's id").required(true)
}

fn schedule_id() -> CreateCommandOption {
    CreateCommandOption::new(CommandOptionType::Integer, "id", "The schedule's id").required(true)
}

/// Every command, as registered (in the guild, or globally).
pub fn all() -> Vec<CreateCommand> {
    vec![
        CreateCommand::new("agent")
            .description("Create, list, configure or destroy agents")
            .add_option(
                sub("init", "Create an agent and its channel")
                    .add_sub_option(text("name", "The agent's name", true))
                    .add_sub_option(text("system_prompt", "What the agent is for", true))
                    .add_sub_option(text("model", "Its model (else the default)", false))
                    .add_sub_option(text(
                        "permissions",
                        "open, standard (default) or locked",
                        false,
                    )),
            )
            .add_option(
                sub("destroy", "Destroy an agent and delete its channel")
                    .add_sub_option(text("name", "The agent's name", true))
                    .add_sub_option(
                        CreateCommandOption::new(
                            CommandOptionType::Boolean,
                            "keep_files",
                            "Keep its workspace on disk",
                        )
                        .required(false),
                    ),
            )
            .add_option(sub("list", "List the agents"))
            .add_option(
                sub("configure", "Change one of an agent's settings")
                    .add_sub_option(text("name", "The agent's name", true))
                    .add_sub_option(text(
                        "key",
                        "model, system_prompt, permissions, soul, user, heartbeat, …",
                        true,
                    ))
                    .add_sub_option(text("value", "The new value", true)),
            ),
        CreateCommand::new("thread")
            .description("This channel's agent's threads")
            .add_option(sub("list", "Active threads and those just ended"))
            .add_option(sub("kill", "End a running thread").add_sub_option(text(
                "id",
                "A thread id, or all",
                true,
            )))
            .add_option(
                sub("history", "A thread's messages").add_sub_option(
                    CreateCommandOption::new(CommandOptionType::Integer, "id", "The thread id")
                        .required(true),
                ),
            ),
        CreateCommand::new("context")
            .description("Save, clear or restore this channel's agent's context")
            .add_option(
                sub("save", "Save the context as a session").add_sub_option(text(
                    "description",
                    "What it is (else the model writes one)",
                    false,
                )),
            )
            .add_option(sub("clear", "Save, then clear the context"))
            .add_option(
                sub("restore", "Replace the context with a saved session").add_sub_option(text(
                    "session",
                    "The session id",
                    true,
                )),
            )
            .add_option(sub("history", "Saved sessions, newest first")),
        CreateCommand::new("task")
            .description("The task board: create, list, show, answer, start")
            .add_option(
                sub("create", "A new task; the planner plans it (or asks first)")
                    .add_sub_option(text("title", "What it is, in a line", true))
                    .add_sub_option(text("description", "The detail", false))
                    .add_sub_option(
                        CreateCommandOption::new(
                            CommandOptionType::Boolean,
                            "review",
                            "A person accepts its report before it is completed",
                        )
                        .required(false),
                    ),
            )
            .add_option(
                sub("list", "Tasks, newest first")
                    .add_sub_option(text("status", "Only those in this status", false))
                    .add_sub_option(text("agent", "Only this agent's", false)),
            )
            .add_option(
                sub("show", "A task: its status, wait, plan, questions, report")
                    .add_sub_option(task_id()),
            )
            .add_option(
                sub("answer", "Answer one of a task's open questions")
                    .add_sub_option(task_id())
                    .add_sub_option(text("answer", "Your answer (or an option's number)", true))
                    .add_sub_option(text(
                        "question",
                        "The question's id (needed when several are open)",
                        false,
                    )),
            )
            .add_option(sub("start", "Start a planned task").add_sub_option(task_id())),
        CreateCommand::new("schedule")
            .description("This channel's agent's schedules")
            .add_option(
                sub(
                    "add",
                    "A prompt on a cron in a time zone, or once at a time",
                )
                .add_sub_option(text(
                    "prompt",
                    "What the agent is told at each firing",
                    true,
                ))
                .add_sub_option(text("cron", "Five fields, e.g. 30 7 * * mon-fri", false))
                .add_sub_option(text(
                    "timezone",
                    "The cron's IANA zone, e.g. Europe/Berlin",
                    false,
                ))
                .add_sub_option(text("at", "Once, at this RFC 3339 time", false))
                .add_sub_option(text(
                    "on_missed",
                    "run_once (default) or skip",
                    false,
                )),
            )
            .add_option(sub("list", "The schedules and their next runs"))
            .add_option(sub("runs", "A schedule's runs").add_sub_option(schedule_id()))
            .add_option(sub("remove", "Delete a schedule").add_sub_option(schedule_id()))
            .add_option(sub("run", "Run a schedule now").add_sub_option(schedule_id())),
        CreateCommand::new("memory")
            .description("This channel's agent's memory")
            .add_option(sub("show", "Its memory entries, with where each came from"))
            .add_option(sub("forget", "Retract one entry").add_sub_option(text(
                "id",
                "The entry's id, as /memory show lists it",
                true,
            )))
            .add_option(
                sub("search", "Search its memory, saved sessions and messages")
                    .add_sub_option(text("query", "The words to look for", true)),
            ),
        CreateCommand::new("status").description("Chorus's providers, agents and what to set next"),
        CreateCommand::new("jobs").description("This channel's agent's background jobs"),
        CreateCommand::new("tasks")
            .description("Same as /jobs (its old name); the task board is /task"),
        CreateCommand::new("settings").description("Default model, permissions and idle timeout"),
    ]
}
