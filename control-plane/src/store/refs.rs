//! Frontends' own message ids mapped to threads (`message_refs`): a Discord message
//! the bot posted (or received) names the thread it belongs to and, when it is one
//! of Chorus's messages, that message. A reply to it routes by the map, after a
//! restart too, the same way a reply to a Chorus message id does over HTTP.
//!
//! A frontend records every message it posts, and passes a reply's reference as
//! `ReplyTo::External`. `answers_owed` (here too) is a frontend's promise to answer: a row
//! per thread a Discord message started or went into (channel, the message to reply to),
//! written (with the message's reference) by a hook the run actor awaits after storing
//! the message and before it hands a run to the worker (`Runs::receive_then`), so no model
//! is asked for an answer nobody knows is owed, and deleted once the answer is posted (or
//! refused for good); at start the Discord front end follows every row again.

use super::{Store, StoreError, now};

/// Where a frontend's message belongs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageRef {
    pub agent_name: String,
    pub thread_id: u64,
    /// The Chorus message it shows, if it shows one (a status message shows none).
    pub message_id: Option<u64>,
}

impl Store {
    /// Records that `frontend`'s message `external_id` belongs to `thread` of
    /// `agent` (and shows `message_id`). Recording the same id again moves it (an
    /// edited status message that now shows the answer).
    pub async fn record_message_ref(
        &self,
        frontend: &str,
        external_id: &str,
        agent: &str,
        thread: u64,
        message_id: Option<u64>,
    ) -> Result<(), StoreError> {
        let frontend = frontend.to_owned();
        let external_id = external_id.to_owned();
        let agent = agent.to_owned();
        self.write(move |tx| {
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO message_refs (frontend, external_id, agent_name, thread_id, message_id, \
                     created_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (frontend, external_id) \
                     DO UPDATE SET agent_name = $3, thread_id = $4, message_id = $5",
                )
                .bind(&frontend)
                .bind(&external_id)
                .bind(&agent)
                .bind(thread as i64)
                .bind(message_id.map(|id| id as i64))
                .bind(now())
                .execute(&mut *tx)
                .await?;
                Ok(())
            })
        })
        .await
    }

    /// Where `frontend`'s message `external_id` belongs, if it was recorded.
    pub async fn message_ref(
        &self,
        frontend: &str,
        external_id: &str,
    ) -> Result<Option<MessageRef>, StoreError> {
        let row: Option<(String, i64, Option<i64>)> = sqlx::query_as(
            "SELECT agent_name, thread_id, message_id FROM message_refs \
             WHERE frontend = $1 AND external_id = $2",
        )
        .bind(frontend)
        .bind(external_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|(agent_name, thread, message)| MessageRef {
            agent_name,
            thread_id: thread.max(0) as u64,
            message_id: message.map(|m| m.max(0) as u64),
        }))
    }

    /// Records that `frontend` owes `thread`'s answer to its message `reply_to` in
    /// `channel` (kept as it was when already owed: the first message is answered).
    pub async fn owe_answer(&self, owed: &OwedAnswer) -> Result<(), StoreError> {
        let owed = owed.clone();
        self.write(move |tx| {
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO answers_owed (frontend, agent_name, thread_id, channel, reply_to, \
                     created_at) VALUES ($1, $2, $3, $4, $5, $6) \
                     ON CONFLICT (frontend, agent_name, thread_id) DO NOTHING",
                )
                .bind(&owed.frontend)
                .bind(&owed.agent_name)
                .bind(owed.thread_id as i64)
                .bind(&owed.channel)
                .bind(&owed.reply_to)
                .bind(now())
                .execute(&mut *tx)
                .await?;
                Ok(())
            })
        })
        .await
    }

    /// The answer is posted (or can never be): nothing is owed any more.
    pub async fn answer_paid(
        &self,
        frontend: &str,
        agent: &str,
        thread: u64,
    ) -> Result<(), StoreError> {
        let frontend = frontend.to_owned();
        let agent = agent.to_owned();
        self.write(move |tx| {
            Box::pin(async move {
                sqlx::query(
                    "DELETE FROM answers_owed WHERE frontend = $1 AND agent_name = $2 AND thread_id = $3",
                )
                .bind(&frontend)
                .bind(&agent)
                .bind(thread as i64)
                .execute(&mut *tx)
                .await?;
                Ok(())
            })
        })
        .await
    }

    /// Every answer `frontend` still owes, oldest first.
    pub async fn answers_owed(&self, frontend: &str) -> Result<Vec<OwedAnswer>, StoreError> {
        let rows: Vec<(String, i64, String, String)> = sqlx::query_as(
            "SELECT agent_name, thread_id, channel, reply_to FROM answers_owed \
             WHERE frontend = $1 ORDER BY created_at, thread_id",
        )
        .bind(frontend)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(agent_name, thread, channel, reply_to)| OwedAnswer {
                frontend: frontend.to_string(),
                agent_name,
                thread_id: thread.max(0) as u64,
                channel,
                reply_to,
            })
            .collect())
    }
}

/// A thread's answer a front end owes to one of its messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwedAnswer {
    pub frontend: String,
    pub agent_name: String,
    pub thread_id: u64,
    /// Where to post it, and the message it replies to (the front end's ids).
    pub channel: String,
    pub reply_to: String,
}

#[cfg(test)]
mod tests {
    use chorus_proto::domain::ChatMessage;

    use super::*;
    use crate::store::test_store_with_agent;

    #[tokio::test]
    async fn a_frontend_message_maps_to_its_thread_and_moves_when_recorded_again() {
        let (store, _dir) = test_store_with_agent().await;
        let (thread, message) = store
            .start_thread("a", &ChatMessage::user("hi"), "api", None)
            .await
            .unwrap();
        assert_eq!(store.message_ref("discord", "111").await.unwrap(), None);
        store
            .record_message_ref("discord", "111", "a", thread, None)
            .await
            .unwrap();
        let status = MessageRef {
            agent_name: "a".into(),
            thread_id: thread,
            message_id: None,
        };
        assert_eq!(
            store.message_ref("discord", "111").await.unwrap(),
            Some(status)
        );
        // The same message now shows the answer; another frontend's id 111 is another.
        store
            .record_message_ref("discord", "111", "a", thread, Some(message))
            .await
            .unwrap();
        assert_eq!(
            store
                .message_ref("discord", "111")
                .await
                .unwrap()
                .and_then(|r| r.message_id),
            Some(message)
        );
        assert_eq!(store.message_ref("web", "111").await.unwrap(), None);
    }

    #[tokio::test]
    async fn an_owed_answer_is_kept_until_paid_and_the_first_message_is_answered() {
        let (store, _dir) = test_store_with_agent().await;
        let owed = |thread: u64, reply_to: &str| OwedAnswer {
            frontend: "discord".into(),
            agent_name: "a".into(),
            thread_id: thread,
            channel: "9".into(),
            reply_to: reply_to.into(),
        };
        store.owe_answer(&owed(1, "100")).await.unwrap();
        store.owe_answer(&owed(1, "101")).await.unwrap();
        store.owe_answer(&owed(2, "102")).await.unwrap();
        assert_eq!(
            store.answers_owed("discord").await.unwrap(),
            [owed(1, "100"), owed(2, "102")]
        );
        assert!(store.answers_owed("web").await.unwrap().is_empty());
        store.answer_paid("discord", "a", 1).await.unwrap();
        assert_eq!(
            store.answers_owed("discord").await.unwrap(),
            [owed(2, "102")]
        );
    }
}
