-- The three drivers with the most tips in each hour, as SQL: the same job as
-- hourly-top-drivers-by-tips.toml (Flink SQL's window Top-N over a grouped query).
--   onceflow taxi generate -t rides --fares fares --count 100000
--   onceflow run jobs/hourly-top-drivers-by-tips.sql
-- The inner query sums each driver's tips per hour; ROW_NUMBER ranks those sums within their
-- hour, a second keyed stage whose watermark is the first's. Output, keyed by window_start,
-- one record per rank (1 to 3) once the hour is complete.
SET 'pipeline.name' = 'hourly-top-drivers-by-tips';
SET 'checkpoint.interval.ms' = '1000';
SET 'checkpoint.timeout.ms' = '30000';
SET 'transaction.timeout.ms' = '300000';
SET 'state.dir' = 'state/hourly-top-drivers-by-tips';

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

CREATE TABLE hourly_top_drivers_by_tips WITH (
  'connector' = 'kafka',
  'topic' = 'hourly-top-drivers-by-tips',
  'sink.transactional-id-prefix' = 'hourly-top-drivers-by-tips'
);

INSERT INTO hourly_top_drivers_by_tips
SELECT *
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY tips DESC) AS `rank`
  FROM (
    SELECT driver_id,
           TUMBLE_START(event_time, INTERVAL '1' HOUR) AS window_start,
           TUMBLE_END(event_time, INTERVAL '1' HOUR) AS window_end,
           SUM(tip) AS tips
    FROM fares
    GROUP BY driver_id, TUMBLE(event_time, INTERVAL '1' HOUR)
  )
)
WHERE `rank` <= 3;
