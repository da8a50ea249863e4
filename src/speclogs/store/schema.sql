-- speclogs SQL contract, schema version 5. Stable: columns may be added, never renamed or removed.
-- Columns added later are in the numbered migrations (migrations/NNN_name.sql): this file and they are the one list.
-- Every parsed row carries run_id, source_file, line_no (1-based physical line in the source file),
-- and launch_no / ts / tp_rank where the line has them. Units are in the column names.
-- ts_text: the SGLang prefix's timestamp as printed, where it has no date ('HH:MM:SS', ≤0.3.0) or no year
-- ('MM-DD HH:MM:SS') or is not a time at all; ts then holds it dated from the nearest dated line, or NULL.

-- a big log is written in several commits (memory stays bounded); its row here from the first to the last says the
-- ingest is under way: one left by a killed ingest names rows that the next writer removes
CREATE TABLE IF NOT EXISTS _ingesting (source_file VARCHAR, run_id VARCHAR, started_at TIMESTAMP);
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);

-- One row per run: a log file (its stem is the run name) or a launcher launch directory (run.json names it).
CREATE TABLE IF NOT EXISTS runs (
  run_id VARCHAR PRIMARY KEY,          -- stable id: sha1 of the run's key, 12 hex
  run_name VARCHAR NOT NULL,           -- log stem, or '<cell>_<launch>' from a launch plan
  cell VARCHAR,                        -- launch-plan cell (NULL for plain logs)
  factors JSON,                        -- launch-plan factor levels of the cell, e.g. {"spec": "eagle3", "nccl": "tuned"}
  launch_index INTEGER,                -- launch number within the cell (launcher runs)
  source_dir VARCHAR,
  sglang_version VARCHAR,              -- from run.json, or inferred from the log ('0.5.9+' style) when possible
  model_path VARCHAR,
  speculative_algorithm VARCHAR,       -- from server_args (NULL = no speculation)
  tp_size INTEGER,
  hostname VARCHAR,
  gpu_name VARCHAR,
  env JSON,                            -- server process env (run.json), secrets redacted; NULL when unknown
  argv JSON,                           -- exact server argv (run.json)
  run_json JSON,                       -- the whole run.json when there is one
  outcome VARCHAR,                     -- launcher outcome: ok | failed_start | health_timeout | bench_failed | interrupted; NULL for plain logs
  ingested_at TIMESTAMP
);

-- One row per server start inside a log file (split at each server_args dump).
CREATE TABLE IF NOT EXISTS launches (
  run_id VARCHAR, source_file VARCHAR, launch_no INTEGER,
  first_line BIGINT, last_line BIGINT,
  start_ts TIMESTAMP,                  -- ts of the server_args line
  ready_ts TIMESTAMP,                  -- first 'fired up and ready to roll' (or first /health 200)
  first_health_200_ts TIMESTAMP,
  cuda_graph_end_ts TIMESTAMP,         -- last 'Capture ... CUDA graph end' line
  shutdown_ts TIMESTAMP,               -- SIGTERM received
  PRIMARY KEY (run_id, source_file, launch_no)
);

-- server_args=ServerArgs(...) parsed into name/value rows (value as its Python repr text; value_json when it is a literal).
CREATE TABLE IF NOT EXISTS server_args (
  run_id VARCHAR, source_file VARCHAR, line_no BIGINT, launch_no INTEGER, ts TIMESTAMP, ts_text VARCHAR,
  name VARCHAR, value VARCHAR, value_json JSON
);

