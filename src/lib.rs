//! shimgate: a loopback gateway that lets a context-compression proxy work
//! for providers whose wire it cannot read.

pub mod cli;
pub mod frames;
