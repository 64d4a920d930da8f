//! `flotilla-agent run`: the long-lived agent. On start it lists the plan store in its
//! namespace and resumes every held plan (with no hub and no files), reconciles each on
//! its interval with retries and drift correction, serves metrics and health, and on
//! SIGTERM stops taking work, lets the Helm actions in flight finish (within the grace
//! period) and exits 0. The hub session plugs in here as one more client of the runtime.

use flotilla_core::agent::Report;

use std::sync::Arc;

use super::ChartCache;
use super::apply::Signals;
use crate::reconcile::Context;
use crate::runtime::{Agent, AgentOptions};
use crate::telemetry::Health;

/// Runs until a signal.
pub async fn run(
    ctx: Context,
    charts: Arc<ChartCache>,
    options: AgentOptions,
    health: Health,
) -> anyhow::Result<()> {
    let mut signals = Signals::new()?;
    let (agent, mut reports) = Agent::start(ctx, charts, options).await?;
    health.set_ready(true);
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
