//! Node `spec.providerID` parsing for AWS: turns `aws:///<az>/<instance-id>` (or a bare instance ID)
//! into an [`InstanceId`], and rejects everything that does not name an EC2 instance (other clouds,
//! Fargate, malformed IDs) with an error saying what was found and what was expected. Pure string
//! handling; no I/O.

use std::fmt;
use std::str::FromStr;

/// The shape this module accepts, quoted in every error message.
const EXPECTED: &str = "expected aws:///<availability-zone>/<instance-id> or a bare instance ID such as i-0123456789abcdef0";

/// An EC2 instance ID: `i-` followed by one or more lowercase hexadecimal digits.
///
/// Only [`parse_aws_provider_id`] (or [`FromStr`], which calls it) constructs one, so holding an
/// `InstanceId` means the text has been validated.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceId(String);

impl InstanceId {
    /// The instance ID as text, e.g. `i-0123456789abcdef0`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The instance ID as an owned string.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for InstanceId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl FromStr for InstanceId {
    type Err = ProviderIdError;

    /// Same as [`parse_aws_provider_id`]: accepts a provider ID or a bare instance ID.
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        parse_aws_provider_id(value)
    }
}

/// Why a provider ID does not name an EC2 instance. Every variant carries the offending input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderIdError {
    /// The provider ID is empty (the node has not been initialised by a cloud controller yet, or is
    /// not a cloud node).
    #[error(
        "empty providerID: {EXPECTED}; the node may not be initialised by the AWS cloud controller yet"
    )]
    Empty,

    /// The provider ID belongs to another cloud or scheme.
    #[error("providerID {provider_id:?} uses scheme {scheme:?}, not aws: {EXPECTED}")]
    UnsupportedScheme {
        /// The whole input.
        provider_id: String,
        /// The part before `://`.
        scheme: String,
    },

    /// `aws://` is followed by a host, where AWS provider IDs have an empty host (three slashes).
    #[error(
        "providerID {provider_id:?} has host {host:?} after aws://, but AWS provider IDs have an empty host: {EXPECTED}"
    )]
    UnexpectedHost {
        /// The whole input.
        provider_id: String,
        /// The non-empty host found.
        host: String,
    },

    /// The path is empty or ends with `/`, so there is no instance ID segment.
    #[error(
        "providerID {provider_id:?} has no instance ID as its last path segment (empty path or trailing '/'): {EXPECTED}"
    )]
    MissingInstanceId {
        /// The whole input.
        provider_id: String,
    },

    /// An EKS Fargate node: it has no EC2 instance, so it cannot be rotated through an Auto
    /// Scaling group.
    #[error(
        "providerID {provider_id:?} is an EKS Fargate node, which has no EC2 instance; rotor cannot rotate Fargate nodes (exclude them from selection)"
    )]
    Fargate {
        /// The whole input.
        provider_id: String,
    },

    /// The last segment (or the bare input) is not `i-` followed by lowercase hexadecimal digits.
    #[error(
        "providerID {provider_id:?}: {candidate:?} is not an EC2 instance ID (i- followed by lowercase hexadecimal digits): {EXPECTED}"
    )]
    InvalidInstanceId {
        /// The whole input.
        provider_id: String,
        /// The segment that was checked.
        candidate: String,
    },
}

/// Extracts the EC2 instance ID from a node's `spec.providerID`.
///
/// Accepted shapes:
/// - `aws:///<availability-zone>/<instance-id>`, e.g. `aws:///us-east-1a/i-0123456789abcdef0`
///   (what the AWS cloud controller writes);
/// - `aws:////<instance-id>` (empty zone) and `aws:///<instance-id>`;
/// - a bare `<instance-id>`.
///
/// With the `aws://` form, the host must be empty and the instance ID is the last path segment.
/// The instance ID must be `i-` followed by one or more lowercase hexadecimal digits. Everything
/// else is rejected: empty input, other schemes (`gce://`, `azure://`, `kind://`), a non-empty host,
/// a trailing `/`, Fargate nodes (`aws:///us-east-1a/fargate-ip-...`), uppercase hex, whitespace.
pub fn parse_aws_provider_id(provider_id: &str) -> Result<InstanceId, ProviderIdError> {
    if provider_id.is_empty() {
        return Err(ProviderIdError::Empty);
    }

    let candidate = match provider_id.split_once("://") {
        None => provider_id,
        Some((scheme, rest)) => {
            if scheme != "aws" {
                return Err(ProviderIdError::UnsupportedScheme {
                    provider_id: provider_id.to_owned(),
                    scheme: scheme.to_owned(),
                });
            }
            let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
            if !host.is_empty() {
                return Err(ProviderIdError::UnexpectedHost {
                    provider_id: provider_id.to_owned(),
                    host: host.to_owned(),
                });
            }
            // `rsplit` always yields at least one item; an empty last segment means an empty path
            // or a trailing slash.
            let last = path.rsplit('/').next().unwrap_or_default();
            if last.is_empty() {
                return Err(ProviderIdError::MissingInstanceId {
                    provider_id: provider_id.to_owned(),
                });
            }
            if last.starts_with("fargate-") {
                return Err(ProviderIdError::Fargate {
                    provider_id: provider_id.to_owned(),
                });
            }
            last
        }
    };

    if is_instance_id(candidate) {
        Ok(InstanceId(candidate.to_owned()))
    } else {
        Err(ProviderIdError::InvalidInstanceId {
            provider_id: provider_id.to_owned(),
            candidate: candidate.to_owned(),
        })
    }
}

