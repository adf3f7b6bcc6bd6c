//! Approvals in an agent's channel (no serenity type here). An ASK on the feed is
//! posted with the action, why it asks (the rules) and Approve / Deny buttons; a
//! click is answered only for a member whose Discord roles make them an operator
//! or an admin (`access`), anyone else gets a refusal only they see and nothing
//! changes; the message is edited to show the outcome however it came (a click,
//! the API, the CLI, or the timeout: "expired — denied").

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::access::{self, DiscordRoles};
use super::outbox::{Outbox, Post, Request};
use crate::feed::{Answer, ApprovalAnswered, ApprovalAsked};
use crate::gate::ToolGate;
use crate::questions::{AnswerError, Reply};

/// What a click comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Click {
    /// Not for this clicker (or no longer possible): said only to them.
    Refused(String),
    /// Answered: the approval message's new text (its buttons go).
    Answered(String),
}

/// A button's `custom_id`: `approve:<id>` or `deny:<id>`.
pub fn custom_id(approve: bool, approval_id: &str) -> String {
    format!("{}:{approval_id}", if approve { "approve" } else { "deny" })
}

/// The approval a button is for, and whether it approves.
pub fn parse_custom_id(custom_id: &str) -> Option<(bool, &str)> {
    let (verb, id) = custom_id.split_once(':')?;
    let approve = match verb {
        "approve" => true,
        "deny" => false,
        _ => return None,
    };
    (!id.is_empty()).then_some((approve, id))
}

/// The buttons of an approval message.
pub fn buttons(approval_id: &str) -> Value {
    json!([{
        "type": 1,
        "components": [
            {"type": 2, "style": 3, "label": "Approve", "custom_id": custom_id(true, approval_id)},
            {"type": 2, "style": 4, "label": "Deny", "custom_id": custom_id(false, approval_id)},
        ]
    }])
}

/// The text of an approval request (the feed's `approval` event).
pub fn request_text(agent: &str, thread: u64, asked: &ApprovalAsked) -> String {
    let tool = &asked.tool;
    let (actions, why) = (&asked.actions, &asked.why);
    let mut text = format!("🔐 **{agent}** (thread #{thread}) asks to use `{tool}`:\n");
    let listed = actions.join("\n").replace("```", "'''");
    text.push_str(&format!(
        "```\n{}\n```\n",
        crate::cli::render::one_line(&listed, 1200)
    ));
    if !why.is_empty() {
        text.push_str(&format!("Why it asks: {}\n", why.join("; ")));
    }
    if let Ok(expires) = chrono::DateTime::parse_from_rfc3339(&asked.expires_at) {
        text.push_str(&format!(
            "Denied unless answered <t:{}:R>.",
            expires.timestamp()
        ));
    }
    text
}

/// The outcome line added when an approval is settled (the feed's
/// `approval_answered`).
pub fn outcome_line(answer: &Answer) -> String {
    let by = match answer.by() {
        Some(by) => match by.strip_prefix("discord:") {
            Some(id) => format!(" by <@{id}>"),
            None => format!(" by {by}"),
        },
        None => String::new(),
    };
    match answer {
        Answer::Approved { .. } => format!("**Approved**{by}."),
        Answer::Denied { .. } => format!("**Denied**{by}."),
        Answer::Expired => "**Expired — denied.** Nobody answered in time.".to_string(),
    }
}

/// Request text with its outcome, buttons gone: what a settled approval shows.
fn settled(request: &str, outcome: &str) -> String {
    // The countdown line no longer applies.
    let kept: Vec<&str> = request
        .lines()
        .filter(|l| !l.starts_with("Denied unless answered"))
        .collect();
    format!("{}\n{outcome}", kept.join("\n"))
}

pub struct ApprovalPosts {
    gate: Arc<ToolGate>,
    outbox: Arc<Outbox>,
    roles: DiscordRoles,
    /// Posted requests by approval id, and outcomes that came before their post.
    known: Mutex<Known>,
}

#[derive(Default)]
struct Known {
    /// (channel, message, request text).
    posted: HashMap<String, (u64, u64, String)>,
    /// The `approval_answered` data of approvals settled before they were posted.
    early: HashMap<String, Answer>,
}

