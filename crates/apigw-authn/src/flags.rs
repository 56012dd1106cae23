//! Authentication's `serve` flags and file keys, read into [`AuthnSettings`].

use crate::{AuthnSettings, RequestHeaderSettings};
use apigw_core::settings::{list, Cx};
use std::path::PathBuf;

apigw_core::section! {
    /// [`AuthnSettings`].
    pub struct AuthnFlags {
        /// CA bundle for user client certificates: user = CN, groups = every O.
        #[arg(long, help_heading = "Authentication", display_order = 5)]
        pub client_ca_file: Option<PathBuf> = "clientCaFile",
        /// Static tokens, kube CSV: token,user,uid,"group1,group2".
        #[arg(long, help_heading = "Authentication", display_order = 6)]
        pub token_auth_file: Option<PathBuf> = "tokenAuthFile",
        /// Serve requests without credentials as system:anonymous.
        #[arg(
            long,
            help_heading = "Authentication",
            num_args = 0..=1,
            default_missing_value = "true",
            display_order = 7
        )]
        pub anonymous_auth: Option<bool> = "anonymousAuth",
        /// CA of front proxies whose identity headers are trusted.
        #[arg(long, help_heading = "Authentication", display_order = 8)]
        pub requestheader_client_ca_file: Option<PathBuf> = "requestheaderClientCaFile",
        /// Front-proxy certificate CNs allowed (comma list); empty allows any from the CA.
        #[arg(
            long,
            help_heading = "Authentication",
            value_delimiter = ',',
            display_order = 9
        )]
        pub requestheader_allowed_names: Vec<String> = "requestheaderAllowedNames",
        /// Headers holding the user name.
        #[arg(
            long,
            help_heading = "Authentication",
            value_delimiter = ',',
            display_order = 10
        )]
        pub requestheader_username_headers: Vec<String> = "requestheaderUsernameHeaders",
        /// Headers holding groups.
        #[arg(
            long,
            help_heading = "Authentication",
            value_delimiter = ',',
            display_order = 11
        )]
        pub requestheader_group_headers: Vec<String> = "requestheaderGroupHeaders",
        /// Header prefixes holding extra attributes.
        #[arg(
            long,
            help_heading = "Authentication",
            value_delimiter = ',',
            display_order = 12
        )]
        pub requestheader_extra_headers_prefix: Vec<String> = "requestheaderExtraHeadersPrefix",
        /// kube's AuthenticationConfiguration file (its `jwt` issuers); reloaded when it changes.
        #[arg(long, help_heading = "Authentication", display_order = 13)]
        pub authentication_config: Option<PathBuf> = "authenticationConfig",
    }
}

impl AuthnFlags {
    pub fn settings(self, cx: &mut Cx) -> AuthnSettings {
        let client_ca = cx.file("client-ca-file", self.client_ca_file);
        let token_file = cx.file("token-auth-file", self.token_auth_file);
        let authentication_config = cx.file("authentication-config", self.authentication_config);
        let front_proxy_ca = cx.file(
            "requestheader-client-ca-file",
            self.requestheader_client_ca_file,
        );
        let (allowed, users, groups, extras) = (
            self.requestheader_allowed_names,
            self.requestheader_username_headers,
            self.requestheader_group_headers,
            self.requestheader_extra_headers_prefix,
        );
        let request_header = front_proxy_ca.map(|client_ca| {
            let defaults = RequestHeaderSettings::new(client_ca);
            let or_default = |given: Vec<String>, default: Vec<String>| {
                let given = list(given);
                if given.is_empty() {
                    default
                } else {
                    given
                }
            };
            RequestHeaderSettings {
                allowed_names: list(allowed),
                username_headers: or_default(users, defaults.username_headers),
                group_headers: or_default(groups, defaults.group_headers),
                extra_prefixes: or_default(extras, defaults.extra_prefixes),
                client_ca: defaults.client_ca,
            }
        });
        AuthnSettings {
            client_ca,
            token_file,
            anonymous: self.anonymous_auth,
            request_header,
            authentication_config,
        }
    }

    /// Each flag with a default, by argument id, and the default as a user would write it.
    pub fn defaults() -> Vec<(&'static str, String)> {
        vec![
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
        ]
    }
}
