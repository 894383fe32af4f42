//! Reading and building the objects the simulated controllers work with: pod and node
//! predicates (Ready, terminating, requests, allocatable) and builders that make nodes and pods
//! shaped, and sized, like a real cluster's (labels, nodeInfo, `status.images`, managedFields).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    ContainerImage, ContainerStatus, Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus,
    NodeSystemInfo, Pod, PodCondition, PodTemplateSpec, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    FieldsV1, ManagedFieldsEntry, ObjectMeta, OwnerReference, Time,
};
use rotor_apimachinery::quantity::parse_quantity;
use serde_json::json;

use crate::scenario::{NodeGroupSpec, NodeTemplate, parse_duration};

/// Pod annotation: time from start to Ready in the simulation (e.g. `3s`).
pub const STARTUP_ANNOTATION: &str = "sim.rotor.dev/startup";
/// Pod annotation: time the pod takes to exit after SIGTERM (capped by its grace period).
pub const SHUTDOWN_ANNOTATION: &str = "sim.rotor.dev/shutdown";
/// Node label naming the simulated node group.
pub const NODE_GROUP_LABEL: &str = "sim.rotor.dev/node-group";
/// The annotation the kubelet puts on mirror pods.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// CPU and memory in thousandths (millicores, millibytes), as requests and allocatable compare.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub cpu: i128,
    pub memory: i128,
}

impl Resources {
    pub fn add(&mut self, o: Resources) {
        self.cpu += o.cpu;
        self.memory += o.memory;
    }
    pub fn fits_within(&self, free: &Resources) -> bool {
        self.cpu <= free.cpu && self.memory <= free.memory
    }
    pub fn plus(&self, o: &Resources) -> Resources {
        Resources {
            cpu: self.cpu + o.cpu,
            memory: self.memory + o.memory,
        }
    }
    pub fn minus(&self, o: &Resources) -> Resources {
        Resources {
            cpu: self.cpu - o.cpu,
            memory: self.memory - o.memory,
        }
    }
}

fn milli(q: Option<&Quantity>) -> i128 {
    q.and_then(|q| parse_quantity(&q.0).ok())
        .map(|q| q.to_milli())
        .unwrap_or(0)
}

pub use rotor_apimachinery::conditions::{node_is_ready as node_ready, pod_is_ready as pod_ready};

/// The scheduler found no node for the pod: condition `PodScheduled` is `False` with reason
/// `Unschedulable`.
pub fn unschedulable(pod: &Pod) -> bool {
    rotor_apimachinery::conditions::pod_unschedulable(pod).is_some()
}

pub fn terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

pub fn terminal(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

pub fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// What the kubelets or the scheduler still have to do for a pod: [`WORK_PENDING`] for a pod
/// waiting to be bound, [`WORK_KUBELET`] for one terminating, bound but not started, or
/// started but not Ready, [`WORK_FINISHED`] for one that has finished (nothing to do, but
/// counted apart); `None` for a pod running and Ready, as most are.
pub fn pod_work(pod: &Pod) -> Option<&'static str> {
    if terminating(pod) {
        return Some(WORK_KUBELET);
    }
    if terminal(pod) {
        return Some(WORK_FINISHED);
    }
    if node_name(pod).is_none() {
        return Some(WORK_PENDING);
    }
    let started = pod.status.as_ref().is_some_and(|s| s.start_time.is_some());
    (!started || !pod_ready(pod)).then_some(WORK_KUBELET)
}

pub const WORK_PENDING: &str = "pending";
pub const WORK_KUBELET: &str = "kubelet";
pub const WORK_FINISHED: &str = "finished";

/// The uid of a pod's controlling owner.
pub fn controller_uid(pod: &Pod) -> Option<&str> {
    controller_of(&pod.metadata).map(|o| o.uid.as_str())
}

/// Whether a pod is a node agent: a DaemonSet's, or a static pod's mirror.
pub fn node_agent(pod: &Pod) -> Option<&'static str> {
    (is_daemon(pod) || is_mirror(pod)).then_some("")
}

pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
}

pub fn is_mirror(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
}

pub fn is_daemon(pod: &Pod) -> bool {
    controller_of(&pod.metadata).is_some_and(|o| o.kind == "DaemonSet")
}

