//! The public key newtype: a value of this type is always a well-formed key.

use std::fmt;

use http::HeaderName;

/// The header that carries the public key (`X-public-key`).
pub const PUBLIC_KEY_HEADER: HeaderName = HeaderName::from_static("x-public-key");

/// Longest accepted public key, prefix included.
pub const MAX_KEY_LEN: usize = 128;

/// A public key: `pk_` followed by 1 to 125 characters from `[A-Za-z0-9_-]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublicKey(String);

impl PublicKey {
    /// Parses a key, refusing anything that is not `pk_` + `[A-Za-z0-9_-]{1,125}`.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let Some(rest) = raw.strip_prefix("pk_") else {
            return Err("a public key starts with pk_".into());
        };
        if rest.is_empty() {
            return Err("a public key has at least one character after pk_".into());
        }
        if raw.len() > MAX_KEY_LEN {
            return Err(format!(
                "a public key is at most {MAX_KEY_LEN} characters long"
            ));
        }
        if !rest
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err("a public key holds only letters, digits, _ and - after pk_".into());
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_well_formed_keys() {
        for k in [
            "pk_a",
            "pk_live_ABC-123",
            &format!("pk_{}", "x".repeat(125)),
        ] {
            assert_eq!(
                PublicKey::parse(k).map(|k| k.to_string()),
                Ok(k.to_string())
            );
        }
    }

    #[test]
    fn refuses_malformed_keys() {
        for k in [
            "",
            "pk_",
            "pk",
            "sk_abc",
            "PK_abc",
            "pk_a b",
            "pk_é",
            "pk_a\n",
            &format!("pk_{}", "x".repeat(126)),
        ] {
            assert!(PublicKey::parse(k).is_err(), "{k:?} was accepted");
        }
    }
}
