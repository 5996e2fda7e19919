//! Identifiers that are random by design: a row's ULID, a KSUID, a cuid, a MongoDB ObjectId, a
//! TypeID, a content hash in subresource-integrity form. They are as random as a key, so the
//! rules that judge a token by its randomness alone (a service's name near a token, a token next
//! to a secret word) ask first whether the token is one of these. Each shape is checked by what
//! it encodes (a creation time between 2012 and 2036), not by its look alone: a random key has
//! the shape of a ULID once in many, and the time inside it only by chance.

/// Seconds since the Unix epoch of 2012-01-01 and of 2036-01-01: the creation times an id made
/// by software in use can carry.
const EARLIEST: u64 = 1_325_376_000;
const LATEST: u64 = 2_082_758_400;

fn plausible_seconds(s: u64) -> bool {
    (EARLIEST..LATEST).contains(&s)
}

/// Whether `token` is an identifier that is random by design (see the module docs).
pub(super) fn random_by_design(token: &str) -> bool {
    let token = token.trim_end_matches('=');
    ulid(token)
        || typeid(token)
        || ksuid(token)
        || cuid(token)
        || object_id(token)
        || content_hash(token)
        || opencode_id(token)
}

/// An opencode id (`ses_`, `msg_`, `prt_` …): a short prefix, 12 hex digits of time and count,
/// 14 base62 characters.
fn opencode_id(token: &str) -> bool {
    let Some((prefix, rest)) = token.split_once('_') else {
        return false;
    };
    (2..=5).contains(&prefix.len())
        && prefix.bytes().all(|b| b.is_ascii_lowercase())
        && rest.len() == 26
        && rest[..12]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && rest[12..].bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A ULID: 26 characters of Crockford's base32 (either case), the first 10 a time in
/// milliseconds.
fn ulid(token: &str) -> bool {
    const CROCKFORD: &str = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    if token.len() != 26 {
        return false;
    }
    let mut ms: u64 = 0;
    for (i, b) in token.bytes().enumerate() {
        let Some(v) = CROCKFORD.find(char::from(b.to_ascii_uppercase())) else {
            return false;
        };
        if i < 10 {
            ms = ms * 32 + v as u64;
        }
    }
    plausible_seconds(ms / 1000)
}

/// A TypeID (`user_01h455vb4pex5vsknk084sn02q`) or any `prefix_` before a ULID.
fn typeid(token: &str) -> bool {
    token
        .rsplit_once('_')
        .is_some_and(|(prefix, id)| !prefix.is_empty() && ulid(id))
}

/// A KSUID: 27 base62 characters, a 160-bit number whose first 32 bits are seconds since
/// 2014-05-13 (1,400,000,000).
fn ksuid(token: &str) -> bool {
    if token.len() != 27 {
        return false;
    }
    // the number in five 32-bit limbs, most significant first
    let mut limbs = [0u64; 5];
    for b in token.bytes() {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'A'..=b'Z' => b - b'A' + 10,
            b'a'..=b'z' => b - b'a' + 36,
            _ => return false,
        };
        let mut carry = u64::from(digit);
        for limb in limbs.iter_mut().rev() {
            let v = *limb * 62 + carry;
            *limb = v & 0xffff_ffff;
            carry = v >> 32;
        }
        if carry != 0 {
            return false; // past 160 bits: no KSUID
        }
    }
    plausible_seconds(limbs[0] + 1_400_000_000)
}

/// A cuid (version 1): `c`, then 24 lower-case base36 characters, the first 8 a time in
/// milliseconds.
fn cuid(token: &str) -> bool {
    let Some(rest) = token.strip_prefix('c') else {
        return false;
    };
    if rest.len() != 24
        || !rest
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        return false;
    }
    u64::from_str_radix(&rest[..8], 36).is_ok_and(|ms| plausible_seconds(ms / 1000))
}

/// A MongoDB ObjectId: 24 lower-case hex digits, the first 8 a time in seconds.
fn object_id(token: &str) -> bool {
    token.len() == 24
        && token
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && u64::from_str_radix(&token[..8], 16).is_ok_and(plausible_seconds)
}

/// A content hash written with its algorithm: `sha256-<base64>` (subresource integrity),
/// `sha1-…`, `md5-…`.
fn content_hash(token: &str) -> bool {
    ["sha1-", "sha256-", "sha384-", "sha512-", "md5-"]
        .iter()
        .any(|p| token.starts_with(p))
}

/// A nanoid's length and alphabet (21 of `A-Za-z0-9_-`): only a length tells it from a key, so
/// this is asked where nothing but a service's name stands near the token.
pub(super) fn nanoid_like(token: &str) -> bool {
    // with a type prefix of its own (`evt_…`)
    let token = match token.split_once('_') {
        Some((prefix, rest))
            if (2..=8).contains(&prefix.len())
                && prefix.bytes().all(|b| b.is_ascii_lowercase())
                && rest.len() == 21 =>
        {
            rest
        }
        _ => token,
    };
    token.len() == 21
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_encode_a_time_are_recognised() {
        // a ULID of 2023 (either case), and one whose time is far in the future
        assert!(random_by_design("01H5XXK100346Q3D25VT4F5V37"));
        assert!(random_by_design("01h5xxk100346q3d25vt4f5v37"));
        assert!(random_by_design("user_01h5xxk100346q3d25vt4f5v37"));
        assert!(!random_by_design("7ZZZZZZZZZ346Q3D25VT4F5V37"));
        // a KSUID of 2017; a random base62 word of the same length past 160 bits
        assert!(random_by_design("0qjBBoM7jhQXIvzcmgNryJzsmPg"));
        assert!(!random_by_design("zqjBBoM7jhQXIvzcmgNryJzsmPg"));
        // an ObjectId of 2020 and a 24-hex value whose time is before 2012
        assert!(random_by_design("5f5e100036b3216fdaeeb975"));
        assert!(!random_by_design("0a5e100036b3216fdaeeb975"));
        // a cuid of 2021; `c` then random letters whose time is far off
        assert!(random_by_design("ckqij1kowe3p3e2z8iq9y7jzb"));
        assert!(!random_by_design("czzzzzzzze3p3e2z8iq9y7jzb"));
        assert!(random_by_design(
            "sha256-Vq3mZ8pLw0x7Tn2Rb5Kc9Hd4Fg6Js1Ya8Ue3Wi0Po2M="
        ));
        assert!(random_by_design("ses_0c3a91d24ffeQz7LmR2vXk9PbW"));
        assert!(nanoid_like("q7W2_zK9mTpL4xR8-vBn3"));
        assert!(!nanoid_like("q7W2_zK9mTpL4xR8-vBn3Y"));
    }
}
