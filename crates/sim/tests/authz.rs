//! RBAC enforcement as kube clients meet it over real HTTP: each service account of a policy
//! gets its own `kube::Client` from the kubeconfig the simulator would write for it; allowed
//! calls succeed, missing verbs, other namespaces and missing subresource rules answer 403
//! with the apiserver's message, unknown tokens 401, and `/sim/v1/stats` counts the denials.

mod common;

use std::sync::Arc;

use common::{FAST_TIMING, SimCluster, WAIT, api_error, name, wait_until};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::core::Status;
use kube::{Api, Client};
use rotor_e2e::sim_cluster::client_from_kubeconfig_yaml;
use rotor_sim::authz::{Authz, Policy, service_account_kubeconfig};
use rotor_sim::server::StartOptions;
use serde_json::json;

const CLUSTER: &str = r#"
namespaces: [ops]
nodeGroups:
  - name: general
    size: 2
    template: {cpu: "8", memory: 32Gi}
workloads:
  - {kind: Deployment, name: web, namespace: shop, replicas: 2}
  - {kind: Deployment, name: api, namespace: payments, replicas: 1}
"#;

/// Three accounts in `ops`: a node reader without `watch` or `patch`; a lease holder with a Role
/// in `ops` only; an evictor allowed `pods/eviction` in `shop` only (a ClusterRole bound by a
/// RoleBinding) and `pods` (not the subresource) everywhere.
const POLICY: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: node-reader, namespace: ops}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: lease-holder, namespace: ops}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: evictor, namespace: ops}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: node-reader}
rules:
  - apiGroups: [""]
    resources: [nodes]
    verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: node-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: node-reader}
subjects:
  - {kind: ServiceAccount, name: node-reader, namespace: ops}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: leases, namespace: ops}
rules:
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [get, create, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: leases, namespace: ops}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: leases}
subjects:
  - {kind: ServiceAccount, name: lease-holder}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: pods}
rules:
  - apiGroups: [""]
    resources: [pods]
    verbs: [get, list, watch, create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: evictor-pods}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: pods}
subjects:
  - {kind: ServiceAccount, name: evictor, namespace: ops}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: evict}
rules:
  - apiGroups: [""]
    resources: [pods/eviction]
    verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: evict, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: evict}
subjects:
  - {kind: ServiceAccount, name: evictor, namespace: ops}
"#;

struct AuthzSim {
    cluster: SimCluster,
    authz: Arc<Authz>,
    /// The simulator's own kubeconfig: every request allowed.
    admin: Client,
}

impl AuthzSim {
    async fn start() -> AuthzSim {
        let authz = Arc::new(Authz::new(
            Policy::from_yaml(POLICY, "test").expect("policy"),
        ));
        let cluster = SimCluster::start_with(
            &format!("{FAST_TIMING}{CLUSTER}"),
            StartOptions {
                authorization: Some(authz.clone()),
            },
        )
        .await;
        let admin = cluster.client.clone();
        AuthzSim {
            cluster,
            authz,
            admin,
        }
    }

    /// A client with the account's kubeconfig, as `--kubeconfig-dir` writes it.
    async fn client_as(&self, namespace: &str, name: &str) -> Client {
        let sa = self
            .authz
            .service_accounts()
            .iter()
            .find(|s| s.namespace == namespace && s.name == name)
            .unwrap_or_else(|| panic!("no service account {namespace}/{name} in the policy"));
        client_from_kubeconfig_yaml(&service_account_kubeconfig(&self.cluster.url(), sa)).await
    }

    async fn forbidden_count(&self) -> u64 {
        self.cluster.admin_get("stats").await["authorization"]["forbidden"]
            .as_u64()
            .expect("stats carry authorization.forbidden when a policy is enforced")
    }

    async fn stop(self) {
        self.cluster.stop().await;
    }
}

async fn first_node(admin: &Client) -> String {
    let nodes: Api<Node> = Api::all(admin.clone());
    let list = nodes
        .list(&ListParams::default())
        .await
        .expect("admin lists nodes");
    list.items[0].metadata.name.clone().expect("node name")
}

async fn running_pod(admin: &Client, ns: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    wait_until(&format!("a running pod in {ns}"), WAIT, || async {
        let list = pods
            .list(&ListParams::default())
            .await
            .expect("admin lists pods");
        list.items
            .into_iter()
            .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    })
    .await
}

fn eviction(pod: &Pod) -> Eviction {
    Eviction {
        metadata: ObjectMeta {
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            ..Default::default()
        },
        delete_options: None,
    }
}