CREATE TABLE IF NOT EXISTS prefill_batches (
  run_id VARCHAR, source_file VARCHAR, line_no BIGINT, launch_no INTEGER, ts TIMESTAMP, ts_text VARCHAR,
  dp_rank INTEGER, tp_rank INTEGER, pp_rank INTEGER, ep_rank INTEGER, rank_tags VARCHAR,
  iter INTEGER, new_seq INTEGER, new_tokens BIGINT, cached_tokens BIGINT, cache_hit_rate_pct DOUBLE,
  num_tokens BIGINT, token_usage DOUBLE, full_token_usage DOUBLE, swa_token_usage DOUBLE, mamba_usage DOUBLE,
  running_req INTEGER, queue_req INTEGER, pending_tokens BIGINT,
  prealloc_req INTEGER, inflight_req INTEGER, bootstrap_req INTEGER, transferring_req INTEGER,
  graph_kind VARCHAR, cuda_graph BOOLEAN, input_throughput_tok_s DOUBLE, est_tflops_per_gpu DOUBLE, fwd_occupancy_pct DOUBLE,
  -- added with the grammars (schema v1 additions)
  attn_cp_rank INTEGER, moe_dp_rank INTEGER,
  mixed_running_req INTEGER,           -- 0.3.x '--enable-mixed-chunk' variant: 'Prefill batch(mixed #running-req: N)'
  full_num_tokens BIGINT, swa_num_tokens BIGINT,   -- 0.4.9 hybrid SWA '#token: full=N, swa=N'
  replay_tokens BIGINT, optimistic_req INTEGER, waiting_image_req INTEGER,
  extra_fields JSON,                   -- label → value of the fields this speclogs does not know (a newer or patched release)
  truncated BOOLEAN                    -- TRUE when the line was cut short (a terminal, a paste); NULL otherwise
);

CREATE TABLE IF NOT EXISTS decode_batches (
  run_id VARCHAR, source_file VARCHAR, line_no BIGINT, launch_no INTEGER, ts TIMESTAMP, ts_text VARCHAR,
  dp_rank INTEGER, tp_rank INTEGER, pp_rank INTEGER, ep_rank INTEGER, rank_tags VARCHAR,
  iter INTEGER, running_req INTEGER, num_tokens BIGINT, token_usage DOUBLE,
  full_num_tokens BIGINT, full_token_usage DOUBLE, swa_num_tokens BIGINT, swa_token_usage DOUBLE, mamba_num INTEGER, mamba_usage DOUBLE,
  accept_len DOUBLE, accept_rate DOUBLE, largest_len INTEGER,
  pre_allocated_usage DOUBLE, prealloc_req INTEGER, transfer_req INTEGER, retracted_req INTEGER,
  graph_kind VARCHAR, cuda_graph BOOLEAN, gen_throughput_tok_s DOUBLE, queue_req INTEGER,
  est_tflops_per_gpu DOUBLE, fwd_occupancy_pct DOUBLE,
  -- added with the grammars (schema v1 additions)
  attn_cp_rank INTEGER, moe_dp_rank INTEGER,
  cached_tokens BIGINT,                -- main after 0.5.23 (PD + decode radix cache)
  gpu_num_tokens BIGINT, gpu_token_usage DOUBLE, cpu_num_tokens BIGINT, cpu_token_usage DOUBLE,
  cap_len DOUBLE, block_accept_len DOUBLE, host_receive_req INTEGER, waiting_image_req INTEGER,
  est_read_bw_gb_s DOUBLE, est_write_bw_gb_s DOUBLE,
  extra_fields JSON,                   -- label → value of the fields this speclogs does not know (a newer or patched release)
  truncated BOOLEAN                    -- TRUE when the line was cut short (a terminal, a paste); NULL otherwise
);

-- uvicorn access lines (GET /health → status) and uvicorn INFO lines are server_events.
CREATE TABLE IF NOT EXISTS http_requests (
  run_id VARCHAR, source_file VARCHAR, line_no BIGINT, launch_no INTEGER, ts TIMESTAMP, ts_text VARCHAR,
  level VARCHAR, client_ip VARCHAR, client_port INTEGER, method VARCHAR, path VARCHAR, http_version VARCHAR,
  status INTEGER, status_text VARCHAR,
  rank_tags VARCHAR, dp_rank INTEGER, tp_rank INTEGER, pp_rank INTEGER, ep_rank INTEGER, attn_cp_rank INTEGER, moe_dp_rank INTEGER
);

