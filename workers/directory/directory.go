package directory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// skillFileExt ends the name of a skill file in the folder.
const skillFileExt = ".md"

// Directory is the live set of skills, merged from two sources: the
// skills bucket (subjects.SkillsBucket), where workers publish one
// document per function and which it follows with a KV watch, and the
// skills folder ([WithDir]), "<dir>/<worker>/<name>.md", which it polls.
// A folder skill overrides a published skill of the same id: the
// operator's edit wins. Reads ([Directory.Get], [Directory.List],
// [Directory.Index]) are served from memory. A Directory is safe for
// concurrent use.
type Directory struct {
	e      *engine.Engine
	kv     jetstream.KeyValue
	logger *slog.Logger
	dir    string
	poll   time.Duration

	view atomic.Pointer[view]

	mu        sync.Mutex
	published map[string]Skill // by id
	folder    map[string]Skill // by id

	// Owned by the folder scan (Open, then the poll goroutine).
	files     map[string]fileEntry // by path
	badPaths  map[string]struct{}  // paths already warned about
	folderErr string               // the folder read error last logged

	stop      context.CancelFunc
	watchDone chan struct{}
	pollDone  chan struct{}
}

// fileEntry is the last read of a skill file; skill is nil when the file
// was unusable (unreadable, empty, too large), which is not retried until
// the file changes.
type fileEntry struct {
	mod   time.Time
	size  int64
	skill *Skill
}

// view is an immutable snapshot of the merged skills.
type view struct {
	skills []Skill        // sorted by id
	byID   map[string]int // id → index in skills
	index  func() Index   // built once, on first use
}

