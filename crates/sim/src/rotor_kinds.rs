//! rotor's own resources, `RotationPolicy` and `DrainRule` (`rotor.dev/v1alpha1`, both
//! cluster-scoped), served as the CRDs in `deploy/` define them: the drainer's watches of them
//! work on the simulator as on a cluster with the CRDs installed, and tests and demos can make
//! policies with any client.
//!
//! The simulator keeps each object's fields besides `metadata` as JSON and, written through the
//! API, does not check them against the CRD's schema, as an API server would (a scenario file's
//! policies are: [`schema_problems`]): it serves what it is given, so a test can
//! also hand the drainer a policy a real API server would refuse, and it fills in none of the
//! schema's defaults (the drainer's own types default the same fields alike). `RotationPolicy`
//! has a `status` subresource (a create or a write to the main resource sets no status),
//! `DrainRule` has none, as in their CRDs; neither takes strategic merge patches (415).
//! `kubectl get` prints the columns their CRDs name ([`printer_columns`]), read from the CRD
//! files `deploy/` ships; a test holds the names and subresources written here to those files.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::LazyLock;

use k8s_openapi::ClusterResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::Error as _;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// Which of rotor's resources a [`RotorObject`] is.
pub trait RotorKind: Clone + Debug + PartialEq + Send + Sync + 'static {
    const KIND: &'static str;
    /// The CRD as `deploy/` ships it (generated from rotor-policy's types).
    const CRD: &'static str;
    const PLURAL: &'static str;
    const SINGULAR: &'static str;
    const SHORT_NAMES: &'static [&'static str];
    const HAS_STATUS: bool;
}

pub const GROUP: &str = "rotor.dev";
pub const VERSION: &str = "v1alpha1";
pub const API_VERSION: &str = "rotor.dev/v1alpha1";

/// One object of rotor's resource `R`: its metadata, typed as the store needs it, and the rest
/// (`spec`, `status`) as it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct RotorObject<R> {
    pub metadata: ObjectMeta,
    /// Every field but `apiVersion`, `kind` and `metadata`.
    pub fields: Map<String, Value>,
    kind: PhantomData<R>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RotationPolicyKind;

impl RotorKind for RotationPolicyKind {
    const KIND: &'static str = "RotationPolicy";
    const CRD: &'static str =
        include_str!("../../../deploy/base/crds/rotationpolicies.rotor.dev.yaml");
    const PLURAL: &'static str = "rotationpolicies";
    const SINGULAR: &'static str = "rotationpolicy";
    const SHORT_NAMES: &'static [&'static str] = &["rpol"];
    const HAS_STATUS: bool = true;
}

#[derive(Clone, Debug, PartialEq)]
pub struct DrainRuleKind;

impl RotorKind for DrainRuleKind {
    const KIND: &'static str = "DrainRule";
    const CRD: &'static str = include_str!("../../../deploy/base/crds/drainrules.rotor.dev.yaml");
    const PLURAL: &'static str = "drainrules";
    const SINGULAR: &'static str = "drainrule";
    const SHORT_NAMES: &'static [&'static str] = &["drule"];
    const HAS_STATUS: bool = false;
}

pub type RotationPolicy = RotorObject<RotationPolicyKind>;
pub type DrainRule = RotorObject<DrainRuleKind>;

impl<R: RotorKind> k8s_openapi::Resource for RotorObject<R> {
    const API_VERSION: &'static str = API_VERSION;
    const GROUP: &'static str = GROUP;
    const KIND: &'static str = R::KIND;
    const VERSION: &'static str = VERSION;
    const URL_PATH_SEGMENT: &'static str = R::PLURAL;
    type Scope = ClusterResourceScope;
}

