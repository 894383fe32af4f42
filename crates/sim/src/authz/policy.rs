//! The policy the simulator enforces, read from a multi-document YAML stream such as
//! `kubectl kustomize deploy/overlays/kubernetes` prints: its ServiceAccounts become
//! identities with bearer tokens, its Roles, ClusterRoles and bindings become each identity's
//! rules. Other kinds are ignored. Bindings are resolved once, at load time, since the policy
//! never changes while the simulator runs.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::rules::{PolicyRule, Scope, ScopedRule, authenticated_defaults};

const RBAC_API_VERSION: &str = "rbac.authorization.k8s.io/v1";
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read the authorization file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "authorization file {origin}, document {index} (counting from 1){what}: {reason}; fix the manifest or leave it out of the file"
    )]
    Invalid {
        origin: String,
        index: usize,
        /// ` (ClusterRole rotor-drainer)` when known.
        what: String,
        reason: String,
    },
}

/// A ServiceAccount and the bearer token the simulator accepts for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceAccount {
    pub namespace: String,
    pub name: String,
    pub token: String,
}

impl ServiceAccount {
    /// The user name the apiserver gives its tokens.
    pub fn user(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }
}

/// Who a token authenticates as and what it may do.
#[derive(Clone, Debug)]
pub struct Identity {
    pub user: String,
    /// The admin kubeconfig's identity: every request allowed, as `system:masters`.
    pub admin: bool,
    pub rules: Vec<ScopedRule>,
}

#[derive(Debug, Default)]
pub struct Policy {
    pub service_accounts: Vec<ServiceAccount>,
    pub identities: HashMap<String, Identity>,
    /// Things worth a warning that the apiserver would accept too (a binding to a role that
    /// does not exist grants nothing).
    pub warnings: Vec<String>,
}

/// The token the simulator hands a ServiceAccount. Deterministic, so tests and scripts can
/// rebuild a kubeconfig without reading files; only the simulator accepts it.
pub fn token_for(namespace: &str, name: &str) -> String {
    format!("rotor-sim-sa.{namespace}.{name}")
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RoleDoc {
    #[serde(default)]
    rules: Option<Vec<PolicyRule>>,
    #[serde(default)]
    aggregation_rule: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BindingDoc {
    role_ref: RoleRef,
    #[serde(default)]
    subjects: Option<Vec<Subject>>,
}

#[derive(Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RoleRef {
    api_group: String,
    kind: String,
    name: String,
}

#[derive(Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Subject {
    kind: String,
    #[serde(default)]
    api_group: String,
    name: String,
    #[serde(default)]
    namespace: Option<String>,
}

struct Binding {
    /// `None` for a ClusterRoleBinding.
    namespace: Option<String>,
    role_ref: RoleRef,
    subjects: Vec<Subject>,
    label: String,
}

