//! Waiting for a person's answer to a tool call (SPEC D2): the request is a row in
//! the store (so any frontend can list and answer it) and a waiter in memory (so the
//! answer reaches the run at once). Fails closed: no answer in time, a restart, or an
//! unknown answer all mean deny.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::principal::Principal;
use crate::store::{ApprovalRecord, ApprovalStatus, NewApproval, Store, StoreError};

/// A person's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub approved: bool,
    pub by: Principal,
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
    #[error("approval request '{id}' is {status} already")]
    Settled { id: String, status: &'static str },
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub struct Approvals {
    store: Store,
    waiting: Mutex<HashMap<String, oneshot::Sender<Answer>>>,
}

impl Approvals {
    pub fn new(store: Store) -> Self {
        Approvals {
            store,
            waiting: Mutex::new(HashMap::new()),
        }
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<Answer>>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a request; the caller then awaits [`Approvals::wait`].
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
                Ok(Some(record)) => match record.status {
                    ApprovalStatus::Approved | ApprovalStatus::Denied => {
                        Outcome::Answered(Answer {
                            approved: record.status == ApprovalStatus::Approved,
                            // Settled by an answer, so it names who answered.
                            by: record.decided_by.unwrap_or_else(|| Principal::person("")),
                        })
                    }
                    _ => Outcome::Expired,
                },
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

    /// A person answers. Only a pending request can be answered, once.
    pub async fn answer(
        &self,
        id: &str,
        approved: bool,
        by: &Principal,
    ) -> Result<ApprovalRecord, AnswerError> {
        let status = if approved {
            ApprovalStatus::Approved
        } else {
            ApprovalStatus::Denied
        };
        if !self.store.settle_approval(id, status, Some(by)).await? {
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
                approved,
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
            requested_by: Some(Principal::person("api")),
            expires_at: crate::store::now(),
        }
    }

    async fn approvals() -> (Approvals, tempfile::TempDir) {
        let (store, dir) = test_store_with_agent().await;
        (Approvals::new(store), dir)
    }

    #[tokio::test]
    async fn an_answer_reaches_the_waiter_once() {
        let (approvals, _dir) = approvals().await;
        let rx = approvals.open(&request("x")).await.unwrap();
        let record = approvals
            .answer("x", true, &Principal::person("alice"))
            .await
            .unwrap();
        assert_eq!(record.status, ApprovalStatus::Approved);
        assert_eq!(
            approvals.wait("x", rx, Duration::from_secs(1)).await,
            Outcome::Answered(Answer {
                approved: true,
                by: Principal::person("alice")
            })
        );
        assert!(matches!(
            approvals
                .answer("x", false, &Principal::person("bob"))
                .await,
            Err(AnswerError::Settled {
                status: "approved",
                ..
            })
        ));
        assert!(matches!(
            approvals
                .answer("nope", true, &Principal::person("bob"))
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
                .answer("y", true, &Principal::person("late"))
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
                approved: true,
                by: Principal::person("carol")
            })
        );
    }
}
