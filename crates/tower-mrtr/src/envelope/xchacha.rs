//! XChaCha20-Poly1305, as draft-irtf-cfrg-xchacha-03 and libsodium's
//! `crypto_aead_xchacha20poly1305_ietf` define it: HChaCha20 of the key and the nonce's first 16
//! bytes is a subkey, under which ChaCha20-Poly1305 (RFC 8439) runs with the 12-byte nonce
//! `0x00000000 || the nonce's last 8 bytes`.
//!
//! HChaCha20 is the `chacha20` crate's; ChaCha20-Poly1305 is ring's (BoringSSL's assembly, chosen
//! by runtime CPU detection), which `rustls` uses for TLS. The same bytes as the
//! `chacha20poly1305` crate's `XChaCha20Poly1305`, which the tests check.

use chacha20::{R20, hchacha};
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};

use super::{NONCE_LEN, TAG_LEN};
use crate::keyring::Key;

/// The ChaCha20-Poly1305 key and nonce for one message under `key` and the extended `nonce`.
fn subkey(key: &Key, nonce: &[u8; NONCE_LEN]) -> Option<(LessSafeKey, Nonce)> {
    let (head, tail) = nonce.split_at(16);
    let head: &[u8; 16] = head.try_into().ok()?;
    let mut subkey = hchacha::<R20>(key.bytes().into(), head.into());
    let cipher = UnboundKey::new(&CHACHA20_POLY1305, &subkey)
        .ok()
        .map(LessSafeKey::new);
    // Our copy of the subkey is wiped; ring keeps its own in `cipher`, which it does not wipe.
    zeroize::Zeroize::zeroize(&mut subkey[..]);
    let mut ietf_nonce = [0u8; 12];
    ietf_nonce[4..].copy_from_slice(tail);
    Some((cipher?, Nonce::assume_unique_for_key(ietf_nonce)))
}

/// Encrypts `in_out` in place and returns the tag; `None` only for a message beyond the cipher's
/// limit (256 GiB).
pub(super) fn seal_in_place(
    key: &Key,
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    in_out: &mut [u8],
) -> Option<[u8; TAG_LEN]> {
    let (cipher, nonce) = subkey(key, nonce)?;
    let tag = cipher
        .seal_in_place_separate_tag(nonce, Aad::from(aad), in_out)
        .ok()?;
    tag.as_ref().try_into().ok()
}

/// Authenticates and decrypts `in_out` (ciphertext then tag) in place and returns the plaintext,
/// or `None` if authentication fails (ring then zeroes what it decrypted).
pub(super) fn open_in_place<'a>(
    key: &Key,
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    in_out: &'a mut [u8],
) -> Option<&'a mut [u8]> {
    let (cipher, nonce) = subkey(key, nonce)?;
    cipher.open_in_place(nonce, Aad::from(aad), in_out).ok()
}

#[cfg(test)]
mod tests {
    use chacha20poly1305::aead::{Aead, KeyInit, Payload};
    use chacha20poly1305::{XChaCha20Poly1305, XNonce};
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Byte for byte the `chacha20poly1305` crate's XChaCha20-Poly1305, both ways, at
        /// lengths on both sides of the block and vector boundaries of either implementation.
        #[test]
        fn is_the_chacha20poly1305_crates(
            key in any::<[u8; 32]>(),
            nonce in any::<[u8; NONCE_LEN]>(),
            aad in proptest::collection::vec(any::<u8>(), 0..200),
            message in proptest::collection::vec(any::<u8>(), 0..1100),
            flip in any::<u16>(),
        ) {
            let reference = XChaCha20Poly1305::new(&key.into());
            let expected = reference
                .encrypt(&XNonce::from(nonce), Payload { msg: &message, aad: &aad })
                .unwrap();
            let key = Key::from_bytes(key);
            let mut sealed = message.clone();
            let tag = seal_in_place(&key, &nonce, &aad, &mut sealed).unwrap();
            sealed.extend_from_slice(&tag);
            prop_assert_eq!(&sealed, &expected);

            let mut opened = expected.clone();
            prop_assert_eq!(open_in_place(&key, &nonce, &aad, &mut opened).unwrap(), &message[..]);

            let mut tampered = expected.clone();
            let bit = usize::from(flip) % (tampered.len() * 8);
            tampered[bit / 8] ^= 1 << (bit % 8);
            let refused = reference.decrypt(&XNonce::from(nonce), Payload { msg: &tampered, aad: &aad });
            prop_assert!(refused.is_err());
            prop_assert!(open_in_place(&key, &nonce, &aad, &mut tampered).is_none());
            // ring zeroes what it decrypted before it found the tag wrong.
            prop_assert!(tampered[..tampered.len() - TAG_LEN].iter().all(|&b| b == 0));
        }
    }
}
