//! RBAC evaluation as the Kubernetes authorizer does it, as pure functions: the attributes of
//! one request against the rules a user holds through its bindings. Only allow rules exist;
//! a request no rule allows is denied.

use serde::Deserialize;

/// One `rules[]` entry of a Role or ClusterRole. Unknown fields are refused so that a typo
/// (`verb:` for `verbs:`) fails loudly, as the apiserver's strict field validation does.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyRule {
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub api_groups: Vec<String>,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
}

/// Where a rule applies: everywhere (through a ClusterRoleBinding) or in one namespace
/// (through a RoleBinding, whether it references a Role or a ClusterRole).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    Cluster,
    Namespace(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopedRule {
    pub scope: Scope,
    pub rule: PolicyRule,
}

/// What a resource request addresses, as the apiserver's request info names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceAttributes {
    pub group: String,
    pub resource: String,
    pub subresource: Option<String>,
    /// `None` for cluster-scoped resources and for cluster-wide lists and watches.
    pub namespace: Option<String>,
    /// `None` for collection requests (list, watch, create, deletecollection) unless a list or
    /// watch selects one object with `fieldSelector=metadata.name=...`.
    pub name: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Resource(ResourceAttributes),
    /// A path outside the resource tree: `/version`, `/api`, `/apis/apps/v1`, `/healthz`.
    NonResource(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    /// `get list watch create update patch delete deletecollection` for resources; the
    /// lower-case HTTP method for other paths.
    pub verb: String,
    pub target: Target,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny,
}

/// Allowed when any rule whose scope covers the request allows it.
pub fn authorize(rules: &[ScopedRule], attrs: &Attributes) -> Decision {
    if rules
        .iter()
        .any(|r| scope_covers(&r.scope, attrs) && rule_allows(&r.rule, attrs))
    {
        Decision::Allow
    } else {
        Decision::Deny
    }
}

/// A namespaced grant covers only resource requests in that namespace: never cluster-scoped
/// resources, cluster-wide lists, or non-resource paths.
fn scope_covers(scope: &Scope, attrs: &Attributes) -> bool {
    match (scope, &attrs.target) {
        (Scope::Cluster, _) => true,
        (Scope::Namespace(ns), Target::Resource(r)) => r.namespace.as_deref() == Some(ns),
        (Scope::Namespace(_), Target::NonResource(_)) => false,
    }
}

fn rule_allows(rule: &PolicyRule, attrs: &Attributes) -> bool {
    if !matches_or_star(&rule.verbs, &attrs.verb) {
        return false;
    }
    match &attrs.target {
        Target::Resource(r) => {
            matches_or_star(&rule.api_groups, &r.group)
                && resource_matches(&rule.resources, &r.resource, r.subresource.as_deref())
                && name_matches(&rule.resource_names, r.name.as_deref())
        }
        Target::NonResource(path) => rule
            .non_resource_urls
            .iter()
            .any(|u| non_resource_url_matches(u, path)),
    }
}

fn matches_or_star(values: &[String], wanted: &str) -> bool {
    values.iter().any(|v| v == "*" || v == wanted)
}

/// `*` matches everything; `pods` matches only `pods` (never `pods/eviction`); `pods/eviction`
/// matches that subresource; `*/status` matches the `status` subresource of any resource.
fn resource_matches(rule_resources: &[String], resource: &str, subresource: Option<&str>) -> bool {
    rule_resources.iter().any(|r| {
        if r == "*" {
            return true;
        }
        match subresource {
            None => r == resource,
            Some(sub) => match r.split_once('/') {
                Some((res, rsub)) => rsub == sub && (res == "*" || res == resource),
                None => false,
            },
        }
    })
}

/// An empty `resourceNames` allows every name; a non-empty one allows only requests that name
/// one of them, so collection requests (which name nothing) never match it.
fn name_matches(names: &[String], name: Option<&str>) -> bool {
    names.is_empty() || name.is_some_and(|n| names.iter().any(|x| x == n))
}

/// `*` matches every path; `/apis/*` matches every path under `/apis/` (a trailing `*` is a
/// prefix match); anything else matches exactly.
fn non_resource_url_matches(rule_url: &str, path: &str) -> bool {
    if rule_url == "*" || rule_url == path {
        return true;
    }
    rule_url
        .strip_suffix('*')
        .is_some_and(|prefix| path.starts_with(prefix))
}

/// The discovery paths every authenticated user may read on a real cluster, through the
/// default ClusterRoles `system:discovery` and `system:public-info-viewer` bound to the group
/// `system:authenticated`.
pub fn authenticated_defaults() -> Vec<ScopedRule> {
    let urls = [
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/healthz",
        "/livez",
        "/readyz",
        "/openapi",
        "/openapi/*",
        "/version",
        "/version/",
    ];
    vec![ScopedRule {
        scope: Scope::Cluster,
        rule: PolicyRule {
            verbs: vec!["get".into()],
            non_resource_urls: urls.iter().map(|u| u.to_string()).collect(),
            ..Default::default()
        },
    }]
}

/// The apiserver's message for a denied request, e.g. `nodes "n1" is forbidden: User
/// "system:serviceaccount:rotor-system:rotor-drainer" cannot patch resource "nodes" in API
/// group "" at the cluster scope`.
pub fn forbidden_message(user: &str, attrs: &Attributes) -> String {
    let verb = &attrs.verb;
    match &attrs.target {
        Target::NonResource(path) => {
            format!("forbidden: User {user:?} cannot {verb} path {path:?}")
        }
        Target::Resource(r) => {
            let resource = match &r.subresource {
                Some(s) => format!("{}/{s}", r.resource),
                None => r.resource.clone(),
            };
            let reason = match &r.namespace {
                Some(ns) => format!(
                    "User {user:?} cannot {verb} resource {resource:?} in API group {:?} in the namespace {ns:?}",
                    r.group
                ),
                None => format!(
                    "User {user:?} cannot {verb} resource {resource:?} in API group {:?} at the cluster scope",
                    r.group
                ),
            };
            // The qualified resource leaves out the subresource, as the apiserver's does.
            let qualified = if r.group.is_empty() {
                r.resource.clone()
            } else {
                format!("{}.{}", r.resource, r.group)
            };
            match &r.name {
                Some(name) => format!("{qualified} {name:?} is forbidden: {reason}"),
                None => format!("{qualified} is forbidden: {reason}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect();
        PolicyRule {
            verbs: v(verbs),
            api_groups: v(groups),
            resources: v(resources),
            ..Default::default()
        }
    }

    fn cluster(r: PolicyRule) -> ScopedRule {
        ScopedRule {
            scope: Scope::Cluster,
            rule: r,
        }
    }

    fn in_ns(ns: &str, r: PolicyRule) -> ScopedRule {
        ScopedRule {
            scope: Scope::Namespace(ns.into()),
            rule: r,
        }
    }

    fn req(
        verb: &str,
        group: &str,
        resource: &str,
        ns: Option<&str>,
        name: Option<&str>,
    ) -> Attributes {
        let (resource, sub) = match resource.split_once('/') {
            Some((r, s)) => (r, Some(s.to_string())),
            None => (resource, None),
        };
        Attributes {
            verb: verb.into(),
            target: Target::Resource(ResourceAttributes {
                group: group.into(),
                resource: resource.into(),
                subresource: sub,
                namespace: ns.map(Into::into),
                name: name.map(Into::into),
            }),
        }
    }

    fn path(verb: &str, p: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            target: Target::NonResource(p.into()),
        }
    }

    use Decision::{Allow, Deny};

    #[test]
    fn verbs_groups_and_resources_must_all_match() {
        let rules = [cluster(rule(
            &[""],
            &["nodes"],
            &["get", "list", "watch", "patch"],
        ))];
        assert_eq!(
            authorize(&rules, &req("patch", "", "nodes", None, Some("n1"))),
            Allow
        );
        assert_eq!(
            authorize(&rules, &req("list", "", "nodes", None, None)),
            Allow
        );
        assert_eq!(
            authorize(&rules, &req("delete", "", "nodes", None, Some("n1"))),
            Deny
        );
        assert_eq!(
            authorize(&rules, &req("update", "", "nodes", None, Some("n1"))),
            Deny
        );
        assert_eq!(
            authorize(&rules, &req("get", "", "pods", Some("a"), Some("p"))),
            Deny
        );
        // Same resource name in another group is another resource.
        assert_eq!(
            authorize(
                &rules,
                &req("get", "example.com", "nodes", None, Some("n1"))
            ),
            Deny
        );
        assert_eq!(
            authorize(&[], &req("get", "", "nodes", None, Some("n1"))),
            Deny
        );
    }

    #[test]
    fn wildcards_match_any_verb_group_or_resource() {
        let rules = [cluster(rule(&["*"], &["*"], &["*"]))];
        assert_eq!(
            authorize(
                &rules,
                &req("deletecollection", "apps", "deployments", Some("x"), None)
            ),
            Allow
        );
        assert_eq!(
            authorize(
                &rules,
                &req("create", "", "pods/eviction", Some("x"), Some("p"))
            ),
            Allow
        );
        let rules = [cluster(rule(&["apps"], &["*"], &["get"]))];
        assert_eq!(
            authorize(
                &rules,
                &req("get", "apps", "statefulsets", Some("x"), Some("s"))
            ),
            Allow
        );
        assert_eq!(
            authorize(&rules, &req("get", "", "pods", Some("x"), Some("p"))),
            Deny
        );
    }

    #[test]
    fn subresources_need_their_own_rule() {
        let pods = [cluster(rule(&[""], &["pods"], &["create", "get"]))];
        assert_eq!(
            authorize(
                &pods,
                &req("create", "", "pods/eviction", Some("a"), Some("p"))
            ),
            Deny
        );
        let evict = [cluster(rule(&[""], &["pods/eviction"], &["create"]))];
        assert_eq!(
            authorize(
                &evict,
                &req("create", "", "pods/eviction", Some("a"), Some("p"))
            ),
            Allow
        );
        assert_eq!(
            authorize(&evict, &req("create", "", "pods", Some("a"), None)),
            Deny
        );
        let status = [cluster(rule(&[""], &["*/status"], &["patch"]))];
        assert_eq!(
            authorize(&status, &req("patch", "", "nodes/status", None, Some("n"))),
            Allow
        );
        assert_eq!(
            authorize(&status, &req("patch", "", "nodes", None, Some("n"))),
            Deny
        );
        assert_eq!(
            authorize(
                &status,
                &req("patch", "", "pods/eviction", Some("a"), Some("p"))
            ),
            Deny
        );
        let node_status = [cluster(rule(&[""], &["nodes/status"], &["patch"]))];
        assert_eq!(
            authorize(
                &node_status,
                &req("patch", "", "pods/status", Some("a"), Some("p"))
            ),
            Deny
        );
    }

    #[test]
    fn resource_names_restrict_named_requests_only() {
        let mut r = rule(
            &["coordination.k8s.io"],
            &["leases"],
            &["get", "update", "list", "create"],
        );
        r.resource_names = vec!["rotor-drainer".into()];
        let rules = [cluster(r)];
        let lease = |verb, name| {
            req(
                verb,
                "coordination.k8s.io",
                "leases",
                Some("rotor-system"),
                name,
            )
        };
        assert_eq!(
            authorize(&rules, &lease("get", Some("rotor-drainer"))),
            Allow
        );
        assert_eq!(
            authorize(&rules, &lease("update", Some("rotor-drainer"))),
            Allow
        );
        assert_eq!(authorize(&rules, &lease("get", Some("other"))), Deny);
        // Collection requests name nothing, so a named rule never allows them.
        assert_eq!(authorize(&rules, &lease("list", None)), Deny);
        assert_eq!(authorize(&rules, &lease("create", None)), Deny);
    }

    #[test]
    fn namespaced_grants_stay_in_their_namespace() {
        let rules = [in_ns(
            "rotor-system",
            rule(&["coordination.k8s.io"], &["leases"], &["get", "list"]),
        )];
        let lease = |ns, name| req("get", "coordination.k8s.io", "leases", ns, name);
        assert_eq!(
            authorize(&rules, &lease(Some("rotor-system"), Some("l"))),
            Allow
        );
        assert_eq!(authorize(&rules, &lease(Some("default"), Some("l"))), Deny);
        // A cluster-wide list is not a list in the namespace.
        assert_eq!(
            authorize(
                &rules,
                &req("list", "coordination.k8s.io", "leases", None, None)
            ),
            Deny
        );
        // A namespaced grant of a cluster-scoped resource grants nothing.
        let nodes = [in_ns("rotor-system", rule(&[""], &["nodes"], &["get"]))];
        assert_eq!(
            authorize(&nodes, &req("get", "", "nodes", None, Some("n"))),
            Deny
        );
        // Nor of non-resource paths.
        let urls = PolicyRule {
            verbs: vec!["get".into()],
            non_resource_urls: vec!["*".into()],
            ..Default::default()
        };
        assert_eq!(
            authorize(&[in_ns("x", urls.clone())], &path("get", "/version")),
            Deny
        );
        assert_eq!(authorize(&[cluster(urls)], &path("get", "/metrics")), Allow);
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_prefix() {
        let d = authenticated_defaults();
        for p in [
            "/version",
            "/api",
            "/api/v1",
            "/apis",
            "/apis/apps",
            "/apis/apps/v1",
            "/healthz",
        ] {
            assert_eq!(authorize(&d, &path("get", p)), Allow, "{p}");
        }
        assert_eq!(authorize(&d, &path("post", "/version")), Deny);
        assert_eq!(authorize(&d, &path("get", "/metrics")), Deny);
        assert_eq!(authorize(&d, &path("get", "/versions")), Deny);
        // Discovery rules are not resource rules.
        assert_eq!(
            authorize(&d, &req("get", "", "nodes", None, Some("n"))),
            Deny
        );
    }

    #[test]
    fn forbidden_messages_have_the_apiservers_shape() {
        let user = "system:serviceaccount:rotor-system:rotor-drainer";
        assert_eq!(
            forbidden_message(user, &req("patch", "", "nodes", None, Some("ip-10-0-1-1"))),
            "nodes \"ip-10-0-1-1\" is forbidden: User \"system:serviceaccount:rotor-system:rotor-drainer\" cannot patch resource \"nodes\" in API group \"\" at the cluster scope"
        );
        assert_eq!(
            forbidden_message(
                user,
                &req("create", "", "pods/eviction", Some("shop"), Some("web-1"))
            ),
            "pods \"web-1\" is forbidden: User \"system:serviceaccount:rotor-system:rotor-drainer\" cannot create resource \"pods/eviction\" in API group \"\" in the namespace \"shop\""
        );
        assert_eq!(
            forbidden_message(user, &req("list", "apps", "deployments", None, None)),
            "deployments.apps is forbidden: User \"system:serviceaccount:rotor-system:rotor-drainer\" cannot list resource \"deployments\" in API group \"apps\" at the cluster scope"
        );
        assert_eq!(
            forbidden_message(user, &path("get", "/metrics")),
            "forbidden: User \"system:serviceaccount:rotor-system:rotor-drainer\" cannot get path \"/metrics\""
        );
    }
}
