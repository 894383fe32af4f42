//! deploy/: every kustomize overlay renders with real `kubectl kustomize`, has the properties the
//! manifests promise (namespace, locked-down pods, probes, budgets, one selector run at a time),
//! runs the real binaries with exactly the rendered arguments, and validates against the
//! Kubernetes schemas with `kubernetes-validate` (PyPI, offline). The IAM policies beside the AWS
//! overlay are checked against docs/security.md, and the containers' commands against the Dockerfile.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rotor_e2e::helm::{self, template};
use rotor_e2e::real_cluster::free_port;
use rotor_e2e::{
    SimProcess, TestDir, binary, describe_output, kubectl_create, kubectl_json, kubectl_ok,
    kubectl_path, run_with_timeout, scenario, taint_first_node, wait_until, workspace_root,
};
use serde_json::Value;

const OVERLAYS: [&str; 5] = ["aws", "azure", "gcp", "kubernetes", "dry-run"];
const NAMESPACE: &str = "rotor-system";
const IMAGE: &str = "ghcr.io/rotor-dev/rotor";
const CLUSTER_SCOPED: [&str; 5] = [
    "CustomResourceDefinition",
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
];
/// Kubernetes versions whose schemas the rendered manifests must satisfy: the kubectl on our
/// machines (1.32) and the API version rotor is built against (k8s-openapi `v1_33`).
const SCHEMA_VERSIONS: [&str; 2] = ["1.32.0", "1.33.0"];
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
/// The uid of the image's `nonroot` user (Dockerfile) that every pod must run as.
const NONROOT_UID: i64 = 65532;

/// The objects every overlay renders. The names are a contract: the simulator's RBAC enforcement
/// and the end-to-end tests read these ServiceAccounts and roles.
const OBJECTS: [(&str, &str); 17] = [
    ("CustomResourceDefinition", "rotationpolicies.rotor.dev"),
    ("CustomResourceDefinition", "drainrules.rotor.dev"),
    ("Namespace", "rotor-system"),
    ("ServiceAccount", "rotor-drainer"),
    ("ServiceAccount", "rotor-selector"),
    ("ClusterRole", "rotor-drainer"),
    ("ClusterRole", "rotor-selector"),
    ("ClusterRoleBinding", "rotor-drainer"),
    ("ClusterRoleBinding", "rotor-selector"),
    ("Role", "rotor-drainer-leader-election"),
    ("RoleBinding", "rotor-drainer-leader-election"),
    ("Role", "rotor-drainer-surge"),
    ("RoleBinding", "rotor-drainer-surge"),
    ("PriorityClass", "rotor-surge"),
    ("Deployment", "rotor-drainer"),
    ("PodDisruptionBudget", "rotor-drainer"),
    ("CronJob", "rotor-selector"),
];

/// One overlay as `kubectl kustomize` renders it.
struct Rendered {
    overlay: String,
    yaml: String,
    objects: Vec<Value>,
}

fn render(overlay: &'static str) -> Rendered {
    render_dir(&format!("deploy/overlays/{overlay}"))
}

