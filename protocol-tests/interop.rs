//! Interop with the Java client (placeholder module; filled by the interop tests).
