//! Google Cloud-shaped plain data: the parts of the Compute Engine API's
//! `instanceGroupManagers.aggregatedList` and `listManagedInstances` answers that the drift rules
//! read, and the resource names they carry. Field names are the API's, Rust-cased; the serde form
//! is the API's JSON (camelCase), so fixtures can be pasted from the published examples. No
//! behaviour lives here beyond parsing names.

use serde::{Deserialize, Serialize};

/// Where a managed instance group lives: a zonal group in a zone, a regional group in a region.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum GroupScope {
    /// `zones/{zone}`.
    Zone(String),
    /// `regions/{region}`.
    Region(String),
}

impl GroupScope {
    /// The scope from an aggregated list key (`zones/us-central1-a`, `regions/us-central1`).
    pub fn from_key(key: &str) -> Option<GroupScope> {
        match key.split_once('/')? {
            ("zones", zone) if !zone.is_empty() => Some(GroupScope::Zone(zone.to_owned())),
            ("regions", region) if !region.is_empty() => {
                Some(GroupScope::Region(region.to_owned()))
            }
            _ => None,
        }
    }

    /// The zone or region's name.
    pub fn name(&self) -> &str {
        match self {
            GroupScope::Zone(name) | GroupScope::Region(name) => name,
        }
    }

    /// Whether an instance in `zone` can belong to a group of this scope (a regional group's
    /// zones are `{region}-{letter}`).
    pub fn holds_zone(&self, zone: &str) -> bool {
        match self {
            GroupScope::Zone(own) => own == zone,
            GroupScope::Region(region) => zone
                .strip_prefix(region.as_str())
                .is_some_and(|rest| rest.starts_with('-')),
        }
    }
}

/// One managed instance group, as in `InstanceGroupManager`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedGroup {
    /// `name`.
    pub name: String,
    /// From the aggregated list's key (or `zone` / `region`).
    pub scope: GroupScope,
    /// `baseInstanceName`: the group's instances are named `{baseInstanceName}-{suffix}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_instance_name: Option<String>,
    /// `instanceTemplate`: the template of new instances when `versions[]` is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_template: Option<String>,
    /// `versions[]`: when set, the templates the group targets (more than one: a canary).
    #[serde(default)]
    pub versions: Vec<GroupVersion>,
    /// `updatePolicy.type`: `PROACTIVE` (the group replaces instances itself) or
    /// `OPPORTUNISTIC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_policy_type: Option<String>,
    /// `status.isStable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_stable: Option<bool>,
    /// `status.versionTarget.isReached`: every instance runs its target version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_target_reached: Option<bool>,
    /// `listManagedInstancesResults`: `PAGELESS` (the default) or `PAGINATED`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_managed_instances_results: Option<String>,
    /// `targetSize`.
    #[serde(default)]
    pub target_size: i32,
}

impl ManagedGroup {
    /// How the group is named in the output, the budgets and `--exclude-group`:
    /// `{zone or region}/{name}` (names are unique only within a zone or region).
    pub fn key(&self) -> String {
        format!("{}/{}", self.scope.name(), self.name)
    }
}

/// One of a group's `versions[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupVersion {
    /// `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `instanceTemplate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_template: Option<String>,
}

/// One instance of a group, as in `listManagedInstances.managedInstances[]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupInstance {
    /// `instance`: the instance's URL,
    /// `https://www.googleapis.com/compute/v1/projects/P/zones/Z/instances/N`.
    pub instance: String,
    /// `currentAction`: `NONE` when the group is doing nothing to it, else `CREATING`,
    /// `RECREATING`, `DELETING`, `REFRESHING`, `RESTARTING`, `VERIFYING`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_action: Option<String>,
    /// `instanceStatus`: `RUNNING`, `STOPPING`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_status: Option<String>,
    /// `version.instanceTemplate`: the template the instance was created from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_template: Option<String>,
}

/// A Compute Engine instance by project, zone and name: what a node's `providerID`
/// (`gce://PROJECT/ZONE/NAME`) and an instance URL (`.../projects/P/zones/Z/instances/N`) both
/// name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceRef {
    pub project: String,
    pub zone: String,
    pub name: String,
}

