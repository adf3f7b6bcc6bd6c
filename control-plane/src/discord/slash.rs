//! A slash command as Chorus understands it (pure): the adapter hands over the
//! command's name and option tree without serenity types, [`parse`] turns it into an
//! [`Invocation`] or a sentence saying what is wrong, and [`Invocation::act`] says
//! what it is in the one policy every front end checks ([`crate::gate::policy`]).

use crate::gate::policy::Act;

/// One option's value, as Discord sent it.
#[derive(Debug, Clone, PartialEq)]
pub enum OptionValue {
    Text(String),
    Integer(i64),
    Boolean(bool),
    /// A subcommand and its own options.
    Sub(Vec<(String, OptionValue)>),
    /// A kind Chorus never registers.
    Other,
}

/// What a person asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    AgentInit {
        name: String,
        system_prompt: String,
        model: Option<String>,
        permissions: Option<String>,
    },
    AgentDestroy {
        name: String,
        keep_files: bool,
    },
    AgentList,
    AgentConfigure {
        name: String,
        key: String,
        value: String,
    },
    ThreadList,
    /// A thread id, or every going thread.
    ThreadKill(KillWhat),
    ThreadHistory(u64),
    ContextSave {
        description: Option<String>,
    },
    ContextClear,
    ContextRestore {
        session: String,
    },
    ContextHistory,
    Status,
    /// `/jobs` (and `/tasks`, its old name, until the task board takes that word).
    Jobs,
    Settings,
    /// `/task create`: a new task for the planner.
    TaskCreate {
        title: String,
        description: String,
        review: bool,
    },
    /// `/task list`, optionally one status and one agent's.
    TaskList {
        status: Option<String>,
        agent: Option<String>,
    },
    TaskShow(u64),
    /// `/task answer`: one open question's answer (`question` may be left out when
    /// only one is open).
    TaskAnswer {
        id: u64,
        question: Option<String>,
        answer: String,
    },
    TaskStart(u64),
    /// `/schedule add`: a prompt for this channel's agent on a cron in a zone, or once.
    ScheduleAdd {
        prompt: String,
        cron: Option<String>,
        timezone: Option<String>,
        at: Option<String>,
        on_missed: Option<String>,
    },
    ScheduleList,
    ScheduleRuns(u64),
    ScheduleRemove(u64),
    /// `/schedule run`: run one now, to test it.
    ScheduleRun(u64),
    /// `/memory show`: the channel's agent's memory entries.
    MemoryShow,
    /// `/memory forget id:<id>`: retract one entry.
    MemoryForget(String),
    /// `/memory search query:<words>`: the best hits, each saying where it is.
    MemorySearch(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillWhat {
    All,
    One(u64),
}

impl Invocation {
    /// Whether it acts on the agent of the channel it is run in.
    pub fn needs_channel_agent(&self) -> bool {
        matches!(
            self,
            Invocation::ThreadList
                | Invocation::ThreadKill(_)
                | Invocation::ThreadHistory(_)
                | Invocation::ContextSave { .. }
                | Invocation::ContextClear
                | Invocation::ContextRestore { .. }
                | Invocation::ContextHistory
                | Invocation::Jobs
                | Invocation::ScheduleAdd { .. }
                | Invocation::ScheduleList
                | Invocation::ScheduleRuns(_)
                | Invocation::ScheduleRemove(_)
                | Invocation::ScheduleRun(_)
                | Invocation::MemoryShow
                | Invocation::MemoryForget(_)
                | Invocation::MemorySearch(_)
        )
    }

    /// What it does, for who may: the same acts the HTTP API's routes declare.
    pub fn act(&self) -> Act {
        match self {
            Invocation::AgentInit { .. } => Act::CreateAgents,
            Invocation::AgentDestroy { .. } => Act::DestroyAgents,
            // Setting an agent to work on its own is changing its course, as over HTTP.
            Invocation::AgentConfigure { .. }
            | Invocation::ScheduleAdd { .. }
            | Invocation::ScheduleRemove(_)
            | Invocation::ScheduleRun(_)
            | Invocation::MemoryForget(_) => Act::ConfigureAgents,
            Invocation::ThreadKill(_) => Act::StopThreads,
            Invocation::ContextSave { .. }
            | Invocation::ContextClear
            | Invocation::ContextRestore { .. } => Act::ManageContext,
            Invocation::TaskCreate { .. }
            | Invocation::TaskAnswer { .. }
            | Invocation::TaskStart(_) => Act::ManageTasks,
            Invocation::AgentList
            | Invocation::TaskList { .. }
            | Invocation::TaskShow(_)
            | Invocation::ThreadList
            | Invocation::ThreadHistory(_)
            | Invocation::ContextHistory
            | Invocation::Status
            | Invocation::Jobs
            | Invocation::ScheduleList
            | Invocation::ScheduleRuns(_)
            | Invocation::MemoryShow
            | Invocation::MemorySearch(_)
            | Invocation::Settings => Act::Look,
        }
    }

    /// Whether only the person who ran it should see the answer (lists and
    /// settings are noise for the rest of the channel).
    pub fn private_answer(&self) -> bool {
        matches!(
            self,
            Invocation::Status
                | Invocation::Settings
                | Invocation::ThreadHistory(_)
                | Invocation::MemoryShow
                | Invocation::MemorySearch(_)
        )
    }
}

fn text(options: &[(String, OptionValue)], name: &str) -> Option<String> {
    options
        .iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, v)| match v {
            OptionValue::Text(t) => Some(t.trim().to_string()).filter(|t| !t.is_empty()),
            OptionValue::Integer(i) => Some(i.to_string()),
            _ => None,
        })
}