/// Sum of the containers' requests (init containers run before and are not counted).
pub fn pod_requests(pod: &Pod) -> Resources {
    let mut r = Resources::default();
    for c in pod.spec.iter().flat_map(|s| s.containers.iter()) {
        let req = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        r.cpu += milli(req.and_then(|m| m.get("cpu")));
        r.memory += milli(req.and_then(|m| m.get("memory")));
    }
    r
}

/// [`pod_requests`] for many pods, each distinct quantity string parsed once: the scheduler
/// sums the requests of every bound pod, and parsing dominated that at 150,000 pods.
#[derive(Default)]
pub struct RequestsMemo<'a>(std::collections::HashMap<&'a str, i128>);

impl<'a> RequestsMemo<'a> {
    pub fn of(&mut self, pod: &'a Pod) -> Resources {
        let mut r = Resources::default();
        for c in pod.spec.iter().flat_map(|s| s.containers.iter()) {
            let req = c.resources.as_ref().and_then(|r| r.requests.as_ref());
            r.cpu += self.milli(req.and_then(|m| m.get("cpu")));
            r.memory += self.milli(req.and_then(|m| m.get("memory")));
        }
        r
    }

    fn milli(&mut self, q: Option<&'a Quantity>) -> i128 {
        match q {
            Some(q) => *self.0.entry(q.0.as_str()).or_insert_with(|| milli(Some(q))),
            None => 0,
        }
    }
}

pub fn annotation_duration(meta: &ObjectMeta, key: &str) -> Option<std::time::Duration> {
    meta.annotations
        .as_ref()?
        .get(key)
        .and_then(|v| parse_duration(v).ok())
}

pub fn set_pod_condition(pod: &mut Pod, type_: &str, status: bool, now: Timestamp) {
    let st = pod.status.get_or_insert_with(Default::default);
    let conds = st.conditions.get_or_insert_with(Vec::new);
    let value = if status { "True" } else { "False" };
    match conds.iter_mut().find(|c| c.type_ == type_) {
        Some(c) if c.status == value => {}
        Some(c) => {
            c.status = value.into();
            c.last_transition_time = Some(Time(now));
        }
        None => conds.push(PodCondition {
            type_: type_.into(),
            status: value.into(),
            last_transition_time: Some(Time(now)),
            ..Default::default()
        }),
    }
}

/// Sets a pod condition as [`set_pod_condition`] does, with the reason and message it is set for.
pub fn set_pod_condition_with_reason(
    pod: &mut Pod,
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    now: Timestamp,
) {
    set_pod_condition(pod, type_, status, now);
    if let Some(c) = pod
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .and_then(|cs| cs.iter_mut().find(|c| c.type_ == type_))
    {
        c.reason = Some(reason.into());
        c.message = Some(message);
    }
}

pub fn node_unschedulable(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

pub fn node_taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[])
}

pub fn node_allocatable(node: &Node) -> (Resources, i64) {
    let alloc = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    let pods = alloc
        .and_then(|a| a.get("pods"))
        .and_then(|q| parse_quantity(&q.0).ok())
        .map(|q| (q.to_milli() / 1000) as i64)
        .unwrap_or(110);
    (
        Resources {
            cpu: milli(alloc.and_then(|a| a.get("cpu"))),
            memory: milli(alloc.and_then(|a| a.get("memory"))),
        },
        pods,
    )
}

pub fn node_group_of(node: &Node) -> Option<&str> {
    node.metadata
        .labels
        .as_ref()?
        .get(NODE_GROUP_LABEL)
        .map(String::as_str)
}

fn managed(
    manager: &str,
    op: &str,
    sub: Option<&str>,
    fields: serde_json::Value,
    now: Timestamp,
) -> ManagedFieldsEntry {
    ManagedFieldsEntry {
        manager: Some(manager.into()),
        operation: Some(op.into()),
        api_version: Some("v1".into()),
        time: Some(Time(now)),
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(FieldsV1(fields)),
        subresource: sub.map(str::to_string),
    }
}

/// A stable pseudo-random 64-bit value for a string (FNV-1a), for ids that must not collide
/// across groups.
pub fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

pub fn instance_id(group: &str, index: u64) -> String {
    let v = fnv(group).wrapping_add(index.wrapping_mul(0x9e3779b97f4a7c15));
    format!("i-0{:016x}", v)
}

