-- statements.lineage_parent(), sent by finish_handoffs(outcomes, release_turns=holders), after the store claimed them
-- SQLite (pysqlite): step 3 of 4, once, and once more per step up the session's compression lineage.

SELECT parent.id
FROM sessions AS child
JOIN sessions AS parent ON parent.id = child.parent_session_id
WHERE child.id = :session_id AND parent.end_reason = 'compression';
