//! Every c.node of a cluster accepts every c.node's API tokens. Each c.node keeps its own
//! tokens in its data dir (`api-token`, `api-token-read-only`), so `weft --data-dir` works on
//! any compute machine; at start it publishes their BLAKE3 digests under
//! `weft/api-tokens/<id>` (no lease: a token stays valid while its c.node is down), and reads
//! every c.node's digests every [`REFRESH_INTERVAL`]. A request's token is hashed and looked
//! up, and a token that matches none makes a reading at once (at most every
//! [`REFRESH_ON_MISS_MIN`]), so a c.node that just joined is accepted on its first request.
//! The tokens themselves never leave the machine that made them.
//!
//! What this allows: a standby passes a management request on to the owner with the caller's
//! `Authorization` header as it came (`crate::api_proxy`), and the owner accepts it whichever
//! c.node's token it is. Whoever can write to etcd can add a digest; that access already
//! decides who owns the cluster and which epochs the d.nodes accept.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use weft_meta::MetaStore;

/// What a token may do, on whichever c.node it is presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRole {
    /// An `api-token`: everything.
    Admin,
    /// An `api-token-read-only`: GET only.
    ReadOnly,
}

pub const TOKENS_PREFIX: &str = "weft/api-tokens/";
/// How often the digests are read again in the background.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(2);
/// A token no c.node's digest matches makes a reading at once (a c.node that just joined is
/// accepted on its first request), but not more often than this, whoever sends bad tokens.
pub const REFRESH_ON_MISS_MIN: Duration = Duration::from_millis(250);

/// One c.node's published digests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenDigests {
    /// BLAKE3 of the admin token, hex.
    pub admin: String,
    /// BLAKE3 of the read-only token, hex.
    pub read_only: String,
}

impl TokenDigests {
    pub fn of(admin: &str, read_only: &str) -> TokenDigests {
        TokenDigests {
            admin: digest(admin),
            read_only: digest(read_only),
        }
    }
}

fn digest(token: &str) -> String {
    blake3::hash(token.as_bytes()).to_hex().to_string()
}

/// The digests of every c.node's tokens, as last read.
#[derive(Debug)]
pub struct ClusterTokens {
    kv: Arc<dyn MetaStore>,
    known: RwLock<Vec<TokenDigests>>,
    /// When a token that matched none last made a reading (`None`: never). Apart from the
    /// background readings: one of those just before a c.node published its digests must not
    /// keep that c.node's first request from making a reading of its own.
    missed_at: parking_lot::Mutex<Option<Instant>>,
}

impl ClusterTokens {
    /// Publishes this c.node's digests, reads everyone's, and keeps reading them on a thread
    /// for as long as the returned value lives.
    pub fn start(
        kv: Arc<dyn MetaStore>,
        cnode: &str,
        mine: TokenDigests,
    ) -> anyhow::Result<Arc<ClusterTokens>> {
        let key = format!("{TOKENS_PREFIX}{cnode}");
        kv.put(&key, &serde_json::to_vec(&mine)?, None)?;
        let tokens = Arc::new(ClusterTokens {
            kv,
            known: RwLock::new(vec![mine]),
            missed_at: parking_lot::Mutex::new(None),
        });
        tokens.refresh();
        let weak: Weak<ClusterTokens> = Arc::downgrade(&tokens);
        std::thread::Builder::new()
            .name("api-tokens".into())
            .spawn(move || loop {
                std::thread::sleep(REFRESH_INTERVAL);
                match weak.upgrade() {
                    Some(tokens) => tokens.refresh(),
                    None => return,
                }
            })?;
        Ok(tokens)
    }