-- lifecycle and other recognised single-line records: kind is a stable identifier
-- (init_dist_begin, init_dist_end, load_weight_begin, load_weight_end, kv_cache_allocated, memory_pool_end,
--  cuda_graph_begin, cuda_graph_end, max_total_num_tokens, ready, sigterm, graceful_exit, watchdog_timeout,
--  retract, uvicorn_info, warning, message …). Numeric details go to the typed columns; the rest stays in message.
CREATE TABLE IF NOT EXISTS server_events (
  run_id VARCHAR, source_file VARCHAR, line_no BIGINT, launch_no INTEGER, ts TIMESTAMP, ts_text VARCHAR,
  dp_rank INTEGER, tp_rank INTEGER, pp_rank INTEGER, ep_rank INTEGER, rank_tags VARCHAR,
  kind VARCHAR, graph VARCHAR,         -- graph: target_verify | draft_decode | draft_extend | decode | prefill (cuda_graph_* kinds)
  elapsed_s DOUBLE, avail_mem_gb DOUBLE, mem_usage_gb DOUBLE, num_tokens BIGINT,
  message VARCHAR,
  -- added with the grammars (schema v1 additions); each kind fills the ones it prints
  attn_cp_rank INTEGER, moe_dp_rank INTEGER,
  level VARCHAR,                       -- uvicorn_info: INFO | WARNING | ERROR
  model_class VARCHAR, quant VARCHAR,  -- load_weight_end
  dtype VARCHAR, k_size_gb DOUBLE, v_size_gb DOUBLE, kv_size_gb DOUBLE,   -- kv_cache_allocated
  chunked_prefill_size BIGINT, max_prefill_tokens BIGINT, context_len BIGINT, max_running_requests BIGINT,
  remaining_req BIGINT,                -- graceful_exit
  watchdog_timeout_s DOUBLE, dead_rank BIGINT, exit_code BIGINT, pid BIGINT,
  retracted_req BIGINT, aborted_req BIGINT, mamba_num BIGINT, new_token_ratio_before DOUBLE, new_token_ratio DOUBLE  -- retract
);

-- multi-line tracebacks / exception dumps as one record.
CREATE TABLE IF NOT EXISTS errors (
  run_id VARCHAR, source_file VARCHAR, line_no BIGINT, last_line_no BIGINT, launch_no INTEGER, ts TIMESTAMP, ts_text VARCHAR,
  tp_rank INTEGER, rank_tags VARCHAR, kind VARCHAR,   -- traceback | scheduler_exception | cuda_error | …
  first_line VARCHAR, last_line VARCHAR, exception_type VARCHAR, text VARCHAR,
  exception_message VARCHAR,           -- text after 'XxxError: ' on the exception line
  component VARCHAR                    -- who raised it, from the head line (e.g. 'Scheduler')
);

-- NCCL INFO lines: host:pid:tid [rank] NCCL INFO <message>
CREATE TABLE IF NOT EXISTS nccl_events (
  run_id VARCHAR, source_file VARCHAR, line_no BIGINT, launch_no INTEGER,
  host VARCHAR, pid INTEGER, tid INTEGER, nccl_rank INTEGER,
  kind VARCHAR,                        -- version | env | transport | channels | tuning | comm_init | tuning_table | plugin | other
  name VARCHAR, value VARCHAR,         -- env: NCCL_PROTO / LL ; version: nccl / 2.28.9+cuda13.0
  collective VARCHAR, bytes BIGINT, algo VARCHAR, proto VARCHAR, channel_lo INTEGER, channel_hi INTEGER,
  channel INTEGER, peer_from INTEGER, peer_to INTEGER, transport VARCHAR,
  message VARCHAR,
  nchannels INTEGER,                   -- 'Channel 00/16 : 0 1' → 16
  conn_index INTEGER, peer_from_dev INTEGER, peer_to_dev INTEGER,   -- 'Channel 00/1 : 0[2] -> 1[3] via P2P/IPC' → 1, 2, 3
  comm_rank INTEGER, nranks INTEGER,   -- comm init / init timings: 'rank 1 nranks 2'
  collnet_channels INTEGER, nvls_channels INTEGER, p2p_channels INTEGER, p2p_channels_per_peer INTEGER,  -- '24 coll channels, …'
  -- SGLang-prefixed NCCL lines ('sglang is using nccl==2.28.9') carry the prefix columns
  ts TIMESTAMP, ts_text VARCHAR, rank_tags VARCHAR, dp_rank INTEGER, tp_rank INTEGER, pp_rank INTEGER, ep_rank INTEGER,
  attn_cp_rank INTEGER, moe_dp_rank INTEGER
);