impl InstanceRef {
    /// From `gce://PROJECT/ZONE/NAME`; `None` for anything else.
    pub fn from_provider_id(provider_id: &str) -> Option<InstanceRef> {
        let rest = provider_id.strip_prefix("gce://")?;
        let mut parts = rest.split('/');
        let (project, zone, name) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || [project, zone, name].iter().any(|p| p.is_empty()) {
            return None;
        }
        Some(InstanceRef {
            project: project.to_owned(),
            zone: zone.to_owned(),
            name: name.to_owned(),
        })
    }

    /// From an instance URL or relative name: `projects/P/zones/Z/instances/N` after any host
    /// and API prefix; `None` for anything else.
    pub fn from_url(url: &str) -> Option<InstanceRef> {
        let at = url.find("projects/")?;
        let mut parts = url[at..].split('/');
        match (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) {
            (
                Some("projects"),
                Some(p),
                Some("zones"),
                Some(z),
                Some("instances"),
                Some(n),
                None,
            ) if !p.is_empty() && !z.is_empty() && !n.is_empty() => Some(InstanceRef {
                project: p.to_owned(),
                zone: z.to_owned(),
                name: n.to_owned(),
            }),
            _ => None,
        }
    }
}

impl std::fmt::Display for InstanceRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "projects/{}/zones/{}/instances/{}",
            self.project, self.zone, self.name
        )
    }
}

/// A template URL from `projects/` on, so that URLs with different hosts or API prefixes
/// (`https://www.googleapis.com/compute/v1/`, `https://compute.googleapis.com/compute/v1/`, none)
/// compare equal; global (`projects/P/global/instanceTemplates/T`) and regional
/// (`projects/P/regions/R/instanceTemplates/T`) templates keep their scope.
pub fn template_key(url: &str) -> &str {
    url.find("projects/").map_or(url, |at| &url[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_from_aggregated_keys() {
        assert_eq!(
            GroupScope::from_key("zones/us-central1-a"),
            Some(GroupScope::Zone("us-central1-a".into()))
        );
        assert_eq!(
            GroupScope::from_key("regions/europe-west1"),
            Some(GroupScope::Region("europe-west1".into()))
        );
        assert_eq!(GroupScope::from_key("global"), None);
        assert_eq!(GroupScope::from_key("zones/"), None);
        let region = GroupScope::Region("us-central1".into());
        assert!(region.holds_zone("us-central1-b"));
        assert!(!region.holds_zone("us-central11-b"));
        assert!(GroupScope::Zone("us-central1-a".into()).holds_zone("us-central1-a"));
    }

    #[test]
    fn instances_from_provider_ids_and_urls() {
        let want = InstanceRef {
            project: "my-project".into(),
            zone: "us-central1-a".into(),
            name: "nodes-abcd".into(),
        };
        assert_eq!(
            InstanceRef::from_provider_id("gce://my-project/us-central1-a/nodes-abcd"),
            Some(want.clone())
        );
        assert_eq!(
            InstanceRef::from_url(
                "https://www.googleapis.com/compute/v1/projects/my-project/zones/us-central1-a/instances/nodes-abcd"
            ),
            Some(want.clone())
        );
        assert_eq!(
            InstanceRef::from_url("projects/my-project/zones/us-central1-a/instances/nodes-abcd"),
            Some(want.clone())
        );
        assert_eq!(
            want.to_string(),
            "projects/my-project/zones/us-central1-a/instances/nodes-abcd"
        );
        for bad in [
            "aws:///us-east-1a/i-0abc",
            "gce://p/z",
            "gce://p/z/n/extra",
            "gce:///z/n",
            "",
        ] {
            assert_eq!(InstanceRef::from_provider_id(bad), None, "{bad}");
        }
        assert_eq!(
            InstanceRef::from_url("projects/p/global/instanceTemplates/t"),
            None
        );
    }

    #[test]
    fn template_keys_ignore_the_host() {
        assert_eq!(
            template_key(
                "https://www.googleapis.com/compute/v1/projects/p/global/instanceTemplates/t-2"
            ),
            template_key(
                "https://compute.googleapis.com/compute/v1/projects/p/global/instanceTemplates/t-2"
            )
        );
        assert_eq!(
            template_key("projects/p/regions/r/instanceTemplates/t"),
            "projects/p/regions/r/instanceTemplates/t"
        );
        assert_eq!(template_key("t"), "t");
    }
}
