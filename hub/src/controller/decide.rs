//! The HelmRelease controller's decisions, pure: what a reconcile does given what it
//! observed. The reconcile ([`super::reconcile`]) observes (reads the object, its
//! dependencies, its source, its target) and acts (applies, sends, writes the status);
//! everything it decides in between is here, matched exhaustively and table-tested
//! without a cluster, as `core::release` is for the agent.
//!
//! - [`entry`]: deletion (the finalizer), the finalizer to add, suspend;
//! - [`dependency`]: whether one `dependsOn` entry is ready, Flux's messages;
//! - [`source_not_ready`] and [`source_ready`]: a source's artifact, Flux's messages;
//! - [`finalizer_step`]: the finalizer's next step (see [`super::finalizer`]);
//! - [`target_change`]: the old target that uninstalls when the target changes;
//! - [`agent_not_connected`] and [`after`]: the hub condition and the requeue once a
//!   reconcile is over.
//!
//! Request tokens (`reconcile.fluxcd.io/requestedAt`, `forceAt`, `resetAt`) are not decided
//! here: they trigger a reconcile ([`super::watches`]) and travel in the plan; the agent
//! handles them and reports `lastHandled*`.

use super::*;

/// The outcome of a step that stops the reconcile with a hub condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stop {
    pub(super) reason: &'static str,
    pub(super) message: String,
    pub(super) stalled: bool,
    pub(super) requeue: Option<Duration>,
    /// Post an Event: `Some(true)` a Warning, `Some(false)` a Normal one.
    pub(super) event: Option<bool>,
    /// The Event's message when it is not the condition's.
    pub(super) event_message: Option<String>,
}

impl Stop {
    pub(super) fn new(reason: &'static str, message: String) -> Stop {
        Stop {
            reason,
            message,
            stalled: false,
            requeue: None,
            event: None,
            event_message: None,
        }
    }

    /// Flux's terminal `InvalidCELExpression`: `Ready=False` and `Stalled=True` with
    /// "Reconciliation failed terminally due to configuration error: <err>", a Warning
    /// Event with the error alone, no requeue until the object changes.
    pub(super) fn invalid_cel(error: &flotilla_agent::cel::CelError) -> Stop {
        let mut stop = Stop::new(
            reason::INVALID_CEL_EXPRESSION,
            format!("{TERMINAL_ERROR_MESSAGE}: {error}"),
        )
        .stalled()
        .warning();
        stop.event_message = Some(error.to_string());
        stop
    }

    /// A tenancy refusal ([`crate::tenancy`]): an operator's decision stalls with a Warning
    /// Event; both are looked at again after `requeue` (a binding may be created).
    pub(super) fn denied(denied: &crate::tenancy::Denied, requeue: Duration) -> Stop {
        let stop = Stop::new(denied.reason(), denied.to_string()).requeue(requeue);
        if denied.is_terminal() {
            stop.stalled().warning()
        } else {
            stop
        }
    }

    pub(super) fn requeue(mut self, d: Duration) -> Stop {
        self.requeue = Some(d);
        self
    }

    pub(super) fn stalled(mut self) -> Stop {
        self.stalled = true;
        self
    }

    pub(super) fn warning(mut self) -> Stop {
        self.event = Some(true);
        self
    }

    pub(super) fn normal_event(mut self) -> Stop {
        self.event = Some(false);
        self
    }
}

/// How a reconcile begins, from the object alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Entry {
    /// Being deleted: the finalizer's steps ([`finalizer_step`]); nothing else.
    Finalize,
    /// Suspended: the plan goes out with `suspend` set when it can be built (the agent
    /// holds it and stops reconciling it), its generation counts as observed, no requeue.
    Suspended {
        /// Add Flux's finalizer first.
        add_finalizer: bool,
        /// Not `spec.suspend` but the target: its ManagedCluster is paused (its Cluster API
        /// Cluster has `spec.paused`), so the object is held as if suspended until it is not.
        by_target: bool,
    },
    /// Plan and send.
    Reconcile {
        /// Add Flux's finalizer first.
        add_finalizer: bool,
    },
}

/// How a reconcile of an object `deleting` (a deletion timestamp), `finalized` (it has
/// Flux's finalizer) and `suspend`ed begins; `target_paused`: its target ManagedCluster is
/// paused ([`crate::onboarding::LABEL_PAUSED`]), which holds it as `suspend` does.
pub(super) fn entry(deleting: bool, finalized: bool, suspend: bool, target_paused: bool) -> Entry {
    let add_finalizer = !finalized;
    match (deleting, suspend, target_paused) {
        (true, _, _) => Entry::Finalize,
        (false, true, _) => Entry::Suspended {
            add_finalizer,
            by_target: false,
        },
        (false, false, true) => Entry::Suspended {
            add_finalizer,
            by_target: true,
        },
        (false, false, false) => Entry::Reconcile { add_finalizer },
    }
}

