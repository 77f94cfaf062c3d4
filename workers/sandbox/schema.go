package sandbox

const limitsSchema = `{
      "type": "object",
      "description": "zero or absent fields take the node's defaults; each is checked against the node's min and max",
      "properties": {
        "cpu_seconds": {"type": "integer", "minimum": 0, "description": "CPU seconds per process of an exec (RLIMIT_CPU)"},
        "memory_mb": {"type": "integer", "minimum": 0, "description": "memory of the whole sandbox (cgroup), /tmp included"},
        "pids": {"type": "integer", "minimum": 0, "description": "tasks (processes and threads) of the whole sandbox (cgroup pids.max)"},
        "disk_mb": {"type": "integer", "minimum": 0, "description": "largest file (RLIMIT_FSIZE) and workdir quota, watched while each exec runs, checked after it and before each growing fs::write or fs::edit"},
        "wall_ms": {"type": "integer", "minimum": 0, "description": "wall-clock timeout of an exec"}
      }
    }`

const sandboxSchema = `{
  "type": "object",
  "properties": {
    "sandbox_id": {"type": "string"},
    "session_id": {"type": "string"},
    "node": {"type": "string", "description": "the node the sandbox lives on (sandboxes are node-local)"},
    "workdir": {"type": "string", "description": "the only writable folder, same absolute path inside and outside"},
    "isolation": {"enum": ["bwrap", "none"]},
    "network": {"type": "boolean"},
    "limits": ` + limitsSchema + `,
    "enforced": {"type": "array", "items": {"type": "string"}, "description": "cgroup:pids, cgroup:memory or rlimit:as, rlimit:cpu, rlimit:fsize, quota:disk, timeout:wall"},
    "created_at": {"type": "integer", "description": "Unix ms"},
    "last_used_at": {"type": "integer", "description": "Unix ms"},
    "expires_at": {"type": "integer", "description": "Unix ms: created_at plus the holding node's max_age"}
  },
  "required": ["sandbox_id", "session_id", "node", "workdir", "isolation", "network", "limits", "enforced", "created_at"]
}`

const createRequestSchema = `{
  "type": "object",
  "properties": {
    "session_id": {"type": "string", "maxLength": 128, "pattern": "^([A-Za-z0-9_-]{1,64}\\.)?[A-Za-z0-9_-]+$", "description": "the session: an id, or <region>.<name> for a session homed in a region"},
    "network": {"type": "boolean", "description": "share the host's network; default false (loopback only)"},
    "limits": ` + limitsSchema + `
  },
  "required": ["session_id"]
}`

// commandProperties are the fields of a command, shared by sandbox::exec
// and shell::exec.
const commandProperties = `"command": {"type": "string", "maxLength": 102400, "description": "run by /bin/sh -c; exactly one of command and argv"},
    "argv": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 4096, "description": "program and arguments, argv[0] looked up in PATH"},
    "stdin": {"type": "string", "maxLength": 524288, "description": "standard input; absent: /dev/null"},
    "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "extra environment variables (names: letters, digits, _)"},
    "timeout_ms": {"type": "integer", "minimum": 0, "description": "shorter timeout than the sandbox's wall_ms"}`

const execRequestSchema = `{
  "type": "object",
  "properties": {
    "sandbox_id": {"type": "string"},
    ` + commandProperties + `
  },
  "required": ["sandbox_id"]
}`

const shellExecRequestSchema = `{
  "type": "object",
  "properties": {
    ` + commandProperties + `
  }
}`

const resultSchema = `{
  "type": "object",
  "properties": {
    "exit_code": {"type": "integer", "description": "128+N when killed by signal N"},
    "signal": {"type": "string", "description": "the signal that ended the command, when known (SIGKILL at a timeout)"},
    "stdout": {"type": "string"},
    "stderr": {"type": "string"},
    "truncated": {"type": "boolean", "description": "stdout or stderr exceeded the cap; the rest was discarded"},
    "stdout_bytes": {"type": "integer"},
    "stderr_bytes": {"type": "integer"},
    "timed_out": {"type": "boolean"},
    "oom_killed": {"type": "boolean"},
    "over_quota": {"type": "boolean", "description": "the workdir exceeds disk_mb: the next exec is cleanup-only"},
    "cleanup_only": {"type": "boolean", "description": "the workdir exceeded disk_mb when the exec began: no file could grow (a writer gets SIGXFSZ); removing, truncating and moving files work"},
    "quota_stopped": {"type": "boolean", "description": "the workdir passed disk_mb while the command ran: it was stopped (SIGKILL)"},
    "duration_ms": {"type": "integer"},
    "isolation": {"enum": ["bwrap", "none"]}
  },
  "required": ["exit_code", "stdout", "stderr", "truncated", "timed_out", "duration_ms", "isolation"]
}`

const destroyRequestSchema = `{
  "type": "object",
  "properties": {
    "sandbox_id": {"type": "string"},
    "session_id": {"type": "string"}
  },
  "oneOf": [{"required": ["sandbox_id"]}, {"required": ["session_id"]}]
}`

const destroyResponseSchema = `{
  "type": "object",
  "properties": {"destroyed": {"type": "boolean", "description": "false when there was no such sandbox"}},
  "required": ["destroyed"]
}`

const listRequestSchema = `{
  "type": "object",
  "properties": {
    "session_id": {"type": "string"},
    "after": {"type": "string", "description": "continue a truncated list: the session_id of the last sandbox of the previous page"}
  }
}`

const listResponseSchema = `{
  "type": "object",
  "properties": {
    "sandboxes": {"type": "array", "items": ` + sandboxSchema + `, "description": "by session_id"},
    "truncated": {"type": "boolean", "description": "the server's max payload cut the list short: ask again with after"}
  },
  "required": ["sandboxes"]
}`
