package directory

const getRequestSchema = `{
  "type": "object",
  "properties": {
    "id": {"type": "string", "description": "skill id: iii://<worker>/<function> or <worker>/<function>, e.g. iii://sandbox/fs::read"}
  },
  "required": ["id"]
}`

const summaryProperties = `
    "id": {"type": "string", "description": "<worker>/<function or page name>"},
    "link": {"type": "string", "description": "iii://<id>"},
    "worker": {"type": "string"},
    "title": {"type": "string"},
    "type": {"type": "string", "description": "function, overview, or the author's word"},
    "function_id": {"type": "string", "description": "the function the skill documents"},
    "description": {"type": "string", "description": "one line"}`

const getResponseSchema = `{
  "type": "object",
  "properties": {` + summaryProperties + `,
    "body": {"type": "string", "description": "the markdown after the frontmatter"},
    "source": {"enum": ["published", "folder"], "description": "published by a worker, or a file of the skills folder (which overrides a published skill)"}
  },
  "required": ["id", "link", "worker", "title", "body", "source"]
}`

const listRequestSchema = `{
  "type": "object",
  "properties": {
    "worker": {"type": "string", "description": "only this worker's skills"},
    "type": {"type": "string", "description": "only skills of this type (function, overview, ...)"},
    "after": {"type": "string", "description": "continue a truncated list: the id of the last skill received"}
  }
}`

const listResponseSchema = `{
  "type": "object",
  "properties": {
    "skills": {"type": "array", "description": "sorted by id", "items": {
      "type": "object",
      "properties": {` + summaryProperties + `
      },
      "required": ["id", "link", "worker", "title"]
    }},
    "truncated": {"type": "boolean", "description": "the server's max payload cut the list: ask again with after"}
  },
  "required": ["skills"]
}`

const indexRequestSchema = `{"type": "object", "properties": {}}`

const indexResponseSchema = `{
  "type": "object",
  "properties": {
    "workers": {"type": "array", "description": "sorted by worker", "items": {
      "type": "object",
      "properties": {
        "worker": {"type": "string"},
        "overview": {"type": "string", "description": "the body of <worker>/overview, or a generated list: - [title](iii://id): description"},
        "skills": {"type": "array", "items": {"type": "string"}, "description": "ids of the worker's other skills"}
      },
      "required": ["worker", "overview", "skills"]
    }},
    "markdown": {"type": "string", "description": "the whole index, one line per skill, for a system prompt; empty when there are no skills"},
    "truncated": {"type": "boolean", "description": "the index exceeded the server's max payload: overviews left out, markdown possibly cut after a whole line"}
  },
  "required": ["workers", "markdown"]
}`
