//! The scripted upstream on raw TCP the tests answer from
//! (`shimgate_testkit::upstream`).

pub use shimgate_testkit::upstream::*;
