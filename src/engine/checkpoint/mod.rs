//! The checkpoint coordinator (to be built): a pure state machine fed events.
