//! The probe server: `/metrics`, `/healthz` and `/readyz` over plain HTTP/1.1.

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::Metrics;

const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PLAIN_TEXT: &str = "text/plain; charset=utf-8";

/// How long a client may take to send a request's headers before its connection is closed:
/// a scraper sends them at once, and a stalled client must not hold a connection (or the
/// graceful stop) for ever.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a graceful stop waits for requests in flight before it drops their connections.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// How long to wait before accepting again after the process ran out of file descriptors or
/// memory, so that the loop does not spin while the condition lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// What `/readyz` answers. Cloning is cheap and every clone sees the same state: the runtime
/// keeps one, the server another.
///
/// A new `Health` is not ready (reason `starting`); `/healthz` answers `ok` regardless, as
/// long as the server runs.
#[derive(Clone, Debug)]
pub struct Health {
    readiness: Arc<Mutex<Readiness>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Readiness {
    Ready,
    NotReady(Cow<'static, str>),
}

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    /// Not ready, with reason `starting`.
    pub fn new() -> Self {
        Self {
            readiness: Arc::new(Mutex::new(Readiness::NotReady(Cow::Borrowed("starting")))),
        }
    }

    /// Ready (`/readyz` answers 200 `ok`), or not (503 `not ready`).
    pub fn set_ready(&self, ready: bool) {
        self.set(if ready {
            Readiness::Ready
        } else {
            Readiness::NotReady(Cow::Borrowed("not ready"))
        });
    }

    /// Not ready, with a short reason that `/readyz` answers with its 503, such as
    /// `"hub session not connected"`. It is served to anyone who can reach the port: name a
    /// condition, never a value or a secret.
    pub fn set_not_ready(&self, reason: impl Into<Cow<'static, str>>) {
        self.set(Readiness::NotReady(reason.into()));
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.get() == Readiness::Ready
    }

    fn set(&self, readiness: Readiness) {
        *self
            .readiness
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = readiness;
    }

    fn get(&self) -> Readiness {
        self.readiness
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Serves the probe endpoints on `listener` until `shutdown` completes:
///
/// - `GET /metrics`: the [`Metrics`] exposition, as
///   `application/openmetrics-text; version=1.0.0; charset=utf-8`;
/// - `GET /healthz`: 200 `ok` while the process runs;
/// - `GET /readyz`: 200 `ok` once [`Health::set_ready`]`(true)`, else 503 with the reason;
/// - `HEAD` of the same: the same status and headers; another method there: 405;
/// - any other path: 404.
///
/// HTTP/1.1 only, one task per connection. When `shutdown` completes the server stops
/// accepting, lets requests in flight finish (closing idle keep-alive connections at once),
/// drops connections still open after 5 s, and returns. Pass
/// `token.cancelled_owned()` to stop it with a `CancellationToken`.
///
/// # Errors
///
/// When accepting fails for a reason retrying cannot fix (the listening socket itself is
/// broken). Errors of a single connection are logged at debug and do not stop the server;
/// other accept errors, such as running out of file descriptors, pause accepting for a
/// second.
pub async fn serve(
    listener: TcpListener,
    metrics: Metrics,
    health: Health,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut shutdown = std::pin::pin!(shutdown);
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    if let Ok(address) = listener.local_addr() {
        info!(%address, "serving metrics and probes");
    }

    let result = loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break Ok(()),
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _peer)) => stream,
                    Err(error) => match accept_error(&error) {
                        AcceptError::Connection => continue,
                        AcceptError::Other => {
                            warn!(%error, "accepting a probe connection failed; pausing");
                            tokio::select! {
                                () = &mut shutdown => break Ok(()),
                                () = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                            }
                        }
                        AcceptError::Fatal => break Err(error),
                    },
                };
                let metrics = metrics.clone();
                let health = health.clone();
                let service = service_fn(move |request: Request<Incoming>| {
                    let response = respond(&request, &metrics, &health);
                    async move { Ok::<_, Infallible>(response) }
                });
                let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
                connections.spawn(async move {
                    if let Err(error) = connection.await {
                        debug!(%error, "probe connection ended with an error");
                    }
                });
            }
        }
    };

    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        debug!("dropping probe connections still open after the drain timeout");
    }
    connections.shutdown().await;
    info!("stopped serving metrics and probes");
    result
}

enum AcceptError {
    /// The one connection failed before it was accepted: accept the next.
    Connection,
    /// The listener is broken: retrying cannot help.
    Fatal,
    /// Anything else, such as the process running out of descriptors or memory: wait, then
    /// accept again.
    Other,
}

fn accept_error(error: &std::io::Error) -> AcceptError {
    use std::io::ErrorKind;
    match error.kind() {
        ErrorKind::ConnectionAborted
        | ErrorKind::ConnectionReset
        | ErrorKind::ConnectionRefused
        | ErrorKind::Interrupted
        | ErrorKind::WouldBlock
        | ErrorKind::TimedOut => AcceptError::Connection,
        _ => match error.raw_os_error() {
            // Network errors pending on the new connection, which accept(2) reports.
            Some(
                libc::EPROTO
                | libc::ENETDOWN
                | libc::ENETUNREACH
                | libc::EHOSTUNREACH
                | libc::EPERM,
            ) => AcceptError::Connection,
            Some(libc::EBADF | libc::EINVAL | libc::ENOTSOCK | libc::EFAULT) => AcceptError::Fatal,
            _ => AcceptError::Other,
        },
    }
}

