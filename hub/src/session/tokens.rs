//! Bootstrap tokens: how an agent proves, once, that an administrator invited it.
//!
//! A token is `<id>.<secret>` in kubeadm's format (`[a-z0-9]{6}.[a-z0-9]{16}`). It lives in
//! the hub's namespace as the Secret `flotilla-token-<id>` of type
//! `bootstrap.flotilla.dev/token`, with the keys:
//!
//! | key | meaning |
//! |---|---|
//! | `token-id` | the public half |
//! | `token-secret-sha256` | hex SHA-256 of the secret half: the secret itself is stored nowhere |
//! | `expiration` | RFC 3339; absent: never expires. The hub deletes expired token Secrets ([`remove_expired`]) |
//! | `usages-remaining` | how many clusters may still join with it; absent: unlimited |
//! | `auto-accept` | `"true"`: ManagedClusters it creates are accepted at once (only when it creates them) |
//! | `cluster-name` | the only ManagedCluster name it may register |
//! | `any-cluster` | `"true"` instead of `cluster-name`: any name (a connect storm of new clusters) |
//! | `registered-clusters` | comma-separated names that joined with it (a pending agent's retries do not spend a use again; a name here whose ManagedCluster is gone was deleted and is not created again) |
//!
//! A token names its cluster or says `any-cluster`: [`TokenOptions::scope`] has no default.
//! [`redeem`] checks a presented token (the SHA-256 of its secret compared in constant time
//! with the stored one) and spends one use for a new cluster, with optimistic concurrency on
//! the Secret. The hub redeems through
//! [`Redemptions`], which answers the requests arriving together with one update of the
//! Secret (a connect storm of N agents with one token would otherwise be N conflicting
//! updates). Refusals say which rule
//! failed ([`TokenError`]); neither the secret nor the token is ever put in an error, a log
//! line or a Debug output ([`BootstrapToken`]'s Debug shows the id only).

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::sync::oneshot;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use ring::rand::SecureRandom as _;
use subtle::ConstantTimeEq as _;

/// The Secret type of bootstrap tokens.
pub const SECRET_TYPE: &str = "bootstrap.flotilla.dev/token";
/// The name prefix of bootstrap token Secrets.
pub const SECRET_PREFIX: &str = "flotilla-token-";

const ID_LEN: usize = 6;
const SECRET_LEN: usize = 16;
const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// A bootstrap token (`<id>.<secret>`). Its Debug shows the id only.
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapToken {
    id: String,
    secret: String,
}

impl std::fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapToken")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

