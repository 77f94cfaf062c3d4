package sandbox

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

// Option configures a [Worker].
type Option func(*options) error

type options struct {
	root             string // workdirs live in root/<sandbox id>
	systemRoot       string // the per-home roots of root nodes ([SystemRoot])
	node             string
	allowUnsandboxed bool
	bwrap            string // bubblewrap's path
	cgroupRoot       string // "" disables cgroups
	uid, gid         int    // the sandbox's ids inside its user namespace
	hostUID, hostGID int    // who runs bubblewrap when the node is root; -1: the node's user
	defaults, max    Limits
	maxOutput        int
	killGrace        time.Duration
	idleTTL, maxAge  time.Duration
	reapInterval     time.Duration // 0: only at Start
	orphanAfter      time.Duration // a node silent this long is gone
	now              func() time.Time
	logger           *slog.Logger // nil: the engine's
}

// Defaults of the options.
const (
	// DefaultBwrap is where Debian's bubblewrap package installs bwrap.
	DefaultBwrap = "/usr/bin/bwrap"
	// DefaultCgroupRoot is where cgroups are mounted (v2 there, or v1
	// hierarchies in its subfolders pids/ and memory/).
	DefaultCgroupRoot = "/sys/fs/cgroup"
	// DefaultMaxOutput caps stdout and stderr of one exec, each.
	DefaultMaxOutput = 64 << 10
	// MaxOutputCeiling is the largest output cap: two of them still fit a
	// msgpack reply in NATS's default 1 MiB max payload. An answer that
	// does not (a JSON caller's escapes, a smaller max payload) has its
	// outputs cut further.
	MaxOutputCeiling = 256 << 10
	// DefaultKillGrace is the time between SIGTERM and SIGKILL when an
	// exec times out.
	DefaultKillGrace = 500 * time.Millisecond
	// DefaultIdleTTL is how long a sandbox may go without an exec before
	// the reaper destroys it.
	DefaultIdleTTL = 30 * time.Minute
	// DefaultMaxAge is how long a sandbox may live at all.
	DefaultMaxAge = 24 * time.Hour
	// DefaultReapInterval is how often the reaper runs after Start.
	DefaultReapInterval = time.Minute
	// DefaultOrphanAfter is how long a node may go without a heartbeat
	// before its sandbox records are orphans: another node may replace
	// them. A node writes its heartbeat every fifth of it.
	DefaultOrphanAfter = 5 * time.Minute
	// MinOrphanAfter is the shortest orphan_after.
	MinOrphanAfter = time.Second
	// DefaultUID and DefaultGID are the unprivileged ids commands run as
	// inside the sandbox's user namespace.
	DefaultUID, DefaultGID = 1000, 1000
	// DefaultHostUID and DefaultHostGID are the host ids ("nobody") a
	// node running as root runs bubblewrap as, and that own the files of
	// its sandboxes.
	DefaultHostUID, DefaultHostGID = 65534, 65534
)

func defaultOptions() options {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	hostUID, hostGID := -1, -1
	if os.Geteuid() == 0 {
		hostUID, hostGID = DefaultHostUID, DefaultHostGID
	}
	return options{
		hostUID:      hostUID,
		hostGID:      hostGID,
		systemRoot:   SystemRoot,
		node:         host,
		bwrap:        DefaultBwrap,
		cgroupRoot:   DefaultCgroupRoot,
		uid:          DefaultUID,
		gid:          DefaultGID,
		defaults:     DefaultLimits,
		max:          MaxLimits,
		maxOutput:    DefaultMaxOutput,
		killGrace:    DefaultKillGrace,
		idleTTL:      DefaultIdleTTL,
		maxAge:       DefaultMaxAge,
		reapInterval: DefaultReapInterval,
		orphanAfter:  DefaultOrphanAfter,
		now:          time.Now,
	}
}

// buildOptions applies opts over the defaults, then checks what depends on
// several options (defaults within maxima).
func buildOptions(opts []Option) (options, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return options{}, err
		}
	}
	for _, f := range limitFields {
		if d, m := *f.get(&o.defaults), *f.get(&o.max); d > m {
			return options{}, fmt.Errorf("%w: sandbox: default %s %d exceeds the maximum %d", engine.ErrInvalidOption, f.name, d, m)
		}
	}
	return o, nil
}

