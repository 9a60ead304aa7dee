//! The one list of shims the runtime serves. Config sections, listeners,
//! `/status`, `/metrics`, `translate` and the CLI all iterate it; a shim's
//! name and facts come from its [`Shim`] trait constants, never from a
//! string match elsewhere.
//!
//! **Adding a shim is a crate under `shims/` plus one line in [`each`].**
//! A second wire of one provider is a shim too: it names the shim it
//! rides on ([`Shim::RIDES_ON`]), whose listener serves it and whose
//! config section holds its routes ([`Facts::routes_path`]).
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
    v.shim::<shimgate_shim_qoder_model::QoderModelShim>();
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
    /// The shim whose listener and config section it shares.
    pub rides_on: Option<&'static str>,
    /// The key of its routes in its config section.
    pub routes_key: &'static str,
    /// Its routes when the config names none, `(name, base URL)`.
    pub default_routes: &'static [(&'static str, &'static str)],
}

impl Facts {
    /// The shim's `/status` key (`qoderShim`).
    pub fn status_key(&self) -> String {
        format!("{}Shim", self.name)
    }

    /// Its config section's name (`[shims.SECTION]`): its own, or the
    /// host's for a shim that rides on another.
    pub fn section(&self) -> &'static str {
        self.rides_on.unwrap_or(self.name)
    }

    /// The key path of its routes (`shims.qoder.model_routes`).
    pub fn routes_path(&self) -> String {
        format!("shims.{}.{}", self.section(), self.routes_key)
    }

    /// Whether it has a listener of its own.
    pub fn listens(&self) -> bool {
        self.rides_on.is_none()
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
            rides_on: S::RIDES_ON,
            routes_key: S::ROUTES_KEY,
            default_routes: S::DEFAULT_ROUTES,
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

/// The shims served on the listener of `host`: itself first, then the
/// shims that ride on it, in listing order.
pub fn served_by(host: &'static str) -> impl Iterator<Item = &'static Facts> {
    facts()
        .iter()
        .filter(move |f| f.name == host || f.rides_on == Some(host))
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
        assert_eq!(&names[..3], ["qoder", "qoderModel", "trae"]);
        let listening: Vec<_> = facts().iter().filter(|f| f.listens()).collect();
        let mut ports: Vec<_> = listening.iter().map(|f| f.default_listen).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), listening.len());
        assert_eq!(find("trae").unwrap().status_key(), "traeShim");
    }

    #[test]
    fn a_shim_that_rides_on_another_is_served_by_its_listener_and_section() {
        let model = find("qoderModel").unwrap();
        assert_eq!(model.section(), "qoder");
        assert_eq!(model.routes_path(), "shims.qoder.model_routes");
        assert_eq!(find("trae").unwrap().routes_path(), "shims.trae.routes");
        let served: Vec<_> = served_by("qoder").map(|f| f.name).collect();
        assert_eq!(served, ["qoder", "qoderModel"]);
        for f in facts().iter().filter(|f| !f.listens()) {
            let host = f.rides_on.and_then(find).unwrap();
            assert!(host.listens(), "{} rides on a shim with a listener", f.name);
        }
    }
}