fn is_token_part(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

impl BootstrapToken {
    /// A new random token.
    pub fn generate() -> Result<Self, TokenError> {
        let rng = ring::rand::SystemRandom::new();
        let pick = |n: usize| -> Result<String, TokenError> {
            let mut out = String::with_capacity(n);
            while out.len() < n {
                let mut b = [0u8; 1];
                rng.fill(&mut b).map_err(|_| TokenError::Random)?;
                // Rejection sampling keeps the alphabet uniform (252 = 7 * 36).
                if b[0] < 252 {
                    out.push(char::from(ALPHABET[usize::from(b[0]) % ALPHABET.len()]));
                }
            }
            Ok(out)
        };
        Ok(Self {
            id: pick(ID_LEN)?,
            secret: pick(SECRET_LEN)?,
        })
    }

    /// Parses `<id>.<secret>`; the error never contains the input.
    pub fn parse(s: &str) -> Result<Self, TokenError> {
        let (id, secret) = s.split_once('.').ok_or(TokenError::Malformed)?;
        if !is_token_part(id, ID_LEN) || !is_token_part(secret, SECRET_LEN) {
            return Err(TokenError::Malformed);
        }
        Ok(Self {
            id: id.to_owned(),
            secret: secret.to_owned(),
        })
    }

    /// The public half.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The whole token, `<id>.<secret>`: secret, for the agent's join command only.
    pub fn expose(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }

    /// The name of the token's Secret.
    pub fn secret_name(&self) -> String {
        format!("{SECRET_PREFIX}{}", self.id)
    }
}

/// Why a token was refused or could not be handled. The messages go back to the agent.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Not `[a-z0-9]{6}.[a-z0-9]{16}`.
    #[error(
        "the bootstrap token is malformed: expected <6 lower-case letters or digits>.<16 lower-case letters or digits>"
    )]
    Malformed,
    /// No token with this id, or the secret does not match (not told apart, so a guess
    /// learns nothing about which ids exist).
    #[error("bootstrap token {id} is not valid: no such token, or a wrong secret")]
    Invalid {
        /// The token id.
        id: String,
    },
    /// Past its expiration.
    #[error("bootstrap token {id} expired at {expiration}")]
    Expired {
        /// The token id.
        id: String,
        /// When it expired.
        expiration: String,
    },
    /// No uses left.
    #[error("bootstrap token {id} is used up: every use it allowed has been spent")]
    UsedUp {
        /// The token id.
        id: String,
    },
    /// The token is bound to another cluster name.
    #[error("bootstrap token {id} may only register cluster {allowed:?}, not {requested:?}")]
    ClusterNotAllowed {
        /// The token id.
        id: String,
        /// The name the token allows.
        allowed: String,
        /// The name asked for.
        requested: String,
    },
    /// The token's Secret holds something unreadable.
    #[error("bootstrap token {id}: its Secret's {key:?} is invalid")]
    BadSecret {
        /// The token id.
        id: String,
        /// The key at fault.
        key: &'static str,
    },
    /// The system random source failed.
    #[error("the system random source failed")]
    Random,
    /// The Kubernetes API failed.
    #[error("bootstrap token {id}: {}", crate::util::error_chain(source))]
    Kube {
        /// The token id.
        id: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl TokenError {
    /// A bounded label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::Invalid { .. } => "invalid",
            Self::Expired { .. } => "expired",
            Self::UsedUp { .. } => "usedUp",
            Self::ClusterNotAllowed { .. } => "clusterNotAllowed",
            Self::BadSecret { .. } => "badSecret",
            Self::Random => "random",
            Self::Kube { .. } => "kube",
        }
    }

    /// Whether the agent should retry with the same token (the hub could not check it).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Kube { .. } | Self::Random)
    }
}

/// Which ManagedCluster names a token may register.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenScope {
    /// One name (`flotilla token create --cluster-name NAME`).
    Cluster(String),
    /// Any name (`--any-cluster`): for many new clusters joining with one token. Such a
    /// token registers an existing ManagedCluster again only if it created it.
    AnyCluster,
}

/// What `flotilla token create` asks for.
#[derive(Debug, Clone)]
pub struct TokenOptions {
    /// The names it may register.
    pub scope: TokenScope,
    /// How long the token is valid; `None`: forever.
    pub ttl: Option<Duration>,
    /// How many clusters may join with it; `None`: unlimited.
    pub uses: Option<u32>,
    /// ManagedClusters it creates are accepted at once.
    pub auto_accept: bool,
}

impl TokenOptions {
    /// A token for `scope`, valid forever, unlimited, not auto-accepting.
    pub fn new(scope: TokenScope) -> Self {
        Self {
            scope,
            ttl: None,
            uses: None,
            auto_accept: false,
        }
    }
}

/// What a redeemed token grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The token id (for the ManagedCluster's annotation and logs).
    pub token_id: String,
    /// Accept the ManagedCluster at once, when this registration creates it.
    pub auto_accept: bool,
    /// The token names this cluster (`cluster-name`), not any cluster.
    pub bound: bool,
    /// The cluster had registered with this token before this request.
    pub registered_before: bool,
}

/// The stored form of a token secret: hex SHA-256.
fn secret_hash(secret: &str) -> String {
    super::pki::sha256_hex(secret.as_bytes())
}

fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let dt = time::OffsetDateTime::from_unix_timestamp(i64::try_from(secs).unwrap_or(0))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    dt.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let dt = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()?;
    let secs = u64::try_from(dt.unix_timestamp()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

/// The agent's join command for a token, as `flotilla token create` prints it (the one
/// place a token is shown: to the administrator, never in a log).
///
/// The token goes in the agent's environment ([`TOKEN_ENV`]), not on its command line
/// (which `ps` shows to every user of the host); `--token-file` is the other way.
pub fn join_command(
    hub_url: &str,
    token: &BootstrapToken,
    ca_pin: &str,
    cluster_name: &str,
) -> String {
    format!(
        "{TOKEN_ENV}={} flotilla-agent join --hub {hub_url} --ca-hash {ca_pin} --cluster-name {cluster_name}",
        token.expose()
    )
}

/// The environment variable the agent's `join` reads the bootstrap token from.
pub const TOKEN_ENV: &str = "FLOTILLA_BOOTSTRAP_TOKEN";

/// Creates a token Secret in `namespace`; returns the token (to be shown once).
pub async fn create(
    client: kube::Client,
    namespace: &str,
    options: &TokenOptions,
) -> Result<BootstrapToken, TokenError> {
    let token = BootstrapToken::generate()?;
    let mut data: BTreeMap<String, ByteString> = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        data.insert(k.to_owned(), ByteString(v.into_bytes()));
    };
    put("token-id", token.id.clone());
    put("token-secret-sha256", secret_hash(&token.secret));
    if let Some(ttl) = options.ttl {
        put("expiration", rfc3339(SystemTime::now() + ttl));
    }
    if let Some(uses) = options.uses {
        put("usages-remaining", uses.to_string());
    }
    put("auto-accept", options.auto_accept.to_string());
    match &options.scope {
        TokenScope::Cluster(name) => put("cluster-name", name.clone()),
        TokenScope::AnyCluster => put("any-cluster", "true".to_owned()),
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(token.secret_name()),
            namespace: Some(namespace.to_owned()),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_owned(),
                    "flotilla-hub".to_owned(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        type_: Some(SECRET_TYPE.to_owned()),
        data: Some(data),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(client, namespace)
        .create(&PostParams::default(), &secret)
        .await
        .map_err(|source| TokenError::Kube {
            id: token.id.clone(),
            source,
        })?;
    tracing::info!(token_id = %token.id, "created a bootstrap token");
    Ok(token)
}

fn text<'a>(
    secret: &'a Secret,
    id: &str,
    key: &'static str,
) -> Result<Option<&'a str>, TokenError> {
    match secret.data.as_ref().and_then(|d| d.get(key)) {
        None => Ok(None),
        Some(b) => std::str::from_utf8(&b.0)
            .map(Some)
            .map_err(|_| TokenError::BadSecret {
                id: id.to_owned(),
                key,
            }),
    }
}

/// Checks `presented` for registering `cluster`, and spends a use when `cluster` has not
/// registered with it before.
pub async fn redeem(
    client: kube::Client,
    namespace: &str,
    presented: &str,
    cluster: &str,
) -> Result<Grant, TokenError> {
    let token = BootstrapToken::parse(presented)?;
    let mut outcomes = redeem_together(client, namespace, &[(token, cluster.to_owned())]).await;
    outcomes.pop().unwrap_or(Err(TokenError::Random))
}

/// A transient failure of the token Secret's API, for each of several requests (a
/// `kube::Error` is not `Clone`).
fn kube_failure(id: &str, message: String) -> TokenError {
    TokenError::Kube {
        id: id.to_owned(),
        source: kube::Error::Service(message.into()),
    }
}