impl ApprovalPosts {
    pub fn new(gate: Arc<ToolGate>, outbox: Arc<Outbox>, roles: DiscordRoles) -> ApprovalPosts {
        ApprovalPosts {
            gate,
            outbox,
            roles,
            known: Mutex::new(Known::default()),
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Posts an approval request with its buttons in `channel`.
    pub async fn asked(&self, channel: u64, agent: &str, thread: u64, asked: &ApprovalAsked) {
        let id = asked.approval_id.as_str();
        let text = request_text(agent, thread, asked);
        let post = Post {
            components: Some(buttons(id)),
            ..Post::text(&text)
        };
        match self.outbox.send(channel, thread, Request::Post(post)).await {
            Ok(message) => {
                let early = {
                    let mut known = self.known();
                    let early = known.early.remove(id);
                    if early.is_none() {
                        known
                            .posted
                            .insert(id.to_string(), (channel, message, text.clone()));
                    }
                    early
                };
                // Settled while it was being posted: show the outcome now.
                if let Some(answer) = early {
                    self.show_outcome(channel, message, thread, &text, id, &answer)
                        .await;
                }
            }
            Err(e) => {
                tracing::warn!(agent, thread, error = %e, "cannot post an approval request on Discord")
            }
        }
    }

    /// Shows how an approval was settled on its message (buttons removed).
    pub async fn answered(&self, thread: u64, answered: &ApprovalAnswered) {
        let id = answered.approval_id.as_str();
        let posted = {
            let mut known = self.known();
            let posted = known.posted.remove(id);
            if posted.is_none() {
                known.early.insert(id.to_string(), answered.answer.clone());
            }
            posted
        };
        if let Some((channel, message, request)) = posted {
            self.show_outcome(channel, message, thread, &request, id, &answered.answer)
                .await;
        }
    }

    async fn show_outcome(
        &self,
        channel: u64,
        message: u64,
        thread: u64,
        request: &str,
        id: &str,
        answer: &Answer,
    ) {
        let post = Post {
            components: Some(json!([])),
            ..Post::text(&settled(request, &outcome_line(answer)))
        };
        if let Err(e) = self
            .outbox
            .send(channel, thread, Request::Edit { message, post })
            .await
        {
            tracing::warn!(approval = id, error = %e, "cannot show an approval's outcome on Discord");
        }
    }

    /// A member clicked Approve or Deny on a message showing `shown`.
    pub async fn clicked(
        &self,
        custom_id: &str,
        user: u64,
        role_ids: &[String],
        shown: &str,
    ) -> Click {
        let Some((approve, id)) = parse_custom_id(custom_id) else {
            return Click::Refused("That button is not Chorus's.".into());
        };
        if !self.roles.may_approve(role_ids) {
            return Click::Refused(
                "Only an operator or an admin may answer approvals; nothing was changed. \
                 An admin maps Discord roles to Chorus roles in `[discord.roles]`."
                    .into(),
            );
        }
        let by = access::user_id(user);
        // Read before answering: the answer's feed event takes the entry away.
        let request = self
            .known()
            .posted
            .get(id)
            .map(|(_, _, text)| text.clone())
            .unwrap_or_else(|| shown.to_string());
        match self
            .gate
            .approvals()
            .answer(
                id,
                if approve { Reply::Approve } else { Reply::Deny },
                &crate::principal::Principal::person(&by),
            )
            .await
        {
            Ok(_) => {
                let outcome = outcome_line(&if approve {
                    Answer::Approved { by }
                } else {
                    Answer::Denied { by }
                });
                Click::Answered(settled(&request, &outcome))
            }
            Err(AnswerError::Settled { status, .. }) => {
                Click::Refused(format!("This approval is {status} already."))
            }
            Err(AnswerError::NotFound(_)) => Click::Refused("This approval is gone.".into()),
            Err(e) => Click::Refused(format!("The answer could not be recorded: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn button_ids_round_trip_and_strangers_are_rejected() {
        let id = "5d1c7a9e-2f0b-4c1e-9a53-0e1f2a3b4c5d";
        assert_eq!(parse_custom_id(&custom_id(true, id)), Some((true, id)));
        assert_eq!(parse_custom_id(&custom_id(false, id)), Some((false, id)));
        assert!(custom_id(false, id).len() <= 100, "Discord's limit");
        assert_eq!(parse_custom_id("approve:"), None);
        assert_eq!(parse_custom_id("launch:x"), None);
        assert_eq!(parse_custom_id("nothing"), None);
        let b = buttons(id);
        let labels: Vec<&str> = b[0]["components"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["label"].as_str().unwrap())
            .collect();
        assert_eq!(labels, ["Approve", "Deny"]);
    }

    #[test]
    fn the_request_says_what_and_why_and_the_outcome_replaces_the_countdown() {
        let asked = ApprovalAsked {
            approval_id: "a1".into(),
            tool: "bash".into(),
            actions: vec!["bash:rm -rf build".into()],
            why: vec!["bash:rm -rf build: matches ask rule 'bash:rm *'".into()],
            expires_at: "2026-11-23T12:10:00Z".into(),
        };
        let text = request_text("helper", 4, &asked);
        assert!(
            text.contains("**helper** (thread #4) asks to use `bash`"),
            "{text}"
        );
        assert!(text.contains("bash:rm -rf build"), "{text}");
        assert!(
            text.contains("Why it asks: bash:rm -rf build: matches"),
            "{text}"
        );
        assert!(text.contains("<t:1795435800:R>"), "{text}");
        let expired = settled(&text, &outcome_line(&Answer::Expired));
        assert!(expired.ends_with("**Expired — denied.** Nobody answered in time."));
        assert!(!expired.contains("Denied unless"), "{expired}");
        assert_eq!(
            outcome_line(&Answer::Approved {
                by: "discord:42".into()
            }),
            "**Approved** by <@42>."
        );
        assert_eq!(
            outcome_line(&Answer::Denied { by: "api".into() }),
            "**Denied** by api."
        );
    }
}
