package sandbox

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/internal/answer"
	"github.com/iii-on-nats/iii/workers/sandbox/fstool"
)

// WorkerName is the name of the module and of its engine worker.
const WorkerName = "sandbox"

// Function ids the worker serves.
const (
	CreateFunction    = "sandbox::create"
	ExecFunction      = "sandbox::exec"
	DestroyFunction   = "sandbox::destroy"
	ListFunction      = "sandbox::list"
	ShellExecFunction = "shell::exec"
)

func init() {
	workers.Register(workers.Module{
		Name:        WorkerName,
		Description: "isolated execution: sandbox::create, ::exec, ::destroy, ::list and shell::exec in bubblewrap sandboxes with cgroup limits",
		New:         func() workers.Worker { return NewWorker() },
	})
}

var (
	_ workers.Worker      = (*Worker)(nil)
	_ workers.Provisioner = (*Worker)(nil)
	_ workers.Closer      = (*Worker)(nil)
)

// Worker serves this node's sandboxes on the engine worker "sandbox".
type Worker struct {
	opts []Option

	eps      workers.Endpoints
	shutdown *workers.Shutdown

	mu       sync.Mutex
	settings []Option
	home     string
	m        *manager
	reaper   *loop
	beat     *loop
}

// NewWorker returns an unstarted worker; opts win over settings.
func NewWorker(opts ...Option) *Worker {
	return &Worker{opts: opts, shutdown: workers.NewShutdown(errShuttingDown)}
}

// Provision reads the module's settings (see the Setting constants; any
// other is an error) and the home, which holds the default root
// <home>/sandboxes.
func (w *Worker) Provision(_ context.Context, env workers.Env) error {
	opts, err := parseSettings(env.Settings[WorkerName], env.Home)
	if err != nil {
		return err
	}
	if _, err := buildOptions(append(opts, w.opts...)); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.settings, w.home = opts, env.Home
	return nil
}

// Start prepares the node (root folder, cgroups, the bubblewrap probe),
// adopts the sandboxes a previous run of this node left, reaps, starts
// the reaper and registers the five functions. It returns [ErrNoRoot]
// without a root, [ErrStarted] when called twice and engine.ErrClosed
// after Close. A node where bubblewrap does not work still starts: it
// logs why and refuses create and exec (unless allow_unsandboxed).
func (w *Worker) Start(ctx context.Context, e *engine.Engine) error {
	started := false
	err := w.eps.Start(ctx, e, WorkerName, "isolated command execution in per-session sandboxes", func() ([]engine.Function, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		var opts []Option
		if w.home != "" {
			opts = append(opts, WithRoot(defaultRoot(w.home, os.Geteuid() == 0)))
		}
		o, err := buildOptions(append(append(opts, w.settings...), w.opts...))
		if err != nil {
			return nil, err
		}
		if o.root == "" {
			return nil, fmt.Errorf("%w: set the %s setting, WithRoot, or the node's home", ErrNoRoot, SettingRoot)
		}
		logger := o.logger
		if logger == nil {
			logger = e.Logger().With("worker", WorkerName)
		}
		kv, err := e.EnsureKV(ctx, BucketConfig(e.Replicas()))
		if err != nil {
			return nil, err
		}
		m := newManager(o, kv, logger)
		if err := m.setup(ctx); err != nil {
			m.abandon()
			return nil, err
		}
		// The heartbeat first: from now on no other node takes this
		// node's records over, and adopting claims them.
		if err := m.beat(ctx); err != nil {
			m.abandon()
			return nil, err
		}
		stale, err := m.loadRecords(ctx)
		if err != nil {
			m.abandon()
			return nil, err
		}
		st, err := m.reap(ctx)
		if err != nil {
			m.abandon()
			return nil, err
		}
		st.StaleRecords = stale
		if !st.zero() {
			logger.Info("sandbox reaper at start", st.logAttrs()...)
		}
		w.m, w.reaper, w.beat = m, m.startReaper(o.reapInterval), m.startBeat()
		started = true
		return w.functions(m, e)
	})
	if err != nil && started {
		w.mu.Lock()
		m, r, b := w.m, w.reaper, w.beat
		w.m, w.reaper, w.beat = nil, nil, nil
		w.mu.Unlock()
		r.Stop()
		b.Stop()
		_ = m.close(ctx)
	}
	return err
}

// Close ends running execs (they answer unavailable), stops the
// endpoints and the reaper. Sandboxes stay (records, workdirs, cgroups):
// the next Start adopts them. The root folder is removed when it holds
// no workdir. Close is idempotent.
func (w *Worker) Close(ctx context.Context) error {
	w.shutdown.Close()
	err := w.eps.Close(ctx, nil)
	w.mu.Lock()
	m, r, b := w.m, w.reaper, w.beat
	w.mu.Unlock()
	if r != nil {
		r.Stop()
	}
	if b != nil {
		// The last heartbeat stays: a node back within orphan_after keeps
		// its sandboxes.
		b.Stop()
	}
	if m != nil {
		if cerr := m.close(ctx); err == nil {
			err = cerr
		}
	}
	return err
}

