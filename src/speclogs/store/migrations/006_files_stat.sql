-- what the file was on disk when it was ingested: an ingest skips a file whose path, size, mtime and inode are the
-- same without reading it (--verify reads and hashes it anyway)
ALTER TABLE files ADD COLUMN IF NOT EXISTS mtime_ns BIGINT;   -- st_mtime_ns; NULL for stdin
ALTER TABLE files ADD COLUMN IF NOT EXISTS inode BIGINT;      -- st_ino; NULL for stdin
