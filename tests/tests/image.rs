//! The Dockerfile and `tools/image.sh` describe one image: the same Rust, the same `cargo
//! build`, the same build-stage output, the same files in the same order
//! (`tools/image-files.txt`), the same config. Docker is not on our build machines, so the
//! Dockerfile is only ever read; `tools/image.sh` builds the image, and
//! tests/tests/real_image.rs runs what it built.

use std::collections::BTreeSet;
use std::process::Command;

use rotor_e2e::image::{CopyLine, Instruction, dockerfile, dockerfile_config, dockerfile_stages};
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
    let outs: Vec<String> = build_stage_commands()
        .iter()
        .filter(|c| c.starts_with("install "))
        .filter_map(|c| c.split_whitespace().last().map(String::from))
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