-- one row per benchmark request (our *.bench.jsonl / *.bench.json) or per bench_serving run summary.
CREATE TABLE IF NOT EXISTS bench_requests (
  run_id VARCHAR, source_file VARCHAR, line_no BIGINT,
  request_index INTEGER, warmup BOOLEAN, latency_s DOUBLE, prompt_tokens INTEGER, completion_tokens INTEGER,
  output_tok_s DOUBLE, spec_accept_length DOUBLE, spec_accept_rate DOUBLE, spec_verify_ct INTEGER,
  e2e_latency_s DOUBLE, source_kind VARCHAR,   -- bench_jsonl | bench_json | bench_serving_jsonl | bench_serving_summary
  extra JSON
);

-- speclogs' own eagle-worker profiling lines (python -m speclogs.profile).
CREATE TABLE IF NOT EXISTS spec_cycles (
  run_id VARCHAR, source_file VARCHAR, line_no BIGINT, launch_no INTEGER, ts TIMESTAMP, ts_text VARCHAR, tp_rank INTEGER,
  cycle BIGINT, batch_size INTEGER, draft_ms DOUBLE, verify_ms DOUBLE, extend_ms DOUBLE, other_ms DOUBLE, cycle_ms DOUBLE,
  accepted_tokens INTEGER, proposed_tokens INTEGER,
  rank_tags VARCHAR, dp_rank INTEGER, pp_rank INTEGER, ep_rank INTEGER, attn_cp_rank INTEGER, moe_dp_rank INTEGER,
  gap_ms DOUBLE                          -- stream time between the previous forward's exit and this cycle's entry; NULL in older profiler lines (wall_ms = gap_ms + cycle_ms)
);

-- NCCL microbenchmark results (`*.nccl_probe.json`)
CREATE TABLE IF NOT EXISTS nccl_probe (
  probe_id VARCHAR, env_set VARCHAR, env JSON, collective VARCHAR, dtype VARCHAR, world_size INTEGER,
  bytes BIGINT, tokens INTEGER, iters INTEGER, latency_us DOUBLE, latency_us_p10 DOUBLE, latency_us_p90 DOUBLE,
  algbw_gb_s DOUBLE, busbw_gb_s DOUBLE, gpu_name VARCHAR, topology VARCHAR, torch_version VARCHAR, nccl_version VARCHAR,
  hostname VARCHAR, measured_at TIMESTAMP,
  source_file VARCHAR,                 -- the *.nccl_probe.json it came from (idempotent re-ingest, --replace)
  graph_latency_us DOUBLE,             -- median per call replayed from a CUDA graph (as decode/verify run); NULL: not measured
  graph_error VARCHAR                  -- why the CUDA-graph timing failed
);