/// Splits a YAML stream into documents at `---` lines. Kept by hand rather than left to the
/// parser so that document numbers in errors count every document, empty ones included.
fn documents(text: &str) -> Vec<String> {
    let mut docs = vec![String::new()];
    for line in text.lines() {
        let is_separator = line == "---"
            || line
                .strip_prefix("---")
                .is_some_and(|rest| rest.starts_with([' ', '\t']));
        if is_separator {
            docs.push(String::new());
        } else {
            let last = docs.last_mut().expect("docs is never empty");
            last.push_str(line);
            last.push('\n');
        }
    }
    // A stream that starts with `---` has no document before it.
    if docs.len() > 1 && docs[0].trim().is_empty() {
        docs.remove(0);
    }
    docs
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

impl Policy {
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Policy::from_yaml(&text, &path.display().to_string())
    }

    /// Parses and validates the stream, then resolves every ServiceAccount's rules.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Policy, PolicyError> {
        let mut accounts = Vec::new();
        let mut roles: HashMap<(String, String), Vec<PolicyRule>> = HashMap::new();
        let mut cluster_roles: HashMap<String, Vec<PolicyRule>> = HashMap::new();
        let mut bindings = Vec::new();
        for (i, doc) in documents(text).iter().enumerate() {
            let index = i + 1;
            let invalid = |what: String, reason: String| PolicyError::Invalid {
                origin: origin.to_string(),
                index,
                what,
                reason,
            };
            let v: Value = serde_saphyr::from_str(doc)
                .map_err(|e| invalid(String::new(), format!("not valid YAML: {e}")))?;
            if v.is_null() {
                continue;
            }
            let kind = str_at(&v, &["kind"]).unwrap_or_default();
            let api_version = str_at(&v, &["apiVersion"]).unwrap_or_default();
            let name = str_at(&v, &["metadata", "name"]).unwrap_or_default();
            let namespace = str_at(&v, &["metadata", "namespace"]);
            let what = format!(" ({kind} {name})");
            let is_rbac = matches!(
                kind,
                "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding"
            );
            if !is_rbac && kind != "ServiceAccount" {
                continue;
            }
            let wanted_version = if is_rbac { RBAC_API_VERSION } else { "v1" };
            if api_version != wanted_version {
                return Err(invalid(
                    what,
                    format!("apiVersion is {api_version:?}, a {kind} must be {wanted_version:?}"),
                ));
            }
            if name.is_empty() {
                return Err(invalid(what, "metadata.name is missing".into()));
            }
            let namespaced = matches!(kind, "Role" | "RoleBinding" | "ServiceAccount");
            let namespace = match (namespaced, namespace) {
                (true, Some(ns)) if !ns.is_empty() => Some(ns.to_string()),
                (true, _) => {
                    return Err(invalid(
                        what,
                        format!(
                            "metadata.namespace is missing; the simulator does not guess the namespace a {kind} would be applied to"
                        ),
                    ));
                }
                (false, Some(ns)) => {
                    return Err(invalid(
                        what,
                        format!("a {kind} is cluster-scoped but has metadata.namespace {ns:?}"),
                    ));
                }
                (false, None) => None,
            };
            match kind {
                "ServiceAccount" => {
                    let ns = namespace.expect("namespaced kinds have a namespace");
                    if accounts
                        .iter()
                        .any(|a: &ServiceAccount| a.namespace == ns && a.name == name)
                    {
                        return Err(invalid(what, "this ServiceAccount appears twice".into()));
                    }
                    accounts.push(ServiceAccount {
                        token: token_for(&ns, name),
                        namespace: ns,
                        name: name.to_string(),
                    })
                }
                "Role" | "ClusterRole" => {
                    let r: RoleDoc = serde_json::from_value(v.clone())
                        .map_err(|e| invalid(what.clone(), e.to_string()))?;
                    if r.aggregation_rule.is_some() {
                        return Err(invalid(
                            what,
                            "aggregationRule is not simulated; list the rules explicitly".into(),
                        ));
                    }
                    let rules = r.rules.unwrap_or_default();
                    for (k, rule) in rules.iter().enumerate() {
                        validate_rule(rule, namespaced).map_err(|reason| {
                            invalid(what.clone(), format!("rules[{k}]: {reason}"))
                        })?;
                    }
                    match namespace {
                        Some(ns) => roles.insert((ns, name.to_string()), rules),
                        None => cluster_roles.insert(name.to_string(), rules),
                    };
                }
                _ => {
                    let b: BindingDoc = serde_json::from_value(v.clone())
                        .map_err(|e| invalid(what.clone(), e.to_string()))?;
                    validate_binding(&b, namespace.is_some())
                        .map_err(|r| invalid(what.clone(), r))?;
                    bindings.push(Binding {
                        namespace,
                        role_ref: b.role_ref,
                        subjects: b.subjects.unwrap_or_default(),
                        label: format!("{kind} {name}"),
                    });
                }
            }
        }

        let mut policy = Policy::default();
        for b in &bindings {
            let exists = match (b.role_ref.kind.as_str(), &b.namespace) {
                ("Role", Some(ns)) => roles.contains_key(&(ns.clone(), b.role_ref.name.clone())),
                _ => cluster_roles.contains_key(&b.role_ref.name),
            };
            if !exists {
                policy.warnings.push(format!(
                    "{} references {} {} which is not in the file; it grants nothing",
                    b.label, b.role_ref.kind, b.role_ref.name
                ));
            }
        }
        for sa in &accounts {
            let mut rules = authenticated_defaults();
            for b in bindings.iter().filter(|b| binds(b, sa)) {
                let granted = match (b.role_ref.kind.as_str(), &b.namespace) {
                    ("Role", Some(ns)) => roles.get(&(ns.clone(), b.role_ref.name.clone())),
                    _ => cluster_roles.get(&b.role_ref.name),
                };
                let scope = match &b.namespace {
                    Some(ns) => Scope::Namespace(ns.clone()),
                    None => Scope::Cluster,
                };
                rules.extend(granted.into_iter().flatten().map(|r| ScopedRule {
                    scope: scope.clone(),
                    rule: r.clone(),
                }));
            }
            policy.identities.insert(
                sa.token.clone(),
                Identity {
                    user: sa.user(),
                    admin: false,
                    rules,
                },
            );
        }
        policy.service_accounts = accounts;
        Ok(policy)
    }
}