// Open opens (creating when missing) the skills bucket through e, loads
// its skills and the skills folder, and returns once both are loaded; it
// follows the bucket and polls the folder until [Directory.Close].
func Open(ctx context.Context, e *engine.Engine, opts ...Option) (*Directory, error) {
	if e == nil {
		return nil, fmt.Errorf("%w: nil engine", engine.ErrInvalidOption)
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	kv, err := e.EnsureKV(ctx, engine.SkillsBucketConfig())
	if err != nil {
		return nil, err
	}
	logger := o.logger
	if logger == nil {
		logger = e.Logger().With("worker", WorkerName)
	}
	d := &Directory{
		e: e, kv: kv, logger: logger, dir: o.dir, poll: o.poll,
		published: map[string]Skill{}, folder: map[string]Skill{},
		files: map[string]fileEntry{}, badPaths: map[string]struct{}{},
		watchDone: make(chan struct{}), pollDone: make(chan struct{}),
	}
	d.scanFolder()
	d.rebuild()
	wctx, stop := context.WithCancel(context.Background())
	d.stop = stop
	w, err := engine.WatchKV(wctx, e.Conn(), kv, engine.KVWatchConfig{})
	if err != nil {
		stop()
		return nil, wire.Wrap(wire.CodeUnavailable, err, "watch %s", subjects.SkillsBucket)
	}
	ready := make(chan struct{})
	loadErr := make(chan error, 1)
	go d.follow(wctx, w, o.bucketCheck, ready, loadErr)
	if d.dir != "" {
		go d.pollFolder(wctx)
	} else {
		close(d.pollDone)
	}
	select {
	case <-ready:
		return d, nil
	case <-d.watchDone:
		_ = d.Close(context.Background())
		return nil, wire.Wrap(wire.CodeUnavailable, <-loadErr, "load %s", subjects.SkillsBucket)
	case <-ctx.Done():
		_ = d.Close(context.Background())
		return nil, wire.Wrap(wire.CodeUnavailable, ctx.Err(), "load %s", subjects.SkillsBucket)
	}
}

// Close stops following the bucket and polling the folder, and waits,
// until ctx ends, for both to stop. The skills stay readable. Close is
// idempotent.
func (d *Directory) Close(ctx context.Context) error {
	d.stop()
	for _, done := range []chan struct{}{d.watchDone, d.pollDone} {
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// maxPayload is the largest message the bus carries right now.
func (d *Directory) maxPayload() int64 { return d.e.Conn().MaxPayload() }

// Dir is the skills folder ("" when none is read).
func (d *Directory) Dir() string { return d.dir }

// Get returns the skill id names, plain ("sandbox/fs::read") or as a link
// ("iii://sandbox/fs::read"). A malformed id is invalid_payload, an unknown
// one not_found.
func (d *Directory) Get(id string) (Skill, error) {
	sid, err := ParseID(id)
	if err != nil {
		return Skill{}, invalidWrap(err)
	}
	v := d.view.Load()
	i, ok := v.byID[sid.String()]
	if !ok {
		return Skill{}, wire.Errorf(wire.CodeNotFound, "no skill %s", sid)
	}
	return v.skills[i], nil
}

// List returns the summaries of the skills, sorted by id, of worker and
// of type typ when they are not empty. A filter that is not a valid name
// (letters, digits, '-' and '_') is invalid_payload.
func (d *Directory) List(worker, typ string) ([]Summary, error) {
	if err := validateFilters(worker, typ); err != nil {
		return nil, err
	}
	v := d.view.Load()
	out := []Summary{}
	for _, s := range v.skills {
		if (worker == "" || s.Worker == worker) && (typ == "" || s.Type == typ) {
			out = append(out, s.Summary)
		}
	}
	return out, nil
}

func validateFilters(worker, typ string) error {
	if worker != "" {
		if err := subjects.ValidateID("worker", worker); err != nil {
			return invalidWrap(err)
		}
	}
	if typ != "" {
		if err := subjects.ValidateID("type", typ); err != nil {
			return invalidWrap(err)
		}
	}
	return nil
}

// Index is the skills index: one overview per worker and the whole index
// as one compact markdown document (see [Index]).
func (d *Directory) Index() Index { return d.view.Load().index() }

// rebuild swaps in a new view of published merged with folder (the folder
// wins).
func (d *Directory) rebuild() {
	d.mu.Lock()
	defer d.mu.Unlock()
	merged := maps.Clone(d.published)
	maps.Copy(merged, d.folder)
	skills := slices.SortedFunc(maps.Values(merged), func(a, b Skill) int { return cmp.Compare(a.ID, b.ID) })
	byID := make(map[string]int, len(skills))
	for i, s := range skills {
		byID[s.ID] = i
	}
	d.view.Store(&view{skills: skills, byID: byID, index: sync.OnceValue(func() Index { return buildIndex(skills) })})
}

// follow keeps the published skills equal to the bucket w watches until
// ctx ends (engine.FollowBucket, checking every check): a bucket deleted
// and created again is followed again, and each watch's snapshot replaces
// the published skills; while the bucket is gone they stay. The first
// load closes ready; a first watch that ends before it loads sends why on
// loadErr (then watchDone closes).
func (d *Directory) follow(ctx context.Context, w *engine.KVWatch, check time.Duration, ready chan struct{}, loadErr chan<- error) {
	defer close(d.watchDone)
	var fresh map[string]Skill
	err := engine.FollowBucket(ctx, d.e, w, engine.BucketFollower{
		Name:  "skills",
		Check: check,
		KVMirror: engine.KVMirror{
			Begin: func() { fresh = map[string]Skill{} },
			Entry: func(ent jetstream.KeyValueEntry, live bool) {
				id, sk, ok := d.decode(ent)
				if !ok {
					return
				}
				if !live {
					if sk != nil {
						fresh[id] = *sk
					} else {
						delete(fresh, id)
					}
					return
				}
				d.mu.Lock()
				if sk != nil {
					d.published[id] = *sk
				} else {
					delete(d.published, id)
				}
				d.mu.Unlock()
				d.rebuild()
			},
			Loaded: func(first bool) {
				d.mu.Lock()
				d.published = fresh
				d.mu.Unlock()
				fresh = nil
				d.rebuild()
				if first {
					close(ready)
				}
			},
		},
	})
	if err != nil {
		d.logger.Error("skills watch ended before the skills loaded", "bucket", subjects.SkillsBucket, "error", err)
	}
	loadErr <- err // nil once ctx ended: nobody reads it then
}

// decode reads a bucket entry: ok is false for a key that is not a skill
// key (logged, ignored); sk is nil for a delete, a purge, or a value that
// is empty or too large (logged).
func (d *Directory) decode(ent jetstream.KeyValueEntry) (id string, sk *Skill, ok bool) {
	worker, fn, err := subjects.SkillID(ent.Key())
	if err != nil {
		if ent.Operation() == jetstream.KeyValuePut {
			d.logger.Warn("skill ignored: key is not <worker>/<function>", "bucket", subjects.SkillsBucket, "key", ent.Key(), "error", err)
		}
		return "", nil, false
	}
	sid := ID{Worker: worker, Name: fn}
	if ent.Operation() != jetstream.KeyValuePut {
		return sid.String(), nil, true
	}
	if v := ent.Value(); len(v) == 0 || len(v) > engine.MaxSkillSize {
		d.logger.Warn("skill ignored: size out of range", "skill", sid.String(), "bytes", len(v), "max", engine.MaxSkillSize)
		return sid.String(), nil, true
	}
	s, perr := newSkill(sid, string(ent.Value()), SourcePublished)
	if perr != nil {
		d.logger.Warn("skill partly ignored", "skill", sid.String(), "source", SourcePublished, "error", perr)
	}
	return sid.String(), &s, true
}

// pollFolder re-scans the folder every poll interval until ctx ends.
func (d *Directory) pollFolder(ctx context.Context) {
	defer close(d.pollDone)
	t := time.NewTicker(d.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if d.scanFolder() {
				d.rebuild()
			}
		}
	}
}

// scanFolder reads the folder's layout and re-reads the skill files whose
// modification time or size changed. It reports whether the folder's
// skills changed. A folder that does not exist holds no skills; one that
// cannot be read keeps the skills last read.
func (d *Directory) scanFolder() bool {
	if d.dir == "" {
		return false
	}
	workerDirs, err := os.ReadDir(d.dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		if msg := err.Error(); msg != d.folderErr {
			d.folderErr = msg
			d.logger.Warn("skills folder unreadable; keeping the skills last read", "dir", d.dir, "error", err)
		}
		return false
	}
	d.folderErr = ""
	files := map[string]fileEntry{}
	bad := map[string]struct{}{}
	for _, wd := range workerDirs {
		worker := wd.Name()
		if strings.HasPrefix(worker, ".") {
			continue
		}
		wpath := filepath.Join(d.dir, worker)
		if fi, err := os.Stat(wpath); err != nil || !fi.IsDir() {
			continue // a README or a dangling link beside the worker folders
		}
		if err := subjects.ValidateID("worker", worker); err != nil {
			d.warnPath(bad, wpath, "skills folder entry ignored: not a worker name", err)
			continue
		}
		ents, err := os.ReadDir(wpath)
		if err != nil {
			d.warnPath(bad, wpath, "skills folder entry ignored: unreadable", err)
			continue
		}
		for _, fe := range ents {
			fname := fe.Name()
			if strings.HasPrefix(fname, ".") || !strings.HasSuffix(fname, skillFileExt) {
				continue
			}
			path := filepath.Join(wpath, fname)
			id := ID{Worker: worker, Name: strings.TrimSuffix(fname, skillFileExt)}
			if err := subjects.ValidateFunctionID(id.Name); err != nil {
				d.warnPath(bad, path, "skill file ignored: name is not a function id", err)
				continue
			}
			fi, err := os.Stat(path)
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			if cur, ok := d.files[path]; ok && cur.mod.Equal(fi.ModTime()) && cur.size == fi.Size() {
				files[path] = cur
				continue
			}
			files[path] = d.readFile(path, id, fi)
		}
	}
	changed := !maps.EqualFunc(d.files, files, func(a, b fileEntry) bool {
		return a.mod.Equal(b.mod) && a.size == b.size
	})
	d.files, d.badPaths = files, bad
	if changed {
		folder := make(map[string]Skill, len(files))
		for _, f := range files {
			if f.skill != nil {
				folder[f.skill.ID] = *f.skill
			}
		}
		d.mu.Lock()
		d.folder = folder
		d.mu.Unlock()
	}
	return changed
}

// warnPath logs a folder entry's problem once while it persists.
func (d *Directory) warnPath(bad map[string]struct{}, path, msg string, err error) {
	bad[path] = struct{}{}
	if _, seen := d.badPaths[path]; !seen {
		d.logger.Warn(msg, "path", path, "error", err)
	}
}

// readFile reads one skill file (stamped with fi); problems are logged
// once, since the entry is kept until the file changes.
func (d *Directory) readFile(path string, id ID, fi fs.FileInfo) fileEntry {
	fe := fileEntry{mod: fi.ModTime(), size: fi.Size()}
	data, err := readLimited(path, engine.MaxSkillSize)
	switch {
	case err != nil:
		d.logger.Warn("skill file ignored: unreadable", "path", path, "error", err)
		return fe
	case len(data) == 0 || len(data) > engine.MaxSkillSize:
		d.logger.Warn("skill file ignored: size out of range", "path", path, "bytes", fi.Size(), "max", engine.MaxSkillSize)
		return fe
	}
	s, perr := newSkill(id, string(data), SourceFolder)
	if perr != nil {
		d.logger.Warn("skill partly ignored", "skill", s.ID, "source", SourceFolder, "path", path, "error", perr)
	}
	fe.skill = &s
	return fe
}

// readLimited reads at most max+1 bytes of the file at path, so a caller
// can tell a file over max.
func readLimited(path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, int64(max)+1))
}