/// The kustomization at `dir`, relative to the workspace root, as `kubectl kustomize` renders it.
fn render_dir(dir: &str) -> Rendered {
    let overlay = dir
        .strip_prefix("deploy/overlays/")
        .unwrap_or(dir)
        .to_owned();
    let dir = workspace_root().join(dir);
    let out = run_with_timeout(
        Command::new(kubectl_path()).arg("kustomize").arg(&dir),
        TOOL_TIMEOUT,
    );
    assert!(
        out.status.success(),
        "{}",
        describe_output(&format!("kubectl kustomize {}", dir.display()), &out)
    );
    let yaml = String::from_utf8(out.stdout).expect("kubectl kustomize prints UTF-8");
    let objects: Vec<Value> = serde_saphyr::from_multiple(&yaml)
        .unwrap_or_else(|e| panic!("overlay {overlay}: the rendered YAML does not parse: {e}"));
    Rendered {
        overlay,
        yaml,
        objects,
    }
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn id(object: &Value) -> (String, String) {
    (
        text(&object["kind"]).to_owned(),
        text(&object["metadata"]["name"]).to_owned(),
    )
}

impl Rendered {
    fn get(&self, kind: &str, name: &str) -> &Value {
        self.objects
            .iter()
            .find(|o| id(o) == (kind.to_owned(), name.to_owned()))
            .unwrap_or_else(|| panic!("overlay {}: no {kind} {name}", self.overlay))
    }

    fn drainer_pod(&self) -> &Value {
        &self.get("Deployment", "rotor-drainer")["spec"]["template"]["spec"]
    }

    fn selector_pod(&self) -> &Value {
        &self.get("CronJob", "rotor-selector")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    }

    fn pods(&self) -> [(&'static str, &Value); 2] {
        [
            ("rotor-drainer", self.drainer_pod()),
            ("rotor-selector", self.selector_pod()),
        ]
    }
}

fn only_container(pod: &Value) -> &Value {
    let containers = pod["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1, "one container per pod: {pod}");
    &containers[0]
}

fn args_of(container: &Value) -> Vec<String> {
    container["args"]
        .as_array()
        .expect("the container has args")
        .iter()
        .map(|a| a.as_str().expect("args are strings").to_owned())
        .collect()
}

/// The value of `--flag=value` in `args` (manifests write every flag in that form).
fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter()
        .find_map(|a| a.strip_prefix(flag)?.strip_prefix('='))
}

/// The binary a container runs: `command[0]` must be `/usr/local/bin/<name>`.
fn binary_name(container: &Value) -> String {
    let command = text(&container["command"][0]);
    command
        .strip_prefix("/usr/local/bin/")
        .unwrap_or_else(|| panic!("command {command:?} is not in /usr/local/bin"))
        .to_owned()
}

/// The container's environment as the kubelet would give it: literal values, and the downward
/// API's `metadata.name` / `metadata.namespace` (the pod name is made up).
fn container_env(container: &Value) -> Vec<(String, String)> {
    let mut env = Vec::new();
    for var in container["env"].as_array().into_iter().flatten() {
        let name = text(&var["name"]).to_owned();
        let value = match (
            &var["value"],
            text(&var["valueFrom"]["fieldRef"]["fieldPath"]),
        ) {
            (Value::String(v), _) => v.clone(),
            (_, "metadata.name") => "rotor-e2e-pod-0".to_owned(),
            (_, "metadata.namespace") => NAMESPACE.to_owned(),
            _ => panic!("env var {name} has a source this test cannot provide: {var}"),
        };
        env.push((name, value));
    }
    env
}

#[test]
fn every_overlay_renders_the_same_objects_in_rotor_system() {
    let version_tag = format!("{IMAGE}:{}", env!("CARGO_PKG_VERSION"));
    for overlay in OVERLAYS {
        let r = render(overlay);
        let ids: BTreeSet<(String, String)> = r.objects.iter().map(id).collect();
        let expected: BTreeSet<(String, String)> = OBJECTS
            .iter()
            .map(|(k, n)| (k.to_string(), n.to_string()))
            .collect();
        assert_eq!(ids, expected, "overlay {overlay}: the rendered objects");
        assert_eq!(
            r.objects.len(),
            expected.len(),
            "overlay {overlay}: duplicates"
        );

        for object in &r.objects {
            let (kind, name) = id(object);
            let namespace = object["metadata"]["namespace"].as_str();
            if CLUSTER_SCOPED.contains(&kind.as_str()) {
                assert_eq!(
                    namespace, None,
                    "overlay {overlay}: {kind} {name} is cluster-scoped"
                );
            } else {
                assert_eq!(
                    namespace,
                    Some(NAMESPACE),
                    "overlay {overlay}: {kind} {name}"
                );
            }
        }

        // Each binary's ServiceAccount is bound to its own roles, and only to those.
        let mut bound: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for binding in r
            .objects
            .iter()
            .filter(|o| matches!(text(&o["kind"]), "ClusterRoleBinding" | "RoleBinding"))
        {
            let role_kind = text(&binding["roleRef"]["kind"]);
            let role_name = text(&binding["roleRef"]["name"]);
            r.get(role_kind, role_name);
            if text(&binding["kind"]) == "RoleBinding" {
                assert_eq!(role_kind, "Role", "overlay {overlay}: {binding}");
            }
            for subject in binding["subjects"].as_array().expect("subjects") {
                assert_eq!(text(&subject["kind"]), "ServiceAccount", "{subject}");
                assert_eq!(text(&subject["namespace"]), NAMESPACE, "{subject}");
                let account = text(&subject["name"]);
                r.get("ServiceAccount", account);
                bound
                    .entry(account.to_owned())
                    .or_default()
                    .insert(format!("{role_kind}/{role_name}"));
            }
        }
        let roles = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
        assert_eq!(
            bound["rotor-drainer"],
            roles(&[
                "ClusterRole/rotor-drainer",
                "Role/rotor-drainer-leader-election",
                "Role/rotor-drainer-surge"
            ]),
            "overlay {overlay}"
        );
        assert_eq!(
            bound["rotor-selector"],
            roles(&["ClusterRole/rotor-selector"]),
            "overlay {overlay}"
        );

        for (account, pod) in r.pods() {
            assert_eq!(
                text(&pod["serviceAccountName"]),
                account,
                "overlay {overlay}"
            );
            let container = only_container(pod);
            assert_eq!(text(&container["image"]), version_tag, "overlay {overlay}");
            assert_eq!(binary_name(container), account, "overlay {overlay}");
        }

        // Least privilege: no wildcard, nothing on secrets.
        for role in r
            .objects
            .iter()
            .filter(|o| matches!(text(&o["kind"]), "ClusterRole" | "Role"))
        {
            for rule in role["rules"].as_array().expect("rules") {
                for field in ["apiGroups", "resources", "verbs", "nonResourceURLs"] {
                    for v in rule[field].as_array().into_iter().flatten() {
                        assert!(
                            !text(v).contains('*'),
                            "overlay {overlay}: wildcard in {rule}"
                        );
                        assert_ne!(text(v), "secrets", "overlay {overlay}: {rule}");
                    }
                }
            }
        }
    }
}

/// The pod and container security settings both workloads must have.
fn assert_locked_down(what: &str, pod: &Value) {
    let pod_sc = &pod["securityContext"];
    assert_eq!(pod_sc["runAsNonRoot"], true, "{what}: pod runAsNonRoot");
    assert_eq!(pod_sc["seccompProfile"]["type"], "RuntimeDefault", "{what}");
    for key in ["hostNetwork", "hostPID", "hostIPC"] {
        assert_ne!(pod[key], true, "{what}: {key}");
    }
    let sc = &only_container(pod)["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true, "{what}: runAsNonRoot");
    assert_eq!(sc["runAsUser"], NONROOT_UID, "{what}: runAsUser");
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
    assert_eq!(
        sc["capabilities"]["drop"],
        serde_json::json!(["ALL"]),
        "{what}"
    );
    assert!(
        sc["capabilities"]["add"].is_null(),
        "{what}: capabilities added"
    );
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{what}");
    assert_ne!(sc["privileged"], true, "{what}");
}

/// Whether a label selector's `matchLabels` all hold on `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let wanted = selector["matchLabels"].as_object().expect("matchLabels");
    !wanted.is_empty() && wanted.iter().all(|(k, v)| labels[k] == *v)
}

#[test]
fn the_drainer_runs_replicated_locked_down_with_probes_a_budget_and_its_lease() {
    for overlay in OVERLAYS {
        let r = render(overlay);
        let what = format!("overlay {overlay}, rotor-drainer");
        let deployment = r.get("Deployment", "rotor-drainer");
        let replicas = if overlay == "dry-run" { 0 } else { 2 };
        assert_eq!(deployment["spec"]["replicas"], replicas, "{what}");
        let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
        assert!(
            selects(&deployment["spec"]["selector"], pod_labels),
            "{what}"
        );

        let pod = r.drainer_pod();
        assert_locked_down(&what, pod);

        // Spread over nodes (anti-affinity or a hostname spread) and zones, about its own pods.
        let anti = &pod["affinity"]["podAntiAffinity"];
        let terms: Vec<&Value> = anti["preferredDuringSchedulingIgnoredDuringExecution"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| &t["podAffinityTerm"])
            .chain(
                anti["requiredDuringSchedulingIgnoredDuringExecution"]
                    .as_array()
                    .into_iter()
                    .flatten(),
            )
            .collect();
        assert!(
            terms
                .iter()
                .any(|t| t["topologyKey"] == "kubernetes.io/hostname"
                    && selects(&t["labelSelector"], pod_labels)),
            "{what}: anti-affinity across nodes, selecting its own pods: {anti}"
        );
        for spread in pod["topologySpreadConstraints"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert!(
                selects(&spread["labelSelector"], pod_labels),
                "{what}: {spread}"
            );
        }

        // No toleration that would keep the drainer on a node being drained.
        for t in pod["tolerations"].as_array().into_iter().flatten() {
            let key = text(&t["key"]);
            assert!(
                key != "rotor.dev/drain" && !(key.is_empty() && t["operator"] == "Exists"),
                "{what}: toleration {t}"
            );
        }

        let pdb = r.get("PodDisruptionBudget", "rotor-drainer");
        assert!(
            selects(&pdb["spec"]["selector"], pod_labels),
            "{what}: {pdb}"
        );
        assert!(
            pdb["spec"]["maxUnavailable"] == 1 || pdb["spec"]["minAvailable"] == 1,
            "{what}: {pdb}"
        );

        let container = only_container(pod);
        let args = args_of(container);
        assert!(args.iter().any(|a| a == "run"), "{what}: {args:?}");
        let resources = &container["resources"];
        for (kind, key) in [
            ("requests", "cpu"),
            ("requests", "memory"),
            ("limits", "memory"),
        ] {
            assert!(resources[kind][key].is_string(), "{what}: {kind}.{key}");
        }

        // The probes reach the admin server's port on /healthz and /readyz (the next test shows
        // the real binary answering there).
        let admin = flag_value(&args, "--admin-listen").expect("--admin-listen");
        let admin_port: i64 = admin.rsplit(':').next().unwrap().parse().unwrap();
        for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
            let get = &container[probe]["httpGet"];
            assert_eq!(get["path"], path, "{what}: {probe}");
            let port = container["ports"]
                .as_array()
                .expect("ports")
                .iter()
                .find(|p| p["name"] == get["port"] || p["containerPort"] == get["port"])
                .unwrap_or_else(|| panic!("{what}: {probe} port {} is not declared", get["port"]));
            assert_eq!(port["containerPort"], admin_port, "{what}: {probe}");
        }

        // The Lease the binary uses is the one the Role lets it get and update.
        let env = container_env(container);
        assert!(
            env.contains(&("POD_NAME".into(), "rotor-e2e-pod-0".into())),
            "{what}"
        );
        assert!(
            env.contains(&("POD_NAMESPACE".into(), NAMESPACE.into())),
            "{what}"
        );
        let lease = flag_value(&args, "--lease-name").expect("--lease-name");
        let role = r.get("Role", "rotor-drainer-leader-election");
        let rules = role["rules"].as_array().expect("rules");
        let grants = |verb: &str| {
            rules.iter().any(|rule| {
                rule["resources"] == serde_json::json!(["leases"])
                    && rule["verbs"].as_array().unwrap().iter().any(|v| v == verb)
                    && rule["resourceNames"]
                        .as_array()
                        .is_none_or(|names| names.iter().any(|n| n == lease))
            })
        };
        for verb in ["get", "create", "update"] {
            assert!(
                grants(verb),
                "{what}: Role does not allow {verb} on Lease {lease}"
            );
        }
    }
}

#[test]
fn the_selector_cronjob_runs_one_bounded_locked_down_run_at_a_time() {
    for overlay in OVERLAYS {
        let r = render(overlay);
        let what = format!("overlay {overlay}, rotor-selector");
        let cron = &r.get("CronJob", "rotor-selector")["spec"];
        assert_eq!(cron["concurrencyPolicy"], "Forbid", "{what}");
        assert_eq!(cron["timeZone"], "Etc/UTC", "{what}");
        assert!(cron["startingDeadlineSeconds"].as_i64() > Some(0), "{what}");
        for limit in ["successfulJobsHistoryLimit", "failedJobsHistoryLimit"] {
            assert!(cron[limit].as_i64().is_some(), "{what}: {limit}");
        }
        let job = &cron["jobTemplate"]["spec"];
        assert!(
            job["backoffLimit"].as_i64().is_some_and(|b| b <= 3),
            "{what}"
        );
        let deadline = job["activeDeadlineSeconds"]
            .as_i64()
            .expect("activeDeadlineSeconds");
        assert!(deadline > 0, "{what}");
        let pod = r.selector_pod();
        assert_eq!(pod["restartPolicy"], "Never", "{what}");
        assert_locked_down(&what, pod);

        let args = args_of(only_container(pod));
        let has = |a: &str| args.iter().any(|x| x == a);
        match overlay {
            "aws" => {
                assert!(has("--provider=aws"), "{what}: {args:?}");
                assert!(
                    flag_value(&args, "--cluster-name").is_some(),
                    "{what}: {args:?}"
                );
                let annotations =
                    &r.get("ServiceAccount", "rotor-selector")["metadata"]["annotations"];
                assert!(
                    text(&annotations["eks.amazonaws.com/role-arn"]).starts_with("arn:aws:iam::"),
                    "{what}: IRSA annotation"
                );
            }
            "azure" => {
                assert!(has("--provider=azure"), "{what}: {args:?}");
                assert!(
                    flag_value(&args, "--azure-subscription").is_some(),
                    "{what}: {args:?}"
                );
                assert_eq!(
                    pod_labels(&r)["azure.workload.identity/use"],
                    "true",
                    "{what}: the workload identity webhook's label"
                );
                let annotations =
                    &r.get("ServiceAccount", "rotor-selector")["metadata"]["annotations"];
                assert!(
                    !text(&annotations["azure.workload.identity/client-id"]).is_empty(),
                    "{what}: workload identity annotation"
                );
            }
            "gcp" => {
                assert!(has("--provider=gcp"), "{what}: {args:?}");
                assert!(
                    flag_value(&args, "--gcp-project").is_some(),
                    "{what}: {args:?}"
                );
                let annotations =
                    &r.get("ServiceAccount", "rotor-selector")["metadata"]["annotations"];
                assert!(
                    text(&annotations["iam.gke.io/gcp-service-account"])
                        .ends_with(".iam.gserviceaccount.com"),
                    "{what}: GKE workload identity annotation"
                );
            }
            _ => assert!(has("--provider=kubernetes"), "{what}: {args:?}"),
        }
        assert_eq!(has("--dry-run"), overlay == "dry-run", "{what}: {args:?}");
    }
}

/// `(subcommand, flags)`: the binary's global flags are those before the first positional
/// argument (the subcommand), which gets the rest.
fn split_args(args: &[String]) -> (Vec<&str>, Option<&str>, Vec<&str>) {
    let mut global = Vec::new();
    let mut sub = None;
    let mut sub_flags = Vec::new();
    for arg in args {
        let name = arg.split('=').next().unwrap();
        if !arg.starts_with("--") {
            assert!(
                sub.is_none(),
                "one positional argument (the subcommand): {args:?}"
            );
            sub = Some(arg.as_str());
        } else if sub.is_some() {
            sub_flags.push(name);
        } else {
            global.push(name);
        }
    }
    (global, sub, sub_flags)
}

/// Whether `help` documents `flag` (not merely a longer flag that starts with it).
fn documents(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(i, _)| {
        !help[i + flag.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-')
    })
}

fn help(bin: &Path, sub: Option<&str>) -> String {
    let out = run_with_timeout(
        Command::new(bin).args(sub).arg("--help").env_clear(),
        TOOL_TIMEOUT,
    );
    assert!(out.status.success(), "{}", describe_output("--help", &out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_container_argument_is_a_flag_the_real_binary_accepts_and_validates() {
    let scratch = TestDir::new("deploy-args");
    let missing = scratch.join("no-such-kubeconfig");
    for overlay in OVERLAYS {
        let r = render(overlay);
        for (name, pod) in r.pods() {
            let container = only_container(pod);
            let bin = binary(&binary_name(container));
            let args = args_of(container);
            let what = format!("overlay {overlay}, {name} {}", args.join(" "));
            let (global, sub, sub_flags) = split_args(&args);
            let global_help = help(&bin, None);
            for flag in global {
                assert!(
                    documents(&global_help, flag),
                    "{what}: {name} --help has no {flag}"
                );
            }
            if let Some(sub) = sub {
                let sub_help = help(&bin, Some(sub));
                for flag in sub_flags {
                    assert!(
                        documents(&sub_help, flag),
                        "{what}: {name} {sub} --help has no {flag}"
                    );
                }
            }

            // With the rendered arguments and environment, the binary parses and validates its
            // flags (bad flags exit 2 naming the flag) and only then fails on the missing
            // kubeconfig, so reaching that error proves the whole command line is accepted.
            let out = run_with_timeout(
                Command::new(&bin)
                    .args(&args)
                    .env_clear()
                    .envs(container_env(container))
                    .env("ROTOR_KUBECONFIG", &missing),
                TOOL_TIMEOUT,
            );
            let stderr = String::from_utf8_lossy(&out.stderr);
            let reached = format!("cannot read kubeconfig {}", missing.display());
            assert!(
                !out.status.success() && stderr.contains(&reached),
                "{}",
                describe_output(&what, &out)
            );
        }
    }
}

/// A child process killed when the test ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The HTTP status of `GET path` on 127.0.0.1:port; `None` while nothing answers.
fn http_status(port: u16, path: &str) -> Option<u16> {
    rotor_e2e::http_get(&format!("127.0.0.1:{port}"), path)
        .ok()
        .map(|r| r.status)
}

#[test]
fn the_drainer_with_the_rendered_args_serves_its_probes_and_takes_the_lease() {
    let r = render("kubernetes");
    let container = only_container(r.drainer_pod());
    let env = container_env(container);
    let pod_name = env
        .iter()
        .find(|(k, _)| k == "POD_NAME")
        .expect("POD_NAME")
        .1
        .clone();
    let lease = flag_value(&args_of(container), "--lease-name")
        .expect("--lease-name")
        .to_owned();
    // Only the listen address changes: a free local port instead of the pod's 0.0.0.0:8080.
    let port = free_port();
    let args: Vec<String> = args_of(container)
        .into_iter()
        .map(|a| {
            if a.starts_with("--admin-listen=") {
                format!("--admin-listen=127.0.0.1:{port}")
            } else {
                a
            }
        })
        .collect();

    let sim = SimProcess::start(scenario("cluster.yaml"));
    // The Lease lives in the overlay's Namespace: create it as rendered.
    kubectl_create(&sim, &r.get("Namespace", NAMESPACE).to_string());
    let log_path = sim.dir().join("rotor-drainer.log");
    let log = std::fs::File::create(&log_path).expect("drainer log");
    let _drainer = Running(
        Command::new(binary(&binary_name(container)))
            .args(&args)
            .env_clear()
            .envs(env)
            .env("ROTOR_KUBECONFIG", sim.kubeconfig())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("rotor-drainer starts"),
    );
    for probe in ["livenessProbe", "readinessProbe"] {
        let path = text(&container[probe]["httpGet"]["path"]);
        wait_until(
            &format!(
                "rotor-drainer to answer 200 on {path} (log: {})",
                log_path.display()
            ),
            Duration::from_secs(30),
            || match http_status(port, path) {
                Some(200) => Some(()),
                Some(404) => panic!("rotor-drainer does not serve {probe} path {path} (404)"),
                _ => None,
            },
        );
    }
    // Replicas contend for the Lease only while a node needs rotor.
    taint_first_node(&sim);
    wait_until(
        &format!("{pod_name} to hold Lease {NAMESPACE}/{lease}"),
        Duration::from_secs(30),
        || {
            let out = kubectl_json(&sim, &["get", "leases", "-n", NAMESPACE, "-o", "json"]);
            out["items"]
                .as_array()?
                .iter()
                .any(|l| {
                    l["metadata"]["name"] == lease.as_str()
                        && l["spec"]["holderIdentity"] == pod_name.as_str()
                })
                .then_some(())
        },
    );
}

fn drain_tainted_nodes(sim: &SimProcess) -> usize {
    let nodes = kubectl_json(sim, &["get", "nodes", "-o", "json"]);
    nodes["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|n| {
            n["spec"]["taints"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|t| t["key"] == "rotor.dev/drain")
        })
        .count()
}

fn run_selector(sim: &SimProcess, overlay: &'static str) -> Vec<String> {
    let r = render(overlay);
    let container = only_container(r.selector_pod());
    let args = args_of(container);
    let out = run_with_timeout(
        Command::new(binary(&binary_name(container)))
            .args(&args)
            .env_clear()
            .envs(container_env(container))
            .env("ROTOR_KUBECONFIG", sim.kubeconfig()),
        TOOL_TIMEOUT,
    );
    assert!(
        out.status.success(),
        "{}",
        describe_output(&format!("overlay {overlay}: rotor-selector"), &out)
    );
    args
}

#[test]
fn the_dry_run_overlay_taints_nothing_where_the_kubernetes_overlay_taints() {
    // Every node's kubelet (v1.32.9) is a minor version behind the control plane (v1.33.4).
    let sim = SimProcess::start(scenario("cluster.yaml"));
    run_selector(&sim, "dry-run");
    assert_eq!(drain_tainted_nodes(&sim), 0, "the dry run tainted nodes");
    let stats = sim.stats();
    assert!(
        stats["requests"].get("patch nodes").is_none(),
        "dry run wrote: {stats}"
    );

    let args = run_selector(&sim, "kubernetes");
    let budget: usize = flag_value(&args, "--max-tainted")
        .expect("--max-tainted")
        .parse()
        .expect("--max-tainted is a count");
    assert_eq!(
        drain_tainted_nodes(&sim),
        budget,
        "{}",
        kubectl_ok(&sim, &["get", "nodes"])
    );
}

/// Whether `kubernetes-validate` passed, and its output; fails the test with how to install it
/// when it cannot run.
fn kubernetes_validate(args: &[&str], file: &Path) -> (bool, String) {
    let out = Command::new("kubernetes-validate")
        .args(args)
        .arg(file)
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(out) => {
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            (out.status.success(), text)
        }
        Err(e) => panic!(
            "kubernetes-validate cannot run ({e}); install it: python3 -m pip install kubernetes-validate"
        ),
    }
}

#[test]
fn every_overlay_validates_against_the_kubernetes_schemas() {
    let scratch = TestDir::new("deploy-validate");
    // The overlays, and the test kustomizations that add deploy/components/* to one.
    let rendered = OVERLAYS.into_iter().map(render).chain(
        component_kustomizations()
            .into_iter()
            .map(|d| render_dir(&d)),
    );
    for r in rendered {
        let overlay = &r.overlay;
        let file: PathBuf = scratch.join(format!("{}.yaml", overlay.replace('/', "-")));
        std::fs::write(&file, &r.yaml).expect("write the rendered overlay");
        for version in SCHEMA_VERSIONS {
            let (ok, output) = kubernetes_validate(&["--strict", "-k", version], &file);
            // A wrong apiVersion or kind is only a warning ("Couldn't find schema") with exit
            // status 0, so warnings fail the test too, and every object must have passed.
            let passed = output
                .lines()
                .filter(|l| l.contains(" passed for resource "))
                .count();
            assert!(
                ok && !output.contains("WARN")
                    && !output.contains("ERROR")
                    && passed == r.objects.len(),
                "overlay {overlay} against Kubernetes {version}: {passed} of {} objects passed\n{output}",
                r.objects.len()
            );
        }
    }
}

/// IAM statements by Sid, with `Action` always a sorted list.
fn statements(docs: &[Value]) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for doc in docs {
        let list = match doc.get("Statement") {
            Some(Value::Array(list)) => list.clone(),
            _ => vec![doc.clone()],
        };
        for mut s in list {
            let mut actions: Vec<String> = match &s["Action"] {
                Value::String(a) => vec![a.clone()],
                Value::Array(a) => a.iter().map(|v| text(v).to_owned()).collect(),
                other => panic!("Action {other}"),
            };
            actions.sort();
            s["Action"] = serde_json::json!(actions);
            out.insert(text(&s["Sid"]).to_owned(), s);
        }
    }
    out
}

#[test]
fn the_iam_policies_beside_the_aws_overlay_say_what_the_security_docs_say() {
    let docs = std::fs::read_to_string(workspace_root().join("docs/security.md"))
        .expect("docs/security.md");
    let blocks: Vec<Value> = docs
        .split("```json\n")
        .skip(1)
        .filter_map(|rest| rest.split("\n```").next())
        .filter(|block| block.contains("RotorSelector"))
        .map(|block| serde_json::from_str(block).expect("the IAM JSON of docs/security.md parses"))
        .collect();
    let documented = statements(&blocks);
    assert!(
        documented.len() >= 3,
        "the IAM section of docs/security.md (```json blocks with RotorSelector statements) was not found"
    );

    let dir = workspace_root().join("deploy/overlays/aws");
    let read = |name: &str| -> Value {
        let path = dir.join(name);
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("policy"))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(doc["Version"], "2012-10-17", "{}", path.display());
        doc
    };
    let selector = statements(&[read("iam-selector-policy.json")]);
    let retire = statements(&[read("iam-selector-retire-policy.json")]);
    // The read path never terminates; --retire-drained's policy only terminates.
    for s in selector.values() {
        assert!(!s["Action"].to_string().contains("Terminate"), "{s}");
    }
    for s in retire.values() {
        assert_eq!(
            s["Action"],
            serde_json::json!(["autoscaling:TerminateInstanceInAutoScalingGroup"])
        );
    }
    let surge = statements(&[read("iam-selector-group-surge-policy.json")]);
    // --group-surge's policy changes capacity and rotor's own tag, nothing else.
    for s in surge.values() {
        let actions = s["Action"].to_string();
        assert!(
            actions.contains("SetDesiredCapacity") || actions.contains("Tags"),
            "{s}"
        );
        assert!(!actions.contains("Terminate"), "{s}");
    }
    let tagging = surge
        .values()
        .find(|s| s["Action"].to_string().contains("CreateOrUpdateTags"))
        .expect("a statement for the surge tag");
    assert_eq!(
        tagging["Condition"]["ForAllValues:StringEquals"]["aws:TagKeys"],
        serde_json::json!([rotor_selector::provider::aws_group_surge::SURGE_BASE_TAG]),
        "the tag statement allows only rotor's tag"
    );
    let mut shipped = selector;
    shipped.extend(retire);
    shipped.extend(surge);
    assert_eq!(
        shipped, documented,
        "deploy/overlays/aws/*.json and docs/security.md disagree"
    );
}

