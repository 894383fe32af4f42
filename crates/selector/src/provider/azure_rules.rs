//! The Azure drift rules, as pure functions over what the ARM list calls returned. Per scale set,
//! first match wins: a failed look-up (the scale set vanished between the calls), a scale set
//! being deleted, excluded by name, an AKS node pool (unless included), an `Automatic` or
//! `Rolling` upgrade policy (Azure replaces those VMs itself), Flexible orchestration (no per-VM
//! latest-model flag): skipped. Otherwise (Uniform, `Manual`) a VM the filtered list
//! (`latestModelApplied eq false`) returned is out of date, reason `model`, unless it is not in
//! provisioning state `Succeeded` (skipped); every other VM of the scale set is current.
//! With image drift on, a scale set whose model asks for the `latest` image has all its VMs
//! listed: a VM on the latest model whose `exactVersion` is older than the newest another VM of
//! the set runs is out of date, reason `image` (a newly published image does not change the
//! model, so `latestModelApplied` cannot see it).
//! Nodes join their VM by `spec.providerID`, the resource group and the scale set name compared
//! case-insensitively. Anything the answers cannot settle is a skip, never a guess. No I/O.

use std::collections::{BTreeMap, BTreeSet};

use rotor_core::DrainReason;

use crate::provider::azure_model::{ScaleSet, ScaleSetVm, segment_after};
use crate::verdict::{SkipReason, Verdict};

/// The tag prefix AKS puts on its node pools' scale sets (`aks-managed-poolName`,
/// `aks-managed-orchestrator`, ...).
pub const AKS_TAG_PREFIX: &str = "aks-managed-";

/// The tag naming an AKS node pool.
pub const AKS_POOL_TAG: &str = "aks-managed-poolName";

/// The resource-group prefix of an AKS cluster's node resource group.
pub const AKS_NODE_RESOURCE_GROUP_PREFIX: &str = "MC_";

/// A scale set's key: resource group and name, lowercased (ARM names are case-insensitive).
pub fn scale_set_key(resource_group: &str, name: &str) -> String {
    format!(
        "{}/{}",
        resource_group.to_ascii_lowercase(),
        name.to_ascii_lowercase()
    )
}

/// A scale set as reports show it: `resourceGroup/name`.
pub fn scale_set_label(set: &ScaleSet) -> String {
    format!("{}/{}", set.resource_group(), set.name)
}

/// A look-up about one scale set that failed (it vanished between the calls).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedScaleSet {
    pub operation: &'static str,
    pub error: String,
}

/// What the rules read besides the node.
#[derive(Clone, Copy, Debug)]
pub struct AzureInputs<'a> {
    /// The listed scale sets (after the resource-group filter).
    pub scale_sets: &'a [ScaleSet],
    /// Per judged scale set (by [`scale_set_key`]): the VMs its list returned (only those off
    /// the latest model, unless [`lists_every_vm`]).
    pub outdated_vms: &'a BTreeMap<String, Vec<ScaleSetVm>>,
    /// Per scale set (by key): a look-up that failed for it alone.
    pub failed: &'a BTreeMap<String, FailedScaleSet>,
    /// Scale sets excluded by name (compared case-insensitively).
    pub excluded_names: &'a BTreeSet<String>,
    /// Judge AKS node pools too.
    pub include_aks_managed: bool,
    /// `--image-drift`: compare the image versions of scale sets whose model asks for `latest`.
    pub image_drift: bool,
}

/// Whether a judged scale set's VM list must hold every VM, not only those off the latest model:
/// with image drift on, when the model asks for the `latest` image (its version then says
/// nothing about the image each VM was built from).
pub fn lists_every_vm(set: &ScaleSet, image_drift: bool) -> bool {
    image_drift
        && set
            .image()
            .and_then(|i| i.version.as_deref())
            .is_some_and(|v| v.eq_ignore_ascii_case("latest"))
}

/// An image version (`22.04.202405010`, `1.10.0`) as numbers, to compare part by part; `None`
/// when a part is not a number (such a version is never compared).
pub fn image_version(version: &str) -> Option<Vec<u64>> {
    version.split('.').map(|part| part.parse().ok()).collect()
}

