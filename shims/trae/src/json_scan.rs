//! The validating JSON scanner trae reads `output` frames with is
//! `shimgate_shim_api::json_scan`, one copy shared with qoder (and so
//! fuzzed through both shims' targets); this module names it for the crate.

pub(crate) use shimgate_shim_api::json_scan::{is_empty_string, is_valid, members};
