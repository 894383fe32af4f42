//! rotor-core: what rotor-selector and rotor-drainer share.
//!
//! - [`contract`]: the drain taint, reason slugs, drainer state annotations and opt-outs; the whole
//!   interface between the selector and the drainer, defined once.
//! - [`duration`]: the one duration syntax of every flag and scenario file.
//! - [`node_budget`]: a count or a percentage of nodes, as both binaries' budgets are written.
//! - [`provider_id`]: AWS `spec.providerID` parsing into an [`InstanceId`].
//! - [`client`](mod@client): kube client construction from [`KubeArgs`], with and without kube's built-in retry.
//! - [`retry_after`]: a 429's `Retry-After` kept where a client's caller can read it.
//! - [`telemetry`]: the tracing subscriber ([`LogArgs`]).
//! - [`http`]: a GET with a deadline to an operator's [`http::HttpTarget`], shown without credentials.
//! - [`admin`]: the `/metrics`, `/healthz`, `/readyz` HTTP server ([`AdminArgs`]).
//! - [`shutdown`]: the process-wide cancellation token, cancelled on SIGTERM/SIGINT.
//!
//! The command-line option groups ([`KubeArgs`], [`LogArgs`], [`AdminArgs`]) are `clap::Args` meant
//! to be `#[command(flatten)]`ed into each binary's parser; each option also reads a `ROTOR_*`
//! environment variable.

pub mod admin;
pub mod client;
pub mod contract;
pub mod duration;
pub mod http;
pub mod node_budget;
pub mod provider_id;
pub mod retry_after;
pub mod shutdown;
pub mod telemetry;

pub use admin::{AdminArgs, AdminServer, AdminState, Readiness};
pub use client::{
    ClientError, KubeArgs, client, client_without_retry, load_config, watch_failure_status,
};
pub use contract::{
    DRAIN_TAINT_KEY, DrainPhase, DrainReason, FIELD_MANAGER, TaintEffect, drain_taint,
    find_drain_taint, node_opted_out, pod_opt_out,
};
pub use duration::{DurationError, parse_duration};
pub use node_budget::{NodeBudget, ParseBudgetError};
pub use provider_id::{InstanceId, ProviderIdError, parse_aws_provider_id};
pub use shutdown::shutdown_token;
pub use telemetry::{LogArgs, LogFormat};

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;

    /// How a binary is expected to assemble its command line from the shared option groups.
    #[derive(Debug, Parser)]
    #[command(name = "rotor-test")]
    struct Cli {
        #[command(flatten)]
        kube: KubeArgs,
        #[command(flatten)]
        log: LogArgs,
        #[command(flatten)]
        admin: AdminArgs,
        /// Drain taint effect.
        #[arg(long, value_enum, default_value_t = TaintEffect::NoSchedule)]
        taint_effect: TaintEffect,
    }

    #[test]
    fn shared_args_compose() {
        Cli::command().debug_assert();
    }

    #[test]
    fn shared_args_defaults_and_env() {
        let command = Cli::command();
        let arg = |id: &str| {
            command
                .get_arguments()
                .find(|a| a.get_id() == id)
                .unwrap_or_else(|| panic!("argument {id}"))
                .clone()
        };
        let defaults = |id: &str| -> Vec<String> {
            arg(id)
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect()
        };
        let env = |id: &str| arg(id).get_env().map(|e| e.to_string_lossy().into_owned());
        assert_eq!(defaults("admin_listen"), ["0.0.0.0:8080"]);
        assert_eq!(defaults("log_format"), ["text"]);
        assert_eq!(env("admin_listen").as_deref(), Some("ROTOR_ADMIN_LISTEN"));
        assert_eq!(env("log_format").as_deref(), Some("ROTOR_LOG_FORMAT"));
        assert_eq!(env("kubeconfig").as_deref(), Some("ROTOR_KUBECONFIG"));
        assert_eq!(env("context").as_deref(), Some("ROTOR_KUBE_CONTEXT"));
    }

    #[test]
    fn shared_args_parse() {
        let cli = Cli::try_parse_from([
            "rotor-test",
            "--kubeconfig",
            "/tmp/kc",
            "--context",
            "prod",
            "--log-format",
            "json",
            "--admin-listen",
            "127.0.0.1:9090",
            "--taint-effect",
            "PreferNoSchedule",
        ])
        .unwrap();
        assert_eq!(
            cli.kube.kubeconfig.as_deref(),
            Some(std::path::Path::new("/tmp/kc"))
        );
        assert_eq!(cli.kube.context.as_deref(), Some("prod"));
        assert_eq!(cli.log.log_format, LogFormat::Json);
        assert_eq!(cli.admin.admin_listen, "127.0.0.1:9090".parse().unwrap());
        assert_eq!(cli.taint_effect, TaintEffect::PreferNoSchedule);

        assert!(Cli::try_parse_from(["rotor-test", "--log-format", "xml"]).is_err());
        assert!(Cli::try_parse_from(["rotor-test", "--taint-effect", "noschedule"]).is_err());
        assert!(Cli::try_parse_from(["rotor-test", "--admin-listen", "8080"]).is_err());
    }
}
