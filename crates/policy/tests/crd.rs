//! The CRD files committed in `deploy/` and the Helm chart are exactly what the types generate.
//! `ROTOR_WRITE_CRDS=1` rewrites them (after a change to `src/resource.rs`).

use std::path::PathBuf;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn committed_crds_equal_the_generated_one() {
    let write = std::env::var_os("ROTOR_WRITE_CRDS").is_some();
    for dir in rotor_policy::CRD_DIRS {
        for (name, generated) in rotor_policy::crds() {
            let file = format!("{dir}/{name}");
            let path = workspace_root().join(&file);
            if write {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &generated).unwrap();
            }
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                committed == generated,
                "{file} differs from the CRD generated from crates/policy/src/resource.rs; \
             regenerate it with `ROTOR_WRITE_CRDS=1 cargo test -p rotor-policy --test crd`"
            );
        }
    }
}

#[test]
fn the_crd_carries_the_rules_the_api_server_enforces() {
    let yaml: String = rotor_policy::crds().into_iter().map(|(_, y)| y).collect();
    for rule in [
        "has(self.schedule) == has(self.duration)",
        "duration(self.forceAfter) < duration(self.timeout)",
        "^((100|[0-9]{1,2})%|[0-9]+)$",
        "x-kubernetes-validations",
        "- In\n",
        "scope: Cluster",
        "subresources:",
        "order applies only to behavior Drain",
        "- WaitCompleted\n",
    ] {
        assert!(yaml.contains(rule), "the CRD lacks {rule:?}:\n{yaml}");
    }
}
