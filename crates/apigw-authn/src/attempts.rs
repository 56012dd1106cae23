//! `apigw_authentication_attempts_total`: one count per authenticator that gave an answer, by
//! its result. The family is the metrics module's; this module only counts into it, with the
//! common series looked up once so a request pays one atomic increment.

use prometheus::{IntCounter, IntCounterVec};
use std::sync::OnceLock;

/// The `authenticator` label values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    X509,
    RequestHeader,
    TokenFile,
    Anonymous,
    Jwt,
    TokenReview,
    /// No authenticator recognised the credentials (or there were none).
    None,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::X509 => "x509",
            Method::RequestHeader => "requestheader",
            Method::TokenFile => "token-file",
            Method::Anonymous => "anonymous",
            Method::Jwt => "jwt",
            Method::TokenReview => "tokenreview",
            Method::None => "none",
        }
    }
}

/// The `result` of an accepted request.
pub const SUCCESS: &str = "success";
/// A token no authenticator knows, or that TokenReview refused.
pub const INVALID_TOKEN: &str = "invalid_token";
/// A request without credentials while anonymous requests are off.
pub const NO_CREDENTIALS: &str = "no_credentials";
/// An authenticator that could not decide (TokenReview unreachable).
pub const ERROR: &str = "error";
/// A JWT whose `iss` no configured issuer has.
pub const UNKNOWN_ISSUER: &str = "unknown_issuer";

/// The series every request may touch, cached.
const CACHED: [(Method, &str); 6] = [
    (Method::X509, SUCCESS),
    (Method::RequestHeader, SUCCESS),
    (Method::TokenFile, SUCCESS),
    (Method::Anonymous, SUCCESS),
    (Method::None, NO_CREDENTIALS),
    (Method::None, INVALID_TOKEN),
];

/// Counts into the family when the gateway hands one in; otherwise counts nothing.
#[derive(Default)]
pub struct Attempts {
    family: Option<IntCounterVec>,
    cached: [OnceLock<IntCounter>; CACHED.len()],
}

impl Attempts {
    /// Counts into `family` (labels `authenticator`, `result`).
    pub fn new(family: IntCounterVec) -> Self {
        Self {
            family: Some(family),
            cached: Default::default(),
        }
    }

    pub fn count(&self, method: Method, result: &str) {
        let Some(family) = &self.family else {
            return;
        };
        match CACHED
            .iter()
            .position(|(m, r)| *m == method && *r == result)
        {
            Some(i) => self.cached[i]
                .get_or_init(|| family.with_label_values(&[method.as_str(), result]))
                .inc(),
            None => family.with_label_values(&[method.as_str(), result]).inc(),
        }
    }
}