/// One `dependsOn` entry as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Dependency {
    /// It could not be read (the error, as a chain).
    Unreadable { error: String },
    /// Read, without `readyExpr`: Ready=True for its current generation or not.
    Read {
        generation: Option<i64>,
        observed_generation: Option<i64>,
        ready: bool,
    },
    /// Read, with `readyExpr`: the expression's answer, or why there is none.
    Expr(Result<bool, ReadyExpr>),
}

/// Why `readyExpr` gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ReadyExpr {
    /// It does not compile: terminal, Flux's `InvalidCELExpression` (the error's text).
    Terminal(String),
    /// Evaluating it failed (the dependency is not ready; Flux's message).
    Evaluate(String),
}

/// Whether dependency `ns/name`, as `read`, lets the reconcile go on; Flux's
/// `DependencyNotReady` (requeued after `requeue`, a Normal Event) or a terminal
/// `InvalidCELExpression` when not.
pub(super) fn dependency(
    ns: &str,
    name: &str,
    read: &Dependency,
    requeue: Duration,
) -> Result<(), Stop> {
    let not_ready = |message: String| {
        Stop::new(reason::DEPENDENCY_NOT_READY, message)
            .requeue(requeue)
            .normal_event()
    };
    match read {
        Dependency::Unreadable { error } => Err(not_ready(format!(
            "unable to get '{ns}/{name}' dependency: {error}"
        ))),
        Dependency::Expr(Ok(true)) => Ok(()),
        Dependency::Expr(Ok(false)) => Err(not_ready(format!(
            "dependency '{ns}/{name}' is not ready according to readyExpr eval"
        ))),
        Dependency::Expr(Err(ReadyExpr::Evaluate(message))) => Err(not_ready(message.clone())),
        Dependency::Expr(Err(ReadyExpr::Terminal(error))) => {
            let mut stop = Stop::new(
                reason::INVALID_CEL_EXPRESSION,
                format!("{TERMINAL_ERROR_MESSAGE}: {error}"),
            )
            .stalled()
            .warning();
            stop.event_message = Some(error.clone());
            Err(stop)
        }
        Dependency::Read {
            generation,
            observed_generation,
            ready,
        } => {
            let current = observed_generation.is_some() && generation == observed_generation;
            if current && *ready {
                Ok(())
            } else {
                Err(not_ready(format!("dependency '{ns}/{name}' is not ready")))
            }
        }
    }
}

/// Whether a source's status says it is ready; the message of its `Ready` condition when
/// not. Flux's rule (generation observed, not stalled, an artifact), and not `Ready=False`
/// for that generation: a HelmChart whose version no longer resolves keeps its last
/// artifact, and the HelmRelease says why rather than staying on the old chart silently.
pub(super) fn source_ready(
    generation: Option<i64>,
    observed: i64,
    conditions: &[Condition],
    artifact: Option<&Artifact>,
) -> Result<(), String> {
    let conditions = conditions.to_vec();
    let msg = conditions
        .get_condition(condition::READY)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    let failed = conditions
        .get_condition(condition::READY)
        .is_some_and(|c| c.status == flotilla_core::meta::ConditionStatus::False);
    let ready = generation.unwrap_or_default() == observed
        && !conditions.is_true(condition::STALLED)
        && !failed
        && artifact.is_some();
    if ready { Ok(()) } else { Err(msg) }
}

/// Flux's `SourceNotReady` for source `what` (`HelmChart 'ns/name'`) whose `Ready`
/// message is `message`, requeued after `requeue`.
pub(super) fn source_not_ready(what: &str, message: &str, requeue: Duration) -> Stop {
    let message = if message.is_empty() {
        format!("{what} is not ready")
    } else {
        format!("{what} is not ready: {message}")
    };
    Stop::new(reason::SOURCE_NOT_READY, message).requeue(requeue)
}

/// What the finalizer observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct FinalizerObserved {
    /// The object has Flux's finalizer.
    pub(super) finalized: bool,
    /// `spec.suspend`.
    pub(super) suspend: bool,
    /// A link to the target's agent was found.
    pub(super) linked: bool,
    /// That agent holds a plan of the object.
    pub(super) held: bool,
    /// The status names a storage namespace (something was installed).
    pub(super) installed: bool,
    /// The agent reported the deletion of this revision (or a later one).
    pub(super) deleted: bool,
    /// The status names a managed HelmChart.
    pub(super) helm_chart: bool,
    /// The target is a ManagedCluster that is being deleted or does not exist (its Cluster
    /// API Cluster is going away): nothing is uninstalled from it.
    pub(super) target_gone: bool,
}