/// Redeems every request (all for the same token id) with one read and one write of the
/// token Secret: each request gets its own answer, in order; the uses are spent in order.
async fn redeem_together(
    client: kube::Client,
    namespace: &str,
    requests: &[(BootstrapToken, String)],
) -> Vec<Result<Grant, TokenError>> {
    let Some((first, _)) = requests.first() else {
        return Vec::new();
    };
    let id = first.id.clone();
    let all = |e: &dyn Fn() -> TokenError| requests.iter().map(|_| Err(e())).collect();
    let api: Api<Secret> = Api::namespaced(client, namespace);
    let invalid = || TokenError::Invalid { id: id.clone() };
    for _ in 0..5 {
        let mut secret = match api.get_opt(&first.secret_name()).await {
            Ok(Some(secret)) => secret,
            Ok(None) => return all(&invalid),
            Err(e) => {
                let message = e.to_string();
                return all(&|| kube_failure(&id, message.clone()));
            }
        };
        if secret.type_.as_deref() != Some(SECRET_TYPE) {
            return all(&invalid);
        }
        let read = |key: &'static str| -> Result<Option<String>, TokenError> {
            text(&secret, &id, key).map(|v| v.map(str::to_owned))
        };
        let fields = (|| {
            let stored = read("token-secret-sha256")?.ok_or_else(|| TokenError::BadSecret {
                id: id.clone(),
                key: "token-secret-sha256",
            })?;
            let stored_id = read("token-id")?.unwrap_or_default();
            let expiration = match read("expiration")? {
                None => None,
                Some(e) => {
                    let at = parse_rfc3339(&e).ok_or_else(|| TokenError::BadSecret {
                        id: id.clone(),
                        key: "expiration",
                    })?;
                    Some((e, at))
                }
            };
            let allowed = read("cluster-name")?.filter(|a| !a.is_empty());
            // Neither a name nor an explicit any-cluster: not a token this hub made.
            if allowed.is_none() && read("any-cluster")?.as_deref() != Some("true") {
                return Err(TokenError::BadSecret {
                    id: id.clone(),
                    key: "cluster-name",
                });
            }
            let auto_accept = read("auto-accept")?.as_deref() == Some("true");
            let registered: Vec<String> = read("registered-clusters")?
                .unwrap_or_default()
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            let remaining = match read("usages-remaining")? {
                None => None,
                Some(s) => Some(s.trim().parse::<u32>().map_err(|_| TokenError::BadSecret {
                    id: id.clone(),
                    key: "usages-remaining",
                })?),
            };
            Ok((
                stored,
                stored_id,
                expiration,
                allowed,
                auto_accept,
                registered,
                remaining,
            ))
        })();
        let (stored, stored_id, expiration, allowed, auto_accept, mut registered, mut remaining) =
            match fields {
                Ok(f) => f,
                Err(TokenError::BadSecret { key, .. }) => {
                    return all(&|| TokenError::BadSecret {
                        id: id.clone(),
                        key,
                    });
                }
                Err(_) => return all(&invalid),
            };
        let grant = Grant {
            token_id: id.clone(),
            auto_accept,
            bound: allowed.is_some(),
            registered_before: false,
        };
        let mut changed = false;
        // Names registered before this batch (a duplicate within it is not "before").
        let before = registered.clone();
        let outcomes: Vec<Result<Grant, TokenError>> = requests
            .iter()
            .map(|(token, cluster)| {
                let secret_ok: bool = stored
                    .as_bytes()
                    .ct_eq(secret_hash(&token.secret).as_bytes())
                    .into();
                if !secret_ok || stored_id != token.id {
                    return Err(invalid());
                }
                if let Some((text, at)) = &expiration
                    && SystemTime::now() >= *at
                {
                    return Err(TokenError::Expired {
                        id: id.clone(),
                        expiration: text.clone(),
                    });
                }
                if let Some(allowed) = &allowed
                    && allowed != cluster
                {
                    return Err(TokenError::ClusterNotAllowed {
                        id: id.clone(),
                        allowed: allowed.clone(),
                        requested: cluster.clone(),
                    });
                }
                if registered.iter().any(|c| c == cluster) {
                    return Ok(Grant {
                        registered_before: before.iter().any(|c| c == cluster),
                        ..grant.clone()
                    });
                }
                match &mut remaining {
                    Some(0) => return Err(TokenError::UsedUp { id: id.clone() }),
                    Some(n) => *n -= 1,
                    None => {}
                }
                registered.push(cluster.clone());
                changed = true;
                Ok(grant.clone())
            })
            .collect();
        if !changed {
            return outcomes;
        }
        let data = secret.data.get_or_insert_with(BTreeMap::new);
        if let Some(n) = remaining {
            data.insert(
                "usages-remaining".to_owned(),
                ByteString(n.to_string().into_bytes()),
            );
        }
        data.insert(
            "registered-clusters".to_owned(),
            ByteString(registered.join(",").into_bytes()),
        );
        // `replace` carries the resourceVersion read: a concurrent redeem (another hub
        // replica) makes it 409.
        match api
            .replace(&first.secret_name(), &PostParams::default(), &secret)
            .await
        {
            Ok(_) => {
                for ((_, cluster), outcome) in requests.iter().zip(&outcomes) {
                    if outcome.is_ok() {
                        tracing::info!(token_id = %id, cluster, "a bootstrap token was used");
                    }
                }
                return outcomes;
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => {
                let message = e.to_string();
                return all(&|| kube_failure(&id, message.clone()));
            }
        }
    }
    all(&|| {
        kube_failure(
            &id,
            "the token Secret kept changing under concurrent use".into(),
        )
    })
}

