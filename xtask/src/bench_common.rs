//! What the cluster benchmarks share (`bench-agent`, `bench-flux`, `bench-fleet`,
//! `bench-sessions`): the releases they create, figures of a process read from
//! `/proc/<pid>`, the machine's load, what the installs cost the local cluster's control
//! plane (its processes' CPU time and the API server's requests by verb), the bench
//! namespace, and a watch of the HelmReleases that turn Ready.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;

/// The name of the `i`th benchmark release: `bench-000`, `bench-001`, ...
pub fn release_name(i: usize) -> String {
    format!("bench-{i:03}")
}

/// The values of the `i`th benchmark release: one pod annotation that makes each release's
/// manifests distinct (so no two releases render the same objects).
pub fn release_values(i: usize) -> serde_json::Value {
    serde_json::json!({ "podAnnotations": { "bench/index": i.to_string() } })
}

/// The 1-minute load average of the machine.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// A field of `/proc/<pid>/status` in KiB (or a plain count, such as `Threads:`).
pub fn proc_status_kib(pid: u32, key: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("/proc/{pid}/status has no {key}"))
}

/// User plus system CPU time of a process.
pub fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    Ok(cpu_time_of_stat(&stat))
}

/// User plus system CPU time from the text of a `/proc/<pid>/stat`.
fn cpu_time_of_stat(stat: &str) -> Duration {
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks = |i: usize| -> u64 { fields.get(i).and_then(|v| v.parse().ok()).unwrap_or(0) };
    // utime and stime are fields 14 and 15 of the line, 11 and 12 after the name.
    let total = ticks(11) + ticks(12);
    // The kernel's USER_HZ is 100 on every Linux this runs on.
    Duration::from_millis(total * 10)
}

/// KiB as MiB with one decimal.
pub fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// A fresh, empty directory under the temp dir, named after `prefix` and this process.
pub fn tempfile_dir(prefix: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// The local cluster's processes and API, to measure what the installs cost the control plane.
pub struct ControlPlane {
    pub pids: Vec<(String, u32)>,
    pub client: kube::Client,
}

/// CPU time of each control-plane process and the API server's request counts at one moment.
#[derive(Debug, Clone)]
pub struct PlaneSample {
    cpu: Vec<(String, Duration)>,
    /// `apiserver_request_total` summed by verb.
    requests: BTreeMap<String, f64>,
    /// `apiserver_request_total` summed by verb and resource (`PATCH helmreleases/status`).
    by_resource: BTreeMap<String, f64>,
}

/// What the control plane did between two [`PlaneSample`]s.
#[derive(Debug, Clone, Default)]
pub struct PlaneDelta {
    /// CPU time used by each control-plane process (etcd, kube-apiserver, ...).
    pub cpu: Vec<(String, Duration)>,
    /// API server requests by verb.
    pub requests: BTreeMap<String, f64>,
    /// API server requests by verb and resource (`PATCH helmreleases/status`).
    pub by_resource: BTreeMap<String, f64>,
}

/// The verbs that change state.
const WRITE_VERBS: [&str; 5] = ["POST", "PUT", "PATCH", "APPLY", "DELETE"];
/// The verbs that only read.
const READ_VERBS: [&str; 3] = ["GET", "LIST", "WATCH"];

impl ControlPlane {
    /// Reads every process's CPU time and the API server's `/metrics`.
    pub async fn sample(&self) -> anyhow::Result<PlaneSample> {
        let mut cpu = Vec::new();
        for (name, pid) in &self.pids {
            cpu.push((name.clone(), cpu_time(*pid)?));
        }
        let request = http::Request::get("/metrics")
            .body(Vec::new())
            .context("building the /metrics request")?;
        let text = self
            .client
            .request_text(request)
            .await
            .context("reading the API server's /metrics")?;
        Ok(PlaneSample {
            cpu,
            requests: requests_by_verb(&text),
            by_resource: requests_by_resource(&text),
        })
    }
}

/// Sums the API server's `apiserver_request_total` series by their `verb` label.
fn requests_by_verb(metrics: &str) -> BTreeMap<String, f64> {
    let mut by_verb = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let verb = labels
            .split(',')
            .find_map(|l| l.strip_prefix("verb=\""))
            .map(|v| v.trim_end_matches('"'));
        if let (Some(verb), Ok(value)) = (verb, value.trim().parse::<f64>()) {
            *by_verb.entry(verb.to_owned()).or_insert(0.0) += value;
        }
    }
    by_verb
}

