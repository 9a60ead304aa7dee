//! Problems a run found, by category, with the first few examples of each
//! (a systematic bug repeats thousands of times; the count says how often).

use std::collections::BTreeMap;

/// Examples kept per category.
const EXAMPLES: usize = 5;

/// Findings of one run.
#[derive(Debug, Default, Clone)]
pub struct Findings {
    by: BTreeMap<&'static str, (usize, Vec<String>)>,
}

impl Findings {
    /// Notes one problem.
    pub fn add(&mut self, category: &'static str, what: String) {
        let e = self.by.entry(category).or_default();
        e.0 += 1;
        if e.1.len() < EXAMPLES {
            e.1.push(what);
        }
    }

    /// Merges another run's findings.
    pub fn extend(&mut self, other: &Findings) {
        for (k, (n, ex)) in &other.by {
            let e = self.by.entry(k).or_default();
            e.0 += n;
            for x in ex {
                if e.1.len() < EXAMPLES {
                    e.1.push(x.clone());
                }
            }
        }
    }

    /// No problem at all.
    pub fn is_empty(&self) -> bool {
        self.by.is_empty()
    }

    /// `category=count …`, or `none`.
    pub fn summary(&self) -> String {
        if self.by.is_empty() {
            return "none".into();
        }
        self.by
            .iter()
            .map(|(k, (n, _))| format!("{k}={n}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Every category with its examples, for the log.
    pub fn print(&self) {
        for (k, (n, ex)) in &self.by {
            println!("  {k}: {n}");
            for x in ex {
                println!("    - {x}");
            }
        }
    }
}
