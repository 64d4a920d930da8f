//! Fetching the remote documents a chart's `values.schema.json` `$ref`s, as Helm's `http`
//! and `https` loaders do, for the agent's schema validation (the agent renders, so the
//! agent validates and fetches: the schema is checked against the values composed for the
//! release, in the cluster the release goes to, as helm-controller checks them where it
//! runs).
//!
//! `flotilla_chart::schema::remote` lists the documents (it does no IO); this module GETs
//! each `http(s)` one and hands the bodies back, and follows their own references:
//!
//! - at most [`MAX_DOCUMENT_BYTES`] a document (checked while reading), [`FETCH_TIMEOUT`] a
//!   request, [`MAX_REDIRECTS`] redirects (to `http(s)` only), [`MAX_DOCUMENTS`] documents a
//!   chart;
//! - fetched documents are cached by URL ([`CACHE_ENTRIES`] of them, each for
//!   [`CACHE_TTL`]); failures are not, so the next reconcile asks again;
//! - a failure is kept as Helm's loader words it (`HTTP request to <url> returned status
//!   404 (Not Found)`, `HTTP request failed for <url>: <reason>`), which validation wraps as
//!   Helm's compile does (`failing loading "<url>": ...`);
//! - `file://` and other schemes are never fetched (refused by the chart crate).
//!
//! TLS uses the system's CA roots (`SSL_CERT_FILE` / `SSL_CERT_DIR` are honoured); an
//! agent image without them cannot fetch `https` schemas.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use flotilla_chart::Chart;
use flotilla_chart::schema::remote::{
    MAX_DOCUMENT_BYTES, MAX_DOCUMENTS, RemoteRef, RemoteSchemas, chart_remote_refs, remote_refs,
    too_large,
};
use serde_json::Value;

use crate::kube::error_chain;

/// How long one request may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Redirects followed per request.
pub const MAX_REDIRECTS: usize = 5;
/// Documents cached.
pub const CACHE_ENTRIES: usize = 64;
/// How long a cached document is used.
pub const CACHE_TTL: Duration = Duration::from_secs(600);

/// The fetcher every reconcile of this process shares (one cache).
pub fn shared() -> &'static SchemaFetcher {
    static FETCHER: LazyLock<SchemaFetcher> = LazyLock::new(SchemaFetcher::new);
    &FETCHER
}

/// GETs remote schema documents, with a cache by URL.
#[derive(Debug)]
pub struct SchemaFetcher {
    client: Result<reqwest::Client, String>,
    cache: Mutex<HashMap<String, (Instant, Arc<Value>)>>,
}

impl Default for SchemaFetcher {
    fn default() -> Self {
        SchemaFetcher::new()
    }
}

impl SchemaFetcher {
    /// A fetcher with an empty cache.
    pub fn new() -> SchemaFetcher {
        SchemaFetcher {
            client: client(),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The documents `chart`'s schemas need, fetched (or why each could not be); empty
    /// when they reference none.
    pub async fn fetch_for(&self, chart: &Chart) -> RemoteSchemas {
        let mut remote = RemoteSchemas::new();
        let mut queue: VecDeque<String> = fetchable(chart_remote_refs(chart));
        let mut seen = BTreeSet::new();
        while let Some(url) = queue.pop_front() {
            if !seen.insert(url.clone()) {
                continue;
            }
            if seen.len() > MAX_DOCUMENTS {
                // Validation names the document past the limit.
                break;
            }
            let doc = match self.cached(&url) {
                Some(doc) => {
                    remote.insert_fetched_value(&url, (*doc).clone());
                    Some(doc)
                }
                None => match self.get(&url).await {
                    Ok(body) => match remote.insert_fetched(&url, &body) {
                        Some(doc) => {
                            let doc = Arc::new(doc.clone());
                            self.remember(&url, doc.clone());
                            Some(doc)
                        }
                        None => None,
                    },
                    Err(reason) => {
                        tracing::warn!(%url, %reason, "a remote schema could not be fetched");
                        remote.insert_failed(&url, reason);
                        None
                    }
                },
            };
            if let Some(doc) = doc {
                queue.extend(fetchable(remote_refs(&doc, &url)));
            }
        }
        remote
    }

    fn cached(&self, url: &str) -> Option<Arc<Value>> {
        let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache
            .get(url)
            .filter(|(at, _)| at.elapsed() < CACHE_TTL)
            .map(|(_, doc)| doc.clone())
    }

    fn remember(&self, url: &str, doc: Arc<Value>) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.retain(|_, (at, _)| at.elapsed() < CACHE_TTL);
        while cache.len() >= CACHE_ENTRIES {
            let Some(oldest) = cache
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            cache.remove(&oldest);
        }
        cache.insert(url.to_owned(), (Instant::now(), doc));
    }

    /// One GET, as Helm's `HTTPURLLoader` words its failures.
    async fn get(&self, url: &str) -> Result<Vec<u8>, String> {
        let failed = |reason: String| format!("HTTP request failed for {url}: {reason}");
        let client = self.client.as_ref().map_err(|e| failed(e.clone()))?;
        let mut response = client
            .get(url)
            .send()
            .await
            .map_err(|e| failed(error_chain(&e.without_url())))?;
        let status = response.status();
        if status != reqwest::StatusCode::OK {
            return Err(format!(
                "HTTP request to {url} returned status {} ({})",
                status.as_u16(),
                status.canonical_reason().unwrap_or_default()
            ));
        }
        if response
            .content_length()
            .is_some_and(|n| n > MAX_DOCUMENT_BYTES as u64)
        {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| failed(error_chain(&e.without_url())))?
        {
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

fn fetchable(refs: Vec<RemoteRef>) -> VecDeque<String> {
    refs.into_iter()
        .filter_map(|r| match r {
            RemoteRef::Fetch(url) => Some(url),
            _ => None,
        })
        .collect()
}

fn client() -> Result<reqwest::Client, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    // Unreadable roots are skipped, as Go's SystemCertPool does.
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let redirects = reqwest::redirect::Policy::custom(|attempt| {
        if attempt.previous().len() >= MAX_REDIRECTS {
            attempt.error(format!("stopped after {MAX_REDIRECTS} redirects"))
        } else if !matches!(attempt.url().scheme(), "http" | "https") {
            attempt.error("a redirect to a scheme other than http or https")
        } else {
            attempt.follow()
        }
    });
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(FETCH_TIMEOUT)
        .redirect(redirects)
        .user_agent(concat!("flotilla-agent/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| error_chain(&e))
}
