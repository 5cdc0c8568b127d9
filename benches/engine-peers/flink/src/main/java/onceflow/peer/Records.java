package onceflow.peer;

/** The records that flow between the jobs' operators (Flink POJOs: public fields, no-arg constructors). */
public final class Records {
    private Records() {}

    /** A Kafka record as it was read: its key and value bytes, passed on unchanged by job (a). */
    public static class RawRecord {
        public byte[] key;
        public byte[] value;

        public RawRecord() {}

        public RawRecord(byte[] key, byte[] value) {
            this.key = key;
            this.value = value;
        }
    }

    /** The fields of a ride event that job (b) needs. */
    public static class RideEvent {
        public long driverId;
        public boolean isStart;
        public long passengers;
        public long eventTime;

        public RideEvent() {}
    }

    /** The running aggregate of one driver's window: END events and their passengers. */
    public static class RidesAndPassengers {
        public long rides;
        public long passengers;

        public RidesAndPassengers() {}
    }

    /** One fired window of job (b). */
    public static class DriverHour {
        public long driverId;
        public long windowStart;
        public long windowEnd;
        public long rides;
        public long passengers;

        public DriverHour() {}
    }
}