/// The image rule over one scale set's full VM list: each `Succeeded` VM on the latest model
/// whose `exactVersion` is older than the newest one a `Succeeded` VM on the latest model runs,
/// with its verdict.
pub fn image_drifted_vms(group: &str, vms: &[ScaleSetVm]) -> Vec<(String, Verdict)> {
    let version_of = |vm: &ScaleSetVm| {
        let text = vm.image()?.exact_version.as_deref()?;
        Some((image_version(text)?, text.to_owned()))
    };
    // Only VMs on the latest model are compared, the newest among them included: a VM still on
    // an earlier model may run another image altogether (the model moved to another offer or
    // SKU, whose versions number lower), and the model rule judges it already.
    let settled = |vm: &&ScaleSetVm| {
        vm.properties
            .provisioning_state
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case("Succeeded"))
            && vm.properties.latest_model_applied == Some(true)
    };
    let Some((newest, newest_text, newest_vm)) = vms
        .iter()
        .filter(settled)
        .filter_map(|vm| version_of(vm).map(|(v, t)| (v, t, vm.instance_id.clone())))
        .max_by(|a, b| a.0.cmp(&b.0))
    else {
        return Vec::new();
    };
    vms.iter()
        .filter(settled)
        .filter_map(|vm| {
            let (version, text) = version_of(vm)?;
            (version < newest).then(|| {
                (
                    vm.instance_id.clone(),
                    Verdict::Drifted {
                        reason: DrainReason::Image,
                        detail: format!(
                            "VM {} runs image version {text}; VM {newest_vm} of scale set {group} runs {newest_text} (the model asks for latest)",
                            vm.instance_id
                        ),
                    },
                )
            })
        })
        .collect()
}

/// Why a scale set is not judged, before any look-up of its VMs; `None` when its VMs are to be
/// listed. Decides which scale sets cost a call.
pub fn scale_set_skip(set: &ScaleSet, inputs: &AzureInputs) -> Option<SkipReason> {
    let group = scale_set_label(set);
    if let Some(state) = set.properties.provisioning_state.as_deref()
        && state.eq_ignore_ascii_case("Deleting")
    {
        return Some(SkipReason::GroupDeleting {
            group,
            status: state.to_owned(),
        });
    }
    if inputs
        .excluded_names
        .iter()
        .any(|n| n.eq_ignore_ascii_case(&set.name))
    {
        return Some(SkipReason::GroupExcludedByName { group });
    }
    if !inputs.include_aks_managed
        && let Some(pool) = aks_pool(set)
    {
        return Some(SkipReason::AksManaged { group, pool });
    }
    let mode = set
        .properties
        .upgrade_policy
        .as_ref()
        .and_then(|p| p.mode.as_deref())
        .unwrap_or("Manual");
    if mode.eq_ignore_ascii_case("Automatic") || mode.eq_ignore_ascii_case("Rolling") {
        return Some(SkipReason::UpgradedByCloud {
            group,
            mode: mode.to_owned(),
        });
    }
    if set
        .properties
        .orchestration_mode
        .as_deref()
        .is_some_and(|m| m.eq_ignore_ascii_case("Flexible"))
    {
        return Some(SkipReason::FlexibleScaleSet { group });
    }
    None
}

/// The AKS node pool a scale set is, by its tags (`aks-managed-poolName`, or any
/// `aks-managed-*` tag) or its resource group (`MC_*`).
pub fn aks_pool(set: &ScaleSet) -> Option<String> {
    if let Some(pool) = set.tags.get(AKS_POOL_TAG) {
        return Some(pool.clone());
    }
    let tagged = set.tags.keys().any(|k| k.starts_with(AKS_TAG_PREFIX));
    let rg = set.resource_group();
    // By `get`, not by slicing: resource group names may hold letters of more than one byte.
    let node_rg = rg
        .get(..AKS_NODE_RESOURCE_GROUP_PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(AKS_NODE_RESOURCE_GROUP_PREFIX));
    (tagged || node_rg).then(|| set.name.clone())
}

/// One scale set's conclusion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleSetJudgement {
    /// `resourceGroup/name`.
    pub group: String,
    /// The skip for every VM of the set, when the set is not judged.
    pub skip: Option<SkipReason>,
    /// When judged: the out-of-date VMs' verdicts, by instance id.
    pub vms: BTreeMap<String, Verdict>,
}

