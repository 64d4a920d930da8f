//! Previews in flight on the hub: asking a target's agent what the next reconcile of a plan
//! would do ([`ask`]) and routing its answer back to the one who asked.
//!
//! Every link already forwards its agent's reports into the `ReportSink`; the sink hands a
//! [`Report::Preview`] to its [`Previews`] registry instead of the coalescing report queue
//! (a preview is an answer to one caller, not status). The registry is bounded
//! ([`MAX_PENDING`]); an answer counts only from the target the request was sent to and for
//! the HelmRelease it named, so an agent cannot answer another cluster's preview. A caller
//! waits at most [`PREVIEW_WAIT`]: "the agent of cluster X did not answer the preview
//! within 60s".
//!
//! A remote link answers [`PreviewError::Unsupported`] itself for an agent whose Hello did
//! not list the `preview` feature (an older agent), and a failure when no agent is
//! connected (`session::mailbox`).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use flotilla_core::agent::{Command, ObjectKey, Report};
use flotilla_core::plan::ReleasePlan;
use flotilla_core::preview::{PreviewError, PreviewReport, PreviewRequest, ReleaseDiff};
use tokio::sync::oneshot;

use crate::link::{AgentLink, TargetId};

/// Previews waiting for an answer at most, hub-wide.
pub const MAX_PENDING: usize = 256;

/// How long [`ask`] waits for an agent's answer.
pub const PREVIEW_WAIT: Duration = Duration::from_secs(60);

type Answer = Result<ReleaseDiff, PreviewError>;

#[derive(Debug)]
struct Waiter {
    target: TargetId,
    object: ObjectKey,
    tx: oneshot::Sender<Answer>,
}

/// The previews waiting for an answer, by request id.
#[derive(Debug, Default)]
pub struct Previews {
    waiting: Mutex<HashMap<String, Waiter>>,
}

impl Previews {
    /// Waits for the answer to request `id`, sent to `target` about `object`; refused
    /// when [`MAX_PENDING`] previews wait already.
    pub fn register(
        &self,
        id: &str,
        target: &TargetId,
        object: &ObjectKey,
    ) -> Result<oneshot::Receiver<Answer>, PreviewError> {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        // Callers that gave up (timed out) leave closed senders behind.
        waiting.retain(|_, w| !w.tx.is_closed());
        if waiting.len() >= MAX_PENDING {
            return Err(PreviewError::Failed(format!(
                "the hub already waits for {MAX_PENDING} previews; try again shortly."
            )));
        }
        let (tx, rx) = oneshot::channel();
        waiting.insert(
            id.to_owned(),
            Waiter {
                target: target.clone(),
                object: object.clone(),
                tx,
            },
        );
        Ok(rx)
    }

    /// Hands `report` from `target` to its waiter; `false` when nobody waits for it from
    /// that target about that HelmRelease (late, unknown or forged: dropped).
    pub fn answer(&self, target: &TargetId, report: PreviewReport) -> bool {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        let matches = waiting
            .get(&report.id)
            .is_some_and(|w| w.target == *target && w.object == report.object);
        if !matches {
            return false;
        }
        let Some(w) = waiting.remove(&report.id) else {
            return false;
        };
        w.tx.send(report.result).is_ok()
    }

    /// Forgets request `id` (its caller gave up).
    pub fn forget(&self, id: &str) {
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }

    /// How many previews wait.
    pub fn len(&self) -> usize {
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// 32 bytes from the operating system's random source.
fn random_bytes() -> Result<[u8; 32], PreviewError> {
    use ring::rand::SecureRandom as _;
    let mut key = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| PreviewError::Failed("the hub could not draw a random key.".into()))?;
    Ok(key)
}

/// Asks the agent behind `link` (serving `target`) what reconciling `plan` would do, with a
/// fresh random id and mask key; waits up to `wait` ([`PREVIEW_WAIT`] normally).
pub async fn ask(
    previews: &Previews,
    link: &dyn AgentLink,
    target: &TargetId,
    plan: ReleasePlan,
    wait: Duration,
) -> Answer {
    let mask_key = random_bytes()?;
    let id_bytes = random_bytes()?;
    let id: String = id_bytes[..12].iter().map(|b| format!("{b:02x}")).collect();
    let object = plan.object.key();
    let rx = previews.register(&id, target, &object)?;
    let request = PreviewRequest {
        id: id.clone(),
        plan: Box::new(plan),
        mask_key,
    };
    if link.send(Command::Preview(request)).is_err() {
        previews.forget(&id);
        return Err(PreviewError::Failed(format!(
            "the agent link of {target} is closed."
        )));
    }
    match tokio::time::timeout(wait, rx).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(_)) => Err(PreviewError::Failed(format!(
            "the agent of {target} did not answer the preview."
        ))),
        Err(_) => {
            previews.forget(&id);
            Err(PreviewError::Failed(format!(
                "the agent of {target} did not answer the preview within {}s.",
                wait.as_secs()
            )))
        }
    }
}

/// The report a link answers a preview with itself.
pub fn answer_of(request: &PreviewRequest, error: PreviewError) -> Report {
    Report::Preview(Box::new(PreviewReport {
        id: request.id.clone(),
        object: request.plan.object.key(),
        result: Err(error),
    }))
}

#[cfg(test)]
mod tests {
    use flotilla_core::ids::{ClusterId, Namespace, ObjectName};

    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            namespace: Namespace::new("apps").unwrap(),
            name: ObjectName::new(name).unwrap(),
        }
    }

    fn cluster(name: &str) -> TargetId {
        TargetId::Cluster(ClusterId::new(name).unwrap())
    }

    fn report(id: &str, object: ObjectKey) -> PreviewReport {
        PreviewReport {
            id: id.into(),
            object,
            result: Ok(ReleaseDiff::default()),
        }
    }

    #[tokio::test]
    async fn only_the_target_asked_answers_and_only_once() {
        let p = Previews::default();
        let rx = p.register("a", &cluster("one"), &key("web")).unwrap();
        assert!(
            !p.answer(&cluster("two"), report("a", key("web"))),
            "another cluster"
        );
        assert!(
            !p.answer(&cluster("one"), report("a", key("db"))),
            "another release"
        );
        assert!(
            !p.answer(&cluster("one"), report("b", key("web"))),
            "unknown id"
        );
        assert!(p.answer(&cluster("one"), report("a", key("web"))));
        assert_eq!(rx.await.unwrap(), Ok(ReleaseDiff::default()));
        assert!(!p.answer(&cluster("one"), report("a", key("web"))), "late");
        assert!(p.is_empty());
    }

    #[test]
    fn the_registry_is_bounded_and_forgets_callers_that_gave_up() {
        let p = Previews::default();
        let mut held = Vec::new();
        for i in 0..MAX_PENDING {
            held.push(
                p.register(&i.to_string(), &cluster("one"), &key("web"))
                    .unwrap(),
            );
        }
        let refused = p.register("x", &cluster("one"), &key("web")).unwrap_err();
        assert!(
            refused.to_string().ends_with("try again shortly."),
            "{refused}"
        );
        drop(held.pop());
        assert!(p.register("x", &cluster("one"), &key("web")).is_ok());
    }
}
