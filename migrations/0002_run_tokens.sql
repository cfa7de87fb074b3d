-- sessiontree schema, step 2: token counts as columns of runs.
-- Derived from the usage JSON (OpenAI's prompt/completion names, or the
-- input/output names other APIs use), so usage roll-ups are plain SUMs and
-- nothing is ever stored twice.

ALTER TABLE runs ADD COLUMN input_tokens INTEGER GENERATED ALWAYS AS (
    coalesce(json_extract(usage, '$.prompt_tokens'), json_extract(usage, '$.input_tokens'))
) VIRTUAL;

ALTER TABLE runs ADD COLUMN output_tokens INTEGER GENERATED ALWAYS AS (
    coalesce(json_extract(usage, '$.completion_tokens'), json_extract(usage, '$.output_tokens'))
) VIRTUAL;
