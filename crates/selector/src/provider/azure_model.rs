//! Azure-shaped plain data: the parts of the ARM answers of `VirtualMachineScaleSets_ListAll`
//! (and `_List` per resource group) and `VirtualMachineScaleSetVMs_List` that the rules read. The
//! serde form is the REST shape (`{"value": [...], "nextLink": ...}`, fields under
//! `properties`), so fixtures can be pasted from the published examples
//! (`VirtualMachineScaleSet_ListAll_*.json`, `VirtualMachineScaleSetVM_List_*.json`). No
//! behaviour lives here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One page of a list: `value` and, when more follow, `nextLink` (an absolute URL).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Page<T> {
    #[serde(default = "Vec::new")]
    pub value: Vec<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_link: Option<String>,
}

/// A VM image reference: a marketplace image (publisher, offer, sku, version) or a gallery or
/// managed image (`id`). On a VM, `exactVersion` is the version it was built from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publisher: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<String>,
    /// `latest` or a version such as `20.04.202405010`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// On a VM: the version the model's `latest` resolved to when it was built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact_version: Option<String>,
}

/// One scale set, as in `VirtualMachineScaleSets_ListAll`'s `value[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleSet {
    /// `/subscriptions/S/resourceGroups/RG/providers/Microsoft.Compute/virtualMachineScaleSets/NAME`.
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub location: String,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    #[serde(default)]
    pub properties: ScaleSetProperties,
}

/// A scale set's `properties`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleSetProperties {
    /// `Uniform` or `Flexible`; absent on older scale sets (Uniform).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orchestration_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_policy: Option<UpgradePolicy>,
    /// `Succeeded`, `Updating`, `Deleting`, `Failed`...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine_profile: Option<VmProfile>,
}

/// `upgradePolicy`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpgradePolicy {
    /// `Manual`, `Automatic` or `Rolling`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// `virtualMachineProfile` (of the scale set's model) or a VM's `properties`, reduced to the
/// image.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmProfile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_profile: Option<StorageProfile>,
}

/// `storageProfile`, reduced to the image.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StorageProfile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_reference: Option<ImageReference>,
}

/// One VM of a Uniform scale set, as in `VirtualMachineScaleSetVMs_List`'s `value[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleSetVm {
    /// `.../virtualMachineScaleSets/NAME/virtualMachines/ID`.
    #[serde(default)]
    pub id: String,
    /// The VM's instance id within its scale set, e.g. `3`.
    pub instance_id: String,
    #[serde(default)]
    pub properties: ScaleSetVmProperties,
}

/// A scale-set VM's `properties`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleSetVmProperties {
    /// Whether the VM runs the scale set's current model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_model_applied: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_profile: Option<StorageProfile>,
}

impl ScaleSet {
    /// The resource group, as the scale set's id spells it.
    pub fn resource_group(&self) -> &str {
        segment_after(&self.id, "resourceGroups").unwrap_or_default()
    }

    /// The model's image reference.
    pub fn image(&self) -> Option<&ImageReference> {
        self.properties
            .virtual_machine_profile
            .as_ref()?
            .storage_profile
            .as_ref()?
            .image_reference
            .as_ref()
    }
}

impl ScaleSetVm {
    /// The VM's image reference (`exactVersion` is the version it runs).
    pub fn image(&self) -> Option<&ImageReference> {
        self.properties
            .storage_profile
            .as_ref()?
            .image_reference
            .as_ref()
    }
}

