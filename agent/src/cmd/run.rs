//! `flotilla-agent run`: the long-lived agent. On start it lists the plan store in its
//! namespace and resumes every held plan (with no hub and no files), reconciles each on
//! its interval with retries and drift correction, serves metrics and health, and on
//! SIGTERM stops taking work, lets the Helm actions in flight finish (within the grace
//! period) and exits 0. When the agent has joined a hub ([`crate::session`]), the session
//! is one more client of the runtime: it takes the runtime's reports and feeds it plans.

use flotilla_core::agent::Report;

use std::sync::Arc;

use super::ChartCache;
use super::apply::Signals;
use crate::reconcile::Context;
use crate::runtime::{Agent, AgentOptions};
use crate::session::{Identity, SessionOptions};
use crate::telemetry::Health;

/// The hub session to run with the agent.
#[derive(Debug, Clone)]
pub struct WithSession {
    /// The joined identity.
    pub identity: Identity,
    /// Heartbeats, backoff, namespace.
    pub options: SessionOptions,
}

/// Runs until a signal.
pub async fn run(
    ctx: Context,
    charts: Arc<ChartCache>,
    options: AgentOptions,
    health: Health,
    session: Option<WithSession>,
) -> anyhow::Result<()> {
    let mut signals = Signals::new()?;
    let client = ctx.cluster.client().clone();
    let cache = charts.clone();
    let (agent, mut reports) = Agent::start(ctx, charts, options).await?;
    health.set_ready(true);
    if let Some(mut session) = session {
        session.options.charts = Some(cache);
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(crate::session::run(
            client,
            session.identity,
            agent.clone(),
            reports,
            session.options,
            stop.clone(),
        ));
        if signals.recv().await {
            tracing::info!("stopping on a signal");
        }
        health.set_ready(false);
        agent.shutdown()?;
        // The session ends when the runtime's reports do (its last statuses sent if it can).
        let _ = task.await;
        stop.cancel();
        return Ok(());
    }
    let mut stopping = false;
    loop {
        tokio::select! {
            report = reports.recv() => match report {
                Some(Report::Rejected { object, error, .. }) => {
                    tracing::warn!(object = %object, %error, "plan rejected");
                }
                Some(_) => {}
                None => break,
            },
            stop = signals.recv(), if !stopping => {
                if stop {
                    tracing::info!("stopping on a signal");
                    stopping = true;
                    health.set_ready(false);
                    agent.shutdown()?;
                }
            }
        }
    }
    Ok(())
}
