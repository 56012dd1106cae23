//! Authorization settings: the chain of authorizers in order (from `--authorization-config` or
//! `--authorization-mode`) and the RBAC policy file. Defaults and the mode names live only
//! here.

use super::webhook::WebhookSettings;
use super::AuthzMode;
use std::path::PathBuf;

/// How requests are authorized.
#[derive(Debug, Clone)]
pub struct AuthzSettings {
    /// Authorizers in order.
    pub links: Vec<LinkSettings>,
    /// RBAC objects, for the `RBAC` authorizer (`--rbac-policy-file`).
    pub policy_file: Option<PathBuf>,
    /// `--authorization-config`, which `links` came from (read again when it changes).
    pub config_file: Option<PathBuf>,
}

/// One authorizer of the chain, as configured.
#[derive(Debug, Clone)]
pub enum LinkSettings {
    AlwaysAllow,
    AlwaysDeny,
    Rbac,
    Webhook(WebhookSettings),
}

impl LinkSettings {
    /// The authorizer's type as kube-apiserver spells it (`--authorization-mode`).
    pub fn kind(&self) -> &'static str {
        let mode = match self {
            Self::AlwaysAllow => AuthzMode::AlwaysAllow,
            Self::AlwaysDeny => AuthzMode::AlwaysDeny,
            Self::Rbac => AuthzMode::Rbac,
            Self::Webhook(_) => AuthzMode::Webhook,
        };
        mode.name()
    }
}

impl From<AuthzMode> for LinkSettings {
    /// An `--authorization-mode` entry; `Webhook` is the cluster's SubjectAccessReview API
    /// with kube-apiserver's flag defaults.
    fn from(mode: AuthzMode) -> Self {
        match mode {
            AuthzMode::AlwaysAllow => Self::AlwaysAllow,
            AuthzMode::AlwaysDeny => Self::AlwaysDeny,
            AuthzMode::Rbac => Self::Rbac,
            AuthzMode::Webhook => Self::Webhook(WebhookSettings::cluster_mode()),
        }
    }
}

impl Default for AuthzSettings {
    fn default() -> Self {
        Self {
            links: vec![LinkSettings::AlwaysAllow],
            policy_file: None,
            config_file: None,
        }
    }
}

impl AuthzSettings {
    /// The authorizer these settings describe, its RBAC policy loaded (`serve` and `check`).
    pub fn authorizer(&self) -> Result<super::Authorizer, super::PolicyError> {
        super::Authorizer::with_links(
            self.links.clone(),
            self.policy_file.clone(),
            self.config_file.clone(),
        )
    }

    /// True when the first authorizer is `AlwaysAllow`: the gateway's door lets every request
    /// through and the backends alone decide (`apigw check` and `doctor` say so).
    pub fn left_to_backends(&self) -> bool {
        matches!(self.links.first(), Some(LinkSettings::AlwaysAllow))
    }

    /// True when RBAC is one of the authorizers.
    pub fn rbac(&self) -> bool {
        self.links.iter().any(|l| matches!(l, LinkSettings::Rbac))
    }

    /// What is missing, by flag name.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.policy_file.is_none() && self.rbac() {
            let with = if self.config_file.is_some() {
                "with an RBAC authorizer in --authorization-config"
            } else {
                "with --authorization-mode=RBAC"
            };
            out.push(("rbac-policy-file", format!("is required {with}")));
        }
        out
    }
}

impl AuthzMode {
    /// Every mode, in the order the flag's error lists them.
    const ALL: [Self; 4] = [
        Self::AlwaysAllow,
        Self::AlwaysDeny,
        Self::Rbac,
        Self::Webhook,
    ];

    /// Its name in `--authorization-mode`, as kube-apiserver spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::AlwaysAllow => "AlwaysAllow",
            Self::AlwaysDeny => "AlwaysDeny",
            Self::Rbac => "RBAC",
            Self::Webhook => "Webhook",
        }
    }

    /// The mode `--authorization-mode` names `name`.
    pub fn from_flag(name: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.into_iter().map(Self::name).collect();
                format!("unknown mode {name:?} ({})", names.join(", "))
            })
    }
}
