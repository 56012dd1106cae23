//! The flags of `apigw serve` and `apigw check`: each concern's section, declared in its crate
//! beside the code that reads it ([`apigw_core::section!`]), flattened here into [`Flags`] for
//! clap and read by [`super::file`] for the file; and the one section the gateway owns, the log
//! and the metrics listener ([`LogFlags`]). `display_order` keeps `--help` listing the flags in
//! one order across the sections (each flag its own place, which a test checks); the first
//! flag of each section keeps the headings' order.

use super::LogSettings;
use apigw_authn::AuthnFlags;
use apigw_authz::AuthzFlags;
use apigw_availability::AvailabilityFlags;
use apigw_core::server::{ServerFlags, ServingFlags};
use apigw_core::settings::Cx;
use apigw_flowcontrol::FlowControlFlags;
use apigw_proxy::ProxyFlags;
use apigw_registry::RegistryFlags;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::audit::AuditFlags;
use crate::cluster::ClusterFlags;
use crate::limits::LimitsFlags;

/// Lists each section of [`Flags`] once: the struct, laying flags over the file, and every
/// section's file keys and defaults (each section has its `defaults()`, empty or not).
macro_rules! sections {
    ($($section:ident: $ty:ty,)*) => {
        /// The flags of `apigw serve` and `apigw check`; the file holds the same, but `config`.
        #[derive(Debug, Clone, Default, Args)]
        pub struct Flags {
            /// YAML config file with the same settings in camelCase; flags override it.
            #[arg(long, display_order = 0)]
            pub config: Option<PathBuf>,
            $(
                #[command(flatten)]
                pub $section: $ty,
            )*
        }

        impl Flags {
            /// These flags over the file's `file`, section by section, with the keys whose
            /// value came from the file.
            pub(super) fn over(self, file: Flags) -> (Flags, Vec<&'static str>) {
                let mut from_file = Vec::new();
                let merged = Flags {
                    config: self.config,
                    $($section: self.$section.over(file.$section, &mut from_file),)*
                };
                (merged, from_file)
            }

            /// Every key of the file, aliases after their key, section by section: the order an
            /// unknown-key error lists them in.
            pub(super) fn keys() -> Vec<&'static str> {
                [$(<$ty>::KEYS,)*].concat()
            }

            /// Reads the file's value of `key` into the section that owns it; the canonical
            /// key, or None when no section owns it.
            pub(super) fn read<'de, A: serde::de::MapAccess<'de>>(
                &mut self,
                key: &str,
                map: &mut A,
            ) -> Result<Option<&'static str>, A::Error> {
                $(if let Some(k) = <$ty>::canonical(key) {
                    self.$section.read(k, map)?;
                    return Ok(Some(k));
                })*
                Ok(None)
            }
        }

        /// Each flag with a default, by its argument id, and the default as a user would
        /// write it.
        pub fn defaults() -> Vec<(&'static str, String)> {
            [$(<$ty>::defaults(),)*].concat()
        }
    };
}

sections! {
    serving: ServingFlags,
    authn: AuthnFlags,
    proxy: ProxyFlags,
    registry: RegistryFlags,
    cluster: ClusterFlags,
    authz: AuthzFlags,
    availability: AvailabilityFlags,
    server: ServerFlags,
    limits: LimitsFlags,
    flowcontrol: FlowControlFlags,
    log: LogFlags,
    audit: AuditFlags,
}

apigw_core::section! {
    /// [`LogSettings`] and the metrics listener.
    pub struct LogFlags {
        /// Serve /metrics (and health) without authentication on this plain-HTTP address too.
        #[arg(long, help_heading = "Logs, metrics and audit", display_order = 37)]
        pub metrics_bind_address: Option<SocketAddr> = "metricsBindAddress",
        /// Log format: text or json (--logging-format is kube's name).
        #[arg(
            long,
            help_heading = "Logs, metrics and audit",
            visible_alias = "logging-format",
            display_order = 38
        )]
        pub log_format: Option<String> = "logFormat" | "loggingFormat",
    }
}

impl LogFlags {
    /// The log format, and the metrics listener.
    pub fn settings(self, cx: &mut Cx) -> (LogSettings, Option<SocketAddr>) {
        const FORMAT: &str = "log-format";
        let json = match self.log_format.as_deref() {
            None => LogSettings::default().json,
            Some("text") => false,
            Some("json") => true,
            Some(other) => {
                let at = if cx.in_file(FORMAT) {
                    cx.name(FORMAT)
                } else {
                    "--log-format (--logging-format)".into()
                };
                cx.problem_at(at, format!("{other:?}: want text or json"));
                LogSettings::default().json
            }
        };
        (LogSettings { json }, self.metrics_bind_address)
    }

    /// Each flag with a default, by argument id, and the default as a user would write it.
    pub fn defaults() -> Vec<(&'static str, String)> {
        let format = if LogSettings::default().json {
            "json"
        } else {
            "text"
        };
        vec![("log_format", format.to_string())]
    }
}
