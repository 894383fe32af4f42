//! Label selectors, as `k8s.io/apimachinery/pkg/labels` and `metav1.LabelSelector` define them.
//!
//! Contract:
//! - [`LabelSelector::parse`] accepts the string form of `?labelSelector=` and `kubectl -l`:
//!   `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a` (exists), `!a` (does not exist),
//!   and the rarely used `a>5` / `a<5` (integer comparison, as apimachinery's parser allows),
//!   comma-joined, whitespace tolerant. The empty string matches everything. Keys must be
//!   qualified names (`[prefix/]name`) and values valid label values, as the apiserver checks;
//!   errors quote the offending token, key or value.
//! - [`LabelSelector::from_structured`] (and [`LabelSelector::from_k8s`]) build a selector from the
//!   structured `{matchLabels, matchExpressions}` form. `{}` matches everything; `null` (an absent
//!   selector) matches nothing, exactly like `metav1.LabelSelectorAsSelector`. Callers own any
//!   kind-specific rule on top of that (see [`LabelSelector::is_empty`]).
//! - [`LabelSelector::matches`] has apimachinery's semantics: every requirement must hold, and
//!   `!=` / `notin` hold when the key is absent.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde_json::Value;

/// A label requirement operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operator {
    /// `key=value`
    Equals,
    /// `key==value` (same meaning as [`Operator::Equals`], kept for faithful printing)
    DoubleEquals,
    /// `key!=value`; holds when the key is absent.
    NotEquals,
    /// `key in (v1,v2)`, or `In` in the structured form.
    In,
    /// `key notin (v1,v2)`, or `NotIn` in the structured form; holds when the key is absent.
    NotIn,
    /// `key`, or `Exists` in the structured form.
    Exists,
    /// `!key`, or `DoesNotExist` in the structured form.
    DoesNotExist,
    /// `key>N`: the label is present and its value, parsed as an integer, is greater than `N`.
    GreaterThan,
    /// `key<N`: the label is present and its value, parsed as an integer, is less than `N`.
    LessThan,
}

/// Errors building a label selector. Each variant names the offending part of the input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LabelSelectorError {
    /// The string form does not follow the selector grammar.
    #[error("found '{found}', expected: {expected} (in selector \"{selector}\")")]
    Syntax {
        /// The whole selector being parsed.
        selector: String,
        /// The token found where something else was expected (`end of string` at the end).
        found: String,
        /// What the grammar allows at that point.
        expected: &'static str,
    },
    /// A key is not a valid qualified name.
    #[error("invalid label key \"{key}\": {reason}")]
    InvalidKey {
        /// The key as given.
        key: String,
        /// Why it is invalid.
        reason: String,
    },
    /// A value is not a valid label value.
    #[error("invalid label value \"{value}\" for key \"{key}\": {reason}")]
    InvalidValue {
        /// The key the value belongs to.
        key: String,
        /// The value as given.
        value: String,
        /// Why it is invalid.
        reason: String,
    },
    /// The operator and the number or shape of values do not fit together.
    #[error("invalid requirement for key \"{key}\": {reason}")]
    InvalidRequirement {
        /// The key of the requirement.
        key: String,
        /// Why the requirement is invalid.
        reason: &'static str,
    },
    /// A structured `matchExpressions[].operator` that is not In, NotIn, Exists or DoesNotExist.
    #[error("\"{0}\" is not a valid label selector operator")]
    InvalidOperator(String),
    /// The structured form has the wrong JSON shape.
    #[error("invalid label selector: {0}")]
    Malformed(String),
}

/// One requirement of a selector: a key, an operator and (depending on the operator) values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    /// Sorted and de-duplicated, as apimachinery keeps them in a string set.
    values: Vec<String>,
}

