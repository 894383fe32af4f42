//! The Describe calls, each paged to its end by the SDK's paginators (which also stop should a
//! service hand back the token it was given) and each page counted in [`ApiCalls`]; what they
//! return is converted at once ([`super::convert`]).

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_autoscaling as autoscaling;
use aws_sdk_ec2 as ec2;
use aws_sdk_ec2::config::http::HttpResponse;
use aws_sdk_ec2::error::SdkError;

use crate::api_calls::ApiCalls;
use crate::provider::aws::convert::{
    convert_group, convert_instance, convert_template, convert_template_version,
};
use crate::provider::aws::errors::{aws_error, concerns_only_the_request, confine, count};
use crate::provider::aws::{GroupDiscovery, op};
use crate::provider::aws_model::{
    AutoScalingGroup, InstanceDetails, LaunchTemplateInfo, TemplateVersionImage, index_templates,
};
use crate::provider::aws_rules::{FailedLookup, group_template_specs, resolve_group_version};
use crate::provider::seam::ProviderError;

/// Most group names per `DescribeAutoScalingGroups` call (the API's limit).
pub const NAMES_PER_CALL: usize = 100;
/// `MaxRecords` of `DescribeAutoScalingGroups` (the API's maximum).
pub const GROUPS_PAGE_SIZE: i32 = 100;
/// `MaxResults` of `DescribeInstances` (the API's maximum).
pub const INSTANCES_PAGE_SIZE: i32 = 1000;
/// The tag every instance launched by a group carries.
pub const GROUP_NAME_TAG: &str = "aws:autoscaling:groupName";

/// `DescribeAutoScalingGroups`, every page.
pub async fn describe_groups(
    client: &autoscaling::Client,
    discovery: &GroupDiscovery,
    calls: &mut ApiCalls,
) -> Result<Vec<AutoScalingGroup>, ProviderError> {
    let requests: Vec<autoscaling::operation::describe_auto_scaling_groups::builders::DescribeAutoScalingGroupsFluentBuilder> =
        match discovery {
            GroupDiscovery::ClusterTag(cluster) => {
                let filter = autoscaling::types::Filter::builder()
                    .name("tag-key")
                    .set_values(Some(GroupDiscovery::cluster_tag_keys(cluster).to_vec()))
                    .build();
                vec![client.describe_auto_scaling_groups().filters(filter)]
            }
            GroupDiscovery::Names(names) => names
                .chunks(NAMES_PER_CALL)
                .map(|chunk| {
                    client
                        .describe_auto_scaling_groups()
                        .set_auto_scaling_group_names(Some(chunk.to_vec()))
                })
                .collect(),
        };
    let mut groups = Vec::new();
    let mut seen = BTreeSet::new();
    for request in requests {
        let mut pages = request
            .max_records(GROUPS_PAGE_SIZE)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            count(calls, op::DESCRIBE_GROUPS);
            let page = page.map_err(|e| aws_error(op::DESCRIBE_GROUPS, e))?;
            for group in page.auto_scaling_groups() {
                let group = convert_group(group);
                if seen.insert(group.name.clone()) {
                    groups.push(group);
                }
            }
        }
    }
    Ok(groups)
}

/// The distinct template ids the groups name (group, mixed policy, overrides), and the names of
/// templates named without an id.
pub fn template_references(groups: &[AutoScalingGroup]) -> (Vec<String>, Vec<String>) {
    let mut ids = BTreeSet::new();
    let mut names = BTreeSet::new();
    for group in groups {
        for spec in group_template_specs(group) {
            match (&spec.id, &spec.name) {
                (Some(id), _) => {
                    ids.insert(id.clone());
                }
                (None, Some(name)) => {
                    names.insert(name.clone());
                }
                (None, None) => {}
            }
        }
    }
    (ids.into_iter().collect(), names.into_iter().collect())
}

