package sandbox

import (
	"errors"

	"github.com/iii-on-nats/iii/workers"
)

// Sentinel errors of the Go API. Errors that cross the wire are
// *wire.Error values that wrap these, so errors.Is works with both the
// catalog's sentinels (wire.ErrNotFound, ...) and these.
var (
	// ErrStarted is returned by [Worker.Start] when called twice.
	ErrStarted = workers.ErrStarted
	// ErrNoSandbox is wrapped by every error that says a session or a
	// sandbox id has no live sandbox ([Worker.Workdir], shell::exec,
	// sandbox::exec); on the wire it is not_found.
	ErrNoSandbox = errors.New("sandbox: no sandbox")
	// ErrOtherNode is wrapped when the sandbox lives on another node:
	// sandboxes are node-local, so only the node that created one can run
	// commands in it or destroy it; on the wire it is unavailable.
	ErrOtherNode = errors.New("sandbox: the sandbox lives on another node")
	// ErrOrphan is wrapped, beside [ErrNoSandbox], when the session's
	// record is an orphan: it names a sandbox on another node that is gone
	// (no heartbeat for orphan_after) or that is past its expiry. Nothing
	// can reach that sandbox any more; sandbox::create gives the session
	// a new one. On the wire it is not_found.
	ErrOrphan = errors.New("sandbox: orphaned record")
	// ErrNoIsolation is wrapped when bubblewrap is missing or does not work
	// on this node and the setting allow_unsandboxed is not true; on the
	// wire it is unavailable.
	ErrNoIsolation = errors.New("sandbox: isolation unavailable")
	// ErrDiskQuota is wrapped when an fs::write or fs::edit would take a
	// sandbox's workdir past its disk_mb (forbidden, nothing written).
	// An exec is never refused for the quota: over it, the exec runs
	// cleanup-only (Result.CleanupOnly).
	ErrDiskQuota = errors.New("sandbox: disk quota exceeded")
	// ErrNoRoot is returned by [Worker.Start] when neither a root
	// directory ([WithRoot], setting "root") nor a home directory is known.
	ErrNoRoot = errors.New("sandbox: no root directory")
	// ErrBadRecord is wrapped, beside [ErrNoSandbox], when the session's
	// record does not decode or contradicts its key: nothing can reach
	// the sandbox it named. sandbox::create replaces the record and
	// sandbox::destroy deletes it; on the wire it is not_found.
	ErrBadRecord = errors.New("sandbox: bad record")
	// ErrInvalidID is wrapped when a sandbox id or session id is malformed.
	ErrInvalidID = errors.New("sandbox: invalid id")
)
