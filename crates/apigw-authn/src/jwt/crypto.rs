//! The `jsonwebtoken` crypto backend on `ring` (the crate ships only aws-lc-rs and RustCrypto
//! backends). Verification covers the asymmetric algorithms; HMAC is refused outright, so a
//! token can never be checked with a public key used as a shared secret. Signing (RSA, ECDSA)
//! exists for minting test tokens.

use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::{Error, ErrorKind};
use jsonwebtoken::jwk::{EllipticCurve, ThumbprintHash};
use jsonwebtoken::signature as jsig;
use jsonwebtoken::{Algorithm, DecodingKey, DecodingKeyKind, EncodingKey};
use ring::signature as sig;

/// Installs the ring backend as `jsonwebtoken`'s process default; harmless when done before.
/// Fails only when another backend was installed first.
pub(super) fn install() -> Result<(), Error> {
    match PROVIDER.install_default() {
        Ok(()) => Ok(()),
        Err(installed) if std::ptr::eq(installed, &PROVIDER) => Ok(()),
        Err(_) => Err(ErrorKind::Provider(
            "another jsonwebtoken crypto provider is installed".into(),
        )
        .into()),
    }
}

static PROVIDER: CryptoProvider = CryptoProvider {
    signer_factory: new_signer,
    verifier_factory: new_verifier,
    key_utils: KeyUtils {
        rsa_pub_components_from_private_key: |_| Err(ErrorKind::InvalidKeyFormat.into()),
        rsa_pub_components_from_public_key: |_| Err(ErrorKind::InvalidKeyFormat.into()),
        ec_pub_components_from_private_key: |_, _| Err(ErrorKind::InvalidKeyFormat.into()),
        ed_pub_components_from_private_key: |_, _| Err(ErrorKind::InvalidKeyFormat.into()),
        compute_digest,
    },
};

fn compute_digest(data: &[u8], hash: ThumbprintHash) -> Result<Vec<u8>, Error> {
    let alg = match hash {
        ThumbprintHash::SHA256 => &ring::digest::SHA256,
        ThumbprintHash::SHA384 => &ring::digest::SHA384,
        ThumbprintHash::SHA512 => &ring::digest::SHA512,
        _ => return Err(ErrorKind::UnsupportedAlgorithm.into()),
    };
    Ok(ring::digest::digest(alg, data).as_ref().to_vec())
}

/// A public key and the ring algorithm a token's `alg` names.
struct Verifier {
    alg: Algorithm,
    key: DecodingKey,
}