func (w *Worker) manager() (*manager, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		return nil, wire.Wrap(wire.CodeUnavailable, fmt.Errorf("%w: the sandbox worker is not started", ErrNoSandbox), "")
	}
	return w.m, nil
}

// Workdir returns the workdir of the session's live sandbox on this node
// (the fs tools' root). The error wraps [ErrNoSandbox] (and
// wire.ErrNotFound) when the session has none, [ErrOtherNode] (and
// wire.ErrUnavailable) when it lives on another node.
func (w *Worker) Workdir(ctx context.Context, sessionID string) (string, error) {
	m, err := w.manager()
	if err != nil {
		return "", err
	}
	return m.workdir(ctx, sessionID)
}

// CallerWorkdir is [Worker.Workdir] of the session a call carries in its
// baggage (engine.SessionFromContext): the resolver of tools that work in
// the caller's sandbox.
func (w *Worker) CallerWorkdir(ctx context.Context) (string, error) {
	sid, _ := engine.SessionFromContext(ctx)
	if sid == "" {
		return "", errNoSession
	}
	return w.Workdir(ctx, sid)
}

// FileOwner is the host uid and gid that own the files of this node's
// isolated sandboxes (the sandbox's user on the host: the host_uid
// setting, 65534 by default, or 0 when bubblewrap had to run as root);
// -1, -1 when the node does not run as root (files are the node user's),
// or before Start. Tools that write into a workdir as root should give
// what they create to this owner; the worker also does so before each
// exec.
func (w *Worker) FileOwner() (uid, gid int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		return -1, -1
	}
	return w.m.fileOwner()
}

// Isolation is this node's isolation ("bwrap" or "none") and, for
// "none", why bubblewrap is not used; "" before Start.
func (w *Worker) Isolation() (mode, why string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		return "", ""
	}
	return w.m.isolation, w.m.whyNone
}

var errNoSession = wire.Wrap(wire.CodeNotFound, fmt.Errorf("%w: the call carries no session (baggage %s): tools run in the caller's session sandbox; start the run with sandbox:true",
	ErrNoSandbox, engine.AttrSessionID), "")

// skillFiles holds one skill document per function:
// skills/<id with "::" as "_">.md.
//
//go:embed skills/*.md
var skillFiles embed.FS

func skill(id string) string {
	b, err := skillFiles.ReadFile("skills/" + strings.ReplaceAll(id, "::", "_") + ".md")
	if err != nil {
		return ""
	}
	return string(b)
}

// execTimeout bounds one exec call: the largest wall clock plus the kill.
func (w *Worker) execTimeout(o options) time.Duration {
	return o.max.Wall() + o.killGrace + killDeadline + 5*time.Second
}

func (w *Worker) functions(m *manager, e *engine.Engine) ([]engine.Function, error) {
	// The file tools work in the caller's sandbox workdir, on this node,
	// from the host side. As root they give what they create to the
	// sandbox's user at once (and a replaced file keeps its owner), so a
	// process of the sandbox already running may write it; the owner fix
	// before each exec does the same for everything else.
	// Their answers fit the server's max payload in the caller's codec,
	// read at each call, as an exec's do.
	tools, err := fstool.Functions(w.CallerWorkdir, fstool.WithQuota(m.fsQuota), fstool.WithOwner(m.fileOwner()),
		fstool.WithMaxPayload(e.Conn()))
	if err != nil {
		return nil, err
	}
	own, err := w.ownFunctions(m, e)
	if err != nil {
		return nil, err
	}
	return append(own, tools...), nil
}

