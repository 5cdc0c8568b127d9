//! The taxi rides workload (to be built).
