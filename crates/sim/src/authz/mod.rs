//! Authentication and RBAC authorization, off unless the simulator is started with a policy
//! (`rotor-sim serve --authorization <file>`).
//!
//! - [`rules`]: the RBAC decision as pure functions, and the apiserver's denial message;
//! - [`policy`]: reading ServiceAccounts, Roles, ClusterRoles and bindings from a YAML stream;
//! - this module: bearer tokens to identities, request attributes from the HTTP request, the
//!   401/403 answers, the denial counters in `/sim/v1/stats`, and per-account kubeconfigs.
//!
//! The admin token of the kubeconfig the simulator always writes stays all-powerful, and so
//! does a request without any token: kubectl never sends credentials to an `http://` server
//! (client-go reads a kubeconfig user's credentials only for TLS), and the simulator serves
//! plain HTTP, so kubectl is always the admin here. kube-rs clients, rotor's binaries among
//! them, do send their token; an unknown token is refused with 401. The `/sim/v1` admin API
//! is outside the Kubernetes API and needs no token.

pub mod policy;
pub mod rules;

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use axum::http::{HeaderMap, Method, Uri, header};

use serde_json::{Value, json};

use crate::meta::ApiError;
use crate::request_info::{Route, query_map, route, verb_of};
pub use policy::{Policy, PolicyError, ServiceAccount};
use rules::{Attributes, Decision, ResourceAttributes, Target, authorize};

/// How many recent denials `/sim/v1/stats` lists.
const RECENT_DENIALS: usize = 10;

/// The user name counted for the admin token and for requests without a token.
const ADMIN_USER: &str = "admin";

#[derive(Default)]
struct Denials {
    forbidden: u64,
    unauthorized: u64,
    recent: VecDeque<String>,
    /// Requests allowed, by user: shows which identities did the work.
    allowed: BTreeMap<String, u64>,
}

/// The policy in force and what it refused so far.
pub struct Authz {
    policy: Policy,
    denials: Mutex<Denials>,
}

impl Authz {
    pub fn new(policy: Policy) -> Authz {
        Authz {
            policy,
            denials: Mutex::new(Denials::default()),
        }
    }

    pub fn load(path: &Path) -> Result<Authz, PolicyError> {
        Policy::load(path).map(Authz::new)
    }

    pub fn service_accounts(&self) -> &[ServiceAccount] {
        &self.policy.service_accounts
    }

    pub fn warnings(&self) -> &[String] {
        &self.policy.warnings
    }

    /// Authenticates and authorizes one request; the error is the answer to send instead.
    pub fn check(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Result<(), ApiError> {
        let token = bearer_token(headers);
        if token.is_none_or(|t| t == crate::kubeconfig::ADMIN_TOKEN) {
            self.count_allowed(ADMIN_USER);
            return Ok(());
        }
        let Some(identity) = token.and_then(|t| self.policy.identities.get(t)) else {
            return Err(self.unauthorized());
        };
        let attrs = attributes_of(method, uri);
        if identity.admin || authorize(&identity.rules, &attrs) == Decision::Allow {
            self.count_allowed(&identity.user);
            return Ok(());
        }
        let e = forbidden(&identity.user, &attrs);
        tracing::warn!(user = %identity.user, verb = %attrs.verb, message = %e.message, "request forbidden");
        let mut d = self.denials.lock().expect("denials lock");
        d.forbidden += 1;
        if d.recent.len() == RECENT_DENIALS {
            d.recent.pop_front();
        }
        d.recent.push_back(e.message.clone());
        Err(e)
    }

    fn count_allowed(&self, user: &str) {
        let mut d = self.denials.lock().expect("denials lock");
        match d.allowed.get_mut(user) {
            Some(n) => *n += 1,
            None => {
                d.allowed.insert(user.to_string(), 1);
            }
        }
    }

    fn unauthorized(&self) -> ApiError {
        self.denials.lock().expect("denials lock").unauthorized += 1;
        ApiError {
            code: 401,
            reason: "Unauthorized",
            message: "Unauthorized".into(),
            details: None,
            retry_after: None,
        }
    }

    /// `{"forbidden": n, "unauthorized": n, "recentDenials": [...], "allowedByUser": {...}}`
    /// for `/sim/v1/stats`.
    pub fn stats_json(&self) -> Value {
        let d = self.denials.lock().expect("denials lock");
        json!({
            "forbidden": d.forbidden,
            "unauthorized": d.unauthorized,
            "recentDenials": d.recent,
            "allowedByUser": d.allowed,
        })
    }

    pub fn reset_stats(&self) {
        *self.denials.lock().expect("denials lock") = Denials::default();
    }

    /// Writes `admin.kubeconfig` and `<namespace>.<name>.kubeconfig` per ServiceAccount into
    /// `dir`; returns the paths written.
    pub fn write_kubeconfigs(&self, dir: &Path, url: &str) -> std::io::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)?;
        let admin = dir.join("admin.kubeconfig");
        std::fs::write(&admin, crate::kubeconfig::kubeconfig_yaml(url))?;
        let mut written = vec![admin];
        for sa in self.service_accounts() {
            let path = dir.join(kubeconfig_file_name(&sa.namespace, &sa.name));
            std::fs::write(&path, service_account_kubeconfig(url, sa))?;
            written.push(path);
        }
        Ok(written)
    }
}

