//! Operator state on fjall (to be built).