/// Sums the API server's `apiserver_request_total` series by verb and resource
/// (`VERB resource` or `VERB resource/subresource`).
fn requests_by_resource(metrics: &str) -> BTreeMap<String, f64> {
    let mut by = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        let (verb, resource, sub) = (
            label("verb=\""),
            label("resource=\""),
            label("subresource=\""),
        );
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let key = if sub.is_empty() {
            format!("{verb} {resource}")
        } else {
            format!("{verb} {resource}/{sub}")
        };
        *by.entry(key).or_insert(0.0) += value;
    }
    by
}

impl PlaneSample {
    /// What happened between `before` and this sample.
    pub fn delta(&self, before: &PlaneSample) -> PlaneDelta {
        let cpu = self
            .cpu
            .iter()
            .map(|(name, cpu)| {
                let was = before
                    .cpu
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or(Duration::ZERO, |(_, c)| *c);
                (name.clone(), cpu.saturating_sub(was))
            })
            .collect();
        let requests = self
            .requests
            .iter()
            .map(|(verb, n)| {
                let was = before.requests.get(verb).copied().unwrap_or(0.0);
                (verb.clone(), n - was)
            })
            .collect();
        let by_resource = self
            .by_resource
            .iter()
            .map(|(key, n)| {
                let was = before.by_resource.get(key).copied().unwrap_or(0.0);
                (key.clone(), n - was)
            })
            .filter(|(_, n)| *n > 0.0)
            .collect();
        PlaneDelta {
            cpu,
            requests,
            by_resource,
        }
    }

    /// What happened between `before` and this sample, over `elapsed`, beside the CPU
    /// time `own_cpu` of the processes measured (named `own`), as report lines.
    pub fn since(
        &self,
        before: &PlaneSample,
        own: &[(&str, Duration)],
        elapsed: Duration,
    ) -> String {
        self.delta(before).report(own, elapsed)
    }
}

impl PlaneDelta {
    /// Requests of one verb.
    pub fn verb(&self, verb: &str) -> f64 {
        self.requests.get(verb).copied().unwrap_or(0.0)
    }

    /// Requests that change state (POST, PUT, PATCH, APPLY, DELETE).
    pub fn writes(&self) -> f64 {
        WRITE_VERBS.iter().map(|v| self.verb(v)).sum()
    }

    /// Requests that only read (GET, LIST, WATCH).
    pub fn reads(&self) -> f64 {
        READ_VERBS.iter().map(|v| self.verb(v)).sum()
    }

    /// CPU time of the whole control plane.
    pub fn cpu_total(&self) -> Duration {
        self.cpu.iter().map(|(_, c)| *c).sum()
    }

    /// Report lines: CPU seconds by process (the measured ones `own` first) and the API
    /// server's requests by verb, over `elapsed`.
    pub fn report(&self, own: &[(&str, Duration)], elapsed: Duration) -> String {
        let secs = elapsed.as_secs_f64();
        let mut out = format!("  during the phase ({secs:.1} s), CPU seconds by process:");
        let mut total = self.cpu_total().as_secs_f64();
        let mut first = true;
        for (name, cpu) in own
            .iter()
            .map(|(n, c)| (*n, *c))
            .chain(self.cpu.iter().map(|(n, c)| (n.as_str(), *c)))
        {
            let sep = if first { " " } else { ", " };
            first = false;
            out.push_str(&format!("{sep}{name} {:.1}", cpu.as_secs_f64()));
        }
        total += own.iter().map(|(_, c)| c.as_secs_f64()).sum::<f64>();
        out.push_str(&format!(
            " (together {total:.1} s = {:.2} of the machine's cores on average)",
            total / secs
        ));
        let writes = self.writes();
        out.push_str(&format!(
            "\n  API server requests in that phase (apiserver_request_total, every client): {writes:.0} writes ({:.0}/s: POST {:.0}, PUT {:.0}, PATCH {:.0}, APPLY {:.0}, DELETE {:.0}), {:.0} reads (GET {:.0}, LIST {:.0}, WATCH {:.0})",
            writes / secs,
            self.verb("POST"),
            self.verb("PUT"),
            self.verb("PATCH"),
            self.verb("APPLY"),
            self.verb("DELETE"),
            self.reads(),
            self.verb("GET"),
            self.verb("LIST"),
            self.verb("WATCH"),
        ));
        let mut writes: Vec<(&String, f64)> = self
            .by_resource
            .iter()
            .filter(|(k, _)| {
                WRITE_VERBS
                    .iter()
                    .chain(["GET"].iter())
                    .any(|v| k.starts_with(&format!("{v} ")))
            })
            .map(|(k, n)| (k, *n))
            .collect();
        writes.sort_by(|a, b| b.1.total_cmp(&a.1));
        if !writes.is_empty() {
            out.push_str("\n  writes and GETs by resource:");
            for (i, (k, n)) in writes.iter().take(12).enumerate() {
                out.push_str(&format!("{} {k} {n:.0}", if i == 0 { "" } else { "," }));
            }
        }
        out
    }
}

