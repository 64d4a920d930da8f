//! What the benchmarks share: figures of a process from `/proc` (RSS, CPU time, where the
//! resident pages are), the machine's load, and the local cluster's control plane (CPU time
//! of each process, the API server's requests by verb).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;

/// The 1-minute load average of the machine.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

pub(crate) fn proc_status_kib(pid: u32, key: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("/proc/{pid}/status has no {key}"))
}

/// User plus system CPU time of a process.
pub(crate) fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks = |i: usize| -> u64 { fields.get(i).and_then(|v| v.parse().ok()).unwrap_or(0) };
    // utime and stime are fields 14 and 15 of the line, 11 and 12 after the name.
    let total = ticks(11) + ticks(12);
    // The kernel's USER_HZ is 100 on every Linux this runs on.
    Ok(Duration::from_millis(total * 10))
}

pub(crate) fn stats(mut ms: Vec<u64>) -> String {
    if ms.is_empty() {
        return "none".into();
    }
    ms.sort_unstable();
    let mean = ms.iter().sum::<u64>() as f64 / ms.len() as f64;
    let p = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    format!(
        "mean {mean:.0} ms, median {} ms, p95 {} ms, max {} ms",
        p(0.5),
        p(0.95),
        ms[ms.len() - 1]
    )
}

pub(crate) fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// Resident pages of one kind of mapping, in KiB.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Pages {
    rss: u64,
    private: u64,
    shared: u64,
}

/// The mapping kinds of the idle breakdown, in report order.
const KINDS: [&str; 6] = [
    "the binary (file)",
    "other files (libc, ...)",
    "[heap] (main arena)",
    "anonymous (other arenas, mmap)",
    "thread stacks ([stack] + guard-page maps)",
    "kernel ([vdso], [vvar], ...)",
];

/// Sums `/proc/<pid>/smaps` by mapping kind (see [`KINDS`]); `exe` is the binary's path.
/// An anonymous map directly above a one-page `---p` map (glibc's guard page) is counted as
/// a thread stack; larger `---p` maps are reserved, untouched address space (arenas).
fn smaps_totals(smaps: &str, exe: &str) -> [Pages; KINDS.len()] {
    let mut totals = [Pages::default(); KINDS.len()];
    let mut kind = None;
    let mut after_guard = false;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        if first.contains('-') && !first.ends_with(':') {
            // A mapping header: `start-end perms offset dev inode [path]`.
            let perms = fields.next().unwrap_or_default();
            let path = fields.nth(3).unwrap_or_default();
            kind = Some(if path == exe {
                0
            } else if path.starts_with('/') {
                1
            } else if path == "[heap]" {
                2
            } else if path == "[stack]" || (path.is_empty() && after_guard) {
                4
            } else if path.is_empty() {
                3
            } else {
                5
            });
            after_guard = path.is_empty() && perms == "---p" && map_bytes(first) == Some(4096);
            continue;
        }
        let Some(k) = kind else { continue };
        let kib: u64 = fields.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        match first {
            "Rss:" => totals[k].rss += kib,
            "Private_Clean:" | "Private_Dirty:" => totals[k].private += kib,
            "Shared_Clean:" | "Shared_Dirty:" => totals[k].shared += kib,
            _ => {}
        }
    }
    totals
}

/// The size of a smaps `start-end` address range.
fn map_bytes(range: &str) -> Option<u64> {
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    u64::from_str_radix(end, 16).ok()?.checked_sub(start)
}

/// The idle breakdown's report lines.
pub(crate) fn smaps_breakdown(smaps: &str, exe: &str) -> String {
    let totals = smaps_totals(smaps, exe);
    let mut out = String::from("  idle RSS by mapping (/proc/PID/smaps; Rss = Private + Shared):");
    for (name, t) in KINDS.iter().zip(totals) {
        out.push_str(&format!(
            "\n    {name:<42} Rss {:>6} KiB  Private {:>6} KiB  Shared {:>6} KiB",
            t.rss, t.private, t.shared
        ));
    }
    out
}

pub(crate) fn tempfile_dir(prefix: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The local cluster's processes and API, to measure what the installs cost the control plane.
pub(crate) struct ControlPlane<'a> {
    pub(crate) pids: Vec<(String, u32)>,
    pub(crate) client: kube::Client,
    pub(crate) runtime: &'a tokio::runtime::Runtime,
}

/// CPU time of each control-plane process and the API server's request counts at one moment.
#[derive(Debug, Clone)]
pub(crate) struct PlaneSample {
    cpu: Vec<(String, Duration)>,
    /// `apiserver_request_total` summed by verb.
    requests: std::collections::BTreeMap<String, f64>,
}

