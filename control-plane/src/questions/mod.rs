//! Questions to a person, and waiting for the answer (SPEC D2). A question is a row
//! in the store (so any front end can list and answer it) and a waiter in memory (so
//! the answer reaches the run at once).
//!
//! Two kinds ([`QuestionKind`]): an **approval** of a tool call the profile asks about
//! (the gate's ASK), answered approve or deny; and a **question** an agent asks in
//! words (the task board's `ask_question`, next), answered approve, deny or in text.
//! Both live in the `approvals` table, told apart by its `kind` column (migration
//! 0018; older rows are approvals); a text answer goes in its `answer` column with the
//! status `answered`. Keeping one table keeps one list of what waits for a person,
//! one expiry and one cancellation at restart, and leaves the approval API and its
//! wire shapes as they were: an approval's record shows neither `kind` nor `answer`.
//!
//! Fails closed: no answer in time, a restart, or an answer that does not fit the
//! question all mean no (an approval is denied; a text answer to an approval is
//! refused and the approval stays pending).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::principal::Principal;
pub use crate::store::QuestionKind;
use crate::store::{ApprovalRecord, ApprovalStatus, NewApproval, Store, StoreError};

/// What a person answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Approve,
    Deny,
    /// An answer in words (questions only).
    Text(String),
}

impl Reply {
    /// The status a question has once answered so.
    fn status(&self) -> ApprovalStatus {
        match self {
            Reply::Approve => ApprovalStatus::Approved,
            Reply::Deny => ApprovalStatus::Denied,
            Reply::Text(_) => ApprovalStatus::Answered,
        }
    }

    /// Whether a question of `kind` can be answered so: an approval is a yes or no.
    fn fits(&self, kind: QuestionKind) -> bool {
        !matches!((self, kind), (Reply::Text(_), QuestionKind::Approval))
    }
}

/// A person's answer, and who gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub reply: Reply,
    pub by: Principal,
}

impl Answer {
    /// Only an explicit approve approves.
    pub fn approved(&self) -> bool {
        self.reply == Reply::Approve
    }
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Answered(Answer),
    /// Nobody answered within the timeout.
    Expired,
}