/// The selector's pod template labels in a rendered overlay.
fn pod_labels(r: &Rendered) -> Value {
    r.get("CronJob", "rotor-selector")["spec"]["jobTemplate"]["spec"]["template"]["metadata"]
        ["labels"]
        .clone()
}

#[test]
fn the_azure_roles_hold_only_the_calls_actions_and_match_docs_security() {
    let role_of = |file: &str, actions: &[&str]| -> Value {
        let path = workspace_root().join("deploy/overlays/azure").join(file);
        let role: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("role"))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let held: Vec<&str> = role["Actions"]
            .as_array()
            .expect("Actions")
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(held, actions, "{file}");
        for empty in ["NotActions", "DataActions", "NotDataActions"] {
            assert_eq!(role[empty], serde_json::json!([]), "{file}: {empty}");
        }
        role
    };
    // Reads: VirtualMachineScaleSets_ListAll / _List and VirtualMachineScaleSetVMs_List.
    let role = role_of(
        "azure-selector-role.json",
        &[
            "Microsoft.Compute/virtualMachineScaleSets/read",
            "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read",
        ],
    );
    // --retire-drained: VirtualMachineScaleSets_DeleteInstances.
    let retire = role_of(
        "azure-selector-retire-role.json",
        &["Microsoft.Compute/virtualMachineScaleSets/delete/action"],
    );
    let security =
        std::fs::read_to_string(workspace_root().join("docs/security.md")).expect("security.md");
    let documented: Vec<Value> = security
        .split("```json\n")
        .skip(1)
        .filter_map(|rest| rest.split("\n```").next())
        .filter(|block| block.contains("\"IsCustom\""))
        .map(|block| serde_json::from_str(block).expect("the role JSON of docs/security.md parses"))
        .collect();
    assert_eq!(
        documented,
        [role, retire],
        "the roles in deploy/overlays/azure and docs/security.md disagree"
    );
}