/// The checks the apiserver's RBAC validation makes on a rule.
fn validate_rule(rule: &PolicyRule, namespaced: bool) -> Result<(), String> {
    if rule.verbs.is_empty() {
        return Err("verbs must contain at least one value".into());
    }
    if !rule.non_resource_urls.is_empty() {
        if namespaced {
            return Err("a Role cannot grant nonResourceURLs; use a ClusterRole".into());
        }
        if !rule.api_groups.is_empty() || !rule.resources.is_empty() {
            return Err("a rule cannot apply to both regular resources and nonResourceURLs".into());
        }
        return Ok(());
    }
    if rule.api_groups.is_empty() {
        return Err(
            "resource rules must supply at least one api group (\"\" is the core group)".into(),
        );
    }
    if rule.resources.is_empty() {
        return Err("resource rules must supply at least one resource".into());
    }
    Ok(())
}

fn validate_binding(b: &BindingDoc, namespaced: bool) -> Result<(), String> {
    let r = &b.role_ref;
    if r.api_group != RBAC_GROUP {
        return Err(format!(
            "roleRef.apiGroup is {:?}, must be {RBAC_GROUP:?}",
            r.api_group
        ));
    }
    match (r.kind.as_str(), namespaced) {
        ("ClusterRole", _) | ("Role", true) => {}
        ("Role", false) => {
            return Err("a ClusterRoleBinding can only reference a ClusterRole".into());
        }
        (k, _) => {
            return Err(format!(
                "roleRef.kind is {k:?}, must be Role or ClusterRole"
            ));
        }
    }
    if r.name.is_empty() {
        return Err("roleRef.name is missing".into());
    }
    for (k, s) in b.subjects.iter().flatten().enumerate() {
        match s.kind.as_str() {
            "ServiceAccount" => {
                if !s.api_group.is_empty() {
                    return Err(format!(
                        "subjects[{k}]: a ServiceAccount subject has apiGroup \"\", not {:?}",
                        s.api_group
                    ));
                }
                if !namespaced && s.namespace.as_deref().unwrap_or_default().is_empty() {
                    return Err(format!(
                        "subjects[{k}]: ServiceAccount {} needs a namespace in a ClusterRoleBinding",
                        s.name
                    ));
                }
            }
            "User" | "Group" => {
                if s.api_group != RBAC_GROUP {
                    return Err(format!(
                        "subjects[{k}]: a {} subject has apiGroup {RBAC_GROUP:?}, not {:?}",
                        s.kind, s.api_group
                    ));
                }
            }
            other => {
                return Err(format!(
                    "subjects[{k}]: kind {other:?} is not ServiceAccount, User or Group"
                ));
            }
        }
        if s.name.is_empty() {
            return Err(format!("subjects[{k}]: name is missing"));
        }
    }
    Ok(())
}

