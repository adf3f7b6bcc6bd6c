//! What the store keeps about dial-in workers: per-worker join credentials (only a
//! token's SHA-256), which credential each volume belongs to, and which volumes
//! each creation of an agent was placed on (see `workers::credentials`).

use chorus_proto::domain::AgentDirectory;
use sqlx::Row;

use super::{Store, StoreError, now};

/// A per-worker join credential as listed (never its token).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WorkerCredentialRecord {
    pub name: String,
    pub created_at: String,
    pub created_by: Option<String>,
    /// Set once revoked: its token joins nothing from then on.
    pub revoked_at: Option<String>,
    /// The volumes it presented first (its workers' `--data-dir`s).
    pub volumes: Vec<String>,
}

/// What a presented token's hash stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialLookup {
    pub name: String,
    pub revoked: bool,
}

/// The placement of agents from before placements were recorded: the first volume
/// that names the directory takes it.
pub const ANY_VOLUME: &str = "*";

/// What the store says of the directories one volume names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placed {
    /// Placed on this volume.
    pub here: Vec<AgentDirectory>,
    /// From before placements were recorded, on no volume yet.
    pub unclaimed: Vec<AgentDirectory>,
}

impl Store {
    /// Creates credential `name` with the token whose SHA-256 is `token_sha256`. A
    /// revoked name is given the new token (a rotation: it keeps its volumes); a
    /// name in use is a conflict.
    pub async fn create_worker_credential(
        &self,
        name: &str,
        token_sha256: &str,
        created_by: &str,
    ) -> Result<(), StoreError> {
        let (name, hash, by) = (
            name.to_owned(),
            token_sha256.to_owned(),
            created_by.to_owned(),
        );
        self.write(move |tx| {
            Box::pin(async move {
                let revoked: Option<Option<String>> =
                    sqlx::query_scalar("SELECT revoked_at FROM worker_credentials WHERE name = $1")
                        .bind(&name)
                        .fetch_optional(&mut *tx)
                        .await?;
                match revoked {
                    Some(None) => Err(StoreError::Conflict(format!(
                        "a worker credential named '{name}' exists; revoke it first to give it a new token \
                         (chorus worker token revoke {name})"
                    ))),
                    Some(Some(_)) => {
                        sqlx::query(
                            "UPDATE worker_credentials SET token_sha256 = $2, created_at = $3, \
                             created_by = $4, revoked_at = NULL WHERE name = $1",
                        )
                        .bind(&name)
                        .bind(&hash)
                        .bind(now())
                        .bind(&by)
                        .execute(&mut *tx)
                        .await?;
                        Ok(())
                    }
                    None => {
                        sqlx::query(
                            "INSERT INTO worker_credentials (name, token_sha256, created_at, created_by) \
                             VALUES ($1, $2, $3, $4)",
                        )
                        .bind(&name)
                        .bind(&hash)
                        .bind(now())
                        .bind(&by)
                        .execute(&mut *tx)
                        .await?;
                        Ok(())
                    }
                }
            })
        })
        .await
    }

