-- driver-shifts in Flink SQL: the query of onceflow's jobs/driver-shifts.sql.
-- Run by SqlJob: ${VAR} is the environment variable VAR (a ' in it doubled), the session time
-- zone is UTC, and each statement ends with a ';' at the end of its line.
-- A shift is a session of a driver's drop-offs (END events) at most 30 minutes apart,
-- [first drop-off, last drop-off + 30 min). Output, keyed by the driver id's decimal digits, one
-- record per driver and shift once the watermark (newest event time - 60 s) has passed its end.

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

CREATE TABLE driver_shifts (
  record_key STRING,                                    -- the Kafka key, not in the value
  driver_id BIGINT,
  window_start BIGINT,                                  -- epoch milliseconds
  window_end BIGINT,
  rides BIGINT,
  passengers BIGINT
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

CREATE TEMPORARY VIEW drop_offs AS
SELECT driver_id, passengers, ts
FROM rides
WHERE NOT is_start;

INSERT INTO driver_shifts
SELECT CAST(driver_id AS STRING),
       driver_id,
       -- window_start/_end are TIMESTAMP(3) wall-clock times in the session zone (UTC): back
       -- to epoch ms. (TIMESTAMPDIFF(MILLISECOND, ...) is an INT and overflows; a CAST of a
       -- timestamp to a number is rejected.)
       EXTRACT(EPOCH FROM window_start) * 1000 + EXTRACT(MILLISECOND FROM window_start),
       EXTRACT(EPOCH FROM window_end) * 1000 + EXTRACT(MILLISECOND FROM window_end),
       COUNT(*),
       SUM(passengers)
FROM TABLE(SESSION(TABLE drop_offs PARTITION BY driver_id, DESCRIPTOR(ts), INTERVAL '30' MINUTES))
GROUP BY driver_id, window_start, window_end;