/// The file name `--kubeconfig-dir` uses for a ServiceAccount.
pub fn kubeconfig_file_name(namespace: &str, name: &str) -> String {
    format!("{namespace}.{name}.kubeconfig")
}

/// A kubeconfig that authenticates as the ServiceAccount, its namespace the default one (as a
/// pod's in-cluster configuration would have it).
pub fn service_account_kubeconfig(url: &str, sa: &ServiceAccount) -> String {
    let user = format!("{}.{}", sa.namespace, sa.name);
    format!(
        "# kube-rs clients (rotor's binaries) send this token. kubectl sends no credentials to an\n# http:// server, so with this file kubectl is the simulator's admin, not {sa_user}.\napiVersion: v1\nkind: Config\nclusters:\n- name: rotor-sim\n  cluster:\n    server: {url}\ncontexts:\n- name: {user}\n  context:\n    cluster: rotor-sim\n    user: {user}\n    namespace: {ns}\ncurrent-context: {user}\nusers:\n- name: {user}\n  user:\n    token: {token}\npreferences: {{}}\n",
        ns = sa.namespace,
        token = sa.token,
        sa_user = sa.user(),
    )
}

fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// The attributes the apiserver's request-info step would derive from this request.
pub fn attributes_of(method: &Method, uri: &Uri) -> Attributes {
    let Route::Resource(t) = route(uri.path()) else {
        return Attributes {
            verb: method.as_str().to_ascii_lowercase(),
            target: Target::NonResource(uri.path().to_string()),
        };
    };
    let q = query_map(uri);
    let verb = verb_of(method, &t, &q);
    let mut name = t.name.clone();
    // A list or watch of one object by name is authorized as a request for that name.
    if name.is_none() && matches!(verb, "list" | "watch") {
        name = q.get("fieldSelector").and_then(|s| {
            s.split(',').find_map(|term| {
                let v = term.trim().strip_prefix("metadata.name")?;
                let v = v.strip_prefix("==").or_else(|| v.strip_prefix('='))?;
                Some(v.to_string())
            })
        });
    }
    // A Namespace is addressed as living in itself, so a Role can grant reading its own.
    let namespace = if t.group.is_empty() && t.plural == "namespaces" {
        t.name.clone()
    } else {
        t.namespace.clone()
    };
    Attributes {
        verb: verb.to_string(),
        target: Target::Resource(ResourceAttributes {
            group: t.group,
            resource: t.plural,
            subresource: t.subresource,
            namespace,
            name,
        }),
    }
}

