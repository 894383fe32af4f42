//! The Dockerfile and `tools/image.sh` describe one image: the same Rust, the same `cargo
//! build`, the same build-stage output, the same files in the same order
//! (`tools/image-files.txt`), the same config. Docker is not on our build machines, so the
//! Dockerfile is only ever read; `tools/image.sh` builds the image, and
//! tests/tests/real_image.rs runs what it built. The SBOMs the image carries are read from the
//! built image here (without root: from its layer, nothing unpacked).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use rotor_e2e::image::{
    CopyLine, Instruction, OciImage, built_image, dockerfile, dockerfile_config, dockerfile_stages,
    image_files,
};
use rotor_e2e::{binary, workspace_root};
use serde_json::{Value, json};

fn image_sh() -> String {
    std::fs::read_to_string(workspace_root().join("tools/image.sh")).expect("tools/image.sh")
}

fn stages() -> Vec<Vec<Instruction>> {
    let stages = dockerfile_stages(&dockerfile());
    assert_eq!(
        stages.len(),
        2,
        "the Dockerfile has a build stage and the final stage"
    );
    stages
}

/// The `&&`-separated commands of the build stage's RUN instructions.
fn build_stage_commands() -> Vec<String> {
    stages()[0]
        .iter()
        .filter(|i| i.keyword == "RUN")
        .flat_map(|i| {
            i.args
                .split("&&")
                .map(|c| {
                    // `--mount=...` options of RUN come before the first command.
                    let words: Vec<&str> = c
                        .split_whitespace()
                        .skip_while(|w| w.starts_with("--mount="))
                        .collect();
                    words.join(" ")
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The version in a crate's Cargo.toml.
fn crate_version(dir: &str) -> String {
    let text = std::fs::read_to_string(workspace_root().join(dir).join("Cargo.toml"))
        .expect("a crate's Cargo.toml");
    text.lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no version in {dir}/Cargo.toml"))
        .to_string()
}

#[test]
fn the_dockerfile_builds_with_the_rust_the_workspace_is_built_with() {
    let from = &stages()[0][0];
    let rustc = Command::new("rustc")
        .arg("--version")
        .output()
        .expect("run rustc --version");
    let rustc = String::from_utf8_lossy(&rustc.stdout).to_string();
    // "rustc 1.95.0 (hash date)" -> "1.95"
    let release = rustc
        .split_whitespace()
        .nth(1)
        .and_then(|v| {
            let mut parts = v.split('.');
            Some(format!("{}.{}", parts.next()?, parts.next()?))
        })
        .unwrap_or_else(|| panic!("cannot read `rustc --version`: {rustc}"));
    // No rust-toolchain file pins the compiler: the Dockerfile follows the rustc that builds
    // and tests the workspace, and Debian bookworm, which tools/image.sh copies the libraries
    // from.
    assert_eq!(
        from.args,
        format!("rust:{release}-bookworm AS build"),
        "the Dockerfile's build stage must be the Rust that builds the workspace ({rustc}) on \
         Debian bookworm"
    );
}

#[test]
fn the_dockerfile_and_image_sh_run_the_same_cargo_build_and_stage_the_same_out() {
    let docker = build_stage_commands();
    let script = image_sh();
    let cargo = |commands: &[String]| -> Vec<String> {
        commands
            .iter()
            .filter_map(|c| c.find("cargo build").map(|at| c[at..].to_string()))
            .collect()
    };
    let script_lines: Vec<String> = script
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.starts_with('#'))
        .collect();
    let docker_cargo = cargo(&docker);
    assert_eq!(
        docker_cargo.len(),
        1,
        "one cargo build in the Dockerfile: {docker:?}"
    );
    assert_eq!(
        cargo(&script_lines),
        docker_cargo,
        "tools/image.sh must run the Dockerfile's cargo build"
    );

    // What the build stage puts in /out, the source of the final stage's `/out/` copies:
    // image.sh writes it to "$stage" from "$target" (its target directory).
    let installs = |commands: &[String]| -> Vec<String> {
        commands
            .iter()
            .filter(|c| c.starts_with("install "))
            .map(|c| {
                c.replace("\"$target/", "target/")
                    .replace("\"$stage/", "/out/")
                    .replace('"', "")
            })
            .collect()
    };
    let docker_installs = installs(&docker);
    assert!(!docker_installs.is_empty(), "{docker:?}");
    assert_eq!(
        installs(&script_lines),
        docker_installs,
        "tools/image.sh must make the build stage's /out as the Dockerfile's RUN does"
    );
    // And the SBOMs, by the same script with the same arguments (image.sh runs it as
    // "$here/sbom.sh", $here being tools/).
    let sboms = |commands: &[String]| -> Vec<String> {
        commands
            .iter()
            .map(|c| {
                c.replace("\"$here/", "tools/")
                    .replace("\"$stage/", "/out/")
                    .replace('"', "")
            })
            .filter(|c| c.starts_with("tools/sbom.sh "))
            .collect()
    };
    assert_eq!(
        sboms(&docker),
        ["tools/sbom.sh /out/sbom rotor-drainer rotor-selector"],
        "the Dockerfile's RUN writes the binaries' SBOMs into /out/sbom"
    );
    assert_eq!(
        sboms(&script_lines),
        sboms(&docker),
        "tools/image.sh must write the SBOMs as the Dockerfile's RUN does"
    );
    // Every binary cargo builds is installed.
    for package in docker_cargo[0].split(" -p ").skip(1) {
        let package = package.split_whitespace().next().unwrap_or_default();
        assert!(
            docker_installs
                .iter()
                .any(|i| i.contains(&format!("target/release/{package} /out/"))),
            "the Dockerfile builds {package} but installs no target/release/{package}"
        );
    }
}

#[test]
fn the_dockerfiles_final_stage_copies_exactly_tools_image_files_txt_in_order() {
    let stages = stages();
    let last = &stages[1];
    assert_eq!(
        last[0].args, "scratch",
        "the final stage starts from scratch: everything in the image is copied by a listed line"
    );
    let copies: Vec<CopyLine> = last
        .iter()
        .filter(|i| i.keyword == "COPY" || i.keyword == "ADD")
        .map(|i| {
            assert_eq!(i.keyword, "COPY", "ADD {}: use COPY", i.args);
            rotor_e2e::image::parse_copy(&i.args).unwrap_or_else(|e| panic!("Dockerfile: {e}"))
        })
        .collect();
    let listed = rotor_e2e::image::image_files();
    let lines = |c: &[CopyLine]| c.iter().map(CopyLine::to_string).collect::<Vec<_>>();
    assert_eq!(
        lines(&copies),
        lines(&listed),
        "the Dockerfile's final stage (left) must COPY the lines of tools/image-files.txt \
         (right), in order: tools/image.sh lays the image out from that list"
    );
    // No RUN: the stage has no shell.
    for i in last {
        assert!(
            ["FROM", "COPY", "ENV", "LABEL", "WORKDIR", "USER", "CMD"]
                .contains(&i.keyword.as_str()),
            "{} {}: the final stage has no shell to run anything",
            i.keyword,
            i.args
        );
    }

    // Each source exists: in the repository, or in the build stage's /out as its RUN makes it.
    // What `install` makes (its last argument) and tools/sbom.sh (its first).
    let outs: Vec<String> = build_stage_commands()
        .iter()
        .filter_map(|c| {
            if c.starts_with("install ") {
                c.split_whitespace().last().map(String::from)
            } else {
                c.strip_prefix("tools/sbom.sh ")
                    .and_then(|rest| rest.split_whitespace().next())
                    .map(String::from)
            }
        })
        .collect();
    for c in &listed {
        if !c.from_build {
            assert!(
                workspace_root().join(&c.src).is_file(),
                "{c}: no file {} in the repository",
                c.src
            );
        } else if c.src.starts_with("/out/") {
            let src = c.src.trim_end_matches('/');
            assert!(
                outs.iter()
                    .any(|o| o == src || o.starts_with(&format!("{src}/"))),
                "{c}: the build stage's RUN makes no {src} (it installs {outs:?})"
            );
        } else {
            assert!(
                c.src.starts_with('/') && c.src == c.dest,
                "{c}: a Debian file of the build stage is copied to the same path (the loader \
                 and the programs look for it there)"
            );
        }
    }
}

#[test]
fn every_library_the_binaries_load_is_in_the_list() {
    let listed: BTreeSet<String> = rotor_e2e::image::image_files()
        .into_iter()
        .map(|c| c.dest)
        .collect();
    for name in ["rotor-drainer", "rotor-selector"] {
        let out = Command::new("ldd")
            .arg(binary(name))
            .output()
            .expect("run ldd");
        assert!(out.status.success(), "ldd {name} failed");
        let text = String::from_utf8_lossy(&out.stdout);
        let libraries: Vec<&str> = text
            .split_whitespace()
            .filter(|w| w.starts_with('/'))
            .collect();
        assert!(!libraries.is_empty(), "ldd {name}: {text}");
        for lib in libraries {
            assert!(
                listed.contains(lib),
                "{name} loads {lib} (ldd), which tools/image-files.txt and the Dockerfile do not \
                 copy:\n{text}"
            );
        }
    }
}

/// image.sh's `config=(...)` flags to `crane mutate`, as the OCI config's `config` object.
fn image_sh_config(script: &str, version: &str) -> Value {
    let body: Vec<&str> = script
        .lines()
        .skip_while(|l| l.trim() != "config=(")
        .skip(1)
        .take_while(|l| l.trim() != ")")
        .collect();
    assert!(!body.is_empty(), "tools/image.sh has no `config=(` array");
    let mut config = json!({"Env": [], "Labels": {}});
    for line in body {
        let line = line.trim().replace('"', "").replace("$version", version);
        let (flag, value) = line.split_once(' ').unwrap_or((&line, ""));
        match flag {
            "--user" => config["User"] = json!(value),
            "--workdir" => config["WorkingDir"] = json!(value),
            "--cmd" => config["Cmd"] = json!(value.split(',').collect::<Vec<_>>()),
            "--env" => config["Env"].as_array_mut().unwrap().push(json!(value)),
            "--label" => {
                let (k, v) = value.split_once('=').expect("--label k=v");
                config["Labels"][k] = json!(v);
            }
            "--set-platform" => assert_eq!(value, "linux/amd64"),
            other => panic!("tools/image.sh's config has {other}, which this test does not know"),
        }
    }
    config
}

#[test]
fn the_image_config_and_version_label_are_the_same_in_both() {
    let version = crate_version("crates/drainer");
    assert_eq!(
        crate_version("crates/selector"),
        version,
        "one image holds both binaries: give them one version"
    );
    let stages = stages();
    let docker = dockerfile_config(&stages[1]).unwrap_or_else(|e| panic!("Dockerfile: {e}"));
    assert_eq!(
        docker["Labels"]["org.opencontainers.image.version"],
        version.as_str(),
        "the Dockerfile's version label must be the crates' version"
    );
    assert!(
        dockerfile().contains(&format!(
            "docker build -t ghcr.io/rotor-dev/rotor:{version} ."
        )),
        "the Dockerfile's `docker build -t ...` comment must name version {version}"
    );
    assert_eq!(
        image_sh_config(&image_sh(), &version),
        docker,
        "tools/image.sh's `crane mutate` flags must give the config of the Dockerfile's final stage"
    );
}

/// The packages of Cargo.lock: (name, version) -> the sha256 checksum (crates.io packages; none
/// for the workspace's own).
fn lock_packages() -> BTreeMap<(String, String), Option<String>> {
    let lock = std::fs::read_to_string(workspace_root().join("Cargo.lock")).expect("Cargo.lock");
    let field = |block: &str, key: &str| {
        block.lines().find_map(|l| {
            l.strip_prefix(&format!("{key} = \""))
                .and_then(|v| v.strip_suffix('"'))
                .map(String::from)
        })
    };
    lock.split("[[package]]")
        .skip(1)
        .map(|block| {
            let name = field(block, "name").expect("a package has a name");
            let version = field(block, "version").expect("a package has a version");
            ((name, version), field(block, "checksum"))
        })
        .collect()
}

/// The image's SBOMs (tools/sbom.sh, CycloneDX JSON), one per binary, at the place the list
/// installs them: each names its binary at the workspace's version, lists the crates it is built
/// from at the versions and checksums of Cargo.lock (kube, tokio, ...; our own crates at the
/// workspace's version) and no dev-dependency, and is the file tools/image.sh leaves beside the
/// image. Reads the image tools/image.sh built for these sources.
#[test]
fn the_image_carries_an_sbom_of_each_binary_listing_the_crates_it_is_built_from() {
    let out = built_image();
    let image = OciImage::read(&out.join("oci"));
    let dest = image_files()
        .into_iter()
        .find(|c| c.from_build && c.src == "/out/sbom/")
        .expect("tools/image-files.txt copies the build stage's /out/sbom/")
        .dest;
    assert_eq!(
        dest, "/usr/share/rotor/sbom/",
        "docs/security.md names this place"
    );
    let version = crate_version("crates/drainer");
    let lock = lock_packages();
    let lock_versions = |name: &str| -> Vec<&String> {
        lock.keys()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v)
            .collect()
    };
    // Neither binary links a dev-dependency: proptest is in Cargo.lock for the tests only.
    assert!(
        !lock_versions("proptest").is_empty(),
        "proptest left Cargo.lock: pick another"
    );

    let cases: [(&str, &[&str]); 2] = [
        (
            "rotor-drainer",
            &[
                "kube",
                "kube-runtime",
                "k8s-openapi",
                "tokio",
                "rustls",
                "ring",
                "axum",
            ],
        ),
        (
            "rotor-selector",
            &[
                "kube",
                "k8s-openapi",
                "tokio",
                "rustls",
                "ring",
                "aws-sdk-ec2",
                "aws-config",
            ],
        ),
    ];
    for (package, crates) in cases {
        let path = format!("{dest}{package}.cdx.json");
        let bytes = image
            .read_file(&path)
            .unwrap_or_else(|| panic!("{path} is not in the image {}", out.display()));
        let beside = out.join("sbom").join(format!("{package}.cdx.json"));
        assert!(
            std::fs::read(&beside).is_ok_and(|b| b == bytes),
            "{} is not the image's {path}",
            beside.display()
        );
        let text = String::from_utf8(bytes).expect("the SBOM is UTF-8");
        let bom: Value = serde_json::from_str(&text).expect("the SBOM is JSON");
        let what = format!("{path} in the image");
        assert_eq!(bom["bomFormat"], "CycloneDX", "{what}");
        assert_eq!(bom["specVersion"], "1.5", "{what}");
        // Reproducible: no random serial number, no date but the epoch, no path of the machine
        // that built it.
        assert!(bom["serialNumber"].is_null(), "{what}: serialNumber");
        assert!(
            bom["metadata"]["timestamp"]
                .as_str()
                .is_some_and(|t| t.starts_with("1970-01-01T00:00:00")),
            "{what}: {}",
            bom["metadata"]["timestamp"]
        );
        for machine in ["/root/", "/home/", "/tmp/", "/work/"] {
            assert!(
                !text.contains(machine),
                "{what} names a path under {machine}"
            );
        }

        // What it describes: the package at the workspace's version, and its binary.
        let top = &bom["metadata"]["component"];
        assert_eq!(top["name"], package, "{what}");
        assert_eq!(top["version"], version.as_str(), "{what}");
        assert!(
            top["purl"]
                .as_str()
                .is_some_and(|p| p.starts_with(&format!("pkg:cargo/{package}@{version}"))),
            "{what}: {}",
            top["purl"]
        );
        assert!(
            top["components"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["name"] == package && c["type"] == "application"),
            "{what}: the binary {package} among its targets: {}",
            top["components"]
        );

        // Each component is a crate of Cargo.lock, as locked.
        let components = bom["components"].as_array().expect("components");
        let mut listed: BTreeMap<&str, &Value> = BTreeMap::new();
        for c in components {
            let name = c["name"].as_str().expect("a component has a name");
            let v = c["version"].as_str().expect("a component has a version");
            let key = (name.to_string(), v.to_string());
            let Some(checksum) = lock.get(&key) else {
                panic!("{what} lists {name} {v}, which Cargo.lock does not have");
            };
            if let Some(checksum) = checksum {
                assert_eq!(
                    c["hashes"],
                    serde_json::json!([{"alg": "SHA-256", "content": checksum}]),
                    "{what}: {name} {v}"
                );
                assert_eq!(c["purl"], format!("pkg:cargo/{name}@{v}"), "{what}");
            }
            listed.insert(name, c);
        }
        for name in crates.iter().chain(&["rotor-core", "rotor-apimachinery"]) {
            let c = listed
                .get(name)
                .unwrap_or_else(|| panic!("{what} does not list {name}"));
            assert_eq!(c["scope"], "required", "{what}: {name} is linked in");
            assert!(
                lock_versions(name).contains(&&c["version"].as_str().unwrap_or("").to_string()),
                "{what}: {name}"
            );
        }
        for ours in ["rotor-core", "rotor-apimachinery"] {
            assert_eq!(listed[ours]["version"], version.as_str(), "{what}: {ours}");
        }
        for absent in ["proptest", "rotor-sim", "rotor-e2e"] {
            assert!(
                !listed.contains_key(absent),
                "{what} lists {absent}, which {package} is not built from"
            );
        }
    }
}

/// tools/image.sh's cache key hashes what the SBOMs are made from: the script and its tool's pin
/// (tools/sbom.sh, tools/cargo-tool.sh) and the test crate's Cargo.toml (a workspace member,
/// whose features take part in the resolution the SBOMs list), in both of its file listings.
#[test]
fn the_image_key_hashes_the_sboms_inputs() {
    let script = image_sh();
    let body: String = script
        .lines()
        .skip_while(|l| !l.starts_with("source_files()"))
        .take_while(|l| *l != "}")
        .collect::<Vec<_>>()
        .join("\n");
    for input in [
        "tools/sbom.sh",
        "tools/cargo-tool.sh",
        "tests/Cargo.toml",
        "Cargo.lock",
    ] {
        assert_eq!(
            body.matches(input).count(),
            2,
            "tools/image.sh's source_files must list {input} (git and find):\n{body}"
        );
    }
    let sbom = std::fs::read_to_string(workspace_root().join("tools/sbom.sh")).expect("sbom.sh");
    assert!(
        sbom.lines().any(|l| l.starts_with("version=")),
        "tools/sbom.sh pins cargo-cyclonedx's version"
    );
}
