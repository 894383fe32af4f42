//! Field selectors, as `k8s.io/apimachinery/pkg/fields` parses and matches them.
//!
//! Contract:
//! - [`FieldSelector::parse`] accepts `field=value`, `field==value` and `field!=value` terms,
//!   comma-joined; the empty string (and empty terms) select everything. Values may escape `\`,
//!   `,` and `=` with a backslash (`\\`, `\,`, `\=`); an unescaped `,`/`=` inside a value, an
//!   unknown escape or a trailing lone backslash is an error, as in apimachinery. Like the
//!   apiserver, the field name is not trimmed or validated here: which fields a resource supports
//!   is the server's rule, checked with [`FieldSelector::check_supported`] (whose error has the
//!   real message shape, `field label not supported: <field>`).
//! - [`FieldSelector::matches`] looks fields up through a closure; an absent field compares as
//!   the empty string, as the apiserver does (an unbound pod matches `spec.nodeName=`).

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

/// A field requirement operator (`=` and `==` are the same operator).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldOp {
    /// `field=value` or `field==value`
    Equals,
    /// `field!=value`
    NotEquals,
}

/// One term of a field selector, with the value unescaped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    /// The field name as written, e.g. `spec.nodeName`.
    pub field: String,
    /// The operator.
    pub op: FieldOp,
    /// The value, with escapes removed.
    pub value: String,
}

impl FieldRequirement {
    /// Whether the field's value satisfies this requirement (`None` compares as "").
    pub fn matches(&self, actual: Option<&str>) -> bool {
        let actual = actual.unwrap_or("");
        match self.op {
            FieldOp::Equals => actual == self.value,
            FieldOp::NotEquals => actual != self.value,
        }
    }
}

impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            FieldOp::Equals => "=",
            FieldOp::NotEquals => "!=",
        };
        write!(f, "{}{op}{}", self.field, escape_value(&self.value))
    }
}

/// Errors parsing or checking a field selector.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FieldSelectorError {
    /// A term has no `=`, `==` or `!=`.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    InvalidTerm {
        /// The whole selector.
        selector: String,
        /// The term that could not be split.
        term: String,
    },
    /// A value has an escape other than `\\`, `\,`, `\=`, or ends in a lone backslash.
    #[error("invalid escape sequence: {sequence} (in value '{value}')")]
    InvalidEscape {
        /// The raw (escaped) value.
        value: String,
        /// The offending escape sequence.
        sequence: String,
    },
    /// A value contains an unescaped `,` or `=`.
    #[error(
        "invalid field selector: unescaped character in value: '{character}' (in value '{value}')"
    )]
    UnescapedCharacter {
        /// The raw (escaped) value.
        value: String,
        /// The offending character.
        character: char,
    },
    /// The resource does not support selecting on this field (see
    /// [`FieldSelector::check_supported`]).
    #[error("field label not supported: {field}")]
    UnsupportedField {
        /// The field name as written in the selector.
        field: String,
    },
}

