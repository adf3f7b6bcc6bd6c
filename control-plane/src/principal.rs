//! Who acts: a [`Principal`] is a person at a front end, an agent acting in one of
//! its threads, or the control plane's scheduler. Threads (who started them), runs,
//! audit rows, approvals (who asked, who answered) and permission grants carry one.
//!
//! **Stored text form** ([`Principal::text`], read back by [`Principal::parse`]): it
//! is what the store held before principals existed, so old rows read as the persons
//! they were and the API shows the same strings it always did.
//! - a person at the HTTP API: their user name (`api` for the API token, `alice` for
//!   an issued token); user names never contain `:` (`user_tokens::check_user`);
//! - a person on Discord: `discord:<user id>`;
//! - an agent: `agent:<name>:<thread id>` (agent names never contain `:`);
//! - the scheduler (the control plane acting on its own): `chorus`, what its own
//!   audit rows (a destroyed agent's files deleted) always said; `chorus` is not a
//!   user name a token can be issued for.
//!
//! Any other text (a row written by hand, an older placeholder) reads as an HTTP
//! person with exactly that name: it never gains an agent's or the scheduler's
//! standing by accident, and its role is whatever `[roles]` gives that name.
//!
//! A person's role is not part of the principal: it is looked up when they act
//! (`[roles]`, then what a front end vouched for), so a person demoted in the
//! settings does not keep their old authority through a thread they started. The
//! terminal client speaks HTTP with a token, so its user is an HTTP person: the
//! server cannot tell it from any other HTTP client, and a front end that cannot be
//! told apart confers nothing.
//!
//! **Chains**: an agent acts for whoever started its thread, which may itself be an
//! agent (delegation, agent-to-agent questions). [`root_person`] follows the chain to
//! the person at its root; what an agent may grant is bounded by that person's role
//! (`permissions::grants`). A chain that ends at the scheduler, loops, or cannot be
//! read has no person, and then the lowest role applies.

use serde::{Deserialize, Serialize};

/// The front end a person acted through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Frontend {
    /// The HTTP API (the terminal client included).
    Http,
    Discord,
}

/// A person, as a front end knows them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Person {
    pub frontend: Frontend,
    /// The front end's own id: a user name for HTTP, the numeric user id for Discord.
    pub id: String,
}

impl Person {
    /// The person a front end authenticated by this user id (`api`, `alice`,
    /// `discord:42`): the same reading as a stored row's, but always a person.
    pub fn from_user_id(user_id: &str) -> Person {
        match Principal::parse(user_id) {
            Principal::Person(person) => person,
            // A user id that looks like another kind is still the person who sent it.
            _ => Person {
                frontend: Frontend::Http,
                id: user_id.to_string(),
            },
        }
    }

    /// The name `[roles]`, token records and messages know this person by: the user
    /// name, or `discord:<id>`.
    pub fn user_id(&self) -> String {
        match self.frontend {
            Frontend::Http => self.id.clone(),
            Frontend::Discord => format!("{DISCORD_PREFIX}{}", self.id),
        }
    }
}

/// Who acts. A closed set: every kind of actor is one variant here.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Principal {
    Person(Person),
    /// An agent acting in one of its threads (on behalf of whoever started it).
    Agent {
        name: String,
        thread: u64,
    },
    /// The control plane acting on its own schedule (no person asked).
    Scheduler,
}

const DISCORD_PREFIX: &str = "discord:";
const AGENT_PREFIX: &str = "agent:";
/// Also reserved in `user_tokens::check_user`.
pub const SCHEDULER: &str = "chorus";

/// How many agents deep a chain may go before it counts as having no person:
/// far beyond any real delegation, and a bound on a loop in corrupt data.
pub const MAX_CHAIN: usize = 32;

impl Principal {
    /// A person from the user id a front end authenticated (`api`, `alice`,
    /// `discord:42`): the same reading as a stored row's.
    pub fn person(user_id: &str) -> Principal {
        Principal::Person(Person::from_user_id(user_id))
    }

