//! The savings file in the state dir: the book ([`super::book::Book`])
//! outlives a restart. One file per config file, named as the route state
//! file is (`savings-<16 hex digits of the SHA-256 of the config's
//! path>.json`, `savings.json` for built-in defaults), so two instances on
//! one state dir keep their own.
//!
//! Read once at start; a file that cannot be read or is not a savings file
//! is a warning, never a failed start: it is moved aside (`….unreadable`,
//! so the next save does not destroy what a person may want back) and the
//! book starts empty. Written atomically (a temporary file, then a rename)
//! by one task at most once a second, and once more at shutdown; `[savings]
//! file = false` reads and writes nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::book::{Book, ConversationFigures, Figures, Older, Ratio};
use crate::app::state_file::{self, FileReport};
use crate::clock::epoch_ms;

/// The file's version: a file of another is not read (moved aside).
pub const VERSION: u32 = 1;

/// The file's name for the config loaded from `config` (`None`: built-in
/// defaults).
pub fn file_name(config: Option<&Path>) -> String {
    state_file::name_for("savings", config)
}

/// The file as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SavingsFile {
    version: u32,
    saved_at_ms: u64,
    #[serde(default)]
    ratios: BTreeMap<String, Ratio>,
    /// `YYYY-MM-DD` (a day in the `[ordering] zone`) → its figures.
    #[serde(default)]
    days: BTreeMap<String, Figures>,
    #[serde(default)]
    conversations: Vec<FileConversation>,
    #[serde(default)]
    older: Older,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FileConversation {
    shim: String,
    id: String,
    #[serde(flatten)]
    figures: ConversationFigures,
}

/// The book as the file holds it.
pub fn to_bytes(book: &Book, now: SystemTime) -> Result<Vec<u8>, String> {
    let mut conversations: Vec<_> = book
        .conversations
        .iter()
        .map(|((shim, id), c)| FileConversation {
            shim: shim.clone(),
            id: id.clone(),
            figures: *c,
        })
        .collect();
    conversations.sort_by_key(|c| std::cmp::Reverse(c.figures.last_ms));
    let file = SavingsFile {
        version: VERSION,
        saved_at_ms: epoch_ms(now),
        ratios: book.ratios.clone(),
        days: book.days.iter().map(|(d, f)| (d.to_string(), *f)).collect(),
        conversations,
        older: book.older,
    };
    serde_json::to_vec_pretty(&file).map_err(|e| e.to_string())
}

/// The book a file's bytes hold.
pub fn from_bytes(bytes: &[u8]) -> Result<Book, String> {
    let file: SavingsFile =
        serde_json::from_slice(bytes).map_err(|e| format!("not a savings file: {e}"))?;
    if file.version != VERSION {
        return Err(format!("version {} is not {VERSION}", file.version));
    }
    let mut book = Book {
        ratios: file.ratios,
        older: file.older,
        ..Book::default()
    };
    for (day, f) in file.days {
        let day = day
            .parse::<NaiveDate>()
            .map_err(|e| format!("day {day:?}: {e}"))?;
        book.days.insert(day, f);
    }
    for c in file.conversations {
        book.conversations.insert((c.shim, c.id), c.figures);
    }
    Ok(book)
}

/// Where the book is kept and how that went.
#[derive(Debug)]
pub struct Store {
    /// `None`: `[savings] file = false`.
    path: Option<PathBuf>,
    report: FileReport,
}