fn assert_forbidden(s: &Status, message: &str, name: &str, kind: &str) {
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"), "{s:?}");
    assert_eq!(s.message, message);
    let d = s.details.as_ref().expect("a 403 carries details");
    assert_eq!((d.name.as_str(), d.kind.as_str()), (name, kind));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_cluster_role_when_the_account_uses_a_verb_it_lacks_then_403_names_user_verb_and_resource()
 {
    let sim = AuthzSim::start().await;
    let reader = sim.client_as("ops", "node-reader").await;
    let nodes: Api<Node> = Api::all(reader.clone());
    let node = first_node(&sim.admin).await;

    // Granted: list, get, and discovery through the built-in default.
    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .expect("list nodes")
            .items
            .len(),
        2
    );
    nodes.get(&node).await.expect("get node");
    let version = reader
        .apiserver_version()
        .await
        .expect("/version for every account");
    assert!(version.git_version.starts_with('v'));

    // Not granted: patch and watch.
    let patch = Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}}));
    let e = api_error(nodes.patch(&node, &PatchParams::default(), &patch).await);
    assert_forbidden(
        &e,
        &format!(
            "nodes \"{node}\" is forbidden: User \"system:serviceaccount:ops:node-reader\" cannot patch resource \"nodes\" in API group \"\" at the cluster scope"
        ),
        &node,
        "nodes",
    );
    let watched = nodes.watch(&WatchParams::default(), "0").await;
    let e = match watched {
        Err(kube::Error::Api(s)) => s,
        Err(other) => panic!("a forbidden watch fails with the Status, got {other}"),
        Ok(stream) => {
            // Older kube versions surface the error as the first event.
            match Box::pin(stream).next().await {
                Some(Ok(WatchEvent::Error(e))) => panic!("watch answered an error event {e:?}"),
                Some(Err(kube::Error::Api(s))) => s,
                other => panic!("a forbidden watch must not stream, got {other:?}"),
            }
        }
    };
    assert!(
        e.message
            .ends_with("cannot watch resource \"nodes\" in API group \"\" at the cluster scope"),
        "{}",
        e.message
    );
    // The admin's token may do everything.
    let admin_nodes: Api<Node> = Api::all(sim.admin.clone());
    admin_nodes
        .patch(&node, &PatchParams::default(), &patch)
        .await
        .expect("admin patches");
    assert_eq!(sim.forbidden_count().await, 2);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_role_in_one_namespace_when_the_account_acts_elsewhere_then_it_is_forbidden() {
    let sim = AuthzSim::start().await;
    let holder = sim.client_as("ops", "lease-holder").await;
    let lease = |ns: &str| Lease {
        metadata: ObjectMeta {
            name: Some("leader".into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        spec: None,
    };
    let in_ops: Api<Lease> = Api::namespaced(holder.clone(), "ops");
    in_ops
        .create(&PostParams::default(), &lease("ops"))
        .await
        .expect("create in ops");
    let mut got = in_ops.get("leader").await.expect("get in ops");
    got.spec = Some(Default::default());
    in_ops
        .replace("leader", &PostParams::default(), &got)
        .await
        .expect("update in ops");

    let in_default: Api<Lease> = Api::namespaced(holder.clone(), "default");
    let e = api_error(
        in_default
            .create(&PostParams::default(), &lease("default"))
            .await,
    );
    assert_forbidden(
        &e,
        "leases.coordination.k8s.io is forbidden: User \"system:serviceaccount:ops:lease-holder\" cannot create resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"default\"",
        "",
        "leases",
    );
    // The Role grants no list, and a namespaced grant never reaches cluster-wide requests.
    let everywhere: Api<Lease> = Api::all(holder.clone());
    let e = api_error(everywhere.list(&ListParams::default()).await);
    assert!(e.message.ends_with("cannot list resource \"leases\" in API group \"coordination.k8s.io\" at the cluster scope"), "{}", e.message);
    assert_eq!(sim.forbidden_count().await, 2);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_pods_create_without_the_eviction_subresource_when_evicting_then_forbidden() {
    let sim = AuthzSim::start().await;
    let evictor = sim.client_as("ops", "evictor").await;

    // `pods/eviction` is bound in shop only; `pods` (create included) is granted everywhere
    // and does not cover the subresource.
    let target = running_pod(&sim.admin, "payments").await;
    let payments: Api<Pod> = Api::namespaced(evictor.clone(), "payments");
    payments
        .get(&name(&target))
        .await
        .expect("pods get is granted");
    let e = api_error(
        payments
            .create_subresource::<_, Status>(
                "eviction",
                &name(&target),
                &PostParams::default(),
                &eviction(&target),
            )
            .await,
    );
    assert_forbidden(
        &e,
        &format!(
            "pods \"{}\" is forbidden: User \"system:serviceaccount:ops:evictor\" cannot create resource \"pods/eviction\" in API group \"\" in the namespace \"payments\"",
            name(&target)
        ),
        &name(&target),
        "pods",
    );
    let still_there: Api<Pod> = Api::namespaced(sim.admin.clone(), "payments");
    let p = still_there
        .get(&name(&target))
        .await
        .expect("the pod was not evicted");
    assert!(p.metadata.deletion_timestamp.is_none());

    let target = running_pod(&sim.admin, "shop").await;
    let shop: Api<Pod> = Api::namespaced(evictor.clone(), "shop");
    let st = shop
        .create_subresource::<_, Status>(
            "eviction",
            &name(&target),
            &PostParams::default(),
            &eviction(&target),
        )
        .await
        .expect("eviction in shop is granted");
    assert_eq!(st.code, 201);
    assert_eq!(sim.forbidden_count().await, 1);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_unknown_token_then_401_and_without_a_policy_every_token_is_served() {
    let sim = AuthzSim::start().await;
    let sa = rotor_sim::authz::ServiceAccount {
        namespace: "ops".into(),
        name: "not-in-the-policy".into(),
        token: "made-up-token".into(),
    };
    let stranger =
        client_from_kubeconfig_yaml(&service_account_kubeconfig(&sim.cluster.url(), &sa)).await;
    let e = api_error(
        Api::<Node>::all(stranger.clone())
            .list(&ListParams::default())
            .await,
    );
    assert_eq!((e.code, e.reason.as_str()), (401, "Unauthorized"));
    sim.stop().await;

    // Off by default: the same client is served by a simulator started without a policy.
    let plain = SimCluster::start(&format!("{FAST_TIMING}{CLUSTER}")).await;
    let stranger =
        client_from_kubeconfig_yaml(&service_account_kubeconfig(&plain.url(), &sa)).await;
    let nodes = Api::<Node>::all(stranger)
        .list(&ListParams::default())
        .await
        .expect("served");
    assert_eq!(nodes.items.len(), 2);
    plain.stop().await;
}
