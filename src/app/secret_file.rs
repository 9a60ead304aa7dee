//! Small secrets shimgate keeps in files of their own (the proxy identity
//! key, the admin token): 32 random bytes written as hex, readable by the
//! owner only, written to a temporary file and renamed so a crash never
//! leaves half a secret.
//!
//! What "owner only" means on each OS is [`crate::os`]'s: mode 0600 on
//! Unix; on Windows the ACL of the folder, so a secret outside the user's
//! profile folder is reported as possibly readable by others, and `serve`
//! warns with the file's name.

use std::path::Path;

use crate::os;

/// 32 fresh random bytes.
pub fn random_bytes() -> std::io::Result<[u8; 32]> {
    let mut key = [0u8; 32];
    getrandom::getrandom(&mut key).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(key)
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `text` and a newline to `file` (its folder created when
/// missing), readable by its owner only, replacing what was there
/// ([`os::write_owner_only`]).
pub fn write(file: &Path, text: &str) -> std::io::Result<()> {
    os::write_owner_only(file, format!("{text}\n").as_bytes())
}

/// Whether others than the owner may read `file`
/// ([`os::readable_by_others`]).
pub fn readable_by_others(file: &Path) -> bool {
    os::readable_by_others(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_written_as_hex_and_a_newline() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("sub/secret");
        write(&file, "abc").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "abc\n");
        assert_eq!(hex(&[0, 15, 255]), "000fff");
        assert_eq!(random_bytes().unwrap().len(), 32);
    }
}
