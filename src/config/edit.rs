//! Edits of the user's config file as a TOML document (`toml_edit`, the
//! way `cargo add` edits `Cargo.toml`): the panel's "move up/down" and
//! "adopt the measured order" rewrite one shim's route order, its mode
//! switch `[ordering] mode`; every comment, key order and layout stays, and
//! only the touched keys change.
//!
//! Pure text in, text out: the admin endpoint reads the file, checks the
//! result loads as a config, writes it atomically and reloads.

use toml_edit::{DocumentMut, Item, Value};

use super::OrderingMode;

/// Why a file cannot be edited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditError {
    /// The request itself is wrong (not a permutation of the names): 400.
    Bad(String),
    /// The file cannot take the edit as it is written: 409.
    Conflict(String),
}

impl std::fmt::Display for EditError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EditError::Bad(m) | EditError::Conflict(m) => f.write_str(m),
        }
    }
}

fn parse(text: &str) -> Result<DocumentMut, EditError> {
    text.parse::<DocumentMut>()
        .map_err(|e| EditError::Conflict(format!("the config file does not parse as TOML: {e}")))
}

/// Where a shim's routes are written: its section and key
/// (`shims.trae.routes`, `shims.qoder.model_routes`).
fn place(shim: &str) -> (&str, &'static str) {
    match crate::registry::find(shim) {
        Some(f) => (f.section(), f.routes_key),
        None => (shim, "routes"),
    }
}

/// The route names of the shim's routes list (`[[shims.SHIM.routes]]`,
/// or its key in its host's section) in file order.
pub fn route_names(text: &str, shim: &str) -> Result<Vec<String>, EditError> {
    let doc = parse(text)?;
    let (section, key) = place(shim);
    let names = match doc
        .get("shims")
        .and_then(|s| s.get(section))
        .and_then(|s| s.get(key))
    {
        Some(Item::ArrayOfTables(aot)) => aot
            .iter()
            .map(|t| t.get("name").and_then(Item::as_str).map(str::to_owned))
            .collect::<Option<Vec<_>>>(),
        Some(Item::Value(Value::Array(arr))) => arr
            .iter()
            .map(|v| {
                v.as_inline_table()?
                    .get("name")?
                    .as_str()
                    .map(str::to_owned)
            })
            .collect(),
        _ => None,
    };
    names.ok_or_else(|| {
        EditError::Conflict(format!(
            "the config file has no [[shims.{section}.{key}]] list with a name on every route"
        ))
    })
}

/// Puts `shim`'s routes in `order` (every configured name once).
pub fn reorder_routes(text: &str, shim: &str, order: &[String]) -> Result<String, EditError> {
    let current = route_names(text, shim)?;
    let mut sorted_current = current.clone();
    let mut sorted_order = order.to_vec();
    sorted_current.sort();
    sorted_order.sort();
    if sorted_current != sorted_order {
        return Err(EditError::Bad(format!(
            "the order must name every route of the {shim} shim once: {} (got {})",
            current.join(", "),
            order.join(", ")
        )));
    }
    let mut doc = parse(text)?;
    let (section, key) = place(shim);
    let place = |name: &str| order.iter().position(|n| n == name).unwrap_or(usize::MAX);
    match doc["shims"][section].get_mut(key) {
        Some(Item::ArrayOfTables(aot)) => {
            // Each table keeps its comments; the slots (document
            // positions) stay where they were and take the tables in
            // the new order.
            let mut tables: Vec<toml_edit::Table> = aot.iter().cloned().collect();
            let positions: Vec<Option<usize>> = tables.iter().map(|t| t.position()).collect();
            tables.sort_by_key(|t| place(t.get("name").and_then(Item::as_str).unwrap_or("")));
            aot.clear();
            for (mut table, position) in tables.into_iter().zip(positions) {
                if let Some(p) = position {
                    table.set_position(p);
                }
                aot.push(table);
            }
        }
        Some(Item::Value(Value::Array(arr))) => {
            let mut values: Vec<Value> = arr.iter().cloned().collect();
            let decor: Vec<toml_edit::Decor> = values.iter().map(|v| v.decor().clone()).collect();
            values.sort_by_key(|v| {
                place(
                    v.as_inline_table()
                        .and_then(|t| t.get("name")?.as_str())
                        .unwrap_or(""),
                )
            });
            arr.clear();
            for (mut v, d) in values.into_iter().zip(decor) {
                *v.decor_mut() = d;
                arr.push_formatted(v);
            }
        }
        _ => return Err(EditError::Conflict(format!("no routes list for {shim}"))),
    }
    Ok(doc.to_string())
}