fn node_ip(group: &str, index: u64) -> String {
    let g = fnv(group) % 200;
    format!("10.{}.{}.{}", g + 16, (index / 250) % 256, index % 250 + 4)
}

/// A node of `group`, as its kubelet would register it, Ready or still booting.
pub fn build_node(group: &NodeGroupSpec, index: u64, now: Timestamp, ready: bool) -> Node {
    let t = &group.template;
    let zone = &group.zones[(index as usize) % group.zones.len()];
    let ip = node_ip(&group.name, index);
    let name = t
        .node_name
        .replace("{group}", &group.name)
        .replace("{index}", &index.to_string())
        .replace("{ip}", &ip.replace('.', "-"));
    let instance = instance_id(&group.name, index);
    let provider_id = t
        .provider_id
        .replace("{zone}", zone)
        .replace("{instance}", &instance);
    let region = zone.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let labels = node_labels(group, &name, zone, region);
    let (capacity, allocatable) = node_resources(t);
    let taints = registration_taints(t, ready);
    let managed_fields = node_managed_fields(&labels, now);
    Node {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            uid: Some(uuid::Uuid::new_v4().to_string()),
            creation_timestamp: Some(Time(now)),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([
                ("alpha.kubernetes.io/provided-node-ip".into(), ip.clone()),
                ("node.alpha.kubernetes.io/ttl".into(), "0".into()),
                (
                    "volumes.kubernetes.io/controller-managed-attach-detach".into(),
                    "true".into(),
                ),
            ])),
            managed_fields: Some(managed_fields),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(provider_id),
            taints: (!taints.is_empty()).then_some(taints),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(capacity),
            allocatable: Some(allocatable),
            conditions: Some(node_conditions(ready, now)),
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: ip.clone(),
                },
                NodeAddress {
                    type_: "InternalDNS".into(),
                    address: name.clone(),
                },
                NodeAddress {
                    type_: "Hostname".into(),
                    address: name.clone(),
                },
            ]),
            daemon_endpoints: Some(k8s_openapi::api::core::v1::NodeDaemonEndpoints {
                kubelet_endpoint: Some(k8s_openapi::api::core::v1::DaemonEndpoint { port: 10250 }),
            }),
            node_info: Some(node_info(&t.kubelet_version, &name, &instance)),
            images: Some(node_images(t.status_images, region)),
            ..Default::default()
        }),
    }
}

/// The well-known labels a kubelet and the AWS cloud controller set, the group's own, and the
/// template's image label.
fn node_labels(
    group: &NodeGroupSpec,
    name: &str,
    zone: &str,
    region: &str,
) -> BTreeMap<String, String> {
    let t = &group.template;
    let mut labels: BTreeMap<String, String> = BTreeMap::from([
        ("kubernetes.io/hostname".into(), name.to_string()),
        ("kubernetes.io/os".into(), "linux".into()),
        ("kubernetes.io/arch".into(), "amd64".into()),
        ("beta.kubernetes.io/os".into(), "linux".into()),
        ("beta.kubernetes.io/arch".into(), "amd64".into()),
        ("topology.kubernetes.io/zone".into(), zone.to_string()),
        ("topology.kubernetes.io/region".into(), region.to_string()),
        (
            "failure-domain.beta.kubernetes.io/zone".into(),
            zone.to_string(),
        ),
        (
            "node.kubernetes.io/instance-type".into(),
            t.instance_type.clone(),
        ),
        (
            "beta.kubernetes.io/instance-type".into(),
            t.instance_type.clone(),
        ),
        (NODE_GROUP_LABEL.into(), group.name.clone()),
        (t.image_label.clone(), t.image.clone()),
    ]);
    labels.extend(t.labels.clone());

    labels
}