impl<R: RotorKind> k8s_openapi::Metadata for RotorObject<R> {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<R: RotorKind> Serialize for RotorObject<R> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(3 + self.fields.len()))?;
        map.serialize_entry("apiVersion", API_VERSION)?;
        map.serialize_entry("kind", R::KIND)?;
        map.serialize_entry("metadata", &self.metadata)?;
        for (key, value) in &self.fields {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl<'de, R: RotorKind> Deserialize<'de> for RotorObject<R> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut fields = Map::deserialize(d)?;
        // A body may leave out apiVersion and kind, as the API server's decoder allows for a
        // typed path; one that names them must name this resource.
        for (field, want) in [("apiVersion", API_VERSION), ("kind", R::KIND)] {
            match fields.remove(field) {
                None => {}
                Some(Value::String(got)) if got == want => {}
                Some(got) => {
                    return Err(D::Error::custom(format!(
                        "{field} is {got}, expected {want:?}"
                    )));
                }
            }
        }
        let metadata = match fields.remove("metadata") {
            Some(m) => serde_json::from_value(m).map_err(D::Error::custom)?,
            None => ObjectMeta::default(),
        };
        Ok(RotorObject {
            metadata,
            fields,
            kind: PhantomData,
        })
    }
}

/// One of a CRD's `additionalPrinterColumns`: what `kubectl get` shows of each object.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrinterColumn {
    pub name: String,
    /// `integer`, `string`, `date`, ...
    #[serde(rename = "type")]
    pub type_: String,
    /// A path of fields (`.status.nodes`): all that rotor's CRDs use of JSONPath.
    pub json_path: String,
    #[serde(default)]
    pub priority: i32,
}

impl PrinterColumn {
    /// This column's value in `object`; `null` where the object has none, as an API server
    /// sends it (kubectl leaves the cell empty).
    pub fn value_in<'a>(&self, object: &'a Value) -> &'a Value {
        self.json_path
            .split('.')
            .filter(|field| !field.is_empty())
            .fold(object, |at, field| at.get(field).unwrap_or(&Value::Null))
    }
}

fn columns_of(crd: &str) -> Vec<PrinterColumn> {
    #[derive(Deserialize)]
    struct Crd {
        spec: CrdSpec,
    }
    #[derive(Deserialize)]
    struct CrdSpec {
        versions: Vec<CrdVersion>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct CrdVersion {
        name: String,
        #[serde(default)]
        additional_printer_columns: Vec<PrinterColumn>,
    }
    let crd: Crd = serde_saphyr::from_str(crd).expect("deploy/'s CRD files parse");
    crd.spec
        .versions
        .into_iter()
        .find(|v| v.name == VERSION)
        .map(|v| v.additional_printer_columns)
        .unwrap_or_default()
}

/// The printer columns of rotor's resource of `kind` (after the name, which every Table
/// shows first), as its CRD names them; `None` for any other kind.
pub fn printer_columns(kind: &str) -> Option<&'static [PrinterColumn]> {
    static POLICY: LazyLock<Vec<PrinterColumn>> =
        LazyLock::new(|| columns_of(RotationPolicyKind::CRD));
    static RULE: LazyLock<Vec<PrinterColumn>> = LazyLock::new(|| columns_of(DrainRuleKind::CRD));
    match kind {
        RotationPolicyKind::KIND => Some(&POLICY),
        DrainRuleKind::KIND => Some(&RULE),
        _ => None,
    }
}

/// What `R`'s CRD schema refuses in `object` (a whole object of rotor's resource `R`, as JSON),
/// one line per problem, by path (`spec.budgets[0].node`): what an API server refuses (a field
/// of the wrong type, a required one missing, a value outside an enum, a length or count
/// limit, a minimum or maximum, or an integer format's range) and what it would drop silently
/// where a scenario had better refuse it: fields the schema does not know, which it prunes,
/// and nulls where a field is not nullable, which it drops (a null under a required field is
/// reported as the field missing, as the API server would then find it). The simulator keeps
/// an object as written, so each of these would also reach the drainer, which would fail to
/// decode the list of policies at all. Maps the schema leaves open (`additionalProperties`,
/// as `matchLabels`) take any key; `metadata` is not looked into, nor the patterns and the
/// CEL rules, which the drainer judges itself (marking the policy Invalid).
pub fn schema_problems<R: RotorKind>(object: &Value) -> Vec<String> {
    let crd: Value = serde_saphyr::from_str(R::CRD).expect("deploy/'s CRD files parse");
    let schema = crd["spec"]["versions"]
        .as_array()
        .and_then(|versions| versions.iter().find(|v| v["name"] == VERSION))
        .map(|v| &v["schema"]["openAPIV3Schema"])
        .unwrap_or(&Value::Null);
    // The object without what every object carries and the schema leaves to the API server.
    let mut body = object.clone();
    if let Some(fields) = body.as_object_mut() {
        for key in ["apiVersion", "kind", "metadata"] {
            fields.remove(key);
        }
    }
    let mut problems = Vec::new();
    walk_schema(&body, schema, "", &mut problems);
    problems.sort();
    problems
}