    /// [`ClusterTokens::start`] for the c.node of `data_dir`, with the tokens kept there.
    pub async fn join(
        kv: Arc<dyn MetaStore>,
        data_dir: &std::path::Path,
    ) -> anyhow::Result<Arc<ClusterTokens>> {
        let dir = data_dir.to_path_buf();
        tokio::task::spawn_blocking(move || {
            use crate::data_files::{load_or_create_token_file, READ_ONLY_TOKEN_FILE, TOKEN_FILE};
            let id =
                crate::data_files::load_or_create_id(&dir, crate::ha::takeover::CNODE_ID_FILE)?;
            let mine = TokenDigests::of(
                &load_or_create_token_file(&dir, TOKEN_FILE)?,
                &load_or_create_token_file(&dir, READ_ONLY_TOKEN_FILE)?,
            );
            ClusterTokens::start(kv, &id, mine)
        })
        .await?
    }

    /// The role of `presented`, reading the digests again first if it matches none and the
    /// last reading is older than [`REFRESH_ON_MISS_MIN`]. Blocks on etcd: call it off the
    /// async threads.
    pub fn role_or_refresh(&self, presented: &str) -> Option<TokenRole> {
        if let Some(role) = self.role(presented) {
            return Some(role);
        }
        {
            let mut missed_at = self.missed_at.lock();
            if missed_at.is_some_and(|at| at.elapsed() < REFRESH_ON_MISS_MIN) {
                return None;
            }
            *missed_at = Some(Instant::now());
        }
        self.refresh();
        self.role(presented)
    }

    /// Reads every c.node's digests; on an etcd error the last reading stays.
    fn refresh(&self) {
        let Ok(rows) = self.kv.list(TOKENS_PREFIX) else {
            return;
        };
        let read: Vec<TokenDigests> = rows
            .iter()
            .filter_map(|(_, v)| serde_json::from_slice(&v.value).ok())
            .collect();
        if !read.is_empty() {
            *self.known.write() = read;
        }
    }

    /// The role `presented` has on any c.node of the cluster (`None`: no c.node's token).
    pub fn role(&self, presented: &str) -> Option<TokenRole> {
        let d = digest(presented);
        let known = self.known.read();
        if known.iter().any(|t| t.admin == d) {
            Some(TokenRole::Admin)
        } else if known.iter().any(|t| t.read_only == d) {
            Some(TokenRole::ReadOnly)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_published_token_is_accepted_with_its_role_and_nothing_else() {
        let kv: Arc<dyn MetaStore> = Arc::new(weft_meta::EmbeddedMetaStore::in_memory());
        let a = ClusterTokens::start(Arc::clone(&kv), "a", TokenDigests::of("a-admin", "a-ro"))
            .unwrap();
        let b = ClusterTokens::start(Arc::clone(&kv), "b", TokenDigests::of("b-admin", "b-ro"))
            .unwrap();
        a.refresh();
        for tokens in [&a, &b] {
            assert_eq!(tokens.role("a-admin"), Some(TokenRole::Admin));
            assert_eq!(tokens.role("b-admin"), Some(TokenRole::Admin));
            assert_eq!(tokens.role("a-ro"), Some(TokenRole::ReadOnly));
            assert_eq!(tokens.role("b-ro"), Some(TokenRole::ReadOnly));
            assert_eq!(tokens.role("a-admin "), None);
            assert_eq!(tokens.role(""), None);
        }
        // A c.node that joins is accepted on its first request, without waiting for the
        // background reading, even when one ran just before it published its digests (CI
        // found a standby's token refused so); a token nobody published is not, however
        // often it is tried.
        a.refresh();
        let _c = ClusterTokens::start(Arc::clone(&kv), "c", TokenDigests::of("c-admin", "c-ro"))
            .unwrap();
        assert_eq!(a.role_or_refresh("c-admin"), Some(TokenRole::Admin));
        assert_eq!(a.role_or_refresh("nobody"), None);
        assert_eq!(a.role_or_refresh("nobody"), None);
        // The digests, not the tokens, are what etcd holds.
        let stored = kv.list(TOKENS_PREFIX).unwrap();
        assert_eq!(stored.len(), 3);
        for (_, v) in stored {
            let text = String::from_utf8(v.value).unwrap();
            assert!(
                !text.contains("a-admin") && !text.contains("b-admin"),
                "{text}"
            );
        }
    }
}