func (w *Worker) ownFunctions(m *manager, e *engine.Engine) ([]engine.Function, error) {
	bind := w.shutdown.Bind
	// An exec's answer is fitted to the server's max payload in the
	// caller's codec (fitResult), read at each call: a reconnect may
	// reach a server with another.
	reply := func(r *engine.Request, res Result, err error) (any, error) {
		if err != nil {
			return nil, err
		}
		return fitResult(res, r.Codec, e.Conn().MaxPayload()-answer.Headroom)
	}
	return []engine.Function{
		{
			ID:             CreateFunction,
			Description:    "Create the session's sandbox (or return its live one): a private workdir on this node and resource limits (cpu_seconds, memory_mb, pids, disk_mb, wall_ms). Idempotent.",
			RequestSchema:  createRequestSchema,
			ResponseSchema: sandboxSchema,
			Idempotent:     true,
			Skill:          skill(CreateFunction),
			Handler: engine.Typed(func(ctx context.Context, req CreateRequest) (Sandbox, error) {
				return m.create(ctx, req)
			}),
		},
		{
			ID:             ExecFunction,
			Description:    "Run a command (command via /bin/sh -c, or argv) in the sandbox sandbox_id; answers exit_code, capped stdout/stderr, timed_out. Not idempotent.",
			RequestSchema:  execRequestSchema,
			ResponseSchema: resultSchema,
			Timeout:        w.execTimeout(m.o),
			Skill:          skill(ExecFunction),
			Handler: func(ctx context.Context, r *engine.Request) (any, error) {
				var req ExecRequest
				if err := r.Bind(&req); err != nil {
					return nil, err
				}
				ctx, release := bind(ctx)
				defer release()
				lv, err := m.resolve(ctx, req.SandboxID, "")
				if err != nil {
					return nil, err
				}
				res, err := m.exec(ctx, lv, req.Command)
				return reply(r, res, err)
			},
		},
		{
			ID:             ShellExecFunction,
			Description:    "Run a shell command (or argv) in the caller's session sandbox: the workdir is the only writable folder and persists between calls; network off unless the run asked for it. Answers exit_code, stdout, stderr (capped), timed_out.",
			RequestSchema:  shellExecRequestSchema,
			ResponseSchema: resultSchema,
			Timeout:        w.execTimeout(m.o),
			Skill:          skill(ShellExecFunction),
			Handler: func(ctx context.Context, r *engine.Request) (any, error) {
				var req Command
				if err := r.Bind(&req); err != nil {
					return nil, err
				}
				ctx, release := bind(ctx)
				defer release()
				// The session comes from the call's baggage, never from
				// the arguments: the model writes those.
				sid, _ := engine.SessionFromContext(ctx)
				if sid == "" {
					return nil, errNoSession
				}
				if err := validateSessionID(sid); err != nil {
					return nil, wire.Wrap(wire.CodeNotFound, fmt.Errorf("%w for session %q: %w", ErrNoSandbox, sid, err), "")
				}
				lv, err := m.resolve(ctx, "", sid)
				if err != nil {
					return nil, err
				}
				res, err := m.exec(ctx, lv, req)
				return reply(r, res, err)
			},
		},
		{
			ID:             DestroyFunction,
			Description:    "Destroy a sandbox by sandbox_id or session_id: kill its processes, delete its workdir, cgroups and record. Idempotent ({destroyed:false} when there was none).",
			RequestSchema:  destroyRequestSchema,
			ResponseSchema: destroyResponseSchema,
			Idempotent:     true,
			Timeout:        m.o.killGrace + killDeadline + 30*time.Second,
			Skill:          skill(DestroyFunction),
			Handler: engine.Typed(func(ctx context.Context, req DestroyRequest) (DestroyResponse, error) {
				return m.destroy(ctx, req)
			}),
		},
		{
			ID:             ListFunction,
			Description:    "List the sandboxes of every node (or of session_id) by session_id with their node, workdir, limits and last use; a list cut by the max payload says truncated: ask again with after.",
			RequestSchema:  listRequestSchema,
			ResponseSchema: listResponseSchema,
			Idempotent:     true,
			Skill:          skill(ListFunction),
			// Paged to the server's max payload in the caller's codec.
			Handler: func(ctx context.Context, r *engine.Request) (any, error) {
				var req ListRequest
				if err := r.Bind(&req); err != nil {
					return nil, err
				}
				return m.list(ctx, req, answer.NewPager(r.Codec, e.Conn().MaxPayload()))
			},
		},
	}, nil
}

// SystemRoot holds the sandboxes of a root node whose home the sandbox's
// unprivileged host user cannot pass through (a home under /root).
const SystemRoot = "/var/lib/iii/sandboxes"

// defaultRoot is where a node keeps its sandboxes when the root setting
// is not given: <home>/sandboxes, unless the node runs as root and a
// folder on the way there is closed to other users. bubblewrap, run as
// the unprivileged host user, could not reach the workdirs there (it would
// have to run as root, weaker), so the sandboxes go under [SystemRoot],
// one folder per home.
func defaultRoot(home string, asRoot bool) string {
	root := filepath.Join(home, "sandboxes")
	if !asRoot || searchable(home) {
		return root
	}
	abs, err := filepath.Abs(home)
	if err != nil {
		abs = home
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(SystemRoot, hex.EncodeToString(sum[:6]))
}

// searchable reports whether other users may pass through dir and every
// folder above it (o+x). A folder that does not exist yet counts as
// searchable: the worker creates missing folders 0711.
func searchable(dir string) bool {
	dir = filepath.Clean(dir)
	for {
		if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}
