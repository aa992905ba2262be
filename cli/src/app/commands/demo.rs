//! `demo`: placeholder while the real tour is written.

use super::Ctx;
use crate::app::Outcome;
use crate::app::exit::Code;

/// The guided tour.
pub async fn demo(_ctx: &Ctx) -> Outcome {
    Ok(Code::Success)
}
