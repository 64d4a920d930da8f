//! An API server's refusal as a sentence: the one formatter of the hub's, the agent's and
//! the CLI's API errors. Users see `<verb> <resource> <name>: <status message> (HTTP <code>)`;
//! this module writes the `<status message> (HTTP <code>)` part from the values of a
//! Kubernetes `Status` (the IO crates take them from `kube::core::Status`), never its `Debug`.
//!
//! A `Status` with a message reads as that message. One without (or an answer that was no
//! `Status` at all, which `kube` reports with the reason [`NOT_A_STATUS`] and the body as the
//! message: a proxy's page, a server that is no API server, an API server behind a wrong
//! path) reads as the HTTP reason phrase and what it usually means for the user.

/// kube's reason when the body of an error answer was no Kubernetes `Status` (the body is
/// then the message).
pub const NOT_A_STATUS: &str = "Failed to parse error data";

/// The most of a server's answer that goes into a message.
pub const MAX_STATUS_MESSAGE: usize = 300;

/// The most of a body that was no `Status` that goes into a message.
const MAX_BODY: usize = 120;

/// `<status message> (HTTP <code>)` of an answer with HTTP `code` (0: no HTTP answer), the
/// `Status`'s `reason` and `message`.
pub fn describe(code: u16, reason: &str, message: &str) -> String {
    let message = one_line(message);
    let reason = one_line(reason);
    let text = if reason != NOT_A_STATUS && !message.is_empty() {
        cut(&message, MAX_STATUS_MESSAGE)
    } else {
        let mut text = match http_meaning(code) {
            Some((phrase, meaning)) => format!("{phrase}: {meaning}"),
            None if reason != NOT_A_STATUS && !reason.is_empty() => {
                cut(&reason, MAX_STATUS_MESSAGE)
            }
            None => "the server refused the request".to_owned(),
        };
        // A body that says more than its status line (a proxy's page) is quoted, cut.
        let body = message.to_ascii_lowercase();
        let phrase = http_meaning(code)
            .map(|(p, _)| p.to_ascii_lowercase())
            .unwrap_or_default();
        if reason == NOT_A_STATUS
            && !message.is_empty()
            && (phrase.is_empty() || !body.contains(&phrase))
        {
            text.push_str(&format!(
                "; the server's answer is no Kubernetes API response: {}",
                cut(&message, MAX_BODY)
            ));
        }
        text
    };
    if code == 0 {
        text
    } else {
        format!("{text} (HTTP {code})")
    }
}

/// The reason phrase of an HTTP status and what it means for the user of a Kubernetes API.
fn http_meaning(code: u16) -> Option<(&'static str, &'static str)> {
    Some(match code {
        400 => ("Bad Request", "the server could not read the request"),
        401 => (
            "Unauthorized",
            "the server did not accept the credentials; check the kubeconfig's token or certificate",
        ),
        403 => (
            "Forbidden",
            "the credentials are not allowed to do this; check their RBAC",
        ),
        404 => (
            "Not Found",
            "the server has no such resource; check the kubeConfig's server URL (scheme, host, port, no extra path) and that the resource's CRD is installed",
        ),
        405 => (
            "Method Not Allowed",
            "the server does not allow this request",
        ),
        406 => ("Not Acceptable", "the server cannot answer in JSON"),
        409 => (
            "Conflict",
            "the object changed or exists already; it is read again",
        ),
        410 => ("Gone", "the version asked for is too old; it is read again"),
        413 => (
            "Payload Too Large",
            "the object is larger than the server accepts",
        ),
        415 => (
            "Unsupported Media Type",
            "the server does not accept this kind of patch",
        ),
        422 => (
            "Unprocessable Entity",
            "the server found the object invalid",
        ),
        429 => (
            "Too Many Requests",
            "the server is throttling requests; it is tried again later",
        ),
        500 => (
            "Internal Server Error",
            "the server failed; it is tried again later",
        ),
        502 => (
            "Bad Gateway",
            "a proxy in front of the server could not reach it; it is tried again later",
        ),
        503 => (
            "Service Unavailable",
            "the server is not ready; it is tried again later",
        ),
        504 => (
            "Gateway Timeout",
            "a proxy in front of the server timed out; it is tried again later",
        ),
        _ => return None,
    })
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn cut(s: &str, max: usize) -> String {
    if s.chars().count() > max {
        s.chars().take(max).collect::<String>() + "…"
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_reads_as_its_message_else_as_its_http_meaning() {
        let not_found_meaning = "Not Found: the server has no such resource; check the kubeConfig's server URL (scheme, host, port, no extra path) and that the resource's CRD is installed (HTTP 404)";
        let table: &[(u16, &str, &str, &str)] = &[
            // A Status with a message: the message.
            (
                404,
                "NotFound",
                "namespaces \"flotilla-system\" not found",
                "namespaces \"flotilla-system\" not found (HTTP 404)",
            ),
            (
                403,
                "Forbidden",
                "secrets is forbidden: User \"x\" cannot list",
                "secrets is forbidden: User \"x\" cannot list (HTTP 403)",
            ),
            // On one line.
            (422, "Invalid", "a\n  b\tc", "a b c (HTTP 422)"),
            // A Status without a message: the HTTP meaning.
            (
                403,
                "Forbidden",
                "",
                "Forbidden: the credentials are not allowed to do this; check their RBAC (HTTP 403)",
            ),
            // No Status at all, an empty body (the Ready message of issue 35).
            (404, NOT_A_STATUS, "", not_found_meaning),
            // An API server behind a wrong path: its body only repeats the status line.
            (404, NOT_A_STATUS, "404 page not found", not_found_meaning),
            // A proxy's page is quoted, on one line.
            (
                502,
                NOT_A_STATUS,
                "<html>\n <b>upstream</b> refused </html>",
                "Bad Gateway: a proxy in front of the server could not reach it; it is tried again later; the server's answer is no Kubernetes API response: <html> <b>upstream</b> refused </html> (HTTP 502)",
            ),
            // A code with no meaning here: the reason, else a plain sentence.
            (418, "Teapot", "", "Teapot (HTTP 418)"),
            (418, "", "", "the server refused the request (HTTP 418)"),
            (
                418,
                NOT_A_STATUS,
                "short and stout",
                "the server refused the request; the server's answer is no Kubernetes API response: short and stout (HTTP 418)",
            ),
            // No HTTP answer: no code.
            (0, "", "the watch ended", "the watch ended"),
        ];
        for (code, reason, message, want) in table {
            let got = describe(*code, reason, message);
            assert_eq!(&got, want, "({code}, {reason:?}, {message:?})");
            for debug in ["Status {", "Some(", "None", "ApiError", NOT_A_STATUS] {
                assert!(!got.contains(debug), "{got}");
            }
        }
    }

    #[test]
    fn a_long_answer_is_cut() {
        let long = "x".repeat(1000);
        let got = describe(400, "BadRequest", &long);
        assert_eq!(
            got.chars().count(),
            MAX_STATUS_MESSAGE + 1 + " (HTTP 400)".len()
        );
        let got = describe(500, NOT_A_STATUS, &long);
        assert!(got.chars().count() < 300, "{got}");
        assert!(got.ends_with("… (HTTP 500)"), "{got}");
    }
}
