package sandbox

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/iii-on-nats/iii/engine/wire"
)

// Isolation modes of a sandbox.
const (
	// IsolationBwrap: commands run in bubblewrap namespaces.
	IsolationBwrap = "bwrap"
	// IsolationNone: commands run with os/exec in the workdir, only when
	// the node allows it ([WithAllowUnsandboxed]).
	IsolationNone = "none"
)

// Bounds of exec requests. A single argument cannot exceed the kernel's
// MAX_ARG_STRLEN (128 KiB), and a reply must fit the max payload.
const (
	MaxCommandBytes = 100 << 10
	MaxArgv         = 4096
	MaxArgvBytes    = 100 << 10 // each argument, and all of them together
	MaxStdinBytes   = 512 << 10
	MaxEnvVars      = 128
	MaxEnvNameBytes = 128
	MaxEnvValue     = 32 << 10
)

// CreateRequest is the payload of sandbox::create.
type CreateRequest struct {
	SessionID string `json:"session_id"`
	// Network shares the host's network with the sandbox; false (the
	// default) gives it an empty network namespace (loopback only).
	Network bool `json:"network,omitempty"`
	// Limits are the sandbox's limits; zero fields take the node's
	// defaults.
	Limits Limits `json:"limits"`
}

// Validate checks the session id; limits are checked against the node's
// maxima when the sandbox is created.
func (r CreateRequest) Validate() error {
	if err := validateSessionID(r.SessionID); err != nil {
		return invalid(err)
	}
	return nil
}

// Sandbox describes one sandbox: its record in the [SandboxesBucket] and
// the answer of sandbox::create.
type Sandbox struct {
	SandboxID string `json:"sandbox_id"`
	SessionID string `json:"session_id"`
	// Node is the node the sandbox lives on; only that node can run
	// commands in it.
	Node string `json:"node"`
	// Workdir is the sandbox's only writable folder, at the same absolute
	// path on the host and inside the sandbox.
	Workdir   string `json:"workdir"`
	Isolation string `json:"isolation"`
	Network   bool   `json:"network"`
	// Limits are the effective limits.
	Limits Limits `json:"limits"`
	// Enforced names what enforces the limits on this node:
	// "cgroup:pids", "cgroup:memory" or "rlimit:as", "rlimit:cpu",
	// "rlimit:fsize", "quota:disk", "timeout:wall".
	Enforced []string `json:"enforced"`
	// CreatedAt and LastUsedAt are Unix milliseconds. LastUsedAt is
	// written at most about once a minute per sandbox.
	CreatedAt  int64 `json:"created_at"`
	LastUsedAt int64 `json:"last_used_at"`
	// ExpiresAt (Unix ms) is when the node's reaper destroys the sandbox
	// for max_age: created_at plus the max_age of the node that holds
	// it. Other nodes judge a record by it (see the package doc); 0 in
	// records written before it existed.
	ExpiresAt int64 `json:"expires_at,omitempty"`
}

// ExecRequest is the payload of sandbox::exec.
type ExecRequest struct {
	SandboxID string `json:"sandbox_id"`
	Command
}

// Validate checks the sandbox id and the command.
func (r ExecRequest) Validate() error {
	if r.SandboxID == "" {
		return wire.Errorf(wire.CodeInvalidPayload, "sandbox_id is required")
	}
	if _, err := parseSandboxID(r.SandboxID); err != nil {
		return invalid(err)
	}
	return r.Command.Validate()
}

