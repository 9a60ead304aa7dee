//! The one list of shims the runtime serves. Config sections, listeners,
//! `/status`, `/metrics`, `translate` and the CLI all iterate it; a shim's
//! name and facts come from its [`Shim`] trait constants, never from a
//! string match elsewhere.
//!
//! **Adding a shim is a crate under `shims/` plus one line in [`each`].**
//!
//! The list is a walk over types ([`Each`]), so that the config (which
//! needs only the facts) and the host (which builds a runtime for each
//! shim) read the same list without depending on each other.

use std::sync::OnceLock;

use shimgate_shim_api::Shim;

/// A visitor over the registered shim types.
pub trait Each {
    /// Called once per shim, in listing order.
    fn shim<S: Shim + Default>(&mut self);
}

/// Walks every shim.
pub fn each(v: &mut impl Each) {
    v.shim::<shimgate_shim_qoder::QoderShim>();
    v.shim::<shimgate_shim_trae::TraeShim>();
    #[cfg(feature = "test-shims")]
    v.shim::<shimgate_shim_openai::OpenAiShim>();
}

/// What the config and the admin side know of a shim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    pub name: &'static str,
    pub default_listen: &'static str,
    pub enabled_by_default: bool,
    /// Its rebuilt request goes up through `[shims.NAME] codec`.
    pub codec: bool,
    /// `/status` name of its rebuilt-frames counter.
    pub agent_frames_key: &'static str,
}

impl Facts {
    /// The shim's `/status` key (`qoderShim`).
    pub fn status_key(&self) -> String {
        format!("{}Shim", self.name)
    }
}

struct Collect(Vec<Facts>);

impl Each for Collect {
    fn shim<S: Shim + Default>(&mut self) {
        self.0.push(Facts {
            name: S::NAME,
            default_listen: S::DEFAULT_LISTEN,
            enabled_by_default: S::ENABLED_BY_DEFAULT,
            codec: S::CODEC,
            agent_frames_key: S::AGENT_FRAMES_KEY,
        });
    }
}

/// Every shim's facts, in listing order.
pub fn facts() -> &'static [Facts] {
    static FACTS: OnceLock<Vec<Facts>> = OnceLock::new();
    FACTS.get_or_init(|| {
        let mut c = Collect(Vec::new());
        each(&mut c);
        c.0
    })
}

/// Every shim's name, in listing order.
pub fn names() -> impl Iterator<Item = &'static str> {
    facts().iter().map(|f| f.name)
}

/// The facts of the shim called `name`.
pub fn find(name: &str) -> Option<&'static Facts> {
    facts().iter().find(|f| f.name == name)
}

/// The position of `name` in the list (for per-shim slots).
pub fn index(name: &str) -> Option<usize> {
    facts().iter().position(|f| f.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_names_each_shim_once_with_its_own_port() {
        let names: Vec<_> = names().collect();
        assert_eq!(&names[..2], ["qoder", "trae"]);
        let mut ports: Vec<_> = facts().iter().map(|f| f.default_listen).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), facts().len());
        assert_eq!(find("trae").unwrap().status_key(), "traeShim");
    }
}