/// Every listed scale set judged, by [`scale_set_key`].
pub fn judge_scale_sets(inputs: &AzureInputs) -> BTreeMap<String, ScaleSetJudgement> {
    inputs
        .scale_sets
        .iter()
        .map(|set| {
            let key = scale_set_key(set.resource_group(), &set.name);
            let group = scale_set_label(set);
            let skip = scale_set_skip(set, inputs).or_else(|| {
                inputs
                    .failed
                    .get(&key)
                    .map(|failure| SkipReason::LookupFailed {
                        group: group.clone(),
                        operation: failure.operation,
                        template: group.clone(),
                        error: failure.error.clone(),
                    })
            });
            let vms = match (&skip, inputs.outdated_vms.get(&key)) {
                (None, Some(vms)) => {
                    let mut verdicts: BTreeMap<String, Verdict> = vms
                        .iter()
                        .map(|vm| (vm.instance_id.clone(), vm_verdict(&group, vm)))
                        .collect();
                    if lists_every_vm(set, inputs.image_drift) {
                        verdicts.extend(image_drifted_vms(&group, vms));
                    }
                    verdicts
                }
                _ => BTreeMap::new(),
            };
            // Judged but not listed: partial data, never a taint.
            let skip = match (skip, inputs.outdated_vms.contains_key(&key)) {
                (None, false) => Some(SkipReason::LookupFailed {
                    group: group.clone(),
                    operation: "VirtualMachineScaleSetVMs_List",
                    template: group.clone(),
                    error: "its VMs were not listed".into(),
                }),
                (skip, _) => skip,
            };
            (key, ScaleSetJudgement { group, skip, vms })
        })
        .collect()
}

/// A VM the filtered list returned.
pub fn vm_verdict(group: &str, vm: &ScaleSetVm) -> Verdict {
    let state = vm
        .properties
        .provisioning_state
        .as_deref()
        .unwrap_or("unknown");
    if !state.eq_ignore_ascii_case("Succeeded") {
        return Verdict::skip(SkipReason::VmNotSucceeded {
            state: state.to_owned(),
        });
    }
    match vm.properties.latest_model_applied {
        Some(false) => {
            let image = vm
                .image()
                .and_then(|i| i.exact_version.as_deref())
                .map(|v| format!(" (image version {v})"))
                .unwrap_or_default();
            Verdict::Drifted {
                reason: DrainReason::Model,
                detail: format!(
                    "VM {} does not run the latest model of scale set {group}{image}",
                    vm.instance_id
                ),
            }
        }
        // On the latest model (the unfiltered list of image drift), or an answer saying nothing:
        // not out of date by the model.
        _ => Verdict::Current,
    }
}

/// A node's VM, from `azure:///subscriptions/S/resourceGroups/RG/providers/Microsoft.Compute/virtualMachineScaleSets/NAME/virtualMachines/ID`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleSetVmId {
    pub subscription: String,
    pub resource_group: String,
    pub scale_set: String,
    pub instance_id: String,
}

impl ScaleSetVmId {
    /// The VM's ARM resource id (the providerID without its scheme).
    pub fn resource_id(&self) -> String {
        format!(
            "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Compute/virtualMachineScaleSets/{}/virtualMachines/{}",
            self.subscription, self.resource_group, self.scale_set, self.instance_id
        )
    }
}

/// Reads a scale-set VM's providerID; `None` for anything else (a standalone VM, another cloud).
pub fn parse_scale_set_provider_id(provider_id: &str) -> Option<ScaleSetVmId> {
    let path = provider_id.strip_prefix("azure://")?;
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let [s, sub, r, rg, p, ns, v, name, vm, id] = parts.as_slice() else {
        return None;
    };
    let eq = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
    if !(eq(s, "subscriptions")
        && eq(r, "resourceGroups")
        && eq(p, "providers")
        && eq(ns, "Microsoft.Compute")
        && eq(v, "virtualMachineScaleSets")
        && eq(vm, "virtualMachines"))
        || [sub, rg, name, id].iter().any(|x| x.is_empty())
    {
        return None;
    }
    Some(ScaleSetVmId {
        subscription: (*sub).to_owned(),
        resource_group: (*rg).to_owned(),
        scale_set: (*name).to_owned(),
        instance_id: (*id).to_owned(),
    })
}

/// A node joined to its scale set's judgement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeVerdict {
    /// The VM's resource id, when the providerID names a scale-set VM.
    pub instance: Option<String>,
    /// `resourceGroup/name`, when the scale set was listed.
    pub group: Option<String>,
    pub verdict: Verdict,
}

