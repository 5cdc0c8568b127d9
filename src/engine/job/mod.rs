//! Job files and built-in operators (to be built).
