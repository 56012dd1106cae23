//! The `[default: …]` of each flag's help, read from the settings merging falls back to (their
//! `Default`, or the constants beside the merge), so each default is declared once and the
//! help cannot drift from what the gateway does. A default that depends on the machine (the
//! worker threads) or is a behaviour rather than a value (the system roots) is said in the
//! flag's own help instead.

use super::merge::{AUDIT_MAX_BACKUPS, AUDIT_MAX_SIZE_MB, MAX_MUTATING_INFLIGHT};
use super::LogSettings;
use crate::cluster::LeaderElection;
use apigw_authn::RequestHeaderSettings;
use apigw_authz::AuthzSettings;
use apigw_core::duration::format_duration as go;
use apigw_core::server::{LimitsSettings, ServerSettings};
use apigw_flowcontrol::FlowControlSettings;
use clap::Command;

/// Each flag with a default, by its argument id, and the default as a user would write it.
pub fn defaults() -> Vec<(&'static str, String)> {
    let server = ServerSettings::default();
    let limits = LimitsSettings::default();
    let leader = LeaderElection::default();
    let availability = apigw_availability::Settings::default();
    let flow = FlowControlSettings::default();
    let modes: Vec<&str> = AuthzSettings::default()
        .links
        .iter()
        .map(|l| l.kind())
        .collect();
    let format = if LogSettings::default().json {
        "json"
    } else {
        "text"
    };
    vec![
        ("bind_address", server.listen.ip().to_string()),
        ("secure_port", server.listen.port().to_string()),
        (
            "requestheader_username_headers",
            RequestHeaderSettings::DEFAULT_USERNAME_HEADER.to_string(),
        ),
        (
            "requestheader_group_headers",
            RequestHeaderSettings::DEFAULT_GROUP_HEADER.to_string(),
        ),
        (
            "requestheader_extra_headers_prefix",
            RequestHeaderSettings::DEFAULT_EXTRA_PREFIX.to_string(),
        ),
        ("leader_elect_lease_duration", go(leader.lease_duration)),
        ("leader_elect_renew_deadline", go(leader.renew_deadline)),
        ("leader_elect_retry_period", go(leader.retry_period)),
        ("authorization_mode", modes.join(",")),
        ("availability_check_interval", go(availability.interval)),
        ("availability_check_timeout", go(availability.timeout)),
        ("shutdown_delay_duration", go(server.shutdown_delay)),
        ("shutdown_grace_period", go(server.shutdown_grace)),
        (
            "max_connections_per_client",
            server.max_connections_per_client.to_string(),
        ),
        ("request_timeout", go(limits.request_timeout)),
        ("max_requests_inflight", limits.max_inflight.to_string()),
        (
            "max_mutating_requests_inflight",
            MAX_MUTATING_INFLIGHT.to_string(),
        ),
        ("enable_priority_and_fairness", flow.enabled.to_string()),
        (
            "max_apiservice_seats_percent",
            flow.apiservice_percent.to_string(),
        ),
        (
            "max_requests_inflight_per_client",
            limits.max_inflight_per_client.to_string(),
        ),
        ("log_format", format.to_string()),
        ("audit_log_maxsize", AUDIT_MAX_SIZE_MB.to_string()),
        ("audit_log_maxbackup", AUDIT_MAX_BACKUPS.to_string()),
    ]
}

/// `cmd` (serve, or check and doctor, which take serve's flags) with each flag's default at
/// the end of its help, as clap writes its own.
pub fn in_help(cmd: Command) -> Command {
    defaults().into_iter().fold(cmd, |cmd, (id, default)| {
        cmd.mut_arg(id, |arg| {
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            arg.help(format!("{help} [default: {default}]"))
        })
    })
}
