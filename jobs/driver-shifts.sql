-- Each driver's shifts, as SQL: the same job as driver-shifts.toml.
--   onceflow taxi generate -t rides --count 1000000
--   onceflow run jobs/driver-shifts.sql
-- A shift is a session of a driver's drop-offs (END events) at most 30 minutes apart. Output,
-- keyed by driver_id, one record per driver and shift once the watermark (newest event time
-- - 60 s) has passed its end.
SET 'pipeline.name' = 'driver-shifts';
SET 'checkpoint.interval.ms' = '1000';
SET 'checkpoint.timeout.ms' = '30000';
SET 'transaction.timeout.ms' = '300000';
SET 'state.dir' = 'state/driver-shifts';

CREATE TABLE rides (
  ride_id BIGINT,
  driver_id BIGINT,
  taxi_id BIGINT,
  is_start BOOLEAN,
  start_lon DOUBLE,
  start_lat DOUBLE,
  end_lon DOUBLE,
  end_lat DOUBLE,
  passengers INT,
  event_time BIGINT                      -- epoch milliseconds
) WITH (
  'connector' = 'kafka',
  'topic' = 'rides',
  'properties.bootstrap.servers' = 'localhost:9092',
  'scan.startup.mode' = 'earliest-offset',
  'format' = 'json',
  'event_time' = 'event_time',
  'watermark' = '60s'                    -- the generator is out of order by up to 60 s
);

CREATE TABLE driver_shifts WITH (
  'connector' = 'kafka',
  'topic' = 'driver-shifts',
  'sink.delivery-guarantee' = 'exactly-once',
  'sink.transactional-id-prefix' = 'driver-shifts'
);

INSERT INTO driver_shifts
SELECT driver_id,
       SESSION_START(event_time, INTERVAL '30' MINUTE) AS window_start,
       SESSION_END(event_time, INTERVAL '30' MINUTE) AS window_end,
       COUNT(*) AS rides,
       SUM(passengers) AS passengers
FROM rides
WHERE NOT is_start
GROUP BY driver_id, SESSION(event_time, INTERVAL '30' MINUTE);