/// Whether a binding names this ServiceAccount, directly, by user name, or through one of the
/// groups its tokens carry.
fn binds(b: &Binding, sa: &ServiceAccount) -> bool {
    let user = sa.user();
    let groups = [
        "system:authenticated".to_string(),
        "system:serviceaccounts".to_string(),
        format!("system:serviceaccounts:{}", sa.namespace),
    ];
    b.subjects.iter().any(|s| match s.kind.as_str() {
        "ServiceAccount" => {
            // In a RoleBinding a subject without a namespace means the binding's own.
            let ns = s
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .or(b.namespace.as_deref());
            s.name == sa.name && ns == Some(sa.namespace.as_str())
        }
        "User" => s.name == user,
        "Group" => groups.contains(&s.name),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authz::rules::{Attributes, Decision, ResourceAttributes, Target, authorize};

    const STREAM: &str = r#"apiVersion: v1
kind: Namespace
metadata:
  name: rotor-system
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: rotor-drainer
  namespace: rotor-system
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: rotor-selector
  namespace: rotor-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: rotor-drainer
rules:
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: [""]
  resources: ["pods/eviction"]
  verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: rotor-drainer
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: rotor-drainer
subjects:
- kind: ServiceAccount
  name: rotor-drainer
  namespace: rotor-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: rotor-drainer-leader-election
  namespace: rotor-system
rules:
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "create", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: rotor-drainer-leader-election
  namespace: rotor-system
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: rotor-drainer-leader-election
subjects:
- kind: ServiceAccount
  name: rotor-drainer
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: rotor-drainer
  namespace: rotor-system
spec: {}
"#;

    fn get(verb: &str, group: &str, resource: &str, ns: Option<&str>) -> Attributes {
        Attributes {
            verb: verb.into(),
            target: Target::Resource(ResourceAttributes {
                group: group.into(),
                resource: resource.into(),
                subresource: None,
                namespace: ns.map(Into::into),
                name: Some("x".into()),
            }),
        }
    }

    #[test]
    fn service_accounts_get_the_rules_of_their_bindings() {
        let p = Policy::from_yaml(STREAM, "test").unwrap();
        assert_eq!(p.service_accounts.len(), 2);
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        let drainer = &p.identities[&token_for("rotor-system", "rotor-drainer")];
        assert_eq!(
            drainer.user,
            "system:serviceaccount:rotor-system:rotor-drainer"
        );
        assert_eq!(
            authorize(&drainer.rules, &get("patch", "", "nodes", None)),
            Decision::Allow
        );
        let lease = |ns| get("update", "coordination.k8s.io", "leases", ns);
        assert_eq!(
            authorize(&drainer.rules, &lease(Some("rotor-system"))),
            Decision::Allow
        );
        assert_eq!(
            authorize(&drainer.rules, &lease(Some("default"))),
            Decision::Deny
        );
        // The selector is bound to nothing but keeps discovery.
        let selector = &p.identities[&token_for("rotor-system", "rotor-selector")];
        assert_eq!(
            authorize(&selector.rules, &get("patch", "", "nodes", None)),
            Decision::Deny
        );
        let version = Attributes {
            verb: "get".into(),
            target: Target::NonResource("/version".into()),
        };
        assert_eq!(authorize(&selector.rules, &version), Decision::Allow);
    }

    #[test]
    fn cluster_roles_bound_in_a_namespace_apply_there_only() {
        let stream = format!(
            "{STREAM}---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: read\n  namespace: shop\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: view\nsubjects:\n- kind: Group\n  apiGroup: rbac.authorization.k8s.io\n  name: system:serviceaccounts:rotor-system\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: view\nrules:\n- apiGroups: [apps]\n  resources: [deployments]\n  verbs: [get]\n"
        );
        let p = Policy::from_yaml(&stream, "test").unwrap();
        let selector = &p.identities[&token_for("rotor-system", "rotor-selector")];
        let dep = |ns| get("get", "apps", "deployments", ns);
        assert_eq!(
            authorize(&selector.rules, &dep(Some("shop"))),
            Decision::Allow
        );
        assert_eq!(
            authorize(&selector.rules, &dep(Some("other"))),
            Decision::Deny
        );
        assert_eq!(authorize(&selector.rules, &dep(None)), Decision::Deny);
    }

    fn error_of(stream: &str) -> String {
        Policy::from_yaml(stream, "deploy.yaml")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn invalid_rbac_objects_are_refused_with_the_document_and_reason() {
        let bad_version = STREAM.replacen(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\n",
            "apiVersion: rbac.authorization.k8s.io/v1beta\nkind: ClusterRole\n",
            1,
        );
        let e = error_of(&bad_version);
        assert!(
            e.contains("document 4 (counting from 1) (ClusterRole rotor-drainer)"),
            "{e}"
        );
        assert!(e.contains("\"rbac.authorization.k8s.io/v1beta\""), "{e}");

        let typo = STREAM.replacen("  verbs: [\"create\"]", "  verb: [\"create\"]", 1);
        let e = error_of(&typo);
        assert!(
            e.contains("document 4") && e.contains("unknown field `verb`"),
            "{e}"
        );

        let no_group = STREAM.replacen(
            "- apiGroups: [\"\"]\n  resources: [\"pods/eviction\"]",
            "- resources: [\"pods/eviction\"]",
            1,
        );
        let e = error_of(&no_group);
        assert!(
            e.contains("rules[1]: resource rules must supply at least one api group"),
            "{e}"
        );

        let crb_to_role = STREAM.replacen(
            "roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole",
            "roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role",
            1,
        );
        let e = error_of(&crb_to_role);
        assert!(
            e.contains("document 5") && e.contains("only reference a ClusterRole"),
            "{e}"
        );

        let no_ns = STREAM.replacen(
            "  name: rotor-selector\n  namespace: rotor-system\n",
            "  name: rotor-selector\n",
            1,
        );
        let e = error_of(&no_ns);
        assert!(
            e.contains("document 3 (counting from 1) (ServiceAccount rotor-selector)"),
            "{e}"
        );
        assert!(e.contains("metadata.namespace is missing"), "{e}");

        let e = error_of(
            "kind: ClusterRole\napiVersion: rbac.authorization.k8s.io/v1\nmetadata: {name: x}\nrules:\n- apiGroups: ['']\n  resources: [nodes]\n  verbs: []\n",
        );
        assert!(
            e.contains("document 1") && e.contains("verbs must contain at least one value"),
            "{e}"
        );
        let e = error_of(
            "kind: Role\napiVersion: rbac.authorization.k8s.io/v1\nmetadata: {name: x, namespace: a}\nrules:\n- nonResourceURLs: ['/version']\n  verbs: [get]\n",
        );
        assert!(e.contains("cannot grant nonResourceURLs"), "{e}");
        let e = error_of("a: [\n");
        assert!(
            e.contains("document 1") && e.contains("not valid YAML"),
            "{e}"
        );
    }

    #[test]
    fn documents_are_counted_even_when_empty() {
        let docs = documents("---\na: 1\n---\n---\nb: 2\n--- # c\nc: 3\n");
        assert_eq!(docs, vec!["a: 1\n", "", "b: 2\n", "c: 3\n"]);
        let e = error_of(
            "---\n---\nkind: ServiceAccount\napiVersion: v2\nmetadata: {name: a, namespace: b}\n",
        );
        assert!(e.contains("document 2"), "{e}");
    }

    #[test]
    fn bindings_to_missing_roles_grant_nothing_and_warn() {
        let stream = STREAM.replace(
            "kind: ClusterRole\nmetadata:\n  name: rotor-drainer\nrules",
            "kind: ClusterRole\nmetadata:\n  name: renamed\nrules",
        );
        let p = Policy::from_yaml(&stream, "test").unwrap();
        assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
        assert!(p.warnings[0].contains("ClusterRole rotor-drainer"));
        let drainer = &p.identities[&token_for("rotor-system", "rotor-drainer")];
        assert_eq!(
            authorize(&drainer.rules, &get("patch", "", "nodes", None)),
            Decision::Deny
        );
    }
}
