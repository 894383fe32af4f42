//! `rotor-selector`: one run per invocation. Finds out-of-date nodes through a provider, plans
//! within budgets, taints (and rolls back) accordingly, prints the plan.
//!
//! Exit status: 0 the run completed; 1 it failed (a look-up failed and nothing was written; a
//! look-up about one launch template failed and only its groups were skipped; a write failed
//! after retries; or its metrics could not be written or pushed); 2 bad flags or configuration,
//! before the cluster is contacted.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use rotor_core::client::{client_without_retry, load_config};
use rotor_core::telemetry;
use rotor_selector::cli::{Cli, MetricsSinks, OutputFormat, SelectorConfig};
use rotor_selector::compliance::Compliance;
use rotor_selector::output;
use rotor_selector::provider::Provider;
use rotor_selector::run::run_with;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match cli.select.validate() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("rotor-selector: {error}");
            return ExitCode::from(2);
        }
    };
    if let Err(error) = telemetry::init(&cli.log) {
        eprintln!("rotor-selector: {error}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("rotor-selector: cannot start the async runtime: {error}");
            return ExitCode::from(1);
        }
    };
    ExitCode::from(runtime.block_on(select(cli.kube, config)))
}

async fn select(kube: rotor_core::KubeArgs, config: SelectorConfig) -> u8 {
    let mut provider = Provider::new(&config.provider, config.group_labels.clone());
    if let Provider::Aws(aws) = &mut provider
        && let Err(error) = aws.connect().await
    {
        eprintln!("rotor-selector: {error}");
        return 2;
    }
    if let Provider::Azure(azure) = &mut provider
        && let Err(error) = azure.connect()
    {
        eprintln!("rotor-selector: {error}");
        return 2;
    }
    if let Provider::Gcp(gcp) = &mut provider
        && let Err(error) = gcp.connect().await
    {
        eprintln!(
            "rotor-selector: {error}; check GOOGLE_APPLICATION_CREDENTIALS or the workload identity"
        );
        return 2;
    }
    // kube's own retry is off: the selector retries 429/503/504 briefly itself and otherwise
    // leaves it to the next run (see rotor_selector::kube_retry).
    let client = match load_config(&kube).await.and_then(client_without_retry) {
        Ok(client) => client,
        Err(error) => {
            eprintln!("rotor-selector: {error}");
            return 2;
        }
    };
    let report = match run_with(&client, &config, &provider, jiff::Timestamp::now()).await {
        Ok(report) => report,
        Err(error) => {
            tracing::error!("run failed, nothing was written: {error}");
            eprintln!("rotor-selector: {error}; nothing was written");
            // The figures of the last good run stay on the Pushgateway (a POST replaces only
            // the two run gauges); the file says only that this run failed.
            let failed = Compliance::failure_exposition(jiff::Timestamp::now());
            publish_metrics(&config.metrics, failed, rotor_core::http::Method::POST).await;
            return error.exit_code();
        }
    };
    let compliance = Compliance::of(&report, jiff::Timestamp::now());
    let text = match config.output {
        OutputFormat::Text => output::to_text(&report),
        OutputFormat::Json => format!("{:#}\n", output::to_json(&report)),
        OutputFormat::Report => compliance.to_text(),
    };
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        eprintln!("rotor-selector: cannot write the plan to stdout: {error}");
        return 1;
    }
    if !report.lookup_failures.is_empty() {
        let list: Vec<String> = report
            .lookup_failures
            .iter()
            .map(ToString::to_string)
            .collect();
        eprintln!(
            "rotor-selector: {} look-up(s) failed for part of the fleet ({}); the nodes of those groups were skipped (reason lookup-failed) and the other groups were handled; the next run tries again",
            list.len(),
            list.join("; ")
        );
    }
    let failures = report.failures();
    if !failures.is_empty() {
        let summary = report.summary();
        let list: Vec<String> = failures
            .iter()
            .map(|(subject, action, error)| format!("{action} {subject}: {error}"))
            .collect();
        let group_writes = report
            .group_surges
            .iter()
            .filter(|g| g.write.is_some())
            .count();
        eprintln!(
            "rotor-selector: {} of {} writes failed ({}); the {} applied writes stay in place, the next run retries the rest",
            failures.len(),
            summary.applied + summary.dropped + summary.failed + group_writes,
            list.join("; "),
            summary.applied,
        );
    }
    let published = publish_metrics(
        &config.metrics,
        compliance.exposition(),
        rotor_core::http::Method::PUT,
    )
    .await;
    report.exit_code().max(u8::from(!published))
}

/// Writes the compliance figures `text` where `--metrics-file` and `--pushgateway` say (to the
/// Pushgateway with `method`: PUT replaces the group, POST only the metrics sent); false when
/// one failed (said on stderr).
async fn publish_metrics(
    sinks: &MetricsSinks,
    text: String,
    method: rotor_core::http::Method,
) -> bool {
    let mut ok = true;
    if let Some(path) = &sinks.file
        && let Err(error) = write_whole(path, &text)
    {
        eprintln!(
            "rotor-selector: cannot write the metrics file {}: {error}; the run's writes stand",
            path.display()
        );
        ok = false;
    }
    if let Some(target) = &sinks.pushgateway {
        let pushed = match rotor_core::http::HttpClient::new() {
            Ok(http) => http
                .upload(
                    method,
                    target,
                    "text/plain; version=0.0.4",
                    text.into(),
                    std::time::Duration::from_secs(10),
                )
                .await
                .map_err(|e| e.to_string())
                .and_then(|answer| {
                    if (200..300).contains(&answer.status) {
                        Ok(())
                    } else {
                        Err(format!(
                            "answered {}: {}",
                            answer.status,
                            String::from_utf8_lossy(&answer.body).trim()
                        ))
                    }
                }),
            Err(e) => Err(e.to_string()),
        };
        if let Err(error) = pushed {
            eprintln!(
                "rotor-selector: cannot push the metrics to the Pushgateway at {}: {error}; the run's writes stand",
                target.shown()
            );
            ok = false;
        }
    }
    ok
}

/// Replaces `path` whole: a collector reading it never sees half a file.
fn write_whole(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let partial = path.with_extension("partial");
    std::fs::write(&partial, text)?;
    std::fs::rename(&partial, path)
}
