//! Static bearer tokens from a kube-apiserver `--token-auth-file`: CSV lines of
//! `token,user,uid,"group1,group2"`. Lookups compare against every token in constant time.

use super::Identity;
use std::path::Path;
use std::sync::Arc;
use subtle::ConstantTimeEq;

#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("{file}: {source}")]
    Csv { file: String, source: csv::Error },
    #[error("{file}:{line}: {message}")]
    Line {
        file: String,
        line: u64,
        message: String,
    },
}

#[derive(Debug, Clone)]
struct Entry {
    token: Vec<u8>,
    /// With `system:authenticated`, shared by every request that presents the token.
    identity: Arc<Identity>,
}

/// The parsed token file.
#[derive(Debug, Clone, Default)]
pub struct TokenFile {
    entries: Vec<Entry>,
}

impl TokenFile {
    pub fn load(path: &Path) -> Result<Self, TokenFileError> {
        let file = path.display().to_string();
        let data = std::fs::read(path).map_err(|e| TokenFileError::Csv {
            file: file.clone(),
            source: e.into(),
        })?;
        Self::parse(&data, &file)
    }

    /// Parses CSV bytes; `file` names the source in errors.
    pub fn parse(data: &[u8], file: &str) -> Result<Self, TokenFileError> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .comment(Some(b'#'))
            .trim(csv::Trim::All)
            .from_reader(data);
        let mut entries: Vec<Entry> = Vec::new();
        for record in reader.records() {
            let record = record.map_err(|source| TokenFileError::Csv {
                file: file.to_string(),
                source,
            })?;
            let line = record.position().map_or(0, |p| p.line());
            let bad = |message: &str| TokenFileError::Line {
                file: file.to_string(),
                line,
                message: message.to_string(),
            };
            if record.iter().all(str::is_empty) {
                continue;
            }
            if record.len() < 3 {
                return Err(bad("want token,user,uid[,\"group1,group2\"]"));
            }
            let (token, user, uid) = (&record[0], &record[1], &record[2]);
            if token.is_empty() || user.is_empty() {
                return Err(bad("token and user must not be empty"));
            }
            if entries.iter().any(|e| e.token == token.as_bytes()) {
                return Err(bad("duplicate token"));
            }
            let groups = record
                .get(3)
                .map(|g| {
                    g.split(',')
                        .map(str::trim)
                        .filter(|g| !g.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            let mut identity = Identity::new(user, groups);
            identity.uid = (!uid.is_empty()).then(|| uid.to_string());
            entries.push(Entry {
                token: token.as_bytes().to_vec(),
                identity: Arc::new(identity.authenticated()),
            });
        }
        Ok(Self { entries })
    }

    /// The identity of `token`, with `system:authenticated`. Every entry is compared, so timing
    /// does not reveal which matched.
    pub fn lookup(&self, token: &str) -> Option<Arc<Identity>> {
        let mut found = None;
        for entry in &self.entries {
            if bool::from(entry.token.as_slice().ct_eq(token.as_bytes())) {
                found = Some(&entry.identity);
            }
        }
        found.cloned()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apigw_request::AUTHENTICATED;

    #[test]
    fn parses_kube_format() {
        let t = TokenFile::parse(
            b"# comment\ns3cr3t,bob,uid-bob,\"devs,ops\"\nother,carol,,\n\nlast,dave,u3\n",
            "tokens.csv",
        )
        .unwrap();
        assert_eq!(t.len(), 3);
        let bob = t.lookup("s3cr3t").unwrap();
        assert_eq!(bob.user, "bob");
        assert_eq!(bob.uid.as_deref(), Some("uid-bob"));
        assert_eq!(bob.groups, vec!["devs", "ops", AUTHENTICATED]);
        let carol = t.lookup("other").unwrap();
        assert_eq!(carol.uid, None);
        assert_eq!(carol.groups, vec![AUTHENTICATED]);
        assert!(t.lookup("s3cr3").is_none());
        assert!(t.lookup("").is_none());
    }

    #[test]
    fn errors_name_file_and_line() {
        let err = TokenFile::parse(b"a,b,c\nshort,x\n", "t.csv").unwrap_err();
        assert_eq!(
            err.to_string(),
            "t.csv:2: want token,user,uid[,\"group1,group2\"]"
        );
        let err = TokenFile::parse(b"a,b,c\na,d,e\n", "t.csv").unwrap_err();
        assert!(err.to_string().contains("duplicate token"), "{err}");
    }
}
