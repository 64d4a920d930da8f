//! The agent's Prometheus metrics: one registry, built once, and the methods the runtime calls.

use std::fmt;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// Upper bounds (seconds) of the reconcile duration buckets: from a no-op reconcile (1 ms)
/// to the longest Helm wait the agent allows by default (10 min), about three per decade.
const RECONCILE_BUCKETS: [f64; 18] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0,
];

/// The reconcile results the runtime reports; their series exist (at zero) from the start, so
/// that `rate()` and alerts see them before the first reconcile of each kind.
const RECONCILE_RESULTS: [&str; 3] = ["success", "failure", "stalled"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    action: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReceivedLabels {
    result: &'static str,
}

/// What became of a chart archive the hub sent along with a plan
/// ([`Metrics::chart_received`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChartReceived {
    /// Checked against the plan's digest, loaded and written to the chart cache.
    Cached,
    /// Dropped (wrong digest, not a chart, or the cache could not keep it): the runtime
    /// fetches the chart with `GetChart` instead.
    Rejected,
}

impl ChartReceived {
    const ALL: [ChartReceived; 2] = [ChartReceived::Cached, ChartReceived::Rejected];

    fn label(self) -> &'static str {
        match self {
            ChartReceived::Cached => "cached",
            ChartReceived::Rejected => "rejected",
        }
    }
}

fn reconcile_histogram() -> Histogram {
    Histogram::new(RECONCILE_BUCKETS)
}

