-- The planner's summary tables of a request log too large for one machine: run these statements unchanged in
-- DuckDB, Spark SQL or Trino over a view named `requests` with the canonical columns
--     arrival_s DOUBLE      seconds (epoch or from any origin; NULL where the log has no time)
--     input_tokens BIGINT, output_tokens BIGINT
--     ttft_ms DOUBLE, tpot_ms DOUBLE, e2e_ms DOUBLE   (NULL where absent)
--     failed BOOLEAN        (the requests the planner does not replay)
-- and write each result as a table of that name (Parquet or CSV files, or a folder of them) into one folder;
-- `python -m planner ingest --summary FOLDER` reads it. Only portable SQL: no FILTER, no engine functions
-- beyond FLOOR, LOG2, GREATEST, CAST, COUNT, MIN, MAX. See docs/SUMMARY.md.

-- name: length_counts
SELECT 'input_tokens' AS field, input_tokens AS tokens, COUNT(*) AS requests
FROM requests WHERE NOT failed AND input_tokens IS NOT NULL GROUP BY input_tokens
UNION ALL
SELECT 'output_tokens' AS field, output_tokens AS tokens, COUNT(*) AS requests
FROM requests WHERE NOT failed AND output_tokens IS NOT NULL GROUP BY output_tokens;

-- name: arrival_counts
SELECT CAST(FLOOR(arrival_s - t0.first_s) AS BIGINT) AS arrival_second, COUNT(*) AS requests
FROM requests CROSS JOIN (SELECT MIN(arrival_s) AS first_s FROM requests WHERE NOT failed) t0
WHERE NOT failed AND arrival_s IS NOT NULL
GROUP BY CAST(FLOOR(arrival_s - t0.first_s) AS BIGINT);

-- name: arrival_span
SELECT MIN(arrival_s) AS first_arrival_s, MAX(arrival_s) AS last_arrival_s, COUNT(*) AS requests
FROM requests WHERE NOT failed AND arrival_s IS NOT NULL;

-- name: latency_histograms
SELECT metric, input_bucket, log2_bin, COUNT(*) AS requests FROM (
    SELECT 'ttft_ms' AS metric, CAST(FLOOR(LOG2(GREATEST(ttft_ms, 0.001)) * 8) AS BIGINT) AS log2_bin,
           CASE WHEN input_tokens < 512 THEN 0 WHEN input_tokens < 2048 THEN 1 ELSE 2 END AS input_bucket
    FROM requests WHERE NOT failed AND ttft_ms IS NOT NULL
    UNION ALL
    SELECT 'tpot_ms' AS metric, CAST(FLOOR(LOG2(GREATEST(tpot_ms, 0.001)) * 8) AS BIGINT) AS log2_bin,
           CASE WHEN input_tokens < 512 THEN 0 WHEN input_tokens < 2048 THEN 1 ELSE 2 END AS input_bucket
    FROM requests WHERE NOT failed AND tpot_ms IS NOT NULL
    UNION ALL
    SELECT 'e2e_ms' AS metric, CAST(FLOOR(LOG2(GREATEST(e2e_ms, 0.001)) * 8) AS BIGINT) AS log2_bin,
           CASE WHEN input_tokens < 512 THEN 0 WHEN input_tokens < 2048 THEN 1 ELSE 2 END AS input_bucket
    FROM requests WHERE NOT failed AND e2e_ms IS NOT NULL
) h
GROUP BY metric, input_bucket, log2_bin;
