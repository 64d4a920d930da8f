//! Helm's template functions built on `sigs.k8s.io/yaml` and go-yaml v3
//! (`pkg/engine/funcs.go`), in the shape they have there: errors become values where Helm
//! makes them values.

use crate::{Error, Mapping, Value, json};

/// `toYaml`: the YAML without its final newline; `""` when marshalling fails.
pub fn to_yaml(v: &Value) -> String {
    json::helm_to_yaml(v).unwrap_or_default()
}

/// `toYamlPretty` (Helm 4): a go-yaml v3 encoder with `SetIndent(2)`, without its final
/// newline; `""` when encoding fails. The value is the Go value itself (no JSON round trip,
/// unlike `toYaml`): callers keep ints, floats and byte slices as Go has them.
pub fn to_yaml_pretty(v: &Value) -> String {
    must_to_yaml_pretty(v).unwrap_or_default()
}

/// [`to_yaml_pretty`] with the error instead of `""`.
pub fn must_to_yaml_pretty(v: &Value) -> Result<String, Error> {
    let opts = crate::V3Options {
        indent: 2,
        ..crate::V3Options::default()
    };
    let mut s = crate::to_string_v3(v, opts)?;
    if s.ends_with('\n') {
        s.pop();
    }
    Ok(s)
}

/// `mustToYaml`: as [`to_yaml`], with the error.
pub fn must_to_yaml(v: &Value) -> Result<String, Error> {
    json::helm_to_yaml(v)
}

/// `fromYaml`: the mapping, or `{"Error": message}` when the text does not read as one.
pub fn from_yaml(s: &str) -> Mapping {
    match json::unmarshal_map(s) {
        Ok(m) => m,
        Err(e) => {
            let mut m = Mapping::new();
            m.insert(Value::from("Error"), Value::from(e.to_string()));
            m
        }
    }
}

/// `fromYamlArray`: the list, or `[message]` when the text does not read as one.
pub fn from_yaml_array(s: &str) -> Vec<Value> {
    match json::unmarshal_seq(s) {
        Ok(v) => v,
        Err(e) => vec![Value::from(e.to_string())],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_values_as_in_helm() {
        assert_eq!(
            from_yaml("- a").get_str("Error").and_then(Value::as_str),
            Some(
                "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal array into Go value of type map[string]interface {}"
            )
        );
        assert_eq!(from_yaml_array("a: 1").len(), 1);
        assert_eq!(to_yaml(&Value::Float(f64::NAN)), "");
        assert!(must_to_yaml(&Value::Float(f64::NAN)).is_err());
        assert_eq!(to_yaml(&Value::from("x")), "x");
    }
}