/// The path segment after `key` (compared case-insensitively, as ARM does) in a resource id.
pub fn segment_after<'a>(id: &'a str, key: &str) -> Option<&'a str> {
    let mut parts = id.split('/');
    while let Some(part) = parts.next() {
        if part.eq_ignore_ascii_case(key) {
            return parts.next().filter(|p| !p.is_empty());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Shaped as `VirtualMachineScaleSet_ListAll_MaximumSet_Gen.json` and the Uniform
    /// examples of the Compute REST specifications, reduced.
    #[test]
    fn scale_sets_read_the_rest_shape() {
        let page: Page<ScaleSet> = serde_json::from_value(json!({
            "value": [{
                "name": "aks-nodepool1-12345678-vmss",
                "id": "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/MC_rg_aks_westeurope/providers/Microsoft.Compute/virtualMachineScaleSets/aks-nodepool1-12345678-vmss",
                "type": "Microsoft.Compute/virtualMachineScaleSets",
                "location": "westeurope",
                "tags": {"aks-managed-poolName": "nodepool1", "aks-managed-orchestrator": "Kubernetes:1.30.3"},
                "sku": {"name": "Standard_D4s_v5", "tier": "Standard", "capacity": 3},
                "properties": {
                    "singlePlacementGroup": false,
                    "orchestrationMode": "Uniform",
                    "upgradePolicy": {"mode": "Manual"},
                    "virtualMachineProfile": {"storageProfile": {"imageReference": {
                        "id": "/subscriptions/1/resourceGroups/AKS-Ubuntu/providers/Microsoft.Compute/galleries/AKSUbuntu/images/2204gen2containerd/versions/202405.20.0"
                    }}},
                    "provisioningState": "Succeeded",
                    "uniqueId": "d53a6a26-f2c5-4a5a-9a1e-9d2c1a0e7a11"
                }
            }],
            "nextLink": "https://management.azure.com/subscriptions/0/providers/Microsoft.Compute/virtualMachineScaleSets?api-version=2024-07-01&$skiptoken=abc"
        }))
        .unwrap();
        let set = &page.value[0];
        assert_eq!(set.resource_group(), "MC_rg_aks_westeurope");
        assert_eq!(
            set.properties.orchestration_mode.as_deref(),
            Some("Uniform")
        );
        assert_eq!(
            set.properties
                .upgrade_policy
                .as_ref()
                .and_then(|p| p.mode.as_deref()),
            Some("Manual")
        );
        assert!(set.image().unwrap().id.is_some());
        assert!(page.next_link.unwrap().contains("skiptoken"));
    }

    /// Shaped as `VirtualMachineScaleSetVM_List_MaximumSet_Gen.json`, reduced.
    #[test]
    fn vms_read_the_rest_shape() {
        let page: Page<ScaleSetVm> = serde_json::from_value(json!({
            "value": [{
                "name": "vmss1_3",
                "id": "/subscriptions/0/resourceGroups/rg1/providers/Microsoft.Compute/virtualMachineScaleSets/vmss1/virtualMachines/3",
                "type": "Microsoft.Compute/virtualMachineScaleSets/virtualMachines",
                "instanceId": "3",
                "location": "westus",
                "properties": {
                    "latestModelApplied": false,
                    "vmId": "42af9fdf-b906-4ad7-9905-8316209ff619",
                    "hardwareProfile": {"vmSize": "Standard_D2s_v3"},
                    "storageProfile": {"imageReference": {
                        "publisher": "Canonical", "offer": "0001-com-ubuntu-server-jammy",
                        "sku": "22_04-lts-gen2", "version": "latest", "exactVersion": "22.04.202404090"
                    }},
                    "osProfile": {"computerName": "vmss1000003", "adminUsername": "azureuser"},
                    "provisioningState": "Succeeded"
                }
            }]
        }))
        .unwrap();
        let vm = &page.value[0];
        assert_eq!(vm.instance_id, "3");
        assert_eq!(vm.properties.latest_model_applied, Some(false));
        assert_eq!(
            vm.image().unwrap().exact_version.as_deref(),
            Some("22.04.202404090")
        );
        assert_eq!(page.next_link, None);
    }

    #[test]
    fn segments_are_found_case_insensitively() {
        let id = "/subscriptions/s/resourcegroups/RG1/providers/Microsoft.Compute/virtualMachineScaleSets/n";
        assert_eq!(segment_after(id, "resourceGroups"), Some("RG1"));
        assert_eq!(segment_after(id, "virtualMachineScaleSets"), Some("n"));
        assert_eq!(segment_after(id, "virtualMachines"), None);
    }
}