impl Requirement {
    /// Builds a requirement with apimachinery's `NewRequirement` checks: the key is a qualified
    /// name; `In`/`NotIn` need at least one value; `Equals`/`DoubleEquals`/`NotEquals` exactly
    /// one; `Exists`/`DoesNotExist` none; `GreaterThan`/`LessThan` exactly one integer. Every
    /// value must be a valid label value.
    pub fn new<I, S>(key: &str, operator: Operator, values: I) -> Result<Self, LabelSelectorError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        validate_key(key)?;
        let mut values: Vec<String> = values.into_iter().map(Into::into).collect();
        let invalid = |reason| LabelSelectorError::InvalidRequirement {
            key: key.to_string(),
            reason,
        };
        match operator {
            Operator::In | Operator::NotIn => {
                if values.is_empty() {
                    return Err(invalid(
                        "for 'in', 'notin' operators, values set can't be empty",
                    ));
                }
            }
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => {
                if values.len() != 1 {
                    return Err(invalid(
                        "exact-match compatibility requires one single value",
                    ));
                }
            }
            Operator::Exists | Operator::DoesNotExist => {
                if !values.is_empty() {
                    return Err(invalid(
                        "values set must be empty for exists and does not exist",
                    ));
                }
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    return Err(invalid(
                        "for 'Gt', 'Lt' operators, exactly one value is required",
                    ));
                }
                if values[0].parse::<i64>().is_err() {
                    return Err(invalid(
                        "for 'Gt', 'Lt' operators, the value must be an integer",
                    ));
                }
            }
        }
        for v in &values {
            validate_value(key, v)?;
        }
        values.sort();
        values.dedup();
        Ok(Requirement {
            key: key.to_string(),
            operator,
            values,
        })
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values, sorted and de-duplicated (empty for `Exists`/`DoesNotExist`).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether the label set satisfies this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_lookup(|key| labels.get(key).map(String::as_str))
    }

    /// [`Requirement::matches`] for labels kept in another shape: `get` gives a key's value,
    /// `None` when the key is absent.
    pub fn matches_lookup<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        let has = |v: &str| self.values.binary_search_by(|x| x.as_str().cmp(v)).is_ok();
        let actual = get(&self.key);
        match self.operator {
            Operator::Equals | Operator::DoubleEquals | Operator::In => actual.is_some_and(has),
            Operator::NotEquals | Operator::NotIn => !actual.is_some_and(has),
            Operator::Exists => actual.is_some(),
            Operator::DoesNotExist => actual.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(actual) = actual.and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                let Some(bound) = self.values.first().and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    actual > bound
                } else {
                    actual < bound
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    /// Prints the string form, as apimachinery's `Requirement.String()` does.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.operator {
            Operator::Exists => return f.write_str(&self.key),
            Operator::DoesNotExist => return write!(f, "!{}", self.key),
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
            Operator::In => " in ",
            Operator::NotIn => " notin ",
        };
        let values = self.values.join(",");
        if matches!(self.operator, Operator::In | Operator::NotIn) {
            write!(f, "{}{op}({values})", self.key)
        } else {
            write!(f, "{}{op}{values}", self.key)
        }
    }
}