    /// An agent acting in `thread`.
    pub fn agent(name: &str, thread: u64) -> Principal {
        Principal::Agent {
            name: name.to_string(),
            thread,
        }
    }

    /// The stored text form (see the module doc).
    pub fn text(&self) -> String {
        match self {
            Principal::Person(person) => person.user_id(),
            Principal::Agent { name, thread } => format!("{AGENT_PREFIX}{name}:{thread}"),
            Principal::Scheduler => SCHEDULER.to_string(),
        }
    }

    /// Reads the stored text form; never fails (see the module doc).
    pub fn parse(text: &str) -> Principal {
        if text == SCHEDULER {
            return Principal::Scheduler;
        }
        if let Some(rest) = text.strip_prefix(AGENT_PREFIX)
            && let Some((name, thread)) = rest.rsplit_once(':')
            && !name.is_empty()
            && !name.contains(':')
            && let Ok(thread) = thread.parse::<u64>()
        {
            return Principal::agent(name, thread);
        }
        if let Some(id) = text.strip_prefix(DISCORD_PREFIX)
            && !id.is_empty()
            && id.bytes().all(|b| b.is_ascii_digit())
        {
            return Principal::Person(Person {
                frontend: Frontend::Discord,
                id: id.to_string(),
            });
        }
        Principal::Person(Person {
            frontend: Frontend::Http,
            id: text.to_string(),
        })
    }

    /// The person, when this principal is one.
    pub fn as_person(&self) -> Option<&Person> {
        match self {
            Principal::Person(person) => Some(person),
            _ => None,
        }
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text())
    }
}

/// One step along a chain: where `principal` acts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    /// The chain ends at a person.
    Person(Person),
    /// The chain goes on at whoever started this thread of this agent.
    Thread { agent: String, thread: u64 },
    /// The chain ends without a person (the scheduler).
    Nobody,
}

impl Principal {
    /// The next link of this principal's chain.
    pub fn link(&self) -> Link {
        match self {
            Principal::Person(person) => Link::Person(person.clone()),
            Principal::Agent { name, thread } => Link::Thread {
                agent: name.clone(),
                thread: *thread,
            },
            Principal::Scheduler => Link::Nobody,
        }
    }
}