/// `^i-[0-9a-f]+$`, by hand.
fn is_instance_id(text: &str) -> bool {
    text.strip_prefix("i-").is_some_and(|hex| {
        !hex.is_empty()
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(input: &str) -> String {
        parse_aws_provider_id(input)
            .unwrap_or_else(|e| panic!("{input:?} should parse: {e}"))
            .into_string()
    }

    fn err(input: &str) -> ProviderIdError {
        match parse_aws_provider_id(input) {
            Ok(id) => panic!("{input:?} should be rejected, got {id}"),
            Err(e) => e,
        }
    }

    #[test]
    fn accepts_real_aws_shapes() {
        assert_eq!(
            ok("aws:///us-east-1a/i-0123456789abcdef0"),
            "i-0123456789abcdef0"
        );
        assert_eq!(ok("aws:///eu-west-2c/i-0abc"), "i-0abc");
        assert_eq!(ok("aws:////i-0123456789abcdef0"), "i-0123456789abcdef0");
        assert_eq!(ok("aws:///i-0123456789abcdef0"), "i-0123456789abcdef0");
        // Old 8-digit instance IDs.
        assert_eq!(ok("aws:///us-west-2b/i-12345678"), "i-12345678");
        assert_eq!(ok("i-0123456789abcdef0"), "i-0123456789abcdef0");
        assert_eq!(ok("i-0"), "i-0");
    }

    #[test]
    fn instance_id_accessors() {
        let id: InstanceId = "aws:///us-east-1a/i-0abc".parse().unwrap();
        assert_eq!(id.as_str(), "i-0abc");
        assert_eq!(id.to_string(), "i-0abc");
        assert_eq!(AsRef::<str>::as_ref(&id), "i-0abc");
    }

    #[test]
    fn rejects_empty() {
        assert_eq!(err(""), ProviderIdError::Empty);
        let message = ProviderIdError::Empty.to_string();
        assert!(
            message.contains("aws:///<availability-zone>/<instance-id>"),
            "{message}"
        );
    }

    #[test]
    fn rejects_other_schemes() {
        for (input, scheme) in [
            ("gce://my-project/us-central1-a/my-node", "gce"),
            ("azure:///subscriptions/x/resourceGroups/y", "azure"),
            ("kind://docker/kind/kind-worker", "kind"),
            ("AWS:///us-east-1a/i-0abc", "AWS"),
            ("://i-0abc", ""),
        ] {
            assert_eq!(
                err(input),
                ProviderIdError::UnsupportedScheme {
                    provider_id: input.into(),
                    scheme: scheme.into()
                },
                "{input}"
            );
        }
        let message = err("gce://p/z/n").to_string();
        assert!(message.contains("\"gce\""), "{message}");
        assert!(message.contains("expected aws:///"), "{message}");
    }

    #[test]
    fn rejects_non_empty_host() {
        assert_eq!(
            err("aws://us-east-1a/i-0abc"),
            ProviderIdError::UnexpectedHost {
                provider_id: "aws://us-east-1a/i-0abc".into(),
                host: "us-east-1a".into()
            }
        );
        assert!(matches!(
            err("aws://i-0abc"),
            ProviderIdError::UnexpectedHost { host, .. } if host == "i-0abc"
        ));
    }

    #[test]
    fn rejects_missing_instance_segment() {
        for input in [
            "aws://",
            "aws:///",
            "aws:////",
            "aws:///us-east-1a/",
            "aws:///us-east-1a/i-0abc/",
        ] {
            assert_eq!(
                err(input),
                ProviderIdError::MissingInstanceId {
                    provider_id: input.into()
                },
                "{input}"
            );
        }
        assert!(
            err("aws:///us-east-1a/i-0abc/")
                .to_string()
                .contains("trailing '/'")
        );
    }

    #[test]
    fn rejects_fargate() {
        let input = "aws:///us-east-1a/fargate-ip-192-168-10-20.ec2.internal";
        assert_eq!(
            err(input),
            ProviderIdError::Fargate {
                provider_id: input.into()
            }
        );
        assert!(err(input).to_string().contains("Fargate"));
    }

    #[test]
    fn rejects_malformed_instance_ids() {
        for (input, candidate) in [
            ("aws:///us-east-1a/i-0ABCDEF", "i-0ABCDEF"),
            ("i-0ABC", "i-0ABC"),
            ("I-0abc", "I-0abc"),
            ("i-", "i-"),
            ("i-0abg", "i-0abg"),
            ("i_0abc", "i_0abc"),
            (" i-0abc", " i-0abc"),
            ("i-0abc ", "i-0abc "),
            ("i-0abc\n", "i-0abc\n"),
            (
                "aws:///us-east-1a/ip-10-0-0-1.ec2.internal",
                "ip-10-0-0-1.ec2.internal",
            ),
            ("aws:///us-east-1a/mi-0abc", "mi-0abc"),
            ("us-east-1a/i-0abc", "us-east-1a/i-0abc"),
            ("0abc", "0abc"),
        ] {
            assert_eq!(
                err(input),
                ProviderIdError::InvalidInstanceId {
                    provider_id: input.into(),
                    candidate: candidate.into()
                },
                "{input:?}"
            );
        }
        let message = err("aws:///us-east-1a/i-0ABC").to_string();
        assert!(message.contains("\"i-0ABC\""), "{message}");
        assert!(message.contains("lowercase hexadecimal"), "{message}");
    }
}