#[test]
fn the_containers_run_binaries_the_dockerfile_builds_and_installs_as_its_user() {
    let dockerfile =
        std::fs::read_to_string(workspace_root().join("Dockerfile")).expect("Dockerfile");
    let built: BTreeSet<&str> = dockerfile
        .lines()
        .filter(|l| l.contains("cargo build"))
        .flat_map(|l| l.split(" -p ").skip(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .collect();
    let stages = rotor_e2e::image::dockerfile_stages(&dockerfile);
    let installed: BTreeSet<String> = stages
        .last()
        .expect("the Dockerfile has stages")
        .iter()
        .filter(|i| i.keyword == "COPY")
        .filter_map(|i| rotor_e2e::image::parse_copy(&i.args).ok())
        .filter_map(|c| c.dest.strip_prefix("/usr/local/bin/").map(String::from))
        .collect();
    let user = dockerfile
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("the final stage sets USER");
    let uid: i64 = user
        .split(':')
        .next()
        .unwrap()
        .trim()
        .parse()
        .expect("a numeric USER");
    assert_eq!(uid, NONROOT_UID, "Dockerfile USER");

    for overlay in OVERLAYS {
        let r = render(overlay);
        for (name, pod) in r.pods() {
            let bin = binary_name(only_container(pod));
            assert!(
                built.contains(bin.as_str()),
                "{name}: Dockerfile builds {built:?}"
            );
            assert!(
                installed.contains(bin.as_str()),
                "{name}: Dockerfile installs {installed:?}"
            );
        }
    }
}

/// The kustomizations of tests/kustomize (each an overlay with a component of deploy/components
/// or a patch, as an operator would write it), relative to the workspace root, sorted.
fn component_kustomizations() -> Vec<String> {
    let dir = workspace_root().join("tests/kustomize");
    let mut dirs: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("kustomization.yaml").is_file())
        .map(|e| format!("tests/kustomize/{}", e.file_name().to_string_lossy()))
        .collect();
    dirs.sort();
    dirs
}

/// Every pod spec in `object`, with where it is: any object holding `containers` (a Pod's
/// spec, a workload's `template.spec`, a CronJob's `jobTemplate.spec.template.spec`), so that a
/// kind added later is covered without naming it here.
fn pod_specs<'a>(path: String, value: &'a Value, out: &mut Vec<(String, &'a Value)>) {
    match value {
        Value::Object(map) if map.contains_key("containers") => out.push((path, value)),
        Value::Object(map) => {
            for (k, v) in map {
                pod_specs(format!("{path}.{k}"), v, out);
            }
        }
        Value::Array(list) => {
            for (i, v) in list.iter().enumerate() {
                pod_specs(format!("{path}[{i}]"), v, out);
            }
        }
        _ => {}
    }
}

/// What keeps `pod` (at `what`) from the runtime settings every rotor container must have: run
/// as a non-root, non-zero uid, a read-only root file system, no privilege escalation, every
/// capability dropped and none added, the runtime's default seccomp profile; none of the host's
/// namespaces. A container's own setting wins over the pod's, as the kubelet applies them.
fn runtime_violations(what: &str, pod: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for key in ["hostNetwork", "hostPID", "hostIPC"] {
        if pod[key] == true {
            problems.push(format!("{what}: {key}"));
        }
    }
    let pod_sc = &pod["securityContext"];
    let containers = ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(|k| pod[k].as_array().into_iter().flatten());
    for container in containers {
        let what = format!("{what}, container {}", text(&container["name"]));
        let sc = &container["securityContext"];
        // The container's field, else the pod's.
        let effective = |pointer: &str| {
            sc.pointer(pointer)
                .filter(|v| !v.is_null())
                .or_else(|| pod_sc.pointer(pointer))
                .cloned()
                .unwrap_or(Value::Null)
        };
        let mut expect = |field: &str, got: Value, ok: bool| {
            if !ok {
                problems.push(format!("{what}: securityContext.{field} is {got}"));
            }
        };
        let v = effective("/runAsNonRoot");
        expect("runAsNonRoot", v.clone(), v == true);
        let v = effective("/runAsUser");
        expect(
            "runAsUser",
            v.clone(),
            v.as_i64().is_some_and(|uid| uid > 0),
        );
        let v = sc["readOnlyRootFilesystem"].clone();
        expect("readOnlyRootFilesystem", v.clone(), v == true);
        let v = sc["allowPrivilegeEscalation"].clone();
        expect("allowPrivilegeEscalation", v.clone(), v == false);
        let v = sc["privileged"].clone();
        expect("privileged", v.clone(), v != true);
        let v = sc["capabilities"]["drop"].clone();
        expect(
            "capabilities.drop",
            v.clone(),
            v == serde_json::json!(["ALL"]),
        );
        let v = sc["capabilities"]["add"].clone();
        expect(
            "capabilities.add",
            v.clone(),
            v.as_array().is_none_or(Vec::is_empty),
        );
        let v = effective("/seccompProfile/type");
        expect("seccompProfile.type", v.clone(), v == "RuntimeDefault");
    }
    problems
}

/// The runtime settings of every pod deploy/ ships, whoever renders it: each kustomize overlay,
/// each test kustomization that adds a component, and the Helm chart with its defaults and with
/// each example values file. A manifest that loses one of them fails here, naming it.
#[test]
fn every_pod_template_in_deploy_and_the_chart_runs_as_non_root_read_only_without_capabilities() {
    let mut renderings: Vec<(String, Vec<Value>)> = Vec::new();
    let overlays = workspace_root().join("deploy/overlays");
    let mut dirs: Vec<String> = std::fs::read_dir(&overlays)
        .expect("list deploy/overlays")
        .filter_map(|e| e.ok())
        .map(|e| format!("deploy/overlays/{}", e.file_name().to_string_lossy()))
        .chain(component_kustomizations())
        .collect();
    dirs.sort();
    for dir in dirs {
        renderings.push((dir.clone(), render_dir(&dir).objects));
    }
    let mut values: Vec<Option<String>> = vec![None];
    values.extend(helm::examples().into_iter().map(Some));
    for file in values {
        let out = template(
            file.as_slice()
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .as_slice(),
            &[],
        );
        let what = format!("helm template {}", file.as_deref().unwrap_or("(defaults)"));
        assert!(out.status.success(), "{}", describe_output(&what, &out));
        let objects: Vec<Value> =
            serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout))
                .unwrap_or_else(|e| panic!("{what}: the rendering does not parse: {e}"));
        renderings.push((what, objects.into_iter().filter(|o| !o.is_null()).collect()));
    }

    let mut problems = Vec::new();
    for (rendering, objects) in &renderings {
        let mut pods = Vec::new();
        for object in objects {
            let (kind, name) = id(object);
            // A CRD's schema is not a pod, whatever its fields are called.
            if kind != "CustomResourceDefinition" {
                pod_specs(format!("{rendering}: {kind} {name}"), object, &mut pods);
            }
        }
        let names: BTreeSet<&str> = pods
            .iter()
            .flat_map(|(_, pod)| pod["containers"].as_array().into_iter().flatten())
            .map(|c| text(&c["name"]))
            .collect();
        // Both workloads, unless the rendering leaves the selector out.
        assert!(
            names.contains("drainer"),
            "{rendering}: no drainer pod found: {names:?}"
        );
        for (what, pod) in pods {
            problems.extend(runtime_violations(&what, pod));
        }
    }
    assert!(
        problems.is_empty(),
        "pods that do not run locked down:\n{}",
        problems.join("\n")
    );

    // The check itself catches each missing setting.
    let r = render("kubernetes");
    let good = r.drainer_pod().clone();
    assert!(runtime_violations("good", &good).is_empty());
    // The container's setting wins over the pod's.
    for (pointer, value) in [
        (
            "/containers/0/securityContext/runAsNonRoot",
            serde_json::json!(false),
        ),
        (
            "/containers/0/securityContext/runAsUser",
            serde_json::json!(0),
        ),
        (
            "/containers/0/securityContext/readOnlyRootFilesystem",
            Value::Null,
        ),
        (
            "/containers/0/securityContext/allowPrivilegeEscalation",
            serde_json::json!(true),
        ),
        (
            "/containers/0/securityContext/capabilities/drop",
            serde_json::json!(["NET_RAW"]),
        ),
        (
            "/containers/0/securityContext/capabilities/add",
            serde_json::json!(["NET_ADMIN"]),
        ),
        (
            "/containers/0/securityContext/seccompProfile/type",
            serde_json::json!("Unconfined"),
        ),
        ("/hostNetwork", serde_json::json!(true)),
        ("/initContainers", serde_json::json!([{"name": "init"}])),
    ] {
        let mut bad = good.clone();
        let (parent, key) = pointer.rsplit_once('/').expect("a pointer");
        bad.pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .unwrap_or_else(|| panic!("{parent} in the drainer's pod"))
            .insert(key.to_owned(), value.clone());
        assert!(
            !runtime_violations("bad", &bad).is_empty(),
            "{pointer} = {value} passes the check"
        );
    }
}

