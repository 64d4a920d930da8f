//! Helm's rewriting of template errors (`pkg/engine/engine.go`): parse errors become
//! `parse error at (FILE:LINE): MESSAGE`, `required`/`fail` messages
//! `execution error at (FILE:LINE:COL): MESSAGE`, and other execution errors a multi-line
//! trace with one entry per `include` level. Errors that pass through a function that does
//! not return a template error (`tpl`, Sprig) are left exactly as Go printed them.

use super::funcs::{ERR_END, ERR_START};

/// `cleanupParseError(filename, err)`.
pub(crate) fn cleanup_parse_error(filename: &str, err: &str) -> String {
    let tokens: Vec<&str> = err.split(": ").collect();
    if tokens.len() == 1 {
        return format!("parse error in ({filename}): {err}");
    }
    let location = tokens[1];
    let msg = tokens[tokens.len() - 1];
    format!("parse error at ({location}): {msg}")
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Traceable {
    location: String,
    message: String,
    executed: String,
}

impl Traceable {
    fn render(&self, out: &mut String) {
        if !self.location.is_empty() {
            out.push_str(&self.location);
            out.push_str("\n  ");
        }
        if !self.executed.is_empty() {
            out.push_str(&self.executed);
            out.push_str("\n    ");
        }
        if !self.message.is_empty() {
            out.push_str(&self.message);
            out.push('\n');
        }
    }
}

fn cut_chained(msg: &str) -> &str {
    match msg.find(" template:") {
        Some(i) => &msg[..i],
        None => msg,
    }
}

/// Parses one level of a Go template error; returns it and the wrapped error's text, if the
/// level wraps another error (`error calling NAME: <wrapped>`).
fn parse_level(s: &str) -> Option<(Traceable, Option<&str>)> {
    let rest = s.strip_prefix("template: ")?;
    if rest.starts_with("no template ") {
        return Some((
            Traceable {
                message: s.to_string(),
                ..Traceable::default()
            },
            None,
        ));
    }
    if let Some(idx) = rest.find(": executing ") {
        let name = &rest[..idx];
        let after = &rest[idx + ": executing ".len()..];
        let parsed = (|| {
            let body = after.strip_prefix('"')?;
            let end = body.find('"')?;
            let func = &body[..end];
            let after_func = body[end + 1..].strip_prefix(" at <")?;
            let end_loc = after_func.find(">: ")?;
            let node = &after_func[..end_loc];
            let msg = &after_func[end_loc + 3..];
            Some((func, node, msg))
        })();
        if let Some((func, node, msg)) = parsed {
            let wrapped = msg.strip_prefix("error calling ").and_then(|m| {
                let i = m.find(": ")?;
                Some(&m[i + 2..])
            });
            return Some((
                Traceable {
                    location: name.to_string(),
                    message: cut_chained(msg).to_string(),
                    executed: format!("executing \"{func}\" at <{node}>:"),
                },
                wrapped,
            ));
        }
        return None;
    }
    let sep = rest.rfind(": ")?;
    Some((
        Traceable {
            location: rest[..sep].to_string(),
            message: cut_chained(&rest[sep + 2..]).to_string(),
            executed: String::new(),
        },
        None,
    ))
}

/// `reformatExecErrorMsg(filename, err)` for an execution error's text.
pub(crate) fn reformat_exec_error(filename: &str, err: &str) -> String {
    let tokens: Vec<&str> = err.splitn(3, ": ").collect();
    if tokens.len() != 3 {
        return format!("execution error in ({filename}): {err}");
    }
    let location = tokens[1];
    if let (Some(start), Some(end)) = (tokens[2].find(ERR_START), tokens[2].rfind(ERR_END)) {
        let inner_start = start + ERR_START.len();
        if inner_start <= end {
            return format!(
                "execution error at ({location}): {}",
                &tokens[2][inner_start..end]
            );
        }
    }
    let mut levels: Vec<Traceable> = Vec::new();
    let mut current = Some(err);
    while let Some(text) = current {
        let Some((level, next)) = parse_level(text) else {
            return err.to_string();
        };
        if levels.last() != Some(&level) {
            levels.push(level);
        }
        current = next;
    }
    let mut out = String::new();
    for l in &levels {
        l.render(&mut out);
    }
    out.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_include_errors_become_a_trace() {
        let err = "template: c2/templates/t.yaml:1:3: executing \"c2/templates/t.yaml\" at <include \"h.outer\" .>: error calling include: template: c2/templates/_h.tpl:3:27: executing \"h.outer\" at <include \"h.nil\" .>: error calling include: template: c2/templates/_h.tpl:2:32: executing \"h.nil\" at <.Values.nope.deep>: nil pointer evaluating interface {}.deep";
        assert_eq!(
            reformat_exec_error("c2/templates/t.yaml", err),
            "c2/templates/t.yaml:1:3\n  executing \"c2/templates/t.yaml\" at <include \"h.outer\" .>:\n    error calling include:\nc2/templates/_h.tpl:3:27\n  executing \"h.outer\" at <include \"h.nil\" .>:\n    error calling include:\nc2/templates/_h.tpl:2:32\n  executing \"h.nil\" at <.Values.nope.deep>:\n    nil pointer evaluating interface {}.deep"
        );
    }

    #[test]
    fn required_messages_keep_the_outer_location() {
        let err = "template: c/templates/t.yaml:1:3: executing \"c/templates/t.yaml\" at <include \"x\" .>: error calling include: template: c/templates/_h.tpl:1:5: executing \"x\" at <required \"need\" .x>: error calling required: HELM_ERR_STARTneed fooHELM_ERR_END";
        assert_eq!(
            reformat_exec_error("c/templates/t.yaml", err),
            "execution error at (c/templates/t.yaml:1:3): need foo"
        );
    }

    #[test]
    fn errors_through_other_functions_stay_raw() {
        let err = "template: c/templates/t.yaml:1:3: executing \"c/templates/t.yaml\" at <index .Values \"a\" \"b\">: error calling index: index of nil pointer";
        assert_eq!(reformat_exec_error("c/templates/t.yaml", err), err);
        let missing = "template: c/t.yaml:1:3: executing \"c/t.yaml\" at <include \"missing\" .>: error calling include: template: no template \"missing\" associated with template \"gotpl\"";
        assert_eq!(
            reformat_exec_error("c/t.yaml", missing),
            "c/t.yaml:1:3\n  executing \"c/t.yaml\" at <include \"missing\" .>:\n    error calling include:\ntemplate: no template \"missing\" associated with template \"gotpl\""
        );
    }

    #[test]
    fn parse_errors_keep_location_and_last_message() {
        assert_eq!(
            cleanup_parse_error(
                "c/templates/t.yaml",
                "template: c/templates/t.yaml:2: unclosed action started at c/templates/t.yaml:1"
            ),
            "parse error at (c/templates/t.yaml:2): unclosed action started at c/templates/t.yaml:1"
        );
    }
}
