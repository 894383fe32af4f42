//! The Google Cloud drift rules, as pure functions over what `instanceGroupManagers`
//! `aggregatedList` and `listManagedInstances` return ([`crate::provider::gcp_model`]). Group skip
//! rules first (excluded by name, GKE node pool, the group replacing instances itself: a
//! `PROACTIVE` update policy or a canary whose target is not reached; no template), then per
//! instance: the group acting on it (`currentAction` not `NONE`) or no template reported is a
//! skip, and an instance whose `version.instanceTemplate` is none of the templates its group
//! targets is drifted (reason `instance-template`), as kops judges it. Templates compare from
//! `projects/` on ([`template_key`]). Anything the data cannot answer is a skip (fail safe),
//! never a guess; only instances the group itself listed can be drifted. No I/O.

use std::collections::{BTreeMap, BTreeSet};

use rotor_core::DrainReason;

use crate::provider::gcp_model::{GroupInstance, InstanceRef, ManagedGroup, template_key};
use crate::verdict::{SkipReason, Verdict};

/// `updatePolicy.type` of a group that replaces its instances itself.
pub const PROACTIVE: &str = "PROACTIVE";

/// The prefix of the groups GKE creates for its node pools (`gke-{cluster}-{pool}-{hash}-grp`).
pub const GKE_GROUP_PREFIX: &str = "gke-";

/// `currentAction` of an instance the group is not acting on.
pub const NO_ACTION: &str = "NONE";

/// What the group rules read besides the group.
#[derive(Clone, Copy, Debug)]
pub struct GroupRules<'a> {
    /// Groups excluded by name (`name` or `{zone or region}/{name}`).
    pub excluded_names: &'a BTreeSet<String>,
    /// Judge GKE node pools too (by default GKE upgrades them itself).
    pub include_gke_managed: bool,
}

/// Why a whole group is not judged (excluded, GKE node pool, replacing instances itself, no
/// template), in that order; `None` when its instances are judged. Such a group's instances are
/// not listed at all.
pub fn group_skip(group: &ManagedGroup, rules: &GroupRules) -> Option<SkipReason> {
    let key = group.key();
    if rules.excluded_names.contains(&group.name) || rules.excluded_names.contains(&key) {
        return Some(SkipReason::GroupExcludedByName { group: key });
    }
    if !rules.include_gke_managed && group.name.starts_with(GKE_GROUP_PREFIX) {
        return Some(SkipReason::GkeManaged { group: key });
    }
    if group.update_policy_type.as_deref() == Some(PROACTIVE) {
        return Some(SkipReason::GroupUpdatingItself {
            group: key,
            why: "update policy PROACTIVE".into(),
        });
    }
    if group.versions.len() > 1 && group.version_target_reached != Some(true) {
        return Some(SkipReason::GroupUpdatingItself {
            group: key,
            why: format!(
                "{} versions, a canary whose target is not reached",
                group.versions.len()
            ),
        });
    }
    if target_templates(group).is_none() {
        return Some(SkipReason::InstanceTemplateMissing {
            subject: format!("group {key}"),
        });
    }
    None
}

/// The templates the group targets, from `projects/` on: its `versions[]` when set (each must
/// name a template), else its `instanceTemplate`; `None` when it names none.
pub fn target_templates(group: &ManagedGroup) -> Option<BTreeSet<&str>> {
    if group.versions.is_empty() {
        return group
            .instance_template
            .as_deref()
            .map(|t| BTreeSet::from([template_key(t)]));
    }
    group
        .versions
        .iter()
        .map(|v| v.instance_template.as_deref().map(template_key))
        .collect()
}

/// The last segment of a template URL, for details.
fn short(template: &str) -> &str {
    template.rsplit('/').next().unwrap_or(template)
}

/// One listed instance of a judged group.
pub fn instance_verdict(group: &ManagedGroup, instance: &GroupInstance) -> Verdict {
    if let Some(action) = instance
        .current_action
        .as_deref()
        .filter(|a| *a != NO_ACTION)
    {
        return Verdict::skip(SkipReason::InstanceActionInProgress {
            action: action.to_owned(),
        });
    }
    let Some(targets) = target_templates(group) else {
        return Verdict::skip(SkipReason::InstanceTemplateMissing {
            subject: format!("group {}", group.key()),
        });
    };
    let Some(template) = instance.version_template.as_deref() else {
        return Verdict::skip(SkipReason::InstanceTemplateMissing {
            subject: format!("instance {}", instance.instance),
        });
    };
    if targets.contains(template_key(template)) {
        return Verdict::Current;
    }
    let wanted: Vec<&str> = targets.iter().map(|t| short(t)).collect();
    Verdict::Drifted {
        reason: DrainReason::InstanceTemplate,
        detail: format!(
            "instance template {}, group {} targets {}",
            short(template),
            group.key(),
            wanted.join(", ")
        ),
    }
}