impl ControlPlane<'_> {
    pub(crate) fn sample(&self) -> anyhow::Result<PlaneSample> {
        let mut cpu = Vec::new();
        for (name, pid) in &self.pids {
            cpu.push((name.clone(), cpu_time(*pid)?));
        }
        let request = http::Request::get("/metrics")
            .body(Vec::new())
            .context("building the /metrics request")?;
        let text = self
            .runtime
            .block_on(self.client.request_text(request))
            .context("reading the API server's /metrics")?;
        Ok(PlaneSample {
            cpu,
            requests: requests_by_verb(&text),
        })
    }
}

/// Sums the API server's `apiserver_request_total` series by their `verb` label.
fn requests_by_verb(metrics: &str) -> std::collections::BTreeMap<String, f64> {
    let mut by_verb = std::collections::BTreeMap::new();
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

impl PlaneSample {
    /// What happened between `before` and this sample, over `elapsed`, beside the CPU time
    /// of the measured `process`.
    pub(crate) fn since(
        &self,
        before: &PlaneSample,
        process: &str,
        process_cpu: Duration,
        elapsed: Duration,
    ) -> String {
        let secs = elapsed.as_secs_f64();
        let mut out = format!("  during the install phase ({secs:.1} s), CPU seconds by process:");
        let mut total = process_cpu.as_secs_f64();
        out.push_str(&format!(" {process} {:.1}", process_cpu.as_secs_f64()));
        for (name, cpu) in &self.cpu {
            let was = before
                .cpu
                .iter()
                .find(|(n, _)| n == name)
                .map_or(Duration::ZERO, |(_, c)| *c);
            let used = cpu.saturating_sub(was).as_secs_f64();
            total += used;
            out.push_str(&format!(", {name} {used:.1}"));
        }
        out.push_str(&format!(
            " (together {total:.1} s = {:.2} of the machine's cores on average)",
            total / secs
        ));
        let delta = |verb: &str| {
            self.requests.get(verb).copied().unwrap_or(0.0)
                - before.requests.get(verb).copied().unwrap_or(0.0)
        };
        let writes: f64 = ["POST", "PUT", "PATCH", "APPLY", "DELETE"]
            .iter()
            .map(|v| delta(v))
            .sum();
        let reads: f64 = ["GET", "LIST", "WATCH"].iter().map(|v| delta(v)).sum();
        out.push_str(&format!(
            "\n  API server requests in that phase (apiserver_request_total, every client): {writes:.0} writes ({:.0}/s: POST {:.0}, PUT {:.0}, PATCH {:.0}, APPLY {:.0}, DELETE {:.0}), {reads:.0} reads (GET {:.0}, LIST {:.0}, WATCH {:.0})",
            writes / secs,
            delta("POST"),
            delta("PUT"),
            delta("PATCH"),
            delta("APPLY"),
            delta("DELETE"),
            delta("GET"),
            delta("LIST"),
            delta("WATCH"),
        ));
        out
    }
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
    }

    #[test]
    fn smaps_mappings_are_summed_by_kind() {
        // The layout of /proc/PID/smaps (proc(5)), with made-up figures.
        let smaps = "\
55d0a0000000-55d0a1000000 r-xp 00001000 fd:01 42   /opt/flotilla-agent
Size:              16384 kB
Rss:                1000 kB
Shared_Clean:        200 kB
Shared_Dirty:          0 kB
Private_Clean:       800 kB
Private_Dirty:         0 kB
55d0a2000000-55d0a2100000 rw-p 00000000 00:00 0    [heap]
Rss:                 300 kB
Shared_Clean:          0 kB
Private_Dirty:       300 kB
7f0000000000-7f0000001000 ---p 00000000 00:00 0
Rss:                   0 kB
7f0000001000-7f0000201000 rw-p 00000000 00:00 0
Rss:                  16 kB
Private_Dirty:        16 kB
7f0000300000-7f0000400000 rw-p 00000000 00:00 0
Rss:                  64 kB
Private_Dirty:        64 kB
7f1000000000-7f1000100000 r-xp 00000000 fd:01 7    /usr/lib/x86_64-linux-gnu/libc.so.6
Rss:                 900 kB
Shared_Clean:        880 kB
Private_Dirty:        20 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0    [stack]
Rss:                  12 kB
Private_Dirty:        12 kB
7ffd00100000-7ffd00102000 r-xp 00000000 00:00 0    [vdso]
Rss:                   4 kB
Shared_Clean:          4 kB
";
        let t = smaps_totals(smaps, "/opt/flotilla-agent");
        let p = |rss, private, shared| Pages {
            rss,
            private,
            shared,
        };
        assert_eq!(
            t,
            [
                p(1000, 800, 200),
                p(900, 20, 880),
                p(300, 300, 0),
                p(64, 64, 0),
                p(28, 28, 0),
                p(4, 0, 4),
            ]
        );
    }
}
