package fstool

import (
	"context"
	"errors"
	"hash/fnv"
	"os"
	"path/filepath"
	"sync"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// Resolver returns the root directory the call may work in: the workdir of
// the caller's session (the lead resolves it from engine.SessionFromContext).
// The root must be an absolute path to an existing directory. A *wire.Error
// it returns reaches the caller as is; any other error becomes not_found.
type Resolver func(ctx context.Context) (root string, err error)

// Quota is asked by fs::write and fs::edit before a write that makes the
// files under root take more disk space, grow bytes more: the new
// content in whole blocks, less the blocks of the file it replaces, plus
// a block per directory it creates. It returns nil to let the write go
// on, or an error to refuse it: a *wire.Error reaches the caller as is
// (the sandbox worker answers forbidden when the write would take the
// workdir past its disk_mb), any other error becomes internal. A refused
// write leaves the disk as it was. Writes that do not grow the root are
// never asked about, so a root over its quota can still be cleaned up.
type Quota func(ctx context.Context, root string, grow int64) error

// FixedRoot is a [Resolver] that answers dir for every call, for tests and
// single-workspace nodes. dir is made absolute when the resolver is made.
func FixedRoot(dir string) Resolver {
	abs, err := filepath.Abs(dir)
	return func(context.Context) (string, error) {
		if err != nil {
			return "", err
		}
		return abs, nil
	}
}

// Functions returns fs::read, fs::write, fs::edit, fs::ls, fs::glob and
// fs::grep, each confined to the root resolve answers for the call. The
// caller registers them on a worker. It fails with [ErrNilResolver]
// without a resolver, and with an error wrapping engine.ErrInvalidOption
// for a bad option.
func Functions(resolve Resolver, opts ...Option) ([]engine.Function, error) {
	if resolve == nil {
		return nil, ErrNilResolver
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	t := &tools{resolve: resolve, o: o, euid: os.Geteuid()}
	for i := range t.growing {
		t.growing[i] = make(chan struct{}, 1)
	}
	fns := []engine.Function{
		{
			ID:             ReadFunction,
			Description:    "Read a text file of the session's working directory, line-numbered like cat -n, from offset for limit lines.",
			RequestSchema:  readRequestSchema,
			ResponseSchema: readResponseSchema,
			Idempotent:     true,
			Skill:          skill(ReadFunction),
			Handler:        fitted(t, t.read, fitRead),
		},
		{
			ID:             WriteFunction,
			Description:    "Create or replace a file of the session's working directory atomically, creating missing parent directories.",
			RequestSchema:  writeRequestSchema,
			ResponseSchema: writeResponseSchema,
			Idempotent:     true,
			Skill:          skill(WriteFunction),
			Handler:        engine.Typed(t.write),
		},
		{
			ID:             EditFunction,
			Description:    "Replace an exact text in a file of the session's working directory: once (it must be unique) or everywhere with replace_all.",
			RequestSchema:  editRequestSchema,
			ResponseSchema: editResponseSchema,
			Skill:          skill(EditFunction),
			Handler:        engine.Typed(t.edit),
		},
		{
			ID:             LsFunction,
			Description:    "List a directory of the session's working directory: name, type, size and modification time of each entry, sorted.",
			RequestSchema:  lsRequestSchema,
			ResponseSchema: lsResponseSchema,
			Idempotent:     true,
			Skill:          skill(LsFunction),
			Handler:        fitted(t, t.ls, fitLs),
		},
		{
			ID:             GlobFunction,
			Description:    "Find files of the session's working directory by glob pattern (** for any depth, {a,b} alternatives), sorted paths.",
			RequestSchema:  globRequestSchema,
			ResponseSchema: globResponseSchema,
			Idempotent:     true,
			Skill:          skill(GlobFunction),
			Handler:        fitted(t, t.glob, fitGlob),
		},
		{
			ID:             GrepFunction,
			Description:    "Search the text files of the session's working directory for an RE2 regular expression; matching lines with path and line number.",
			RequestSchema:  grepRequestSchema,
			ResponseSchema: grepResponseSchema,
			Idempotent:     true,
			Skill:          skill(GrepFunction),
			Handler:        fitted(t, t.grep, fitGrep),
		},
	}
	for i := range fns {
		fns[i].Timeout = o.timeout
	}
	return fns, nil
}

// tools holds what the handlers share: the resolver, the options and the
// locks that serialise writers of one file.
type tools struct {
	resolve Resolver
	o       options
	euid    int // the process's effective uid: 0 gives files owners
	locks   [64]sync.Mutex
	// growing serialises, per root, the writes the quota is asked about,
	// from the question to the rename, so two writes cannot both pass a
	// check that only one of them fits. A channel of one, so a waiter
	// can give up when its caller's time runs out.
	growing [64]chan struct{}
}

// lock serialises fs::write and fs::edit on one file of one root within
// this process, so two edits never lose one another's change. Other
// writers (a shell) are not held off.
func (t *tools) lock(w *workdir, rel string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(w.names[len(w.names)-1]))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(rel))
	mu := &t.locks[h.Sum32()%uint32(len(t.locks))]
	mu.Lock()
	return mu.Unlock
}

// reserve asks the quota, when there is one, about a write that adds
// grow bytes under w's root. Until release is called no other growing
// write of the root passes its own check. A write that does not grow the
// root goes straight on.
func (t *tools) reserve(ctx context.Context, w *workdir, grow int64) (release func(), err error) {
	if t.o.quota == nil || grow <= 0 {
		return func() {}, nil
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(w.names[0]))
	sem := t.growing[h.Sum32()%uint32(len(t.growing))]
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctxErr(ctx)
	}
	release = func() { <-sem }
	if err := t.o.quota(ctx, w.names[0], grow); err != nil {
		release()
		var we *wire.Error
		if errors.As(err, &we) {
			return nil, we
		}
		if e := ctxErr(ctx); e != nil {
			return nil, e
		}
		return nil, wire.Errorf(wire.CodeInternal, "disk quota check: %s", stripPath(err))
	}
	return release, nil
}

// call opens the caller's root, runs fn in it and closes it, turning
// errors into wire errors about rel.
func call[R any](ctx context.Context, t *tools, op, p string, fn func(w *workdir, rel string) (R, error)) (R, error) {
	var zero R
	w, err := open(ctx, t.resolve)
	if err != nil {
		return zero, err
	}
	defer w.close()
	rel, err := w.rel(p)
	if err != nil {
		return zero, err
	}
	res, err := fn(w, rel)
	if err != nil {
		return zero, fsErr(ctx, err, op, rel)
	}
	return res, nil
}
