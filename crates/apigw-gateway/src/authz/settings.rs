//! Authorization settings: the authorizers in order and the RBAC policy file. Defaults and
//! the mode names live only here.

use super::AuthzMode;
use std::path::PathBuf;

/// How requests are authorized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthzSettings {
    /// Authorizers in order.
    pub modes: Vec<AuthzMode>,
    /// RBAC objects, for [`AuthzMode::Rbac`] (`--rbac-policy-file`).
    pub policy_file: Option<PathBuf>,
}

impl Default for AuthzSettings {
    fn default() -> Self {
        Self {
            modes: vec![AuthzMode::AlwaysAllow],
            policy_file: None,
        }
    }
}

impl AuthzSettings {
    /// The authorizer these settings describe, its RBAC policy loaded (`serve` and `check`).
    pub fn authorizer(&self) -> Result<super::Authorizer, super::PolicyError> {
        super::Authorizer::new(self.modes.clone(), self.policy_file.clone())
    }

    /// What is missing, by flag name.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.policy_file.is_none() && self.modes.contains(&AuthzMode::Rbac) {
            out.push((
                "rbac-policy-file",
                "is required with --authorization-mode=RBAC".into(),
            ));
        }
        out
    }
}

impl AuthzMode {
    /// The mode `--authorization-mode` names `name`.
    pub fn from_flag(name: &str) -> Result<Self, String> {
        match name {
            "AlwaysAllow" => Ok(Self::AlwaysAllow),
            "AlwaysDeny" => Ok(Self::AlwaysDeny),
            "RBAC" => Ok(Self::Rbac),
            "Webhook" => Ok(Self::Webhook),
            other => Err(format!(
                "unknown mode {other:?} (AlwaysAllow, AlwaysDeny, RBAC, Webhook)"
            )),
        }
    }
}