/// The 403 the apiserver answers: its message, reason Forbidden, and the object in details.
pub fn forbidden(user: &str, attrs: &Attributes) -> ApiError {
    let details = match &attrs.target {
        Target::Resource(r) => Some(json!({
            "name": r.name.clone().unwrap_or_default(),
            "group": r.group,
            "kind": r.resource,
        })),
        Target::NonResource(_) => None,
    };
    ApiError {
        code: 403,
        reason: "Forbidden",
        message: rules::forbidden_message(user, attrs),
        details,
        retry_after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(method: Method, uri: &str) -> Attributes {
        attributes_of(&method, &uri.parse().unwrap())
    }

    fn res(a: &Attributes) -> &ResourceAttributes {
        match &a.target {
            Target::Resource(r) => r,
            Target::NonResource(p) => panic!("{p} is not a resource request"),
        }
    }

    #[test]
    fn request_attributes_follow_the_apiservers_request_info() {
        let a = attrs(Method::POST, "/api/v1/namespaces/shop/pods/web-1/eviction");
        assert_eq!(a.verb, "create");
        let r = res(&a);
        assert_eq!(
            (
                r.resource.as_str(),
                r.subresource.as_deref(),
                r.namespace.as_deref(),
                r.name.as_deref()
            ),
            ("pods", Some("eviction"), Some("shop"), Some("web-1"))
        );
        let a = attrs(
            Method::GET,
            "/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3Dn1",
        );
        assert_eq!(
            (
                a.verb.as_str(),
                res(&a).namespace.as_deref(),
                res(&a).name.as_deref()
            ),
            ("watch", None, None)
        );
        let a = attrs(
            Method::GET,
            "/apis/coordination.k8s.io/v1/namespaces/rotor-system/leases?fieldSelector=metadata.name%3Drotor-drainer",
        );
        assert_eq!(
            (a.verb.as_str(), res(&a).name.as_deref()),
            ("list", Some("rotor-drainer"))
        );
        let a = attrs(Method::DELETE, "/api/v1/namespaces/shop/pods");
        assert_eq!(a.verb, "deletecollection");
        let a = attrs(Method::GET, "/api/v1/namespaces/shop");
        assert_eq!(
            (res(&a).namespace.as_deref(), res(&a).name.as_deref()),
            (Some("shop"), Some("shop"))
        );
        let a = attrs(Method::PATCH, "/api/v1/nodes/n1/status");
        assert_eq!(
            (a.verb.as_str(), res(&a).subresource.as_deref()),
            ("patch", Some("status"))
        );
        for p in ["/version", "/api", "/api/v1", "/apis/apps/v1", "/apis/apps"] {
            assert_eq!(
                attrs(Method::GET, p).target,
                Target::NonResource(p.into()),
                "{p}"
            );
        }
        assert_eq!(attrs(Method::GET, "/version").verb, "get");
    }

    fn authz() -> Authz {
        let stream = "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: reader, namespace: ops}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: nodes-reader}\nrules:\n- apiGroups: ['']\n  resources: [nodes]\n  verbs: [get, list, watch]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: reader}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: nodes-reader}\nsubjects:\n- {kind: ServiceAccount, name: reader, namespace: ops}\n";
        Authz::new(Policy::from_yaml(stream, "test").unwrap())
    }

    fn check(a: &Authz, token: Option<&str>, method: Method, uri: &str) -> Result<(), u16> {
        let mut h = HeaderMap::new();
        if let Some(t) = token {
            h.insert(
                header::AUTHORIZATION,
                format!("Bearer {t}").parse().unwrap(),
            );
        }
        a.check(&method, &uri.parse().unwrap(), &h)
            .map_err(|e| e.code)
    }

    #[test]
    fn tokens_authenticate_and_denials_are_counted() {
        let a = authz();
        let reader = policy::token_for("ops", "reader");
        assert_eq!(
            check(&a, Some(&reader), Method::GET, "/api/v1/nodes"),
            Ok(())
        );
        assert_eq!(
            check(&a, Some(&reader), Method::GET, "/apis/apps/v1"),
            Ok(())
        );
        assert_eq!(
            check(&a, Some(&reader), Method::PATCH, "/api/v1/nodes/n1"),
            Err(403)
        );
        assert_eq!(
            check(&a, Some("made-up"), Method::GET, "/api/v1/nodes"),
            Err(401)
        );
        assert_eq!(
            check(&a, Some("made-up"), Method::GET, "/version"),
            Err(401)
        );
        // kubectl over http sends no token: the admin, like the admin token.
        assert_eq!(check(&a, None, Method::DELETE, "/api/v1/nodes/n1"), Ok(()));
        assert_eq!(
            check(
                &a,
                Some(crate::kubeconfig::ADMIN_TOKEN),
                Method::DELETE,
                "/api/v1/nodes/n1"
            ),
            Ok(())
        );
        let s = a.stats_json();
        assert_eq!(
            (s["forbidden"].as_u64(), s["unauthorized"].as_u64()),
            (Some(1), Some(2))
        );
        assert_eq!(s["allowedByUser"]["system:serviceaccount:ops:reader"], 2);
        assert_eq!(s["allowedByUser"]["admin"], 2);
        assert_eq!(
            s["recentDenials"][0],
            "nodes \"n1\" is forbidden: User \"system:serviceaccount:ops:reader\" cannot patch resource \"nodes\" in API group \"\" at the cluster scope"
        );
        a.reset_stats();
        assert_eq!(a.stats_json()["forbidden"].as_u64(), Some(0));
    }

    #[test]
    fn kubeconfigs_carry_each_accounts_token() {
        let a = authz();
        let dir = std::env::temp_dir().join(format!("rotor-sim-authz-{}", std::process::id()));
        let written = a.write_kubeconfigs(&dir, "http://127.0.0.1:1").unwrap();
        let names: Vec<_> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["admin.kubeconfig", "ops.reader.kubeconfig"]);
        let text = std::fs::read_to_string(&written[1]).unwrap();
        assert!(
            text.contains(&format!("token: {}", policy::token_for("ops", "reader"))),
            "{text}"
        );
        assert!(text.contains("namespace: ops"), "{text}");
        let admin = std::fs::read_to_string(&written[0]).unwrap();
        assert!(admin.contains(crate::kubeconfig::ADMIN_TOKEN), "{admin}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