/// Joins a node (by its providerID) to the judged scale sets.
pub fn node_verdict(
    provider_id: Option<&str>,
    subscription: &str,
    judged: &BTreeMap<String, ScaleSetJudgement>,
) -> NodeVerdict {
    let provider_id = provider_id.unwrap_or_default();
    let Some(id) = parse_scale_set_provider_id(provider_id) else {
        return NodeVerdict {
            instance: None,
            group: None,
            verdict: Verdict::skip(SkipReason::NotAScaleSetVm {
                provider_id: provider_id.to_owned(),
            }),
        };
    };
    let instance = Some(id.resource_id());
    let key = scale_set_key(&id.resource_group, &id.scale_set);
    let found = judged
        .get(&key)
        .filter(|_| id.subscription.eq_ignore_ascii_case(subscription));
    let Some(set) = found else {
        return NodeVerdict {
            instance,
            group: None,
            verdict: Verdict::skip(SkipReason::ScaleSetNotListed {
                scale_set: format!("{}/{}", id.resource_group, id.scale_set),
            }),
        };
    };
    let verdict = match &set.skip {
        Some(why) => Verdict::skip(why.clone()),
        None => set
            .vms
            .get(&id.instance_id)
            .cloned()
            .unwrap_or(Verdict::Current),
    };
    NodeVerdict {
        instance,
        group: Some(set.group.clone()),
        verdict,
    }
}