// Command is what to run: the payload of shell::exec, and of
// sandbox::exec beside the sandbox id.
type Command struct {
	// Command is run by /bin/sh -c. Exactly one of Command and Argv.
	Command string `json:"command,omitempty"`
	// Argv is run as is (argv[0] looked up in PATH).
	Argv []string `json:"argv,omitempty"`
	// Stdin is written to the command's standard input; empty means
	// /dev/null.
	Stdin string `json:"stdin,omitempty"`
	// Env adds environment variables (PATH, HOME, TMPDIR and LANG are
	// set by the sandbox; Env may override them).
	Env map[string]string `json:"env,omitempty"`
	// TimeoutMs shortens the sandbox's wall_ms for this exec; 0 means
	// wall_ms.
	TimeoutMs int `json:"timeout_ms,omitempty"`
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate checks the command: exactly one of command and argv, sizes,
// no NUL byte anywhere, environment names of letters, digits and '_'.
func (c Command) Validate() error {
	switch {
	case c.Command == "" && len(c.Argv) == 0:
		return wire.Errorf(wire.CodeInvalidPayload, "one of command and argv is required")
	case c.Command != "" && len(c.Argv) > 0:
		return wire.Errorf(wire.CodeInvalidPayload, "give command or argv, not both")
	case len(c.Command) > MaxCommandBytes:
		return wire.Errorf(wire.CodeInvalidPayload, "command is %d bytes (at most %d)", len(c.Command), MaxCommandBytes)
	case strings.IndexByte(c.Command, 0) >= 0:
		return wire.Errorf(wire.CodeInvalidPayload, "command contains a NUL byte")
	case len(c.Argv) > MaxArgv:
		return wire.Errorf(wire.CodeInvalidPayload, "argv has %d elements (at most %d)", len(c.Argv), MaxArgv)
	case len(c.Stdin) > MaxStdinBytes:
		return wire.Errorf(wire.CodeInvalidPayload, "stdin is %d bytes (at most %d)", len(c.Stdin), MaxStdinBytes)
	case c.TimeoutMs < 0:
		return wire.Errorf(wire.CodeInvalidPayload, "timeout_ms %d is negative", c.TimeoutMs)
	case len(c.Env) > MaxEnvVars:
		return wire.Errorf(wire.CodeInvalidPayload, "env has %d variables (at most %d)", len(c.Env), MaxEnvVars)
	}
	if len(c.Argv) > 0 && c.Argv[0] == "" {
		return wire.Errorf(wire.CodeInvalidPayload, "argv[0] is empty")
	}
	total := 0
	for i, a := range c.Argv {
		total += len(a)
		if strings.IndexByte(a, 0) >= 0 {
			return wire.Errorf(wire.CodeInvalidPayload, "argv[%d] contains a NUL byte", i)
		}
	}
	if total > MaxArgvBytes {
		return wire.Errorf(wire.CodeInvalidPayload, "argv is %d bytes (at most %d)", total, MaxArgvBytes)
	}
	for k, v := range c.Env {
		if err := validateEnvName(k); err != nil {
			return invalid(err)
		}
		if len(v) > MaxEnvValue || strings.IndexByte(v, 0) >= 0 {
			return wire.Errorf(wire.CodeInvalidPayload, "env %s: value must be at most %d bytes with no NUL byte", k, MaxEnvValue)
		}
	}
	return nil
}

// validateEnvName checks an environment variable name: a letter or '_',
// then letters, digits and '_', at most [MaxEnvNameBytes].
func validateEnvName(k string) error {
	if len(k) > MaxEnvNameBytes || !envNameRE.MatchString(k) {
		return fmt.Errorf("env name %q must be a letter or '_' then letters, digits and '_' (at most %d)", k, MaxEnvNameBytes)
	}
	return nil
}

// argv is the command line the request runs.
func (c Command) argv() []string {
	if c.Command != "" {
		return []string{"/bin/sh", "-c", c.Command}
	}
	return c.Argv
}

// Result is the answer of sandbox::exec and shell::exec.
type Result struct {
	// ExitCode is the command's exit status; a command killed by signal N
	// exits 128+N, as shells report it.
	ExitCode int `json:"exit_code"`
	// Signal names the signal that ended the command ("SIGKILL") when it
	// is known: the sandbox killed it (timeout), or, without isolation,
	// the wait status says so.
	Signal string `json:"signal,omitempty"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// Truncated says stdout or stderr was longer than the cap; the rest
	// was read and discarded. StdoutBytes and StderrBytes are the full
	// lengths.
	Truncated   bool  `json:"truncated"`
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	// TimedOut says the exec ran out of time and was killed.
	TimedOut bool `json:"timed_out"`
	// OOMKilled says the memory limit killed a process of the sandbox
	// while the exec ran.
	OOMKilled bool `json:"oom_killed,omitempty"`
	// OverQuota says the workdir now holds more than disk_mb: the next
	// exec runs cleanup-only (CleanupOnly) until files are removed.
	OverQuota bool `json:"over_quota,omitempty"`
	// CleanupOnly says the workdir held more than disk_mb when the exec
	// began, so it ran with no file allowed to grow (RLIMIT_FSIZE 0): a
	// write to a file, in /tmp too, kills the writer with SIGXFSZ (exit
	// 153), while removing, truncating, moving and reading files work.
	CleanupOnly bool `json:"cleanup_only,omitempty"`
	// QuotaStopped says the workdir passed disk_mb while the command ran,
	// so it was stopped (SIGKILL).
	QuotaStopped bool  `json:"quota_stopped,omitempty"`
	DurationMs   int64 `json:"duration_ms"`
	// Isolation is the sandbox's isolation: "bwrap" or "none".
	Isolation string `json:"isolation"`
}

// DestroyRequest is the payload of sandbox::destroy: exactly one of the
// two ids.
type DestroyRequest struct {
	SandboxID string `json:"sandbox_id,omitempty"`
	SessionID string `json:"session_id,omitempty"`
}

// Validate checks that exactly one well-formed id is given.
func (r DestroyRequest) Validate() error {
	switch {
	case r.SandboxID == "" && r.SessionID == "":
		return wire.Errorf(wire.CodeInvalidPayload, "one of sandbox_id and session_id is required")
	case r.SandboxID != "" && r.SessionID != "":
		return wire.Errorf(wire.CodeInvalidPayload, "give sandbox_id or session_id, not both")
	case r.SandboxID != "":
		if _, err := parseSandboxID(r.SandboxID); err != nil {
			return invalid(err)
		}
	default:
		if err := validateSessionID(r.SessionID); err != nil {
			return invalid(err)
		}
	}
	return nil
}

// DestroyResponse is the answer of sandbox::destroy.
type DestroyResponse struct {
	// Destroyed is false when there was no such sandbox.
	Destroyed bool `json:"destroyed"`
}

// ListRequest is the payload of sandbox::list.
type ListRequest struct {
	// SessionID narrows the list to one session's sandbox.
	SessionID string `json:"session_id,omitempty"`
	// After continues a truncated list: the session_id of the last
	// sandbox of the previous page.
	After string `json:"after,omitempty"`
}

// Validate checks the optional session id and cursor.
func (r ListRequest) Validate() error {
	for _, sid := range []string{r.SessionID, r.After} {
		if sid != "" {
			if err := validateSessionID(sid); err != nil {
				return invalid(err)
			}
		}
	}
	return nil
}

// ListResponse is the answer of sandbox::list, by session id; never
// null.
type ListResponse struct {
	Sandboxes []Sandbox `json:"sandboxes"`
	// Truncated is set when the server's max payload cut the list short:
	// ask again with After set to the last sandbox's session_id.
	Truncated bool `json:"truncated,omitempty"`
}

func invalid(err error) *wire.Error { return wire.Wrap(wire.CodeInvalidPayload, err, "") }
