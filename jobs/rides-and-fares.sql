-- Each ride enriched with its fare, as SQL: the same interval join as rides-and-fares.toml.
--   onceflow taxi generate -t rides --fares fares --count 1000000
--   onceflow run jobs/rides-and-fares.sql
-- A ride's START event meets the fare of its ride_id whose time is within a minute of its own;
-- each pair is written as soon as both are in, keyed by ride_id.
SET 'pipeline.name' = 'rides-and-fares';
SET 'checkpoint.interval.ms' = '1000';
SET 'checkpoint.timeout.ms' = '30000';
SET 'transaction.timeout.ms' = '300000';
SET 'state.dir' = 'state/rides-and-fares';

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
  event_time BIGINT
) WITH (
  'connector' = 'kafka',
  'topic' = 'rides',
  'properties.bootstrap.servers' = 'localhost:9092',
  'scan.startup.mode' = 'earliest-offset',
  'event_time' = 'event_time',
  'watermark' = '60s'
);

CREATE TABLE fares (
  ride_id BIGINT,
  taxi_id BIGINT,
  driver_id BIGINT,
  payment_type STRING,
  tip DOUBLE,
  tolls DOUBLE,
  total_fare DOUBLE,
  event_time BIGINT                      -- the ride's pick-up
) WITH (
  'connector' = 'kafka',
  'topic' = 'fares',
  'properties.bootstrap.servers' = 'localhost:9092',
  'scan.startup.mode' = 'earliest-offset',
  'event_time' = 'event_time',
  'watermark' = '60s'
);

CREATE TABLE rides_and_fares WITH (
  'connector' = 'kafka',
  'topic' = 'rides-and-fares',
  'sink.transactional-id-prefix' = 'rides-and-fares'
);

INSERT INTO rides_and_fares
SELECT r.ride_id, r.driver_id, r.taxi_id, r.passengers, r.event_time AS start_time,
       r.start_lon, r.start_lat, r.end_lon, r.end_lat,
       f.payment_type, f.tip, f.tolls, f.total_fare
FROM rides AS r
JOIN fares AS f
  ON r.ride_id = f.ride_id
 AND f.event_time BETWEEN r.event_time - INTERVAL '1' MINUTE AND r.event_time + INTERVAL '1' MINUTE
WHERE r.is_start;