/// Capacity and allocatable, as the kubelet reports them.
fn node_resources(t: &NodeTemplate) -> (BTreeMap<String, Quantity>, BTreeMap<String, Quantity>) {
    let cpu_m = parse_quantity(&t.cpu).map(|q| q.to_milli()).unwrap_or(4000);
    let mem = parse_quantity(&t.memory)
        .map(|q| q.to_milli() / 1000)
        .unwrap_or(16 << 30);
    // Allocatable as the kubelet reports it: capacity minus system and kube reservations.
    let alloc_cpu = cpu_m - (cpu_m / 25).max(70);
    let alloc_mem = mem - (mem / 12).max(300 << 20);
    let q = |s: String| Quantity(s);
    let capacity = BTreeMap::from([
        ("cpu".into(), q(format!("{}m", cpu_m))),
        ("memory".into(), q(format!("{}Ki", mem / 1024))),
        ("pods".into(), q(t.pods.to_string())),
        ("ephemeral-storage".into(), q("83873772Ki".into())),
        ("hugepages-1Gi".into(), q("0".into())),
        ("hugepages-2Mi".into(), q("0".into())),
    ]);
    let mut allocatable = capacity.clone();
    allocatable.insert("cpu".into(), q(format!("{alloc_cpu}m")));
    allocatable.insert("memory".into(), q(format!("{}Ki", alloc_mem / 1024)));
    allocatable.insert("ephemeral-storage".into(), q("76224326324".into()));

    (capacity, allocatable)
}

/// The image list a busy node reports (it is most of a Node's size).
fn node_images(count: u32, region: &str) -> Vec<ContainerImage> {
    (0..count)
        .map(|i| ContainerImage {
            names: Some(vec![
                format!("602401143452.dkr.ecr.{region}.amazonaws.com/eks/workload-{i:02}@sha256:{:064x}", fnv(&format!("{i}")) as u128 * 0x1f3d5b79),
                format!("602401143452.dkr.ecr.{region}.amazonaws.com/eks/workload-{i:02}:v1.{}.{}", i % 7, i % 3),
            ]),
            size_bytes: Some(20_000_000 + (i as i64) * 3_000_017),
        })
        .collect()
}

/// The template's taints, and `not-ready` while the node boots.
fn registration_taints(t: &NodeTemplate, ready: bool) -> Vec<Taint> {
    t.taints
        .iter()
        .map(|s| Taint {
            key: s.key.clone(),
            value: s.value.clone(),
            effect: s.effect.clone(),
            time_added: None,
        })
        .chain((!ready).then(|| Taint {
            key: "node.kubernetes.io/not-ready".into(),
            value: None,
            effect: "NoSchedule".into(),
            time_added: None,
        }))
        .collect()
}

/// The pressure conditions (all clear) and Ready.
fn node_conditions(ready: bool, now: Timestamp) -> Vec<NodeCondition> {
    let cond = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    };
    let ready_cond = if ready {
        cond(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
        )
    } else {
        cond(
            "Ready",
            "False",
            "KubeletNotReady",
            "container runtime network not ready: NetworkReady=false",
        )
    };
    vec![
        cond(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        cond(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
        ),
        cond(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
        ready_cond,
    ]
}

/// Who wrote which fields at registration: the kubelet (metadata, then status) and the cloud
/// controller (the topology labels).
fn node_managed_fields(
    labels: &BTreeMap<String, String>,
    now: Timestamp,
) -> Vec<ManagedFieldsEntry> {
    vec![
        managed(
            "kubelet",
            "Update",
            None,
            json!({"f:metadata": {"f:annotations": {".": {}, "f:alpha.kubernetes.io/provided-node-ip": {}, "f:node.alpha.kubernetes.io/ttl": {}, "f:volumes.kubernetes.io/controller-managed-attach-detach": {}}, "f:labels": labels.keys().map(|k| (format!("f:{k}"), json!({}))).collect::<serde_json::Map<_, _>>()}, "f:spec": {"f:providerID": {}}}),
            now,
        ),
        managed(
            "kubelet",
            "Update",
            Some("status"),
            json!({"f:status": {"f:allocatable": {"f:cpu": {}, "f:memory": {}, "f:pods": {}}, "f:capacity": {"f:cpu": {}, "f:memory": {}}, "f:conditions": {"k:{\"type\":\"DiskPressure\"}": {"f:lastHeartbeatTime": {}}, "k:{\"type\":\"MemoryPressure\"}": {"f:lastHeartbeatTime": {}}, "k:{\"type\":\"PIDPressure\"}": {"f:lastHeartbeatTime": {}}, "k:{\"type\":\"Ready\"}": {"f:lastHeartbeatTime": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}}}, "f:images": {}, "f:nodeInfo": {"f:bootID": {}, "f:kernelVersion": {}}}}),
            now,
        ),
        managed(
            "aws-cloud-controller-manager",
            "Update",
            None,
            json!({"f:metadata": {"f:labels": {"f:topology.kubernetes.io/region": {}, "f:topology.kubernetes.io/zone": {}}}}),
            now,
        ),
    ]
}

