//! Certificates: [`describe`] and [`inspect`] read them back (`apigw certs inspect`, and
//! `apigw doctor`'s view of served chains); with the `dev-pki` feature, the dev PKI that
//! `apigw certs dev` and `apigw dev` write (rcgen), which the product binary leaves out.

pub mod describe;
pub mod inspect;

#[cfg(feature = "dev-pki")]
mod dev;
#[cfg(feature = "dev-pki")]
pub use dev::*;
