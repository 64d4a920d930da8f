//! Plain HTTP/1.1 GETs of the daemons' probe servers (`/metrics`, `/healthz`, `/readyz`),
//! and samples read from a metrics text.

use std::io::{Read as _, Write as _};
use std::time::Duration;

use anyhow::Context as _;

/// `GET path` from `addr` (`host:port`), one connection: the body of a 200 answer.
pub fn get(addr: &str, path: &str) -> anyhow::Result<String> {
    let mut stream = std::net::TcpStream::connect(addr)
        .with_context(|| format!("connecting to http://{addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .with_context(|| format!("GET http://{addr}{path}: an answer without a header end"))?;
    anyhow::ensure!(
        head.starts_with("HTTP/1.1 200"),
        "GET http://{addr}{path}: {}",
        head.lines().next().unwrap_or_default()
    );
    Ok(body.to_owned())
}

/// The value of the sample `series` (name and labels exactly as exported) in a metrics
/// text.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

#[cfg(test)]
mod tests {
    use super::sample;

    #[test]
    fn a_sample_is_found_by_its_exact_series() {
        let text =
            "# TYPE x counter\nx_total{how=\"a\"} 2\nx_total{how=\"b\"} 0\nup 1 1700000000\n";
        assert_eq!(sample(text, "x_total{how=\"a\"}"), Some(2.0));
        assert_eq!(sample(text, "x_total{how=\"b\"}"), Some(0.0));
        assert_eq!(sample(text, "up"), Some(1.0), "a timestamp after the value");
        assert_eq!(
            sample(text, "x_total"),
            None,
            "labels are part of the series"
        );
    }
}
