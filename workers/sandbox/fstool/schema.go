package fstool

const readRequestSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "the file, relative to the working directory or absolute inside it"},
    "offset": {"type": "integer", "minimum": 0, "description": "first line to answer, 1-based; 0 or absent is 1"},
    "limit": {"type": "integer", "minimum": 0, "description": "number of lines to answer; 0 or absent is 2000"}
  },
  "required": ["path"]
}`

const readResponseSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "the file, relative to the working directory"},
    "content": {"type": "string", "description": "the lines like cat -n: the line number right-aligned in 6 columns, a tab, the line; lines joined by newlines; empty for a binary file"},
    "lines_read": {"type": "integer", "description": "lines in content"},
    "total_lines": {"type": "integer", "description": "lines in the file"},
    "truncated": {"type": "boolean", "description": "content does not reach the end of the file (limit or size cap), or a line was cut"},
    "binary": {"type": "boolean", "description": "the file has NUL bytes or invalid UTF-8 in its first 8 KiB; no content"},
    "size": {"type": "integer", "description": "the file's size in bytes"}
  },
  "required": ["path", "content", "lines_read", "total_lines", "truncated", "size"]
}`

const writeRequestSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "the file to create or replace; missing parent directories are created"},
    "content": {"type": "string", "description": "the whole new content"}
  },
  "required": ["path", "content"]
}`

const writeResponseSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string"},
    "bytes": {"type": "integer", "description": "bytes written"},
    "created": {"type": "boolean", "description": "the file did not exist"}
  },
  "required": ["path", "bytes", "created"]
}`

const editRequestSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "maxLength": 4096},
    "old_text": {"type": "string", "minLength": 1, "description": "the exact text to replace, whitespace included; must occur once unless replace_all"},
    "new_text": {"type": "string", "description": "the replacement; must differ from old_text"},
    "replace_all": {"type": "boolean", "description": "replace every occurrence"}
  },
  "required": ["path", "old_text", "new_text"]
}`

const editResponseSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string"},
    "replacements": {"type": "integer", "description": "occurrences replaced"}
  },
  "required": ["path", "replacements"]
}`

const lsRequestSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "maxLength": 4096, "description": "the directory; empty or absent is the working directory"}
  }
}`

const lsResponseSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string"},
    "entries": {
      "type": "array",
      "description": "sorted by name",
      "items": {
        "type": "object",
        "properties": {
          "name": {"type": "string"},
          "type": {"enum": ["file", "dir", "symlink", "other"]},
          "size": {"type": "integer"},
          "mod_time": {"type": "string", "format": "date-time"}
        },
        "required": ["name", "type", "size", "mod_time"]
      }
    },
    "truncated": {"type": "boolean", "description": "the directory has more entries than the answer"}
  },
  "required": ["path", "entries", "truncated"]
}`

const globRequestSchema = `{
  "type": "object",
  "properties": {
    "pattern": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "slash-separated glob: * ? [a-z] within a name, ** for any number of directories, {a,b} alternatives; e.g. **/*.go"},
    "path": {"type": "string", "maxLength": 4096, "description": "the directory the pattern starts from; empty or absent is the working directory"}
  },
  "required": ["pattern"]
}`

const globResponseSchema = `{
  "type": "object",
  "properties": {
    "matches": {"type": "array", "items": {"type": "string"}, "description": "matching files (not directories), relative to the working directory, sorted"},
    "truncated": {"type": "boolean", "description": "there may be more matches"}
  },
  "required": ["matches", "truncated"]
}`

const grepRequestSchema = `{
  "type": "object",
  "properties": {
    "pattern": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "RE2 regular expression matched against each line"},
    "path": {"type": "string", "maxLength": 4096, "description": "a directory to search recursively, or one file; empty or absent is the working directory"},
    "glob": {"type": "string", "maxLength": 4096, "description": "only files matching it: without / it matches the file name (*.go), with / the path below path (cmd/**/*.go)"},
    "ignore_case": {"type": "boolean"},
    "max_results": {"type": "integer", "minimum": 0, "description": "most matching lines to answer; 0 or absent is 100"}
  },
  "required": ["pattern"]
}`

const grepResponseSchema = `{
  "type": "object",
  "properties": {
    "matches": {
      "type": "array",
      "description": "in path order, then line order",
      "items": {
        "type": "object",
        "properties": {
          "path": {"type": "string", "description": "relative to the working directory"},
          "line": {"type": "integer", "description": "1-based"},
          "text": {"type": "string", "description": "the line, cut to 500 bytes"}
        },
        "required": ["path", "line", "text"]
      }
    },
    "truncated": {"type": "boolean", "description": "there may be more matches than the answer holds: a bound stopped it or a file was not searched"},
    "skipped": {"type": "array", "items": {"type": "string"}, "maxItems": 20, "description": "text files not searched (over the size bound, 4 MiB by default; changing; unreadable): a match may be in them"},
    "skipped_files": {"type": "integer", "description": "how many files were not searched, named in skipped or not"}
  },
  "required": ["matches", "truncated"]
}`
