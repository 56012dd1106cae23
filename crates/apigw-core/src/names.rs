//! Kubernetes' DNS naming rules for object names and their parts (`dns1123_label`,
//! `dns1035_label`, `dns1123_subdomain`), with upstream's wording when a name breaks one.

/// A name that breaks one of Kubernetes' DNS naming rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?}: {}", rule.explain())]
pub struct InvalidName {
    value: String,
    rule: NameRule,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NameRule {
    Dns1123Label,
    Dns1035Label,
    Dns1123Subdomain,
}

impl NameRule {
    fn explain(self) -> &'static str {
        match self {
            Self::Dns1123Label => "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
            Self::Dns1035Label => "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
            Self::Dns1123Subdomain => "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
        }
    }

    fn check(self, s: &str, ok: bool) -> Result<(), InvalidName> {
        ok.then_some(()).ok_or_else(|| InvalidName {
            value: s.to_string(),
            rule: self,
        })
    }
}

pub fn dns1123_label(s: &str) -> Result<(), InvalidName> {
    let ok = s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric());
    NameRule::Dns1123Label.check(s, ok)
}

pub fn dns1035_label(s: &str) -> Result<(), InvalidName> {
    let ok = s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric());
    NameRule::Dns1035Label.check(s, ok)
}

pub fn dns1123_subdomain(s: &str) -> Result<(), InvalidName> {
    let ok = s.len() <= 253 && s.split('.').all(|l| dns1123_label(l).is_ok());
    NameRule::Dns1123Subdomain.check(s, ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_errors_read_as_upstream() {
        assert_eq!(dns1123_label("ok-1"), Ok(()));
        assert_eq!(
            dns1035_label("1x").unwrap_err().to_string(),
            "\"1x\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character"
        );
        assert!(dns1123_subdomain("a..b")
            .unwrap_err()
            .to_string()
            .starts_with("\"a..b\": a lowercase RFC 1123 subdomain must"));
    }
}