fn node_info(kubelet: &str, name: &str, instance: &str) -> NodeSystemInfo {
    NodeSystemInfo {
        architecture: "amd64".into(),
        boot_id: uuid::Uuid::new_v4().to_string(),
        container_runtime_version: "containerd://1.7.27".into(),
        kernel_version: "6.1.132-147.221.amzn2023.x86_64".into(),
        kube_proxy_version: kubelet.to_string(),
        kubelet_version: kubelet.to_string(),
        machine_id: format!("{:032x}", fnv(name) as u128 * 31),
        operating_system: "linux".into(),
        os_image: "Amazon Linux 2023.7.20250512".into(),
        system_uuid: format!("ec2{:029x}", fnv(instance) as u128),
        swap: None,
    }
}

/// Marks a booting node Ready, as its kubelet does once the network is up.
pub fn mark_node_ready(node: &mut Node, now: Timestamp) {
    if let Some(spec) = node.spec.as_mut()
        && let Some(taints) = spec.taints.as_mut()
    {
        taints.retain(|t| t.key != "node.kubernetes.io/not-ready");
        if taints.is_empty() {
            spec.taints = None;
        }
    }
    if let Some(cs) = node.status.as_mut().and_then(|s| s.conditions.as_mut()) {
        for c in cs.iter_mut().filter(|c| c.type_ == "Ready") {
            c.status = "True".into();
            c.reason = Some("KubeletReady".into());
            c.message = Some("kubelet is posting ready status".into());
            c.last_transition_time = Some(Time(now));
            c.last_heartbeat_time = Some(Time(now));
        }
    }
}