/// The finalizer's next step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FinalizerStep {
    /// Not ours (no finalizer): nothing to do.
    NotOurs,
    /// Ask the agent to uninstall, and look again (its `Deleted` report reconciles).
    Uninstall,
    /// The target ManagedCluster is being deleted or gone: let the object go without an
    /// uninstall (the workload cluster goes with it), saying so in a Normal Event; the agent,
    /// if still linked, forgets the plan, and the managed HelmChart is deleted as on release.
    Drop {
        forget_plan: bool,
        delete_helm_chart: bool,
    },
    /// Let the object go: tell the agent to forget the plan (nothing uninstalled) when
    /// `forget_plan`, delete the managed HelmChart when `delete_helm_chart`, then remove the
    /// finalizer and forget the object.
    Release {
        forget_plan: bool,
        delete_helm_chart: bool,
    },
}

/// The finalizer's next step given what it observed.
pub(super) fn finalizer_step(o: FinalizerObserved) -> FinalizerStep {
    if !o.finalized {
        return FinalizerStep::NotOurs;
    }
    if o.target_gone {
        return FinalizerStep::Drop {
            forget_plan: o.linked,
            delete_helm_chart: !o.suspend && o.helm_chart,
        };
    }
    let wait = !o.suspend && (o.held || o.installed) && o.linked;
    if wait && !o.deleted {
        return FinalizerStep::Uninstall;
    }
    FinalizerStep::Release {
        // Suspended or never installed: the agent forgets the plan.
        forget_plan: !wait && o.linked,
        // A suspended object's HelmChart is left alone, as Flux leaves it.
        delete_helm_chart: !o.suspend && o.helm_chart,
    }
}

/// The target that uninstalls because the HelmRelease moved from `previous` to `now`
/// (the release-target change within one cluster is the agent's: core's state machine).
pub(super) fn target_change<'a>(
    previous: Option<&'a TargetId>,
    now: &TargetId,
) -> Option<&'a TargetId> {
    previous.filter(|p| *p != now)
}

/// The hub condition of a plan sent to cluster `cluster` whose agent is not connected.
pub(super) fn agent_not_connected(cluster: &ClusterId, generation: i64) -> HubCondition {
    HubCondition {
        reason: AGENT_NOT_CONNECTED.into(),
        message: format!("no agent connected for cluster {cluster}"),
        stalled: false,
        generation,
        cleared_by_agent_report: true,
    }
}

/// When to reconcile again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Requeue {
    /// After this long.
    After(Duration),
    /// At `spec.interval`, with jitter.
    Interval,
    /// Only when the object changes.
    Never,
}

/// What a reconcile leaves: the hub condition to write (`None` clears it) and when to look
/// again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct After {
    pub(super) hub: Option<HubCondition>,
    pub(super) requeue: Requeue,
}

