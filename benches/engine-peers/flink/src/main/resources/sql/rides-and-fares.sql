-- rides-and-fares in Flink SQL: the query of onceflow's jobs/rides-and-fares.sql.
-- Run by SqlJob: ${VAR} is the environment variable VAR (a ' in it doubled), the session time
-- zone is UTC, and each statement ends with a ';' at the end of its line.
-- A ride's START event meets the fare of its ride_id whose time is within a minute of its own
-- (both bounds included); each pair is written as soon as both are in, keyed by the ride id's
-- decimal digits.

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
  event_time BIGINT,                                    -- epoch milliseconds
  ts AS TO_TIMESTAMP_LTZ(event_time, 3),
  WATERMARK FOR ts AS ts - INTERVAL '60' SECOND         -- out of order by up to 60 s
) WITH (
  'connector' = 'kafka',
  'topic' = '${INPUT}',
  'properties.bootstrap.servers' = '${BOOTSTRAP}',
  'properties.group.id' = '${NAME}',
  'properties.client.id.prefix' = '${NAME}-rides',
  'properties.isolation.level' = 'read_committed',
  'scan.startup.mode' = 'earliest-offset',
  'format' = 'json'
);

CREATE TABLE fares (
  ride_id BIGINT,
  taxi_id BIGINT,
  driver_id BIGINT,
  payment_type STRING,
  tip DOUBLE,
  tolls DOUBLE,
  total_fare DOUBLE,
  event_time BIGINT,                                    -- the ride's pick-up, epoch milliseconds
  ts AS TO_TIMESTAMP_LTZ(event_time, 3),
  WATERMARK FOR ts AS ts - INTERVAL '60' SECOND
) WITH (
  'connector' = 'kafka',
  'topic' = '${FARES}',
  'properties.bootstrap.servers' = '${BOOTSTRAP}',
  'properties.group.id' = '${NAME}',
  'properties.client.id.prefix' = '${NAME}-fares',
  'properties.isolation.level' = 'read_committed',
  'scan.startup.mode' = 'earliest-offset',
  'format' = 'json'
);

CREATE TABLE rides_and_fares (
  record_key STRING,                                    -- the Kafka key, not in the value
  ride_id BIGINT,
  driver_id BIGINT,
  taxi_id BIGINT,
  passengers INT,
  start_time BIGINT,
  start_lon DOUBLE,
  start_lat DOUBLE,
  end_lon DOUBLE,
  end_lat DOUBLE,
  payment_type STRING,
  tip DOUBLE,
  tolls DOUBLE,
  total_fare DOUBLE
) WITH (
  'connector' = 'kafka',
  'topic' = '${OUTPUT}',
  'properties.bootstrap.servers' = '${BOOTSTRAP}',
  'properties.transaction.timeout.ms' = '300000',
  'key.format' = 'raw',
  'key.fields' = 'record_key',
  'value.format' = 'json',
  'value.fields-include' = 'EXCEPT_KEY',
  'sink.delivery-guarantee' = '${GUARANTEE}',
  'sink.transactional-id-prefix' = '${NAME}'
);

INSERT INTO rides_and_fares
SELECT CAST(r.ride_id AS STRING),
       r.ride_id, r.driver_id, r.taxi_id, r.passengers, r.event_time AS start_time,
       r.start_lon, r.start_lat, r.end_lon, r.end_lat,
       f.payment_type, f.tip, f.tolls, f.total_fare
FROM rides AS r
JOIN fares AS f
  ON r.ride_id = f.ride_id
 AND f.ts BETWEEN r.ts - INTERVAL '1' MINUTE AND r.ts + INTERVAL '1' MINUTE
WHERE r.is_start;