/// Sets `[ordering] mode` (adding the key, or the table, when absent).
pub fn set_mode(text: &str, mode: OrderingMode) -> Result<String, EditError> {
    let mut doc = parse(text)?;
    let ordering = doc
        .entry("ordering")
        .or_insert_with(toml_edit::table)
        .as_table_like_mut()
        .ok_or_else(|| {
            EditError::Conflict("[ordering] in the config file is not a table".into())
        })?;
    match ordering.get_mut("mode") {
        Some(Item::Value(old)) => {
            let decor = old.decor().clone();
            let mut new = Value::from(mode.as_str());
            *new.decor_mut() = decor;
            *old = new;
        }
        _ => {
            ordering.insert("mode", toml_edit::value(mode.as_str()));
        }
    }
    Ok(doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"# my shimgate, hand-written
[ordering]
mode = "auto"   # auto until the new channel proves itself

[retry]
max_retries = 3

# the cheap one first
[[shims.qoder.routes]]
name = "cheap"
url = "http://cheap.example"

# the backup, slower
[[shims.qoder.routes]]
name = "backup"   # keep
url = "http://backup.example"

[[shims.qoder.routes]]
name = "third"
url = "http://third.example"

[[shims.trae.routes]]
name = "t1"
url = "http://t1.example"
"#;

    fn names(order: &[&str]) -> Vec<String> {
        order.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_reorder_moves_each_route_with_its_comments_and_touches_nothing_else() {
        let out = reorder_routes(FILE, "qoder", &names(&["backup", "cheap", "third"])).unwrap();
        let expected = FILE.replace(
            "# the cheap one first\n[[shims.qoder.routes]]\nname = \"cheap\"\nurl = \"http://cheap.example\"\n\n# the backup, slower\n[[shims.qoder.routes]]\nname = \"backup\"   # keep\nurl = \"http://backup.example\"\n",
            "# the backup, slower\n[[shims.qoder.routes]]\nname = \"backup\"   # keep\nurl = \"http://backup.example\"\n\n# the cheap one first\n[[shims.qoder.routes]]\nname = \"cheap\"\nurl = \"http://cheap.example\"\n",
        );
        assert_eq!(out, expected);
        assert_eq!(
            route_names(&out, "qoder").unwrap(),
            names(&["backup", "cheap", "third"])
        );
        let c = crate::config::Config::from_toml(&out).unwrap();
        assert_eq!(c.shim("qoder").unwrap().routes[0].name, "backup");
        assert_eq!(
            reorder_routes(FILE, "qoder", &names(&["cheap", "backup", "third"])).unwrap(),
            FILE
        );
    }

    #[test]
    fn an_order_that_is_not_a_permutation_is_refused() {
        for bad in [
            vec!["cheap", "backup"],
            vec!["cheap", "backup", "third", "x"],
            vec!["cheap", "cheap", "third"],
        ] {
            assert!(
                matches!(
                    reorder_routes(FILE, "qoder", &names(&bad)),
                    Err(EditError::Bad(_))
                ),
                "{bad:?}"
            );
        }
        assert!(matches!(
            reorder_routes(FILE, "nope", &names(&["a"])),
            Err(EditError::Conflict(_))
        ));
    }

    #[test]
    fn the_model_server_wire_s_routes_are_reordered_in_the_qoder_section() {
        let text = "[shims.qoder]\nlisten = \"127.0.0.1:47001\"\n\n[[shims.qoder.model_routes]]\nname = \"intl\"\nurl = \"https://a\"\n\n[[shims.qoder.model_routes]]\nname = \"cn\"\nurl = \"https://b\"\n";
        assert_eq!(
            route_names(text, "qoderModel").unwrap(),
            names(&["intl", "cn"])
        );
        let out = reorder_routes(text, "qoderModel", &names(&["cn", "intl"])).unwrap();
        assert_eq!(
            route_names(&out, "qoderModel").unwrap(),
            names(&["cn", "intl"])
        );
        let c = crate::config::Config::from_toml(&out).unwrap();
        assert_eq!(c.shim("qoderModel").unwrap().routes[0].name, "cn");
        assert!(
            route_names(text, "qoder").is_err(),
            "the legacy wire has none here"
        );
    }

    #[test]
    fn inline_route_lists_are_reordered_too() {
        let text = "[shims.trae]\nroutes = [\n  { name = \"a\", url = \"http://a\" }, # first\n  { name = \"b\", url = \"http://b\" },\n]\n";
        let out = reorder_routes(text, "trae", &names(&["b", "a"])).unwrap();
        assert_eq!(route_names(&out, "trae").unwrap(), names(&["b", "a"]));
        assert!(crate::config::Config::from_toml(&out).is_ok(), "{out}");
    }

    #[test]
    fn the_mode_is_set_in_place_keeping_its_comment() {
        let out = set_mode(FILE, OrderingMode::Measured).unwrap();
        assert_eq!(
            out,
            FILE.replace("mode = \"auto\"   # auto", "mode = \"measured\"   # auto")
        );
        let bare = "[[shims.trae.routes]]\nname = \"t1\"\nurl = \"http://t1\"\n";
        let out = set_mode(bare, OrderingMode::Manual).unwrap();
        assert!(out.starts_with(bare), "{out}");
        let c = crate::config::Config::from_toml(&out).unwrap();
        assert_eq!(c.ordering.mode, OrderingMode::Manual);
    }
}
