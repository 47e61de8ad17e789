//! The controller.
pub mod decide;
pub mod events;
