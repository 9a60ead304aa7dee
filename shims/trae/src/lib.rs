//! The trae protocol for shimgate (placeholder until the shim lands).