/// A parsed field selector: a conjunction of [`FieldRequirement`]s. [`Default`] matches
/// everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    /// In the order of the sorted raw terms, as apimachinery keeps them.
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// The selector that matches everything.
    pub fn everything() -> Self {
        Self::default()
    }

    /// Parses the string form used by `?fieldSelector=` and `kubectl --field-selector`.
    pub fn parse(selector: &str) -> Result<Self, FieldSelectorError> {
        let mut terms = split_terms(selector);
        terms.sort_unstable();
        let mut requirements = Vec::new();
        for term in terms {
            if term.is_empty() {
                continue;
            }
            let (field, op, raw) =
                split_term(term).ok_or_else(|| FieldSelectorError::InvalidTerm {
                    selector: selector.to_string(),
                    term: term.to_string(),
                })?;
            requirements.push(FieldRequirement {
                field: field.to_string(),
                op,
                value: unescape_value(raw)?,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// True when the selector has no requirements (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The requirements, so a server can check which fields are used.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// The value required for `field` by an `=` term, if any (handy for index lookups such as
    /// `spec.nodeName=<node>` or `metadata.name=<name>`).
    pub fn required_value(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.op == FieldOp::Equals && r.field == field)
            .map(|r| r.value.as_str())
    }

    /// Rejects the first field not in `supported`, with the apiserver's message
    /// `field label not supported: <field>` (the apiserver answers 400 Bad Request).
    pub fn check_supported(&self, supported: &[&str]) -> Result<(), FieldSelectorError> {
        match self
            .requirements
            .iter()
            .find(|r| !supported.contains(&r.field.as_str()))
        {
            Some(r) => Err(FieldSelectorError::UnsupportedField {
                field: r.field.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Whether every requirement holds; `get` returns a field's value, `None` for an absent
    /// field (which compares as the empty string).
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches(get(&r.field).as_deref()))
    }

    /// [`FieldSelector::matches`] against a JSON object, looking each field up with
    /// [`json_field`].
    pub fn matches_object(&self, object: &Value) -> bool {
        self.matches(|field| json_field(object, field))
    }
}

impl FromStr for FieldSelector {
    type Err = FieldSelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for FieldSelector {
    /// The canonical form, values escaped, `==` printed as `=`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// Looks up a dotted field path (`spec.nodeName`, `status.phase`, `metadata.namespace`) in a
/// JSON object, formatting the value the way the apiserver's field sets do: strings as they are,
/// booleans as `true`/`false`, numbers in decimal. `None` when a path segment is missing, null,
/// or the value is an object or a list.
pub fn json_field(object: &Value, field: &str) -> Option<String> {
    let mut cur = object;
    for part in field.split('.') {
        cur = cur.as_object()?.get(part)?;
    }
    match cur {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Escapes `\`, `,` and `=` in a value for use in a field selector.
pub fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Splits on commas not preceded by a backslash; escapes stay in the terms.
fn split_terms(selector: &str) -> Vec<&str> {
    if selector.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in selector.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&selector[start..i]);
            start = i + 1;
        }
    }
    terms.push(&selector[start..]);
    terms
}

/// Splits at the first operator; `!=` and `==` are tried before `=` at each position.
fn split_term(term: &str) -> Option<(&str, FieldOp, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (token, op) in [
            ("!=", FieldOp::NotEquals),
            ("==", FieldOp::Equals),
            ("=", FieldOp::Equals),
        ] {
            if let Some(value) = rest.strip_prefix(token) {
                return Some((&term[..i], op, value));
            }
        }
    }
    None
}

fn unescape_value(raw: &str) -> Result<String, FieldSelectorError> {
    let mut out = String::with_capacity(raw.len());
    let mut in_slash = false;
    for c in raw.chars() {
        if in_slash {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(FieldSelectorError::InvalidEscape {
                    value: raw.to_string(),
                    sequence: format!("\\{c}"),
                });
            }
            out.push(c);
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => {
                return Err(FieldSelectorError::UnescapedCharacter {
                    value: raw.to_string(),
                    character: c,
                });
            }
            c => out.push(c),
        }
    }
    if in_slash {
        return Err(FieldSelectorError::InvalidEscape {
            value: raw.to_string(),
            sequence: "\\".to_string(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reqs(s: &FieldSelector) -> Vec<(&str, FieldOp, &str)> {
        s.requirements()
            .iter()
            .map(|r| (r.field.as_str(), r.op, r.value.as_str()))
            .collect()
    }

    #[test]
    fn parses_kubectl_drain_selector() {
        // kubectl drain lists pods with fieldSelector=spec.nodeName=<node>
        let s = FieldSelector::parse("spec.nodeName=ip-10-0-1-5.ec2.internal").unwrap();
        assert_eq!(
            reqs(&s),
            vec![("spec.nodeName", FieldOp::Equals, "ip-10-0-1-5.ec2.internal")]
        );
        assert_eq!(
            s.required_value("spec.nodeName"),
            Some("ip-10-0-1-5.ec2.internal")
        );
        let pod = json!({"spec": {"nodeName": "ip-10-0-1-5.ec2.internal"}});
        assert!(s.matches_object(&pod));
        assert!(!s.matches_object(&json!({"spec": {"nodeName": "other"}})));
        assert!(!s.matches_object(&json!({"spec": {}})));
    }

    #[test]
    fn operators_sorted_and_displayed() {
        let s = FieldSelector::parse("status.phase!=Succeeded,metadata.name==p1").unwrap();
        assert_eq!(
            reqs(&s),
            vec![
                ("metadata.name", FieldOp::Equals, "p1"),
                ("status.phase", FieldOp::NotEquals, "Succeeded"),
            ]
        );
        assert_eq!(s.to_string(), "metadata.name=p1,status.phase!=Succeeded");
    }

    #[test]
    fn absent_field_compares_as_empty_string() {
        // Unscheduled pods: kubectl get pods --field-selector spec.nodeName=
        let s = FieldSelector::parse("spec.nodeName=").unwrap();
        assert_eq!(reqs(&s), vec![("spec.nodeName", FieldOp::Equals, "")]);
        assert!(s.matches(|_| None));
        assert!(!s.matches(|_| Some("n1".into())));
        let s = FieldSelector::parse("spec.nodeName!=").unwrap();
        assert!(!s.matches(|_| None));
        assert!(s.matches(|_| Some("n1".into())));
    }

    #[test]
    fn empty_and_empty_terms() {
        assert!(FieldSelector::parse("").unwrap().is_empty());
        assert!(FieldSelector::parse("").unwrap().matches(|_| None));
        let s = FieldSelector::parse("a=1,,b=2,").unwrap();
        assert_eq!(
            reqs(&s),
            vec![("a", FieldOp::Equals, "1"), ("b", FieldOp::Equals, "2")]
        );
    }

    #[test]
    fn escapes() {
        let s = FieldSelector::parse(r"metadata.name=a\,b\=c\\d").unwrap();
        assert_eq!(
            reqs(&s),
            vec![("metadata.name", FieldOp::Equals, r"a,b=c\d")]
        );
        assert!(s.matches(|_| Some(r"a,b=c\d".into())));
        assert_eq!(s.to_string(), r"metadata.name=a\,b\=c\\d");
        assert_eq!(escape_value(r"x,y=z\"), r"x\,y\=z\\");
    }

    #[test]
    fn errors() {
        assert_eq!(
            FieldSelector::parse("a=1,nonsense").unwrap_err(),
            FieldSelectorError::InvalidTerm {
                selector: "a=1,nonsense".into(),
                term: "nonsense".into()
            }
        );
        assert_eq!(
            FieldSelector::parse("a=1,nonsense")
                .unwrap_err()
                .to_string(),
            "invalid selector: 'a=1,nonsense'; can't understand 'nonsense'"
        );
        assert!(matches!(
            FieldSelector::parse(r"a=b\n").unwrap_err(),
            FieldSelectorError::InvalidEscape { sequence, .. } if sequence == r"\n"
        ));
        assert!(matches!(
            FieldSelector::parse(r"a=b\").unwrap_err(),
            FieldSelectorError::InvalidEscape { sequence, .. } if sequence == r"\"
        ));
        assert!(matches!(
            FieldSelector::parse("a=b=c").unwrap_err(),
            FieldSelectorError::UnescapedCharacter { character: '=', .. }
        ));
    }

    #[test]
    fn unsupported_field_message() {
        let s = FieldSelector::parse("metadata.name=x,spec.foo=bar").unwrap();
        let err = s
            .check_supported(&["metadata.name", "metadata.namespace"])
            .unwrap_err();
        assert_eq!(err.to_string(), "field label not supported: spec.foo");
        assert!(s.check_supported(&["metadata.name", "spec.foo"]).is_ok());
    }

    #[test]
    fn json_field_formats_scalars() {
        let node = json!({"metadata": {"name": "n1"}, "spec": {"unschedulable": true}, "n": 3});
        assert_eq!(json_field(&node, "spec.unschedulable"), Some("true".into()));
        assert_eq!(json_field(&node, "metadata.name"), Some("n1".into()));
        assert_eq!(json_field(&node, "n"), Some("3".into()));
        assert_eq!(json_field(&node, "metadata.namespace"), None);
        assert_eq!(json_field(&node, "spec"), None);
        let s = FieldSelector::parse("spec.unschedulable=true").unwrap();
        assert!(s.matches_object(&node));
    }
}
