package web

const fetchRequestSchema = `{
  "type": "object",
  "properties": {
    "url": {"type": "string", "maxLength": 4096, "description": "absolute http:// or https:// URL without user:password@; internal addresses (loopback, private, link-local, metadata) are refused"},
    "max_bytes": {"type": "integer", "minimum": 0, "description": "bytes of body to read; 0 or absent is 1048576; more than the worker's ceiling (setting max_bytes, default 8388608) is lowered to it"},
    "timeout_ms": {"type": "integer", "minimum": 0, "maximum": 60000, "description": "budget of the whole fetch, redirects included; 0 or absent is 15000"}
  },
  "required": ["url"]
}`

const fetchResponseSchema = `{
  "type": "object",
  "properties": {
    "url": {"type": "string", "description": "final URL, after at most 5 redirects"},
    "status": {"type": "integer", "description": "HTTP status; 4xx and 5xx are answers, not errors"},
    "content_type": {"type": "string", "description": "the Content-Type header, or the sniffed type when absent"},
    "content": {"type": "string", "description": "the body as UTF-8 text; HTML as readable text with links as [text](url); empty when binary"},
    "bytes": {"type": "integer", "description": "body bytes read, before conversion; 0 when binary"},
    "truncated": {"type": "boolean", "description": "the body, or the text made of an HTML page, was longer than max_bytes, or the content was cut to fit one message"},
    "binary": {"type": "boolean", "description": "the content type is not text: no content"},
    "duration_ms": {"type": "integer"}
  },
  "required": ["url", "status", "content_type", "content", "bytes", "truncated", "duration_ms"]
}`
