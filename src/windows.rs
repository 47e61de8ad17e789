//! TEMPORARY interface stub; replaced by the real module.
use chrono::{DateTime, Utc};
pub struct Window;
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WindowError(String);
impl Window {
    pub fn new(_s: &str, _d: chrono::Duration, _tz: chrono_tz::Tz) -> Result<Window, WindowError> {
        Ok(Window)
    }
}
pub struct Blackout {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Opening {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub window: usize,
}
#[derive(Debug)]
pub struct Schedule;
impl Schedule {
    pub fn always_open(_b: Vec<Blackout>) -> Schedule {
        Schedule
    }
    pub fn new(_w: Vec<Window>, _b: Vec<Blackout>) -> Schedule {
        Schedule
    }
    pub fn is_allowed(&self, _now: DateTime<Utc>) -> bool {
        true
    }
    pub fn openings(&self, _from: DateTime<Utc>, _n: usize) -> Vec<Opening> {
        vec![]
    }
}
