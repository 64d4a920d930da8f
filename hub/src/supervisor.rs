//! Supervision of the hub's long-lived tasks, as linkerd2-proxy treats its background
//! tasks: each one is *critical*, and one ending on its own (returning or panicking) while
//! the process is not stopping turns readiness off and ends the process with an error.
//!
//! The tasks stay owned where they are made (the [`Hub`](crate::run::Hub)'s `JoinSet`, the
//! session server's handles); [`Supervisor::critical`] wraps each one so that its end is
//! reported here. The binary waits on [`Supervisor::failed`] beside its signals: a critical
//! task that ended turns `/readyz` false at once ([`Supervisor::readiness`] is the flag the
//! probe server reads), then the process stops what is left and exits non-zero.
//!
//! Contract:
//! - a task wrapped before [`Supervisor::stopping`] is called and ending after it is a
//!   normal end (the process is shutting down): readiness is left to the caller and
//!   [`Supervisor::failed`] does not resolve for it;
//! - any other end is a failure: readiness goes false before [`Supervisor::failed`]
//!   resolves, and stays false (a supervisor does not come back);
//! - the first failure is the one [`Supervisor::failed`] returns; every one is logged.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::FutureExt as _;
use tokio_util::sync::CancellationToken;

/// How a critical task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// Its future returned.
    Returned,
    /// It panicked (the panic's message).
    Panicked(String),
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Returned => f.write_str("it returned"),
            End::Panicked(message) => write!(f, "it panicked: {message}"),
        }
    }
}

/// A critical task that ended while the process was not stopping.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("critical task {task} ended: {end}")]
pub struct TaskEnded {
    /// The task's name (a constant: `helmrelease-controller`, `session-server`, ...).
    pub task: &'static str,
    /// How.
    pub end: End,
}

#[derive(Debug, Default)]
struct Inner {
    ready: Arc<AtomicBool>,
    stopping: AtomicBool,
    failed: CancellationToken,
    first: Mutex<Option<TaskEnded>>,
}

/// The supervisor of a process's critical tasks (cheap to clone: one shared state).
#[derive(Debug, Clone, Default)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

/// The message of a caught panic.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned())
}

impl Supervisor {
    /// A supervisor whose readiness flag is `ready` (the one the probe server reads).
    pub fn new(ready: Arc<AtomicBool>) -> Supervisor {
        Supervisor {
            inner: Arc::new(Inner {
                ready,
                ..Default::default()
            }),
        }
    }

    /// The readiness flag (`/readyz`).
    pub fn readiness(&self) -> Arc<AtomicBool> {
        self.inner.ready.clone()
    }

    /// Marks the process ready, unless a critical task has already ended.
    pub fn set_ready(&self) {
        if !self.inner.failed.is_cancelled() {
            self.inner.ready.store(true, Ordering::SeqCst);
        }
    }

    /// The process is stopping: tasks ending from now on end normally.
    pub fn stopping(&self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
    }

    /// `task` as a critical task named `name`: the same output, its end reported here (a
    /// panic is caught, reported and ends the task).
    pub fn critical<F>(&self, name: &'static str, task: F) -> impl Future<Output = ()> + use<F>
    where
        F: Future<Output = ()>,
    {
        let this = self.clone();
        async move {
            let end = match std::panic::AssertUnwindSafe(task).catch_unwind().await {
                Ok(()) => End::Returned,
                Err(panic) => End::Panicked(panic_message(&*panic)),
            };
            this.ended(name, end);
        }
    }

    fn ended(&self, task: &'static str, end: End) {
        if self.inner.stopping.load(Ordering::SeqCst) && end == End::Returned {
            tracing::debug!(task, "task ended");
            return;
        }
        self.inner.ready.store(false, Ordering::SeqCst);
        let ended = TaskEnded { task, end };
        tracing::error!(task, error = %ended, "a critical task ended; not ready");
        self.inner
            .first
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(ended);
        self.inner.failed.cancel();
    }

    /// Resolves with the first critical task that ended while the process was not
    /// stopping (readiness is already off).
    pub async fn failed(&self) -> TaskEnded {
        self.inner.failed.cancelled().await;
        self.inner
            .first
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .expect("the token is cancelled after the first end is recorded")
    }

    /// Whether a critical task has ended (readiness is off for good).
    pub fn has_failed(&self) -> bool {
        self.inner.failed.is_cancelled()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_critical_task_returning_turns_readiness_off_and_is_reported() {
        let supervisor = Supervisor::default();
        supervisor.set_ready();
        assert!(supervisor.readiness().load(Ordering::SeqCst));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(supervisor.critical("helmrelease-controller", async move {
            let _ = rx.await;
        }));
        assert!(!supervisor.has_failed());
        tx.send(()).expect("the task waits");
        task.await.expect("the task ends");
        let ended = supervisor.failed().await;
        assert_eq!(
            ended,
            TaskEnded {
                task: "helmrelease-controller",
                end: End::Returned
            }
        );
        assert_eq!(
            ended.to_string(),
            "critical task helmrelease-controller ended: it returned"
        );
        assert!(!supervisor.readiness().load(Ordering::SeqCst));
        supervisor.set_ready();
        assert!(
            !supervisor.readiness().load(Ordering::SeqCst),
            "a failed supervisor is never ready again"
        );
    }

    #[tokio::test]
    async fn a_panicking_task_is_caught_and_the_first_end_is_the_one_reported() {
        let supervisor = Supervisor::default();
        supervisor.set_ready();
        supervisor
            .critical("status-writer", async { panic!("boom") })
            .await;
        supervisor.critical("session-server", async {}).await;
        let ended = supervisor.failed().await;
        assert_eq!(ended.task, "status-writer");
        assert_eq!(ended.end, End::Panicked("boom".into()));
        assert!(!supervisor.readiness().load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn tasks_ending_once_the_process_is_stopping_end_normally() {
        let supervisor = Supervisor::default();
        supervisor.set_ready();
        supervisor.stopping();
        supervisor.critical("helmchart-controller", async {}).await;
        assert!(!supervisor.has_failed());
        assert!(supervisor.readiness().load(Ordering::SeqCst));
    }
}