fn required(options: &[(String, OptionValue)], name: &str) -> Result<String, String> {
    text(options, name).ok_or_else(|| format!("`{name}` is required"))
}

fn boolean(options: &[(String, OptionValue)], name: &str) -> bool {
    options
        .iter()
        .any(|(n, v)| n == name && *v == OptionValue::Boolean(true))
}

fn task_id(value: &str) -> Result<u64, String> {
    value
        .trim()
        .trim_start_matches('#')
        .parse()
        .map_err(|_| format!("`{value}` is not a task id (a number, as `/task list` shows)"))
}

fn schedule_id(value: &str) -> Result<u64, String> {
    value.trim().trim_start_matches('#').parse().map_err(|_| {
        format!("`{value}` is not a schedule id (a number, as `/schedule list` shows)")
    })
}

fn thread_id(value: &str) -> Result<u64, String> {
    value
        .trim()
        .trim_start_matches('#')
        .parse()
        .map_err(|_| format!("`{value}` is not a thread id (a number, as `/thread list` shows)"))
}

/// The invocation `command` with `options` stands for.
pub fn parse(command: &str, options: &[(String, OptionValue)]) -> Result<Invocation, String> {
    let (sub, sub_options): (Option<&str>, &[(String, OptionValue)]) = match options.first() {
        Some((name, OptionValue::Sub(inner))) => (Some(name.as_str()), inner.as_slice()),
        _ => (None, options),
    };
    let o = sub_options;
    Ok(match (command, sub) {
        ("agent", Some("init")) => Invocation::AgentInit {
            name: required(o, "name")?,
            system_prompt: required(o, "system_prompt")?,
            model: text(o, "model"),
            permissions: text(o, "permissions"),
        },
        ("agent", Some("destroy")) => Invocation::AgentDestroy {
            name: required(o, "name")?,
            keep_files: boolean(o, "keep_files"),
        },
        ("agent", Some("list")) => Invocation::AgentList,
        ("agent", Some("configure")) => Invocation::AgentConfigure {
            name: required(o, "name")?,
            key: required(o, "key")?,
            value: required(o, "value")?,
        },
        ("thread", Some("list")) => Invocation::ThreadList,
        ("thread", Some("kill")) => {
            let id = required(o, "id")?;
            Invocation::ThreadKill(if id.eq_ignore_ascii_case("all") {
                KillWhat::All
            } else {
                KillWhat::One(thread_id(&id)?)
            })
        }
        ("thread", Some("history")) => Invocation::ThreadHistory(thread_id(&required(o, "id")?)?),
        ("context", Some("save")) => Invocation::ContextSave {
            description: text(o, "description"),
        },
        ("context", Some("clear")) => Invocation::ContextClear,
        ("context", Some("restore")) => Invocation::ContextRestore {
            session: required(o, "session")?,
        },
        ("context", Some("history")) => Invocation::ContextHistory,
        ("task", Some("create")) => Invocation::TaskCreate {
            title: required(o, "title")?,
            description: text(o, "description").unwrap_or_default(),
            review: boolean(o, "review"),
        },
        ("task", Some("list")) => Invocation::TaskList {
            status: text(o, "status"),
            agent: text(o, "agent"),
        },
        ("task", Some("show")) => Invocation::TaskShow(task_id(&required(o, "id")?)?),
        ("task", Some("answer")) => Invocation::TaskAnswer {
            id: task_id(&required(o, "id")?)?,
            question: text(o, "question"),
            answer: required(o, "answer")?,
        },
        ("task", Some("start")) => Invocation::TaskStart(task_id(&required(o, "id")?)?),
        ("schedule", Some("add")) => Invocation::ScheduleAdd {
            prompt: required(o, "prompt")?,
            cron: text(o, "cron"),
            timezone: text(o, "timezone"),
            at: text(o, "at"),
            on_missed: text(o, "on_missed"),
        },
        ("schedule", Some("list")) => Invocation::ScheduleList,
        ("schedule", Some("runs")) => Invocation::ScheduleRuns(schedule_id(&required(o, "id")?)?),
        ("schedule", Some("remove")) => {
            Invocation::ScheduleRemove(schedule_id(&required(o, "id")?)?)
        }
        ("schedule", Some("run")) => Invocation::ScheduleRun(schedule_id(&required(o, "id")?)?),
        ("memory", Some("show")) => Invocation::MemoryShow,
        ("memory", Some("forget")) => Invocation::MemoryForget(required(o, "id")?),
        ("memory", Some("search")) => Invocation::MemorySearch(required(o, "query")?),
        ("status", None) => Invocation::Status,
        ("jobs" | "tasks", None) => Invocation::Jobs,
        ("settings", None) => Invocation::Settings,
        (command, Some(sub)) => return Err(format!("`/{command} {sub}` is not a Chorus command")),
        (command, None) => return Err(format!("`/{command}` is not a Chorus command")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::policy::allowed;
    use crate::permissions::grants::Role;

    fn sub(name: &str, options: &[(&str, OptionValue)]) -> Vec<(String, OptionValue)> {
        vec![(
            name.to_string(),
            OptionValue::Sub(
                options
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.clone()))
                    .collect(),
            ),
        )]
    }

    fn t(s: &str) -> OptionValue {
        OptionValue::Text(s.to_string())
    }

    #[test]
    fn agent_init_takes_its_options_and_needs_name_and_prompt() {
        let init = parse(
            "agent",
            &sub(
                "init",
                &[
                    ("name", t("helper")),
                    ("system_prompt", t("You help.")),
                    ("permissions", t("locked")),
                ],
            ),
        );
        assert_eq!(
            init,
            Ok(Invocation::AgentInit {
                name: "helper".into(),
                system_prompt: "You help.".into(),
                model: None,
                permissions: Some("locked".into()),
            })
        );
        let missing = parse("agent", &sub("init", &[("name", t("helper"))]));
        assert_eq!(missing, Err("`system_prompt` is required".to_string()));
        let blank = parse(
            "agent",
            &sub("init", &[("name", t("  ")), ("system_prompt", t("x"))]),
        );
        assert_eq!(blank, Err("`name` is required".to_string()));
    }

    #[test]
    fn thread_kill_takes_all_or_a_number() {
        assert_eq!(
            parse("thread", &sub("kill", &[("id", t("ALL"))])),
            Ok(Invocation::ThreadKill(KillWhat::All))
        );
        assert_eq!(
            parse("thread", &sub("kill", &[("id", t("#12"))])),
            Ok(Invocation::ThreadKill(KillWhat::One(12)))
        );
        assert!(
            parse("thread", &sub("kill", &[("id", t("some"))]))
                .unwrap_err()
                .contains("not a thread id")
        );
        assert_eq!(
            parse(
                "thread",
                &sub("history", &[("id", OptionValue::Integer(3))])
            ),
            Ok(Invocation::ThreadHistory(3))
        );
    }

    #[test]
    fn top_level_commands_and_unknown_ones() {
        assert_eq!(parse("status", &[]), Ok(Invocation::Status));
        assert_eq!(parse("jobs", &[]), Ok(Invocation::Jobs));
        assert_eq!(parse("tasks", &[]), Ok(Invocation::Jobs), "the old name");
        assert_eq!(
            parse("memory", &sub("show", &[])),
            Ok(Invocation::MemoryShow)
        );
        let forget = parse("memory", &sub("forget", &[("id", t("3f9a2c01"))])).unwrap();
        assert_eq!(forget, Invocation::MemoryForget("3f9a2c01".into()));
        assert!(forget.needs_channel_agent());
        assert_eq!(
            forget.act(),
            Act::ConfigureAgents,
            "retracting is an operator's"
        );
        assert_eq!(Invocation::MemoryShow.act(), Act::Look);
        let search = parse("memory", &sub("search", &[("query", t("metric units"))])).unwrap();
        assert_eq!(search, Invocation::MemorySearch("metric units".into()));
        assert!(search.needs_channel_agent() && search.private_answer());
        assert_eq!(
            search.act(),
            Act::Look,
            "searching is a viewer's, like reading"
        );
        assert_eq!(
            parse(
                "agent",
                &sub(
                    "destroy",
                    &[("name", t("a")), ("keep_files", OptionValue::Boolean(true))]
                )
            ),
            Ok(Invocation::AgentDestroy {
                name: "a".into(),
                keep_files: true
            })
        );
        assert!(
            parse("agent", &sub("fly", &[]))
                .unwrap_err()
                .contains("/agent fly")
        );
        assert!(parse("dance", &[]).unwrap_err().contains("/dance"));
    }

    #[test]
    fn task_commands_take_their_options_and_changing_a_task_is_an_operators() {
        assert_eq!(
            parse(
                "task",
                &sub(
                    "create",
                    &[
                        ("title", t("Greet")),
                        ("review", OptionValue::Boolean(true))
                    ]
                )
            ),
            Ok(Invocation::TaskCreate {
                title: "Greet".into(),
                description: String::new(),
                review: true
            })
        );
        assert_eq!(
            parse(
                "task",
                &sub(
                    "answer",
                    &[("id", OptionValue::Integer(7)), ("answer", t(" hello "))]
                )
            ),
            Ok(Invocation::TaskAnswer {
                id: 7,
                question: None,
                answer: "hello".into()
            })
        );
        assert_eq!(
            parse("task", &sub("answer", &[("id", t("7"))])),
            Err("`answer` is required".to_string())
        );
        assert!(
            parse("task", &sub("show", &[("id", t("seven"))]))
                .unwrap_err()
                .contains("not a task id")
        );
        assert_eq!(
            parse("task", &sub("list", &[("status", t("planned"))])),
            Ok(Invocation::TaskList {
                status: Some("planned".into()),
                agent: None
            })
        );
        let create = Invocation::TaskCreate {
            title: "x".into(),
            description: String::new(),
            review: false,
        };
        assert!(!allowed(Role::Viewer, create.act()));
        assert!(!allowed(Role::Viewer, Invocation::TaskStart(1).act()));
        assert!(allowed(Role::Operator, create.act()));
        assert!(allowed(Role::Viewer, Invocation::TaskShow(1).act()));
        assert!(!Invocation::TaskShow(1).needs_channel_agent());
    }

    #[test]
    fn schedule_commands_act_on_the_channels_agent_and_changing_one_is_an_operators() {
        assert_eq!(
            parse(
                "schedule",
                &sub(
                    "add",
                    &[
                        ("prompt", t("Summarise my inbox")),
                        ("cron", t("30 7 * * *")),
                        ("timezone", t("Europe/Berlin"))
                    ]
                )
            ),
            Ok(Invocation::ScheduleAdd {
                prompt: "Summarise my inbox".into(),
                cron: Some("30 7 * * *".into()),
                timezone: Some("Europe/Berlin".into()),
                at: None,
                on_missed: None,
            })
        );
        assert_eq!(
            parse("schedule", &sub("add", &[("cron", t("* * * * *"))])),
            Err("`prompt` is required".to_string())
        );
        assert_eq!(
            parse("schedule", &sub("run", &[("id", OptionValue::Integer(3))])),
            Ok(Invocation::ScheduleRun(3))
        );
        assert!(
            parse("schedule", &sub("remove", &[("id", t("three"))]))
                .unwrap_err()
                .contains("not a schedule id")
        );
        assert!(allowed(Role::Viewer, Invocation::ScheduleList.act()));
        assert!(allowed(Role::Viewer, Invocation::ScheduleRuns(1).act()));
        assert!(!allowed(Role::Viewer, Invocation::ScheduleRun(1).act()));
        assert!(!allowed(Role::Viewer, Invocation::ScheduleRemove(1).act()));
        assert!(allowed(Role::Operator, Invocation::ScheduleRemove(1).act()));
        assert!(Invocation::ScheduleList.needs_channel_agent());
    }

    #[test]
    fn viewers_look_and_operators_change() {
        assert!(allowed(Role::Viewer, Invocation::AgentList.act()));
        assert!(!allowed(
            Role::Viewer,
            Invocation::ThreadKill(KillWhat::All).act()
        ));
        assert!(allowed(
            Role::Operator,
            Invocation::ThreadKill(KillWhat::All).act()
        ));
        assert!(allowed(Role::Admin, Invocation::ContextClear.act()));
        assert!(Invocation::ContextClear.needs_channel_agent());
        assert!(!Invocation::AgentList.needs_channel_agent());
    }
}
