//! Small secrets shimgate keeps in files of their own (the proxy identity
//! key, the admin token): 32 random bytes written as hex, readable by the
//! owner only, written to a temporary file and renamed so a crash never
//! leaves half a secret.
//!
//! "Owner only" per OS (DESIGN §10): on Unix mode 0600, set at creation and
//! checked by its bits. On Windows a file takes the ACL of its folder, and
//! the user's profile folder (where the default state dir,
//! `%LOCALAPPDATA%\shimgate`, lies) grants the user, SYSTEM and the
//! administrators alone; shimgate reads no ACL itself (that needs the Win32
//! security API, unsafe code this crate forbids), so a secret outside the
//! profile folder is reported as possibly readable by others, and `serve`
//! warns with the file's name.

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

/// Whether others than the owner may read `file`: its mode says so (Unix).
#[cfg(unix)]
pub fn readable_by_others(file: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(file).is_ok_and(|m| m.permissions().mode() & 0o077 != 0)
}

/// Whether others than the owner may read `file`: it lies outside the
/// user's profile folder, whose ACL keeps other users out (Windows).
#[cfg(windows)]
pub fn readable_by_others(file: &Path) -> bool {
    match dirs::home_dir() {
        Some(profile) => !is_inside(&crate::config::paths::shown(file), &profile),
        None => true,
    }
}

/// Whether `file` lies inside `folder`, compared case-insensitively as
/// Windows compares paths.
#[cfg(windows)]
fn is_inside(file: &Path, folder: &Path) -> bool {
    let lower = |p: &Path| p.display().to_string().to_lowercase();
    let (file, folder) = (lower(file), lower(folder));
    file.strip_prefix(folder.trim_end_matches('\\'))
        .is_some_and(|rest| rest.starts_with('\\'))
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

    /// A secret in the profile folder is the user's alone; one outside it
    /// (Wine maps the Linux root to `Z:\`) is not vouched for.
    #[cfg(windows)]
    #[test]
    fn on_windows_a_secret_outside_the_profile_folder_is_reported() {
        let profile = dirs::home_dir().unwrap();
        let inside = profile
            .join("AppData")
            .join("Local")
            .join("shimgate-test")
            .join("secret");
        write(&inside, "abc").unwrap();
        assert!(!readable_by_others(&inside));
        std::fs::remove_dir_all(inside.parent().unwrap()).unwrap();
        let outside = Path::new(r"Z:\tmp\secret");
        assert!(readable_by_others(outside));
        assert!(!is_inside(
            Path::new(r"C:\users\rootx\a"),
            Path::new(r"C:\users\root")
        ));
        assert!(is_inside(
            Path::new(r"C:\Users\Root\a"),
            Path::new(r"c:\users\root")
        ));
    }
}