/// The port numbers (and names) of a NetworkPolicy rule's `ports` with `protocol`.
fn policy_ports(rule: &Value, protocol: &str) -> BTreeSet<String> {
    rule["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["protocol"] == protocol)
        .map(|p| match &p["port"] {
            Value::String(name) => name.clone(),
            other => other.to_string(),
        })
        .collect()
}

/// deploy/components/network-policy adds one NetworkPolicy per pod and nothing else: the
/// drainer reached only on the port its probes and metrics use, both pods reaching the API
/// server (TCP 443 and 6443, any address) and DNS in kube-system, the selector no ingress. The
/// schemas are checked by `every_overlay_validates_against_the_kubernetes_schemas`, the chart's
/// twin (`networkPolicy.enabled`) by tests/tests/helm.rs.
#[test]
fn the_network_policy_component_adds_one_policy_per_pod_allowing_what_each_uses() {
    let r = render_dir("tests/kustomize/network-policy");
    let ids: BTreeSet<(String, String)> = r.objects.iter().map(id).collect();
    let mut expected: BTreeSet<(String, String)> = OBJECTS
        .iter()
        .map(|(k, n)| (k.to_string(), n.to_string()))
        .collect();
    for name in ["rotor-drainer", "rotor-selector"] {
        expected.insert(("NetworkPolicy".into(), name.into()));
    }
    assert_eq!(ids, expected, "the rendered objects");
    assert_eq!(r.objects.len(), expected.len(), "duplicates");

    let templates = [
        (
            "rotor-drainer",
            &r.get("Deployment", "rotor-drainer")["spec"]["template"],
        ),
        (
            "rotor-selector",
            &r.get("CronJob", "rotor-selector")["spec"]["jobTemplate"]["spec"]["template"],
        ),
    ];
    for (name, template) in templates {
        let policy = r.get("NetworkPolicy", name);
        let what = format!("NetworkPolicy {name}");
        assert_eq!(text(&policy["metadata"]["namespace"]), NAMESPACE, "{what}");
        let spec = &policy["spec"];
        assert!(
            selects(&spec["podSelector"], &template["metadata"]["labels"]),
            "{what} selects the pods of {name}: {spec}"
        );
        // Both directions are restricted: with a type left out, that direction is open.
        assert_eq!(
            spec["policyTypes"],
            serde_json::json!(["Ingress", "Egress"]),
            "{what}"
        );
        let egress = spec["egress"].as_array().expect("egress rules");
        let anywhere = egress
            .iter()
            .find(|rule| rule["to"].is_null())
            .unwrap_or_else(|| panic!("{what}: no egress rule to any address (the API server)"));
        let tcp = policy_ports(anywhere, "TCP");
        assert_eq!(tcp, ["443", "6443"].map(String::from).into(), "{what}");
        assert!(policy_ports(anywhere, "UDP").is_empty(), "{what}");
        let dns = egress
            .iter()
            .find(|rule| policy_ports(rule, "UDP").contains("53"))
            .unwrap_or_else(|| panic!("{what}: no DNS rule"));
        assert!(
            policy_ports(dns, "TCP").contains("53"),
            "{what}: DNS over TCP"
        );
        assert_eq!(
            dns["to"],
            serde_json::json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}]),
            "{what}: DNS only to kube-system"
        );
        // Nothing else, but the EKS Pod Identity agent for the selector (its AWS credentials).
        let mut others: Vec<&Value> = egress
            .iter()
            .filter(|rule| !std::ptr::eq(*rule, anywhere) && !std::ptr::eq(*rule, dns))
            .collect();
        if name == "rotor-selector" {
            let pod_identity = serde_json::json!({
                "to": [{"ipBlock": {"cidr": "169.254.170.23/32"}}, {"ipBlock": {"cidr": "fd00:ec2::23/128"}}],
                "ports": [{"protocol": "TCP", "port": 80}],
            });
            assert_eq!(others.first(), Some(&&pod_identity), "{what}: {egress:?}");
            others.remove(0);
        }
        assert!(
            others.is_empty(),
            "{what}: more egress than it needs: {others:?}"
        );

        let pod = &template["spec"];
        let ingress = spec["ingress"].as_array().cloned().unwrap_or_default();
        if name == "rotor-selector" {
            assert!(ingress.is_empty(), "{what}: the selector serves nothing");
            continue;
        }
        // The drainer: one rule, the admin port (probes, metrics), which the container declares
        // and the binary listens on.
        assert_eq!(ingress.len(), 1, "{what}: {ingress:?}");
        let ports = policy_ports(&ingress[0], "TCP");
        assert_eq!(ports.len(), 1, "{what}: {ports:?}");
        let port = ports.first().expect("a port");
        let container = only_container(pod);
        let declared = container["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .find(|p| {
                p["name"] == port.as_str() || p["containerPort"].as_i64() == port.parse().ok()
            })
            .unwrap_or_else(|| panic!("{what}: port {port} is not the container's"));
        let args = args_of(container);
        let admin = flag_value(&args, "--admin-listen").expect("--admin-listen");
        assert_eq!(
            declared["containerPort"].to_string(),
            admin.rsplit(':').next().unwrap(),
            "{what}: the admin port"
        );
        for probe in ["livenessProbe", "readinessProbe"] {
            assert_eq!(
                container[probe]["httpGet"]["port"], declared["name"],
                "{what}: {probe}"
            );
        }
    }
}