/// A parsed label selector: a conjunction of [`Requirement`]s, or the selector that matches
/// nothing. [`Default`] is the selector that matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// Sorted by key.
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl LabelSelector {
    /// The selector that matches every label set (the empty string, or `{}`).
    pub fn everything() -> Self {
        Self::default()
    }

    /// The selector that matches no label set (a `null` structured selector).
    pub fn nothing() -> Self {
        LabelSelector {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// Builds a selector from requirements (all must hold).
    pub fn from_requirements(mut requirements: Vec<Requirement>) -> Self {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        LabelSelector {
            requirements,
            nothing: false,
        }
    }

    /// Parses the string form used by `?labelSelector=` and `kubectl get -l`.
    ///
    /// ```
    /// # use rotor_apimachinery::labels::LabelSelector;
    /// let s = LabelSelector::parse("app in (a,b),!legacy").unwrap();
    /// let labels = [("app".to_string(), "a".to_string())].into();
    /// assert!(s.matches(&labels));
    /// ```
    pub fn parse(selector: &str) -> Result<Self, LabelSelectorError> {
        let tokens = lex(selector);
        let mut parser = Parser {
            selector,
            tokens,
            pos: 0,
        };
        Ok(Self::from_requirements(parser.parse()?))
    }

    /// Builds a selector from the structured form `{matchLabels, matchExpressions}` as JSON.
    ///
    /// `null` is an absent selector and matches nothing; `{}` (or empty `matchLabels` and
    /// `matchExpressions`) matches everything, like `metav1.LabelSelectorAsSelector`.
    ///
    /// Kind-specific rules are the caller's: for example, a policy/v1 PodDisruptionBudget whose
    /// `spec.selector` is `null` selects no pods, while `{}` selects every pod in its namespace
    /// (in policy/v1beta1 `{}` selected nothing, and the apiserver still converts v1beta1 empty
    /// selectors to a match-nothing selector). A Deployment/ReplicaSet rejects an empty selector
    /// at validation time. Use [`LabelSelector::is_empty`] and [`LabelSelector::is_nothing`] to
    /// apply such rules.
    pub fn from_structured(selector: &Value) -> Result<Self, LabelSelectorError> {
        let obj = match selector {
            Value::Null => return Ok(Self::nothing()),
            Value::Object(obj) => obj,
            other => {
                return Err(LabelSelectorError::Malformed(format!(
                    "expected an object, found {other}"
                )));
            }
        };
        let mut requirements = Vec::new();
        match obj.get("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(labels)) => {
                for (k, v) in labels {
                    let Value::String(v) = v else {
                        return Err(LabelSelectorError::Malformed(format!(
                            "matchLabels[\"{k}\"] must be a string, found {v}"
                        )));
                    };
                    requirements.push(Requirement::new(k, Operator::Equals, [v.as_str()])?);
                }
            }
            Some(other) => {
                return Err(LabelSelectorError::Malformed(format!(
                    "matchLabels must be an object, found {other}"
                )));
            }
        }
        match obj.get("matchExpressions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(exprs)) => {
                for expr in exprs {
                    requirements.push(structured_expression(expr)?);
                }
            }
            Some(other) => {
                return Err(LabelSelectorError::Malformed(format!(
                    "matchExpressions must be a list, found {other}"
                )));
            }
        }
        Ok(Self::from_requirements(requirements))
    }

    /// Builds a selector from k8s-openapi's structured `LabelSelector`, with the same semantics
    /// as [`LabelSelector::from_structured`] (pass `None` for an absent selector).
    pub fn from_k8s(
        selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    ) -> Result<Self, LabelSelectorError> {
        let Some(selector) = selector else {
            return Ok(Self::nothing());
        };
        let mut requirements = Vec::new();
        for (k, v) in selector.match_labels.iter().flatten() {
            requirements.push(Requirement::new(k, Operator::Equals, [v.as_str()])?);
        }
        for expr in selector.match_expressions.iter().flatten() {
            let op = structured_operator(&expr.operator)?;
            requirements.push(Requirement::new(
                &expr.key,
                op,
                expr.values.iter().flatten().map(String::as_str),
            )?);
        }
        Ok(Self::from_requirements(requirements))
    }

    /// Builds an equality selector from a plain label map (a Service's `spec.selector`, a
    /// ReplicationController's `spec.selector`). An empty map matches everything.
    pub fn from_match_labels(
        labels: &BTreeMap<String, String>,
    ) -> Result<Self, LabelSelectorError> {
        let requirements = labels
            .iter()
            .map(|(k, v)| Requirement::new(k, Operator::Equals, [v.as_str()]))
            .collect::<Result<_, _>>()?;
        Ok(Self::from_requirements(requirements))
    }

    /// True for the selector that matches everything (no requirements), like apimachinery's
    /// `Selector.Empty()`. False for [`LabelSelector::nothing`].
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// True for the selector that matches nothing (built from a `null` structured selector).
    pub fn is_nothing(&self) -> bool {
        self.nothing
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether the label set satisfies every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_lookup(|key| labels.get(key).map(String::as_str))
    }

    /// [`LabelSelector::matches`] for labels kept in another shape: `get` gives a key's value,
    /// `None` when the key is absent.
    pub fn matches_lookup<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches_lookup(&get))
    }

    /// [`LabelSelector::matches`] for an optional label map; `None` is the empty label set.
    pub fn matches_opt(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        match labels {
            Some(labels) => self.matches(labels),
            None => self.matches(&BTreeMap::new()),
        }
    }

    /// Matches against the `metadata.labels` of a Kubernetes object given as JSON. A missing
    /// `metadata.labels` is the empty label set; non-string label values are ignored.
    pub fn matches_object(&self, object: &Value) -> bool {
        let labels: BTreeMap<String, String> = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        self.matches(&labels)
    }
}

impl FromStr for LabelSelector {
    type Err = LabelSelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for LabelSelector {
    /// The canonical string form (requirements sorted by key, comma-joined). Both
    /// [`LabelSelector::everything`] and [`LabelSelector::nothing`] print as the empty string,
    /// as in apimachinery.
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

fn structured_operator(op: &str) -> Result<Operator, LabelSelectorError> {
    match op {
        "In" => Ok(Operator::In),
        "NotIn" => Ok(Operator::NotIn),
        "Exists" => Ok(Operator::Exists),
        "DoesNotExist" => Ok(Operator::DoesNotExist),
        other => Err(LabelSelectorError::InvalidOperator(other.to_string())),
    }
}

fn structured_expression(expr: &Value) -> Result<Requirement, LabelSelectorError> {
    let malformed = |what: &str| LabelSelectorError::Malformed(format!("{what} in {expr}"));
    let obj = expr
        .as_object()
        .ok_or_else(|| malformed("matchExpressions item must be an object"))?;
    let key = obj
        .get("key")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("matchExpressions item needs a string key"))?;
    let op = obj
        .get("operator")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("matchExpressions item needs a string operator"))?;
    let op = structured_operator(op)?;
    let values: Vec<&str> = match obj.get("values") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(vs)) => vs
            .iter()
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| malformed("values must be strings"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(malformed("values must be a list")),
    };
    Requirement::new(key, op, values)
}