enum Scheme {
    Rsa(&'static sig::RsaParameters),
    Other(&'static dyn sig::VerificationAlgorithm),
}

fn scheme(alg: Algorithm) -> Option<Scheme> {
    Some(match alg {
        Algorithm::RS256 => Scheme::Rsa(&sig::RSA_PKCS1_2048_8192_SHA256),
        Algorithm::RS384 => Scheme::Rsa(&sig::RSA_PKCS1_2048_8192_SHA384),
        Algorithm::RS512 => Scheme::Rsa(&sig::RSA_PKCS1_2048_8192_SHA512),
        Algorithm::PS256 => Scheme::Rsa(&sig::RSA_PSS_2048_8192_SHA256),
        Algorithm::PS384 => Scheme::Rsa(&sig::RSA_PSS_2048_8192_SHA384),
        Algorithm::PS512 => Scheme::Rsa(&sig::RSA_PSS_2048_8192_SHA512),
        Algorithm::ES256 => Scheme::Other(&sig::ECDSA_P256_SHA256_FIXED),
        Algorithm::ES384 => Scheme::Other(&sig::ECDSA_P384_SHA384_FIXED),
        Algorithm::EdDSA => Scheme::Other(&sig::ED25519),
        _ => return None,
    })
}

fn new_verifier(alg: &Algorithm, key: &DecodingKey) -> Result<Box<dyn JwtVerifier>, Error> {
    if scheme(*alg).is_none() || key.family() != alg.family() {
        return Err(ErrorKind::InvalidAlgorithm.into());
    }
    Ok(Box::new(Verifier {
        alg: *alg,
        key: key.clone(),
    }))
}

impl jsig::Verifier<Vec<u8>> for Verifier {
    fn verify(&self, msg: &[u8], signature: &Vec<u8>) -> Result<(), jsig::Error> {
        match (scheme(self.alg), self.key.kind()) {
            (Some(Scheme::Rsa(params)), DecodingKeyKind::RsaModulusExponent { n, e }) => {
                sig::RsaPublicKeyComponents { n, e }
                    .verify(params, msg, signature)
                    .map_err(|_| jsig::Error::new())
            }
            (Some(Scheme::Rsa(params)), DecodingKeyKind::SecretOrDer(der)) => {
                sig::UnparsedPublicKey::new(params, der)
                    .verify(msg, signature)
                    .map_err(|_| jsig::Error::new())
            }
            (Some(Scheme::Other(alg)), DecodingKeyKind::SecretOrDer(point)) => {
                sig::UnparsedPublicKey::new(alg, point)
                    .verify(msg, signature)
                    .map_err(|_| jsig::Error::new())
            }
            _ => Err(jsig::Error::new()),
        }
    }
}

impl JwtVerifier for Verifier {
    fn algorithm(&self) -> Algorithm {
        self.alg
    }
}

/// Signs with a PKCS#8 (or, for RSA, PKCS#1) DER private key.
struct Signer {
    alg: Algorithm,
    der: Vec<u8>,
}

fn new_signer(alg: &Algorithm, key: &EncodingKey) -> Result<Box<dyn JwtSigner>, Error> {
    match alg {
        Algorithm::RS256
        | Algorithm::RS384
        | Algorithm::RS512
        | Algorithm::PS256
        | Algorithm::PS384
        | Algorithm::PS512
        | Algorithm::ES256
        | Algorithm::ES384 => Ok(Box::new(Signer {
            alg: *alg,
            der: key.as_bytes().to_vec(),
        })),
        _ => Err(ErrorKind::InvalidAlgorithm.into()),
    }
}

impl jsig::Signer<Vec<u8>> for Signer {
    fn try_sign(&self, msg: &[u8]) -> Result<Vec<u8>, jsig::Error> {
        let rng = ring::rand::SystemRandom::new();
        let ecdsa = |alg: &'static sig::EcdsaSigningAlgorithm| {
            let pair = sig::EcdsaKeyPair::from_pkcs8(alg, &self.der, &rng)
                .map_err(|_| jsig::Error::new())?;
            pair.sign(&rng, msg)
                .map(|s| s.as_ref().to_vec())
                .map_err(|_| jsig::Error::new())
        };
        let padding: &'static dyn sig::RsaEncoding = match self.alg {
            Algorithm::ES256 => return ecdsa(&sig::ECDSA_P256_SHA256_FIXED_SIGNING),
            Algorithm::ES384 => return ecdsa(&sig::ECDSA_P384_SHA384_FIXED_SIGNING),
            Algorithm::RS256 => &sig::RSA_PKCS1_SHA256,
            Algorithm::RS384 => &sig::RSA_PKCS1_SHA384,
            Algorithm::RS512 => &sig::RSA_PKCS1_SHA512,
            Algorithm::PS256 => &sig::RSA_PSS_SHA256,
            Algorithm::PS384 => &sig::RSA_PSS_SHA384,
            Algorithm::PS512 => &sig::RSA_PSS_SHA512,
            _ => return Err(jsig::Error::new()),
        };
        let pair = sig::RsaKeyPair::from_pkcs8(&self.der)
            .or_else(|_| sig::RsaKeyPair::from_der(&self.der))
            .map_err(|_| jsig::Error::new())?;
        let mut out = vec![0; pair.public().modulus_len()];
        pair.sign(padding, &rng, msg, &mut out)
            .map_err(|_| jsig::Error::new())?;
        Ok(out)
    }
}

impl JwtSigner for Signer {
    fn algorithm(&self) -> Algorithm {
        self.alg
    }
}

/// The curve an ES algorithm signs on, for JWK checks.
pub(super) fn curve_of(alg: Algorithm) -> Option<EllipticCurve> {
    match alg {
        Algorithm::ES256 => Some(EllipticCurve::P256),
        Algorithm::ES384 => Some(EllipticCurve::P384),
        Algorithm::EdDSA => Some(EllipticCurve::Ed25519),
        _ => None,
    }
}