/// `DescribeLaunchTemplates` for these ids (one call, pages followed), and for these names when
/// any group names a template without its id. One unknown id fails the whole call
/// (`InvalidLaunchTemplateId.NotFound`), so when a batch fails with an error about the request
/// each template is asked for alone, and only the ones that still fail are recorded in `failed`
/// (their groups are skipped). Throttling, server and connection errors fail the run.
pub async fn describe_templates(
    client: &ec2::Client,
    ids: &[String],
    names: &[String],
    failed: &mut BTreeMap<String, FailedLookup>,
    calls: &mut ApiCalls,
) -> Result<Vec<LaunchTemplateInfo>, ProviderError> {
    let mut templates = Vec::new();
    for (references, by_id) in [(ids, true), (names, false)] {
        if references.is_empty() {
            continue;
        }
        let error = match templates_by(client, references, by_id, calls).await {
            Ok(found) => {
                templates.extend(found);
                continue;
            }
            Err(error) => error,
        };
        // Nothing to narrow down: one template only, or an error about every request alike
        // (then `confine` fails the run).
        if references.len() == 1 || !concerns_only_the_request(&error) {
            confine(op::DESCRIBE_TEMPLATES, &references[0], error, failed)?;
            continue;
        }
        for reference in references {
            match templates_by(client, std::slice::from_ref(reference), by_id, calls).await {
                Ok(found) => templates.extend(found),
                Err(error) => confine(op::DESCRIBE_TEMPLATES, reference, error, failed)?,
            }
        }
    }
    templates.sort_by(|a, b| a.id.cmp(&b.id));
    templates.dedup_by(|a, b| a.id == b.id);
    Ok(templates)
}

type TemplatesError =
    SdkError<ec2::operation::describe_launch_templates::DescribeLaunchTemplatesError, HttpResponse>;

/// One `DescribeLaunchTemplates` request (by ids or by names), every page.
async fn templates_by(
    client: &ec2::Client,
    references: &[String],
    by_id: bool,
    calls: &mut ApiCalls,
) -> Result<Vec<LaunchTemplateInfo>, TemplatesError> {
    let request = if by_id {
        client
            .describe_launch_templates()
            .set_launch_template_ids(Some(references.to_vec()))
    } else {
        client
            .describe_launch_templates()
            .set_launch_template_names(Some(references.to_vec()))
    };
    let mut templates = Vec::new();
    let mut pages = request.into_paginator().send();
    while let Some(page) = pages.next().await {
        count(calls, op::DESCRIBE_TEMPLATES);
        templates.extend(page?.launch_templates().iter().filter_map(convert_template));
    }
    Ok(templates)
}

/// The resolved version of every template spec a group uses, by template id (what the image
/// rule compares against). Specs that do not resolve are left out (the rules skip them).
pub fn wanted_versions(
    groups: &[AutoScalingGroup],
    templates: &[LaunchTemplateInfo],
) -> BTreeMap<String, BTreeSet<i64>> {
    let index = index_templates(templates);
    let mut wanted: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    for group in groups {
        for spec in group_template_specs(group) {
            let Ok(version) = resolve_group_version(spec, &index) else {
                continue;
            };
            let id = match &spec.id {
                Some(id) => id.clone(),
                None => match templates
                    .iter()
                    .find(|t| Some(&t.name) == spec.name.as_ref())
                {
                    Some(t) => t.id.clone(),
                    None => continue,
                },
            };
            wanted.entry(id).or_default().insert(version);
        }
    }
    wanted
}