-- one row per probe file: its outcome and the whole document (the request, every env set's outcome, NCCL lines, …)
CREATE TABLE IF NOT EXISTS nccl_probe_files (
  probe_id VARCHAR, source_file VARCHAR, outcome VARCHAR, message VARCHAR,
  document JSON                        -- the file as read
);

-- every line no grammar matched, with its raw text (never dropped).
CREATE TABLE IF NOT EXISTS unparsed_lines (
  run_id VARCHAR, source_file VARCHAR, line_no BIGINT, launch_no INTEGER, reason VARCHAR, raw VARCHAR
);

-- the prefixes a capture tool put before a line's text, peeled off before the grammars read it: docker compose
-- ('sglang-1  | '), Ray ('(SchedulerActor pid=123) '), kubectl ('[pod/name/container] '), journald, `docker logs -t`
CREATE TABLE IF NOT EXISTS outer_prefixes (
  run_id VARCHAR, source_file VARCHAR, line_no BIGINT, launch_no INTEGER,
  prefix VARCHAR                       -- as printed, all of them when there are several
);

-- one row per ingested file: content hash for idempotency, and line accounting.
CREATE TABLE IF NOT EXISTS files (
  source_file VARCHAR, sha256 VARCHAR, run_id VARCHAR, size_bytes BIGINT, total_lines BIGINT,
  parsed_lines BIGINT, continuation_lines BIGINT, unparsed_lines BIGINT, skipped_reason VARCHAR,
  ingested_at TIMESTAMP,
  kind VARCHAR,                        -- log | bench_jsonl | bench_json | jsonl | run_json | nccl_probe
  invalid_utf8 BIGINT,                 -- invalid UTF-8 sequences replaced by U+FFFD
  nul_bytes BIGINT,                    -- NUL bytes replaced by U+FFFD
  warnings JSON,                       -- what was odd about the file (truncated gzip, drift, not an SGLang log …)
  parse_seconds DOUBLE,
  near_misses JSON,                    -- {pattern: lines} that look like a pattern's but fail it (the drift view)
  PRIMARY KEY (sha256, source_file)
);

-- lines other tools wrote into the same stream: python warnings, tqdm bars, glog, flashinfer, shell (counted as parsed).
-- (grammars say table = "foreign"; FOREIGN is an SQL keyword, so the rows land here)
CREATE TABLE IF NOT EXISTS foreign_lines (
  run_id VARCHAR, source_file VARCHAR, line_no BIGINT, launch_no INTEGER,
  tool VARCHAR,                        -- python_warning | tqdm | glog | flashinfer | shell | …
  message VARCHAR,                     -- the tool's message (after its own prefix)
  line VARCHAR                         -- the line as printed
);

-- benchmark tools' printed output (bench_serving summary block, bench_one_batch lines), name/value rows
CREATE TABLE IF NOT EXISTS bench_summary (
  run_id VARCHAR, source_file VARCHAR, line_no BIGINT, launch_no INTEGER,
  record VARCHAR, name VARCHAR, value VARCHAR,
  latency_s DOUBLE, throughput_tok_s DOUBLE, step BIGINT, batch_size BIGINT,
  line VARCHAR                         -- the line as printed
);

-- format drift: lines that contain a pattern's literal but do not match it (first 20 per pattern and file),
-- with pyparsing's account of where they fail
CREATE TABLE IF NOT EXISTS parse_drift (
  run_id VARCHAR, source_file VARCHAR, line_no BIGINT, launch_no INTEGER,
  pattern VARCHAR, error VARCHAR, text VARCHAR
);

-- Prometheus text snapshots (*.prom: what GET /metrics answered; the launcher scrapes around benchmark windows):
-- one row per sample line, counters, gauges and histogram/summary series alike, any metric name.
-- ts / window_name / phase say which scrape: the launch's run.json (windows[].scrapes[]), else phase from the
-- file name (metrics_before.prom) and ts, window_name NULL.
CREATE TABLE IF NOT EXISTS metrics (
  run_id VARCHAR, source_file VARCHAR, line_no BIGINT,
  ts TIMESTAMP,                        -- when the scrape was taken (launcher, local time like SGLang's log); NULL when unknown
  window_name VARCHAR,                 -- benchmark window of the scrape: single_stream | bench_serving (run.json)
  phase VARCHAR,                       -- before | during | after the window
  name VARCHAR,                        -- sample name as printed: sglang:generation_tokens_total, …_bucket, …_sum
  family VARCHAR,                      -- metric family (the name of its # TYPE line; histogram series share it)
  metric_type VARCHAR,                 -- counter | gauge | histogram | summary | untyped (from # TYPE)
  labels JSON,                         -- label → value, e.g. {"category": "target_verify", "tp_rank": "0"}
  value DOUBLE,                        -- the sample value (+Inf / NaN as DOUBLE infinity / NaN)
  value_text VARCHAR,                  -- the value as printed (2.0955e+06, +Inf)
  sample_ts_ms BIGINT                  -- the exposition's optional timestamp (ms since the epoch); NULL when not printed
);

-- the comment lines of a Prometheus snapshot: # HELP / # TYPE / # UNIT (directive), any other # line ('comment')
CREATE TABLE IF NOT EXISTS metric_types (
  run_id VARCHAR, source_file VARCHAR, line_no BIGINT,
  ts TIMESTAMP, window_name VARCHAR, phase VARCHAR,   -- the scrape, as in metrics
  family VARCHAR,                      -- the metric family the line describes (NULL for other comments)
  directive VARCHAR,                   -- HELP | TYPE | UNIT | comment
  text VARCHAR                         -- the help text, the type (counter, gauge …), the unit, or the comment as printed
);

-- one row per request and source: SGLang's --export-metrics-to-file records (request_export), --log-requests lines
-- (log_requests_text: Receive:/Finish:, log_requests_json: --log-requests-format json) and sglang.bench_serving
-- --output-details arrays (bench_serving). The same request seen by two sources has two rows (join on rid).
CREATE TABLE IF NOT EXISTS requests (
  run_id VARCHAR, source_file VARCHAR, line_no BIGINT,   -- the record's line (log sources: the Finish line)
  launch_no INTEGER, ts TIMESTAMP,     -- log sources: the server start and the Finish line's time
  received_line_no BIGINT,             -- log sources: the Receive: line of the same request (NULL when not logged)
  source_kind VARCHAR,                 -- request_export | log_requests_text | log_requests_json | bench_serving
  rid VARCHAR,                         -- SGLang's request id (meta_info.id / obj.rid)
  health_check BOOLEAN,                -- SGLang's own /health probe request (rid HEALTH_CHECK_…)
  finish_reason VARCHAR,               -- length | stop | abort … (meta_info.finish_reason.type)
  prompt_tokens BIGINT, completion_tokens BIGINT, cached_tokens BIGINT,
  e2e_latency_s DOUBLE,                -- server-side end-to-end latency (meta_info.e2e_latency)
  queue_time_s DOUBLE,                 -- meta_info.queue_time
  ttft_s DOUBLE,                       -- bench_serving: time to first token (client side)
  itl_mean_ms DOUBLE,                  -- bench_serving: mean inter-token latency (client side)
  received_unix_s DOUBLE, finished_unix_s DOUBLE,   -- meta_info request_received_ts / request_finished_ts (s since the epoch)
  spec_accept_length DOUBLE,           -- completion tokens / verify steps (incl. the bonus token), SGLang's per-request figure
  spec_accept_rate DOUBLE,             -- accepted / proposed draft tokens (0–1)
  spec_verify_ct BIGINT,               -- verify steps (speculative cycles) of the request
  spec_accept_token_num BIGINT,        -- accepted draft tokens (0.5.14: spec_num_correct_drafts / spec_accepted_drafts)
  spec_draft_token_num BIGINT,         -- proposed draft tokens (0.5.14: spec_num_proposed_drafts / spec_proposed_drafts)
  spec_accept_histogram JSON,          -- verify steps by accepted drafts: element j = steps that accepted j drafts
  request_index INTEGER,               -- bench_serving: position of the request in its benchmark run
  error VARCHAR,                       -- bench_serving: the request's error text (NULL when it succeeded)
  request JSON,                        -- the request as logged (request_parameters / obj)
  extra JSON                           -- every other field of the record
);

-- Start-up of each server start, phase by phase (docs/sql.md "startup_phases"): seconds from the lines' own elapsed
-- values where SGLang prints them (weights, each CUDA graph; 0.5.23's `Engine startup timings` line), else between the
-- lines' timestamps (whole seconds unless SGLANG_LOG_MS=1), and from the launcher's run.json (spawn, /health 200). For
-- a launcher run the phases with within_ready add up to run.json ready_s: what the others leave is phase 'other'.
-- Every rank prints its own weights and graph lines and the start waits for the slowest: a phase timed per rank is
-- that rank's (tp_rank), the boundaries between phases are the first / last line of any rank.
CREATE OR REPLACE VIEW startup_phases AS
WITH ev AS (
  SELECT run_id, coalesce(launch_no, 0) AS launch_no, coalesce(tp_rank, 0) AS rank, kind, graph, ts, elapsed_s, message,
         row_number() OVER (PARTITION BY run_id, coalesce(launch_no, 0), coalesce(tp_rank, 0), kind ORDER BY line_no) AS nth
  FROM server_events WHERE kind IN ('init_dist_begin', 'load_weight_begin',
    'load_weight_end', 'kv_cache_allocated', 'memory_pool_end', 'cuda_graph_end', 'ready', 'startup_timings')),
marks AS (
  SELECT l.run_id, coalesce(l.launch_no, 0) AS launch_no,
         coalesce(any_value(TRY_CAST(json_extract_string(r.run_json, '$.timestamps.spawn') AS TIMESTAMP)), min(l.start_ts)) AS start_ts,
         TRY_CAST(json_extract_string(r.run_json, '$.timestamps.health_200') AS TIMESTAMP) AS health_ts,
         TRY_CAST(json_extract_string(r.run_json, '$.timestamps.bench_start') AS TIMESTAMP) AS bench_ts,
         TRY_CAST(json_extract(r.run_json, '$.ready_s') AS DOUBLE) AS ready_s
  FROM launches l JOIN runs r USING (run_id) GROUP BY ALL),
bounds AS (
  SELECT m.*, min(ts) FILTER (kind IN ('init_dist_begin', 'load_weight_begin')) AS init_ts,
         max(ts) FILTER (kind = 'load_weight_end') AS weights_ts,
         max(ts) FILTER (kind IN ('kv_cache_allocated', 'memory_pool_end')) AS pool_ts,
         max(ts) FILTER (kind = 'cuda_graph_end') AS graphs_ts, min(ts) FILTER (kind = 'ready') AS ready_ts,
         coalesce(any_value(message) FILTER (kind = 'startup_timings' AND rank = 0),
                  any_value(message) FILTER (kind = 'startup_timings')) AS timings
  FROM marks m LEFT JOIN ev USING (run_id, launch_no) GROUP BY ALL),
timing_values AS (  -- 0.5.23's summary line: name=seconds, the graphs inside cuda_graph={…}
  SELECT run_id, launch_no, v[1] AS name, TRY_CAST(v[2] AS DOUBLE) AS seconds, 'startup timings line' AS source
  FROM (SELECT run_id, launch_no, unnest(regexp_extract_all(timings, '(\w+)=([0-9.]+)', 0)) AS pair
        FROM bounds WHERE timings IS NOT NULL), LATERAL (SELECT string_split(pair, '=') AS v)
  UNION ALL  -- else its /metrics gauges (the smg sidecar spells them sglang_…), and 0.5.4's engine_load_weights_time
  SELECT b.run_id, b.launch_no, CASE WHEN m.family LIKE '%engine_load_weights_time' THEN 'load_weight'
         ELSE json_extract_string(m.labels, '$.phase') END, max(m.value), 'metrics'
  FROM metrics m JOIN bounds b ON b.run_id = m.run_id AND b.timings IS NULL
  WHERE regexp_replace(m.family, '^sglang_', 'sglang:') IN ('sglang:startup_time_seconds',
          'sglang:startup_cuda_graph_time_seconds', 'sglang:engine_load_weights_time')
    AND m.name IN (m.family, m.family || '_sum') GROUP BY ALL HAVING max(m.value) > 0),  -- 0.5.14 exports 0: unset
per_rank AS (  -- the lines' own elapsed values, per rank
  SELECT run_id, launch_no, rank, CASE WHEN nth = 1 THEN 'load_weights_target' ELSE 'load_weights_draft' END AS phase,
         2 AS phase_order, sum(elapsed_s) AS seconds
  FROM ev e WHERE kind = 'load_weight_end' AND elapsed_s IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM timing_values t WHERE t.run_id = e.run_id AND t.launch_no = e.launch_no
                    AND t.name = 'load_weight' AND t.seconds > 0)
  GROUP BY ALL
  UNION ALL
  SELECT run_id, launch_no, rank, 'cuda_graph_' || coalesce(graph, 'decode'), 4, sum(elapsed_s)
  FROM ev e WHERE kind = 'cuda_graph_end' AND elapsed_s IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM timing_values t WHERE t.run_id = e.run_id AND t.launch_no = e.launch_no
                    AND t.name NOT IN ('load_weight', 'kv_cache_allocation', 'scheduler_e2e', 'tokenizer_e2e'))
  GROUP BY ALL),
phases AS (
  SELECT run_id, launch_no, 'imports' AS phase, 1 AS phase_order, epoch(init_ts - start_ts) AS seconds,
         'timestamps' AS source, NULL::INTEGER AS tp_rank
  FROM bounds WHERE init_ts IS NOT NULL AND start_ts IS NOT NULL
  UNION ALL
  SELECT run_id, launch_no, phase, phase_order, max(seconds), 'log elapsed', arg_max(rank, (seconds, -rank))
  FROM per_rank GROUP BY run_id, launch_no, phase, phase_order
  UNION ALL
  SELECT run_id, launch_no, CASE name WHEN 'load_weight' THEN 'load_weights' WHEN 'kv_cache_allocation' THEN 'kv_cache'
         ELSE 'cuda_graph_' || name END, CASE name WHEN 'load_weight' THEN 2 WHEN 'kv_cache_allocation' THEN 3 ELSE 4 END,
         seconds, source, NULL
  FROM timing_values WHERE name NOT IN ('scheduler_e2e', 'tokenizer_e2e') AND seconds > 0
  UNION ALL
  SELECT run_id, launch_no, 'kv_cache', 3, greatest(0, epoch(pool_ts - weights_ts)), 'timestamps', NULL
  FROM bounds b WHERE pool_ts IS NOT NULL AND weights_ts IS NOT NULL AND NOT EXISTS (SELECT 1 FROM timing_values t
    WHERE t.run_id = b.run_id AND t.launch_no = b.launch_no AND t.name = 'kv_cache_allocation')
  UNION ALL
  SELECT run_id, launch_no, 'server_warmup', 5,
         greatest(0, epoch(ready_ts - greatest(coalesce(graphs_ts, pool_ts, weights_ts), coalesce(pool_ts, weights_ts)))),
         'timestamps', NULL
  FROM bounds WHERE ready_ts IS NOT NULL AND coalesce(graphs_ts, pool_ts, weights_ts) IS NOT NULL
  UNION ALL
  SELECT run_id, launch_no, 'health_poll', 6, greatest(0, epoch(health_ts - ready_ts)), 'run.json + timestamps', NULL
  FROM bounds WHERE health_ts IS NOT NULL AND ready_ts IS NOT NULL),
named AS (
  SELECT run_id, launch_no, phase, phase_order, seconds, source, tp_rank, true AS within_ready FROM phases
  UNION ALL
  SELECT b.run_id, b.launch_no, 'other', 7, b.ready_s - coalesce((SELECT sum(p.seconds) FROM phases p
         WHERE p.run_id = b.run_id AND p.launch_no = b.launch_no), 0), 'ready_s remainder', NULL, true
  FROM bounds b WHERE b.ready_s IS NOT NULL
  UNION ALL
  SELECT run_id, launch_no, 'first_request', 8, epoch(bench_ts - health_ts), 'run.json', NULL, false
  FROM bounds WHERE bench_ts IS NOT NULL AND health_ts IS NOT NULL)
-- to the microsecond: a sum of the same phases read in another row order (a lake) gives the same figure
SELECT run_id, launch_no, phase, round(seconds, 6) AS seconds, phase_order, source, within_ready, tp_rank FROM named;