#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error("no approval request '{0}'")]
    NotFound(String),
    #[error(
        "approval request '{0}' is answered with approve or deny, not in words; it is still pending"
    )]
    NotAYesOrNo(String),
    #[error("approval request '{id}' is {status} already")]
    Settled { id: String, status: &'static str },
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub struct Questions {
    store: Store,
    waiting: Mutex<HashMap<String, oneshot::Sender<Answer>>>,
}

impl Questions {
    pub fn new(store: Store) -> Self {
        Questions {
            store,
            waiting: Mutex::new(HashMap::new()),
        }
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<Answer>>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a question; the caller then awaits [`Questions::wait`].
    pub async fn open(
        &self,
        request: &NewApproval,
    ) -> Result<oneshot::Receiver<Answer>, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.waiting().insert(request.id.clone(), tx);
        if let Err(e) = self.store.insert_approval(request).await {
            self.waiting().remove(&request.id);
            return Err(e);
        }
        Ok(rx)
    }

    /// Waits for the answer to `id`, or for `timeout`, whichever is first.
    pub async fn wait(
        &self,
        id: &str,
        answer: oneshot::Receiver<Answer>,
        timeout: Duration,
    ) -> Outcome {
        let mut answer = answer;
        match tokio::time::timeout(timeout, &mut answer).await {
            Ok(Ok(answer)) => return Outcome::Answered(answer),
            // Cancelled (the thread is over): no answer will come.
            Ok(Err(_)) => return Outcome::Expired,
            Err(_) => {}
        }
        self.waiting().remove(id);
        // An answer may have been recorded just as time ran out; it wins if so. The
        // store is the judge (its answer may not have reached the waiter), so what
        // the run is told always matches what the approval record says.
        match self
            .store
            .settle_approval(id, ApprovalStatus::Expired, None)
            .await
        {
            Ok(true) | Err(_) => Outcome::Expired,
            Ok(false) => match self.store.approval(id).await {
                Ok(Some(record)) => {
                    let reply = match (record.status, record.answer) {
                        (ApprovalStatus::Approved, _) => Reply::Approve,
                        (ApprovalStatus::Denied, _) => Reply::Deny,
                        (ApprovalStatus::Answered, Some(text)) => Reply::Text(text),
                        _ => return Outcome::Expired,
                    };
                    Outcome::Answered(Answer {
                        reply,
                        // Settled by an answer, so it names who answered.
                        by: record.decided_by.unwrap_or_else(|| Principal::person("")),
                    })
                }
                _ => Outcome::Expired,
            },
        }
    }

    /// The thread a request belongs to is over (its worker died, the agent was
    /// destroyed): its pending requests are cancelled, which is a deny.
    pub async fn cancel_thread(&self, agent: &str, thread_id: u64) {
        let pending = match self.store.pending_approvals(Some(agent)).await {
            Ok(pending) => pending,
            Err(e) => {
                tracing::error!(agent, thread_id, error = %e, "cannot list approvals to cancel");
                return;
            }
        };
        for request in pending.into_iter().filter(|r| r.thread_id == thread_id) {
            if let Ok(true) = self
                .store
                .settle_approval(&request.id, ApprovalStatus::Cancelled, None)
                .await
            {
                // Dropping the waiter's sender ends its wait at once.
                self.waiting().remove(&request.id);
            }
        }
    }

    /// A person answers. Only a pending question can be answered, once, and only
    /// with an answer that fits it.
    pub async fn answer(
        &self,
        id: &str,
        reply: Reply,
        by: &Principal,
    ) -> Result<ApprovalRecord, AnswerError> {
        if let Reply::Text(_) = reply {
            // The kind never changes, so reading it first leaves no gap.
            match self.store.approval(id).await? {
                Some(record) if !reply.fits(record.kind) => {
                    return Err(AnswerError::NotAYesOrNo(id.to_string()));
                }
                Some(_) => {}
                None => return Err(AnswerError::NotFound(id.to_string())),
            }
        }
        let text = match &reply {
            Reply::Text(text) => Some(text.as_str()),
            _ => None,
        };
        if !self
            .store
            .answer_question(id, reply.status(), text, Some(by))
            .await?
        {
            return match self.store.approval(id).await? {
                Some(record) => Err(AnswerError::Settled {
                    id: id.to_string(),
                    status: record.status.as_str(),
                }),
                None => Err(AnswerError::NotFound(id.to_string())),
            };
        }
        if let Some(waiter) = self.waiting().remove(id) {
            let _ = waiter.send(Answer {
                reply,
                by: by.clone(),
            });
        }
        self.store
            .approval(id)
            .await?
            .ok_or_else(|| AnswerError::NotFound(id.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store_with_agent;

    fn request(id: &str) -> NewApproval {
        NewApproval {
            id: id.into(),
            agent_name: "a".into(),
            thread_id: 1,
            call_id: "c".into(),
            tool: "bash".into(),
            actions: vec!["tool:bash:rm x".into()],
            detail: None,
            kind: QuestionKind::Approval,
            requested_by: Some(Principal::person("api")),
            expires_at: crate::store::now(),
        }
    }

    async fn approvals() -> (Questions, tempfile::TempDir) {
        let (store, dir) = test_store_with_agent().await;
        (Questions::new(store), dir)
    }

    #[tokio::test]
    async fn an_answer_reaches_the_waiter_once() {
        let (approvals, _dir) = approvals().await;
        let rx = approvals.open(&request("x")).await.unwrap();
        let record = approvals
            .answer("x", Reply::Approve, &Principal::person("alice"))
            .await
            .unwrap();
        assert_eq!(record.status, ApprovalStatus::Approved);
        assert_eq!(
            approvals.wait("x", rx, Duration::from_secs(1)).await,
            Outcome::Answered(Answer {
                reply: Reply::Approve,
                by: Principal::person("alice")
            })
        );
        assert!(matches!(
            approvals
                .answer("x", Reply::Deny, &Principal::person("bob"))
                .await,
            Err(AnswerError::Settled {
                status: "approved",
                ..
            })
        ));
        assert!(matches!(
            approvals
                .answer("nope", Reply::Approve, &Principal::person("bob"))
                .await,
            Err(AnswerError::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn no_answer_in_time_is_an_expired_deny_that_cannot_be_answered_later() {
        let (approvals, _dir) = approvals().await;
        let rx = approvals.open(&request("y")).await.unwrap();
        assert_eq!(
            approvals.wait("y", rx, Duration::from_millis(20)).await,
            Outcome::Expired
        );
        assert!(matches!(
            approvals
                .answer("y", Reply::Approve, &Principal::person("late"))
                .await,
            Err(AnswerError::Settled {
                status: "expired",
                ..
            })
        ));
    }

    #[tokio::test]
    async fn an_answer_recorded_as_time_runs_out_wins_even_if_it_never_reached_the_waiter() {
        let (approvals, _dir) = approvals().await;
        let rx = approvals.open(&request("z")).await.unwrap();
        // The answer is in the store, but (as when the waiter was removed a moment
        // earlier by the timeout) it is never sent to the waiter.
        assert!(
            approvals
                .store
                .settle_approval(
                    "z",
                    ApprovalStatus::Approved,
                    Some(&Principal::person("carol"))
                )
                .await
                .unwrap()
        );
        assert_eq!(
            approvals.wait("z", rx, Duration::from_millis(20)).await,
            Outcome::Answered(Answer {
                reply: Reply::Approve,
                by: Principal::person("carol")
            })
        );
    }

    fn question(id: &str) -> NewApproval {
        NewApproval {
            kind: QuestionKind::Question,
            tool: "ask_question".into(),
            actions: Vec::new(),
            detail: Some("Which branch should I base this on?".into()),
            ..request(id)
        }
    }

    #[tokio::test]
    async fn a_question_answered_in_words_gives_the_waiter_the_words_and_the_record_keeps_them() {
        let (questions, _dir) = approvals().await;
        let rx = questions.open(&question("q")).await.unwrap();
        let words = Reply::Text("main, please".into());
        let record = questions
            .answer("q", words.clone(), &Principal::person("discord:7"))
            .await
            .unwrap();
        assert_eq!(record.status, ApprovalStatus::Answered);
        assert_eq!(record.answer.as_deref(), Some("main, please"));
        assert_eq!(record.decided_by, Some(Principal::person("discord:7")));
        let outcome = questions.wait("q", rx, Duration::from_secs(1)).await;
        let Outcome::Answered(answer) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(answer.reply, words);
        assert!(!answer.approved(), "words are not an approval");
        // The record shows its kind and answer; an approval's shows neither.
        let shown = serde_json::to_value(crate::views::ApprovalView::from(record.clone())).unwrap();
        assert_eq!(shown["kind"], "question");
        assert_eq!(shown["answer"], "main, please");
        assert_eq!(shown["decided_by"], "discord:7");
    }

    #[tokio::test]
    async fn an_approval_is_not_answered_in_words_and_stays_pending() {
        let (questions, _dir) = approvals().await;
        let rx = questions.open(&request("p")).await.unwrap();
        assert!(matches!(
            questions
                .answer("p", Reply::Text("sure".into()), &Principal::person("bob"))
                .await,
            Err(AnswerError::NotAYesOrNo(_))
        ));
        let record = questions.store.approval("p").await.unwrap().unwrap();
        assert_eq!(record.status, ApprovalStatus::Pending);
        let shown = serde_json::to_value(crate::views::ApprovalView::from(record.clone())).unwrap();
        assert!(
            shown.get("kind").is_none() && shown.get("answer").is_none(),
            "{shown}"
        );
        assert_eq!(shown["requested_by"], "api");
        // A yes or no still answers it.
        questions
            .answer("p", Reply::Deny, &Principal::person("bob"))
            .await
            .unwrap();
        assert_eq!(
            questions.wait("p", rx, Duration::from_secs(1)).await,
            Outcome::Answered(Answer {
                reply: Reply::Deny,
                by: Principal::person("bob")
            })
        );
    }

    #[tokio::test]
    async fn words_recorded_as_time_runs_out_win_like_a_yes_or_no() {
        let (questions, _dir) = approvals().await;
        let rx = questions.open(&question("w")).await.unwrap();
        assert!(
            questions
                .store
                .answer_question(
                    "w",
                    ApprovalStatus::Answered,
                    Some("later"),
                    Some(&Principal::person("carol"))
                )
                .await
                .unwrap()
        );
        assert_eq!(
            questions.wait("w", rx, Duration::from_millis(20)).await,
            Outcome::Answered(Answer {
                reply: Reply::Text("later".into()),
                by: Principal::person("carol")
            })
        );
    }
}