/// Whether a token Secret has expired at `now` (`None`: it has no valid expiration).
fn expired_at(secret: &Secret, now: SystemTime) -> Option<bool> {
    let text = secret.data.as_ref()?.get("expiration")?;
    let at = parse_rfc3339(std::str::from_utf8(&text.0).ok()?)?;
    Some(now >= at)
}

/// Deletes the token Secrets of `namespace` past their expiration; returns how many. A
/// Secret changed since it was listed is left for the next sweep (the delete's
/// precondition is its resourceVersion).
pub async fn remove_expired(client: kube::Client, namespace: &str) -> Result<usize, kube::Error> {
    let api: Api<Secret> = Api::namespaced(client, namespace);
    let list = api
        .list(&kube::api::ListParams::default().fields(&format!("type={SECRET_TYPE}")))
        .await?;
    let now = SystemTime::now();
    let mut removed = 0;
    for secret in list.items {
        let Some(name) = secret.metadata.name.clone() else {
            continue;
        };
        if !name.starts_with(SECRET_PREFIX) || expired_at(&secret, now) != Some(true) {
            continue;
        }
        let params = kube::api::DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                resource_version: secret.metadata.resource_version.clone(),
                uid: secret.metadata.uid.clone(),
            }),
            ..kube::api::DeleteParams::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => {
                removed += 1;
                let token_id = name.trim_start_matches(SECRET_PREFIX);
                tracing::info!(token_id, "removed an expired bootstrap token");
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// A request waiting in [`Redemptions`].
struct Waiting {
    token: BootstrapToken,
    cluster: String,
    reply: oneshot::Sender<Result<Grant, TokenError>>,
}

/// The hub's redemptions, written together: one writer at a time reads the token Secret,
/// answers every request that arrived meanwhile and spends their uses in one update. So
/// N agents joining with one token at once cost a few Secret updates, not N updates that
/// conflict with each other (each conflict a re-read and a retry, the last ones failing).
pub struct Redemptions {
    client: kube::Client,
    namespace: String,
    queue: std::sync::Mutex<Vec<Waiting>>,
    writer: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Redemptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redemptions")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiting")
            .field("token", &self.token)
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl Redemptions {
    /// Redemptions of the tokens in `namespace`.
    pub fn new(client: kube::Client, namespace: impl Into<String>) -> Self {
        Self {
            client,
            namespace: namespace.into(),
            queue: std::sync::Mutex::new(Vec::new()),
            writer: tokio::sync::Mutex::new(()),
        }
    }

    /// [`redeem`], together with the requests that arrive while a write is in flight.
    pub async fn redeem(
        self: &Arc<Self>,
        presented: &str,
        cluster: &str,
    ) -> Result<Grant, TokenError> {
        let token = BootstrapToken::parse(presented)?;
        let id = token.id.clone();
        let (reply, answer) = oneshot::channel();
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Waiting {
                token,
                cluster: cluster.to_owned(),
                reply,
            });
        // The writing runs apart from this request, so a caller that goes away (its
        // connection closed) does not leave the others of its batch without an answer.
        let this = self.clone();
        tokio::spawn(async move {
            let _writer = this.writer.lock().await;
            let batch =
                std::mem::take(&mut *this.queue.lock().unwrap_or_else(PoisonError::into_inner));
            let mut by_id: BTreeMap<String, Vec<Waiting>> = BTreeMap::new();
            for w in batch {
                by_id.entry(w.token.id.clone()).or_default().push(w);
            }
            for (_, group) in by_id {
                let (requests, replies): (Vec<_>, Vec<_>) = group
                    .into_iter()
                    .map(|w| ((w.token, w.cluster), w.reply))
                    .unzip();
                let outcomes =
                    redeem_together(this.client.clone(), &this.namespace, &requests).await;
                for (reply, outcome) in replies.into_iter().zip(outcomes) {
                    let _ = reply.send(outcome);
                }
            }
        });
        answer.await.unwrap_or_else(|_| {
            Err(kube_failure(
                &id,
                "the redemption was interrupted (the hub is stopping)".into(),
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_token_has_kubeadms_format_and_parses_back() {
        let t = BootstrapToken::generate().unwrap();
        let text = t.expose();
        assert_eq!(text.len(), 23);
        assert_eq!(BootstrapToken::parse(&text).unwrap(), t);
        assert_ne!(BootstrapToken::generate().unwrap(), t);
    }

    #[test]
    fn a_malformed_token_is_refused_without_echoing_it() {
        for bad in [
            "abcdef",
            "ABCDEF.0123456789abcdef",
            "abcdef.0123456789abcde",
            "abc.def",
        ] {
            let e = BootstrapToken::parse(bad).unwrap_err();
            assert!(!e.to_string().contains(bad), "{e}");
        }
    }

    #[test]
    fn the_debug_form_of_a_token_hides_its_secret() {
        let t = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
        let debug = format!("{t:?}");
        assert!(debug.contains("abcdef"));
        assert!(!debug.contains("0123456789abcdef"));
    }

    #[test]
    fn the_join_command_passes_the_token_in_the_environment_and_names_the_hub_the_pin_and_the_cluster()
     {
        let t = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
        assert_eq!(
            join_command("https://hub.example:8443", &t, "sha256:00ff", "edge-1"),
            "FLOTILLA_BOOTSTRAP_TOKEN=abcdef.0123456789abcdef flotilla-agent join \
             --hub https://hub.example:8443 --ca-hash sha256:00ff --cluster-name edge-1"
        );
    }

    #[test]
    fn the_stored_hash_is_the_sha256_of_the_secret_and_never_the_secret() {
        let hash = secret_hash("0123456789abcdef");
        assert_eq!(hash.len(), 64);
        assert!(!hash.contains("0123456789abcdef"));
        assert_eq!(hash, secret_hash("0123456789abcdef"));
        assert_ne!(hash, secret_hash("0123456789abcdeg"));
    }

    #[test]
    fn a_token_secret_expires_at_its_expiration_and_one_without_never() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let secret = |data: &[(&str, &str)]| Secret {
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        };
        let with = secret(&[("expiration", &rfc3339(at))]);
        assert_eq!(expired_at(&with, at - Duration::from_secs(1)), Some(false));
        assert_eq!(expired_at(&with, at), Some(true));
        assert_eq!(expired_at(&secret(&[]), at), None);
        assert_eq!(expired_at(&secret(&[("expiration", "soon")]), at), None);
    }

    #[test]
    fn expiration_times_round_trip_through_rfc3339() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        assert_eq!(parse_rfc3339(&rfc3339(t)), Some(t));
    }
}