    /// Every per-worker credential, by name, with its volumes.
    pub async fn worker_credentials(&self) -> Result<Vec<WorkerCredentialRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT name, created_at, created_by, revoked_at FROM worker_credentials ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await?;
        let volumes: Vec<(String, String)> = sqlx::query_as(
            "SELECT credential, volume FROM worker_volumes ORDER BY bound_at, volume",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let name: String = row.try_get("name")?;
                Ok(WorkerCredentialRecord {
                    volumes: volumes
                        .iter()
                        .filter(|(credential, _)| *credential == name)
                        .map(|(_, volume)| volume.clone())
                        .collect(),
                    name,
                    created_at: row.try_get("created_at")?,
                    created_by: row.try_get("created_by")?,
                    revoked_at: row.try_get("revoked_at")?,
                })
            })
            .collect()
    }

    /// Revokes credential `name` (again, if it was: the time stays the first one).
    /// `NotFound` for a name never created.
    pub async fn revoke_worker_credential(&self, name: &str) -> Result<(), StoreError> {
        let name = name.to_owned();
        self.write(move |tx| {
            Box::pin(async move {
                let updated = sqlx::query(
                    "UPDATE worker_credentials SET revoked_at = COALESCE(revoked_at, $2) WHERE name = $1",
                )
                .bind(&name)
                .bind(now())
                .execute(&mut *tx)
                .await?;
                if updated.rows_affected() == 0 {
                    return Err(StoreError::NotFound(format!(
                        "no worker credential named '{name}' (chorus worker token list shows them)"
                    )));
                }
                Ok(())
            })
        })
        .await
    }

    /// The credential whose token hashes to `token_sha256`, if any.
    pub async fn worker_credential_by_hash(
        &self,
        token_sha256: &str,
    ) -> Result<Option<CredentialLookup>, StoreError> {
        let row: Option<(String, Option<String>)> = sqlx::query_as(
            "SELECT name, revoked_at FROM worker_credentials WHERE token_sha256 = $1",
        )
        .bind(token_sha256)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|(name, revoked_at)| CredentialLookup {
            name,
            revoked: revoked_at.is_some(),
        }))
    }

    /// Binds `volume` to `credential` unless it belongs to one already; returns the
    /// credential it belongs to now.
    pub async fn bind_volume(&self, volume: &str, credential: &str) -> Result<String, StoreError> {
        let (volume, credential) = (volume.to_owned(), credential.to_owned());
        self.write(move |tx| {
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO worker_volumes (volume, credential, bound_at) VALUES ($1, $2, $3) \
                     ON CONFLICT (volume) DO NOTHING",
                )
                .bind(&volume)
                .bind(&credential)
                .bind(now())
                .execute(&mut *tx)
                .await?;
                Ok(
                    sqlx::query_scalar("SELECT credential FROM worker_volumes WHERE volume = $1")
                        .bind(&volume)
                        .fetch_one(&mut *tx)
                        .await?,
                )
            })
        })
        .await
    }

    /// The per-worker credential `volume` belongs to, if any.
    pub async fn volume_owner(&self, volume: &str) -> Result<Option<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT credential FROM worker_volumes WHERE volume = $1")
                .bind(volume)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// Records that `agent`'s creation `incarnation` was given to a worker of `volume`.
    pub async fn record_placement(
        &self,
        agent: &str,
        incarnation: &str,
        volume: &str,
    ) -> Result<(), StoreError> {
        self.execute(
            sqlx::query(
                "INSERT INTO agent_placements (agent_name, incarnation, volume, placed_at) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (agent_name, incarnation, volume) DO NOTHING",
            )
            .bind(agent.to_owned())
            .bind(incarnation.to_owned())
            .bind(volume.to_owned())
            .bind(now()),
        )
        .await?;
        Ok(())
    }

    /// Which of `named` (the directories a worker of `volume` names) were placed on
    /// `volume`, and which are from before placements were recorded and on no
    /// volume yet.
    pub async fn placed(
        &self,
        volume: &str,
        named: &[AgentDirectory],
    ) -> Result<Placed, StoreError> {
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT agent_name, incarnation, volume FROM agent_placements \
             WHERE volume = $1 OR volume = $2",
        )
        .bind(volume)
        .bind(ANY_VOLUME)
        .fetch_all(&self.pool)
        .await?;
        let on = |wanted: &str| -> std::collections::HashSet<(&str, &str)> {
            rows.iter()
                .filter(|(_, _, v)| v == wanted)
                .map(|(a, i, _)| (a.as_str(), i.as_str()))
                .collect()
        };
        let (here, anywhere) = (on(volume), on(ANY_VOLUME));
        let mut placed = Placed::default();
        for dir in named {
            let key = (dir.agent.as_str(), dir.incarnation.as_str());
            if here.contains(&key) {
                placed.here.push(dir.clone());
            } else if anywhere.contains(&key) {
                placed.unclaimed.push(dir.clone());
            }
        }
        Ok(placed)
    }

    /// `volume` takes the directories of agents from before placements were
    /// recorded that it names first; returns those it got (another volume may
    /// have taken one meanwhile).
    pub async fn claim_unplaced(
        &self,
        volume: &str,
        dirs: Vec<AgentDirectory>,
    ) -> Result<Vec<AgentDirectory>, StoreError> {
        let volume = volume.to_owned();
        self.write(move |tx| {
            Box::pin(async move {
                let mut got = Vec::new();
                for dir in dirs {
                    let taken = sqlx::query(
                        "DELETE FROM agent_placements WHERE agent_name = $1 AND incarnation = $2 \
                         AND volume = $3",
                    )
                    .bind(&dir.agent)
                    .bind(&dir.incarnation)
                    .bind(ANY_VOLUME)
                    .execute(&mut *tx)
                    .await?;
                    if taken.rows_affected() == 0 {
                        continue;
                    }
                    sqlx::query(
                        "INSERT INTO agent_placements (agent_name, incarnation, volume, placed_at) \
                         VALUES ($1, $2, $3, $4) ON CONFLICT (agent_name, incarnation, volume) DO NOTHING",
                    )
                    .bind(&dir.agent)
                    .bind(&dir.incarnation)
                    .bind(&volume)
                    .bind(now())
                    .execute(&mut *tx)
                    .await?;
                    got.push(dir);
                }
                Ok(got)
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    fn dir(agent: &str, incarnation: &str) -> AgentDirectory {
        AgentDirectory {
            agent: agent.into(),
            incarnation: incarnation.into(),
        }
    }

    #[tokio::test]
    async fn credentials_are_kept_hashed_revoked_and_rotated() {
        let (store, _dir) = test_store().await;
        store
            .create_worker_credential("w1", "hash-1", "api")
            .await
            .unwrap();
        let again = store.create_worker_credential("w1", "hash-x", "api").await;
        assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
        let found = store.worker_credential_by_hash("hash-1").await.unwrap();
        assert_eq!(
            found,
            Some(CredentialLookup {
                name: "w1".into(),
                revoked: false
            })
        );
        assert_eq!(store.worker_credential_by_hash("nope").await.unwrap(), None);
        store.revoke_worker_credential("w1").await.unwrap();
        assert!(
            store
                .worker_credential_by_hash("hash-1")
                .await
                .unwrap()
                .unwrap()
                .revoked
        );
        assert!(matches!(
            store.revoke_worker_credential("ghost").await,
            Err(StoreError::NotFound(_))
        ));
        // The volume it bound stays its own across a rotation.
        assert_eq!(store.bind_volume("v1", "w1").await.unwrap(), "w1");
        assert_eq!(store.bind_volume("v1", "w2").await.unwrap(), "w1");
        store
            .create_worker_credential("w1", "hash-2", "api")
            .await
            .unwrap();
        assert_eq!(
            store.worker_credential_by_hash("hash-1").await.unwrap(),
            None
        );
        let listed = store.worker_credentials().await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].name, "w1");
        assert_eq!(listed[0].revoked_at, None);
        assert_eq!(listed[0].volumes, ["v1"]);
        assert_eq!(
            store.volume_owner("v1").await.unwrap().as_deref(),
            Some("w1")
        );
        assert_eq!(store.volume_owner("v2").await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_directory_counts_only_on_the_volume_it_was_placed_on() {
        let (store, _dir) = test_store().await;
        store.record_placement("a", "i1", "v1").await.unwrap();
        store.record_placement("a", "i1", "v1").await.unwrap(); // twice is once
        store.record_placement("b", "i1", ANY_VOLUME).await.unwrap();
        let named = [
            dir("a", "i1"),
            dir("a", "old"),
            dir("b", "i1"),
            dir("c", "x"),
        ];
        let on_v1 = store.placed("v1", &named).await.unwrap();
        assert_eq!(on_v1.here, [dir("a", "i1")]);
        assert_eq!(on_v1.unclaimed, [dir("b", "i1")]);
        let on_v2 = store.placed("v2", &named).await.unwrap();
        assert!(on_v2.here.is_empty(), "a was placed on v1 only");
        // The first volume to name an agent from before placements takes it.
        assert_eq!(
            store.claim_unplaced("v2", on_v2.unclaimed).await.unwrap(),
            [dir("b", "i1")]
        );
        assert!(
            store
                .claim_unplaced("v1", on_v1.unclaimed)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            store.placed("v2", &named).await.unwrap().here,
            [dir("b", "i1")]
        );
        assert_eq!(
            store.placed("v1", &named).await.unwrap().here,
            [dir("a", "i1")]
        );
    }
}