impl Store {
    /// Opens the file at `path` (none: off) and reads the book it holds.
    pub fn open(path: Option<PathBuf>) -> (Store, Book) {
        let report = FileReport::new("the savings file");
        let mut book = Book::default();
        if let Some(path) = &path {
            match std::fs::read(path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    report.started("absent", None, None)
                }
                Err(e) => unreadable(path, e.to_string(), &report),
                Ok(bytes) => match from_bytes(&bytes) {
                    Ok(b) => {
                        book = b;
                        report.started("loaded", None, None);
                    }
                    Err(why) => unreadable(path, why, &report),
                },
            }
        }
        (Store { path, report }, book)
    }

    /// Whether there is a file to write.
    pub fn is_on(&self) -> bool {
        self.path.is_some()
    }

    /// Writes `bytes` (off the runtime's threads).
    pub async fn write(&self, bytes: Result<Vec<u8>, String>, at: SystemTime) {
        let Some(path) = self.path.clone() else {
            return;
        };
        let written = match bytes {
            Ok(bytes) => {
                tokio::task::spawn_blocking(move || crate::os::replace_atomically(&path, &bytes))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()))
            }
            Err(e) => Err(e),
        };
        self.report.wrote(written, at);
    }

    /// The `/status` `savings.file` section.
    pub fn status(&self) -> Value {
        let mut m = Map::new();
        m.insert(
            "path".into(),
            json!(self.path.as_ref().map(|p| p.display().to_string())),
        );
        m.extend(self.report.fields());
        Value::Object(m)
    }
}

/// A file that cannot be used: said once, and moved aside so the next
/// save does not replace it unseen.
fn unreadable(path: &Path, why: String, report: &FileReport) {
    let aside = path.with_extension("json.unreadable");
    let kept = match std::fs::rename(path, &aside) {
        Ok(()) => format!("; kept as {}", aside.display()),
        Err(_) => String::new(),
    };
    let problem = format!("{why}{kept}");
    tracing::warn!(path = %path.display(), "cannot use the savings file ({problem}); starting an empty one");
    report.started("unreadable", Some(problem), None);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_book_reads_back_as_it_was_written() {
        let mut book = Book::default();
        let day = NaiveDate::from_ymd_opt(2026, 12, 6).unwrap();
        let f = Figures {
            calls: 2,
            agent_tokens: 900,
            sent_tokens: 400,
            side_calls: 1,
            side_tokens: 120,
            ..Figures::default()
        };
        book.days.insert(day, f);
        book.conversations.insert(
            ("trae".into(), "conv-1".into()),
            ConversationFigures {
                first_ms: 1,
                last_ms: 2,
                figures: f,
            },
        );
        book.older.conversations = 3;
        book.ratios.insert(
            "trae".into(),
            Ratio {
                tokens: 10.0,
                chars: 40.0,
            },
        );
        let bytes = to_bytes(&book, SystemTime::now()).unwrap();
        assert_eq!(from_bytes(&bytes).unwrap(), book);
    }

    #[test]
    fn a_corrupt_or_foreign_file_is_moved_aside_and_the_book_starts_empty() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("savings.json");
        for bad in [
            "{ not json".to_string(),
            json!({"version": 99, "savedAtMs": 1}).to_string(),
            json!({"version": 1, "savedAtMs": 1, "days": {"2026-13-40": {}}}).to_string(),
            json!({"version": 1, "savedAtMs": 1, "days": {"2026-12-06": {"sentTokens": -4}}})
                .to_string(),
        ] {
            std::fs::write(&path, &bad).unwrap();
            let (store, book) = Store::open(Some(path.clone()));
            assert_eq!(book, Book::default(), "{bad}");
            let s = store.status();
            assert_eq!(s["atStart"], "unreadable", "{bad}");
            assert!(s["problem"].as_str().unwrap().contains("kept as"), "{s}");
            assert!(!path.exists());
            assert_eq!(
                std::fs::read_to_string(path.with_extension("json.unreadable")).unwrap(),
                bad
            );
        }
        let (store, _) = Store::open(Some(path));
        assert_eq!(store.status()["atStart"], "absent");
        let (store, _) = Store::open(None);
        assert_eq!(store.status()["atStart"], "off");
    }

    #[test]
    fn each_config_has_its_own_file() {
        let a = file_name(Some(Path::new("/home/u/a/shimgate.toml")));
        assert!(
            a.starts_with("savings-") && a.ends_with(".json") && a.len() == 29,
            "{a}"
        );
        assert_ne!(a, file_name(Some(Path::new("/home/u/b/shimgate.toml"))));
        assert_eq!(file_name(None), "savings.json");
    }
}
