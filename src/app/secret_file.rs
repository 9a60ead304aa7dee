//! Small secrets shimgate keeps in files of their own (the proxy identity
//! key, the admin token): 32 random bytes written as hex, readable by the
//! owner only (mode 0600), written to a temporary file and renamed so a
//! crash never leaves half a secret.

use std::io::Write as _;
use std::path::Path;

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
/// missing), readable by its owner only, replacing what was there.
pub fn write(file: &Path, text: &str) -> std::io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("secret");
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut f = options.open(&tmp)?;
    f.write_all(format!("{text}\n").as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, file)
}

/// Whether others than the owner may read `file` (its mode says so).
pub fn readable_by_others(file: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::metadata(file).is_ok_and(|m| m.permissions().mode() & 0o077 != 0)
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_written_for_its_owner_only() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("sub/secret");
        write(&file, "abc").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "abc\n");
        assert!(!readable_by_others(&file));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert_eq!(hex(&[0, 15, 255]), "000fff");
    }
}