/// An instance's verdict, with its group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceVerdict {
    /// The group's key, `{zone or region}/{name}`.
    pub group: String,
    pub verdict: Verdict,
}

/// What one group's `listManagedInstances` gave: its instances, or the error that made it
/// skipped (the group vanished between the calls: 404).
pub type Listing = Result<Vec<GroupInstance>, String>;

/// Every listed instance of the judged groups, by instance. An instance URL that does not parse
/// is left out (its node is then skipped as in no group).
pub fn fleet_verdicts(
    groups: &[ManagedGroup],
    listings: &BTreeMap<String, Listing>,
) -> BTreeMap<InstanceRef, InstanceVerdict> {
    let mut fleet = BTreeMap::new();
    for group in groups {
        let Some(Ok(instances)) = listings.get(&group.key()) else {
            continue;
        };
        for instance in instances {
            let Some(at) = InstanceRef::from_url(&instance.instance) else {
                continue;
            };
            fleet.entry(at).or_insert_with(|| InstanceVerdict {
                group: group.key(),
                verdict: instance_verdict(group, instance),
            });
        }
    }
    fleet
}

/// The group an instance belongs to by its name alone: `{baseInstanceName}-...` in a zone of
/// the group's scope (the longest base wins). Used only to say why a node of an unlisted group
/// is skipped and to choose which groups to list; never to taint.
pub fn group_by_name<'g>(groups: &'g [ManagedGroup], at: &InstanceRef) -> Option<&'g ManagedGroup> {
    groups
        .iter()
        .filter(|g| g.scope.holds_zone(&at.zone))
        .filter(|g| {
            g.base_instance_name.as_deref().is_some_and(|base| {
                at.name
                    .strip_prefix(base)
                    .is_some_and(|rest| rest.starts_with('-'))
            })
        })
        .max_by_key(|g| g.base_instance_name.as_ref().map_or(0, String::len))
}

/// The judged groups worth a `listManagedInstances`: those a node's instance may belong to
/// (by [`group_by_name`]), and every group without a `baseInstanceName` (it cannot be told).
pub fn groups_to_list<'g>(
    groups: &'g [ManagedGroup],
    rules: &GroupRules,
    nodes: &[InstanceRef],
) -> Vec<&'g ManagedGroup> {
    let judged: Vec<&ManagedGroup> = groups
        .iter()
        .filter(|g| group_skip(g, rules).is_none())
        .collect();
    let named: BTreeSet<String> = nodes
        .iter()
        .filter_map(|at| group_by_name(groups, at))
        .map(ManagedGroup::key)
        .collect();
    judged
        .into_iter()
        .filter(|g| g.base_instance_name.is_none() || named.contains(&g.key()))
        .collect()
}

