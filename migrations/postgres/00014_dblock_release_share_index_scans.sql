-- dblock: a reader's release counts the shares left of its name with index scans that mark the
-- entries of deleted shares dead, never with a bitmap scan (dblock_release_share of 00013, given
-- the setting; its body is unchanged).
--
-- Each reader that leaves deletes its row of dblock_shares, and the index entry stays until a
-- vacuum; readers that come back under the same owner find theirs through the unique check,
-- which marks it dead. But the release counts the shares of the whole name (name = $1 on the
-- primary key), and for that the planner picks a bitmap scan, which never marks an entry dead:
-- every release revisited the dead entry of every owner that had read the name since the last
-- vacuum (in TestDeadEntriesKilled a bitmap scan still returned 446 entries of the name after
-- 300 owners and 15 s of further releases; once 2,500 owners had read a name, its release took
-- 0.79-0.81 ms, against 0.29-0.44 ms with this setting). With bitmap scans off, the count is an
-- index scan, which marks the entries of rows dead to every transaction as it passes them, and
-- the next count skips them. The setting is the function's own (restored when it returns); a
-- later migration that replaces the function must carry it in its definition.

-- +goose Up
ALTER FUNCTION dblock_release_share(text, text, bigint) SET enable_bitmapscan = off;

-- +goose Down
ALTER FUNCTION dblock_release_share(text, text, bigint) RESET enable_bitmapscan;