/// The agent's metrics, registered once when built. Cloning is cheap (every metric is an
/// `Arc` inside) and every clone updates the same series, so the runtime keeps one clone per
/// task. The exposition (see [`Metrics::encode`]) holds exactly these series:
///
/// | series | type | labels | updated by |
/// |---|---|---|---|
/// | `flotilla_agent_reconcile_duration_seconds` | histogram, 1 ms .. 10 min | `result` (`success`, `failure`, `stalled`) | [`observe_reconcile`](Self::observe_reconcile) |
/// | `flotilla_agent_action_total` | counter | `action` (`install`, `upgrade`, `test`, `rollback`, `uninstall`, `unlock`, `drift-correct`, ...), `result` (`success`, `failure`) | [`action`](Self::action) |
/// | `flotilla_agent_queue_depth` | gauge | | [`set_queue_depth`](Self::set_queue_depth) |
/// | `flotilla_agent_plans_held` | gauge | | [`set_plans_held`](Self::set_plans_held) |
/// | `flotilla_agent_drift_detected_total` | counter | | [`drift_detected`](Self::drift_detected) |
/// | `flotilla_agent_drift_corrected_total` | counter | | [`drift_corrected`](Self::drift_corrected) |
/// | `flotilla_agent_reconcile_errors_total` | counter | `kind` (a reconcile error's `kind()`) | [`reconcile_error`](Self::reconcile_error) |
/// | `flotilla_agent_chart_archives_received_total` | counter | `result` (`cached`, `rejected`) | [`chart_received`](Self::chart_received) |
/// | `flotilla_agent_certificate_expiry_timestamp_seconds` | gauge | | [`set_certificate_expiry`](Self::set_certificate_expiry) (0 until a session client has a certificate) |
///
/// Label values come from the runtime's fixed vocabularies, never from user input: each
/// distinct value is a series kept for the life of the process.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    reconcile_duration: Family<ResultLabels, Histogram, fn() -> Histogram>,
    actions: Family<ActionLabels, Counter>,
    queue_depth: Gauge,
    plans_held: Gauge,
    drift_detected: Counter,
    drift_corrected: Counter,
    reconcile_errors: Family<ErrorLabels, Counter>,
    charts_received: Family<ReceivedLabels, Counter>,
    certificate_expiry: Gauge,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics")
            .field("queue_depth", &self.queue_depth.get())
            .field("plans_held", &self.plans_held.get())
            .finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Builds the registry and registers every series. Call it once at start-up and clone
    /// the result: a second `Metrics` is a separate registry that `/metrics` does not serve.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        // prometheus-client appends `_total` to counters and the unit to the name itself.
        let reconcile_duration = Family::new_with_constructor(reconcile_histogram as fn() -> _);
        registry.register_with_unit(
            "flotilla_agent_reconcile_duration",
            "Duration of one release reconcile, by result",
            Unit::Seconds,
            reconcile_duration.clone(),
        );
        let actions = Family::<ActionLabels, Counter>::default();
        registry.register(
            "flotilla_agent_action",
            "Helm actions run, by action and result",
            actions.clone(),
        );
        let queue_depth = Gauge::default();
        registry.register(
            "flotilla_agent_queue_depth",
            "Releases waiting for a reconcile slot",
            queue_depth.clone(),
        );
        let plans_held = Gauge::default();
        registry.register(
            "flotilla_agent_plans_held",
            "Release plans the agent holds",
            plans_held.clone(),
        );
        let drift_detected = Counter::default();
        registry.register(
            "flotilla_agent_drift_detected",
            "Drift detections: releases whose cluster objects differ from their manifest",
            drift_detected.clone(),
        );
        let drift_corrected = Counter::default();
        registry.register(
            "flotilla_agent_drift_corrected",
            "Drift corrections applied",
            drift_corrected.clone(),
        );
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "flotilla_agent_reconcile_errors",
            "Reconcile errors, by kind",
            reconcile_errors.clone(),
        );
        let charts_received = Family::<ReceivedLabels, Counter>::default();
        registry.register(
            "flotilla_agent_chart_archives_received",
            "Chart archives the hub sent along with plans, by what became of them",
            charts_received.clone(),
        );
        let certificate_expiry = Gauge::default();
        registry.register_with_unit(
            "flotilla_agent_certificate_expiry_timestamp",
            "When the agent's client certificate expires, in Unix seconds (0: no certificate yet)",
            Unit::Seconds,
            certificate_expiry.clone(),
        );
        for received in ChartReceived::ALL {
            let _ = charts_received.get_or_create(&ReceivedLabels {
                result: received.label(),
            });
        }
        for result in RECONCILE_RESULTS {
            let _ = reconcile_duration.get_or_create(&ResultLabels {
                result: result.to_owned(),
            });
        }
        Self {
            registry: Arc::new(registry),
            reconcile_duration,
            actions,
            queue_depth,
            plans_held,
            drift_detected,
            drift_corrected,
            reconcile_errors,
            charts_received,
            certificate_expiry,
        }
    }

    /// Records when the session's client certificate expires.
    pub fn set_certificate_expiry(&self, at: std::time::SystemTime) {
        let secs = at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        self.certificate_expiry.set(secs);
    }

    /// Records one reconcile that took `seconds` and ended with `result`: `success`,
    /// `failure` or `stalled`.
    pub fn observe_reconcile(&self, result: &str, seconds: f64) {
        self.reconcile_duration
            .get_or_create(&ResultLabels {
                result: result.to_owned(),
            })
            .observe(seconds);
    }

    /// Counts one Helm action (`install`, `upgrade`, `test`, `rollback`, `uninstall`,
    /// `unlock`, `drift-correct`, ...) that succeeded (`ok`) or failed.
    pub fn action(&self, action: &str, ok: bool) {
        self.actions
            .get_or_create(&ActionLabels {
                action: action.to_owned(),
                result: if ok { "success" } else { "failure" },
            })
            .inc();
    }

    /// Sets how many releases wait for a reconcile slot.
    pub fn set_queue_depth(&self, n: usize) {
        self.queue_depth.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Sets how many release plans the agent holds.
    pub fn set_plans_held(&self, n: usize) {
        self.plans_held.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Counts one detection of drift.
    pub fn drift_detected(&self) {
        self.drift_detected.inc();
    }

    /// Counts one drift correction.
    pub fn drift_corrected(&self) {
        self.drift_corrected.inc();
    }

    /// Counts one reconcile error of `kind` (the error's `kind()`, a bounded label).
    pub fn reconcile_error(&self, kind: &'static str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels { kind })
            .inc();
    }

    /// Counts one chart archive received with a plan, by what became of it.
    pub fn chart_received(&self, received: ChartReceived) {
        self.charts_received
            .get_or_create(&ReceivedLabels {
                result: received.label(),
            })
            .inc();
    }

    /// The OpenMetrics text exposition of every series, ending in `# EOF`.
    ///
    /// # Errors
    ///
    /// Only if a series fails to encode, which the metric types registered here never do.
    pub fn encode(&self) -> Result<String, fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exposition's sample lines (not the `#` metadata), as `name{labels} value`.
    fn samples(metrics: &Metrics) -> Vec<String> {
        metrics
            .encode()
            .expect("encodes")
            .lines()
            .filter(|line| !line.starts_with('#'))
            .map(str::to_owned)
            .collect()
    }

    fn has(samples: &[String], line: &str) -> bool {
        samples.iter().any(|sample| sample == line)
    }

    #[test]
    fn a_new_registry_exposes_every_series_under_its_documented_name() {
        let text = Metrics::new().encode().expect("encodes");
        for (name, kind) in [
            ("flotilla_agent_reconcile_duration_seconds", "histogram"),
            ("flotilla_agent_queue_depth", "gauge"),
            ("flotilla_agent_plans_held", "gauge"),
            ("flotilla_agent_drift_detected", "counter"),
            ("flotilla_agent_drift_corrected", "counter"),
            ("flotilla_agent_chart_archives_received", "counter"),
            (
                "flotilla_agent_certificate_expiry_timestamp_seconds",
                "gauge",
            ),
        ] {
            let type_line = format!("# TYPE {name} {kind}\n");
            assert!(text.contains(&type_line), "no `{type_line}` in\n{text}");
        }
        assert!(text.contains("# UNIT flotilla_agent_reconcile_duration_seconds seconds\n"));
        assert!(!text.contains("_total_total"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");

        let samples = samples(&Metrics::new());
        for line in [
            "flotilla_agent_queue_depth 0",
            "flotilla_agent_plans_held 0",
            "flotilla_agent_certificate_expiry_timestamp_seconds 0",
            "flotilla_agent_drift_detected_total 0",
            "flotilla_agent_drift_corrected_total 0",
            r#"flotilla_agent_chart_archives_received_total{result="cached"} 0"#,
            r#"flotilla_agent_chart_archives_received_total{result="rejected"} 0"#,
        ] {
            assert!(has(&samples, line), "no `{line}` in {samples:#?}");
        }
        // The three reconcile results exist before any reconcile; a family without a series
        // (actions, errors) is left out of the exposition until its first call.
        for result in ["success", "failure", "stalled"] {
            let line =
                format!("flotilla_agent_reconcile_duration_seconds_count{{result=\"{result}\"}} 0");
            assert!(has(&samples, &line), "no `{line}` in {samples:#?}");
        }
        assert!(
            !samples
                .iter()
                .any(|s| s.starts_with("flotilla_agent_action_total"))
        );
        assert!(
            !samples
                .iter()
                .any(|s| s.starts_with("flotilla_agent_reconcile_errors_total"))
        );
        assert!(!text.contains("flotilla_agent_action"), "{text}");
    }

    #[test]
    fn calls_show_up_as_counts_and_values_on_their_labelled_series() {
        let metrics = Metrics::new();
        let runtime_clone = metrics.clone();
        runtime_clone.action("install", true);
        runtime_clone.action("upgrade", true);
        runtime_clone.action("upgrade", true);
        runtime_clone.action("upgrade", false);
        runtime_clone.action("drift-correct", true);
        runtime_clone.set_queue_depth(3);
        runtime_clone.set_plans_held(12);
        runtime_clone.drift_detected();
        runtime_clone.drift_detected();
        runtime_clone.drift_corrected();
        runtime_clone.reconcile_error("render");
        runtime_clone.reconcile_error("render");
        runtime_clone.reconcile_error("timeout");
        runtime_clone.chart_received(ChartReceived::Cached);
        runtime_clone.chart_received(ChartReceived::Cached);
        runtime_clone.chart_received(ChartReceived::Rejected);

        let text = metrics.encode().expect("encodes");
        for type_line in [
            "# TYPE flotilla_agent_action counter\n",
            "# TYPE flotilla_agent_reconcile_errors counter\n",
        ] {
            assert!(text.contains(type_line), "no `{type_line}` in\n{text}");
        }
        let samples = samples(&metrics);
        for line in [
            r#"flotilla_agent_action_total{action="install",result="success"} 1"#,
            r#"flotilla_agent_action_total{action="upgrade",result="success"} 2"#,
            r#"flotilla_agent_action_total{action="upgrade",result="failure"} 1"#,
            r#"flotilla_agent_action_total{action="drift-correct",result="success"} 1"#,
            "flotilla_agent_queue_depth 3",
            "flotilla_agent_plans_held 12",
            "flotilla_agent_drift_detected_total 2",
            "flotilla_agent_drift_corrected_total 1",
            r#"flotilla_agent_reconcile_errors_total{kind="render"} 2"#,
            r#"flotilla_agent_reconcile_errors_total{kind="timeout"} 1"#,
            r#"flotilla_agent_chart_archives_received_total{result="cached"} 2"#,
            r#"flotilla_agent_chart_archives_received_total{result="rejected"} 1"#,
        ] {
            assert!(has(&samples, line), "no `{line}` in {samples:#?}");
        }
        let actions = samples
            .iter()
            .filter(|s| s.starts_with("flotilla_agent_action_total"))
            .count();
        assert_eq!(actions, 4, "{samples:#?}");

        // A gauge is set, not added to.
        metrics.set_queue_depth(0);
        assert!(has(
            &self::samples(&metrics),
            "flotilla_agent_queue_depth 0"
        ));
    }

    #[test]
    fn reconcile_durations_fall_in_buckets_from_a_millisecond_to_ten_minutes() {
        let metrics = Metrics::new();
        metrics.observe_reconcile("success", 0.0004);
        metrics.observe_reconcile("success", 0.2);
        metrics.observe_reconcile("success", 45.0);
        metrics.observe_reconcile("failure", 900.0);
        metrics.observe_reconcile("stalled", 600.0);

        let samples = samples(&metrics);
        let bucket = |result: &str, le: &str| {
            format!(
                "flotilla_agent_reconcile_duration_seconds_bucket{{le=\"{le}\",result=\"{result}\"}}"
            )
        };
        for (result, le, count) in [
            ("success", "0.001", 1),
            ("success", "0.25", 2),
            ("success", "30.0", 2),
            ("success", "60.0", 3),
            ("success", "+Inf", 3),
            ("failure", "600.0", 0),
            ("failure", "+Inf", 1),
            ("stalled", "300.0", 0),
            ("stalled", "600.0", 1),
        ] {
            let line = format!("{} {count}", bucket(result, le));
            assert!(has(&samples, &line), "no `{line}` in {samples:#?}");
        }
        let buckets = samples
            .iter()
            .filter(|s| s.starts_with("flotilla_agent_reconcile_duration_seconds_bucket{"))
            .filter(|s| s.contains("result=\"success\""))
            .count();
        assert_eq!(buckets, RECONCILE_BUCKETS.len() + 1, "{samples:#?}");
        for line in [
            r#"flotilla_agent_reconcile_duration_seconds_count{result="success"} 3"#,
            r#"flotilla_agent_reconcile_duration_seconds_count{result="failure"} 1"#,
            r#"flotilla_agent_reconcile_duration_seconds_sum{result="failure"} 900.0"#,
        ] {
            assert!(has(&samples, line), "no `{line}` in {samples:#?}");
        }
    }
}
