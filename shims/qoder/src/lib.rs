//! The qoder protocol for shimgate (placeholder until the shim lands).
