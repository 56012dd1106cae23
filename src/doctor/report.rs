//! The doctor's findings: one [`Step`] per thing checked (ok, warning or failed, with the
//! reason, and for anything not ok the one fix to make), grouped per APIService with the
//! commands to repeat the checks by hand; rendered as text or JSON.

use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warning,
    Failed,
}

/// One check and what it found.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// What was checked: `manifest`, `resolve`, `connect`, `tls-handshake`, `serving-cert`,
    /// `serving-cert-trust`, `serving-cert-name`, `serving-cert-validity`, `proxy-client-cert`,
    /// `discovery`; for the gateway itself `config`, `serving-cert-file`, `proxy-client-cert-file`.
    pub check: &'static str,
    pub status: Status,
    /// Why a warning or failure happened, as a stable word (`UnknownAuthority`, `NameMismatch`,
    /// `Expired`, `ProxyCertRejected`, `Unauthorized`, `ConnectionRefused`, `ServiceNotFound`...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    pub message: String,
    /// The one thing to change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// Supporting lines: the served chain, the CAs in the bundle, ...
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
}

impl Step {
    pub fn ok(check: &'static str, message: impl Into<String>) -> Self {
        Self {
            check,
            status: Status::Ok,
            reason: None,
            message: message.into(),
            fix: None,
            details: Vec::new(),
        }
    }

    pub fn warning(
        check: &'static str,
        reason: &'static str,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            status: Status::Warning,
            reason: Some(reason),
            fix: Some(fix.into()),
            ..Self::ok(check, message)
        }
    }

    pub fn failed(
        check: &'static str,
        reason: &'static str,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            status: Status::Failed,
            ..Self::warning(check, reason, message, fix)
        }
    }

    pub fn details(mut self, lines: Vec<String>) -> Self {
        self.details = lines;
        self
    }
}

/// A command to run by hand, and what it shows.
#[derive(Debug, Clone, Serialize)]
pub struct Recipe {
    pub what: String,
    pub command: String,
}

/// Everything found about one APIService.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceReport {
    pub name: String,
    /// `<service>.<namespace>.svc:<port>`, or `Local`.
    pub target: String,
    pub steps: Vec<Step>,
    /// The caBundle, written out for the commands below.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_bundle_file: Option<PathBuf>,
    pub commands: Vec<Recipe>,
    /// The APIResourceList the backend answered, for deciding which of several backends
    /// serves what.
    #[serde(skip)]
    pub listed: Option<serde_json::Value>,
}

/// The whole diagnosis.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The gateway's own configuration and certificate files.
    pub gateway: Vec<Step>,
    pub apiservices: Vec<ServiceReport>,
}

/// Counts of steps per status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub ok: usize,
    pub warnings: usize,
    pub failed: usize,
}

impl Report {
    fn steps(&self) -> impl Iterator<Item = &Step> {
        self.gateway
            .iter()
            .chain(self.apiservices.iter().flat_map(|s| s.steps.iter()))
    }

    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for step in self.steps() {
            match step.status {
                Status::Ok => s.ok += 1,
                Status::Warning => s.warnings += 1,
                Status::Failed => s.failed += 1,
            }
        }
        s
    }

    /// True when any check failed (warnings alone do not count).
    pub fn failed(&self) -> bool {
        self.summary().failed > 0
    }

    /// The report of APIService `name`.
    pub fn service(&self, name: &str) -> Option<&ServiceReport> {
        self.apiservices.iter().find(|s| s.name == name)
    }

    /// The JSON form: the report plus its summary.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "ok": !self.failed(),
            "summary": self.summary(),
            "gateway": self.gateway,
            "apiservices": self.apiservices,
        })
    }

    /// The readable form.
    pub fn to_text(&self) -> String {
        let mut out = String::from("gateway\n");
        for step in &self.gateway {
            step_text(&mut out, step);
        }
        for svc in &self.apiservices {
            let _ = writeln!(out, "\nAPIService {} -> {}", svc.name, svc.target);
            for step in &svc.steps {
                step_text(&mut out, step);
            }
            if let Some(file) = &svc.ca_bundle_file {
                let _ = writeln!(out, "  (spec.caBundle written to {})", file.display());
            }
            if !svc.commands.is_empty() {
                out.push_str("  by hand:\n");
            }
            for r in &svc.commands {
                let _ = writeln!(out, "    # {}\n    {}", r.what, r.command);
            }
        }
        let s = self.summary();
        let _ = writeln!(
            out,
            "\n{} ok, {} warnings, {} failed",
            s.ok, s.warnings, s.failed
        );
        out
    }
}

impl ServiceReport {
    /// The step named `check`, if it ran.
    pub fn step(&self, check: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.check == check)
    }
}

fn step_text(out: &mut String, step: &Step) {
    let status = match step.status {
        Status::Ok => "ok",
        Status::Warning => "WARNING",
        Status::Failed => "FAILED",
    };
    let reason = step.reason.map(|r| format!(" [{r}]")).unwrap_or_default();
    let _ = writeln!(
        out,
        "  {status:<8} {:<22} {}{reason}",
        step.check, step.message
    );
    for line in &step.details {
        let _ = writeln!(out, "  {:<31}{line}", "");
    }
    if let Some(fix) = &step.fix {
        let _ = writeln!(out, "  {:<31}fix: {fix}", "");
    }
}