/// `DescribeLaunchTemplateVersions(ResolveAlias=true)`: one call per template, for all its
/// wanted versions. A template whose call fails with an error about the request (the template
/// was deleted meanwhile, an image alias does not resolve) is recorded in `failed` and its groups
/// are skipped; throttling, server and connection errors fail the run.
pub async fn describe_template_images(
    client: &ec2::Client,
    wanted: &BTreeMap<String, BTreeSet<i64>>,
    failed: &mut BTreeMap<String, FailedLookup>,
    calls: &mut ApiCalls,
) -> Result<Vec<TemplateVersionImage>, ProviderError> {
    let mut images = Vec::new();
    for (id, versions) in wanted {
        match template_images(client, id, versions, calls).await {
            Ok(found) => images.extend(found),
            Err(error) => confine(op::DESCRIBE_TEMPLATE_VERSIONS, id, error, failed)?,
        }
    }
    Ok(images)
}

type VersionsError = SdkError<
    ec2::operation::describe_launch_template_versions::DescribeLaunchTemplateVersionsError,
    HttpResponse,
>;

/// The images of one template's versions, every page.
async fn template_images(
    client: &ec2::Client,
    id: &str,
    versions: &BTreeSet<i64>,
    calls: &mut ApiCalls,
) -> Result<Vec<TemplateVersionImage>, VersionsError> {
    let mut images = Vec::new();
    let mut pages = client
        .describe_launch_template_versions()
        .launch_template_id(id)
        .set_versions(Some(versions.iter().map(i64::to_string).collect()))
        .resolve_alias(true)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        count(calls, op::DESCRIBE_TEMPLATE_VERSIONS);
        images.extend(
            page?
                .launch_template_versions()
                .iter()
                .filter_map(convert_template_version),
        );
    }
    Ok(images)
}

/// `DescribeInstances` of every pending or running group instance, every page.
pub async fn describe_instances(
    client: &ec2::Client,
    calls: &mut ApiCalls,
) -> Result<Vec<InstanceDetails>, ProviderError> {
    let filters = vec![
        ec2::types::Filter::builder()
            .name("tag-key")
            .values(GROUP_NAME_TAG)
            .build(),
        ec2::types::Filter::builder()
            .name("instance-state-name")
            .values("pending")
            .values("running")
            .build(),
    ];
    let mut details = Vec::new();
    let mut pages = client
        .describe_instances()
        .set_filters(Some(filters))
        .max_results(INSTANCES_PAGE_SIZE)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        count(calls, op::DESCRIBE_INSTANCES);
        let page = page.map_err(|e| aws_error(op::DESCRIBE_INSTANCES, e))?;
        for reservation in page.reservations() {
            details.extend(reservation.instances().iter().filter_map(convert_instance));
        }
    }
    Ok(details)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wanted_versions_resolve_aliases_per_template() {
        let groups: Vec<AutoScalingGroup> = serde_json::from_value(serde_json::json!([
            {"AutoScalingGroupName": "a", "LaunchTemplate": {"LaunchTemplateId": "lt-1", "Version": "$Latest"}},
            {"AutoScalingGroupName": "b", "LaunchTemplate": {"LaunchTemplateId": "lt-1"}},
            {"AutoScalingGroupName": "c", "LaunchTemplate": {"LaunchTemplateName": "named", "Version": "2"}},
            {"AutoScalingGroupName": "d", "LaunchTemplate": {"LaunchTemplateId": "lt-gone"}},
        ]))
        .unwrap();
        let templates = vec![
            LaunchTemplateInfo {
                id: "lt-1".into(),
                name: "one".into(),
                latest_version: 5,
                default_version: 4,
            },
            LaunchTemplateInfo {
                id: "lt-2".into(),
                name: "named".into(),
                latest_version: 3,
                default_version: 3,
            },
        ];
        let wanted = wanted_versions(&groups, &templates);
        assert_eq!(
            wanted,
            BTreeMap::from([
                ("lt-1".to_owned(), BTreeSet::from([4, 5])),
                ("lt-2".to_owned(), BTreeSet::from([2])),
            ])
        );
        let (ids, names) = template_references(&groups);
        assert_eq!(ids, ["lt-1", "lt-gone"]);
        assert_eq!(names, ["named"]);
    }
}