func invalidOption(format string, args ...any) error {
	return fmt.Errorf("%w: sandbox: %s", engine.ErrInvalidOption, fmt.Sprintf(format, args...))
}

// WithRoot sets the folder the workdirs live in, one folder per sandbox
// id (default: the "root" setting, else <home>/sandboxes). It must be an
// absolute path private to this node; it is created with mode 0700.
func WithRoot(dir string) Option {
	return func(o *options) error {
		if dir == "" || !filepath.IsAbs(dir) {
			return invalidOption("root %q is not an absolute path", dir)
		}
		o.root = filepath.Clean(dir)
		return nil
	}
}

// withSystemRoot sets the folder of the per-home roots the reaper may
// remove once their node is gone (default [SystemRoot]); tests point it
// into a temporary folder.
func withSystemRoot(dir string) Option {
	return func(o *options) error {
		if dir == "" || !filepath.IsAbs(dir) {
			return invalidOption("system root %q is not an absolute path", dir)
		}
		o.systemRoot = filepath.Clean(dir)
		return nil
	}
}

// WithNode sets the node id recorded with every sandbox (default the
// host name). Sandboxes are node-local: another node answers calls for
// them with unavailable.
func WithNode(node string) Option {
	return func(o *options) error {
		if node == "" || len(node) > 256 {
			return invalidOption("node %q must be 1 to 256 bytes", node)
		}
		o.node = node
		return nil
	}
}

// WithAllowUnsandboxed lets the worker run commands without isolation
// (os/exec in the workdir, as the node's user, limits where possible) when
// bubblewrap is missing or fails. Off by default: without it such a node
// refuses sandbox::create and every exec with unavailable.
func WithAllowUnsandboxed(allow bool) Option {
	return func(o *options) error {
		o.allowUnsandboxed = allow
		return nil
	}
}

// WithBwrap sets bubblewrap's path (default [DefaultBwrap]).
func WithBwrap(path string) Option {
	return func(o *options) error {
		if path == "" {
			return invalidOption("empty bwrap path")
		}
		o.bwrap = path
		return nil
	}
}

// WithCgroupRoot sets where cgroups are mounted (default
// [DefaultCgroupRoot]); "" turns cgroups off, leaving only rlimits.
func WithCgroupRoot(dir string) Option {
	return func(o *options) error {
		if dir != "" && !filepath.IsAbs(dir) {
			return invalidOption("cgroup root %q is not an absolute path", dir)
		}
		o.cgroupRoot = dir
		return nil
	}
}

// WithSandboxUser sets the uid and gid commands run as inside the
// sandbox's user namespace (default 1000:1000; never 0).
func WithSandboxUser(uid, gid int) Option {
	return func(o *options) error {
		if uid <= 0 || gid <= 0 || uid > 1<<31-2 || gid > 1<<31-2 {
			return invalidOption("sandbox user %d:%d must be unprivileged (1 to 2147483646)", uid, gid)
		}
		o.uid, o.gid = uid, gid
		return nil
	}
}

// WithHostUser sets the host uid and gid a node running as root runs
// bubblewrap as (default 65534:65534, "nobody"): the sandbox's user is
// that unprivileged host user for every permission check the kernel
// makes, and it owns the sandbox's files. uid 0 runs bubblewrap as root
// instead, which needs no unprivileged user namespaces but makes the
// sandbox's user root on the host for file permission checks; /proc is
// then read-only inside (as always) but that mode is weaker: use it only
// where unprivileged user namespaces are off. Ignored when the node does
// not run as root (bubblewrap then runs as the node's user).
func WithHostUser(uid, gid int) Option {
	return func(o *options) error {
		if uid < 0 || gid < 0 || uid > 1<<31-2 || gid > 1<<31-2 {
			return invalidOption("host user %d:%d is out of range (0 to 2147483646)", uid, gid)
		}
		o.hostUID, o.hostGID = uid, gid
		return nil
	}
}