/// The scale set a VM resource id names, as a key (for retiring and tests).
pub fn key_of_resource_id(id: &str) -> Option<String> {
    Some(scale_set_key(
        segment_after(id, "resourceGroups")?,
        segment_after(id, "virtualMachineScaleSets")?,
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::provider::azure_model::Page;

    const SUB: &str = "00000000-0000-0000-0000-000000000000";

    fn set(rg: &str, name: &str, extra: serde_json::Value) -> ScaleSet {
        let mut value = json!({
            "name": name,
            "id": format!("/subscriptions/{SUB}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets/{name}"),
            "location": "westeurope",
            "tags": {},
            "properties": {"orchestrationMode": "Uniform", "upgradePolicy": {"mode": "Manual"}, "provisioningState": "Succeeded"}
        });
        if let (Some(into), Some(from)) = (value.as_object_mut(), extra.as_object()) {
            for (k, v) in from {
                if k == "properties" {
                    for (pk, pv) in v.as_object().unwrap() {
                        into["properties"][pk] = pv.clone();
                    }
                } else {
                    into.insert(k.clone(), v.clone());
                }
            }
        }
        serde_json::from_value(value).unwrap()
    }

    /// `VirtualMachineScaleSetVMs_List` with `$filter=properties/latestModelApplied eq false`.
    fn outdated(rg: &str, name: &str, ids: &[(&str, &str)]) -> Vec<ScaleSetVm> {
        let page: Page<ScaleSetVm> = serde_json::from_value(json!({"value": ids.iter().map(|(id, state)| json!({
            "name": format!("{name}_{id}"),
            "id": format!("/subscriptions/{SUB}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets/{name}/virtualMachines/{id}"),
            "instanceId": id,
            "properties": {
                "latestModelApplied": false,
                "provisioningState": state,
                "storageProfile": {"imageReference": {"publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server", "version": "latest", "exactVersion": "24.04.202409120"}}
            }
        })).collect::<Vec<_>>()}))
        .unwrap();
        page.value
    }

    fn pid(rg: &str, name: &str, id: &str) -> String {
        format!(
            "azure:///subscriptions/{SUB}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets/{name}/virtualMachines/{id}"
        )
    }

    struct Fixture {
        sets: Vec<ScaleSet>,
        vms: BTreeMap<String, Vec<ScaleSetVm>>,
        failed: BTreeMap<String, FailedScaleSet>,
        excluded: BTreeSet<String>,
        include_aks: bool,
    }

    impl Fixture {
        fn judge(&self) -> BTreeMap<String, ScaleSetJudgement> {
            judge_scale_sets(&AzureInputs {
                scale_sets: &self.sets,
                outdated_vms: &self.vms,
                failed: &self.failed,
                excluded_names: &self.excluded,
                include_aks_managed: self.include_aks,
                image_drift: false,
            })
        }
        fn verdict(&self, provider_id: &str) -> NodeVerdict {
            node_verdict(Some(provider_id), SUB, &self.judge())
        }
    }

    fn fixture() -> Fixture {
        Fixture {
            sets: vec![
                set("rg-Workers", "workers", json!({})),
                set(
                    "rg-workers",
                    "rolling",
                    json!({"properties": {"upgradePolicy": {"mode": "Rolling"}}}),
                ),
                set(
                    "rg-workers",
                    "flex",
                    json!({"properties": {"orchestrationMode": "Flexible"}}),
                ),
                set(
                    "MC_rg_aks_westeurope",
                    "aks-nodepool1-123-vmss",
                    json!({"tags": {"aks-managed-poolName": "nodepool1"}}),
                ),
            ],
            vms: BTreeMap::from([
                (
                    scale_set_key("rg-workers", "workers"),
                    outdated(
                        "rg-Workers",
                        "workers",
                        &[("3", "Succeeded"), ("4", "Updating")],
                    ),
                ),
                (
                    scale_set_key("MC_rg_aks_westeurope", "aks-nodepool1-123-vmss"),
                    outdated(
                        "MC_rg_aks_westeurope",
                        "aks-nodepool1-123-vmss",
                        &[("0", "Succeeded")],
                    ),
                ),
            ]),
            failed: BTreeMap::new(),
            excluded: BTreeSet::new(),
            include_aks: false,
        }
    }

    #[test]
    fn a_vm_off_the_latest_model_drifts_and_the_others_are_current() {
        let f = fixture();
        // The providerID spells the resource group in another case than the scale set's id.
        let drifted = f.verdict(&pid("RG-WORKERS", "workers", "3"));
        assert_eq!(drifted.group.as_deref(), Some("rg-Workers/workers"));
        match drifted.verdict {
            Verdict::Drifted { reason, detail } => {
                assert_eq!(reason, DrainReason::Model);
                assert_eq!(
                    detail,
                    "VM 3 does not run the latest model of scale set rg-Workers/workers (image version 24.04.202409120)"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            f.verdict(&pid("rg-workers", "workers", "7")).verdict,
            Verdict::Current
        );
        assert_eq!(
            f.verdict(&pid("rg-workers", "workers", "4")).verdict,
            Verdict::skip(SkipReason::VmNotSucceeded {
                state: "Updating".into()
            })
        );
    }

    #[test]
    fn scale_sets_azure_upgrades_itself_are_skipped() {
        let f = fixture();
        let v = f.verdict(&pid("rg-workers", "rolling", "0")).verdict;
        assert_eq!(
            v,
            Verdict::skip(SkipReason::UpgradedByCloud {
                group: "rg-workers/rolling".into(),
                mode: "Rolling".into()
            })
        );
        let flex = f.verdict(&pid("rg-workers", "flex", "0")).verdict;
        assert!(matches!(
            flex,
            Verdict::Skip {
                why: SkipReason::FlexibleScaleSet { .. }
            }
        ));
    }

    #[test]
    fn aks_pools_are_skipped_unless_included() {
        let mut f = fixture();
        let node = pid("mc_rg_aks_westeurope", "aks-nodepool1-123-vmss", "0");
        assert_eq!(
            f.verdict(&node).verdict,
            Verdict::skip(SkipReason::AksManaged {
                group: "MC_rg_aks_westeurope/aks-nodepool1-123-vmss".into(),
                pool: "nodepool1".into()
            })
        );
        f.include_aks = true;
        assert!(matches!(
            f.verdict(&node).verdict,
            Verdict::Drifted {
                reason: DrainReason::Model,
                ..
            }
        ));
        // The node resource group alone marks a pool.
        let bare = set("MC_x_y_z", "pool", json!({}));
        assert_eq!(aks_pool(&bare), Some("pool".into()));
        assert_eq!(aks_pool(&set("rg", "pool", json!({}))), None);
    }

    #[test]
    fn a_vanished_or_unlisted_scale_set_is_never_judged() {
        let mut f = fixture();
        f.failed.insert(
            scale_set_key("rg-workers", "workers"),
            FailedScaleSet {
                operation: "VirtualMachineScaleSetVMs_List",
                error: "404 ResourceNotFound".into(),
            },
        );
        let v = f.verdict(&pid("rg-workers", "workers", "3")).verdict;
        assert_eq!(v.clone(), {
            let Verdict::Skip { why } = &v else {
                panic!("{v:?}")
            };
            assert_eq!(why.slug(), "lookup-failed");
            v.clone()
        });
        // Listed but its VMs never read: partial data, no taint.
        f.vms.clear();
        f.failed.clear();
        let v = f.verdict(&pid("rg-workers", "workers", "3")).verdict;
        assert!(matches!(v, Verdict::Skip { why } if why.slug() == "lookup-failed"));
        let other = f.verdict(&pid("rg-other", "workers", "3"));
        assert_eq!(
            other.verdict,
            Verdict::skip(SkipReason::ScaleSetNotListed {
                scale_set: "rg-other/workers".into()
            })
        );
    }

    #[test]
    fn excluded_and_deleting_scale_sets_are_skipped() {
        let mut f = fixture();
        f.excluded.insert("WORKERS".into());
        assert!(matches!(
            f.verdict(&pid("rg-workers", "workers", "3")).verdict,
            Verdict::Skip {
                why: SkipReason::GroupExcludedByName { .. }
            }
        ));
        let deleting = set(
            "rg",
            "old",
            json!({"properties": {"provisioningState": "Deleting"}}),
        );
        assert!(matches!(
            scale_set_skip(
                &deleting,
                &AzureInputs {
                    scale_sets: &[],
                    outdated_vms: &BTreeMap::new(),
                    failed: &BTreeMap::new(),
                    excluded_names: &BTreeSet::new(),
                    include_aks_managed: false,
                    image_drift: false,
                }
            ),
            Some(SkipReason::GroupDeleting { .. })
        ));
    }

    #[test]
    fn provider_ids_of_scale_set_vms_only() {
        let id = parse_scale_set_provider_id(&pid("RG", "vmss", "12")).unwrap();
        assert_eq!(
            (
                id.resource_group.as_str(),
                id.scale_set.as_str(),
                id.instance_id.as_str()
            ),
            ("RG", "vmss", "12")
        );
        assert_eq!(
            id.resource_id(),
            pid("RG", "vmss", "12").trim_start_matches("azure://")
        );
        assert_eq!(
            key_of_resource_id(&id.resource_id()),
            Some("rg/vmss".into())
        );
        for other in [
            "",
            "aws:///us-east-1a/i-0abc",
            "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm1",
            "azure:///subscriptions/s/resourceGroups//providers/Microsoft.Compute/virtualMachineScaleSets/n/virtualMachines/1",
        ] {
            assert_eq!(parse_scale_set_provider_id(other), None, "{other}");
            assert!(matches!(
                node_verdict(Some(other), SUB, &BTreeMap::new()).verdict,
                Verdict::Skip { why } if why.slug() == "provider-id"
            ));
        }
    }

    /// `VirtualMachineScaleSetVMs_List` without a filter: (id, on the latest model, state,
    /// exactVersion).
    fn every_vm(rg: &str, name: &str, vms: &[(&str, bool, &str, Option<&str>)]) -> Vec<ScaleSetVm> {
        let page: Page<ScaleSetVm> = serde_json::from_value(json!({"value": vms.iter().map(|(id, latest, state, exact)| {
            let mut image = json!({"publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server", "version": "latest"});
            if let Some(exact) = exact {
                image["exactVersion"] = json!(exact);
            }
            json!({
                "name": format!("{name}_{id}"),
                "id": format!("/subscriptions/{SUB}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets/{name}/virtualMachines/{id}"),
                "instanceId": id,
                "properties": {"latestModelApplied": latest, "provisioningState": state, "storageProfile": {"imageReference": image}}
            })
        }).collect::<Vec<_>>()}))
        .unwrap();
        page.value
    }

    fn on_image(version: &str) -> serde_json::Value {
        json!({"properties": {"virtualMachineProfile": {"storageProfile": {"imageReference": {
            "publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server", "version": version
        }}}}})
    }

    #[test]
    fn image_versions_compare_by_number_part_by_part() {
        assert!(image_version("1.10.0") > image_version("1.9.0"));
        assert!(image_version("24.04.202410010") > image_version("24.04.202409120"));
        assert_eq!(image_version("24.04.x"), None);
        assert_eq!(image_version(""), None);
    }

    #[test]
    fn image_drift_marks_vms_older_than_the_newest_of_a_latest_set() {
        let vms = every_vm(
            "rg",
            "latest",
            &[
                ("0", true, "Succeeded", Some("24.04.202409120")),
                ("1", true, "Succeeded", Some("24.04.202410010")),
                // Off the model too: the model rule speaks for it.
                ("2", false, "Succeeded", Some("24.04.202409120")),
                // Still being built: neither judged nor taken as the newest.
                ("3", true, "Creating", Some("24.04.202412010")),
                // No exactVersion: nothing to compare.
                ("4", true, "Succeeded", None),
            ],
        );
        let sets = vec![
            set("rg", "latest", on_image("latest")),
            set("rg", "pinned", on_image("24.04.202409120")),
        ];
        let pinned = every_vm(
            "rg",
            "pinned",
            &[("0", true, "Succeeded", Some("24.04.202409120"))],
        );
        let listed = BTreeMap::from([
            (scale_set_key("rg", "latest"), vms),
            (scale_set_key("rg", "pinned"), pinned),
        ]);
        let judge = |image_drift| {
            judge_scale_sets(&AzureInputs {
                scale_sets: &sets,
                outdated_vms: &listed,
                failed: &BTreeMap::new(),
                excluded_names: &BTreeSet::new(),
                include_aks_managed: false,
                image_drift,
            })
        };
        let on = judge(true);
        let latest = &on[&scale_set_key("rg", "latest")].vms;
        assert_eq!(
            latest["0"],
            Verdict::Drifted {
                reason: DrainReason::Image,
                detail: "VM 0 runs image version 24.04.202409120; VM 1 of scale set rg/latest runs 24.04.202410010 (the model asks for latest)".into()
            }
        );
        assert_eq!(latest["1"], Verdict::Current);
        assert!(matches!(
            &latest["2"],
            Verdict::Drifted {
                reason: DrainReason::Model,
                ..
            }
        ));
        assert!(matches!(&latest["3"], Verdict::Skip { .. }));
        assert_eq!(latest["4"], Verdict::Current);
        // A pinned version: the model says which image, so only the model rule applies.
        assert_eq!(
            on[&scale_set_key("rg", "pinned")].vms["0"],
            Verdict::Current
        );
        assert!(!lists_every_vm(&sets[1], true));
        // Off: no image verdicts at all, and only the filtered list is asked for.
        let off = judge(false);
        assert_eq!(
            off[&scale_set_key("rg", "latest")].vms["0"],
            Verdict::Current
        );
        assert!(!lists_every_vm(&sets[0], false) && lists_every_vm(&sets[0], true));
    }

    #[test]
    fn image_drift_ignores_vms_off_the_model_when_finding_the_newest() {
        // The model moved to another image whose versions number lower (22.04 after 24.04):
        // VM 0 still runs the earlier model's image, VM 5 the model's own. VM 5 is current;
        // VM 0 is the model rule's.
        let vms = every_vm(
            "rg",
            "latest",
            &[
                ("0", false, "Succeeded", Some("24.04.202410010")),
                ("5", true, "Succeeded", Some("22.04.202410020")),
            ],
        );
        assert_eq!(image_drifted_vms("rg/latest", &vms), Vec::new());
        // Among VMs on the model the older is still drifted.
        let vms = every_vm(
            "rg",
            "latest",
            &[
                ("0", false, "Succeeded", Some("24.04.202410010")),
                ("5", true, "Succeeded", Some("22.04.202410020")),
                ("6", true, "Succeeded", Some("22.04.202409120")),
            ],
        );
        let drifted = image_drifted_vms("rg/latest", &vms);
        assert_eq!(
            drifted
                .iter()
                .map(|(id, _)| id.as_str())
                .collect::<Vec<_>>(),
            ["6"],
            "{drifted:?}"
        );
    }

    #[test]
    fn a_resource_group_named_in_letters_of_several_bytes_is_no_aks_node_group() {
        assert_eq!(aks_pool(&set("éé-rg", "pool", json!({}))), None);
        assert_eq!(aks_pool(&set("пр-k8s", "pool", json!({}))), None);
        assert_eq!(aks_pool(&set("M", "pool", json!({}))), None);
        assert_eq!(
            aks_pool(&set("mc_prod_aks_westeurope", "pool", json!({}))),
            Some("pool".into())
        );
    }
}