/// A node's verdict from its `spec.providerID`: the listed instance's verdict; else the skip of
/// the group its name belongs to (excluded, GKE, updating itself, listing failed); else not in
/// any group.
pub fn node_verdict(
    provider_id: Option<&str>,
    fleet: &BTreeMap<InstanceRef, InstanceVerdict>,
    groups: &[ManagedGroup],
    rules: &GroupRules,
    listings_failed: &BTreeMap<String, SkipReason>,
) -> (Option<InstanceRef>, Option<String>, Verdict) {
    let id = provider_id.unwrap_or_default();
    let Some(at) = InstanceRef::from_provider_id(id) else {
        return (
            None,
            None,
            Verdict::skip(SkipReason::GceProviderId {
                provider_id: id.to_owned(),
            }),
        );
    };
    if let Some(found) = fleet.get(&at) {
        return (Some(at), Some(found.group.clone()), found.verdict.clone());
    }
    if let Some(group) = group_by_name(groups, &at) {
        let key = group.key();
        let why = group_skip(group, rules).or_else(|| listings_failed.get(&key).cloned());
        if let Some(why) = why {
            return (Some(at), Some(key), Verdict::skip(why));
        }
    }
    let instance = at.to_string();
    (
        Some(at),
        None,
        Verdict::skip(SkipReason::InstanceNotInMigs { instance }),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::provider::gcp_model::GroupScope;

    const TEMPLATES: &str =
        "https://www.googleapis.com/compute/v1/projects/my-project/global/instanceTemplates";

    /// A group shaped like the API reference's `InstanceGroupManager` example.
    fn group(name: &str, extra: serde_json::Value) -> ManagedGroup {
        let mut value = json!({
            "name": name,
            "scope": {"zone": "us-central1-a"},
            "baseInstanceName": name,
            "instanceTemplate": format!("{TEMPLATES}/nodes-v2"),
            "versions": [{"name": "v2", "instanceTemplate": format!("{TEMPLATES}/nodes-v2")}],
            "updatePolicyType": "OPPORTUNISTIC",
            "isStable": true,
            "versionTargetReached": true,
            "targetSize": 3,
        });
        for (k, v) in extra.as_object().unwrap() {
            value[k] = v.clone();
        }
        serde_json::from_value(value).unwrap()
    }

    /// A managed instance shaped like the `listManagedInstances` example.
    fn instance(name: &str, template: Option<&str>, action: &str) -> GroupInstance {
        serde_json::from_value(json!({
            "instance": format!("https://www.googleapis.com/compute/v1/projects/my-project/zones/us-central1-a/instances/{name}"),
            "currentAction": action,
            "instanceStatus": "RUNNING",
            "versionTemplate": template.map(|t| format!("{TEMPLATES}/{t}")),
        }))
        .unwrap()
    }

    fn rules(excluded: &BTreeSet<String>, gke: bool) -> GroupRules<'_> {
        GroupRules {
            excluded_names: excluded,
            include_gke_managed: gke,
        }
    }

    #[test]
    fn an_instance_on_another_template_is_drifted() {
        let g = group("nodes", json!({}));
        assert_eq!(
            instance_verdict(&g, &instance("nodes-a", Some("nodes-v2"), "NONE")),
            Verdict::Current
        );
        assert_eq!(
            instance_verdict(&g, &instance("nodes-b", Some("nodes-v1"), "NONE")),
            Verdict::Drifted {
                reason: DrainReason::InstanceTemplate,
                detail: "instance template nodes-v1, group us-central1-a/nodes targets nodes-v2"
                    .into()
            }
        );
        // Another host for the same template is the same template.
        let mut other_host = instance("nodes-c", None, "NONE");
        other_host.version_template = Some(
            "https://compute.googleapis.com/compute/v1/projects/my-project/global/instanceTemplates/nodes-v2".into(),
        );
        assert_eq!(instance_verdict(&g, &other_host), Verdict::Current);
    }

    #[test]
    fn without_versions_the_instance_template_is_the_target() {
        let g = group("nodes", json!({"versions": []}));
        assert_eq!(
            instance_verdict(&g, &instance("nodes-a", Some("nodes-v2"), "NONE")),
            Verdict::Current
        );
        assert!(matches!(
            instance_verdict(&g, &instance("nodes-a", Some("nodes-v1"), "NONE")),
            Verdict::Drifted { .. }
        ));
        let none = group("nodes", json!({"versions": [], "instanceTemplate": null}));
        assert_eq!(
            group_skip(&none, &rules(&BTreeSet::new(), false))
                .unwrap()
                .slug(),
            "instance-template-missing"
        );
    }

    #[test]
    fn instances_being_acted_on_or_without_template_are_skipped() {
        let g = group("nodes", json!({}));
        for action in [
            "CREATING",
            "RECREATING",
            "DELETING",
            "REFRESHING",
            "VERIFYING",
        ] {
            assert_eq!(
                instance_verdict(&g, &instance("nodes-a", Some("nodes-v1"), action)),
                Verdict::skip(SkipReason::InstanceActionInProgress {
                    action: action.into()
                })
            );
        }
        assert_eq!(
            instance_verdict(&g, &instance("nodes-a", None, "NONE")),
            Verdict::skip(SkipReason::InstanceTemplateMissing {
                subject: "instance https://www.googleapis.com/compute/v1/projects/my-project/zones/us-central1-a/instances/nodes-a".into()
            })
        );
    }

    #[test]
    fn groups_the_cloud_replaces_itself_are_skipped() {
        let none = BTreeSet::new();
        let r = rules(&none, false);
        let proactive = group("nodes", json!({"updatePolicyType": "PROACTIVE"}));
        assert_eq!(
            group_skip(&proactive, &r),
            Some(SkipReason::GroupUpdatingItself {
                group: "us-central1-a/nodes".into(),
                why: "update policy PROACTIVE".into()
            })
        );
        let canary = json!({
            "versions": [
                {"name": "stable", "instanceTemplate": format!("{TEMPLATES}/nodes-v2")},
                {"name": "canary", "instanceTemplate": format!("{TEMPLATES}/nodes-v3"), "targetSize": {"fixed": 1}},
            ],
            "versionTargetReached": false,
        });
        let in_flight = group("nodes", canary.clone());
        assert_eq!(
            group_skip(&in_flight, &r).unwrap().slug(),
            "group-updating-itself"
        );
        // A canary that reached its target is judged: an instance on either version is current.
        let mut reached = canary;
        reached["versionTargetReached"] = json!(true);
        let reached = group("nodes", reached);
        assert_eq!(group_skip(&reached, &r), None);
        assert_eq!(
            instance_verdict(&reached, &instance("nodes-a", Some("nodes-v3"), "NONE")),
            Verdict::Current
        );
        assert!(matches!(
            instance_verdict(&reached, &instance("nodes-a", Some("nodes-v1"), "NONE")),
            Verdict::Drifted { .. }
        ));
        assert_eq!(group_skip(&group("nodes", json!({})), &r), None);
    }

    #[test]
    fn gke_pools_and_excluded_groups_are_skipped_unless_asked() {
        let none = BTreeSet::new();
        let gke = group("gke-prod-default-pool-1a2b3c4d-grp", json!({}));
        assert_eq!(
            group_skip(&gke, &rules(&none, false)),
            Some(SkipReason::GkeManaged {
                group: "us-central1-a/gke-prod-default-pool-1a2b3c4d-grp".into()
            })
        );
        assert_eq!(group_skip(&gke, &rules(&none, true)), None);
        let by_name = BTreeSet::from(["nodes".to_owned()]);
        let by_key = BTreeSet::from(["us-central1-a/nodes".to_owned()]);
        let g = group("nodes", json!({}));
        for excluded in [&by_name, &by_key] {
            assert_eq!(
                group_skip(&g, &rules(excluded, false)).unwrap().slug(),
                "group-excluded-by-name"
            );
        }
    }

    #[test]
    fn nodes_join_listed_instances_and_skipped_groups_by_name() {
        let none = BTreeSet::new();
        let r = rules(&none, false);
        let groups = vec![
            group("nodes", json!({})),
            group("nodes-big", json!({"updatePolicyType": "PROACTIVE"})),
            group(
                "regional",
                json!({"scope": {"region": "us-central1"}, "baseInstanceName": "reg"}),
            ),
        ];
        let listings = BTreeMap::from([
            (
                "us-central1-a/nodes".to_owned(),
                Ok(vec![
                    instance("nodes-a", Some("nodes-v1"), "NONE"),
                    instance("nodes-b", Some("nodes-v2"), "NONE"),
                ]),
            ),
            (
                "us-central1/regional".to_owned(),
                Err("404 notFound".to_owned()),
            ),
        ]);
        let fleet = fleet_verdicts(&groups, &listings);
        let failed = BTreeMap::from([(
            "us-central1/regional".to_owned(),
            SkipReason::LookupFailed {
                group: "us-central1/regional".into(),
                operation: "listManagedInstances",
                template: "us-central1/regional".into(),
                error: "404".into(),
            },
        )]);
        let judge = |id: &str| node_verdict(Some(id), &fleet, &groups, &r, &failed);
        let (_, group_a, a) = judge("gce://my-project/us-central1-a/nodes-a");
        assert_eq!(group_a.as_deref(), Some("us-central1-a/nodes"));
        assert!(matches!(a, Verdict::Drifted { .. }));
        assert_eq!(
            judge("gce://my-project/us-central1-a/nodes-b").2,
            Verdict::Current
        );
        let (_, g, big) = judge("gce://my-project/us-central1-a/nodes-big-x1");
        assert_eq!(g.as_deref(), Some("us-central1-a/nodes-big"));
        let Verdict::Skip { why } = big else {
            panic!("{big:?}")
        };
        assert_eq!(why.slug(), "group-updating-itself");
        let (_, _, reg) = judge("gce://my-project/us-central1-c/reg-9");
        assert!(matches!(
            reg,
            Verdict::Skip {
                why: SkipReason::LookupFailed { .. }
            }
        ));
        let (_, _, stray) = judge("gce://my-project/us-central1-a/other-1");
        assert!(matches!(
            stray,
            Verdict::Skip {
                why: SkipReason::InstanceNotInMigs { .. }
            }
        ));
        let (_, _, aws) = judge("aws:///us-east-1a/i-0abc");
        assert!(matches!(
            aws,
            Verdict::Skip {
                why: SkipReason::GceProviderId { .. }
            }
        ));
        // Which groups are worth listing: judged ones a node's name belongs to.
        let nodes: Vec<InstanceRef> = [
            "gce://my-project/us-central1-a/nodes-a",
            "gce://my-project/us-central1-a/nodes-big-x1",
        ]
        .iter()
        .filter_map(|id| InstanceRef::from_provider_id(id))
        .collect();
        let listed: Vec<String> = groups_to_list(&groups, &r, &nodes)
            .iter()
            .map(|g| g.key())
            .collect();
        assert_eq!(listed, ["us-central1-a/nodes"]);
        assert_eq!(
            GroupScope::Region("us-central1".into()),
            groups[2].scope.clone()
        );
    }
}