/// Creates namespace `name` (present already is fine).
pub async fn ensure_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
    let namespace = serde_json::from_value(serde_json::json!({ "metadata": { "name": name } }))?;
    match api
        .create(&kube::api::PostParams::default(), &namespace)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e).context(format!("creating the namespace {name}")),
    }
}

/// Watches the HelmReleases (`resource`) of `namespace` and calls `on_ready` with each one
/// seen Ready (`bench_flux::is_ready`) and the moment it was seen, until the task is
/// aborted. Watch errors are printed under `bench` and the watch goes on.
pub fn watch_ready_releases(
    client: kube::Client,
    namespace: &str,
    resource: &kube::discovery::ApiResource,
    bench: &'static str,
    mut on_ready: impl FnMut(&kube::api::DynamicObject, std::time::Instant) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    use futures::StreamExt as _;
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(client, namespace, resource);
    tokio::spawn(async move {
        let mut events =
            kube::runtime::watcher::watcher(api, kube::runtime::watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            let object = match event {
                Ok(
                    kube::runtime::watcher::Event::Apply(o)
                    | kube::runtime::watcher::Event::InitApply(o),
                ) => o,
                Ok(_) => continue,
                Err(e) => {
                    eprintln!("{bench}: watch of the HelmReleases: {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            if crate::bench_flux::is_ready(&object) {
                on_ready(&object, std::time::Instant::now());
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_server_requests_are_summed_by_verb() {
        // The exposition format of kube-apiserver's /metrics, trimmed.
        let metrics = "\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code=\"201\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"resource\",subresource=\"\",verb=\"POST\",version=\"v1\"} 12
apiserver_request_total{code=\"201\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"events\",scope=\"resource\",subresource=\"\",verb=\"POST\",version=\"v1\"} 30
apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"apps\",resource=\"deployments\",scope=\"resource\",subresource=\"\",verb=\"APPLY\",version=\"v1\"} 9
apiserver_request_total_other{verb=\"GET\"} 5
apiserver_request_duration_seconds_bucket{verb=\"GET\",le=\"0.1\"} 3
";
        let by_verb = requests_by_verb(metrics);
        assert_eq!(by_verb.get("POST"), Some(&42.0));
        assert_eq!(by_verb.get("APPLY"), Some(&9.0));
        assert_eq!(by_verb.get("GET"), None);
        let by_resource = requests_by_resource(metrics);
        assert_eq!(by_resource.get("POST pods"), Some(&12.0));
        assert_eq!(by_resource.get("APPLY deployments"), Some(&9.0));
    }

    #[test]
    fn a_delta_of_two_samples_counts_writes_and_reads_apart() {
        let sample = |post: f64, list: f64, etcd_ms: u64| PlaneSample {
            cpu: vec![("etcd".to_owned(), Duration::from_millis(etcd_ms))],
            requests: [("POST".to_owned(), post), ("LIST".to_owned(), list)]
                .into_iter()
                .collect(),
            by_resource: BTreeMap::new(),
        };
        let delta = sample(50.0, 7.0, 1500).delta(&sample(20.0, 5.0, 1000));
        assert_eq!(delta.writes(), 30.0);
        assert_eq!(delta.reads(), 2.0);
        assert_eq!(delta.cpu_total(), Duration::from_millis(500));
    }

    #[test]
    fn cpu_time_is_read_after_a_command_name_with_spaces() {
        // /proc/PID/stat (proc(5)): utime 150 and stime 50 ticks, fields 14 and 15.
        let stat = "4242 (source controller) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 12 0 100 0 0";
        assert_eq!(cpu_time_of_stat(stat), Duration::from_secs(2));
    }
}
