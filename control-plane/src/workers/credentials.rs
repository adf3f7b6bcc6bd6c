//! Who may dial in, and what a dial-in worker may claim.
//!
//! A dial-in worker joins with a *join credential*: the shared `CHORUS_JOIN_TOKEN`
//! (every holder is one principal, `join-token`) or a per-worker credential an admin
//! made (`chorus worker token create <name>`; only its SHA-256 is stored). The
//! credential's name is the worker's principal: the audit log labels what its
//! reports cause with it, revoking it ends every link that joined with it at once,
//! and it owns the volumes it presented first.
//!
//! Volumes: each worker names its volume's id and the agents' directories on it. A
//! volume belongs to the first per-worker credential that presents it; any other
//! credential (the shared one included) presenting it is refused. A named directory
//! counts (for placement, and for the clean-up of leftovers) only where the store
//! recorded that the agent's incarnation was placed on that volume; the others are
//! ignored, never deleted. Agents from before placements were recorded count on the
//! first volume that names them.
//!
//! Invariant: a link is registered under its credential before the store is asked
//! a second time whether the credential still holds, and a revocation is written
//! before the links are ended, so no link outlives the revocation of its credential.
//!
//! The principal is recorded in the pool's link and the registry's slot, so the gate's
//! and the run actor's audit rows carry it (`audit_log.worker`; `thread:answer` when a
//! dial-in worker ends a run). Revoking a credential cancels a token every link that
//! joined with it holds: an idle link leaves the pool, a serving link is detached (its
//! agent re-placed as after a worker's death), an errand is dropped, and the stream ends
//! with `Unauthenticated` naming the revocation. Placements are recorded before the
//! `Welcome`; rows from before migration 0016 are volume `*`, taken by the first volume
//! naming them.

use std::collections::HashMap;
use std::sync::Mutex;

use chorus_proto::domain::AgentDirectory;
use tokio_util::sync::CancellationToken;

use crate::secrets::Secret;
use crate::secrets::{constant_time_eq, random_token, token_hash};
use crate::store::{Store, StoreError, WorkerCredentialRecord};

/// The principal every holder of the shared join token is.
pub const SHARED_PRINCIPAL: &str = "join-token";

/// Whom a dial-in link joined as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// The shared `CHORUS_JOIN_TOKEN`.
    Shared,
    /// A per-worker credential, by name.
    Worker(String),
}

impl Principal {
    /// Its name in the audit log and the API: the credential's, or `join-token`.
    pub fn label(&self) -> &str {
        match self {
            Principal::Shared => SHARED_PRINCIPAL,
            Principal::Worker(name) => name,
        }
    }
}

/// Why a join is refused (the worker logs the message and stops: retrying with the
/// same credential cannot help).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the join token is not valid")]
    Unknown,
    #[error(
        "the join token is not valid: worker credential '{0}' was revoked (an admin can issue a new one: chorus worker token create {0})"
    )]
    Revoked(String),
    #[error(
        "this worker's volume {volume} belongs to worker credential '{owner}', and this worker joined as '{presented}': \
         a volume is served by one credential; give this worker '{owner}''s token, or a --data-dir of its own"
    )]
    VolumeTaken {
        volume: String,
        owner: String,
        presented: String,
    },
    /// The store could not be asked; the worker may try again.
    #[error("the control plane cannot check the join token now: {0}")]
    Unavailable(String),
}

/// What an admin asks for that cannot be done.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("{0}")]
    InvalidName(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no randomness for a token: {0}")]
    Random(std::io::Error),
}

/// The join credentials and the live links that joined with each.
pub struct JoinCredentials {
    store: Store,
    shared: Option<Secret>,
    /// Per-worker credential name → ended when it is revoked (each link holds a
    /// child of it).
    live: Mutex<HashMap<String, CancellationToken>>,
}

/// A link that was let in: whom it joined as, and what ends it.
pub struct Admitted {
    pub principal: Principal,
    /// Cancelled when its credential is revoked (never, for the shared token).
    pub revoked: CancellationToken,
}