// ---------------------------------------------------------------------------------------------
// Key and value syntax (k8s.io/apimachinery/pkg/util/validation).

const QUALIFIED_NAME_MAX_LEN: usize = 63;
const LABEL_VALUE_MAX_LEN: usize = 63;
const DNS1123_SUBDOMAIN_MAX_LEN: usize = 253;

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`
fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= DNS1123_SUBDOMAIN_MAX_LEN
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
            !b.is_empty()
                && alnum(&b[0])
                && alnum(&b[b.len() - 1])
                && b.iter().all(|c| alnum(c) || *c == b'-')
        })
}

fn validate_key(key: &str) -> Result<(), LabelSelectorError> {
    let invalid = |reason: &str| {
        Err(LabelSelectorError::InvalidKey {
            key: key.to_string(),
            reason: reason.to_string(),
        })
    };
    let name = match key.split_once('/') {
        None => key,
        Some((prefix, name)) => {
            if name.contains('/') {
                return invalid("a qualified name has at most one '/'");
            }
            if prefix.is_empty() {
                return invalid("prefix part must be non-empty");
            }
            if !is_dns1123_subdomain(prefix) {
                return invalid(
                    "prefix part must be a lowercase RFC 1123 subdomain (e.g. 'example.com')",
                );
            }
            name
        }
    };
    if name.is_empty() {
        return invalid("name part must be non-empty");
    }
    if name.len() > QUALIFIED_NAME_MAX_LEN {
        return invalid("name part must be no more than 63 characters");
    }
    if !is_qualified_name_part(name) {
        return invalid(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start \
             and end with an alphanumeric character",
        );
    }
    Ok(())
}

fn validate_value(key: &str, value: &str) -> Result<(), LabelSelectorError> {
    let invalid = |reason: &str| {
        Err(LabelSelectorError::InvalidValue {
            key: key.to_string(),
            value: value.to_string(),
            reason: reason.to_string(),
        })
    };
    if value.len() > LABEL_VALUE_MAX_LEN {
        return invalid("must be no more than 63 characters");
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        return invalid(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', \
             '_' or '.', and must start and end with an alphanumeric character",
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Lexer and parser, following apimachinery's labels/selector.go.

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    /// Any run of non-special, non-space characters. `in` and `notin` are identifiers here; the
    /// parser reads them as operators only where an operator is expected.
    Ident(String),
    Bang,
    Equals,
    DoubleEquals,
    NotEquals,
    Gt,
    Lt,
    OpenPar,
    ClosePar,
    Comma,
    End,
}

impl Token {
    fn literal(&self) -> &str {
        match self {
            Token::Ident(s) => s,
            Token::Bang => "!",
            Token::Equals => "=",
            Token::DoubleEquals => "==",
            Token::NotEquals => "!=",
            Token::Gt => ">",
            Token::Lt => "<",
            Token::OpenPar => "(",
            Token::ClosePar => ")",
            Token::Comma => ",",
            Token::End => "end of string",
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

/// The spaces apimachinery's lexer skips (`isWhitespace`): only these four. Any other space (a
/// no-break space pasted from a web page, a vertical tab) is part of an identifier, which then
/// fails validation, as the apiserver refuses it.
fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn lex(input: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = input.chars().peekable();
    while let Some(&c) = chars.peek() {
        if is_space(c) {
            chars.next();
            continue;
        }
        if is_special(c) {
            chars.next();
            let next = chars.peek().copied();
            let tok = match (c, next) {
                ('!', Some('=')) => {
                    chars.next();
                    Token::NotEquals
                }
                ('=', Some('=')) => {
                    chars.next();
                    Token::DoubleEquals
                }
                ('!', _) => Token::Bang,
                ('=', _) => Token::Equals,
                ('>', _) => Token::Gt,
                ('<', _) => Token::Lt,
                ('(', _) => Token::OpenPar,
                (')', _) => Token::ClosePar,
                _ => Token::Comma,
            };
            tokens.push(tok);
            continue;
        }
        let mut ident = String::new();
        while let Some(&c) = chars.peek() {
            if is_space(c) || is_special(c) {
                break;
            }
            ident.push(c);
            chars.next();
        }
        tokens.push(Token::Ident(ident));
    }
    tokens.push(Token::End);
    tokens
}

struct Parser<'a> {
    selector: &'a str,
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> &Token {
        &self.tokens[self.pos]
    }

    fn next(&mut self) -> Token {
        let tok = self.tokens[self.pos].clone();
        if self.pos + 1 < self.tokens.len() {
            self.pos += 1;
        }
        tok
    }

    fn syntax(&self, found: &Token, expected: &'static str) -> LabelSelectorError {
        LabelSelectorError::Syntax {
            selector: self.selector.to_string(),
            found: found.literal().to_string(),
            expected,
        }
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, LabelSelectorError> {
        let mut requirements = Vec::new();
        loop {
            match self.peek() {
                Token::Ident(_) | Token::Bang => {
                    requirements.push(self.parse_requirement()?);
                    match self.next() {
                        Token::End => return Ok(requirements),
                        Token::Comma => {
                            let after = self.peek();
                            if !matches!(after, Token::Ident(_) | Token::Bang) {
                                return Err(self.syntax(after, "identifier after ','"));
                            }
                        }
                        other => return Err(self.syntax(&other, "',' or 'end of string'")),
                    }
                }
                Token::End => return Ok(requirements),
                other => return Err(self.syntax(other, "!, identifier, or 'end of string'")),
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, LabelSelectorError> {
        let mut unary = None;
        if *self.peek() == Token::Bang {
            self.next();
            unary = Some(Operator::DoesNotExist);
        }
        let key = match self.next() {
            Token::Ident(key) => key,
            other => return Err(self.syntax(&other, "identifier")),
        };
        validate_key(&key)?;
        if matches!(self.peek(), Token::End | Token::Comma) {
            let op = unary.unwrap_or(Operator::Exists);
            return Requirement::new(&key, op, Vec::<String>::new());
        }
        if unary.is_some() {
            return Err(self.syntax(self.peek(), "',' or 'end of string'"));
        }
        let op = match self.next() {
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::NotEquals => Operator::NotEquals,
            Token::Gt => Operator::GreaterThan,
            Token::Lt => Operator::LessThan,
            Token::Ident(s) if s == "in" => Operator::In,
            Token::Ident(s) if s == "notin" => Operator::NotIn,
            other => return Err(self.syntax(&other, "=, ==, !=, in, notin, >, <")),
        };
        let values = match op {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        Requirement::new(&key, op, values)
    }

    /// `( v1, v2, ... )`; `()` and empty items stand for the empty value, as in apimachinery.
    fn parse_values(&mut self) -> Result<Vec<String>, LabelSelectorError> {
        let open = self.next();
        if open != Token::OpenPar {
            return Err(self.syntax(&open, "'('"));
        }
        let mut values = Vec::new();
        if *self.peek() == Token::ClosePar {
            self.next();
            values.push(String::new());
            return Ok(values);
        }
        let mut expect_value = true;
        loop {
            match self.next() {
                Token::Ident(v) if expect_value => {
                    values.push(v);
                    expect_value = false;
                }
                Token::Comma => {
                    if expect_value {
                        values.push(String::new());
                    }
                    expect_value = true;
                }
                Token::ClosePar => {
                    if expect_value {
                        values.push(String::new());
                    }
                    return Ok(values);
                }
                other if expect_value => {
                    return Err(self.syntax(&other, "',', ')' or identifier"));
                }
                other => return Err(self.syntax(&other, "',' or ')'")),
            }
        }
    }

    /// The single value after `=`, `==`, `!=`, `>`, `<`; nothing before `,` or the end is the
    /// empty value (`a=` selects labels `a` with value "").
    fn parse_exact_value(&mut self) -> Result<Vec<String>, LabelSelectorError> {
        if matches!(self.peek(), Token::End | Token::Comma) {
            return Ok(vec![String::new()]);
        }
        match self.next() {
            Token::Ident(v) => Ok(vec![v]),
            other => Err(self.syntax(&other, "identifier")),
        }
    }
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(s: &LabelSelector, i: usize) -> (&str, Operator, Vec<&str>) {
        let r = &s.requirements()[i];
        (
            r.key(),
            r.operator(),
            r.values().iter().map(String::as_str).collect(),
        )
    }

    #[test]
    fn empty_and_blank_match_everything() {
        for input in ["", "   ", "\t"] {
            let s = LabelSelector::parse(input).unwrap();
            assert!(s.is_empty(), "{input:?}");
            assert!(s.matches(&labels(&[])));
            assert!(s.matches(&labels(&[("a", "b")])));
            assert_eq!(s.to_string(), "");
        }
    }

    /// Found by the properties in `fuzz.rs`: a no-break space (or any non-ASCII space) was
    /// skipped like a blank, so "\u{a0}" selected everything and "app=web\u{a0}" meant
    /// `app=web`; apimachinery separates tokens only by ' ', '\t', '\r' and '\n'.
    #[test]
    fn only_ascii_blanks_separate_tokens() {
        for input in [
            "\u{a0}",
            "app=web\u{a0}",
            "\u{3000}app",
            "a\u{b}=b",
            "a=b\u{c}",
            "a\u{85}",
        ] {
            assert!(LabelSelector::parse(input).is_err(), "{input:?}");
        }
        let s = LabelSelector::parse(" \r\n\tapp = web \r\n").unwrap();
        assert_eq!(s.to_string(), "app=web");
    }

    #[test]
    fn kubectl_in_and_not_exists() {
        // kubectl get pods -l 'app in (a,b),!legacy'
        let s = LabelSelector::parse("app in (a,b),!legacy").unwrap();
        assert_eq!(s.requirements().len(), 2);
        assert_eq!(req(&s, 0), ("app", Operator::In, vec!["a", "b"]));
        assert_eq!(req(&s, 1), ("legacy", Operator::DoesNotExist, vec![]));
        assert!(s.matches(&labels(&[("app", "a")])));
        assert!(s.matches(&labels(&[("app", "b"), ("tier", "web")])));
        assert!(!s.matches(&labels(&[("app", "c")])));
        assert!(!s.matches(&labels(&[("app", "a"), ("legacy", "")])));
        assert!(!s.matches(&labels(&[])));
        assert_eq!(s.to_string(), "app in (a,b),!legacy");
    }

    #[test]
    fn all_operators() {
        let s = LabelSelector::parse("a=1,b==2,c!=3,d in (x,y),e notin (z),f,!g").unwrap();
        let ops: Vec<Operator> = s.requirements().iter().map(|r| r.operator()).collect();
        assert_eq!(
            ops,
            vec![
                Operator::Equals,
                Operator::DoubleEquals,
                Operator::NotEquals,
                Operator::In,
                Operator::NotIn,
                Operator::Exists,
                Operator::DoesNotExist,
            ]
        );
        let good = labels(&[("a", "1"), ("b", "2"), ("c", "4"), ("d", "y"), ("f", "")]);
        assert!(s.matches(&good));
        let mut bad = good.clone();
        bad.insert("c".into(), "3".into());
        assert!(!s.matches(&bad));
        let mut bad = good.clone();
        bad.insert("e".into(), "z".into());
        assert!(!s.matches(&bad));
        let mut bad = good.clone();
        bad.remove("f");
        assert!(!s.matches(&bad));
        let mut bad = good.clone();
        bad.insert("g".into(), "x".into());
        assert!(!s.matches(&bad));
        assert_eq!(s.to_string(), "a=1,b==2,c!=3,d in (x,y),e notin (z),f,!g");
    }

    #[test]
    fn not_equals_and_notin_match_absent_key() {
        let s = LabelSelector::parse("env!=prod").unwrap();
        assert!(s.matches(&labels(&[])));
        assert!(s.matches(&labels(&[("env", "dev")])));
        assert!(!s.matches(&labels(&[("env", "prod")])));
        let s = LabelSelector::parse("env notin (prod,staging)").unwrap();
        assert!(s.matches(&labels(&[])));
        assert!(!s.matches(&labels(&[("env", "staging")])));
    }

    #[test]
    fn whitespace_tolerant_and_sorted() {
        let s = LabelSelector::parse("  z = 1 ,  app  in  ( b , a ) , ! old ").unwrap();
        assert_eq!(req(&s, 0), ("app", Operator::In, vec!["a", "b"]));
        assert_eq!(req(&s, 1), ("old", Operator::DoesNotExist, vec![]));
        assert_eq!(req(&s, 2), ("z", Operator::Equals, vec!["1"]));
        assert_eq!(s.to_string(), "app in (a,b),!old,z=1");
    }

    #[test]
    fn prefixed_keys_and_empty_values() {
        let s = LabelSelector::parse("node-role.kubernetes.io/control-plane").unwrap();
        assert_eq!(
            req(&s, 0),
            (
                "node-role.kubernetes.io/control-plane",
                Operator::Exists,
                vec![]
            )
        );
        assert!(s.matches(&labels(&[("node-role.kubernetes.io/control-plane", "")])));
        let s = LabelSelector::parse("a=").unwrap();
        assert_eq!(req(&s, 0), ("a", Operator::Equals, vec![""]));
        assert!(s.matches(&labels(&[("a", "")])));
        assert!(!s.matches(&labels(&[("a", "x")])));
        let s = LabelSelector::parse("a in ()").unwrap();
        assert_eq!(req(&s, 0), ("a", Operator::In, vec![""]));
        let s = LabelSelector::parse("a in (x,)").unwrap();
        assert_eq!(req(&s, 0), ("a", Operator::In, vec!["", "x"]));
    }

    #[test]
    fn keywords_are_identifiers_outside_operator_position() {
        let s = LabelSelector::parse("in in (notin),notin=in").unwrap();
        assert_eq!(req(&s, 0), ("in", Operator::In, vec!["notin"]));
        assert_eq!(req(&s, 1), ("notin", Operator::Equals, vec!["in"]));
    }

    #[test]
    fn greater_and_less_than() {
        let s = LabelSelector::parse("gen>3,gen<10").unwrap();
        assert!(s.matches(&labels(&[("gen", "5")])));
        assert!(!s.matches(&labels(&[("gen", "3")])));
        assert!(!s.matches(&labels(&[("gen", "x")])));
        assert!(!s.matches(&labels(&[])));
        assert_eq!(s.to_string(), "gen>3,gen<10");
        let err = LabelSelector::parse("gen>x").unwrap_err();
        assert!(
            matches!(err, LabelSelectorError::InvalidRequirement { .. }),
            "{err}"
        );
    }

    fn syntax_err(input: &str) -> (String, &'static str) {
        match LabelSelector::parse(input) {
            Err(LabelSelectorError::Syntax {
                selector,
                found,
                expected,
            }) => {
                assert_eq!(selector, input);
                (found, expected)
            }
            other => panic!("{input:?}: expected a syntax error, got {other:?}"),
        }
    }

    #[test]
    fn syntax_errors_quote_the_offending_token() {
        assert_eq!(
            syntax_err("a in (x,y"),
            ("end of string".into(), "',' or ')'")
        );
        assert_eq!(syntax_err("a in x"), ("x".into(), "'('"));
        assert_eq!(syntax_err("a in (x y)"), ("y".into(), "',' or ')'"));
        assert_eq!(
            syntax_err("a in (=)"),
            ("=".into(), "',', ')' or identifier")
        );
        assert_eq!(
            syntax_err("a in (x))"),
            (")".into(), "',' or 'end of string'")
        );
        assert_eq!(syntax_err("a=b c"), ("c".into(), "',' or 'end of string'"));
        assert_eq!(
            syntax_err("a=b,"),
            ("end of string".into(), "identifier after ','")
        );
        assert_eq!(
            syntax_err(",a"),
            (",".into(), "!, identifier, or 'end of string'")
        );
        assert_eq!(
            syntax_err("=b"),
            ("=".into(), "!, identifier, or 'end of string'")
        );
        assert_eq!(
            syntax_err("a b"),
            ("b".into(), "=, ==, !=, in, notin, >, <")
        );
        assert_eq!(syntax_err("!a=b"), ("=".into(), "',' or 'end of string'"));
        assert_eq!(syntax_err("!"), ("end of string".into(), "identifier"));
        assert_eq!(syntax_err("a=(b)"), ("(".into(), "identifier"));
        let msg = LabelSelector::parse("a in (x,y").unwrap_err().to_string();
        assert!(msg.contains("a in (x,y"), "{msg}");
    }

    #[test]
    fn invalid_keys_and_values() {
        let err = LabelSelector::parse("a/b/c=1").unwrap_err();
        assert!(
            matches!(&err, LabelSelectorError::InvalidKey { key, .. } if key == "a/b/c"),
            "{err:?}"
        );
        let err = LabelSelector::parse("/x").unwrap_err();
        assert!(
            matches!(err, LabelSelectorError::InvalidKey { .. }),
            "{err:?}"
        );
        let err = LabelSelector::parse("Example.com/x").unwrap_err();
        assert!(
            matches!(err, LabelSelectorError::InvalidKey { .. }),
            "{err:?}"
        );
        let err = LabelSelector::parse("-a=1").unwrap_err();
        assert!(
            matches!(err, LabelSelectorError::InvalidKey { .. }),
            "{err:?}"
        );
        let long = "k".repeat(64);
        assert!(LabelSelector::parse(&long).is_err());
        let err = LabelSelector::parse("a=b$").unwrap_err();
        assert_eq!(
            err,
            LabelSelectorError::InvalidValue {
                key: "a".into(),
                value: "b$".into(),
                reason: "a valid label must be an empty string or consist of alphanumeric \
                         characters, '-', '_' or '.', and must start and end with an \
                         alphanumeric character"
                    .into(),
            }
        );
        assert!(err.to_string().contains("\"b$\""));
    }

    #[test]
    fn structured_match_labels_and_expressions() {
        let s = LabelSelector::from_structured(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["fe", "be"]},
                {"key": "legacy", "operator": "DoesNotExist"},
                {"key": "zone", "operator": "NotIn", "values": ["a"]},
                {"key": "team", "operator": "Exists", "values": []}
            ]
        }))
        .unwrap();
        assert_eq!(
            s.to_string(),
            "app=web,!legacy,team,tier in (be,fe),zone notin (a)"
        );
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "fe"), ("team", "x")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "fe")])));
        assert!(!s.matches(&labels(&[
            ("app", "web"),
            ("tier", "fe"),
            ("team", "x"),
            ("zone", "a")
        ])));
    }

    #[test]
    fn structured_empty_null_and_errors() {
        let empty = LabelSelector::from_structured(&json!({})).unwrap();
        assert!(empty.is_empty());
        assert!(empty.matches(&labels(&[])));
        let empty = LabelSelector::from_structured(&json!({"matchLabels": {}})).unwrap();
        assert!(empty.is_empty());
        let none = LabelSelector::from_structured(&Value::Null).unwrap();
        assert!(none.is_nothing());
        assert!(!none.is_empty());
        assert!(!none.matches(&labels(&[])));
        assert!(!none.matches_opt(None));

        let err = LabelSelector::from_structured(
            &json!({"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["x"]}]}),
        )
        .unwrap_err();
        assert_eq!(err, LabelSelectorError::InvalidOperator("Equals".into()));
        assert_eq!(
            err.to_string(),
            "\"Equals\" is not a valid label selector operator"
        );
        for op in ["In", "NotIn"] {
            let err = LabelSelector::from_structured(
                &json!({"matchExpressions": [{"key": "a", "operator": op, "values": []}]}),
            )
            .unwrap_err();
            assert!(
                matches!(err, LabelSelectorError::InvalidRequirement { .. }),
                "{err:?}"
            );
            let err = LabelSelector::from_structured(
                &json!({"matchExpressions": [{"key": "a", "operator": op}]}),
            )
            .unwrap_err();
            assert!(
                matches!(err, LabelSelectorError::InvalidRequirement { .. }),
                "{err:?}"
            );
        }
        let err = LabelSelector::from_structured(
            &json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
        )
        .unwrap_err();
        assert!(matches!(err, LabelSelectorError::InvalidRequirement { .. }));
        let err = LabelSelector::from_structured(&json!({"matchLabels": {"a": 1}})).unwrap_err();
        assert!(matches!(err, LabelSelectorError::Malformed(_)));
        let err = LabelSelector::from_structured(&json!("app=web")).unwrap_err();
        assert!(matches!(err, LabelSelectorError::Malformed(_)));
        let err =
            LabelSelector::from_structured(&json!({"matchLabels": {"a b": "c"}})).unwrap_err();
        assert!(matches!(err, LabelSelectorError::InvalidKey { .. }));
    }

    #[test]
    fn from_k8s_openapi_type() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;
        let sel = metav1::LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: Some(vec![metav1::LabelSelectorRequirement {
                key: "tier".into(),
                operator: "NotIn".into(),
                values: Some(vec!["db".into()]),
            }]),
        };
        let s = LabelSelector::from_k8s(Some(&sel)).unwrap();
        assert_eq!(s.to_string(), "app=web,tier notin (db)");
        assert!(s.matches(&labels(&[("app", "web")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "db")])));
        assert!(LabelSelector::from_k8s(None).unwrap().is_nothing());
        assert!(
            LabelSelector::from_k8s(Some(&metav1::LabelSelector::default()))
                .unwrap()
                .is_empty()
        );
        let bad = metav1::LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![metav1::LabelSelectorRequirement {
                key: "tier".into(),
                operator: "In".into(),
                values: None,
            }]),
        };
        assert!(LabelSelector::from_k8s(Some(&bad)).is_err());
    }

    #[test]
    fn match_labels_map_and_object_helpers() {
        let s = LabelSelector::from_match_labels(&labels(&[("app", "web")])).unwrap();
        assert!(s.matches_object(&json!({"metadata": {"labels": {"app": "web", "x": "y"}}})));
        assert!(!s.matches_object(&json!({"metadata": {"name": "p"}})));
        assert!(!s.matches_opt(None));
        assert!(s.matches_opt(Some(&labels(&[("app", "web")]))));
        assert!(LabelSelector::everything().matches_opt(None));
        assert!(LabelSelector::everything().matches_object(&json!({})));
        let parsed: LabelSelector = "app=web".parse().unwrap();
        assert_eq!(parsed, s);
    }
}
