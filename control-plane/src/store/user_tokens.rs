//! API tokens issued per person or automation: rows keyed by the token's hash
//! (the token itself is never stored; see `crate::user_tokens`).

use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Store, StoreError, now};

/// One issued token, without its secret.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UserTokenRecord {
    pub id: String,
    pub user: String,
    pub label: String,
    pub created_at: String,
    /// The admin who issued it.
    pub created_by: String,
    /// Last accepted, to the minute; null: never used.
    pub last_used_at: Option<String>,
    /// Null while it is good.
    pub revoked_at: Option<String>,
}

/// A token to store: its id, user, label and the hash of its secret.
pub struct NewUserToken {
    pub id: String,
    pub user: String,
    pub label: String,
    pub token_hash: String,
    pub created_by: String,
}

const COLUMNS: &str = "SELECT id, user_name, label, created_at, created_by, last_used_at, revoked_at FROM user_tokens";

fn token_from_row(row: &AnyRow) -> Result<UserTokenRecord, StoreError> {
    Ok(UserTokenRecord {
        id: row.try_get("id")?,
        user: row.try_get("user_name")?,
        label: row.try_get("label")?,
        created_at: row.try_get("created_at")?,
        created_by: row.try_get("created_by")?,
        last_used_at: row.try_get("last_used_at")?,
        revoked_at: row.try_get("revoked_at")?,
    })
}

impl Store {
    pub async fn insert_user_token(
        &self,
        token: NewUserToken,
    ) -> Result<UserTokenRecord, StoreError> {
        let at = now();
        let record = UserTokenRecord {
            id: token.id.clone(),
            user: token.user.clone(),
            label: token.label.clone(),
            created_at: at.clone(),
            created_by: token.created_by.clone(),
            last_used_at: None,
            revoked_at: None,
        };
        self.write(move |tx| {
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO user_tokens (id, user_name, label, token_hash, created_at, created_by) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(&token.id)
                .bind(&token.user)
                .bind(&token.label)
                .bind(&token.token_hash)
                .bind(&at)
                .bind(&token.created_by)
                .execute(&mut *tx)
                .await?;
                Ok(())
            })
        })
        .await?;
        Ok(record)
    }

    /// The good (not revoked) token whose secret hashes to `token_hash`.
    pub async fn live_user_token(
        &self,
        token_hash: &str,
    ) -> Result<Option<UserTokenRecord>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{COLUMNS} WHERE token_hash = $1 AND revoked_at IS NULL"
        )))
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(token_from_row).transpose()
    }

    /// Every token (of `user`, when given), revoked ones too, oldest first.
    pub async fn user_tokens(
        &self,
        user: Option<&str>,
    ) -> Result<Vec<UserTokenRecord>, StoreError> {
        let rows = match user {
            Some(user) => {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "{COLUMNS} WHERE user_name = $1 ORDER BY created_at, id"
                )))
                .bind(user)
                .fetch_all(&self.pool)
                .await?
            }
            None => {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "{COLUMNS} ORDER BY user_name, created_at, id"
                )))
                .fetch_all(&self.pool)
                .await?
            }
        };
        rows.iter().map(token_from_row).collect()
    }

    /// Revokes `user`'s token `id` (from now on it is refused). `None`: no such
    /// token of that user; a token revoked before keeps its first revocation time.
    pub async fn revoke_user_token(
        &self,
        user: &str,
        id: &str,
    ) -> Result<Option<UserTokenRecord>, StoreError> {
        let (user, id, at) = (user.to_string(), id.to_string(), now());
        let changed = {
            let (user, id) = (user.clone(), id.clone());
            self.write(move |tx| {
                Box::pin(async move {
                    let done = sqlx::query(
                        "UPDATE user_tokens SET revoked_at = COALESCE(revoked_at, $3) \
                         WHERE user_name = $1 AND id = $2",
                    )
                    .bind(&user)
                    .bind(&id)
                    .bind(&at)
                    .execute(&mut *tx)
                    .await?;
                    Ok(done.rows_affected())
                })
            })
            .await?
        };
        if changed == 0 {
            return Ok(None);
        }
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{COLUMNS} WHERE user_name = $1 AND id = $2"
        )))
        .bind(&user)
        .bind(&id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(token_from_row).transpose()
    }

    /// Records that token `id` was accepted at `at`.
    pub async fn touch_user_token(&self, id: &str, at: &str) -> Result<(), StoreError> {
        let query = sqlx::query("UPDATE user_tokens SET last_used_at = $2 WHERE id = $1")
            .bind(id.to_string())
            .bind(at.to_string());
        self.execute(query).await?;
        Ok(())
    }
}
