//! Signed checkpoints of the audit chains.
//!
//! The chain makes an edited or removed row in the middle detectable, and the stored chain
//! head makes a removed tail detectable — unless whoever removed it rewrote the head too.
//! A checkpoint is the deployment's Ed25519 signature over one tenant's head at one moment
//! (tenant, seq, row hash, time): the row it names must still be there, with that hash,
//! and nobody without the key (kept outside the database) can sign a shorter chain's head.
//! Checkpoints are exported as JSON lines for keeping off the host, and verification takes
//! such an export too: deleting checkpoints from the database then hides nothing.

use chrono::{DateTime, Utc};
pub use ed25519_dalek::VerifyingKey;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier};
use serde::{Deserialize, Serialize};
use toolgate_core::TenantId;

/// One signed chain head.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub tenant: TenantId,
    pub seq: i64,
    pub row_hash: String,
    /// [`key_id`] of the key that signed it.
    pub key_id: String,
    /// Hex Ed25519 signature over [`Checkpoint::message`].
    pub signature: String,
    pub signed_at: DateTime<Utc>,
}

/// A checkpoint as a row: `(seq, row_hash, key_id, signature, signed_at)`.
pub(crate) type CheckpointRow = (i64, String, String, String, DateTime<Utc>);

impl Checkpoint {
    pub(crate) fn from_row(tenant: TenantId, row: CheckpointRow) -> Self {
        let (seq, row_hash, key_id, signature, signed_at) = row;
        Checkpoint {
            tenant,
            seq,
            row_hash,
            key_id,
            signature,
            signed_at,
        }
    }

    /// The signed bytes: a versioned, line-separated text of the fields.
    pub fn message(&self) -> String {
        signed_text(self.tenant, self.seq, &self.row_hash, self.signed_at)
    }

    /// Whether `key` signed this checkpoint.
    pub fn is_signed_by(&self, key: &VerifyingKey) -> bool {
        let Some(bytes) = hex::decode(&self.signature)
            .ok()
            .and_then(|b| <[u8; 64]>::try_from(b).ok())
        else {
            return false;
        };
        self.key_id == key_id(key)
            && key
                .verify(self.message().as_bytes(), &Signature::from_bytes(&bytes))
                .is_ok()
    }
}

fn signed_text(tenant: TenantId, seq: i64, row_hash: &str, at: DateTime<Utc>) -> String {
    format!(
        "toolgate-audit-checkpoint/v1\n{tenant}\n{seq}\n{row_hash}\n{}",
        at.timestamp_micros()
    )
}

/// A short name for a public key: the first 16 hex digits of its SHA-256.
pub fn key_id(key: &VerifyingKey) -> String {
    hex::encode(&toolgate_core::sha256(key.as_bytes())[..8])
}

/// A public key from its 64 hex digits.
pub fn parse_public_key(hex_digits: &str) -> Option<VerifyingKey> {
    let bytes: [u8; 32] = hex::decode(hex_digits.trim()).ok()?.try_into().ok()?;
    VerifyingKey::from_bytes(&bytes).ok()
}

/// The deployment's signing key.
#[derive(Clone)]
pub struct AuditSigner(SigningKey);

impl std::fmt::Debug for AuditSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AuditSigner").field(&self.key_id()).finish()
    }
}

impl AuditSigner {
    /// The key whose secret seed is `seed`.
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        Self(SigningKey::from_bytes(seed))
    }

    pub fn public_key(&self) -> VerifyingKey {
        self.0.verifying_key()
    }

    pub fn public_key_hex(&self) -> String {
        hex::encode(self.public_key().as_bytes())
    }

    pub fn key_id(&self) -> String {
        key_id(&self.public_key())
    }

    /// Signs `tenant`'s head at `seq` with `row_hash`, now.
    pub fn sign(&self, tenant: TenantId, seq: i64, row_hash: &str) -> Checkpoint {
        // Microseconds, as stored: the signed text must survive a round trip.
        let now = Utc::now();
        let signed_at = DateTime::from_timestamp_micros(now.timestamp_micros()).unwrap_or(now);
        let signature = self
            .0
            .sign(signed_text(tenant, seq, row_hash, signed_at).as_bytes());
        Checkpoint {
            tenant,
            seq,
            row_hash: row_hash.to_owned(),
            key_id: self.key_id(),
            signature: hex::encode(signature.to_bytes()),
            signed_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_verifies_with_its_key_only_and_not_once_changed() {
        let signer = AuditSigner::from_seed(&[7; 32]);
        let other = AuditSigner::from_seed(&[8; 32]);
        let tenant = TenantId::new();
        let cp = signer.sign(tenant, 5, &"ab".repeat(32));
        assert!(cp.is_signed_by(&signer.public_key()));
        assert!(!cp.is_signed_by(&other.public_key()));
        let round_trip: Checkpoint =
            serde_json::from_str(&serde_json::to_string(&cp).expect("json")).expect("json");
        assert!(round_trip.is_signed_by(&signer.public_key()));
        for forged in [
            Checkpoint {
                seq: 4,
                ..cp.clone()
            },
            Checkpoint {
                row_hash: "cd".repeat(32),
                ..cp.clone()
            },
            Checkpoint {
                tenant: TenantId::new(),
                ..cp.clone()
            },
            Checkpoint {
                signature: "00".repeat(64),
                ..cp.clone()
            },
            Checkpoint {
                signature: "zz".into(),
                ..cp.clone()
            },
        ] {
            assert!(!forged.is_signed_by(&signer.public_key()), "{forged:?}");
        }
        assert_eq!(
            parse_public_key(&signer.public_key_hex()),
            Some(signer.public_key())
        );
    }
}