impl JoinCredentials {
    pub fn new(store: Store, shared: Option<Secret>) -> Self {
        JoinCredentials {
            store,
            shared,
            live: Mutex::default(),
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the shared join token is set (the start-up text says so).
    pub fn shared_token_set(&self) -> bool {
        self.shared.is_some()
    }

    /// Lets a link in with `token`, or says why not.
    pub async fn admit(&self, token: &str) -> Result<Admitted, Refused> {
        if let Some(shared) = &self.shared
            && constant_time_eq(shared.expose().as_bytes(), token.as_bytes())
        {
            return Ok(Admitted {
                principal: Principal::Shared,
                revoked: CancellationToken::new(),
            });
        }
        let hash = token_hash(token);
        let name = self.check(&hash).await?;
        // Registered, then asked again: a revocation written in between is seen
        // here, one written after finds this link (see the module's invariant).
        let revoked = self.live().entry(name.clone()).or_default().child_token();
        if let Err(refused) = self.check(&hash).await {
            revoked.cancel();
            return Err(refused);
        }
        Ok(Admitted {
            principal: Principal::Worker(name),
            revoked,
        })
    }

    /// The name of the live credential whose token hashes to `hash`.
    async fn check(&self, hash: &str) -> Result<String, Refused> {
        match self.store.worker_credential_by_hash(hash).await {
            Ok(Some(found)) if found.revoked => Err(Refused::Revoked(found.name)),
            Ok(Some(found)) => Ok(found.name),
            Ok(None) => Err(Refused::Unknown),
            Err(e) => Err(Refused::Unavailable(e.to_string())),
        }
    }

    /// Checks that `volume` may be served by `principal`, binding it to a
    /// per-worker credential that presents it first. An empty volume (a worker
    /// that could not make one) binds nothing.
    pub async fn check_volume(&self, principal: &Principal, volume: &str) -> Result<(), Refused> {
        if volume.is_empty() {
            return Ok(());
        }
        let owner = match principal {
            Principal::Shared => self.store.volume_owner(volume).await,
            Principal::Worker(name) => self.store.bind_volume(volume, name).await.map(Some),
        }
        .map_err(|e| Refused::Unavailable(e.to_string()))?;
        match owner {
            Some(owner) if owner != principal.label() => Err(Refused::VolumeTaken {
                volume: volume.to_string(),
                owner,
                presented: principal.label().to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// Of the directories a worker of `volume` named, those the store placed there
    /// (taking those of agents from before placements were recorded that no volume
    /// has named yet). The others are logged and ignored.
    pub async fn placed_directories(
        &self,
        volume: &str,
        named: Vec<AgentDirectory>,
        peer: &str,
    ) -> Vec<AgentDirectory> {
        if named.is_empty() {
            return named;
        }
        if volume.is_empty() {
            tracing::warn!(%peer, directories = named.len(), "a dial-in worker without a volume id named agents' directories; ignored (they count only on the volume they were placed on)");
            return Vec::new();
        }
        let placed = match self.store.placed(volume, &named).await {
            Ok(placed) => placed,
            Err(e) => {
                tracing::warn!(%peer, error = %e, "cannot read where agents were placed; the directories this worker named are ignored for now");
                return Vec::new();
            }
        };
        let mut accepted = placed.here;
        if !placed.unclaimed.is_empty() {
            match self.store.claim_unplaced(volume, placed.unclaimed).await {
                Ok(claimed) => accepted.extend(claimed),
                Err(e) => {
                    tracing::warn!(%peer, error = %e, "cannot record where agents from before placements were recorded are")
                }
            }
        }
        for dir in named.iter().filter(|dir| !accepted.contains(dir)) {
            tracing::warn!(%peer, %volume, agent = %dir.agent, incarnation = %dir.incarnation, "a dial-in worker named an agent's directory that was never placed on its volume; ignored (not used, not deleted)");
        }
        accepted
    }

    /// Records that a worker of `volume` was given `agent`'s `incarnation`.
    pub async fn placed(&self, agent: &str, incarnation: &str, volume: &str) {
        if volume.is_empty() {
            return;
        }
        if let Err(e) = self
            .store
            .record_placement(agent, incarnation, volume)
            .await
        {
            tracing::error!(%agent, %volume, error = %e, "cannot record where an agent was placed; its directory there will be ignored when the worker joins again");
        }
    }

    /// Makes credential `name`; returns its token (shown once, never stored).
    pub async fn create(&self, name: &str, by: &str) -> Result<String, CredentialError> {
        validate_name(name).map_err(CredentialError::InvalidName)?;
        let token = random_token().map_err(CredentialError::Random)?;
        self.store
            .create_worker_credential(name, &token_hash(&token), by)
            .await?;
        Ok(token)
    }

    pub async fn list(&self) -> Result<Vec<WorkerCredentialRecord>, StoreError> {
        self.store.worker_credentials().await
    }

    /// Revokes credential `name`: its token joins nothing from now on, and every
    /// link that joined with it ends now.
    pub async fn revoke(&self, name: &str) -> Result<(), StoreError> {
        self.store.revoke_worker_credential(name).await?;
        if let Some(links) = self.live().remove(name) {
            links.cancel();
        }
        Ok(())
    }
}

/// A credential's name: 1–64 of `A-Z a-z 0-9 - _ .`, starting with a letter or
/// digit, and not the shared token's.
fn validate_name(name: &str) -> Result<(), String> {
    let fine = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !fine {
        return Err(format!(
            "'{name}' is not a worker credential name: use 1-64 letters, digits, '-', '_' or '.', starting with a letter or digit"
        ));
    }
    if name == SHARED_PRINCIPAL {
        return Err(format!(
            "'{SHARED_PRINCIPAL}' names the shared CHORUS_JOIN_TOKEN in the audit log; choose another name"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    #[test]
    fn names_are_plain_and_not_the_shared_one() {
        assert!(validate_name("worker-0").is_ok());
        assert!(validate_name("pod.a_1").is_ok());
        for bad in ["", "-x", "a b", "a/b", &"x".repeat(65), "join-token"] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(token_hash("abc").len(), 64);
        assert_eq!(
            token_hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[tokio::test]
    async fn a_revoked_credential_ends_its_links_and_joins_nothing() {
        let (store, _dir) = test_store().await;
        let credentials = JoinCredentials::new(store, Some(Secret::new("shared-0123456789")));
        let token = credentials.create("w1", "api").await.unwrap();
        let other = credentials.create("w2", "api").await.unwrap();
        assert!(matches!(
            credentials.create("w1", "api").await,
            Err(CredentialError::Store(StoreError::Conflict(_)))
        ));
        let shared = credentials.admit("shared-0123456789").await.unwrap();
        assert_eq!(shared.principal, Principal::Shared);
        let first = credentials.admit(&token).await.unwrap();
        let second = credentials.admit(&token).await.unwrap();
        let bystander = credentials.admit(&other).await.unwrap();
        assert_eq!(first.principal, Principal::Worker("w1".into()));
        assert!(matches!(
            credentials.admit("wrong").await,
            Err(Refused::Unknown)
        ));
        credentials.revoke("w1").await.unwrap();
        assert!(first.revoked.is_cancelled() && second.revoked.is_cancelled());
        assert!(!bystander.revoked.is_cancelled() && !shared.revoked.is_cancelled());
        let refused = credentials.admit(&token).await.err().unwrap();
        assert_eq!(refused, Refused::Revoked("w1".into()));
        assert!(
            refused
                .to_string()
                .starts_with("the join token is not valid")
        );
        // Rotated: the old token stays refused, the new one joins.
        let rotated = credentials.create("w1", "api").await.unwrap();
        assert!(credentials.admit(&token).await.is_err());
        assert!(credentials.admit(&rotated).await.is_ok());
    }

    #[tokio::test]
    async fn a_volume_is_served_by_the_first_credential_that_presents_it() {
        let (store, _dir) = test_store().await;
        let credentials = JoinCredentials::new(store, None);
        let (a, b) = (Principal::Worker("a".into()), Principal::Worker("b".into()));
        assert!(credentials.check_volume(&a, "va").await.is_ok());
        assert!(credentials.check_volume(&a, "va").await.is_ok());
        assert!(
            credentials.check_volume(&a, "va2").await.is_ok(),
            "a second volume of a"
        );
        let taken = credentials.check_volume(&b, "va").await.unwrap_err();
        assert!(
            matches!(&taken, Refused::VolumeTaken { owner, .. } if owner == "a"),
            "{taken}"
        );
        assert!(
            credentials
                .check_volume(&Principal::Shared, "va")
                .await
                .is_err(),
            "the shared token may not take a per-worker volume"
        );
        assert!(
            credentials
                .check_volume(&Principal::Shared, "shared")
                .await
                .is_ok()
        );
        assert!(credentials.check_volume(&b, "").await.is_ok());
    }
}
