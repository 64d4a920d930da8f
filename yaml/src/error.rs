//! The one error type: Go's message text, kept verbatim because Helm prints it.

/// A parse, decode or encode error. `Display` is exactly the text Go would print, for example
/// `yaml: line 3: mapping values are not allowed in this context` or, through the
/// `sigs.k8s.io/yaml` layer, `error converting YAML to JSON: yaml: line 3: ...`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    message: String,
    line: Option<usize>,
}

impl Error {
    /// A go-yaml error: `yaml: line N: problem` (or `yaml: problem` without a line).
    pub(crate) fn yaml(line: Option<usize>, problem: impl AsRef<str>) -> Self {
        let problem = problem.as_ref();
        let message = match line {
            Some(n) => format!("yaml: line {n}: {problem}"),
            None => format!("yaml: {problem}"),
        };
        Error { message, line }
    }

    /// An error with a message that is not prefixed.
    pub(crate) fn raw(message: impl Into<String>) -> Self {
        Error {
            message: message.into(),
            line: None,
        }
    }

    /// This error with `prefix: ` in front, as Go's `fmt.Errorf("prefix: %w", err)`.
    pub(crate) fn wrap(self, prefix: &str) -> Self {
        Error {
            message: format!("{prefix}: {}", self.message),
            line: self.line,
        }
    }

    /// The line number printed in the message, if any (go-yaml's own, sometimes 0-based,
    /// numbering).
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// The full message.
    pub fn message(&self) -> &str {
        &self.message
    }
}