/// The person at the root of `start`'s chain: `started_by(agent, thread)` tells who
/// started a thread (`None`: unknown, or it cannot be read). `None` when the chain
/// ends at the scheduler, at an unknown thread, or goes on for more than
/// [`MAX_CHAIN`] agents (a loop).
pub async fn root_person<F, Fut>(start: Option<Principal>, mut started_by: F) -> Option<Person>
where
    F: FnMut(String, u64) -> Fut,
    Fut: std::future::Future<Output = Option<Principal>>,
{
    let mut current = start?;
    for _ in 0..=MAX_CHAIN {
        match current.link() {
            Link::Person(person) => return Some(person),
            Link::Nobody => return None,
            Link::Thread { agent, thread } => current = started_by(agent, thread).await?,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn the_text_form_is_what_the_store_held_before_and_reads_back() {
        let cases = [
            (
                "api",
                Principal::Person(Person {
                    frontend: Frontend::Http,
                    id: "api".into(),
                }),
            ),
            (
                "alice",
                Principal::Person(Person {
                    frontend: Frontend::Http,
                    id: "alice".into(),
                }),
            ),
            (
                "discord:42",
                Principal::Person(Person {
                    frontend: Frontend::Discord,
                    id: "42".into(),
                }),
            ),
            ("agent:coder:7", Principal::agent("coder", 7)),
            ("chorus", Principal::Scheduler),
        ];
        for (text, principal) in cases {
            assert_eq!(Principal::parse(text), principal, "{text}");
            assert_eq!(principal.text(), text);
            assert_eq!(principal.to_string(), text);
        }
    }

    #[test]
    fn anything_else_reads_as_a_person_with_exactly_that_name() {
        for text in [
            "agent",
            "chorus:scheduler",
            "agent:coder",
            "agent:coder:x",
            "agent::3",
            "agent:a:b:3",
            "discord:",
            "discord:abc",
            "scheduler",
            "",
        ] {
            let principal = Principal::parse(text);
            assert_eq!(
                principal,
                Principal::Person(Person {
                    frontend: Frontend::Http,
                    id: text.into()
                }),
                "{text}"
            );
            assert_eq!(principal.text(), text, "round trip of {text:?}");
        }
    }

    #[test]
    fn a_front_end_user_id_is_always_a_person() {
        // Even one that would read as an agent or the scheduler if it were stored:
        // what a front end authenticated is a person, whatever their name.
        assert!(Principal::person("agent:coder:7").as_person().is_some());
        assert!(Principal::person("chorus").as_person().is_some());
        assert_eq!(
            Principal::person("discord:9")
                .as_person()
                .map(|p| p.frontend),
            Some(Frontend::Discord)
        );
    }

    #[test]
    fn the_json_form_is_tagged_by_kind() {
        assert_eq!(
            serde_json::to_value(Principal::person("discord:42")).unwrap(),
            serde_json::json!({"kind": "person", "frontend": "discord", "id": "42"})
        );
        assert_eq!(
            serde_json::to_value(Principal::agent("coder", 3)).unwrap(),
            serde_json::json!({"kind": "agent", "name": "coder", "thread": 3})
        );
        assert_eq!(
            serde_json::to_value(Principal::Scheduler).unwrap(),
            serde_json::json!({"kind": "scheduler"})
        );
        let back: Principal =
            serde_json::from_value(serde_json::json!({"kind": "agent", "name": "a", "thread": 1}))
                .unwrap();
        assert_eq!(back, Principal::agent("a", 1));
    }

    /// Threads and who started them, as a lookup for [`root_person`].
    fn chain(
        threads: &[((&str, u64), Principal)],
    ) -> impl FnMut(String, u64) -> std::future::Ready<Option<Principal>> + use<> {
        let threads: HashMap<(String, u64), Principal> = threads
            .iter()
            .map(|((agent, id), by)| ((agent.to_string(), *id), by.clone()))
            .collect();
        move |agent, thread| std::future::ready(threads.get(&(agent, thread)).cloned())
    }

    #[tokio::test]
    async fn an_agent_chain_ends_at_the_person_who_started_it() {
        let alice = Principal::person("alice");
        let lookup = chain(&[
            (("lead", 1), alice.clone()),
            (("coder", 4), Principal::agent("lead", 1)),
            (("tester", 9), Principal::agent("coder", 4)),
        ]);
        assert_eq!(
            root_person(Some(Principal::agent("tester", 9)), lookup).await,
            alice.as_person().cloned()
        );
        assert_eq!(
            root_person(Some(alice.clone()), chain(&[])).await,
            alice.as_person().cloned()
        );
    }

    #[tokio::test]
    async fn a_chain_without_a_person_at_its_root_has_none() {
        // The scheduler, an unknown thread, nobody at all, and a loop.
        let scheduled = chain(&[(("a", 1), Principal::Scheduler)]);
        assert_eq!(
            root_person(Some(Principal::agent("a", 1)), scheduled).await,
            None
        );
        assert_eq!(
            root_person(Some(Principal::agent("a", 2)), chain(&[])).await,
            None
        );
        assert_eq!(root_person(None, chain(&[])).await, None);
        let looped = chain(&[
            (("a", 1), Principal::agent("b", 1)),
            (("b", 1), Principal::agent("a", 1)),
        ]);
        assert_eq!(
            root_person(Some(Principal::agent("a", 1)), looped).await,
            None
        );
    }
}