fn walk_schema(value: &Value, schema: &Value, path: &str, problems: &mut Vec<String>) {
    let at = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    if value.is_null() {
        if schema["nullable"] != true {
            problems.push(format!(
                "{path}: null, which an API server would drop; leave the field out instead"
            ));
        }
        return;
    }
    if let Some(problem) = value_problem(value, schema) {
        problems.push(format!("{path}: {problem}"));
        return;
    }
    match value {
        Value::Object(fields) => {
            let required = schema["required"].as_array().into_iter().flatten();
            let mut given_null = Vec::new();
            for key in required.filter_map(Value::as_str) {
                match fields.get(key) {
                    None => problems.push(format!("{}: required", at(key))),
                    Some(Value::Null) => {
                        problems.push(format!("{}: required (null given)", at(key)));
                        given_null.push(key);
                    }
                    Some(_) => {}
                }
            }
            let fields = fields
                .iter()
                .filter(|(k, _)| !given_null.contains(&k.as_str()));
            if let Some(open) = schema.get("additionalProperties") {
                for (key, v) in fields {
                    walk_schema(v, open, &at(key), problems);
                }
            } else if let Some(known) = schema.get("properties") {
                for (key, v) in fields {
                    match known.get(key) {
                        Some(field) => walk_schema(v, field, &at(key), problems),
                        None => problems.push(format!("{}: unknown field", at(key))),
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    walk_schema(v, item, &format!("{path}[{i}]"), problems);
                }
            }
        }
        _ => {}
    }
}

/// What is wrong with `value` (not null) itself against `schema`: its type, its enum, its
/// length or number of items, its minimum and maximum, its integer format's range.
fn value_problem(value: &Value, schema: &Value) -> Option<String> {
    let fits = if schema["x-kubernetes-int-or-string"] == true {
        (value.is_i64() || value.is_u64() || value.is_string())
            .then_some(())
            .ok_or("an integer or a string")
    } else {
        match schema["type"].as_str() {
            Some("string") => value.is_string().then_some(()).ok_or("a string"),
            Some("integer") => (value.is_i64() || value.is_u64())
                .then_some(())
                .ok_or("an integer"),
            Some("number") => value.is_number().then_some(()).ok_or("a number"),
            Some("boolean") => value.is_boolean().then_some(()).ok_or("true or false"),
            Some("array") => value.is_array().then_some(()).ok_or("a list"),
            Some("object") => value.is_object().then_some(()).ok_or("an object"),
            _ => Ok(()),
        }
    };
    if let Err(want) = fits {
        return Some(format!("{value} is not {want}"));
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        let allowed: Vec<String> = allowed.iter().map(Value::to_string).collect();
        return Some(format!("{value} is not one of {}", allowed.join(", ")));
    }
    // Lengths count characters, as the API server's validation does.
    let size = match value {
        Value::String(text) => Some((text.chars().count(), "characters", "minLength", "maxLength")),
        Value::Array(items) => Some((items.len(), "items", "minItems", "maxItems")),
        _ => None,
    };
    if let Some((n, unit, min_key, max_key)) = size {
        if let Some(max) = schema[max_key].as_u64()
            && n as u64 > max
        {
            return Some(format!("{n} {unit}; at most {max}"));
        }
        if let Some(min) = schema[min_key].as_u64()
            && (n as u64) < min
        {
            return Some(format!("{n} {unit}; at least {min}"));
        }
    }
    if let Some(v) = value.as_f64() {
        if let Some(min) = schema["minimum"].as_f64()
            && v < min
        {
            return Some(format!("{value} is below the minimum, {min}"));
        }
        if let Some(max) = schema["maximum"].as_f64()
            && v > max
        {
            return Some(format!("{value} is above the maximum, {max}"));
        }
    }
    let range = match schema["format"].as_str() {
        Some("int32") => Some((i64::from(i32::MIN), i64::from(i32::MAX))),
        Some("uint32") => Some((0, i64::from(u32::MAX))),
        _ => None,
    };
    if let Some((min, max)) = range
        && !value.as_i64().is_some_and(|v| (min..=max).contains(&v))
    {
        return Some(format!("{value} is out of range ({min} to {max})"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_object_round_trips_with_its_api_version_and_kind() {
        let written = json!({
            "apiVersion": "rotor.dev/v1alpha1",
            "kind": "RotationPolicy",
            "metadata": {"name": "gpu"},
            "spec": {"nodeSelector": {"matchLabels": {"pool": "gpu"}}, "maxUnavailable": 1},
        });
        let policy: RotationPolicy = serde_json::from_value(written.clone()).unwrap();
        assert_eq!(policy.metadata.name.as_deref(), Some("gpu"));
        assert_eq!(policy.fields.keys().collect::<Vec<_>>(), ["spec"]);
        assert_eq!(serde_json::to_value(&policy).unwrap(), written);

        // apiVersion and kind may be left out; they are written back.
        let bare: DrainRule =
            serde_json::from_value(json!({"spec": {"behavior": "Skip"}})).unwrap();
        let out = serde_json::to_value(&bare).unwrap();
        assert_eq!(out["kind"], "DrainRule");
        assert_eq!(out["apiVersion"], "rotor.dev/v1alpha1");
        assert_eq!(out["spec"]["behavior"], "Skip");
    }

    #[test]
    fn printer_columns_are_the_crds() {
        let names = |kind| -> Vec<&str> {
            printer_columns(kind)
                .unwrap()
                .iter()
                .map(|c| c.name.as_str())
                .collect()
        };
        assert_eq!(
            names("RotationPolicy"),
            [
                "Priority",
                "Nodes",
                "Out-of-date",
                "Draining",
                "Drained",
                "Blocked",
                "Budget",
                "Until",
                "Age"
            ]
        );
        assert_eq!(names("DrainRule"), ["Behavior", "Order", "Age"]);
        assert!(printer_columns("Pod").is_none());
        let nodes = &printer_columns("RotationPolicy").unwrap()[1];
        let policy = json!({"status": {"nodes": 4}});
        assert_eq!(nodes.value_in(&policy), &json!(4));
        assert_eq!(nodes.value_in(&json!({"spec": {}})), &Value::Null);
    }

    /// The names and the status subresource written above are the CRD's: a rename in
    /// rotor-policy (which generates the CRD files) fails here, not in a drainer test.
    #[test]
    fn names_and_subresources_are_the_crds() {
        fn check<R: RotorKind>() {
            let crd: Value = serde_saphyr::from_str(R::CRD).expect("the CRD parses");
            let names = &crd["spec"]["names"];
            assert_eq!(names["kind"], R::KIND);
            assert_eq!(names["plural"], R::PLURAL);
            assert_eq!(names["singular"], R::SINGULAR);
            assert_eq!(names["shortNames"], json!(R::SHORT_NAMES));
            assert_eq!(crd["spec"]["group"], GROUP);
            assert_eq!(crd["spec"]["scope"], "Cluster");
            let version = crd["spec"]["versions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == VERSION)
                .expect("the CRD serves VERSION");
            assert_eq!(
                version["subresources"]["status"].is_object(),
                R::HAS_STATUS,
                "{}",
                R::KIND
            );
        }
        check::<RotationPolicyKind>();
        check::<DrainRuleKind>();
    }

    #[test]
    fn a_body_naming_another_kind_is_refused() {
        let err = serde_json::from_value::<DrainRule>(json!({
            "apiVersion": "rotor.dev/v1alpha1",
            "kind": "RotationPolicy",
            "metadata": {"name": "x"},
        }))
        .unwrap_err();
        assert!(err.to_string().contains("expected \"DrainRule\""), "{err}");
        let err =
            serde_json::from_value::<RotationPolicy>(json!({"apiVersion": "v1"})).unwrap_err();
        assert!(err.to_string().contains("apiVersion"), "{err}");
    }

    #[test]
    fn what_the_crd_schema_refuses_is_named_by_path() {
        let policy = json!({
            "apiVersion": "rotor.dev/v1alpha1",
            "kind": "RotationPolicy",
            "metadata": {"name": "gpu", "labels": {"any": "thing"}},
            "spec": {
                "nodeSelector": {
                    "matchLabels": {"any-key": "is-fine"},
                    "matchExpressions": [{"key": "a", "operator": "in"}, {"key": "b"}]
                },
                "budgets": [{"nodes": "1"}, {"node": "2"}, {"nodes": 3}],
                "drain": {"timeout": "1h", "force": true, "surge": null},
                "priority": 3_000_000_000_u64,
                "maxUnavailable": 1
            },
            "extra": {}
        });
        assert_eq!(
            schema_problems::<RotationPolicyKind>(&policy),
            [
                "extra: unknown field",
                "spec.budgets[1].node: unknown field",
                "spec.budgets[1].nodes: required",
                "spec.budgets[2].nodes: 3 is not a string",
                "spec.drain.force: unknown field",
                "spec.maxUnavailable: unknown field",
                "spec.nodeSelector.matchExpressions[0].operator: \"in\" is not one of \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\"",
                "spec.nodeSelector.matchExpressions[1].operator: required",
                "spec.priority: 3000000000 is above the maximum, 2147483647",
            ]
        );
        // A null where the schema does not allow one: an API server drops it, the drainer's
        // decoding of the list would fail on it. Under a required field, the field is missing.
        let nulls = json!({"spec": {"nodeSelector": null, "priority": null,
            "budgets": [{"nodes": null, "schedule": null}]}});
        assert_eq!(
            schema_problems::<RotationPolicyKind>(&nulls),
            [
                "spec.budgets[0].nodes: required (null given)",
                "spec.nodeSelector: null, which an API server would drop; leave the field out instead",
                "spec.priority: null, which an API server would drop; leave the field out instead",
            ]
        );
        // `spec:` written with nothing under it.
        assert_eq!(
            schema_problems::<RotationPolicyKind>(&json!({"spec": null})),
            ["spec: required (null given)"]
        );
    }

    #[test]
    fn lengths_counts_and_minimums_are_held_to_the_crds_limits() {
        let budget = json!({"nodes": "1"});
        let policy = json!({"spec": {
            "budgets": [
                {"nodes": "123456789"},
                {"nodes": "1", "reasons": vec!["image"; 17]},
                {"nodes": "2", "timeZone": "Ä".repeat(64)},
            ],
            "nodeSelector": {"matchExpressions": [{"key": "", "operator": "Exists"}]}
        }});
        assert_eq!(
            schema_problems::<RotationPolicyKind>(&policy),
            [
                "spec.budgets[0].nodes: 9 characters; at most 8",
                "spec.budgets[1].reasons: 17 items; at most 16",
                "spec.nodeSelector.matchExpressions[0].key: 0 characters; at least 1",
            ],
            "64 two-byte characters are 64 characters, within timeZone's 64"
        );
        let many = json!({"spec": {"budgets": vec![budget.clone(); 51]}});
        assert_eq!(
            schema_problems::<RotationPolicyKind>(&many),
            ["spec.budgets: 51 items; at most 50"]
        );
        let fifty = json!({"spec": {"budgets": vec![budget; 50]}});
        assert!(schema_problems::<RotationPolicyKind>(&fifty).is_empty());
        let no_pods = json!({"spec": {"behavior": "Skip", "pods": []}});
        assert_eq!(
            schema_problems::<DrainRuleKind>(&no_pods),
            ["spec.pods: 0 items; at least 1"]
        );
        // Only the status carries a minimum (a scenario may not write a status at all).
        let status = json!({"spec": {}, "status": {"outOfDate": -1}});
        assert_eq!(
            schema_problems::<RotationPolicyKind>(&status),
            ["status.outOfDate: -1 is below the minimum, 0"]
        );
        let clean = json!({"spec": {"nodeSelector": {"matchExpressions": [
            {"key": "pool", "operator": "In", "values": ["a"]}
        ]}, "priority": -5, "budgets": [
            {"nodes": "20%", "schedule": "0 9 * * 1-5", "duration": "8h", "reasons": ["image"],
             "timeZone": null}
        ], "drain": {"timeout": "1h", "surge": true}}});
        assert_eq!(
            schema_problems::<RotationPolicyKind>(&clean),
            Vec::<String>::new()
        );
    }
}
