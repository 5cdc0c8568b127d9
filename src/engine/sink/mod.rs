//! The exactly-once Kafka sink (to be built).