// WithDefaultLimits sets the limits of a sandbox whose create names none
// (default [DefaultLimits]); a zero field keeps the current default.
func WithDefaultLimits(l Limits) Option {
	return func(o *options) error {
		merged, err := mergeLimits(o.defaults, l, "default")
		if err != nil {
			return err
		}
		o.defaults = merged
		return nil
	}
}

// WithMaxLimits sets the largest limits a create may ask for (default
// [MaxLimits]); a zero field keeps the current maximum.
func WithMaxLimits(l Limits) Option {
	return func(o *options) error {
		merged, err := mergeLimits(o.max, l, "max")
		if err != nil {
			return err
		}
		o.max = merged
		return nil
	}
}

func mergeLimits(cur, l Limits, kind string) (Limits, error) {
	for _, f := range limitFields {
		if v := *f.get(&l); v != 0 {
			*f.get(&cur) = v
		}
	}
	if err := checkLimitSet(kind, cur); err != nil {
		return Limits{}, fmt.Errorf("%w: sandbox: %w", engine.ErrInvalidOption, err)
	}
	return cur, nil
}

// WithMaxOutput caps stdout and stderr of one exec, each, in bytes
// (default [DefaultMaxOutput], at most [MaxOutputCeiling]); the rest is
// read and discarded, and the result says truncated.
func WithMaxOutput(n int) Option {
	return func(o *options) error {
		if n < 1 || n > MaxOutputCeiling {
			return invalidOption("max output %d is out of range (1 to %d)", n, MaxOutputCeiling)
		}
		o.maxOutput = n
		return nil
	}
}

// WithKillGrace sets the time between SIGTERM and SIGKILL when an exec
// times out (default [DefaultKillGrace], at most 30 s).
func WithKillGrace(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 || d > 30*time.Second {
			return invalidOption("kill grace %v is out of range (0 to 30s)", d)
		}
		o.killGrace = d
		return nil
	}
}

// WithIdleTTL sets how long a sandbox may go without an exec before the
// reaper destroys it (default [DefaultIdleTTL]).
func WithIdleTTL(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return invalidOption("idle ttl %v must be positive", d)
		}
		o.idleTTL = d
		return nil
	}
}

// WithMaxAge sets how long a sandbox may live at all (default
// [DefaultMaxAge]); the reaper destroys older ones even while they run.
func WithMaxAge(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return invalidOption("max age %v must be positive", d)
		}
		o.maxAge = d
		return nil
	}
}

// WithReapInterval sets how often the reaper runs after the run at Start
// (default [DefaultReapInterval]); 0 runs it only at Start.
func WithReapInterval(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return invalidOption("reap interval %v is negative", d)
		}
		o.reapInterval = d
		return nil
	}
}

// WithOrphanAfter sets how long a node may go without writing its
// heartbeat before its sandbox records count as orphans (default
// [DefaultOrphanAfter], at least [MinOrphanAfter]): a create for such a
// session on another node replaces the record, and any node's reaper
// deletes it. The node writes its own heartbeat every fifth of it. It
// must exceed the clock difference between nodes and any pause a live
// node may take (a NATS outage, a stopped process that will resume);
// the worker of a node that restarts within it keeps its sandboxes.
func WithOrphanAfter(d time.Duration) Option {
	return func(o *options) error {
		if d < MinOrphanAfter {
			return invalidOption("orphan_after %v is below the minimum %v", d, MinOrphanAfter)
		}
		o.orphanAfter = d
		return nil
	}
}

// beatEvery is how often the node writes its heartbeat.
func (o options) beatEvery() time.Duration { return o.orphanAfter / 5 }

// WithClock sets the clock of created_at, last_used_at, expires_at, the
// heartbeats and the reaper's ages (default time.Now). Exec timeouts
// always use the real clock.
func WithClock(now func() time.Time) Option {
	return func(o *options) error {
		if now == nil {
			return invalidOption("nil clock")
		}
		o.now = now
		return nil
	}
}

// WithLogger sets the logger (default: the engine's, with
// worker=sandbox).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return invalidOption("nil logger")
		}
		o.logger = l
		return nil
	}
}
