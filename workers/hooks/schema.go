package hooks

const publishCollectRequestSchema = `{
  "type": "object",
  "properties": {
    "topic": {"type": "string", "description": "function-id-like hook name, e.g. agent::before_function_call; published on iii.hook.<its tokens>"},
    "payload": {"description": "any JSON value, published as JSON"},
    "merge_rule": {"enum": ["first_block_wins", "field_merge", "pipeline_last_wins"]},
    "timeout_ms": {"type": "integer", "minimum": 0, "maximum": 60000, "description": "collect deadline; 0 or absent is 1000"},
    "expected_replies": {"type": "integer", "minimum": 0, "maximum": 1000, "description": "stop after this many replies; 0 or absent is no limit"},
    "quiescence_ms": {"type": "integer", "minimum": 0, "description": "stop when no reply came for this long after the last; at most the timeout; 0 or absent is 20"}
  },
  "required": ["topic", "merge_rule"]
}`

const publishCollectResponseSchema = `{
  "type": "object",
  "properties": {
    "replies": {"type": "array", "items": {"type": "object"}, "description": "decoded replies in arrival order; a non-object reply is {\"value\": it}"},
    "merged": {"type": "object", "description": "the replies folded by merge_rule; {} when none"},
    "publish_failed": {"type": "boolean", "description": "the hook never reached the bus; a caller guarding a call denies it"},
    "invalid": {"type": "integer", "description": "replies skipped because they did not decode"},
    "dropped": {"type": "integer", "description": "replies lost to a slow consumer; any sets overflow"},
    "omitted": {"type": "integer", "description": "newest replies left out of replies because the answer would exceed the server's max payload; merged still folds them"},
    "overflow": {"type": "boolean", "description": "the round passed its bound (1,000 messages or 8 MiB) and ended early, or lost a reply (dropped); a caller guarding a call denies it"}
  },
  "required": ["replies", "merged"]
}`