fn respond(
    request: &Request<Incoming>,
    metrics: &Metrics,
    health: &Health,
) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    if !matches!(path, "/metrics" | "/healthz" | "/readyz") {
        return text(StatusCode::NOT_FOUND, "not found\n");
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    match path {
        "/metrics" => match metrics.encode() {
            Ok(exposition) => {
                let mut response = Response::new(Full::new(Bytes::from(exposition)));
                response
                    .headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static(OPENMETRICS_TEXT));
                response
            }
            Err(_) => {
                warn!("encoding the metrics exposition failed");
                text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "encoding the metrics failed\n",
                )
            }
        },
        "/readyz" => match health.get() {
            Readiness::Ready => text(StatusCode::OK, "ok"),
            Readiness::NotReady(reason) => text(StatusCode::SERVICE_UNAVAILABLE, reason),
        },
        _ => text(StatusCode::OK, "ok"),
    }
}

fn text(status: StatusCode, body: impl Into<Cow<'static, str>>) -> Response<Full<Bytes>> {
    let body = match body.into() {
        Cow::Borrowed(body) => Bytes::from_static(body.as_bytes()),
        Cow::Owned(body) => Bytes::from(body),
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(PLAIN_TEXT));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpStream;

    /// What a scrape got back: the status code, the headers (names lowercased) and the body.
    #[derive(Debug)]
    struct Answer {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    }

    impl Answer {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        }
    }

    /// One HTTP/1.1 request on its own connection (`Connection: close`), read to the end.
    async fn request(address: std::net::SocketAddr, method: &str, path: &str) -> Answer {
        let mut stream = TcpStream::connect(address).await.expect("connects");
        let request =
            format!("{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .expect("sends the request");
        let mut raw = Vec::new();
        stream
            .read_to_end(&mut raw)
            .await
            .expect("reads the answer");
        let raw = String::from_utf8(raw).expect("the answer is UTF-8");
        let (head, body) = raw.split_once("\r\n\r\n").expect("a head and a body");
        let mut lines = head.lines();
        let status_line = lines.next().expect("a status line");
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .expect("a status code");
        let headers = lines
            .map(|line| {
                let (name, value) = line.split_once(':').expect("a header line");
                (name.to_ascii_lowercase(), value.trim().to_owned())
            })
            .collect();
        Answer {
            status,
            headers,
            body: body.to_owned(),
        }
    }

    #[tokio::test]
    async fn the_server_answers_each_probe_and_ends_when_shut_down() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let address = listener.local_addr().expect("has an address");
        let metrics = Metrics::new();
        let health = Health::new();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, metrics.clone(), health.clone(), async {
            let _ = stop_rx.await;
        }));

        metrics.action("install", true);
        metrics.set_plans_held(2);
        let scrape = request(address, "GET", "/metrics").await;
        assert_eq!(scrape.status, 200, "{scrape:?}");
        assert_eq!(
            scrape.header("content-type"),
            Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
        );
        assert!(
            scrape
                .body
                .contains("flotilla_agent_action_total{action=\"install\",result=\"success\"} 1\n"),
            "{}",
            scrape.body
        );
        assert!(scrape.body.contains("flotilla_agent_plans_held 2\n"));
        assert!(scrape.body.ends_with("# EOF\n"), "{}", scrape.body);

        let healthz = request(address, "GET", "/healthz").await;
        assert_eq!((healthz.status, healthz.body.as_str()), (200, "ok"));

        let readyz = request(address, "GET", "/readyz").await;
        assert_eq!((readyz.status, readyz.body.as_str()), (503, "starting"));
        health.set_ready(true);
        let readyz = request(address, "GET", "/readyz").await;
        assert_eq!((readyz.status, readyz.body.as_str()), (200, "ok"));
        health.set_not_ready("hub session not connected");
        let readyz = request(address, "GET", "/readyz?verbose").await;
        assert_eq!(
            (readyz.status, readyz.body.as_str()),
            (503, "hub session not connected")
        );
        assert!(!health.is_ready());

        let missing = request(address, "GET", "/metricz").await;
        assert_eq!(missing.status, 404, "{missing:?}");
        let root = request(address, "GET", "/").await;
        assert_eq!(root.status, 404, "{root:?}");
        let post = request(address, "POST", "/healthz").await;
        assert_eq!(post.status, 405, "{post:?}");
        assert_eq!(post.header("allow"), Some("GET, HEAD"));
        let head = request(address, "HEAD", "/healthz").await;
        assert_eq!((head.status, head.body.as_str()), (200, ""));

        stop_tx.send(()).expect("the server waits for the signal");
        let ended = tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("the server ends after shutdown");
        ended
            .expect("the server task does not panic")
            .expect("the server ends without error");
        assert!(
            TcpStream::connect(address).await.is_err(),
            "the listener is closed once the server has ended"
        );
    }

    #[tokio::test]
    async fn shutdown_closes_an_idle_keep_alive_connection_and_the_server_ends() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let address = listener.local_addr().expect("has an address");
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, Metrics::new(), Health::new(), async {
            let _ = stop_rx.await;
        }));

        // A keep-alive client that got its answer and keeps the connection open.
        let mut stream = TcpStream::connect(address).await.expect("connects");
        let request = format!("GET /healthz HTTP/1.1\r\nHost: {address}\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .expect("sends the request");
        let mut answer = vec![0; 1024];
        let n = stream.read(&mut answer).await.expect("reads the answer");
        let answer = String::from_utf8_lossy(&answer[..n]);
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\nok"), "{answer}");

        stop_tx.send(()).expect("the server waits for the signal");
        let ended = tokio::time::timeout(Duration::from_secs(3), server)
            .await
            .expect("the server ends well before the drain timeout");
        ended
            .expect("the server task does not panic")
            .expect("the server ends without error");
        let mut rest = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(3), stream.read_to_end(&mut rest))
            .await
            .expect("the server closed the idle connection")
            .expect("reads to the end");
        assert_eq!(n, 0, "nothing more was sent: {rest:?}");
    }
}