/// What a reconcile of generation `generation` leaves, given how planning ended: sent
/// (with the hub condition of a target not connected yet), or stopped by a hub condition.
pub(super) fn after(
    outcome: Result<Option<HubCondition>, &Stop>,
    generation: i64,
    requeue_dependency: Duration,
) -> After {
    match outcome {
        // Not connected yet: look again soon to clear the condition once it is.
        Ok(Some(hub)) => After {
            hub: Some(hub),
            requeue: Requeue::After(requeue_dependency),
        },
        Ok(None) => After {
            hub: None,
            requeue: Requeue::Interval,
        },
        Err(stop) => After {
            hub: Some(HubCondition {
                reason: stop.reason.to_owned(),
                message: stop.message.clone(),
                stalled: stop.stalled,
                generation,
                cleared_by_agent_report: false,
            }),
            requeue: match stop.requeue {
                Some(d) => Requeue::After(d),
                None if stop.stalled => Requeue::Never,
                None => Requeue::Interval,
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQUEUE: Duration = Duration::from_secs(30);

    #[test]
    fn the_entry_table_deletion_first_then_the_finalizer_and_suspend() {
        let reconcile = |add_finalizer| Entry::Reconcile { add_finalizer };
        let suspended = |add_finalizer, by_target| Entry::Suspended {
            add_finalizer,
            by_target,
        };
        let cases = [
            ((true, true, false, false), Entry::Finalize),
            ((true, false, true, false), Entry::Finalize),
            ((true, true, false, true), Entry::Finalize),
            ((false, true, false, false), reconcile(false)),
            ((false, false, false, false), reconcile(true)),
            ((false, true, true, false), suspended(false, false)),
            ((false, false, true, false), suspended(true, false)),
            // A paused target holds the object as suspend does; its own suspend comes first.
            ((false, true, false, true), suspended(false, true)),
            ((false, false, false, true), suspended(true, true)),
            ((false, true, true, true), suspended(false, false)),
        ];
        for ((deleting, finalized, suspend, paused), want) in cases {
            assert_eq!(
                entry(deleting, finalized, suspend, paused),
                want,
                "deleting {deleting}, finalized {finalized}, suspend {suspend}, target paused {paused}"
            );
        }
    }

    #[test]
    fn the_dependency_table_gives_fluxs_reasons_and_messages() {
        let not_ready = |m: &str| {
            Err(Stop::new(reason::DEPENDENCY_NOT_READY, m.to_owned())
                .requeue(REQUEUE)
                .normal_event())
        };
        let read = |generation: i64, observed: Option<i64>, ready: bool| Dependency::Read {
            generation: Some(generation),
            observed_generation: observed,
            ready,
        };
        let mut terminal = Stop::new(
            reason::INVALID_CEL_EXPRESSION,
            format!("{TERMINAL_ERROR_MESSAGE}: failed to evaluate dependency db: bad"),
        )
        .stalled()
        .warning();
        terminal.event_message = Some("failed to evaluate dependency db: bad".into());
        let cases: Vec<(&str, Dependency, Result<(), Stop>)> = vec![
            ("ready for its generation", read(2, Some(2), true), Ok(())),
            (
                "ready for an older generation",
                read(3, Some(2), true),
                not_ready("dependency 'infra/db' is not ready"),
            ),
            (
                "never observed",
                read(1, None, false),
                not_ready("dependency 'infra/db' is not ready"),
            ),
            (
                "Ready=False",
                read(2, Some(2), false),
                not_ready("dependency 'infra/db' is not ready"),
            ),
            (
                "not found",
                Dependency::Unreadable {
                    error: "helmreleases \"db\" not found".into(),
                },
                not_ready("unable to get 'infra/db' dependency: helmreleases \"db\" not found"),
            ),
            ("readyExpr true", Dependency::Expr(Ok(true)), Ok(())),
            (
                "readyExpr false",
                Dependency::Expr(Ok(false)),
                not_ready("dependency 'infra/db' is not ready according to readyExpr eval"),
            ),
            (
                "readyExpr failing to evaluate",
                Dependency::Expr(Err(ReadyExpr::Evaluate("no such key: x".into()))),
                not_ready("no such key: x"),
            ),
            (
                "readyExpr not compiling",
                Dependency::Expr(Err(ReadyExpr::Terminal(
                    "failed to evaluate dependency db: bad".into(),
                ))),
                Err(terminal),
            ),
        ];
        for (name, read, want) in cases {
            assert_eq!(dependency("infra", "db", &read, REQUEUE), want, "{name}");
        }
    }

    #[test]
    fn a_source_not_ready_says_which_and_why_and_is_requeued() {
        let stop = source_not_ready("HelmChart 'default/default-podinfo'", "", REQUEUE);
        assert_eq!(stop.reason, reason::SOURCE_NOT_READY);
        assert_eq!(
            stop.message,
            "HelmChart 'default/default-podinfo' is not ready"
        );
        assert_eq!(stop.requeue, Some(REQUEUE));
        assert!(!stop.stalled);
        let stop = source_not_ready("OCIRepository 'flux/podinfo'", "no tag 9.9.9", REQUEUE);
        assert_eq!(
            stop.message,
            "OCIRepository 'flux/podinfo' is not ready: no tag 9.9.9"
        );
    }

    #[test]
    fn the_finalizer_table_uninstalls_through_a_linked_agent_and_lets_go_otherwise() {
        let base = FinalizerObserved {
            finalized: true,
            linked: true,
            installed: true,
            helm_chart: true,
            ..Default::default()
        };
        let release = |forget_plan, delete_helm_chart| FinalizerStep::Release {
            forget_plan,
            delete_helm_chart,
        };
        let cases: Vec<(&str, FinalizerObserved, FinalizerStep)> = vec![
            (
                "not ours",
                FinalizerObserved {
                    finalized: false,
                    ..base
                },
                FinalizerStep::NotOurs,
            ),
            ("installed: uninstall first", base, FinalizerStep::Uninstall),
            (
                "held, not installed yet: uninstall",
                FinalizerObserved {
                    installed: false,
                    held: true,
                    ..base
                },
                FinalizerStep::Uninstall,
            ),
            (
                "the agent reported the deletion",
                FinalizerObserved {
                    deleted: true,
                    ..base
                },
                release(false, true),
            ),
            (
                "suspended: the agent forgets, the HelmChart stays",
                FinalizerObserved {
                    suspend: true,
                    ..base
                },
                release(true, false),
            ),
            (
                "never installed nor held: the agent forgets",
                FinalizerObserved {
                    installed: false,
                    ..base
                },
                release(true, true),
            ),
            (
                "no link: nothing to tell",
                FinalizerObserved {
                    linked: false,
                    ..base
                },
                release(false, true),
            ),
            (
                "no HelmChart",
                FinalizerObserved {
                    deleted: true,
                    helm_chart: false,
                    ..base
                },
                release(false, false),
            ),
            (
                "target ManagedCluster deleting or gone: dropped, no uninstall",
                FinalizerObserved {
                    target_gone: true,
                    ..base
                },
                FinalizerStep::Drop {
                    forget_plan: true,
                    delete_helm_chart: true,
                },
            ),
            (
                "target gone, held, not linked any more: dropped",
                FinalizerObserved {
                    target_gone: true,
                    linked: false,
                    held: true,
                    ..base
                },
                FinalizerStep::Drop {
                    forget_plan: false,
                    delete_helm_chart: true,
                },
            ),
            (
                "target gone, suspended: dropped, the HelmChart stays",
                FinalizerObserved {
                    target_gone: true,
                    suspend: true,
                    ..base
                },
                FinalizerStep::Drop {
                    forget_plan: true,
                    delete_helm_chart: false,
                },
            ),
            (
                "target gone, not ours: still not ours",
                FinalizerObserved {
                    target_gone: true,
                    finalized: false,
                    ..base
                },
                FinalizerStep::NotOurs,
            ),
        ];
        for (name, observed, want) in cases {
            assert_eq!(finalizer_step(observed), want, "{name}");
        }
    }

    #[test]
    fn only_a_change_of_target_uninstalls_from_the_old_one() {
        let a = TargetId::Cluster(ClusterId::new("a".to_owned()).expect("a cluster id"));
        let b = TargetId::Local;
        assert_eq!(target_change(None, &a), None, "the first plan");
        assert_eq!(target_change(Some(&a), &a), None, "the same target");
        assert_eq!(target_change(Some(&a), &b), Some(&a), "moved: a uninstalls");
    }

    #[test]
    fn after_a_reconcile_the_condition_and_requeue_follow_the_outcome() {
        let cluster = ClusterId::new("edge-1".to_owned()).expect("a cluster id");
        let away = agent_not_connected(&cluster, 3);
        assert_eq!(away.reason, AGENT_NOT_CONNECTED);
        assert_eq!(away.message, "no agent connected for cluster edge-1");
        assert!(away.cleared_by_agent_report && !away.stalled);
        let hub = |reason: &str, message: &str, stalled: bool| HubCondition {
            reason: reason.into(),
            message: message.into(),
            stalled,
            generation: 3,
            cleared_by_agent_report: false,
        };
        let values = Stop::new(reason::VALUES_ERROR, "bad".into()).requeue(REQUEUE);
        let invalid = Stop::new(INVALID_SPEC, "spec.x".into()).stalled();
        let artifact = Stop::new(reason::ARTIFACT_FAILED, "digest".into());
        type Case<'a> = (&'a str, Result<Option<HubCondition>, &'a Stop>, After);
        let cases: Vec<Case<'_>> = vec![
            (
                "sent",
                Ok(None),
                After {
                    hub: None,
                    requeue: Requeue::Interval,
                },
            ),
            (
                "sent, agent away",
                Ok(Some(away.clone())),
                After {
                    hub: Some(away.clone()),
                    requeue: Requeue::After(REQUEUE),
                },
            ),
            (
                "stopped with a requeue",
                Err(&values),
                After {
                    hub: Some(hub(reason::VALUES_ERROR, "bad", false)),
                    requeue: Requeue::After(REQUEUE),
                },
            ),
            (
                "stalled: only a change helps",
                Err(&invalid),
                After {
                    hub: Some(hub(INVALID_SPEC, "spec.x", true)),
                    requeue: Requeue::Never,
                },
            ),
            (
                "stopped, not stalled, no requeue: the interval",
                Err(&artifact),
                After {
                    hub: Some(hub(reason::ARTIFACT_FAILED, "digest", false)),
                    requeue: Requeue::Interval,
                },
            ),
        ];
        for (name, outcome, want) in cases {
            assert_eq!(after(outcome, 3, REQUEUE), want, "{name}");
        }
    }
}
