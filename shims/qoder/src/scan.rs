//! The JSON cursor qoder reads frames with is `shimgate_shim_api::json_scan`,
//! one copy shared with trae (and so fuzzed through both shims' targets);
//! this module names it for the crate.

pub(crate) use shimgate_shim_api::json_scan::{find1, find2, Cursor, RawStr};
