-- Rides and passengers per driver per hour, as SQL: the same job as
-- rides-per-driver-hourly.toml.
--   onceflow taxi generate -t rides --count 100000
--   onceflow run jobs/rides-per-driver-hourly.sql
-- A ride counts once, in the hour it ended (its END event). Output, keyed by driver_id, one
-- record per driver and hour once the hour is complete (watermark = newest event time - 60 s).
SET 'pipeline.name' = 'rides-per-driver-hourly';
SET 'checkpoint.interval.ms' = '1000';
SET 'checkpoint.timeout.ms' = '30000';
SET 'transaction.timeout.ms' = '300000';
SET 'state.dir' = 'state/rides-per-driver-hourly';

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
  'event_time' = 'event_time',
  'watermark' = '60s'
);

CREATE TABLE rides_per_driver_hourly WITH (
  'connector' = 'kafka',
  'topic' = 'rides-per-driver-hourly',
  'sink.transactional-id-prefix' = 'rides-per-driver-hourly'
);

INSERT INTO rides_per_driver_hourly
SELECT driver_id,
       TUMBLE_START(event_time, INTERVAL '1' HOUR) AS window_start,
       TUMBLE_END(event_time, INTERVAL '1' HOUR) AS window_end,
       COUNT(*) AS rides,
       SUM(passengers) AS passengers
FROM rides
WHERE NOT is_start
GROUP BY driver_id, TUMBLE(event_time, INTERVAL '1' HOUR);
