-- The views over the tables and migrations (run after them on every open; the lake runs them over its Delta tables).
CREATE OR REPLACE VIEW line_accounting AS
SELECT f.source_file, f.run_id, f.kind, f.total_lines,
       f.parsed_lines AS parsed, f.continuation_lines AS continuation, f.unparsed_lines AS unparsed,
       (f.parsed_lines + f.continuation_lines + f.unparsed_lines = f.total_lines) AS balanced,
       round(100.0 * f.parsed_lines / nullif(f.total_lines, 0), 2) AS parsed_pct
FROM files f
WHERE f.skipped_reason IS NULL;

-- drift: per file, what the grammars did not foresee (docs/sql.md "drift"): labels of batch lines no typed column
-- took (in extra_fields); lines no grammar matched, and SGLang messages only the catch-all pattern took (server_events
-- kind 'message'), each grouped into templates; near misses (lines that look like a pattern's but fail it;
-- parse_drift has the first ones and why); fields the run's configuration implies but the log never printed.
--
-- a line's template: ids (uuids, long hex, 0x…) → <id>, numbers → <n>, runs of blanks → one space
CREATE OR REPLACE MACRO _line_template(text) AS regexp_replace(regexp_replace(regexp_replace(text,
  '\b[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\b|\b[0-9a-f]{16,}\b|0x[0-9a-fA-F]+', '<id>', 'g'),
  '[0-9]+(\.[0-9]+)?', '<n>', 'g'), '\s+', ' ', 'g');
-- drift_of(files): the same for the files listed only (NULL: every file); the ingest asks it for the files it just
-- wrote, and a filter on the view would come only after every table was scanned
CREATE OR REPLACE MACRO drift_of(files) AS TABLE
WITH batch_labels AS (
  SELECT run_id, source_file, line_no, unnest(json_keys(extra_fields)) AS label FROM decode_batches
  WHERE extra_fields IS NOT NULL AND (files IS NULL OR list_contains(files, source_file))
  UNION ALL
  SELECT run_id, source_file, line_no, unnest(json_keys(extra_fields)) AS label FROM prefill_batches
  WHERE extra_fields IS NOT NULL AND (files IS NULL OR list_contains(files, source_file))
), unmatched AS (  -- each distinct text templated once
  SELECT run_id, source_file, raw, count(*) AS lines, min(line_no) AS line_no, _line_template(raw) AS template
  FROM unparsed_lines WHERE starts_with(reason, 'no pattern matched') AND (files IS NULL OR list_contains(files, source_file))
  GROUP BY run_id, source_file, raw
), unknown_messages AS (
  SELECT run_id, source_file, message, count(*) AS lines, min(line_no) AS line_no, _line_template(message) AS template
  FROM server_events WHERE kind = 'message' AND message IS NOT NULL AND message <> ''
    AND (files IS NULL OR list_contains(files, source_file))
  GROUP BY run_id, source_file, message
), near AS (
  SELECT f.run_id, f.source_file, m.key AS pattern, m.value AS lines
  FROM files f, unnest(map_entries(f.near_misses::MAP(VARCHAR, BIGINT))) AS e(m)
  WHERE f.near_misses IS NOT NULL AND (files IS NULL OR list_contains(files, f.source_file))
), decode_accept AS (
  SELECT run_id, source_file, count(*) AS lines, count(accept_len) AS with_accept, min(line_no) AS first_line
  FROM decode_batches WHERE (files IS NULL OR list_contains(files, source_file)) GROUP BY ALL
), spec AS (
  SELECT source_file, min(trim(value, chr(39) || chr(34))) AS algorithm FROM server_args
  WHERE name = 'speculative_algorithm' AND value IS NOT NULL AND value NOT IN ('None', '', 'null', '''''')
    AND (files IS NULL OR list_contains(files, source_file))
  GROUP BY ALL
)
SELECT run_id, source_file, 'new_label' AS kind, label AS subject, count(*) AS lines, min(line_no) AS example_line_no,
       'batch lines print "' || label || '" but no typed column takes it: its text is in extra_fields' AS detail
FROM batch_labels GROUP BY ALL
UNION ALL
SELECT run_id, source_file, 'unmatched_line', template, sum(lines)::BIGINT, min(line_no), arg_min(raw, line_no)
FROM unmatched GROUP BY run_id, source_file, template
UNION ALL
SELECT run_id, source_file, 'unknown_message', template, sum(lines)::BIGINT, min(line_no), arg_min(message, line_no)
FROM unknown_messages GROUP BY run_id, source_file, template
UNION ALL
SELECT n.run_id, n.source_file, CASE WHEN starts_with(n.pattern, 'new prefix: ') THEN 'new_prefix' ELSE 'near_miss' END,
       CASE WHEN starts_with(n.pattern, 'new prefix: ') THEN n.pattern[13:] ELSE n.pattern END, n.lines,
       (SELECT min(d.line_no) FROM parse_drift d WHERE d.source_file = n.source_file AND d.pattern = n.pattern),
       (SELECT arg_min(d.error, d.line_no) FROM parse_drift d WHERE d.source_file = n.source_file AND d.pattern = n.pattern)
FROM near n
UNION ALL
SELECT d.run_id, d.source_file, 'missing_field', 'accept_len', d.lines, d.first_line,
       'speculative decoding is configured (speculative_algorithm ' || s.algorithm || ') but none of the '
       || d.lines || ' Decode batch lines prints accept len'
FROM decode_accept d JOIN spec s USING (source_file) WHERE d.with_accept = 0
UNION ALL
SELECT f.run_id, f.source_file, 'missing_field', 'nccl_lines', 0, NULL,
       'NCCL_DEBUG=' || json_extract_string(r.env, '$.NCCL_DEBUG') || ' was set for the launch but the log has no NCCL INFO line'
FROM files f JOIN runs r USING (run_id)
WHERE f.kind = 'log' AND f.skipped_reason IS NULL AND (files IS NULL OR list_contains(files, f.source_file))
  AND upper(json_extract_string(r.env, '$.NCCL_DEBUG')) IN ('INFO', 'TRACE')
  AND NOT EXISTS (SELECT 1 FROM nccl_events n WHERE n.source_file = f.source_file AND n.nccl_rank IS NOT NULL);
CREATE OR REPLACE VIEW drift AS SELECT * FROM drift_of(NULL);