/// A pod made from a controller's template, not yet scheduled.
pub fn pod_from_template(
    template: &PodTemplateSpec,
    namespace: &str,
    name: &str,
    owner: OwnerReference,
    now: Timestamp,
) -> Pod {
    let mut meta = template.metadata.clone().unwrap_or_default();
    meta.name = Some(name.to_string());
    meta.namespace = Some(namespace.to_string());
    meta.uid = Some(uuid::Uuid::new_v4().to_string());
    meta.creation_timestamp = Some(Time(now));
    meta.generate_name = None;
    let manager = match owner.kind.as_str() {
        "StatefulSet" => "kube-controller-manager",
        "DaemonSet" => "kube-controller-manager",
        _ => "kube-controller-manager",
    };
    meta.owner_references = Some(vec![owner]);
    meta.managed_fields = Some(vec![
        managed(
            manager,
            "Update",
            None,
            json!({"f:metadata": {"f:generateName": {}, "f:labels": {}, "f:ownerReferences": {}}, "f:spec": {"f:containers": {}, "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {}, "f:terminationGracePeriodSeconds": {}}}),
            now,
        ),
        managed(
            "kubelet",
            "Update",
            Some("status"),
            json!({"f:status": {"f:conditions": {"k:{\"type\":\"ContainersReady\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}, "k:{\"type\":\"Initialized\"}": {".": {}, "f:status": {}, "f:type": {}}, "k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}, "f:type": {}}}, "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {}, "f:podIPs": {}, "f:startTime": {}}}),
            now,
        ),
    ]);
    let mut spec = template.spec.clone().unwrap_or_default();
    spec.scheduler_name
        .get_or_insert_with(|| "default-scheduler".into());
    spec.restart_policy.get_or_insert_with(|| "Always".into());
    spec.termination_grace_period_seconds.get_or_insert(30);
    spec.dns_policy.get_or_insert_with(|| "ClusterFirst".into());
    spec.enable_service_links.get_or_insert(true);
    Pod {
        metadata: meta,
        spec: Some(spec),
        status: Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Pending".into()),
            qos_class: Some("Burstable".into()),
            ..Default::default()
        }),
    }
}

/// Binds a pod to a node and starts it: Running, not yet Ready.
pub fn bind_and_start(pod: &mut Pod, node: &Node, now: Timestamp) {
    let host_ip = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
        .map(|a| a.address.clone());
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = node.metadata.name.clone();
    }
    // Bound: a node a preemption nominated is no longer pending for it.
    if let Some(status) = pod.status.as_mut() {
        status.nominated_node_name = None;
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let h = fnv(&uid);
    let pod_ip = format!(
        "10.{}.{}.{}",
        100 + (h % 100),
        (h >> 8) % 256,
        (h >> 16) % 254 + 1
    );
    let containers: Vec<ContainerStatus> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            image_id: format!("{}@sha256:{:016x}", c.image.clone().unwrap_or_default(), h),
            container_id: Some(format!("containerd://{:016x}{:016x}", h, h.rotate_left(17))),
            ready: false,
            started: Some(true),
            restart_count: 0,
            state: Some(k8s_openapi::api::core::v1::ContainerState {
                running: Some(k8s_openapi::api::core::v1::ContainerStateRunning {
                    started_at: Some(Time(now)),
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    let st = pod.status.get_or_insert_with(Default::default);
    st.phase = Some("Running".into());
    st.host_ip = host_ip;
    st.pod_ip = Some(pod_ip.clone());
    st.pod_ips = Some(vec![k8s_openapi::api::core::v1::PodIP { ip: pod_ip }]);
    st.start_time = Some(Time(now));
    st.container_statuses = Some(containers);
    set_pod_condition(pod, "PodScheduled", true, now);
    set_pod_condition(pod, "Initialized", true, now);
    set_pod_condition(pod, "ContainersReady", false, now);
    set_pod_condition(pod, "Ready", false, now);
}

pub fn mark_pod_ready(pod: &mut Pod, ready: bool, now: Timestamp) {
    set_pod_condition(pod, "ContainersReady", ready, now);
    set_pod_condition(pod, "Ready", ready, now);
    if let Some(cs) = pod
        .status
        .as_mut()
        .and_then(|s| s.container_statuses.as_mut())
    {
        for c in cs {
            c.ready = ready;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    fn group() -> NodeGroupSpec {
        Scenario::from_yaml(
            "nodeGroups: [{name: g, size: 1, template: {cpu: '4', memory: 16Gi, kubeletVersion: v1.32.3}}]",
            "t",
        )
        .unwrap()
        .node_groups
        .remove(0)
    }

    #[test]
    fn nodes_look_like_eks_nodes_and_are_sized_like_them() {
        let now = Timestamp::now();
        let n = build_node(&group(), 7, now, true);
        let pid = n.spec.as_ref().unwrap().provider_id.clone().unwrap();
        assert!(pid.starts_with("aws:///us-east-1b/i-0"), "{pid}");
        assert_eq!(pid.rsplit('/').next().unwrap().len(), 19);
        assert!(node_ready(&n));
        let (alloc, pods) = node_allocatable(&n);
        assert!(alloc.cpu < 4000 && alloc.cpu > 3500, "{alloc:?}");
        assert_eq!(pods, 58);
        assert_eq!(
            n.status
                .as_ref()
                .unwrap()
                .node_info
                .as_ref()
                .unwrap()
                .kubelet_version,
            "v1.32.3"
        );
        let size = serde_json::to_vec(&n).unwrap().len();
        assert!(
            size > 8_000,
            "a real EKS node serialises to 10-20 KB; this one is {size} bytes"
        );
    }

    #[test]
    fn booting_nodes_carry_not_ready_taint_until_ready() {
        let now = Timestamp::now();
        let mut n = build_node(&group(), 1, now, false);
        assert!(!node_ready(&n));
        assert!(
            node_taints(&n)
                .iter()
                .any(|t| t.key == "node.kubernetes.io/not-ready")
        );
        mark_node_ready(&mut n, now);
        assert!(node_ready(&n));
        assert!(node_taints(&n).is_empty());
    }

    #[test]
    fn instance_ids_are_distinct_and_well_formed() {
        let a = instance_id("g", 1);
        let b = instance_id("g", 2);
        let c = instance_id("h", 1);
        assert!(a != b && a != c);
        assert!(a.len() == 19 && a[2..].chars().all(|c| c.is_ascii_hexdigit()));
    }
}
