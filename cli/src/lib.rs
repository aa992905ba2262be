//! The slothqueue library facade.
