//! The request's facts, the vocabulary every concern of apigw speaks: who is asking
//! ([`Identity`], and the [`IdentityHeaders`] that carry one), what they ask ([`Attributes`], as
//! kube-apiserver's `RequestInfo` derives them), what kind of request it is and by when it must
//! be answered ([`RequestInfo`]), and the [`Policy`] its APIService sets. Depends on no other
//! apigw crate; authentication, authorization, flow control, the registry and the proxy depend
//! on it and not on one another for these.

mod attributes;
mod headers;
mod identity;
mod info;
mod policy;

pub use attributes::{query_value, segments, Attributes};
pub use headers::IdentityHeaders;
pub use identity::{Identity, ANONYMOUS_USER, AUTHENTICATED, CREDENTIAL_ID, UNAUTHENTICATED};
pub use info::{RequestInfo, RequestKind};
pub use policy::Policy;
